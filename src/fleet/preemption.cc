// Preemption within a ClusterQueue and reclaiming across its Cohort: who may be preempted
// for whom, and the fewest victims in Kueue's candidate order. See engine_impl.h.
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

auto Engine::Impl::getTargets(const Wl& pre, int cq, const std::map<int, Amount>& request,
                              const std::set<int>& need) -> std::vector<Target> {
  if (options_.fair_sharing) return fairTargets(pre, cq, request, need);
  const Cq& q = cqs_[u(cq)];
  const PreemptionPolicy& policy = q.spec.preemption;
  struct Cand {
    int wl;
    int lca;
    Variant variant;
  };
  std::vector<Cand> same, hierarchy, priority;
  const auto classify = [&](const Wl& w, bool advantage) {
    if (!usesAny(w, need) || !mayPreempt(pre.spec, w.spec)) return Variant::kNever;
    if (w.cq == cq) {
      return satisfies(pre.spec, w.spec, 0, static_cast<int>(policy.within_cluster_queue))
                 ? Variant::kWithinCq
                 : Variant::kNever;
    }
    if (!satisfies(pre.spec, w.spec, 1, static_cast<int>(policy.reclaim_within_cohort))) {
      return Variant::kNever;
    }
    if (advantage) return Variant::kHierarchicalReclaim;
    if (policy.borrow_within_cohort == BorrowWithinCohort::kNever) {
      return Variant::kReclaimWithoutBorrowing;
    }
    if (w.spec.priority >= pre.spec.priority ||
        (policy.max_priority_threshold && w.spec.priority > *policy.max_priority_threshold)) {
      return Variant::kReclaimWithoutBorrowing;
    }
    return Variant::kReclaimWhileBorrowing;
  };
  if (policy.within_cluster_queue != WithinClusterQueue::kNever) {
    for (int id : q.admitted) {
      if (wls_[u(id)].evicting || id == pre.spare) continue;
      const Variant v = classify(wls_[u(id)], false);
      if (v != Variant::kNever) same.push_back({id, q.node, v});
    }
  }
  const Node& pnode = nodes_[u(q.node)];
  if (pnode.parent >= 0 && policy.reclaim_within_cohort != ReclaimWithinCohort::kNever) {
    bool advantage = true;
    std::map<int, Amount> remaining;
    for (const auto& [f, v] : request) {
      if (pnode.usage[u(f)] + v > pnode.nominal[u(f)]) advantage = false;
      remaining[f] = std::max<Amount>(0, v - localAvailable(pnode, f));
    }
    std::function<void(int, int, int, bool)> collect = [&](int cohort, int skip, int lca,
                                                           bool adv) {
      for (int c : nodes_[u(cohort)].children) {
        if (c == skip) continue;
        const Node& cn = nodes_[u(c)];
        if (withinNominal(c, need)) continue;
        if (!cn.is_cq) {
          collect(c, skip, lca, adv);
          continue;
        }
        if (cn.cq == cq) continue;
        for (int id : cqs_[u(cn.cq)].admitted) {
          if (wls_[u(id)].evicting || id == pre.spare) continue;
          const Variant v = classify(wls_[u(id)], adv);
          if (v == Variant::kNever) continue;
          (v == Variant::kHierarchicalReclaim ? hierarchy : priority).push_back({id, lca, v});
        }
      }
    };
    int prev = q.node;
    for (int n = pnode.parent; n >= 0; n = nodes_[u(n)].parent) {
      collect(n, prev, n, advantage);
      const Node& cn = nodes_[u(n)];
      bool fits_here = true;
      for (auto& [f, rem] : remaining) {
        if (cn.usage[u(f)] + rem > cn.subtree[u(f)]) fits_here = false;
        rem = std::max<Amount>(0, rem - localAvailable(cn, f));
      }
      advantage = advantage || fits_here;
      prev = n;
    }
  }
  // Kueue's candidate order: hierarchical reclaims, then other queues', then the queue's own,
  // each by candidateBefore. The fields it reads are copied beside each candidate first: a
  // cohort can hold thousands, and the comparisons would otherwise each reach into two
  // workloads' records. Sorted only as far as the search reads: a preemption usually takes a
  // few, and a search that borrows never reads the candidates only reclaimable without it.
  struct Keyed {
    bool evicting;
    bool own;
    int32_t priority;
    int64_t admitted_seq;
    int wl;
    size_t index;  // into `ordered`
  };
  std::vector<Cand> ordered;
  ordered.reserve(hierarchy.size() + priority.size() + same.size());
  std::vector<Keyed> all_keys;
  all_keys.reserve(ordered.capacity());
  std::vector<size_t> segment_ends;  // in `all_keys`
  for (auto* seg : {&hierarchy, &priority, &same}) {
    for (const Cand& c : *seg) {
      const Wl& w = wls_[u(c.wl)];
      all_keys.push_back(
          {w.evicting, w.cq == cq, w.spec.priority, w.admitted_seq, c.wl, ordered.size()});
      ordered.push_back(c);
    }
    segment_ends.push_back(all_keys.size());
  }
  const auto before = [&](const Keyed& a, const Keyed& b) {
    if (a.evicting != b.evicting) return a.evicting;
    if (a.own != b.own) return b.own;
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.admitted_seq != b.admitted_seq) return a.admitted_seq > b.admitted_seq;
    return candidateBefore(cq, a.wl, b.wl);  // the same up to here: by uid, then name
  };
  // The candidates a search may take, in order, sorted as they are read. A search that may
  // take any reads (and sorts, within each segment) the full list in place.
  struct Order {
    std::vector<Keyed>* keys;
    std::vector<std::pair<size_t, size_t>> segments;  // [begin, end) of each, in `keys`
    size_t sorted_to = 0;                             // keys[0, sorted_to) is final
  };
  std::vector<Keyed> filtered;
  const auto orderFor = [&](bool borrow) {
    Order o{borrow ? &filtered : &all_keys, {}, 0};
    size_t from = 0;
    filtered.clear();
    for (size_t end : segment_ends) {
      if (!borrow) {
        o.segments.emplace_back(from, end);
        from = end;
        continue;
      }
      const size_t begin = filtered.size();
      for (size_t i = from; i < end; ++i) {
        if (ordered[all_keys[i].index].variant != Variant::kReclaimWithoutBorrowing) {
          filtered.push_back(all_keys[i]);
        }
      }
      o.segments.emplace_back(begin, filtered.size());
      from = end;
    }
    return o;
  };
  const auto candidate = [&](Order& o, size_t i) -> const Cand& {
    while (i >= o.sorted_to) {
      const auto seg = std::find_if(o.segments.begin(), o.segments.end(),
                                    [&](const auto& s) { return o.sorted_to < s.second; });
      // Double what is sorted of this segment (at least 32 more); the rest stays unordered.
      const size_t upto =
          std::min(seg->second, o.sorted_to + std::max<size_t>(32, o.sorted_to - seg->first));
      const auto first = o.keys->begin() + static_cast<std::ptrdiff_t>(o.sorted_to);
      const auto middle = o.keys->begin() + static_cast<std::ptrdiff_t>(upto);
      const auto last = o.keys->begin() + static_cast<std::ptrdiff_t>(seg->second);
      if (middle == last) {
        std::sort(first, last, before);
      } else {
        std::nth_element(first, middle, last, before);
        std::sort(first, middle, before);
      }
      o.sorted_to = upto;
    }
    return ordered[(*o.keys)[i].index];
  };
  const bool bwc_forbidden = policy.borrow_within_cohort == BorrowWithinCohort::kNever;
  bool under_nominal = true;
  for (int f : need) {
    if (!(pnode.usage[u(f)] < pnode.nominal[u(f)])) under_nominal = false;
  }
  const bool no_other = hierarchy.empty() && priority.empty();
  std::vector<bool> attempts;
  if (no_other || (bwc_forbidden && !under_nominal)) {
    attempts = {true};
  } else if (bwc_forbidden && hierarchy.empty()) {
    attempts = {false, true};
  } else {
    attempts = {true, false};
  }
  // Whether a cross-queue candidate is still worth taking.
  const auto valid = [&](const Cand& c, bool borrow) {
    const Wl& w = wls_[u(c.wl)];
    if (w.cq == cq) return true;
    if (borrow && c.variant == Variant::kReclaimWithoutBorrowing) return false;
    const int wnode = cqs_[u(w.cq)].node;
    if (withinNominal(wnode, need)) return false;
    for (int n = nodes_[u(wnode)].parent; n >= 0 && n != c.lca; n = nodes_[u(n)].parent) {
      if (withinNominal(n, need)) return false;
    }
    return true;
  };
  for (bool borrow : attempts) {
    std::vector<Cand> taken;
    bool done = false;
    Order order = orderFor(borrow);
    for (size_t i = 0; i < order.keys->size(); ++i) {
      const Cand& c = candidate(order, i);
      if (!valid(c, borrow)) continue;
      removeWorkloadUsage(c.wl);
      taken.push_back(c);
      if (fits(cq, request, borrow)) {
        done = true;
        break;
      }
    }
    if (done) {
      // Put back every victim it can do without, newest first; the last one stays.
      std::vector<bool> keep(taken.size(), true);
      for (int i = static_cast<int>(taken.size()) - 2; i >= 0; --i) {
        addWorkloadUsage(taken[u(i)].wl);
        if (fits(cq, request, borrow)) {
          keep[u(i)] = false;
        } else {
          removeWorkloadUsage(taken[u(i)].wl);
        }
      }
      std::vector<Target> out;
      for (size_t i = 0; i < taken.size(); ++i) {
        if (keep[i]) {
          addWorkloadUsage(taken[i].wl);
          out.push_back({taken[i].wl, taken[i].variant});
        }
      }
      return out;
    }
    for (const auto& c : taken) addWorkloadUsage(c.wl);
  }
  return {};
}

}  // namespace purser::fleet
