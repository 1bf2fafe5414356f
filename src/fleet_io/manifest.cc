// Reading Kueue manifests and workloads (see manifest.h).
#include "fleet_io/manifest.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <charconv>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <type_traits>
#include <utility>

#include "common/clock.h"
#include "common/json.h"
#include "common/quantity.h"
#include "config/yaml_reader.h"
#include "fleet_io/yaml_fields.h"

namespace purser::fleet {

using config::YamlReader;
using Map = YamlReader::Map;

namespace {

constexpr std::string_view kGroup = "kueue.x-k8s.io";
constexpr char kNameLabel[] = "kubernetes.io/metadata.name";
constexpr char kQueueLabel[] = "kueue.x-k8s.io/queue-name";
constexpr char kPriorityClassLabel[] = "kueue.x-k8s.io/priority-class";
constexpr char kMinParallelismAnnotation[] = "kueue.x-k8s.io/job-min-parallelism";
constexpr char kMaxExecLabel[] = "kueue.x-k8s.io/max-exec-time-seconds";
constexpr int64_t kMaxExecSeconds = int64_t{366} * 24 * 3600;  // a year: longer is a mistake
constexpr char kServeAnnotation[] = "purser.dev/serve";
constexpr char kDefaultNamespace[] = "default";
constexpr char kIgnored[] = "not supported by Purser; ignored";

enum class Version { kV1alpha1, kV1beta1, kV1beta2 };

// The kinds Purser reads, and Kueue's other kinds (reported, then skipped).
constexpr std::array<std::string_view, 5> kFleetKinds = {"ResourceFlavor", "Cohort", "ClusterQueue",
                                                         "LocalQueue", "WorkloadPriorityClass"};
constexpr std::array<std::string_view, 7> kOtherKueueKinds = {
    "AdmissionCheck",   "DynamicResourceAllocationConfig", "MultiKueueCluster",
    "MultiKueueConfig", "ProvisioningRequestConfig",       "Topology",
    "Workload"};

bool isNull(const YAML::Node& n) { return !n.IsDefined() || n.IsNull(); }

template <typename Range>
bool contains(const Range& range, std::string_view s) {
  return std::find(range.begin(), range.end(), s) != range.end();
}

std::string where(const std::string& file, const YAML::Mark& at) {
  if (at.is_null() || at.line < 0) return file;
  return fmt::format("{}:{}:{}", file, at.line + 1, at.column + 1);
}

YAML::Mark keyMark(const Map& m, const std::string& key) {
  for (auto it = m.node().begin(); it != m.node().end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->first.Mark();
  }
  return m.node().Mark();
}

// A URL path as RFC 3986 has it (pchar and "/"), starting with "/", at most 256 bytes.
bool isUrlPath(const std::string& p) {
  if (p.empty() || p[0] != '/' || p.starts_with("//") || p.size() > 256) return false;
  return std::all_of(p.begin(), p.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("-._~!$&'()*+,;=:@%/").find(c) != std::string_view::npos;
  });
}

Error combine(const std::vector<Error>& errors) {
  if (errors.size() == 1) return errors.front();
  std::string message = fmt::format("{} errors:", errors.size());
  for (const auto& e : errors) message += "\n  " + e.toString();
  return invalidArgument(std::move(message));
}

bool addChecked(Amount& into, Amount v) { return !__builtin_add_overflow(into, v, &into); }

// One object of a stream: its own YamlReader, so that its errors can name the object once its
// name is known, and the stream's shared list of warnings.
class ObjectReader {
 public:
  ObjectReader(const std::string& file, std::vector<std::string>& warnings, YAML::Mark at)
      : r_(file), warnings_(warnings), at_(at) {}

  YamlReader& reader() { return r_; }
  void setLabel(std::string label) { label_ = std::move(label); }
  const YAML::Mark& at() const { return at_; }

  void moveErrorsTo(std::vector<Error>& out) const {
    for (Error e : r_.errors()) {
      e.message = fmt::format("{}: {}", label_, e.message);
      out.push_back(std::move(e));
    }
  }

  void warn(const YAML::Mark& at, const std::string& path, std::string_view message) {
    warnings_.push_back(
        path.empty() ? fmt::format("{}: {}: {}", where(r_.file(), at), label_, message)
                     : fmt::format("{}: {}: {}: {}", where(r_.file(), at), label_, path, message));
  }

  // A known Kueue field Purser does not implement: accepted, and reported.
  void unsupported(Map& m, const std::string& key, std::string_view message = kIgnored) {
    if (!m.present(key) || isNull(m.get(key))) return;
    warn(keyMark(m, key), m.child(key), message);
  }

  // A field under the other API version's name (cohort vs cohortName).
  void renamed(Map& m, const std::string& key, std::string_view version,
               const std::string& name_here) {
    if (!m.present(key)) return;
    r_.addError(keyMark(m, key), m.child(key),
                fmt::format("this is the field's name in kueue.x-k8s.io/{}; this apiVersion calls "
                            "it \"{}\"",
                            version, name_here));
  }

  template <typename T>
  void choice(Map& m, const std::string& key,
              const std::vector<std::pair<std::string, std::type_identity_t<T>>>& table, T& out) {
    if (!m.present(key) || isNull(m.get(key))) return;
    const YAML::Node n = m.get(key);
    auto s = r_.asString(n, m.child(key));
    if (!s) return;
    std::vector<std::string> names;
    for (const auto& [name, value] : table) {
      if (*s == name) {
        out = value;
        return;
      }
      names.push_back(name);
    }
    r_.addError(n, m.child(key),
                fmt::format("expected one of {}, got \"{}\"", fmt::join(names, ", "), *s));
  }

  std::optional<int64_t> integer(Map& m, const std::string& key, int64_t min, int64_t max) {
    if (!m.present(key) || isNull(m.get(key))) return std::nullopt;
    return r_.asInt(m.get(key), m.child(key), min, max);
  }

  // A Kubernetes quantity as milli-units; never negative; `whole` for extended resources.
  std::optional<Amount> amount(const YAML::Node& n, const std::string& path, bool whole = false) {
    return readAmount(r_, n, path, whole);
  }

  // A ResourceList: resource name -> quantity (extended resources whole, as in Kubernetes).
  Resources resourceList(const YAML::Node& n, const std::string& path) {
    return readResources(r_, n, path, /*whole_extended=*/true);
  }

  std::map<std::string, std::string> stringMap(const YAML::Node& n, const std::string& path) {
    std::map<std::string, std::string> out;
    if (isNull(n)) return out;
    if (!n.IsMap()) {
      r_.addError(n, path, fmt::format("expected a mapping of strings, got {}", describeNode(n)));
      return out;
    }
    for (const auto& kv : n) {
      if (auto v = r_.asString(kv.second, path + "." + kv.first.Scalar())) {
        out[kv.first.Scalar()] = *v;
      }
    }
    return out;
  }

  std::vector<Toleration> tolerations(const YAML::Node& n, const std::string& path) {
    return readTolerations(r_, n, path, [this](Map& m) { unsupported(m, "tolerationSeconds"); });
  }

 private:
  YamlReader r_;
  std::vector<std::string>& warnings_;
  YAML::Mark at_;
  std::string label_;
};

struct Meta {
  std::string name;
  std::string namespace_;
  bool namespace_given = false;  // false: the default namespace stands in
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::string uid;
  std::optional<int64_t> created_ms;
};

// metadata: the name (and namespace) are read; the rest is Kubernetes bookkeeping (uid,
// resourceVersion, managedFields, annotations, ...) and passes unread.
Meta readMeta(ObjectReader& o, Map& top, bool namespaced) {
  YamlReader& r = o.reader();
  Meta meta;
  if (!top.present("metadata")) {
    r.addError(top.node(), top.child("metadata.name"), "required field is missing");
    return meta;
  }
  Map m = top.map("metadata");
  m.required("name", meta.name);
  if (!meta.name.empty() && !isDnsSubdomain(meta.name)) {
    r.addError(m.get("name"), m.child("name"),
               fmt::format("\"{}\" is not a valid name: use lower-case letters, digits, '-' and "
                           "'.', starting and ending with a letter or digit",
                           meta.name));
  }
  if (namespaced) {
    meta.namespace_ = kDefaultNamespace;
    meta.namespace_given = m.has("namespace");
    m.optional("namespace", meta.namespace_);
    if (!isDnsLabel(meta.namespace_)) {
      r.addError(m.get("namespace"), m.child("namespace"),
                 fmt::format("\"{}\" is not a valid namespace", meta.namespace_));
    }
  }
  if (m.present("labels")) meta.labels = o.stringMap(m.get("labels"), m.child("labels"));
  if (m.present("annotations")) {
    meta.annotations = o.stringMap(m.get("annotations"), m.child("annotations"));
  }
  m.optional("uid", meta.uid);
  if (m.present("creationTimestamp") && !isNull(m.get("creationTimestamp"))) {
    const YAML::Node n = m.get("creationTimestamp");
    Result<SystemTime> t = fail(invalidArgument("not a string"));
    if (n.IsScalar()) t = parseRfc3339(n.Scalar());
    if (t) {
      meta.created_ms = unixMillis(*t);
    } else {
      r.addError(n, m.child("creationTimestamp"),
                 fmt::format("expected an RFC 3339 time, got {}", describeNode(n)));
    }
  }
  return meta;
}

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

// --- Workloads ----------------------------------------------------------------------------------

class WorkloadParser {
 public:
  explicit WorkloadParser(ObjectReader& o) : o_(o), r_(o.reader()) {}

  // Kueue's Workload object.
  Workload kueue(Map& top) {
    Workload w;
    std::string api, kind;
    top.required("apiVersion", api);
    top.required("kind", kind);
    if (!kind.empty() && kind != "Workload") {
      r_.addError(top.get("kind"), top.child("kind"),
                  fmt::format("expected a Workload, got \"{}\"", kind));
    }
    std::optional<Version> v;
    if (api == "kueue.x-k8s.io/v1beta1") v = Version::kV1beta1;
    if (api == "kueue.x-k8s.io/v1beta2") v = Version::kV1beta2;
    if (!api.empty() && !v) {
      r_.addError(top.get("apiVersion"), top.child("apiVersion"),
                  fmt::format("expected kueue.x-k8s.io/v1beta1 or v1beta2, got \"{}\"", api));
    }
    const Meta meta = identity(top, w);
    serveAnnotation(meta, top, w);

    Map spec = top.map("spec");
    spec.optional("queueName", w.local_queue);
    if (w.local_queue.empty() && meta.labels.count(kQueueLabel) != 0) {
      w.local_queue = meta.labels.at(kQueueLabel);
    }
    std::optional<int64_t> priority = o_.integer(spec, "priority", INT32_MIN, INT32_MAX);
    if (priority) w.priority = static_cast<int32_t>(*priority);
    // Purser knows WorkloadPriorityClasses; a pod PriorityClass contributes spec.priority only.
    std::string class_name;
    bool workload_class = false;
    if (v == Version::kV1beta2) {
      if (spec.present("priorityClassRef") && !isNull(spec.get("priorityClassRef"))) {
        Map ref = spec.map("priorityClassRef");
        std::string group, ref_kind;
        ref.requiredChoice("group", group, {"kueue.x-k8s.io", "scheduling.k8s.io"});
        ref.requiredChoice("kind", ref_kind, {"WorkloadPriorityClass", "PriorityClass"});
        ref.required("name", class_name);
        ref.finish();
        workload_class = ref_kind == "WorkloadPriorityClass";
      }
      o_.renamed(spec, "priorityClassName", "v1beta1", "priorityClassRef");
    } else {
      spec.optional("priorityClassName", class_name);
      std::string source;
      spec.optionalChoice(
          "priorityClassSource", source,
          {"", "kueue.x-k8s.io/workloadpriorityclass", "scheduling.k8s.io/priorityclass"});
      workload_class = source == "kueue.x-k8s.io/workloadpriorityclass";
    }
    if (workload_class) {
      w.priority_class = class_name;
    } else if (!class_name.empty()) {
      o_.warn(o_.at(), spec.child("priority"),
              fmt::format("pod PriorityClass \"{}\" is not known to Purser; the workload's "
                          "priority is spec.priority ({})",
                          class_name, w.priority));
    }
    bool active = true;
    spec.optional("active", active);
    if (!active) {
      r_.addError(spec.get("active"), spec.child("active"),
                  "an inactive Workload cannot be submitted to Purser");
    }
    if (auto m = o_.integer(spec, "maximumExecutionTimeSeconds", 1, kMaxExecSeconds)) {
      w.max_execution_seconds = *m;
    }
    if (!spec.present("podSets")) {
      r_.addError(spec.node().IsDefined() ? spec.node() : top.node(), spec.child("podSets"),
                  "required field is missing");
    } else {
      w.pod_sets = kueuePodSets(spec.get("podSets"), spec.child("podSets"));
    }
    spec.finish();
    (void)top.present("status");
    top.finish();
    return w;
  }

  // A batch/v1 Job, as Kueue's job integration sees one: a single pod set "main" of
  // min(parallelism, completions) pods (parallelism defaults to 1, as Kubernetes defaults it),
  // per-pod requests from the pod template; the queue from the kueue.x-k8s.io/queue-name label, a
  // WorkloadPriorityClass from the kueue.x-k8s.io/priority-class label, and partial admission
  // down to the kueue.x-k8s.io/job-min-parallelism annotation. The rest of the Job (backoff,
  // completion mode, deadlines, ...) is for whatever runs it.
  // What a Job, a JobSet and a PyTorchJob share: the API version, the identity, the served
  // model, the queue and priority-class labels.
  Meta jobHeader(Map& top, Workload& w, const std::string& expected_api, const char* what) {
    std::string api, kind;
    top.required("apiVersion", api);
    top.required("kind", kind);
    if (api != expected_api) {
      r_.addError(top.get("apiVersion"), top.child("apiVersion"),
                  fmt::format("a {} is {}, got \"{}\"", what, expected_api, api));
    }
    Meta meta = identity(top, w);
    serveAnnotation(meta, top, w);
    if (auto q = meta.labels.find(kQueueLabel); q != meta.labels.end()) w.local_queue = q->second;
    if (w.local_queue.empty()) {
      r_.addError(top.get("metadata"), "metadata.labels",
                  fmt::format("a {} is queued by its \"{}\" label, naming a LocalQueue of its "
                              "namespace; add it to metadata.labels",
                              what, kQueueLabel));
    }
    if (auto c = meta.labels.find(kPriorityClassLabel); c != meta.labels.end()) {
      w.priority_class = c->second;
    }
    if (auto m = meta.labels.find(kMaxExecLabel); m != meta.labels.end()) {
      int64_t seconds = 0;
      const auto [end, ec] =
          std::from_chars(m->second.data(), m->second.data() + m->second.size(), seconds);
      if (ec != std::errc() || end != m->second.data() + m->second.size() || seconds < 1 ||
          seconds > kMaxExecSeconds) {
        r_.addError(top.get("metadata"), "metadata.labels",
                    fmt::format("\"{}\" must be a whole number of seconds from 1 to {}, got \"{}\"",
                                kMaxExecLabel, kMaxExecSeconds, m->second));
      } else {
        w.max_execution_seconds = seconds;
      }
    }
    return meta;
  }

  // A pod template ({metadata, spec}) into `ps`: requests, scheduling and what the pod runs.
  void podTemplate(Map& t, PodSet& ps, const Workload& w) {
    if (t.present("metadata")) templateAnnotations(t.get("metadata"), t.child("metadata"), ps);
    Map pod = t.map("spec");
    std::string pod_class;
    pod.optional("priorityClassName", pod_class);
    if (!pod_class.empty() && w.priority_class.empty()) {
      o_.warn(keyMark(pod, "priorityClassName"), pod.child("priorityClassName"),
              fmt::format("pod PriorityClass \"{}\" is not known to Purser; give the workload a "
                          "WorkloadPriorityClass with the \"{}\" label",
                          pod_class, kPriorityClassLabel));
    }
    podSpec(pod, ps);
    t.finish();
  }

  // A JobSet (jobset.x-k8s.io/v1alpha2), as Kueue's JobSet integration sees one: a pod set per
  // replicated Job, named as it is, of replicas × min(parallelism, completions) pods.
  Workload jobSet(Map& top) {
    Workload w;
    jobHeader(top, w, "jobset.x-k8s.io/v1alpha2", "JobSet");
    Map spec = top.map("spec");
    const YAML::Node list = spec.get("replicatedJobs");
    const std::string path = spec.child("replicatedJobs");
    if (!list.IsSequence() || list.size() == 0) {
      r_.addError(isNull(list) ? spec.node() : list, path, "expected a non-empty list");
    }
    for (size_t i = 0; list.IsSequence() && i < list.size(); ++i) {
      Map rj = r_.map(list[i], fmt::format("{}[{}]", path, i));
      PodSet ps;
      rj.required("name", ps.name);
      int64_t replicas = 1;
      if (auto r = o_.integer(rj, "replicas", 0, 1'000'000)) replicas = *r;
      Map jt = rj.map("template");
      (void)jt.present("metadata");
      Map js = jt.map("spec");
      int64_t per_job = 1;
      if (auto p = o_.integer(js, "parallelism", 0, INT32_MAX)) per_job = *p;
      if (auto c = o_.integer(js, "completions", 0, INT32_MAX); c && *c < per_job) per_job = *c;
      ps.count = replicas * per_job;
      Map t = js.map("template");
      podTemplate(t, ps, w);
      for (const char* runner : {"backoffLimit", "completionMode", "activeDeadlineSeconds",
                                 "ttlSecondsAfterFinished", "podFailurePolicy", "suspend"}) {
        (void)js.present(runner);
      }
      js.finish();
      jt.finish();
      rj.finish();
      addPodSet(w.pod_sets, std::move(ps), rj);
    }
    for (const char* runner : {"network", "successPolicy", "failurePolicy", "startupPolicy",
                               "suspend", "coordinator", "managedBy", "ttlSecondsAfterFinished"}) {
      (void)spec.present(runner);
    }
    spec.finish();
    (void)top.present("status");
    top.finish();
    return w;
  }

  // A Kubeflow PyTorchJob (kubeflow.org/v1), as Kueue's integration sees one: a pod set per
  // replica type, named in lower case ("master", "worker"), of its replicas (default 1).
  Workload pytorchJob(Map& top) {
    Workload w;
    jobHeader(top, w, "kubeflow.org/v1", "PyTorchJob");
    Map spec = top.map("spec");
    const YAML::Node specs = spec.get("pytorchReplicaSpecs");
    const std::string path = spec.child("pytorchReplicaSpecs");
    if (!specs.IsMap() || specs.size() == 0) {
      r_.addError(isNull(specs) ? spec.node() : specs, path,
                  "expected replica specs such as Master and Worker");
    }
    for (auto it = specs.IsMap() ? specs.begin() : YAML::const_iterator();
         specs.IsMap() && it != specs.end(); ++it) {
      const std::string type = it->first.IsScalar() ? it->first.Scalar() : std::string();
      Map rs = r_.map(it->second, path + "." + type);
      PodSet ps;
      ps.name = type;
      std::transform(ps.name.begin(), ps.name.end(), ps.name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      ps.count = 1;
      if (auto r = o_.integer(rs, "replicas", 0, 1'000'000)) ps.count = *r;
      (void)rs.present("restartPolicy");
      Map t = rs.map("template");
      podTemplate(t, ps, w);
      rs.finish();
      addPodSet(w.pod_sets, std::move(ps), rs);
    }
    for (const char* runner : {"runPolicy", "elasticPolicy", "nprocPerNode"}) {
      (void)spec.present(runner);
    }
    spec.finish();
    (void)top.present("status");
    top.finish();
    return w;
  }

  Workload job(Map& top) {
    Workload w;
    const Meta meta = jobHeader(top, w, "batch/v1", "Job");
    Map spec = top.map("spec");
    int64_t parallelism = 1;
    if (auto p = o_.integer(spec, "parallelism", 0, INT32_MAX)) parallelism = *p;
    PodSet ps;
    ps.name = "main";  // Kueue's name for a Job's only pod set
    ps.count = parallelism;
    if (auto c = o_.integer(spec, "completions", 0, INT32_MAX); c && *c < ps.count) ps.count = *c;
    if (auto a = meta.annotations.find(kMinParallelismAnnotation); a != meta.annotations.end()) {
      int64_t least = 0;
      const auto [end, ec] =
          std::from_chars(a->second.data(), a->second.data() + a->second.size(), least);
      if (ec != std::errc() || end != a->second.data() + a->second.size() || least < 1 ||
          least > ps.count) {
        r_.addError(top.get("metadata"), "metadata.annotations",
                    fmt::format("\"{}\" must be a whole number from 1 to the Job's {} pods, got "
                                "\"{}\"",
                                kMinParallelismAnnotation, ps.count, a->second));
      } else if (least < ps.count) {
        ps.min_count = least;
      }
    }
    if (!spec.present("template")) {
      r_.addError(spec.node().IsDefined() ? spec.node() : top.node(), spec.child("template"),
                  "required field is missing");
    } else {
      Map t = spec.map("template");
      podTemplate(t, ps, w);
    }
    // A deadline of the Job's own bounds each run too (the shorter of it and Kueue's label).
    if (auto d = o_.integer(spec, "activeDeadlineSeconds", 1, kMaxExecSeconds)) {
      if (w.max_execution_seconds == 0 || *d < w.max_execution_seconds) {
        w.max_execution_seconds = *d;
      }
    }
    for (const char* runner :
         {"suspend", "backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes",
          "ttlSecondsAfterFinished", "completionMode", "podFailurePolicy", "successPolicy",
          "manualSelector", "selector", "podReplacementPolicy", "managedBy"}) {
      (void)spec.present(runner);  // for whatever runs the Job, not for admission
    }
    spec.finish();
    (void)top.present("status");
    top.finish();
    w.pod_sets.push_back(std::move(ps));
    return w;
  }

  // Purser's short form.
  Workload shortForm(Map& top) {
    Workload w;
    std::string name, ns = kDefaultNamespace;
    top.required("name", name);
    namespace_given_ = top.has("namespace");
    top.optional("namespace", ns);
    if (!name.empty() && !isDnsSubdomain(name)) {
      r_.addError(top.get("name"), top.child("name"),
                  fmt::format("\"{}\" is not a valid name", name));
    }
    if (!isDnsLabel(ns)) {
      r_.addError(top.get("namespace"), top.child("namespace"),
                  fmt::format("\"{}\" is not a valid namespace", ns));
    }
    setName(w, name, ns);
    top.required("queue", w.local_queue);
    top.optional("priority_class", w.priority_class);
    if (auto m = o_.integer(top, "max_execution_seconds", 1, kMaxExecSeconds)) {
      w.max_execution_seconds = *m;
    }
    if (auto p = o_.integer(top, "priority", INT32_MIN, INT32_MAX)) {
      w.priority = static_cast<int32_t>(*p);
    }
    const YAML::Node sets = top.get("pod_sets");
    const std::string path = top.child("pod_sets");
    if (!sets.IsSequence() || sets.size() == 0) {
      r_.addError(isNull(sets) ? top.node() : sets, path, "expected a non-empty list of pod sets");
    }
    for (size_t i = 0; sets.IsSequence() && i < sets.size(); ++i) {
      Map m = r_.map(sets[i], fmt::format("{}[{}]", path, i));
      PodSet ps;
      m.required("name", ps.name);
      counts(m, "count", "min_count", ps);
      if (m.present("requests"))
        ps.requests = o_.resourceList(m.get("requests"), m.child("requests"));
      if (m.present("limits")) {
        ps.limits = o_.resourceList(m.get("limits"), m.child("limits"));
        for (const auto& [name, v] : ps.limits) ps.requests.emplace(name, v);  // as Kueue does
      }
      if (m.present("tolerations")) {
        ps.tolerations = o_.tolerations(m.get("tolerations"), m.child("tolerations"));
      }
      if (m.present("node_selector")) {
        ps.node_selector = o_.stringMap(m.get("node_selector"), m.child("node_selector"));
      }
      if (m.present("topology")) topology(m.map("topology"), ps);
      m.optionalStrings("use_gpu_types", ps.use_gpu_types);
      m.optionalStrings("nouse_gpu_types", ps.nouse_gpu_types);
      m.optionalStrings("command", ps.command);
      m.optional("working_dir", ps.working_dir);
      m.optional("image", ps.image);
      if (m.present("env")) ps.env = o_.stringMap(m.get("env"), m.child("env"));
      m.finish();
      addPodSet(w.pod_sets, std::move(ps), m);
    }
    if (top.present("serve")) w.serve = serve(top.map("serve"));
    top.finish();
    return w;
  }

  bool namespaceGiven() const { return namespace_given_; }

 private:
  bool namespace_given_ = false;

  // A served model: {route, port, model, api?, health?, metrics?, engine?}.
  std::optional<ServeSpec> serve(Map m) {
    ServeSpec s;
    m.required("route", s.route);
    m.required("model", s.model);
    m.optionalChoice("api", s.api, {"openai", "anthropic"});
    m.optional("health", s.health);
    m.optional("metrics", s.metrics);
    m.optionalChoice("engine", s.engine, {"vllm", "sglang", "tgi"});
    if (!m.present("port")) {
      r_.addError(m.node(), m.child("port"), "required field is missing");
    } else if (auto p = o_.integer(m, "port", 1, 65535)) {
      s.port = *p;
    }
    // Paths on the replica's own address and port: "/" and URL path characters, nothing that
    // could end the request line (a CR, an LF, a space) or add a query or a host.
    if (!s.health.empty() && !isUrlPath(s.health)) {
      r_.addError(m.get("health"), m.child("health"),
                  "expected a path such as /health: \"/\" then letters, digits and "
                  "-._~!$&'()*+,;=:@%/, at most 256 bytes");
    }
    if (!s.metrics.empty() && !isUrlPath(s.metrics)) {
      r_.addError(m.get("metrics"), m.child("metrics"),
                  "expected a path such as /metrics (\"/\" then letters, digits and "
                  "-._~!$&'()*+,;=:@%/, at most 256 bytes), or \"\" for none");
    }
    m.finish();
    return s;
  }
  // The `purser.dev/serve` annotation of a Job or a Workload: the same map, as YAML or JSON text.
  void serveAnnotation(const Meta& meta, Map& top, Workload& w) {
    auto a = meta.annotations.find(kServeAnnotation);
    if (a == meta.annotations.end()) return;
    const std::string path = std::string("metadata.annotations.") + kServeAnnotation;
    auto parsed = config::parseYaml(a->second, path);
    if (!parsed) {
      r_.addError(top.get("metadata"), path,
                  fmt::format("not a YAML or JSON map: {}", parsed.error().message));
      return;
    }
    const YAML::Node node = *parsed;
    if (!node.IsMap()) {
      r_.addError(top.get("metadata"), path,
                  "expected a map such as {route: chat, port: 8000, model: llama-3-8b}");
      return;
    }
    w.serve = serve(r_.map(node, path));
  }

  // An object's metadata as the workload's name, namespace, uid and creation time.
  Meta identity(Map& top, Workload& w) {
    Meta meta = readMeta(o_, top, true);
    namespace_given_ = meta.namespace_given;
    setName(w, meta.name, meta.namespace_);
    w.uid = meta.uid;
    if (meta.created_ms) w.created_ms = *meta.created_ms;
    return meta;
  }
  void setName(Workload& w, const std::string& name, const std::string& ns) {
    w.namespace_ = ns;
    w.name = ns.empty() ? name : ns + "/" + name;
    o_.setLabel(fmt::format("Workload \"{}\"", w.name));
  }

  void counts(Map& m, const std::string& count_key, const std::string& min_key, PodSet& ps) {
    if (auto c = o_.integer(m, count_key, 0, INT32_MAX)) ps.count = *c;
    if (auto mc = o_.integer(m, min_key, 1, ps.count)) ps.min_count = *mc;
  }

  void addPodSet(std::vector<PodSet>& sets, PodSet ps, Map& m) {
    if (!ps.name.empty() && !isDnsLabel(ps.name)) {
      r_.addError(m.get("name"), m.child("name"),
                  fmt::format("\"{}\" is not a valid pod set name", ps.name));
    }
    for (const auto& other : sets) {
      if (other.name == ps.name) {
        r_.addError(m.get("name"), m.child("name"),
                    fmt::format("pod set \"{}\" is listed twice", ps.name));
      }
    }
    sets.push_back(std::move(ps));
  }

  std::vector<PodSet> kueuePodSets(const YAML::Node& n, const std::string& path) {
    std::vector<PodSet> out;
    if (!n.IsSequence() || n.size() == 0) {
      r_.addError(n, path, "expected a non-empty list of pod sets");
      return {};
    }
    for (size_t i = 0; i < n.size(); ++i) {
      Map m = r_.map(n[i], fmt::format("{}[{}]", path, i));
      PodSet ps;
      ps.name = "main";  // Kueue's default
      m.optional("name", ps.name);
      counts(m, "count", "minCount", ps);
      if (!m.present("template")) {
        r_.addError(m.node(), m.child("template"), "required field is missing");
      } else {
        Map t = m.map("template");
        if (t.present("metadata")) templateAnnotations(t.get("metadata"), t.child("metadata"), ps);
        podSpec(t.map("spec"), ps);
        t.finish();
      }
      if (m.present("topologyRequest")) topology(m.map("topologyRequest"), ps);
      m.finish();
      addPodSet(out, std::move(ps), m);
    }
    return out;
  }

  // Kueue's topology request: `required` or `preferred`, a level (nvlink, node or
  // kubernetes.io/hostname, rack, block, or a node label key).
  void topology(Map t, PodSet& ps) {
    std::string required, preferred;
    t.optional("required", required);
    t.optional("preferred", preferred);
    o_.unsupported(t, "unconstrained");
    o_.unsupported(t, "podIndexLabel");
    o_.unsupported(t, "subGroupIndexLabel");
    o_.unsupported(t, "subGroupCount");
    o_.unsupported(t, "podSetSliceRequiredTopology");
    o_.unsupported(t, "podSetSliceSize");
    o_.unsupported(t, "podSetGroupName");
    if (!required.empty() && !preferred.empty()) {
      r_.addError(t.node(), t.path(), "give required or preferred, not both");
    }
    ps.topology.required = !required.empty();
    ps.topology.level = required.empty() ? preferred : required;
    t.finish();
  }

  static std::vector<std::string> commaList(const std::string& s) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(',', start);
      if (end == std::string::npos) end = s.size();
      std::string item = s.substr(start, end - start);
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      if (!item.empty()) out.push_back(item);
      start = end + 1;
    }
    return out;
  }

  // The pod template's annotations Purser reads: Kueue's topology requests and HAMi's GPU type
  // constraints. The rest of the metadata is the pods' own.
  void templateAnnotations(const YAML::Node& meta, const std::string& path, PodSet& ps) {
    if (!meta.IsMap()) return;
    const YAML::Node annotations = meta["annotations"];
    if (!annotations.IsDefined() || !annotations.IsMap()) return;
    std::map<std::string, std::string> a = o_.stringMap(annotations, path + ".annotations");
    if (auto it = a.find("kueue.x-k8s.io/podset-required-topology"); it != a.end()) {
      ps.topology = {it->second, true};
    } else if (auto p = a.find("kueue.x-k8s.io/podset-preferred-topology"); p != a.end()) {
      ps.topology = {p->second, false};
    }
    if (auto it = a.find("nvidia.com/use-gputype"); it != a.end()) {
      ps.use_gpu_types = commaList(it->second);
    }
    if (auto it = a.find("nvidia.com/nouse-gputype"); it != a.end()) {
      ps.nouse_gpu_types = commaList(it->second);
    }
  }

  // A container's requests, with limits standing in for missing requests (as Kueue does).
  Resources containerRequests(const YAML::Node& c, const std::string& path) {
    Map cm = r_.map(c, path);  // the rest of a container is not Purser's concern
    if (!cm.present("resources") || isNull(cm.get("resources"))) return {};
    Map res = cm.map("resources");
    Resources requests = o_.resourceList(res.get("requests"), res.child("requests"));
    for (const auto& [name, v] : o_.resourceList(res.get("limits"), res.child("limits"))) {
      requests.emplace(name, v);
    }
    o_.unsupported(res, "claims");
    res.finish();
    return requests;
  }

  // A container's limits alone (what a local pod is held to). Errors are containerRequests'.
  Resources containerLimits(const YAML::Node& c, const std::string& path) {
    if (!c.IsMap()) return {};
    const YAML::Node res = c["resources"];
    if (!res.IsDefined() || !res.IsMap() || !res["limits"].IsDefined()) return {};
    YamlReader quiet(r_.file());
    return readResources(quiet, res["limits"], path + ".resources.limits", /*whole_extended=*/true);
  }

  bool add(Resources& into, const Resources& more, const YAML::Node& at, const std::string& path) {
    for (const auto& [name, v] : more) {
      if (!addChecked(into[name], v)) {
        r_.addError(at, path, fmt::format("the pod's total \"{}\" is too large", name));
        return false;
      }
    }
    return true;
  }

  static void maxInto(Resources& into, const Resources& other) {
    for (const auto& [name, v] : other) into[name] = std::max(into[name], v);
  }

  // Kubernetes' effective pod requests: the containers summed, plus restartable (sidecar) init
  // containers; at least each regular init container with the sidecars started before it; plus
  // the pod's overhead.
  // What the first container runs: command then args, workingDir, and env given by value (a
  // valueFrom needs a cluster to resolve it: warned, and left unset).
  void runs(const YAML::Node& c, const std::string& path, PodSet& ps) {
    if (!c.IsMap()) return;
    for (const char* key : {"command", "args"}) {
      const YAML::Node list = c[key];
      if (!list.IsDefined() || list.IsNull()) continue;
      const std::string at = path + "." + key;
      if (!list.IsSequence()) {
        r_.addError(list, at,
                    fmt::format("expected a list of strings, got {}", describeNode(list)));
        continue;
      }
      for (size_t i = 0; i < list.size(); ++i) {
        if (!list[i].IsScalar()) {
          r_.addError(list[i], fmt::format("{}[{}]", at, i), "expected a string");
          continue;
        }
        ps.command.push_back(list[i].Scalar());
      }
    }
    const YAML::Node dir = c["workingDir"];
    if (dir.IsDefined() && dir.IsScalar()) ps.working_dir = dir.Scalar();
    const YAML::Node image = c["image"];
    if (image.IsDefined() && image.IsScalar()) ps.image = image.Scalar();
    const YAML::Node env = c["env"];
    if (!env.IsDefined() || env.IsNull()) return;
    if (!env.IsSequence()) {
      r_.addError(env, path + ".env", "expected a list of {name, value}");
      return;
    }
    for (size_t i = 0; i < env.size(); ++i) {
      const std::string at = fmt::format("{}.env[{}]", path, i);
      const YAML::Node e = env[i];
      const YAML::Node name = e.IsMap() ? e["name"] : YAML::Node();
      if (!name.IsDefined() || !name.IsScalar() || name.Scalar().empty() ||
          name.Scalar().find('=') != std::string::npos) {
        r_.addError(e, at + ".name", "each variable needs a name (without '=')");
        continue;
      }
      const YAML::Node value = e["value"];
      if (e["valueFrom"].IsDefined() && !e["valueFrom"].IsNull()) {
        o_.warn(e.Mark(), at + ".valueFrom",
                fmt::format("\"{}\" comes from the cluster (valueFrom), which Purser cannot "
                            "resolve; it is left unset",
                            name.Scalar()));
        continue;
      }
      ps.env[name.Scalar()] = value.IsDefined() && value.IsScalar() ? value.Scalar() : "";
    }
  }

  void podSpec(Map s, PodSet& ps) {
    Resources containers, sidecars, init_peak;
    const YAML::Node cs = s.get("containers");
    if (cs.IsSequence() && cs.size() > 0) {
      runs(cs[0], s.child("containers") + "[0]", ps);
      ps.limits = containerLimits(cs[0], s.child("containers") + "[0]");
    }
    for (size_t i = 0; cs.IsSequence() && i < cs.size(); ++i) {
      const std::string at = fmt::format("{}[{}]", s.child("containers"), i);
      if (!add(containers, containerRequests(cs[i], at), cs[i], at)) return;
    }
    const YAML::Node init = s.get("initContainers");
    for (size_t i = 0; init.IsSequence() && i < init.size(); ++i) {
      const std::string at = fmt::format("{}[{}]", s.child("initContainers"), i);
      Resources req = containerRequests(init[i], at);
      const YAML::Node restart = init[i].IsMap() ? init[i]["restartPolicy"] : YAML::Node();
      if (restart.IsDefined() && restart.IsScalar() && restart.Scalar() == "Always") {
        if (!add(sidecars, req, init[i], at)) return;
        maxInto(init_peak, sidecars);
      } else {
        if (!add(req, sidecars, init[i], at)) return;
        maxInto(init_peak, req);
      }
    }
    if (!add(containers, sidecars, s.node(), s.path())) return;
    maxInto(containers, init_peak);
    if (s.present("overhead")) {
      if (!add(containers, o_.resourceList(s.get("overhead"), s.child("overhead")), s.node(),
               s.child("overhead"))) {
        return;
      }
    }
    ps.requests = std::move(containers);
    if (s.present("tolerations")) {
      ps.tolerations = o_.tolerations(s.get("tolerations"), s.child("tolerations"));
    }
    if (s.present("nodeSelector")) {
      ps.node_selector = o_.stringMap(s.get("nodeSelector"), s.child("nodeSelector"));
    }
    if (s.present("affinity") && s.get("affinity").IsMap() &&
        s.get("affinity")["nodeAffinity"].IsDefined()) {
      o_.warn(keyMark(s, "affinity"), s.child("affinity.nodeAffinity"),
              "not supported by Purser; flavors are matched on nodeSelector only");
    }
    // The rest of the pod spec (images, volumes, ...) is for the kubelet, not for admission.
  }

  ObjectReader& o_;
  YamlReader& r_;
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

namespace {

// A YAML node as JSON: a quoted scalar is a string; a plain one null, a boolean, an integer or a
// number when it reads as one (YAML 1.2's core schema), else a string.
nlohmann::json jsonOf(const YAML::Node& n) {
  using nlohmann::json;
  if (n.IsMap()) {
    json out = json::object();
    for (const auto& kv : n) {
      out[kv.first.IsScalar() ? kv.first.Scalar() : std::string()] = jsonOf(kv.second);
    }
    return out;
  }
  if (n.IsSequence()) {
    json out = json::array();
    for (const auto& item : n) out.push_back(jsonOf(item));
    return out;
  }
  if (!n.IsScalar()) return nullptr;
  const std::string& v = n.Scalar();
  if (n.Tag() == "!") return v;  // quoted
  if (v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL") return nullptr;
  if (v == "true" || v == "True" || v == "TRUE") return true;
  if (v == "false" || v == "False" || v == "FALSE") return false;
  int64_t i = 0;
  const char* end = v.data() + v.size();
  if (auto [p, ec] = std::from_chars(v.data(), end, i); ec == std::errc() && p == end) return i;
  double d = 0;
  if (auto [p, ec] = std::from_chars(v.data(), end, d); ec == std::errc() && p == end) return d;
  return v;
}

}  // namespace

namespace {

// An environment variable's name as a shell and Kubernetes' C_IDENTIFIER rule have it.
bool validEnvName(const std::string& name) {
  if (name.empty() || name.size() > 256 || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// What a workload may ask for, past its shape: pod sets, pods, environment names, CPU.
void checkBounds(const Workload& w, const WorkloadBounds& bounds, std::vector<Error>& errors) {
  if (w.pod_sets.size() > bounds.max_pod_sets) {
    errors.push_back(invalidArgument(fmt::format(
        "a workload has at most {} pod sets (Kueue's limit); this one has {}",
        bounds.max_pod_sets, w.pod_sets.size())).withField("pod_sets"));
  }
  for (const auto& ps : w.pod_sets) {
    if (ps.count > bounds.max_pods_per_set) {
      errors.push_back(
          invalidArgument(fmt::format("pod set \"{}\" asks for {} pods; at most {} may run in "
                                      "one pod set (fleet.max_pods_per_set)",
                                      ps.name, ps.count, bounds.max_pods_per_set))
              .withField("pod_sets"));
    }
    for (const auto& [name, value] : ps.env) {
      if (!validEnvName(name)) {
        std::string shown;
        for (char c : name.substr(0, 64)) {
          shown += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
                       ? fmt::format("\\x{:02x}", static_cast<unsigned char>(c))
                       : std::string(1, c);
        }
        errors.push_back(invalidArgument(fmt::format("pod set \"{}\": \"{}\" is not an "
                                                     "environment variable's name (letters, "
                                                     "digits and _, not first a digit)",
                                                     ps.name, shown))
                             .withField("env"));
      }
    }
    if (bounds.min_pod_cpu_milli > 0 && !ps.command.empty()) {
      auto cpu = ps.requests.find("cpu");
      const int64_t milli = cpu == ps.requests.end() ? 0 : cpu->second;
      if (milli < bounds.min_pod_cpu_milli) {
        errors.push_back(invalidArgument(fmt::format(
            "pod set \"{}\" runs a command and must request at least {}m of CPU per pod "
            "(fleet.min_pod_cpu); it requests {}m",
            ps.name, bounds.min_pod_cpu_milli, milli)).withField("requests"));
      }
    }
  }
}

}  // namespace

Result<ParsedWorkload> parseWorkload(const std::string& yaml_or_json, const std::string& file_name,
                                     size_t max_nesting, const WorkloadBounds& bounds) {
  std::vector<YAML::Node> docs =
      PURSER_TRY_VALUE(config::parseYamlStream(yaml_or_json, file_name, max_nesting));
  std::erase_if(docs, [](const YAML::Node& d) { return isNull(d); });
  if (docs.size() != 1) {
    return fail(invalidArgument(fmt::format("expected one workload, got {} documents", docs.size()))
                    .at(file_name, 0, 0));
  }
  const YAML::Node& doc = docs.front();
  ParsedWorkload out;
  ObjectReader o(file_name, out.warnings, doc.Mark());
  o.setLabel("Workload");
  Map top = o.reader().map(doc, "");
  if (top.valid()) {
    WorkloadParser p(o);
    const YAML::Node kind = top.has("kind") ? top.get("kind") : YAML::Node();
    if (kind.IsScalar() && kind.Scalar() == "Job") {
      out.workload = p.job(top);
      out.object_json = writeJson(jsonOf(doc));
    } else if (kind.IsScalar() && kind.Scalar() == "JobSet") {
      out.workload = p.jobSet(top);
      out.object_json = writeJson(jsonOf(doc));
    } else if (kind.IsScalar() && kind.Scalar() == "PyTorchJob") {
      out.workload = p.pytorchJob(top);
      out.object_json = writeJson(jsonOf(doc));
    } else {
      out.workload = top.has("apiVersion") || top.has("kind") ? p.kueue(top) : p.shortForm(top);
    }
    out.namespace_given = p.namespaceGiven();
  }
  std::vector<Error> errors;
  o.moveErrorsTo(errors);
  if (errors.empty()) checkBounds(out.workload, bounds, errors);
  if (!errors.empty()) return fail(combine(errors));
  return out;
}

}  // namespace purser::fleet
