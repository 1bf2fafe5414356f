// Why a workload waits (or runs): each pod set's flavors tried, quota at each level of its
// tree, the preemption a cycle would make. See engine_impl.h.
#include "fleet/engine_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>

namespace purser::fleet {

auto Engine::Impl::explain(const std::string& name) -> Result<nlohmann::json> {
  using nlohmann::json;
  auto it = wl_index_.find(name);
  if (it == wl_index_.end()) {
    return fail(Error(ErrorCode::kNotFound, fmt::format("no workload named \"{}\"", name)));
  }
  const int id = it->second;
  Wl& w = wls_[u(id)];
  const Cq& q = cqs_[u(w.cq)];
  json out = {{"workload", w.spec.name},
              {"cluster_queue", q.spec.name},
              {"local_queue", w.spec.local_queue},
              {"priority", w.spec.priority}};
  if (w.state == State::kFinished) {
    out["state"] = "finished";
    return out;
  }
  if (w.state == State::kAdmitted) {
    out["state"] = "admitted";
    return out;
  }
  out["state"] = "pending";
  out["reason"] = w.reason.empty() ? json("NotYetAttempted") : json(w.reason);
  out["message"] = w.message;
  out["held"] = w.held;
  out["inadmissible"] = w.inadmissible;
  int64_t ahead = 0;
  if (!w.inadmissible) {
    for (int other : q.active) {
      if (other == id) break;
      ++ahead;
    }
  }
  out["ahead_in_queue"] = ahead;
  if (q.spec.stop_policy != StopPolicy::kNone) {
    out["stopped"] = "the ClusterQueue is stopped (stopPolicy); nothing is admitted from it";
  }
  if (!namespaceMatches(w.cq, w.spec.namespace_)) {
    out["namespace_mismatch"] = fmt::format(
        "namespace \"{}\" is not selected by ClusterQueue \"{}\"", w.spec.namespace_, q.spec.name);
  }
  json pod_sets = json::array();
  for (const auto& ps : w.spec.pod_sets) {
    json flavors = json::array();
    for (const auto& [res, per_pod] : ps.requests) {
      auto g = q.group_of.find(res);
      if (g == q.group_of.end()) {
        flavors.push_back(
            {{"resource", res},
             {"verdict", "not covered"},
             {"detail", fmt::format("ClusterQueue \"{}\" has no quota for {}", q.spec.name, res)}});
        continue;
      }
      for (const auto& fq : q.spec.resource_groups[u(g->second)].flavors) {
        const ResourceFlavor& flavor = world_.flavors[u(flavor_index_.at(fq.flavor))];
        std::string mismatch;
        json entry = {{"flavor", fq.flavor}, {"resource", res}};
        if (!flavorMatches(flavor, ps, &mismatch)) {
          entry["verdict"] = "does not match";
          entry["detail"] = mismatch;
          flavors.push_back(std::move(entry));
          continue;
        }
        const int f = frOf(fq.flavor, res);
        const Node& n = nodes_[u(q.node)];
        const Amount requested = per_pod * ps.count;
        const Amount available = cqAvailable(w.cq, f);
        const Amount idle_own = std::max<Amount>(0, n.nominal[u(f)] - n.usage[u(f)]);
        const Amount most = potential(q.node, f);
        entry["requested"] = requested;
        entry["nominal"] = n.nominal[u(f)];
        entry["in_use"] = n.usage[u(f)];
        entry["available"] = available;
        entry["borrowable"] = std::max<Amount>(0, available - idle_own);
        entry["at_most"] = most;
        if (requested <= available) {
          entry["verdict"] = "fits";
        } else if (requested <= most) {
          entry["verdict"] = "needs preemption or released quota";
        } else {
          entry["verdict"] = "never fits";
        }
        flavors.push_back(std::move(entry));
      }
    }
    pod_sets.push_back({{"name", ps.name},
                        {"count", ps.count},
                        {"min_count", ps.min_count ? json(*ps.min_count) : json(nullptr)},
                        {"flavors", std::move(flavors)}});
  }
  out["pod_sets"] = std::move(pod_sets);
  // What preemption would take, and what the queue's policy allows.
  const PreemptionPolicy& p = q.spec.preemption;
  json preemption = {
      {"within_cluster_queue", p.within_cluster_queue == WithinClusterQueue::kNever ? "Never"
                               : p.within_cluster_queue == WithinClusterQueue::kLowerPriority
                                   ? "LowerPriority"
                                   : "LowerOrNewerEqualPriority"},
      {"reclaim_within_cohort", p.reclaim_within_cohort == ReclaimWithinCohort::kNever ? "Never"
                                : p.reclaim_within_cohort == ReclaimWithinCohort::kAny
                                    ? "Any"
                                    : "LowerPriority"},
      {"borrow_within_cohort",
       p.borrow_within_cohort == BorrowWithinCohort::kNever ? "Never" : "LowerPriority"}};
  if (q.spec.stop_policy == StopPolicy::kNone && !w.held) {
    auto [a, targets] = initialAssignment(w, w.cq);
    preemption["mode"] = a.mode == AssignMode::kFit       ? "fit"
                         : a.mode == AssignMode::kPreempt ? "preempt"
                                                          : "no fit";
    json victims = json::array();
    for (const auto& t : targets) {
      victims.push_back({{"workload", wls_[u(t.wl)].spec.name},
                         {"cluster_queue", cqs_[u(wls_[u(t.wl)].cq)].spec.name},
                         {"priority", wls_[u(t.wl)].spec.priority},
                         {"reason", preemptionReason(t.variant)}});
    }
    preemption["would_preempt"] = std::move(victims);
    if (a.mode == AssignMode::kPreempt && targets.empty()) {
      preemption["why_not"] = fmt::format(
          "no set of workloads this queue's policy lets it preempt frees enough quota "
          "(withinClusterQueue {}, reclaimWithinCohort {}, borrowWithinCohort {})",
          preemption["within_cluster_queue"].get<std::string>(),
          preemption["reclaim_within_cohort"].get<std::string>(),
          preemption["borrow_within_cohort"].get<std::string>());
    }
    if (!a.message.empty()) preemption["assignment"] = a.message;
  }
  out["preemption"] = std::move(preemption);
  return out;
}

}  // namespace purser::fleet
