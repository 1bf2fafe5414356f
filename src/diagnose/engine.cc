#include "diagnose/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

#include "diagnose/analysis.h"

namespace purser::diagnose {

const std::vector<std::string>& causeVocabulary() {
  static const std::vector<std::string> kCauses = {
      "kv_cache_exhaustion", "replica_saturation", "gpu_hardware_fault", "gpu_thermal_throttle",
      "gpu_memory_oom",      "nvlink_degraded",    "upstream_errors",    "upstream_rate_limited",
      "bad_config_change",   "budget_exhausted",   "quota_exhausted",    "preemption_churn",
      "noisy_neighbor",      "idle_allocation",    "traffic_shift",      "none"};
  return kCauses;
}

namespace {
// ------------------------------------------------------------------------ scope and ranking

struct Scope {
  bool all = false;
  std::set<std::pair<std::string, std::string>> direct;
  std::set<std::pair<std::string, std::string>> related;

  void add(const std::string& kind, const std::string& name) {
    if (!name.empty()) direct.insert({kind, name});
  }
  double weight(const Candidate& c) const {
    if (all) return 1.0;
    if (direct.contains({c.f.subject.kind, c.f.subject.name})) return 1.0;
    if (related.contains({c.f.subject.kind, c.f.subject.name})) return 0.85;
    for (const Subject& a : c.affects) {
      if (direct.contains({a.kind, a.name})) return 0.9;
    }
    return 0;
  }
};

Scope scopeOf(const Case& c) {
  Scope s;
  const Question& q = c.question;
  const Inventory& inv = c.inventory;
  auto addDeployment = [&](const Deployment& d) {
    s.add("deployment", d.name);
    s.add("node", d.node);
    for (int64_t g : d.gpus) s.add("gpu", gpuName(d.node, g));
  };
  auto addWorkload = [&](const Workload& w) {
    s.add("workload", w.id());
    s.add("queue", w.queue);
    if (!w.node.empty()) {
      for (int64_t g : w.gpus) s.add("gpu", gpuName(w.node, g));
    }
  };
  if (q.kind == "fleet") {
    s.all = true;
  } else if (q.kind == "route") {
    s.add("route", q.name);
    for (const Deployment& d : inv.deployments) {
      if (d.route == q.name) addDeployment(d);
    }
    for (const Series& ser : c.series) {
      if (ser.name != "purser_gateway_requests_total") continue;
      if (ser.label("route") != std::optional<std::string_view>(q.name)) continue;
      if (auto t = ser.label("target")) s.add("provider", std::string(*t));
    }
  } else if (q.kind == "deployment") {
    for (const Deployment& d : inv.deployments) {
      if (d.name == q.name) {
        addDeployment(d);
        s.related.insert({"route", d.route});
      }
    }
    s.add("deployment", q.name);
  } else if (q.kind == "workload") {
    for (const Workload& w : inv.workloads) {
      if (w.id() == q.name || w.name == q.name) {
        addWorkload(w);
        s.add("node", w.node);
      }
    }
  } else if (q.kind == "queue") {
    s.add("queue", q.name);
    for (const Workload& w : inv.workloads) {
      if (w.queue == q.name) addWorkload(w);
    }
  } else if (q.kind == "team") {
    s.add("team", q.name);
    for (const Workload& w : inv.workloads) {
      if (w.ns == q.name) addWorkload(w);
    }
    // Keys and users the gateway logs as the team's.
    for (const LogLine& l : c.logs) {
      auto team = logfmtValue(l.line, "team");
      if (!team || *team != q.name) continue;
      if (auto w = logfmtValue(l.line, "wallet")) {
        if (auto sub = scopeSubject(*w)) s.add(sub->kind, sub->name);
      }
      if (auto p = logfmtValue(l.line, "principal")) {
        if (auto sub = scopeSubject(*p)) s.add(sub->kind, sub->name);
      }
    }
  } else if (q.kind == "user") {
    s.add("user", q.name);
    for (const LogLine& l : c.logs) {
      auto p = logfmtValue(l.line, "principal");
      if (!p || *p != "user:" + q.name) continue;
      if (auto w = logfmtValue(l.line, "wallet")) {
        if (auto sub = scopeSubject(*w)) s.add(sub->kind, sub->name);
      }
    }
  } else if (q.kind == "node") {
    s.add("node", q.name);
    for (const NodeInfo& n : inv.nodes) {
      if (n.name != q.name) continue;
      for (int64_t g = 0; g < n.gpus; ++g) s.add("gpu", gpuName(n.name, g));
    }
    for (const Deployment& d : inv.deployments) {
      if (d.node == q.name) addDeployment(d);
    }
    for (const Workload& w : inv.workloads) {
      if (w.node == q.name) addWorkload(w);
    }
  } else {
    s.add(q.kind, q.name);
  }
  return s;
}

// How well a cause answers a symptom.
double symptomWeight(const std::string& symptom, const std::string& cause) {
  if (symptom == "any" || symptom.empty()) return 1.0;
  static const std::map<std::string, std::map<std::string, double>> kTable = {
      {"slow",
       {{"kv_cache_exhaustion", 1},
        {"replica_saturation", 1},
        {"gpu_thermal_throttle", 1},
        {"noisy_neighbor", 1},
        {"traffic_shift", 1},
        {"bad_config_change", 1},
        {"nvlink_degraded", 1},
        {"gpu_hardware_fault", 0.7},
        {"gpu_memory_oom", 0.7},
        // Retries, backoff and fallback to a slower target are latency too.
        {"upstream_errors", 0.8},
        {"upstream_rate_limited", 0.8}}},
      {"errors",
       {{"gpu_memory_oom", 1},
        {"gpu_hardware_fault", 1},
        {"upstream_errors", 1},
        {"upstream_rate_limited", 1},
        {"budget_exhausted", 1},
        {"bad_config_change", 1},
        {"kv_cache_exhaustion", 0.6},
        {"replica_saturation", 0.6},
        {"nvlink_degraded", 0.6},
        {"preemption_churn", 0.6},
        {"quota_exhausted", 0.5}}},
      {"pending",
       {{"quota_exhausted", 1},
        {"preemption_churn", 1},
        {"gpu_hardware_fault", 0.6},
        {"idle_allocation", 0.6},
        {"bad_config_change", 0.6}}},
      {"over_budget", {{"budget_exhausted", 1}, {"traffic_shift", 0.6}}},
      {"idle", {{"idle_allocation", 1}, {"preemption_churn", 0.5}, {"quota_exhausted", 0.5}}},
  };
  auto it = kTable.find(symptom);
  if (it == kTable.end()) return 1.0;
  auto jt = it->second.find(cause);
  return jt == it->second.end() ? 0.4 : jt->second;
}

constexpr double kReportThreshold = 0.3;

}  // namespace

Diagnosis diagnose(const Case& c) {
  Analysis analysis(c);
  std::vector<Candidate> candidates = analysis.run();
  // A fault in the path of a route means its traffic change is not the story; a fault on a
  // replica (its GPU, its memory) explains that replica's queue.
  for (Candidate& t : candidates) {
    if (t.f.cause == "traffic_shift") {
      for (const Candidate& o : candidates) {
        if (&o == &t || o.f.cause == "traffic_shift" || o.strength < 0.45) continue;
        bool same_route = o.f.subject == t.f.subject;
        for (const Subject& a : o.affects) same_route = same_route || a == t.f.subject;
        if (same_route) t.strength *= 0.4;
      }
    }
    // Workloads preempted again and again wait for quota in between: the churn explains the
    // queue's pending work.
    if (t.f.cause == "quota_exhausted") {
      for (const Candidate& o : candidates) {
        if (o.f.cause == "preemption_churn" && o.f.subject == t.f.subject) t.explained = true;
      }
    }
    if (t.f.cause == "replica_saturation") {
      for (const Candidate& o : candidates) {
        if (o.f.cause == "replica_saturation" || o.f.cause == "traffic_shift" ||
            o.f.cause == "bad_config_change" || o.strength < 0.45) {
          continue;
        }
        bool same = o.f.subject == t.f.subject;
        for (const Subject& a : o.affects) same = same || a == t.f.subject;
        if (same) t.explained = true;
      }
    }
  }
  Scope scope = scopeOf(c);
  Diagnosis d;
  for (Candidate& cand : candidates) {
    double w = scope.weight(cand);
    if (w == 0) continue;
    double conf = cand.strength * w * symptomWeight(c.question.symptom, cand.f.cause);
    if (cand.explained) conf *= 0.5;
    cand.f.confidence = std::round(std::clamp(conf, 0.0, 1.0) * 100) / 100;
    if (cand.f.confidence < kReportThreshold && !cand.explained) continue;
    if (cand.f.confidence < 0.15) continue;
    d.findings.push_back(std::move(cand.f));
  }
  std::stable_sort(d.findings.begin(), d.findings.end(), [](const Finding& a, const Finding& b) {
    if (a.confidence != b.confidence) return a.confidence > b.confidence;
    return a.onset < b.onset;
  });
  if (d.findings.empty() || d.findings.front().confidence < kReportThreshold) {
    Finding none;
    none.cause = "none";
    none.confidence = 0.8;
    none.explanation =
        "Nothing in the scope of the question stands out from its own baseline or its peers in "
        "this window: no fault signature was found in the model servers, GPUs, providers, "
        "budgets or queues it depends on.";
    none.next_steps = {"Widen the window or ask about the whole fleet if the symptom persists.",
                       "Check the client side: its own timeouts, network and retries."};
    d.findings.insert(d.findings.begin(), std::move(none));
  }
  return d;
}

}  // namespace purser::diagnose
