// Workloads in their queues: submission, admission from outside, finishing, parking and
// retrying the inadmissible, queue order; holds and stops; what the queues look like now.
// See engine_impl.h.
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

auto Engine::Impl::resolveQueue(Workload& w) -> Result<int> {
  if (!w.priority_class.empty()) {
    auto pc = priority_classes_.find(w.priority_class);
    if (pc == priority_classes_.end()) {
      return fail(invalidArgument(fmt::format(
          "Workload \"{}\": no WorkloadPriorityClass named \"{}\"", w.name, w.priority_class)));
    }
    w.priority = pc->second;
  }
  if (!w.cluster_queue.empty() && w.local_queue.empty()) {
    auto it = cq_index_.find(w.cluster_queue);
    if (it == cq_index_.end()) {
      return fail(invalidArgument(
          fmt::format("Workload \"{}\": no ClusterQueue named \"{}\"", w.name, w.cluster_queue)));
    }
    return it->second;
  }
  auto it = local_queues_.find(w.namespace_ + "/" + w.local_queue);
  if (it == local_queues_.end()) {
    return fail(invalidArgument(
        fmt::format("Workload \"{}\": no LocalQueue named \"{}\" in namespace \"{}\"", w.name,
                    w.local_queue, w.namespace_)));
  }
  return it->second;
}

auto Engine::Impl::newWorkload(Workload w) -> Result<int> {
  if (wl_index_.count(w.name) != 0 && wls_[u(wl_index_[w.name])].state != State::kFinished) {
    return fail(invalidArgument(fmt::format("Workload \"{}\" already exists", w.name)));
  }
  if (w.pod_sets.empty()) {
    return fail(invalidArgument(fmt::format("Workload \"{}\" has no pod sets", w.name)));
  }
  // Every total (requests x count, summed over pod sets) must stay far from overflow.
  constexpr Amount kMostTotal = Amount{1} << 60;
  std::map<std::string, Amount> totals;
  for (const auto& ps : w.pod_sets) {
    if (ps.count < 0 || (ps.min_count && (*ps.min_count < 0 || *ps.min_count > ps.count))) {
      return fail(invalidArgument(
          fmt::format("Workload \"{}\": pod set \"{}\" has an invalid count", w.name, ps.name)));
    }
    for (const auto& [res, per_pod] : ps.requests) {
      Amount total = 0;
      if (per_pod < 0 || __builtin_mul_overflow(per_pod, ps.count, &total) || total > kMostTotal ||
          (totals[res] += total) > kMostTotal) {
        return fail(invalidArgument(
            fmt::format("Workload \"{}\": pod set \"{}\" requests more {} than any quota can hold",
                        w.name, ps.name, res)));
      }
    }
  }
  const int cq = PURSER_TRY_VALUE(resolveQueue(w));
  Wl wl;
  wl.spec = std::move(w);
  wl.cq = cq;
  wl.order_ms = wl.spec.queued_ms.value_or(wl.spec.created_ms);
  wl.order_seq = wl.spec.queued_ms ? ++evictions_ : 0;
  if (wl.spec.created_ms != INT64_MIN) now_ms_ = std::max(now_ms_, wl.spec.created_ms);
  const int id = static_cast<int>(wls_.size());
  wl_index_[wl.spec.name] = id;
  wls_.push_back(std::move(wl));
  return id;
}

auto Engine::Impl::addAdmitted(Workload w) -> Result<void> {
  if (!w.admission) {
    return fail(invalidArgument(fmt::format("Workload \"{}\" has no admission", w.name)));
  }
  const std::string cq_name = w.admission->cluster_queue;
  if (cq_index_.count(cq_name) == 0) {
    return fail(invalidArgument(
        fmt::format("Workload \"{}\": no ClusterQueue named \"{}\"", w.name, cq_name)));
  }
  if (w.cluster_queue.empty()) w.cluster_queue = cq_name;
  std::vector<std::pair<int, Amount>> usage;
  std::map<int, Amount> total;
  for (const auto& ps : w.admission->pod_sets) {
    for (const auto& [res, amount] : ps.usage) {
      auto fl = ps.flavors.find(res);
      if (fl == ps.flavors.end()) {
        if (amount == 0) continue;
        return fail(invalidArgument(fmt::format(
            "Workload \"{}\": pod set \"{}\" uses {} without a flavor", w.name, ps.name, res)));
      }
      const int f = frOf(fl->second, res);
      if (f < 0) {
        return fail(invalidArgument(fmt::format("Workload \"{}\": no quota of {} in flavor \"{}\"",
                                                w.name, res, fl->second)));
      }
      total[f] += amount;
    }
  }
  // An admitted workload is placed in its admission's queue directly.
  Workload copy = w;
  copy.local_queue.clear();
  copy.cluster_queue = cq_name;
  const int id = PURSER_TRY_VALUE(newWorkload(std::move(copy)));
  Wl& wl = wls_[u(id)];
  wl.cq = cq_index_[cq_name];
  wl.state = State::kAdmitted;
  wl.usage.assign(total.begin(), total.end());
  // Later admissions rank after it (candidate order prefers the most recently admitted).
  wl.admitted_seq = wl.spec.admitted_ms;
  admit_seq_ = std::max(admit_seq_, wl.spec.admitted_ms);
  cqs_[u(wl.cq)].admitted.push_back(id);
  addWorkloadUsage(id);
  touch(wl.cq);
  // Its placement is held again; one that no longer fits the inventory (the hardware changed)
  // is kept by quota alone, and the caller learns it from status().
  if (options_.placement && !options_.placement->take(wl.spec)) {
    for (auto& ps : wl.spec.admission->pod_sets) ps.placements.clear();
  }
  return {};
}

auto Engine::Impl::finish(const std::string& name) -> Result<void> {
  auto it = wl_index_.find(name);
  if (it == wl_index_.end() || wls_[u(it->second)].state == State::kFinished) {
    return fail(Error(ErrorCode::kNotFound, fmt::format("no workload named \"{}\"", name)));
  }
  const int id = it->second;
  Wl& w = wls_[u(id)];
  Cq& cq = cqs_[u(w.cq)];
  if (w.state == State::kAdmitted) {
    removeWorkloadUsage(id);
    touch(w.cq);
    std::erase(cq.admitted, id);
    w.usage.clear();
    w.spec.admission.reset();
    retryInadmissible(w.cq);
    freePlacement(name);
  } else {
    unqueue(id);
    if (cq.sticky == id) cq.sticky = -1;
  }
  w.state = State::kFinished;
  events_.push_back({Event::Kind::kFinished, name, cq.spec.name, "", "", "", cycles_});
  return {};
}

auto Engine::Impl::retryTree(int root) -> void {
  std::vector<int> stack = {root};
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (nodes_[u(n)].is_cq) {
      Cq& q = cqs_[u(nodes_[u(n)].cq)];
      std::vector<int> still;
      for (int id : q.parked) {
        Wl& w = wls_[u(id)];
        if (!w.held && namespaceMatches(nodes_[u(n)].cq, w.spec.namespace_)) {
          w.inadmissible = false;
          q.active.insert(id);
        } else {
          still.push_back(id);
        }
      }
      q.parked = std::move(still);
    }
    for (int c : nodes_[u(n)].children) stack.push_back(c);
  }
}

auto Engine::Impl::status(const std::string& name) const -> std::optional<WorkloadStatus> {
  auto it = wl_index_.find(name);
  if (it == wl_index_.end()) return std::nullopt;
  const Wl& w = wls_[u(it->second)];
  WorkloadStatus s;
  s.state = w.state == State::kAdmitted   ? WorkloadStatus::State::kAdmitted
            : w.state == State::kFinished ? WorkloadStatus::State::kFinished
                                          : WorkloadStatus::State::kPending;
  s.cluster_queue = cqs_[u(w.cq)].spec.name;
  s.admission = w.spec.admission;
  s.reason = w.reason;
  s.message = w.message;
  s.inadmissible = w.inadmissible;
  s.attempted = w.attempted;
  if (w.order_seq > 0) s.queued_ms = w.order_ms;
  return s;
}

auto Engine::Impl::queues() const -> std::vector<QueueStatus> {
  // Borrowed capacity in each tree, attributed to the queues lending it in proportion to what
  // each has idle and lendable.
  std::vector<std::vector<Amount>> borrowed_in(nodes_.size(), std::vector<Amount>(u(nfr_), 0));
  std::vector<std::vector<Amount>> lendable_in(nodes_.size(), std::vector<Amount>(u(nfr_), 0));
  const auto lendable = [&](const Node& n, int f) {
    const Amount idle = std::max<Amount>(0, n.nominal[u(f)] - n.usage[u(f)]);
    return n.ll[u(f)] == kNone ? idle : std::min(idle, n.ll[u(f)]);
  };
  for (const auto& q : cqs_) {
    const Node& n = nodes_[u(q.node)];
    const size_t root = u(root_of_[u(q.node)]);
    for (int f = 0; f < nfr_; ++f) {
      borrowed_in[root][u(f)] += std::max<Amount>(0, n.usage[u(f)] - n.nominal[u(f)]);
      lendable_in[root][u(f)] += lendable(n, f);
    }
  }
  std::vector<QueueStatus> out;
  for (const auto& q : cqs_) {
    const Node& n = nodes_[u(q.node)];
    const size_t root = u(root_of_[u(q.node)]);
    QueueStatus st;
    st.name = q.spec.name;
    st.cohort = q.spec.cohort;
    st.pending = static_cast<int64_t>(q.active.size() + q.parked.size());
    st.admitted = static_cast<int64_t>(q.admitted.size());
    for (const auto& g : q.spec.resource_groups) {
      for (const auto& fq : g.flavors) {
        for (const auto& res : g.covered) {
          const int f = frOf(fq.flavor, res);
          if (f < 0) continue;
          QueueStatus::Usage use;
          use.flavor = fq.flavor;
          use.resource = res;
          use.nominal = n.nominal[u(f)];
          if (n.bl[u(f)] != kNone) use.borrowing_limit = n.bl[u(f)];
          if (n.ll[u(f)] != kNone) use.lending_limit = n.ll[u(f)];
          use.usage = n.usage[u(f)];
          use.borrowed = std::max<Amount>(0, n.usage[u(f)] - n.nominal[u(f)]);
          const Amount mine = lendable(n, f);
          const Amount pool = lendable_in[root][u(f)];
          const Amount want = borrowed_in[root][u(f)];
          use.lent =
              pool == 0 ? 0
                        : std::min<Amount>(
                              mine, static_cast<Amount>(static_cast<__int128>(want) * mine / pool));
          use.available = cqAvailable(static_cast<int>(&q - cqs_.data()), f);
          st.usage.push_back(std::move(use));
        }
      }
    }
    out.push_back(std::move(st));
  }
  return out;
}

}  // namespace purser::fleet
