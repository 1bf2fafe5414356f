// Fair sharing: the dominant resource share of every node and the preemption targets that
// keep shares fair (Kueue's fair sharing strategies). See engine_impl.h.
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

auto Engine::Impl::fairTargets(const Wl& pre, int cq, const std::map<int, Amount>& request,
                               const std::set<int>& need) -> std::vector<Target> {
  const Cq& q = cqs_[u(cq)];
  const PreemptionPolicy& policy = q.spec.preemption;
  // Candidates per queue, in candidate order.
  std::map<int, std::vector<int>> by_cq;
  if (policy.within_cluster_queue != WithinClusterQueue::kNever) {
    for (int id : q.admitted) {
      const Wl& w = wls_[u(id)];
      if (w.evicting || id == pre.spare || !usesAny(w, need)) continue;
      if (!mayPreempt(pre.spec, w.spec)) continue;
      if (satisfies(pre.spec, w.spec, 0, static_cast<int>(policy.within_cluster_queue))) {
        by_cq[cq].push_back(id);
      }
    }
  }
  int root = q.node;
  while (nodes_[u(root)].parent >= 0) root = nodes_[u(root)].parent;
  if (nodes_[u(q.node)].parent >= 0 &&
      policy.reclaim_within_cohort != ReclaimWithinCohort::kNever) {
    std::vector<int> stack = {root};
    while (!stack.empty()) {
      const int n = stack.back();
      stack.pop_back();
      const Node& node = nodes_[u(n)];
      for (int c : node.children) stack.push_back(c);
      if (!node.is_cq || node.cq == cq) continue;
      bool borrowing = false;
      for (int f : need) borrowing = borrowing || node.usage[u(f)] > node.nominal[u(f)];
      if (!borrowing) continue;
      for (int id : cqs_[u(node.cq)].admitted) {
        const Wl& w = wls_[u(id)];
        if (w.evicting || id == pre.spare || !usesAny(w, need)) continue;
        if (!mayPreempt(pre.spec, w.spec)) continue;
        if (satisfies(pre.spec, w.spec, 1, static_cast<int>(policy.reclaim_within_cohort))) {
          by_cq[node.cq].push_back(id);
        }
      }
    }
  }
  for (auto& [_, list] : by_cq) {
    std::sort(list.begin(), list.end(), [&](int a, int b) { return candidateBefore(cq, a, b); });
  }
  if (by_cq.empty()) return {};
  // The incoming usage counts in every share; it is taken out for each fit check.
  const int pnode = q.node;
  for (const auto& [f, v] : request) addUsage(pnode, f, v);
  const auto fitsNow = [&]() {
    for (const auto& [f, v] : request) removeUsage(pnode, f, v);
    const bool ok = fits(cq, request, true);
    for (const auto& [f, v] : request) addUsage(pnode, f, v);
    return ok;
  };
  std::vector<Target> taken;
  const auto take = [&](int id, Variant v) {
    removeWorkloadUsage(id);
    taken.push_back({id, v});
  };
  // The child of the least common ancestor on each side ("almost LCA").
  const auto almostLca = [&](int a_node, int b_node) -> std::pair<int, int> {
    std::vector<int> pa, pb;
    for (int n = a_node; n >= 0; n = nodes_[u(n)].parent) pa.push_back(n);
    for (int n = b_node; n >= 0; n = nodes_[u(n)].parent) pb.push_back(n);
    std::reverse(pa.begin(), pa.end());
    std::reverse(pb.begin(), pb.end());
    size_t i = 0;
    while (i < pa.size() && i < pb.size() && pa[i] == pb[i]) ++i;
    return {pa[std::min(i, pa.size() - 1)], pb[std::min(i, pb.size() - 1)]};
  };
  bool done = false;
  std::map<int, std::vector<int>> retry;
  // The tournament: the queue whose share is highest gives up a workload next.
  std::set<int> pruned;
  std::function<int(int)> nextTarget = [&](int cohort) -> int {
    int best_cq = -1;
    Share best_cq_share;
    int best_cohort = -1;
    Share best_cohort_share;
    for (int c : nodes_[u(cohort)].children) {
      if (pruned.count(c) != 0) continue;
      const Node& cn = nodes_[u(c)];
      const Share s = drs(c);
      if (cn.is_cq) {
        auto list = by_cq.find(cn.cq);
        if ((s.value == 0 && !s.borrowing && cn.cq != cq) || list == by_cq.end() ||
            list->second.empty()) {
          continue;
        }
        if (best_cq < 0 || compareShare(s, best_cq_share) > 0 ||
            (compareShare(s, best_cq_share) == 0 &&
             candidateBefore(cq, list->second.front(), by_cq[nodes_[u(best_cq)].cq].front()))) {
          best_cq = c;
          best_cq_share = s;
        }
      } else {
        bool ancestor = false;
        for (int n = pnode; n >= 0; n = nodes_[u(n)].parent) ancestor = ancestor || n == c;
        if (s.value == 0 && !s.borrowing && !ancestor) continue;
        if (best_cohort < 0 || compareShare(s, best_cohort_share) >= 0) {
          best_cohort = c;
          best_cohort_share = s;
        }
      }
    }
    if (best_cq < 0 && best_cohort < 0) {
      pruned.insert(cohort);
      return -1;
    }
    if (best_cohort >= 0 && (best_cq < 0 || compareShare(best_cohort_share, best_cq_share) >= 0)) {
      const int t = nextTarget(best_cohort);
      if (t >= 0) return t;
      return nextTarget(cohort);
    }
    return best_cq;
  };
  const auto withinNominalWithIncoming = [&]() {
    const Node& node = nodes_[u(pnode)];
    for (int f : need) {
      if (node.usage[u(f)] > node.nominal[u(f)]) return false;
    }
    return true;
  };
  if (nodes_[u(pnode)].parent < 0) {
    // No cohort: only the queue's own workloads.
    for (int id : by_cq[cq]) {
      take(id, Variant::kWithinCq);
      if (fitsNow()) {
        done = true;
        break;
      }
    }
  } else {
    const bool pre_within = withinNominalWithIncoming();
    for (;;) {
      const int t = nextTarget(root);
      if (t < 0) break;
      const int tcq = nodes_[u(t)].cq;
      auto& list = by_cq[tcq];
      if (tcq == cq) {
        const int id = list.front();
        list.erase(list.begin());
        take(id, Variant::kWithinCq);
      } else if (pre_within) {
        const int id = list.front();
        list.erase(list.begin());
        take(id, Variant::kHierarchicalReclaim);
      } else {
        auto [pre_side, tgt_side] = almostLca(pnode, t);
        const Share pre_new = drs(pre_side);
        const Share tgt_old = drs(tgt_side);
        if (std::isinf(pre_new.value) && !std::isinf(tgt_old.value)) {
          for (int id : list) retry[tcq].push_back(id);
          list.clear();
          continue;
        }
        bool removed = false;
        while (!list.empty()) {
          const int id = list.front();
          list.erase(list.begin());
          removeWorkloadUsage(id);
          const Share tgt_new = drs(tgt_side);
          addWorkloadUsage(id);
          if (compareShare(pre_new, tgt_new) <= 0) {
            take(id, Variant::kReclaimWhileBorrowing);
            removed = true;
            break;
          }
          retry[tcq].push_back(id);
        }
        if (!removed) continue;
      }
      if (fitsNow()) {
        done = true;
        break;
      }
    }
    if (!done && !retry.empty()) {
      pruned.clear();
      by_cq = retry;
      std::set<int> used;
      for (;;) {
        const int t = nextTarget(root);
        if (t < 0) break;
        const int tcq = nodes_[u(t)].cq;
        auto [pre_side, tgt_side] = almostLca(pnode, t);
        const Share pre_new = drs(pre_side);
        const Share tgt_old = drs(tgt_side);
        auto& list = by_cq[tcq];
        if (compareShare(pre_new, tgt_old) < 0 && !list.empty()) {
          take(list.front(), Variant::kReclaimWhileBorrowing);
          list.clear();
          if (fitsNow()) {
            done = true;
            break;
          }
        }
        list.clear();
      }
    }
  }
  std::vector<Target> out;
  if (done) {
    std::vector<bool> keep(taken.size(), true);
    for (int i = static_cast<int>(taken.size()) - 2; i >= 0; --i) {
      addWorkloadUsage(taken[u(i)].wl);
      if (fitsNow()) {
        keep[u(i)] = false;
      } else {
        removeWorkloadUsage(taken[u(i)].wl);
      }
    }
    for (size_t i = 0; i < taken.size(); ++i) {
      if (keep[i]) out.push_back(taken[i]);
    }
  }
  for (size_t i = 0; i < taken.size(); ++i) {
    bool already = false;
    for (const auto& o : out) already = already || o.wl == taken[i].wl;
    // Everything taken is put back; dropped ones were put back during the fill-back pass.
    if (already || !done) addWorkloadUsage(taken[i].wl);
  }
  for (const auto& [f, v] : request) removeUsage(pnode, f, v);
  // Fair-sharing reasons: in-queue stays, reclaim within nominal, otherwise fair sharing.
  for (auto& t : out) {
    if (t.variant == Variant::kReclaimWhileBorrowing) t.variant = Variant::kNever;
  }
  return out;
}

}  // namespace purser::fleet
