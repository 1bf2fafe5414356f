// Reading Kueue's queue objects into a ManifestSet (see manifest.h).
#include "fleet_io/manifest.h"

#include "fleet_io/kueue_objects.h"

namespace purser::fleet {

using config::YamlReader;
using Map = YamlReader::Map;
using namespace kueue_objects;  // NOLINT(google-build-using-namespace): this reader's own
                                // vocabulary

namespace {

// Parses a stream of manifests into a ManifestSet.
class StreamParser {
 public:
  explicit StreamParser(std::string file) : file_(std::move(file)) {}

  void document(const YAML::Node& doc, const std::string& path, size_t index) {
    if (isNull(doc)) return;
    ObjectReader o(file_, set_.warnings, doc.Mark());
    o.setLabel(fmt::format("document {}", index));
    YamlReader& r = o.reader();
    Map top = r.map(doc, path);
    if (!top.valid()) {
      o.moveErrorsTo(errors_);
      return;
    }
    std::string api, kind;
    top.required("apiVersion", api);
    top.required("kind", kind);
    if (api.empty() || kind.empty()) {
      o.moveErrorsTo(errors_);
      return;
    }
    // A const lookup of a missing key gives an invalid node: test IsDefined() first.
    const YAML::Node meta = doc["metadata"];
    const YAML::Node name_node = meta.IsDefined() && meta.IsMap() ? meta["name"] : YAML::Node();
    const std::string name =
        name_node.IsDefined() && name_node.IsScalar() ? name_node.Scalar() : std::string();
    o.setLabel(name.empty() ? fmt::format("{} in document {}", kind, index)
                            : fmt::format("{} \"{}\"", kind, name));

    const size_t slash = api.find('/');
    const std::string group = slash == std::string::npos ? "" : api.substr(0, slash);
    const std::string version = slash == std::string::npos ? api : api.substr(slash + 1);
    if (api == "v1" && kind == "List") {
      (void)top.present("metadata");
      const YAML::Node items = top.get("items");
      if (items.IsSequence()) {
        for (size_t i = 0; i < items.size(); ++i) {
          document(items[i], fmt::format("{}[{}]", top.child("items"), i), index);
        }
      } else if (!isNull(items)) {
        r.addError(items, top.child("items"), "expected a list of objects");
      }
      top.finish();
    } else if (api == "v1" && kind == "Namespace") {
      namespaceObject(o, top);
    } else if (group != kGroup) {
      o.warn(o.at(), "", fmt::format("{} is not a fleet object; ignored", api));
      return;
    } else if (contains(kOtherKueueKinds, kind)) {
      o.warn(o.at(), "",
             kind == "Workload"
                 ? "a Workload in a manifest stream is ignored; workloads are submitted one by one"
                 : "this Kueue kind is not supported by Purser; ignored");
      return;
    } else if (!contains(kFleetKinds, kind)) {
      std::vector<std::string> all(kFleetKinds.begin(), kFleetKinds.end());
      all.insert(all.end(), kOtherKueueKinds.begin(), kOtherKueueKinds.end());
      const std::string hint = config::closestMatch(kind, all);
      r.addError(top.get("kind"), top.child("kind"),
                 hint.empty() ? fmt::format("unknown kueue.x-k8s.io kind \"{}\"", kind)
                              : fmt::format("unknown kueue.x-k8s.io kind \"{}\"; did you mean "
                                            "\"{}\"?",
                                            kind, hint));
    } else if (auto v = versionOf(version, kind)) {
      if (kind == "ResourceFlavor") resourceFlavor(o, top);
      if (kind == "Cohort") cohort(o, top, *v);
      if (kind == "ClusterQueue") clusterQueue(o, top, *v);
      if (kind == "LocalQueue") localQueue(o, top);
      if (kind == "WorkloadPriorityClass") priorityClass(o, top);
    } else {
      r.addError(top.get("apiVersion"), top.child("apiVersion"),
                 fmt::format("Purser reads {} as kueue.x-k8s.io/v1beta1 or v1beta2{}, not \"{}\"",
                             kind, kind == "Cohort" ? " (or v1alpha1)" : "", api));
    }
    o.moveErrorsTo(errors_);
  }

  Result<ManifestSet> finish() {
    if (!errors_.empty()) return fail(combine(errors_));
    return std::move(set_);
  }

 private:
  static std::optional<Version> versionOf(const std::string& v, const std::string& kind) {
    if (v == "v1beta1") return Version::kV1beta1;
    if (v == "v1beta2") return Version::kV1beta2;
    if (v == "v1alpha1" && kind == "Cohort") return Version::kV1alpha1;
    return std::nullopt;
  }

  // Records a definition; a second one of the same kind and name is an error.
  void define(ObjectReader& o, Map& top, const std::string& kind, const std::string& name) {
    if (name.empty()) return;
    const YAML::Mark at = keyMark(top, "metadata");
    auto [it, inserted] = defined_.emplace(kind + "/" + name, where(file_, at));
    if (!inserted) {
      o.reader().addError(at, top.child("metadata.name"),
                          fmt::format("defined twice; first at {}", it->second));
    }
  }

  void finishTop(Map& top) {
    (void)top.present("status");  // what the cluster reported; not configuration
    top.finish();
  }

  void namespaceObject(ObjectReader& o, Map& top) {
    const Meta meta = readMeta(o, top, false);
    define(o, top, "Namespace", meta.name);
    (void)top.present("spec");
    finishTop(top);
    auto labels = meta.labels;
    labels[kNameLabel] = meta.name;
    set_.namespaces[meta.name] = std::move(labels);
  }

  void resourceFlavor(ObjectReader& o, Map& top) {
    YamlReader& r = o.reader();
    ResourceFlavor f;
    f.name = readMeta(o, top, false).name;
    define(o, top, "ResourceFlavor", f.name);
    Map spec = top.map("spec");
    if (spec.present("nodeLabels")) {
      f.node_labels = o.stringMap(spec.get("nodeLabels"), spec.child("nodeLabels"));
    }
    if (spec.present("nodeTaints") && !isNull(spec.get("nodeTaints"))) {
      const YAML::Node ts = spec.get("nodeTaints");
      if (!ts.IsSequence()) {
        r.addError(ts, spec.child("nodeTaints"), "expected a list of taints");
      }
      for (size_t i = 0; ts.IsSequence() && i < ts.size(); ++i) {
        Map tm = r.map(ts[i], fmt::format("{}[{}]", spec.child("nodeTaints"), i));
        Taint t;
        tm.required("key", t.key);
        tm.optional("value", t.value);
        tm.requiredChoice("effect", t.effect, {"NoSchedule", "PreferNoSchedule", "NoExecute"});
        (void)tm.present("timeAdded");  // set by the node controller; no meaning here
        tm.finish();
        f.taints.push_back(std::move(t));
      }
    }
    if (spec.present("tolerations")) {
      f.tolerations = o.tolerations(spec.get("tolerations"), spec.child("tolerations"));
    }
    o.unsupported(spec, "topologyName");
    o.unsupported(spec, "resourceWeights");
    spec.finish();
    finishTop(top);
    set_.flavors.push_back(std::move(f));
  }

  // resourceGroups of a ClusterQueue or Cohort. `limits_allowed`: borrowing and lending limits
  // need a cohort (a parent, for a Cohort); `owner` says which field that is.
  std::vector<ResourceGroup> resourceGroups(ObjectReader& o, Map& spec, bool limits_allowed,
                                            std::string_view owner) {
    YamlReader& r = o.reader();
    std::vector<ResourceGroup> out;
    if (!spec.present("resourceGroups") || isNull(spec.get("resourceGroups"))) return out;
    const YAML::Node groups = spec.get("resourceGroups");
    const std::string path = spec.child("resourceGroups");
    if (!groups.IsSequence()) {
      r.addError(groups, path, "expected a list of resource groups");
      return out;
    }
    std::set<std::string> flavors_seen, resources_seen;
    for (size_t i = 0; i < groups.size(); ++i) {
      Map g = r.map(groups[i], fmt::format("{}[{}]", path, i));
      ResourceGroup group;
      if (!g.present("coveredResources")) {
        r.addError(g.node(), g.child("coveredResources"), "required field is missing");
      }
      g.optionalStrings("coveredResources", group.covered);
      if (g.has("coveredResources") && group.covered.empty()) {
        r.addError(g.get("coveredResources"), g.child("coveredResources"),
                   "a resource group covers at least one resource");
      }
      for (const auto& res : group.covered) {
        if (!resources_seen.insert(res).second) {
          r.addError(g.get("coveredResources"), g.child("coveredResources"),
                     fmt::format("resource \"{}\" is covered twice; each resource belongs to one "
                                 "resource group",
                                 res));
        }
      }
      const YAML::Node fl = g.get("flavors");
      if (!fl.IsSequence() || fl.size() == 0) {
        r.addError(isNull(fl) ? g.node() : fl, g.child("flavors"),
                   "expected a non-empty list of flavors");
      }
      for (size_t j = 0; fl.IsSequence() && j < fl.size(); ++j) {
        const std::string fpath = fmt::format("{}[{}]", g.child("flavors"), j);
        Map fm = r.map(fl[j], fpath);
        FlavorQuotas fq;
        fm.required("name", fq.flavor);
        if (!fq.flavor.empty() && !flavors_seen.insert(fq.flavor).second) {
          r.addError(fm.get("name"), fm.child("name"),
                     fmt::format("flavor \"{}\" is listed twice; each flavor belongs to one "
                                 "resource group",
                                 fq.flavor));
        }
        std::vector<std::string> listed;
        const YAML::Node rs = fm.get("resources");
        if (!rs.IsSequence()) {
          r.addError(isNull(rs) ? fm.node() : rs, fm.child("resources"),
                     "expected a list of resource quotas");
        }
        for (size_t k = 0; rs.IsSequence() && k < rs.size(); ++k) {
          Map qm = r.map(rs[k], fmt::format("{}[{}]", fm.child("resources"), k));
          std::string res;
          qm.required("name", res);
          Quota quota;
          if (!qm.present("nominalQuota")) {
            r.addError(qm.node(), qm.child("nominalQuota"), "required field is missing");
          } else {
            quota.nominal = o.amount(qm.get("nominalQuota"), qm.child("nominalQuota")).value_or(0);
          }
          for (const char* limit : {"borrowingLimit", "lendingLimit"}) {
            if (!qm.present(limit) || isNull(qm.get(limit))) continue;
            auto& slot = std::string_view(limit) == "borrowingLimit" ? quota.borrowing_limit
                                                                     : quota.lending_limit;
            slot = o.amount(qm.get(limit), qm.child(limit));
            if (!limits_allowed) {
              r.addError(qm.get(limit), qm.child(limit),
                         fmt::format("{} may only be set together with {}", limit, owner));
            }
          }
          if (quota.lending_limit && *quota.lending_limit > quota.nominal) {
            r.addError(
                qm.get("lendingLimit"), qm.child("lendingLimit"),
                fmt::format("lendingLimit {} exceeds nominalQuota {}",
                            qm.get("lendingLimit").Scalar(), qm.get("nominalQuota").Scalar()));
          }
          qm.finish();
          if (res.empty()) continue;
          if (fq.resources.count(res) != 0) {
            r.addError(qm.get("name"), qm.child("name"),
                       fmt::format("resource \"{}\" is listed twice", res));
          }
          listed.push_back(res);
          fq.resources[res] = quota;
        }
        if (rs.IsSequence() && !group.covered.empty() && listed != group.covered) {
          r.addError(
              rs, fm.child("resources"),
              fmt::format("flavor \"{}\" lists [{}], but the group's coveredResources are "
                          "[{}]; every flavor lists each covered resource, in the same "
                          "order",
                          fq.flavor, fmt::join(listed, ", "), fmt::join(group.covered, ", ")));
        }
        fm.finish();
        group.flavors.push_back(std::move(fq));
      }
      g.finish();
      out.push_back(std::move(group));
    }
    return out;
  }

  std::optional<int64_t> fairWeight(ObjectReader& o, Map& spec) {
    if (!spec.present("fairSharing") || isNull(spec.get("fairSharing"))) return std::nullopt;
    Map fs = spec.map("fairSharing");
    std::optional<int64_t> weight;
    if (fs.present("weight") && !isNull(fs.get("weight"))) {
      weight = o.amount(fs.get("weight"), fs.child("weight"));
    }
    fs.finish();
    return weight;
  }

  void cohort(ObjectReader& o, Map& top, Version v) {
    Cohort c;
    c.name = readMeta(o, top, false).name;
    define(o, top, "Cohort", c.name);
    Map spec = top.map("spec");
    if (v == Version::kV1beta2) {
      spec.optional("parentName", c.parent);
      o.renamed(spec, "parent", "v1beta1", "parentName");
    } else {
      spec.optional("parent", c.parent);
      o.renamed(spec, "parentName", "v1beta2", "parent");
    }
    c.quotas = resourceGroups(o, spec, !c.parent.empty(),
                              v == Version::kV1beta2 ? "spec.parentName" : "spec.parent");
    if (auto w = fairWeight(o, spec)) c.fair_weight_milli = *w;
    spec.finish();
    finishTop(top);
    set_.cohorts.push_back(std::move(c));
  }

  void namespaceSelector(ObjectReader& o, Map& spec, ClusterQueue& cq) {
    YamlReader& r = o.reader();
    if (!spec.present("namespaceSelector") || isNull(spec.get("namespaceSelector"))) {
      // Kueue's nil selector matches nothing: no label value satisfies an empty set.
      cq.namespace_selector = std::map<std::string, std::vector<std::string>>{{kNameLabel, {}}};
      o.warn(o.at(), spec.child("namespaceSelector"),
             "not set, so (as in Kueue) no namespace may submit to this ClusterQueue; set "
             "namespaceSelector: {} to admit every namespace");
      return;
    }
    Map sel = spec.map("namespaceSelector");
    std::map<std::string, std::vector<std::string>> out;
    const auto require = [&](const std::string& key, std::vector<std::string> values) {
      auto [it, inserted] = out.emplace(key, values);
      if (inserted) return;
      std::erase_if(it->second, [&](const std::string& v) { return !contains(values, v); });
    };
    if (sel.present("matchLabels")) {
      for (auto& [k, v] : o.stringMap(sel.get("matchLabels"), sel.child("matchLabels"))) {
        require(k, {v});
      }
    }
    if (sel.present("matchExpressions") && !isNull(sel.get("matchExpressions"))) {
      const YAML::Node exprs = sel.get("matchExpressions");
      if (!exprs.IsSequence()) {
        r.addError(exprs, sel.child("matchExpressions"), "expected a list of expressions");
      }
      for (size_t i = 0; exprs.IsSequence() && i < exprs.size(); ++i) {
        Map e = r.map(exprs[i], fmt::format("{}[{}]", sel.child("matchExpressions"), i));
        std::string key, op;
        std::vector<std::string> values;
        e.required("key", key);
        e.requiredChoice("operator", op, {"In", "NotIn", "Exists", "DoesNotExist"});
        e.optionalStrings("values", values);
        if (op == "In") {
          if (values.empty()) {
            r.addError(e.node(), e.child("values"), "operator In needs at least one value");
          }
          require(key, values);
        } else if (!op.empty()) {
          r.addError(
              e.get("operator"), e.child("operator"),
              fmt::format("operator {} is not supported by Purser; use In or matchLabels", op));
        }
        e.finish();
      }
    }
    sel.finish();
    cq.namespace_selector = std::move(out);
  }

  void preemption(ObjectReader& o, Map& spec, ClusterQueue& cq) {
    if (!spec.present("preemption") || isNull(spec.get("preemption"))) return;
    Map p = spec.map("preemption");
    PreemptionPolicy& pp = cq.preemption;
    o.choice<WithinClusterQueue>(
        p, "withinClusterQueue",
        {{"Never", WithinClusterQueue::kNever},
         {"LowerPriority", WithinClusterQueue::kLowerPriority},
         {"LowerOrNewerEqualPriority", WithinClusterQueue::kLowerOrNewerEqualPriority}},
        pp.within_cluster_queue);
    o.choice<ReclaimWithinCohort>(p, "reclaimWithinCohort",
                                  {{"Never", ReclaimWithinCohort::kNever},
                                   {"LowerPriority", ReclaimWithinCohort::kLowerPriority},
                                   {"Any", ReclaimWithinCohort::kAny}},
                                  pp.reclaim_within_cohort);
    if (p.present("borrowWithinCohort") && !isNull(p.get("borrowWithinCohort"))) {
      Map b = p.map("borrowWithinCohort");
      o.choice<BorrowWithinCohort>(b, "policy",
                                   {{"Never", BorrowWithinCohort::kNever},
                                    {"LowerPriority", BorrowWithinCohort::kLowerPriority}},
                                   pp.borrow_within_cohort);
      if (auto t = o.integer(b, "maxPriorityThreshold", INT32_MIN, INT32_MAX)) {
        pp.max_priority_threshold = static_cast<int32_t>(*t);
      }
      b.finish();
      if (pp.borrow_within_cohort != BorrowWithinCohort::kNever &&
          pp.reclaim_within_cohort == ReclaimWithinCohort::kNever) {
        o.reader().addError(b.node(), b.child("policy"),
                            "borrowWithinCohort needs reclaimWithinCohort other than Never");
      }
    }
    p.finish();
  }

  void fungibility(ObjectReader& o, Map& spec, ClusterQueue& cq, Version v) {
    if (!spec.present("flavorFungibility") || isNull(spec.get("flavorFungibility"))) return;
    Map f = spec.map("flavorFungibility");
    FlavorFungibility& ff = cq.fungibility;
    std::vector<std::pair<std::string, WhenCanBorrow>> borrow = {
        {"MayStopSearch", WhenCanBorrow::kMayStopSearch},
        {"TryNextFlavor", WhenCanBorrow::kTryNextFlavor}};
    std::vector<std::pair<std::string, WhenCanPreempt>> preempt = {
        {"MayStopSearch", WhenCanPreempt::kMayStopSearch},
        {"TryNextFlavor", WhenCanPreempt::kTryNextFlavor}};
    if (v == Version::kV1beta1) {  // v1beta1's deprecated names for MayStopSearch
      borrow.emplace_back("Borrow", WhenCanBorrow::kMayStopSearch);
      preempt.emplace_back("Preempt", WhenCanPreempt::kMayStopSearch);
    }
    o.choice<WhenCanBorrow>(f, "whenCanBorrow", borrow, ff.when_can_borrow);
    o.choice<WhenCanPreempt>(f, "whenCanPreempt", preempt, ff.when_can_preempt);
    o.choice<FungibilityPreference>(
        f, "preference",
        {{"BorrowingOverPreemption", FungibilityPreference::kBorrowingOverPreemption},
         {"PreemptionOverBorrowing", FungibilityPreference::kPreemptionOverBorrowing}},
        ff.preference);
    if (ff.preference != FungibilityPreference::kNone &&
        (ff.when_can_borrow != WhenCanBorrow::kTryNextFlavor ||
         ff.when_can_preempt != WhenCanPreempt::kTryNextFlavor)) {
      o.reader().addError(f.get("preference"), f.child("preference"),
                          "preference needs whenCanBorrow and whenCanPreempt both TryNextFlavor");
    }
    f.finish();
  }

  void clusterQueue(ObjectReader& o, Map& top, Version v) {
    ClusterQueue cq;
    cq.name = readMeta(o, top, false).name;
    define(o, top, "ClusterQueue", cq.name);
    Map spec = top.map("spec");
    const bool beta1 = v == Version::kV1beta1;
    spec.optional(beta1 ? "cohort" : "cohortName", cq.cohort);
    if (beta1) {
      o.renamed(spec, "cohortName", "v1beta2", "cohort");
    } else {
      o.renamed(spec, "cohort", "v1beta1", "cohortName");
    }
    o.choice<QueueingStrategy>(spec, "queueingStrategy",
                               {{"BestEffortFIFO", QueueingStrategy::kBestEffortFifo},
                                {"StrictFIFO", QueueingStrategy::kStrictFifo}},
                               cq.strategy);
    namespaceSelector(o, spec, cq);
    preemption(o, spec, cq);
    fungibility(o, spec, cq, v);
    cq.resource_groups =
        resourceGroups(o, spec, !cq.cohort.empty(), beta1 ? "spec.cohort" : "spec.cohortName");
    if (auto w = fairWeight(o, spec)) cq.fair_weight_milli = *w;
    o.choice<StopPolicy>(spec, "stopPolicy",
                         {{"None", StopPolicy::kNone},
                          {"Hold", StopPolicy::kHold},
                          {"HoldAndDrain", StopPolicy::kHoldAndDrain}},
                         cq.stop_policy);
    if (beta1) o.unsupported(spec, "admissionChecks");
    for (const char* key : {"admissionChecksStrategy", "admissionScope", "excludeResourcePrefixes",
                            "concurrentAdmissionPolicy"}) {
      o.unsupported(spec, key);
    }
    spec.finish();
    finishTop(top);
    set_.cluster_queues.push_back(std::move(cq));
  }

  void localQueue(ObjectReader& o, Map& top) {
    LocalQueue lq;
    const Meta meta = readMeta(o, top, true);
    lq.name = meta.name;
    lq.namespace_ = meta.namespace_;
    if (!lq.name.empty()) define(o, top, "LocalQueue", lq.namespace_ + "/" + lq.name);
    Map spec = top.map("spec");
    if (!top.has("spec")) {
      o.reader().addError(top.node(), spec.child("clusterQueue"), "required field is missing");
    } else {
      spec.required("clusterQueue", lq.cluster_queue);
    }
    StopPolicy stop = StopPolicy::kNone;
    o.choice<StopPolicy>(spec, "stopPolicy",
                         {{"None", StopPolicy::kNone},
                          {"Hold", StopPolicy::kHold},
                          {"HoldAndDrain", StopPolicy::kHoldAndDrain}},
                         stop);
    if (stop != StopPolicy::kNone) {
      o.warn(keyMark(spec, "stopPolicy"), spec.child("stopPolicy"),
             "a LocalQueue's stopPolicy is not supported by Purser; ignored");
    }
    o.unsupported(spec, "fairSharing");
    o.unsupported(spec, "wallTimePolicy");
    spec.finish();
    finishTop(top);
    set_.local_queues.push_back(std::move(lq));
  }

  void priorityClass(ObjectReader& o, Map& top) {
    WorkloadPriorityClass pc;
    pc.name = readMeta(o, top, false).name;
    define(o, top, "WorkloadPriorityClass", pc.name);
    if (!top.present("value")) {
      o.reader().addError(top.node(), top.child("value"), "required field is missing");
    } else if (auto v = o.integer(top, "value", INT32_MIN, INT32_MAX)) {
      pc.value = static_cast<int32_t>(*v);
    }
    std::string description;
    top.optional("description", description);
    finishTop(top);
    set_.priority_classes.push_back(std::move(pc));
  }

  std::string file_;
  ManifestSet set_;
  std::vector<Error> errors_;
  std::map<std::string, std::string> defined_;  // "Kind/name" -> where first defined
};

}  // namespace

Result<ManifestSet> parseManifests(const std::string& yaml, const std::string& file_name,
                                   size_t max_nesting) {
  const std::vector<YAML::Node> docs =
      PURSER_TRY_VALUE(config::parseYamlStream(yaml, file_name, max_nesting));
  StreamParser parser(file_name);
  for (size_t i = 0; i < docs.size(); ++i) parser.document(docs[i], "", i + 1);
  return parser.finish();
}

World toWorld(ManifestSet set) {
  World w;
  w.flavors = std::move(set.flavors);
  w.namespaces = std::move(set.namespaces);
  w.cohorts = std::move(set.cohorts);
  w.cluster_queues = std::move(set.cluster_queues);
  w.local_queues = std::move(set.local_queues);
  w.priority_classes = std::move(set.priority_classes);
  return w;
}

}  // namespace purser::fleet
