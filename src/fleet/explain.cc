// Why a workload waits (or runs): each pod set's flavors tried, quota at each level of its
// tree, the preemption a cycle would make. See engine_impl.h; api/fleet_views.cc renders it.
#include "fleet/engine_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace purser::fleet {

auto Engine::Impl::explain(const std::string& name) -> Result<Explanation> {
  auto it = wl_index_.find(name);
  if (it == wl_index_.end()) {
    return fail(Error(ErrorCode::kNotFound, fmt::format("no workload named \"{}\"", name)));
  }
  const int id = it->second;
  Wl& w = wls_[u(id)];
  const Cq& q = cqs_[u(w.cq)];
  Explanation out;
  out.workload = w.spec.name;
  out.cluster_queue = q.spec.name;
  out.local_queue = w.spec.local_queue;
  out.priority = w.spec.priority;
  if (w.state == State::kFinished) {
    out.state = Explanation::State::kFinished;
    return out;
  }
  if (w.state == State::kAdmitted) {
    out.state = Explanation::State::kAdmitted;
    return out;
  }
  out.state = Explanation::State::kPending;
  out.reason = w.reason;
  out.message = w.message;
  out.held = w.held;
  out.inadmissible = w.inadmissible;
  if (!w.inadmissible) {
    for (int other : q.active) {
      if (other == id) break;
      ++out.ahead_in_queue;
    }
  }
  out.queue_stopped = q.spec.stop_policy != StopPolicy::kNone;
  out.namespace_mismatch = !namespaceMatches(w.cq, w.spec.namespace_);
  out.namespace_ = w.spec.namespace_;
  using Try = Explanation::FlavorTry;
  for (const auto& ps : w.spec.pod_sets) {
    Explanation::PodSet set{ps.name, ps.count, ps.min_count, {}};
    for (const auto& [res, per_pod] : ps.requests) {
      auto g = q.group_of.find(res);
      if (g == q.group_of.end()) {
        set.flavors.push_back(
            {.resource = res,
             .verdict = Try::Verdict::kNotCovered,
             .detail = fmt::format("ClusterQueue \"{}\" has no quota for {}", q.spec.name, res)});
        continue;
      }
      for (const auto& fq : q.spec.resource_groups[u(g->second)].flavors) {
        const ResourceFlavor& flavor = world_.flavors[u(flavor_index_.at(fq.flavor))];
        Try t{.flavor = fq.flavor, .resource = res};
        if (!flavorMatches(flavor, ps, &t.detail)) {
          t.verdict = Try::Verdict::kDoesNotMatch;
          set.flavors.push_back(std::move(t));
          continue;
        }
        const int f = frOf(fq.flavor, res);
        const Node& n = nodes_[u(q.node)];
        t.requested = per_pod * ps.count;
        t.nominal = n.nominal[u(f)];
        t.in_use = n.usage[u(f)];
        t.available = cqAvailable(w.cq, f);
        t.borrowable = std::max<Amount>(0, t.available - std::max<Amount>(0, t.nominal - t.in_use));
        t.at_most = potential(q.node, f);
        t.verdict = t.requested <= t.available ? Try::Verdict::kFits
                    : t.requested <= t.at_most ? Try::Verdict::kNeedsPreemption
                                               : Try::Verdict::kNeverFits;
        set.flavors.push_back(std::move(t));
      }
    }
    out.pod_sets.push_back(std::move(set));
  }
  // What preemption would take, and what the queue's policy allows.
  out.policy = q.spec.preemption;
  if (q.spec.stop_policy == StopPolicy::kNone && !w.held) {
    auto [a, targets] = initialAssignment(w, w.cq);
    out.tried = true;
    out.mode = a.mode == AssignMode::kFit       ? Explanation::Mode::kFit
               : a.mode == AssignMode::kPreempt ? Explanation::Mode::kPreempt
                                                : Explanation::Mode::kNoFit;
    for (const auto& t : targets) {
      const Wl& victim = wls_[u(t.wl)];
      out.would_preempt.push_back({victim.spec.name, cqs_[u(victim.cq)].spec.name,
                                   victim.spec.priority, preemptionReason(t.variant)});
    }
    out.assignment = a.message;
  }
  return out;
}

}  // namespace purser::fleet
