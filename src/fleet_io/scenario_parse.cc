// Parsing of admission scenarios (see scenario.h); running them is in scenario.cc.
#include <fmt/format.h>

#include <fstream>
#include <set>
#include <sstream>

#include "common/quantity.h"
#include "config/yaml_reader.h"
#include "fleet_io/scenario.h"
#include "fleet_io/yaml_fields.h"

namespace purser::fleet {

using config::YamlReader;
using nlohmann::json;

namespace {

// A YAML value as JSON (for the informational `expect` blocks): quoted scalars stay strings.
json toJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : n) out[kv.first.Scalar()] = toJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& v : n) out.push_back(toJson(v));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() == "!") return s;
      if (s == "true") return true;
      if (s == "false") return false;
      if (s == "null" || s == "~") return nullptr;
      char* end = nullptr;
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end != nullptr && *end == '\0') return static_cast<int64_t>(v);
      return s;
    }
    default:
      return nullptr;
  }
}

class Parser {
 public:
  explicit Parser(YamlReader& r) : r_(r) {}

  // A Kubernetes quantity as milli-units; negative ones are refused.
  std::optional<Amount> amount(const YAML::Node& n, const std::string& path) {
    return readAmount(r_, n, path);
  }

  Resources resources(const YAML::Node& n, const std::string& path) {
    return readResources(r_, n, path, /*whole_extended=*/false);
  }

  // Seconds relative to "now" (may be fractional); null: never set.
  int64_t time(const YAML::Node& n, const std::string& path) {
    if (!n.IsDefined() || n.IsNull()) return INT64_MIN;
    std::optional<int64_t> ms;
    if (n.IsScalar()) {
      if (auto q = Quantity::parse(n.Scalar()); q && q->milliValue()) ms = *q->milliValue();
    }
    if (!ms) {
      r_.addError(n, path,
                  fmt::format("expected seconds relative to now, got {}", describeNode(n)));
      return INT64_MIN;
    }
    return *ms;
  }

  std::optional<int64_t> integer(const YAML::Node& n, const std::string& path, int64_t min,
                                 int64_t max) {
    return r_.asInt(n, path, min, max);
  }

  std::vector<Toleration> tolerations(const YAML::Node& n, const std::string& path) {
    return readTolerations(r_, n, path);
  }

  std::vector<PodSet> podSets(const YAML::Node& n, const std::string& path) {
    std::vector<PodSet> out;
    if (!n.IsSequence() || n.size() == 0) {
      r_.addError(n, path, "expected a non-empty list of pod sets");
      return out;
    }
    std::set<std::string> names;
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string at = fmt::format("{}[{}]", path, i);
      auto m = r_.map(n[i], at);
      PodSet p;
      m.required("name", p.name);
      m.optional("count", p.count, 0, 1'000'000);
      if (m.present("min_count") && !m.get("min_count").IsNull()) {
        if (auto v = integer(m.get("min_count"), m.child("min_count"), 1, p.count)) {
          p.min_count = *v;
        }
      }
      if (m.present("requests")) p.requests = resources(m.get("requests"), m.child("requests"));
      if (m.present("tolerations")) {
        p.tolerations = tolerations(m.get("tolerations"), m.child("tolerations"));
      }
      if (m.present("node_selector")) {
        for (const auto& kv : m.get("node_selector")) {
          p.node_selector[kv.first.Scalar()] = kv.second.Scalar();
        }
      }
      m.finish();
      if (!names.insert(p.name).second) {
        r_.addError(n[i], at + ".name", fmt::format("pod set \"{}\" is listed twice", p.name));
      }
      out.push_back(std::move(p));
    }
    return out;
  }

  void nameAndNamespace(Workload& w) {
    const size_t slash = w.name.find('/');
    w.namespace_ = slash == std::string::npos ? "" : w.name.substr(0, slash);
  }

  Workload workload(const YAML::Node& n, const std::string& path, bool admitted) {
    auto m = r_.map(n, path);
    Workload w;
    m.required("name", w.name);
    nameAndNamespace(w);
    m.optional("local_queue", w.local_queue);
    m.optional("cluster_queue", w.cluster_queue);
    if (m.present("priority")) {
      if (auto v = integer(m.get("priority"), m.child("priority"), INT32_MIN, INT32_MAX)) {
        w.priority = static_cast<int32_t>(*v);
      }
    }
    m.optional("priority_class", w.priority_class);
    if (m.present("created")) w.created_ms = time(m.get("created"), m.child("created"));
    if (m.present("admitted_at")) {
      w.admitted_ms = time(m.get("admitted_at"), m.child("admitted_at"));
    }
    m.optional("uid", w.uid);
    w.pod_sets = podSets(m.get("pod_sets"), m.child("pod_sets"));
    if (admitted) {
      if (w.cluster_queue.empty()) {
        r_.addError(n, path + ".cluster_queue", "an admitted workload names its cluster_queue");
      }
      Admission a;
      a.cluster_queue = w.cluster_queue;
      auto assignment = m.map("assignment");
      for (const auto& ps : w.pod_sets) {
        if (!assignment.has(ps.name)) {
          r_.addError(assignment.node(), assignment.child(ps.name),
                      fmt::format("no assignment for pod set \"{}\"", ps.name));
          continue;
        }
        auto pm = assignment.map(ps.name);
        PodSetAssignment psa;
        psa.name = ps.name;
        psa.count = ps.count;
        pm.optional("count", psa.count, 0, ps.count);
        if (pm.present("flavors")) {
          for (const auto& kv : pm.get("flavors")) {
            psa.flavors[kv.first.Scalar()] = kv.second.Scalar();
          }
        }
        if (pm.present("usage")) {
          psa.usage = resources(pm.get("usage"), pm.child("usage"));
        } else {
          for (const auto& [res, per_pod] : ps.requests) psa.usage[res] = per_pod * psa.count;
        }
        pm.finish();
        a.pod_sets.push_back(std::move(psa));
      }
      assignment.finish();
      w.admission = std::move(a);
    } else if (m.present("assignment")) {
      r_.addError(m.get("assignment"), m.child("assignment"),
                  "a pending workload has no assignment");
    }
    m.finish();
    return w;
  }

  std::vector<Workload> workloads(const YAML::Node& n, const std::string& path, bool admitted) {
    std::vector<Workload> out;
    if (!n.IsDefined() || n.IsNull()) return out;
    if (!n.IsSequence()) {
      r_.addError(n, path, "expected a list of workloads");
      return out;
    }
    for (size_t i = 0; i < n.size(); ++i) {
      out.push_back(workload(n[i], fmt::format("{}[{}]", path, i), admitted));
    }
    return out;
  }

  std::vector<ResourceGroup> quotas(const YAML::Node& n, const std::string& path, bool grouped) {
    std::vector<ResourceGroup> out;
    if (!n.IsDefined() || n.IsNull()) return out;
    if (!n.IsSequence()) {
      r_.addError(n, path, "expected a list");
      return out;
    }
    if (!grouped) {
      // A cohort's quotas: a flat list of {flavor, resources}.
      ResourceGroup g;
      for (size_t i = 0; i < n.size(); ++i) g.flavors.push_back(flavorQuotas(n[i], path, i));
      std::set<std::string> covered;
      for (const auto& f : g.flavors) {
        for (const auto& [res, _] : f.resources) covered.insert(res);
      }
      g.covered.assign(covered.begin(), covered.end());
      out.push_back(std::move(g));
      return out;
    }
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string at = fmt::format("{}[{}]", path, i);
      auto m = r_.map(n[i], at);
      ResourceGroup g;
      m.optionalStrings("covered", g.covered);
      if (m.present("flavors")) {
        const YAML::Node fl = m.get("flavors");
        for (size_t j = 0; fl.IsSequence() && j < fl.size(); ++j) {
          g.flavors.push_back(flavorQuotas(fl[j], m.child("flavors"), j));
        }
      }
      m.finish();
      out.push_back(std::move(g));
    }
    return out;
  }

  FlavorQuotas flavorQuotas(const YAML::Node& n, const std::string& path, size_t i) {
    const std::string at = fmt::format("{}[{}]", path, i);
    auto m = r_.map(n, at);
    FlavorQuotas f;
    m.required("flavor", f.flavor);
    if (m.present("resources") && m.get("resources").IsMap()) {
      for (const auto& kv : m.get("resources")) {
        const std::string res = kv.first.Scalar();
        auto q = r_.map(kv.second, m.child("resources") + "." + res);
        Quota quota;
        if (q.present("nominal")) {
          quota.nominal = amount(q.get("nominal"), q.child("nominal")).value_or(0);
        }
        if (q.present("borrowing_limit") && !q.get("borrowing_limit").IsNull()) {
          quota.borrowing_limit = amount(q.get("borrowing_limit"), q.child("borrowing_limit"));
        }
        if (q.present("lending_limit") && !q.get("lending_limit").IsNull()) {
          quota.lending_limit = amount(q.get("lending_limit"), q.child("lending_limit"));
        }
        q.finish();
        f.resources[res] = quota;
      }
    }
    m.finish();
    return f;
  }

  ClusterQueue clusterQueue(const YAML::Node& n, const std::string& path) {
    auto m = r_.map(n, path);
    ClusterQueue cq;
    m.required("name", cq.name);
    m.optional("cohort", cq.cohort);
    std::string strategy = "BestEffortFIFO";
    m.optionalChoice("strategy", strategy, {"BestEffortFIFO", "StrictFIFO"});
    cq.strategy = strategy == "StrictFIFO" ? QueueingStrategy::kStrictFifo
                                           : QueueingStrategy::kBestEffortFifo;
    if (m.present("namespace_selector") && !m.get("namespace_selector").IsNull()) {
      std::map<std::string, std::vector<std::string>> sel;
      for (const auto& kv : m.get("namespace_selector")) {
        std::vector<std::string> values;
        if (kv.second.IsSequence()) {
          for (const auto& v : kv.second) values.push_back(v.Scalar());
        } else {
          values.push_back(kv.second.Scalar());
        }
        sel[kv.first.Scalar()] = values;
      }
      cq.namespace_selector = sel;
    }
    if (m.present("preemption")) {
      auto p = m.map("preemption");
      std::string within = "Never", reclaim = "Never";
      p.optionalChoice("within_cluster_queue", within,
                       {"Never", "LowerPriority", "LowerOrNewerEqualPriority"});
      p.optionalChoice("reclaim_within_cohort", reclaim, {"Never", "LowerPriority", "Any"});
      cq.preemption.within_cluster_queue =
          within == "LowerPriority"               ? WithinClusterQueue::kLowerPriority
          : within == "LowerOrNewerEqualPriority" ? WithinClusterQueue::kLowerOrNewerEqualPriority
                                                  : WithinClusterQueue::kNever;
      cq.preemption.reclaim_within_cohort = reclaim == "LowerPriority"
                                                ? ReclaimWithinCohort::kLowerPriority
                                            : reclaim == "Any" ? ReclaimWithinCohort::kAny
                                                               : ReclaimWithinCohort::kNever;
      if (p.present("borrow_within_cohort")) {
        auto b = p.map("borrow_within_cohort");
        std::string policy = "Never";
        b.optionalChoice("policy", policy, {"Never", "LowerPriority"});
        cq.preemption.borrow_within_cohort = policy == "LowerPriority"
                                                 ? BorrowWithinCohort::kLowerPriority
                                                 : BorrowWithinCohort::kNever;
        if (b.present("max_priority_threshold") && !b.get("max_priority_threshold").IsNull()) {
          if (auto v = integer(b.get("max_priority_threshold"), b.child("max_priority_threshold"),
                               INT32_MIN, INT32_MAX)) {
            cq.preemption.max_priority_threshold = static_cast<int32_t>(*v);
          }
        }
        b.finish();
      }
      p.finish();
    }
    if (m.present("flavor_fungibility")) {
      auto f = m.map("flavor_fungibility");
      std::string borrow = "MayStopSearch", preempt = "TryNextFlavor", preference;
      f.optionalChoice("when_can_borrow", borrow, {"MayStopSearch", "TryNextFlavor"});
      f.optionalChoice("when_can_preempt", preempt, {"MayStopSearch", "TryNextFlavor"});
      if (f.present("preference") && !f.get("preference").IsNull()) {
        f.optionalChoice("preference", preference,
                         {"BorrowingOverPreemption", "PreemptionOverBorrowing"});
      }
      f.finish();
      cq.fungibility.when_can_borrow =
          borrow == "TryNextFlavor" ? WhenCanBorrow::kTryNextFlavor : WhenCanBorrow::kMayStopSearch;
      cq.fungibility.when_can_preempt = preempt == "MayStopSearch" ? WhenCanPreempt::kMayStopSearch
                                                                   : WhenCanPreempt::kTryNextFlavor;
      cq.fungibility.preference = preference == "BorrowingOverPreemption"
                                      ? FungibilityPreference::kBorrowingOverPreemption
                                  : preference == "PreemptionOverBorrowing"
                                      ? FungibilityPreference::kPreemptionOverBorrowing
                                      : FungibilityPreference::kNone;
    }
    if (m.present("resource_groups")) {
      cq.resource_groups = quotas(m.get("resource_groups"), m.child("resource_groups"), true);
    }
    if (m.present("fair_weight")) {
      cq.fair_weight_milli = amount(m.get("fair_weight"), m.child("fair_weight")).value_or(1000);
    }
    std::string stop = "None";
    m.optionalChoice("stop_policy", stop, {"None", "Hold", "HoldAndDrain"});
    cq.stop_policy = stop == "Hold"           ? StopPolicy::kHold
                     : stop == "HoldAndDrain" ? StopPolicy::kHoldAndDrain
                                              : StopPolicy::kNone;
    m.finish();
    return cq;
  }

 private:
  YamlReader& r_;
};

}  // namespace

Result<Scenario> parseScenario(std::string_view yaml, const std::string& file_name) {
  const YAML::Node doc = PURSER_TRY_VALUE(config::parseYaml(yaml, file_name));
  YamlReader r(file_name);
  Parser p(r);
  Scenario s;
  auto top = r.map(doc, "");
  if (!top.valid()) return fail(r.error());
  top.optional("id", s.id);
  top.optional("name", s.name);
  for (const char* info : {"source", "covers", "notes"}) (void)top.present(info);
  std::string mode;
  top.requiredChoice("mode", mode, {"single_cycle", "preemption_targets", "until_stable"});
  s.mode = mode == "preemption_targets" ? Mode::kPreemptionTargets
           : mode == "until_stable"     ? Mode::kUntilStable
                                        : Mode::kSingleCycle;
  if (top.present("features")) {
    auto f = top.map("features");
    f.optional("partial_admission", s.features.partial_admission);
    f.optional("fair_sharing", s.features.fair_sharing);
    f.optional("priority_sorting_within_cohort", s.features.priority_sorting_within_cohort);
    f.finish();
  }
  if (top.present("flavors")) {
    const YAML::Node fl = top.get("flavors");
    for (size_t i = 0; fl.IsSequence() && i < fl.size(); ++i) {
      auto m = r.map(fl[i], fmt::format("flavors[{}]", i));
      ResourceFlavor f;
      m.required("name", f.name);
      if (m.present("node_labels")) {
        for (const auto& kv : m.get("node_labels")) {
          f.node_labels[kv.first.Scalar()] = kv.second.Scalar();
        }
      }
      if (m.present("taints")) {
        const YAML::Node ts = m.get("taints");
        for (size_t j = 0; ts.IsSequence() && j < ts.size(); ++j) {
          auto tm = r.map(ts[j], fmt::format("flavors[{}].taints[{}]", i, j));
          Taint t;
          tm.required("key", t.key);
          tm.optional("value", t.value);
          tm.requiredChoice("effect", t.effect, {"NoSchedule", "PreferNoSchedule", "NoExecute"});
          tm.finish();
          f.taints.push_back(t);
        }
      }
      if (m.present("tolerations")) {
        f.tolerations = p.tolerations(m.get("tolerations"), m.child("tolerations"));
      }
      m.finish();
      s.flavors.push_back(std::move(f));
    }
  }
  if (top.present("namespaces") && top.get("namespaces").IsMap()) {
    for (const auto& kv : top.get("namespaces")) {
      auto& labels = s.namespaces[kv.first.Scalar()];
      if (kv.second.IsMap()) {
        for (const auto& l : kv.second) labels[l.first.Scalar()] = l.second.Scalar();
      }
    }
  }
  if (top.present("cohorts")) {
    const YAML::Node cs = top.get("cohorts");
    for (size_t i = 0; cs.IsSequence() && i < cs.size(); ++i) {
      auto m = r.map(cs[i], fmt::format("cohorts[{}]", i));
      Cohort c;
      m.required("name", c.name);
      m.optional("parent", c.parent);
      if (m.present("quotas")) c.quotas = p.quotas(m.get("quotas"), m.child("quotas"), false);
      if (m.present("fair_weight")) {
        c.fair_weight_milli = p.amount(m.get("fair_weight"), m.child("fair_weight")).value_or(1000);
      }
      m.finish();
      s.cohorts.push_back(std::move(c));
    }
  }
  if (top.present("cluster_queues")) {
    const YAML::Node cqs = top.get("cluster_queues");
    for (size_t i = 0; cqs.IsSequence() && i < cqs.size(); ++i) {
      s.cluster_queues.push_back(p.clusterQueue(cqs[i], fmt::format("cluster_queues[{}]", i)));
    }
  }
  if (top.present("local_queues")) {
    const YAML::Node lqs = top.get("local_queues");
    for (size_t i = 0; lqs.IsSequence() && i < lqs.size(); ++i) {
      auto m = r.map(lqs[i], fmt::format("local_queues[{}]", i));
      LocalQueue lq;
      m.optional("namespace", lq.namespace_);
      m.required("name", lq.name);
      m.required("cluster_queue", lq.cluster_queue);
      m.finish();
      s.local_queues.push_back(std::move(lq));
    }
  }
  if (top.present("admitted")) s.admitted = p.workloads(top.get("admitted"), "admitted", true);
  if (top.present("pending")) s.pending = p.workloads(top.get("pending"), "pending", false);
  if (top.present("incoming")) {
    const YAML::Node in = top.get("incoming");
    Incoming incoming;
    // The incoming workload's assignment has its own shape ({flavor, mode} per resource).
    YAML::Node copy = YAML::Clone(in);
    const YAML::Node assignment = in["assignment"];
    copy.remove("assignment");
    incoming.workload = p.workload(copy, "incoming", false);
    if (assignment.IsMap()) {
      for (const auto& kv : assignment) {
        const std::string ps = kv.first.Scalar();
        auto m = r.map(kv.second, "incoming.assignment." + ps);
        IncomingPodSet ips;
        m.optional("count", ips.count, 0, 1'000'000);
        if (m.present("flavors")) {
          for (const auto& f : m.get("flavors")) {
            auto fm = r.map(f.second, m.child("flavors") + "." + f.first.Scalar());
            GivenFlavor g;
            std::string given_mode = "Fit";
            fm.required("flavor", g.flavor);
            fm.optionalChoice("mode", given_mode, {"Fit", "Preempt", "NoFit"});
            fm.finish();
            g.preempt = given_mode == "Preempt";
            ips.flavors[f.first.Scalar()] = g;
          }
        }
        m.finish();
        incoming.assignment[ps] = ips;
      }
    } else {
      r.addError(in, "incoming.assignment", "the incoming workload needs its assignment");
    }
    s.incoming = std::move(incoming);
  }
  if (top.present("steps")) {
    const YAML::Node steps = top.get("steps");
    for (size_t i = 0; steps.IsSequence() && i < steps.size(); ++i) {
      auto m = r.map(steps[i], fmt::format("steps[{}]", i));
      Step step;
      if (m.present("actions")) {
        auto a = m.map("actions");
        if (a.present("create")) {
          step.create = p.workloads(a.get("create"), a.child("create"), false);
        }
        a.optionalStrings("finish", step.finish);
        a.finish();
      }
      if (m.present("expect")) step.expect = toJson(m.get("expect"));
      m.finish();
      s.steps.push_back(std::move(step));
    }
  }
  if (top.present("expect")) s.expect = toJson(top.get("expect"));
  top.finish();
  if (!r.ok()) return fail(r.error());
  if (s.mode == Mode::kPreemptionTargets && !s.incoming) {
    return fail(invalidArgument("a preemption_targets scenario needs an incoming workload")
                    .at(file_name, 0, 0));
  }
  return s;
}

Result<Scenario> loadScenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) return fail(invalidArgument(fmt::format("cannot read \"{}\"", path)));
  std::stringstream text;
  text << in.rdbuf();
  return parseScenario(text.str(), path);
}

}  // namespace purser::fleet
