// The admission cycle: nominate each ClusterQueue's head, order the entries (or run the fair
// sharing tournament), reserve quota, preempt or admit; placement on the inventory when there
// is one. See engine_impl.h.
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

auto Engine::Impl::nominate() -> std::vector<Entry> {
  std::vector<Entry> entries;
  for (size_t c = 0; c < cqs_.size(); ++c) {
    Cq& q = cqs_[c];
    if (q.spec.stop_policy != StopPolicy::kNone) continue;
    int head = q.sticky >= 0 && !wls_[u(q.sticky)].inadmissible ? q.sticky : -1;
    if (head < 0) {
      // The first in queue order that is not waiting for its preemptor; StrictFIFO waits
      // behind one that is.
      for (int id : q.active) {
        if (!waitsForPreemptor(id)) {
          head = id;
          break;
        }
        if (q.spec.strategy == QueueingStrategy::kStrictFifo) break;
      }
    }
    if (head < 0) continue;
    Wl& w = wls_[u(head)];
    w.attempted = true;
    Entry e;
    e.wl = head;
    e.cq = static_cast<int>(c);
    if (!namespaceMatches(static_cast<int>(c), w.spec.namespace_)) {
      e.inadmissible = true;
      e.reason = kMisconfigured;
      e.message = "Workload namespace doesn't match ClusterQueue selector";
      entries.push_back(std::move(e));
      continue;
    }
    if (options_.mode == CycleMode::kDrain) {
      // Nomination is a pure function of the tree's state and what the head asks for: a head
      // asking what an earlier one asked, in an unchanged tree, gets its answer.
      Memo& m = memo_[c];
      const int64_t version = tree_version_[u(root_of_[u(q.node)])];
      if (m.version != version) {
        m.by_signature.clear();
        m.version = version;
      }
      if (w.signature.empty()) w.signature = signatureOf(w);
      auto& slot = m.by_signature[w.signature];
      if (!slot) {
        auto [a, targets] = initialAssignment(w, static_cast<int>(c));
        slot = std::make_shared<const Nomination>(Nomination{std::move(a), std::move(targets)});
      }
      e.nomination = slot;
    } else {
      auto [a, targets] = initialAssignment(w, static_cast<int>(c));
      e.nomination =
          std::make_shared<const Nomination>(Nomination{std::move(a), std::move(targets)});
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

auto Engine::Impl::tournament(int node, const std::vector<FairCandidate>& cands,
                              const std::map<int, std::vector<int>>& by_node,
                              const std::vector<Entry>& entries) const -> int {
  int best = -1;
  size_t best_k = 0;
  const auto consider = [&](int c) {
    // The level at which `node` compares: the index of its child on c's path.
    const FairCandidate& fc = cands[u(c)];
    size_t k = 0;
    while (k + 1 < fc.path.size() && nodes_[u(fc.path[k])].parent != node) ++k;
    if (best < 0 || fairBefore(fc, k, cands[u(best)], best_k, entries)) {
      best = c;
      best_k = k;
    }
  };
  for (int child : nodes_[u(node)].children) {
    if (nodes_[u(child)].is_cq) {
      auto it = by_node.find(child);
      if (it == by_node.end()) continue;
      for (int c : it->second) consider(c);
    } else if (const int w = tournament(child, cands, by_node, entries); w >= 0) {
      consider(w);
    }
  }
  return best;
}

auto Engine::Impl::fairNext(const std::vector<Entry>& entries, const std::vector<bool>& done)
    -> int {
  std::vector<FairCandidate> cands;
  std::map<int, std::vector<int>> by_node;  // ClusterQueue node -> its candidates
  std::map<int, std::vector<int>> by_root;  // root node -> candidates in its tree
  for (size_t i = 0; i < entries.size(); ++i) {
    if (done[i]) continue;
    const Entry& e = entries[i];
    if (e.inadmissible) return static_cast<int>(i);  // takes nothing; settle it first
    const int node = cqs_[u(e.cq)].node;
    FairCandidate fc;
    fc.entry = static_cast<int>(i);
    // Simulate the entry's admission; the shares along its path include it.
    for (const auto& [f, v] : e.assignment().usage) addUsage(node, f, v);
    int root = node;
    for (int n = node; n >= 0; n = nodes_[u(n)].parent) {
      root = n;
      if (nodes_[u(n)].parent < 0 && n != node) break;
      fc.path.push_back(n);
      fc.at.push_back(drs(n));
    }
    for (const auto& [f, v] : e.assignment().usage) removeUsage(node, f, v);
    const int c = static_cast<int>(cands.size());
    cands.push_back(std::move(fc));
    by_node[node].push_back(c);
    by_root[root].push_back(c);
  }
  int best = -1;
  for (const auto& [root, members] : by_root) {
    // A ClusterQueue without a cohort is a tree of its own: its candidates compete directly.
    int winner = -1;
    if (nodes_[u(root)].is_cq) {
      for (int c : members) {
        if (winner < 0 || fairBefore(cands[u(c)], 0, cands[u(winner)], 0, entries)) winner = c;
      }
    } else {
      winner = tournament(root, cands, by_node, entries);
    }
    if (winner >= 0 && (best < 0 || fairBefore(cands[u(winner)], 0, cands[u(best)], 0, entries))) {
      best = winner;
    }
  }
  return best < 0 ? -1 : cands[u(best)].entry;
}

auto Engine::Impl::cycle() -> CycleResult {
  ++cycles_;
  CycleResult result;
  std::vector<Entry> entries = nominate();
  // The cycle works on a copy of the usage; reservations and preemptors' usage end with it.
  std::vector<std::vector<Amount>> saved;
  saved.reserve(nodes_.size());
  for (const auto& n : nodes_) saved.push_back(n.usage);
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (!options_.fair_sharing) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return entryBefore(entries[a], entries[b]); });
  }
  std::set<int> victims;
  std::vector<int> admitted;
  std::vector<std::pair<int, Variant>> preempted;
  std::vector<bool> processed(entries.size(), false);
  for (size_t k = 0; k < entries.size(); ++k) {
    size_t i = order[k];
    if (options_.fair_sharing) {
      const int next = fairNext(entries, processed);
      if (next < 0) break;
      i = static_cast<size_t>(next);
    }
    processed[i] = true;
    Entry& e = entries[i];
    Wl& w = wls_[u(e.wl)];
    Cq& q = cqs_[u(e.cq)];
    const bool strict = q.spec.strategy == QueueingStrategy::kStrictFifo;
    const auto park = [&](bool parked) {
      if (parked && !w.inadmissible) result.changed = true;
      setParked(e.wl, parked);
    };
    if (e.inadmissible) {
      w.reason = e.reason;
      w.message = e.message;
      park(true);
      continue;
    }
    const Assignment& a = e.assignment();
    if (a.mode == AssignMode::kNoFit) {
      w.reason = a.category;
      w.message = a.message;
      w.pressing = false;  // gave up: its victims may come back
      if (q.sticky == e.wl) q.sticky = -1;
      park(!strict);
      continue;
    }
    if (a.mode == AssignMode::kPreempt && e.targets().empty()) {
      w.reason = kWaitingForQuota;
      w.message = a.message.empty() ? "no workload can be preempted to make room" : a.message;
      if (q.spec.preemption.reclaim_within_cohort != ReclaimWithinCohort::kAny) {
        reserve(e);
      }
      w.pressing = false;
      if (q.sticky == e.wl) q.sticky = -1;
      park(!strict);
      continue;
    }
    bool overlap = false;
    for (const auto& t : e.targets()) overlap = overlap || victims.count(t.wl) != 0;
    if (overlap) {
      w.reason = kWaitingForQuota;
      w.message = "Workload has overlapping preemption targets with another workload";
      continue;
    }
    // Does it still fit, with every victim so far (and its own) gone?
    std::vector<int> gone(victims.begin(), victims.end());
    for (const auto& t : e.targets()) gone.push_back(t.wl);
    for (int v : gone) removeWorkloadUsage(v);
    bool ok = true;
    for (const auto& [f, v] : a.usage) ok = ok && cqAvailable(e.cq, f) >= v;
    for (int v : gone) addWorkloadUsage(v);
    if (!ok) {
      w.reason = kWaitingForQuota;
      w.message = "Workload no longer fits after processing another workload";
      continue;
    }
    const auto preempt = [&](const std::vector<Target>& targets, const std::string& why) {
      for (const auto& t : targets) {
        victims.insert(t.wl);
        preempted.emplace_back(t.wl, t.variant);
        wls_[u(t.wl)].evicting = true;
        wls_[u(t.wl)].preempted_for = e.wl;
        wls_[u(t.wl)].spare = e.wl;
        wls_[u(t.wl)].signature.clear();  // its nominations now depend on whom it spares
        events_.push_back({Event::Kind::kPreempted, wls_[u(t.wl)].spec.name,
                           cqs_[u(wls_[u(t.wl)].cq)].spec.name, preemptionReason(t.variant),
                           fmt::format("preempted to admit {}", w.spec.name), w.spec.name,
                           cycles_});
      }
      if (!targets.empty()) w.pressing = true;
      w.reason = kWaitingForPreempted;
      w.message =
          fmt::format("{}. Pending the preemption of {} workload(s)",
                      why.empty() ? "waiting for preempted workloads" : why, targets.size());
      if (!strict) {
        if (q.sticky != e.wl) result.changed = true;
        q.sticky = e.wl;
      }
    };
    const auto unplaced = [&](const PlacementHook::Answer& answer) {
      const bool never = answer.verdict == PlacementHook::Verdict::kNever;
      w.reason = never ? kNeverFits : kWaitingForPlacement;
      w.message = answer.message;
      w.pressing = false;
      if (q.sticky == e.wl) q.sticky = -1;
      park(!strict || never);
    };
    if (a.mode == AssignMode::kPreempt) {
      if (options_.placement) {
        // Victims are taken only if, once they are gone, the workload can be placed: one
        // that never fits would otherwise evict them, fail, and let them back, forever.
        std::vector<std::string> gone;
        for (const auto& t : e.targets()) gone.push_back(wls_[u(t.wl)].spec.name);
        PlacementHook::Answer placed =
            options_.placement->place(w.spec, podSetAssignments(a), gone);
        if (placed.verdict != PlacementHook::Verdict::kPlaced) {
          unplaced(placed);
          continue;
        }
      }
      for (const auto& [f, v] : a.usage) addUsage(q.node, f, v);
      preempt(e.targets(), a.message);
      continue;
    }
    if (options_.placement) {
      // Quota fits; so must the hardware.
      const auto flavors = podSetAssignments(a);
      PlacementHook::Answer placed = options_.placement->place(w.spec, flavors, {});
      if (placed.verdict != PlacementHook::Verdict::kPlaced) {
        const bool never = placed.verdict == PlacementHook::Verdict::kNever;
        const std::vector<Target> targets =
            never ? std::vector<Target>{} : placementTargets(e, flavors, victims);
        if (!targets.empty()) {
          for (const auto& [f, v] : a.usage) addUsage(q.node, f, v);
          preempt(targets, placed.message);
          continue;
        }
        unplaced(placed);
        continue;
      }
      e.placements = std::move(placed.pod_sets);
      // Taken now, so the heads after it in this cycle see the room gone.
      Workload taken = w.spec;
      taken.admission = admissionOf(e);
      (void)options_.placement->take(taken);
    }
    for (const auto& [f, v] : a.usage) addUsage(q.node, f, v);
    admitted.push_back(static_cast<int>(i));
  }
  // Back to the cache's usage; then apply what the cycle decided.
  for (size_t n = 0; n < nodes_.size(); ++n) nodes_[n].usage = std::move(saved[n]);
  for (int i : admitted) admit(entries[u(i)]);
  for (const auto& [id, variant] : preempted) {
    evict(id);
    result.preempted.emplace_back(wls_[u(id)].spec.name, preemptionReason(variant));
  }
  for (int i : admitted) result.admitted.push_back(wls_[u(entries[u(i)].wl)].spec.name);
  result.changed = result.changed || !admitted.empty() || !preempted.empty();
  return result;
}

auto Engine::Impl::placementTargets(const Entry& e, const std::vector<PodSetAssignment>& flavors,
                                    const std::set<int>& victims) -> std::vector<Target> {
  const Wl& pre = wls_[u(e.wl)];
  const PreemptionPolicy& policy = cqs_[u(e.cq)].spec.preemption;
  const int root = root_of_[u(cqs_[u(e.cq)].node)];
  std::vector<int> cands;
  for (size_t c = 0; c < cqs_.size(); ++c) {
    const int cq = static_cast<int>(c);
    const bool same = cq == e.cq;
    if (!same && root_of_[u(cqs_[c].node)] != root) continue;
    for (int id : cqs_[c].admitted) {
      const Wl& w = wls_[u(id)];
      if (w.evicting || id == pre.spare || victims.count(id) != 0) continue;
      if (!mayPreempt(pre.spec, w.spec)) continue;
      if (same) {
        if (!satisfies(pre.spec, w.spec, 0, static_cast<int>(policy.within_cluster_queue))) {
          continue;
        }
      } else {
        if (!satisfies(pre.spec, w.spec, 1, static_cast<int>(policy.reclaim_within_cohort))) {
          continue;
        }
        std::set<int> frs;
        for (const auto& [f, v] : w.usage) frs.insert(f);
        if (withinNominal(cqs_[c].node, frs)) continue;
      }
      cands.push_back(id);
    }
  }
  std::sort(cands.begin(), cands.end(), [&](int a, int b) { return candidateBefore(e.cq, a, b); });
  // Each try is a placement over the fleet: bound them.
  constexpr size_t kMaxTried = 64;
  if (cands.size() > kMaxTried) cands.resize(kMaxTried);
  std::vector<std::string> gone;
  std::vector<int> chosen;
  bool fits = false;
  for (int id : cands) {
    gone.push_back(wls_[u(id)].spec.name);
    chosen.push_back(id);
    if (options_.placement->place(pre.spec, flavors, gone).verdict ==
        PlacementHook::Verdict::kPlaced) {
      fits = true;
      break;
    }
  }
  if (!fits) return {};
  // The fewest: drop each one (latest first) that is not needed.
  for (size_t k = chosen.size() - 1; k-- > 0;) {
    std::vector<std::string> without;
    for (size_t j = 0; j < chosen.size(); ++j) {
      if (j != k) without.push_back(wls_[u(chosen[j])].spec.name);
    }
    if (options_.placement->place(pre.spec, flavors, without).verdict ==
        PlacementHook::Verdict::kPlaced) {
      chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  std::vector<Target> out;
  for (int id : chosen) {
    out.push_back(
        {id, wls_[u(id)].cq == e.cq ? Variant::kWithinCq : Variant::kReclaimWithoutBorrowing});
  }
  return out;
}

auto Engine::Impl::admit(const Entry& e) -> void {
  Wl& w = wls_[u(e.wl)];
  Cq& q = cqs_[u(e.cq)];
  unqueue(e.wl);
  if (q.sticky == e.wl) q.sticky = -1;
  w.state = State::kAdmitted;
  w.evicting = false;
  w.pressing = false;
  if (w.spare >= 0) {
    w.spare = -1;
    w.signature.clear();
  }
  w.usage.assign(e.assignment().usage.begin(), e.assignment().usage.end());
  w.admitted_seq = ++admit_seq_;
  Admission adm = admissionOf(e);
  w.spec.admission = adm;
  w.reason.clear();
  w.message.clear();
  q.admitted.push_back(e.wl);
  addWorkloadUsage(e.wl);
  touch(e.cq);
  events_.push_back({Event::Kind::kAdmitted, w.spec.name, q.spec.name, "", "", "", cycles_});
}

auto Engine::Impl::evict(int id, const std::string& reason, const std::string& message) -> void {
  Wl& w = wls_[u(id)];
  Cq& q = cqs_[u(w.cq)];
  if (w.state != State::kAdmitted) return;
  removeWorkloadUsage(id);
  touch(w.cq);
  std::erase(q.admitted, id);
  w.usage.clear();
  w.spec.admission.reset();
  freePlacement(w.spec.name);
  w.state = State::kPending;
  w.evicting = false;
  w.inadmissible = false;
  w.reason = reason == "Preempted" ? std::string(kWaitingForQuota) : reason;
  w.message = message;
  w.order_ms = now_ms_;
  w.order_seq = ++evictions_;
  q.active.insert(id);
  events_.push_back({Event::Kind::kEvicted, w.spec.name, q.spec.name, reason,
                     reason == "Preempted" ? std::string() : message, "", cycles_});
  retryInadmissible(w.cq);
}

auto Engine::Impl::preemptionTargets(const Workload& incoming, const std::string& cq_name,
                                     const GivenAssignment& given)
    -> Result<std::vector<std::pair<std::string, std::string>>> {
  auto cq = cq_index_.find(cq_name);
  if (cq == cq_index_.end()) {
    return fail(invalidArgument(fmt::format("no ClusterQueue named \"{}\"", cq_name)));
  }
  Wl pre;
  pre.spec = incoming;
  pre.cq = cq->second;
  std::map<int, Amount> request;
  std::set<int> need;
  for (const auto& ps : incoming.pod_sets) {
    auto g = given.pod_sets.find(ps.name);
    if (g == given.pod_sets.end()) continue;
    const int64_t count = g->second.count > 0 ? g->second.count : ps.count;
    std::map<std::string, Amount> totals;
    for (const auto& [res, per_pod] : ps.requests) totals[res] = per_pod * count;
    if (cqs_[u(cq->second)].covers_pods) totals["pods"] = count * 1000;
    for (const auto& [res, fl] : g->second.flavors) {
      const int f = frOf(fl.first, res);
      if (f < 0) continue;
      auto t = totals.find(res);
      if (t != totals.end()) request[f] += t->second;
      if (fl.second) need.insert(f);
    }
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& t : getTargets(pre, cq->second, request, need)) {
    out.emplace_back(wls_[u(t.wl)].spec.name, preemptionReason(t.variant));
  }
  return out;
}

}  // namespace purser::fleet
