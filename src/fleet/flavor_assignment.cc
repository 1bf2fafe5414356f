// Flavor assignment: for each pod set, the flavor of each resource in Kueue's order and
// fungibility rules, and whether it fits, needs preemption or can never fit. See engine_impl.h.
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

auto Engine::Impl::flavorMatches(const ResourceFlavor& f, const PodSet& ps, std::string* why) const
    -> bool {
  for (const auto& t : f.taints) {
    if (t.effect != "NoSchedule" && t.effect != "NoExecute") continue;
    if (!tolerates(ps.tolerations, t) && !tolerates(f.tolerations, t)) {
      *why = fmt::format("untolerated taint {{{} {} {}}} in flavor {}", t.key, t.value, t.effect,
                         f.name);
      return false;
    }
  }
  for (const auto& [key, value] : ps.node_selector) {
    auto it = f.node_labels.find(key);
    if (it != f.node_labels.end() && it->second != value) {
      *why = fmt::format("flavor {} doesn't match node affinity", f.name);
      return false;
    }
  }
  return true;
}

auto Engine::Impl::fitsResourceQuota(int cq, const Wl& w, int f, Amount val, std::string* why,
                                     std::string* category) -> Rep {
  const Cq& q = cqs_[u(cq)];
  const Node& node = nodes_[u(q.node)];
  const Amount max_cap = potential(q.node, f);
  if (val > max_cap) {
    *why =
        fmt::format("insufficient quota for {} in flavor {}, request ({}) > maximum capacity ({})",
                    resourceName(f), flavorName(f), amountText(val), amountText(max_cap));
    *category = kExceedsMaxQuota;
    return {kNoFit, 0};
  }
  auto [level, may_reclaim] = findHeight(cq, f, val);
  const Amount avail = cqAvailable(cq, f);
  if (val <= avail) return {kFit, level};
  *why = fmt::format("insufficient unused quota for {} in flavor {}, {} more needed",
                     resourceName(f), flavorName(f), amountText(val - avail));
  *category = kWaitingForQuota;
  const bool while_borrowing =
      q.spec.preemption.borrow_within_cohort != BorrowWithinCohort::kNever ||
      (options_.fair_sharing &&
       q.spec.preemption.reclaim_within_cohort != ReclaimWithinCohort::kNever);
  if (node.nominal[u(f)] >= val || may_reclaim || while_borrowing) {
    const std::map<int, Amount> request = {{f, val}};
    const std::set<int> need = {f};
    auto targets = getTargets(w, cq, request, need);
    if (targets.empty()) return {kNoCandidates, level};
    bool own = false;
    for (const auto& t : targets) own = own || wls_[u(t.wl)].cq == cq;
    // The borrowing level once the victims are gone.
    for (const auto& t : targets) removeWorkloadUsage(t.wl);
    const int after = findHeight(cq, f, val).first;
    for (const auto& t : targets) addWorkloadUsage(t.wl);
    return {own ? kPreempt : kReclaim, after};
  }
  return {kNoFit, 0};
}

auto Engine::Impl::everFits(int cq, const PodSet& ps, int64_t count, const ResourceGroup& group,
                            const std::map<int, Amount>& assumed, std::string* why) -> bool {
  const Cq& q = cqs_[u(cq)];
  const int64_t least = ps.min_count ? std::min(*ps.min_count, count) : count;
  std::vector<std::string> limits;
  for (const auto& fq : group.flavors) {
    const int flavor = flavor_index_.at(fq.flavor);
    std::string ignored;
    if (!flavorMatches(world_.flavors[u(flavor)], ps, &ignored)) continue;
    bool holds = true;
    for (const auto& r : group.covered) {
      Amount per_pod = 0;
      if (r == "pods" && q.covers_pods) {
        per_pod = 1000;
      } else if (auto it = ps.requests.find(r); it != ps.requests.end()) {
        per_pod = it->second;
      }
      if (per_pod == 0) continue;
      const int f = fr(flavor, resourceIndex(r, false));
      auto before = assumed.find(f);
      const Amount val = per_pod * least + (before == assumed.end() ? 0 : before->second);
      const Amount most = potential(q.node, f);
      if (val > most) {
        holds = false;
        limits.push_back(fmt::format("flavor {} holds at most {} {} ({} asked)", fq.flavor,
                                     amountText(most), r, amountText(val)));
        break;
      }
    }
    if (holds) return true;
  }
  std::string joined;
  for (const auto& l : limits) joined += (joined.empty() ? "" : " and ") + l;
  *why = fmt::format("{} {}: {}", kNeverFitsPrefix, q.spec.name, joined);
  return false;
}

auto Engine::Impl::assign(const Wl& w, int cq, const std::vector<int64_t>& counts) -> Assignment {
  Assignment a;
  const Cq& q = cqs_[u(cq)];
  AssignMode worst = AssignMode::kFit;
  for (size_t i = 0; i < w.spec.pod_sets.size(); ++i) {
    const PodSet& ps = w.spec.pod_sets[i];
    PodSetAssign psa;
    psa.name = ps.name;
    psa.count = counts[i];
    for (const auto& [res, per_pod] : ps.requests) psa.total[res] = per_pod * counts[i];
    if (q.covers_pods) psa.total["pods"] = counts[i] * 1000;  // one pod each, in milli-units
    std::set<int> groups_done;
    PMode ps_mode = kFit;
    for (const auto& [res, total] : psa.total) {
      auto g = q.group_of.find(res);
      if (g == q.group_of.end()) {
        if (total == 0) continue;
        psa.failed = true;
        psa.reasons.push_back(fmt::format("resource {} unavailable in ClusterQueue", res));
        psa.category = kNoMatchingFlavor;
        break;
      }
      if (!groups_done.insert(g->second).second) continue;
      const ResourceGroup& group = q.spec.resource_groups[u(g->second)];
      // The pod set's requests for this group's resources.
      std::map<std::string, Amount> group_requests;
      for (const auto& r : group.covered) {
        auto t = psa.total.find(r);
        if (t != psa.total.end()) group_requests[r] = t->second;
      }
      std::map<std::string, std::pair<int, PMode>> best;
      Rep best_rep{kNoFit, 0};
      std::vector<std::pair<std::string, std::string>> attempts;  // (category, message)
      for (const auto& fq : group.flavors) {
        const int flavor = flavor_index_.at(fq.flavor);
        std::string why;
        if (!flavorMatches(world_.flavors[u(flavor)], ps, &why)) {
          attempts.emplace_back(kNoMatchingFlavor, why);
          continue;
        }
        Rep rep{kFit, 0};
        std::map<std::string, std::pair<int, PMode>> choice;
        for (const auto& [r, v] : group_requests) {
          const int f = fr(flavor, resourceIndex(r, false));
          auto assumed = a.usage.find(f);
          const Amount val = v + (assumed == a.usage.end() ? 0 : assumed->second);
          std::string msg, cat;
          const Rep one = fitsResourceQuota(cq, w, f, val, &msg, &cat);
          if (!msg.empty()) attempts.emplace_back(cat, msg);
          if (isPreferred(rep, one, q.spec.fungibility.preference) || one.pm == kNoFit) {
            rep = one;
          } else if (one.pm == rep.pm) {
            rep.level = std::max(rep.level, one.level);
          }
          if (rep.pm == kNoFit) break;
          choice[r] = {flavor, one.pm};
        }
        if (rep.pm == kNoFit) continue;
        if (!shouldTryNextFlavor(rep, q.spec.fungibility)) {
          best = choice;
          best_rep = rep;
          break;
        }
        if (isPreferred(rep, best_rep, q.spec.fungibility.preference)) {
          best = choice;
          best_rep = rep;
        }
      }
      if (best.empty()) {
        psa.failed = true;
        // The alternatives' least severe reason stands for the group.
        std::string cat = kNoMatchingFlavor;
        int sev = 4;
        for (const auto& [c, m] : attempts) {
          if (severity(c) < sev) {
            sev = severity(c);
            cat = c;
          }
          psa.reasons.push_back(m);
        }
        if (attempts.empty()) psa.reasons.push_back("no flavor of its resource group fits");
        // Kueue's attempts stop at the first resource that does not fit now, so they can say
        // "insufficient unused quota" of a pod set that no flavor could ever hold. When none
        // could, even at its smallest partial count, that is the reason that stands.
        if (cat == kWaitingForQuota) {
          std::string never;
          if (!everFits(cq, ps, counts[i], group, a.usage, &never)) {
            cat = kExceedsMaxQuota;
            psa.reasons.push_back(never);
          }
        }
        psa.category = cat;
        break;
      }
      for (const auto& [r, choice] : best) {
        psa.flavor[r] = choice.first;
        psa.mode[r] = choice.second;
        ps_mode = std::min(ps_mode, choice.second);
      }
      // Reasons are kept for the message even when the pod set ends up fitting by preemption.
      if (best_rep.pm != kFit) {
        for (const auto& [c, m] : attempts) psa.reasons.push_back(m);
      }
      a.borrowing = std::max(a.borrowing, best_rep.level);
    }
    if (psa.failed) {
      a.pod_sets.push_back(std::move(psa));
      worst = AssignMode::kNoFit;
      break;
    }
    for (const auto& [res, total] : psa.total) {
      auto fl = psa.flavor.find(res);
      if (fl == psa.flavor.end() || total == 0) continue;
      const int f = fr(fl->second, resourceIndex(res, false));
      a.usage[f] += total;
      if (psa.mode[res] != kFit) a.need_preemption.insert(f);
    }
    worst = std::min(worst, assignModeOf(ps_mode));
    a.pod_sets.push_back(std::move(psa));
  }
  a.mode = worst;
  // The message and category of what did not fit.
  std::vector<std::string> parts;
  std::string category;
  for (const auto& psa : a.pod_sets) {
    if (!psa.failed && psa.reasons.empty()) continue;
    std::vector<std::string> reasons = psa.reasons;
    std::sort(reasons.begin(), reasons.end());
    reasons.erase(std::unique(reasons.begin(), reasons.end()), reasons.end());
    // That it can never fit is the headline; what is short now follows, in Kueue's order.
    std::stable_partition(reasons.begin(), reasons.end(),
                          [](const std::string& r) { return r.starts_with(kNeverFitsPrefix); });
    std::string joined;
    for (const auto& r : reasons) joined += (joined.empty() ? "" : ", ") + r;
    parts.push_back(fmt::format("couldn't assign flavors to pod set {}: {}", psa.name, joined));
    if (psa.failed && (category.empty() || severity(psa.category) > severity(category))) {
      category = psa.category;
    }
  }
  for (const auto& p : parts) a.message += (a.message.empty() ? "" : "; ") + p;
  a.category = category.empty() ? kWaitingForQuota : category;
  return a;
}

auto Engine::Impl::initialAssignment(const Wl& w, int cq)
    -> std::pair<Assignment, std::vector<Target>> {
  std::vector<int64_t> full;
  for (const auto& ps : w.spec.pod_sets) full.push_back(ps.count);
  Assignment a = assign(w, cq, full);
  if (a.mode == AssignMode::kFit) return {std::move(a), {}};
  if (a.mode == AssignMode::kPreempt) {
    auto targets = getTargets(w, cq, a.usage, a.need_preemption);
    if (!targets.empty()) return {std::move(a), std::move(targets)};
  }
  if (options_.partial_admission) {
    int64_t total_delta = 0;
    std::vector<int64_t> delta;
    for (const auto& ps : w.spec.pod_sets) {
      delta.push_back(ps.count - ps.min_count.value_or(ps.count));
      total_delta += delta.back();
    }
    if (total_delta > 0) {
      const auto countsAt = [&](int64_t i) {
        std::vector<int64_t> c;
        for (size_t k = 0; k < full.size(); ++k) c.push_back(full[k] - delta[k] * i / total_delta);
        return c;
      };
      std::optional<std::pair<Assignment, std::vector<Target>>> found;
      const auto good = [&](int64_t i) -> bool {
        Assignment t = assign(w, cq, countsAt(i));
        if (t.mode == AssignMode::kFit) {
          found = {std::move(t), {}};
          return true;
        }
        if (t.mode == AssignMode::kPreempt) {
          auto victims = getTargets(w, cq, t.usage, t.need_preemption);
          if (!victims.empty()) {
            found = {std::move(t), std::move(victims)};
            return true;
          }
        }
        return false;
      };
      // The smallest reduction that fits (fit is monotone in the reduction).
      int64_t lo = 0, hi = total_delta;
      if (good(hi)) {
        while (lo < hi) {
          const int64_t mid = lo + (hi - lo) / 2;
          if (good(mid)) {
            hi = mid;
          } else {
            lo = mid + 1;
          }
        }
        found.reset();
        good(hi);
        if (found) return std::move(*found);
      }
    }
  }
  return {std::move(a), {}};
}

}  // namespace purser::fleet
