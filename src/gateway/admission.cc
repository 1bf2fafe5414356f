#include "gateway/admission.h"

#include <algorithm>

namespace purser::gateway {

bool hasRoom(const Route& route, const Target& t, MonoTime now, bool gated) {
  if (coolingDown(t, now)) return false;
  if (t.observed.condition.load(std::memory_order_relaxed) == Condition::kDown) return false;
  const double queue = t.observed.queue.load(std::memory_order_relaxed);
  const double kv = t.observed.kv_cache_usage.load(std::memory_order_relaxed);
  const int64_t since = t.observed.since.load(std::memory_order_relaxed);
  if (kv >= 0 && kv >= route.saturation_kv_cache && since >= 0) return false;
  // While requests wait, a replica whose last scrape found no queue still gets no more than the
  // route's saturation queue beyond what it has finished since: a scrape that caught it between
  // two requests must not flush every waiter into its own first-come queue.
  const bool counted = gated ? queue >= 0 : queue > 0;
  if (counted && queue + static_cast<double>(since) >= route.saturation_queue) return false;
  return true;
}

Target* roomiest(const Route& route, MonoTime now, bool* saturated, bool gated) {
  Target* best = nullptr;
  int64_t best_load = 0;
  if (saturated != nullptr) *saturated = false;
  for (Target* t : allTargets(route)) {
    if (!hasRoom(route, *t, now, gated)) {
      if (saturated != nullptr && !coolingDown(*t, now) &&
          t->observed.condition.load(std::memory_order_relaxed) != Condition::kDown) {
        *saturated = true;
      }
      continue;
    }
    const int64_t load = t->health.in_flight.load(std::memory_order_relaxed) +
                         t->observed.since.load(std::memory_order_relaxed);
    if (best == nullptr || load < best_load) {
      best = t;
      best_load = load;
    }
  }
  return best;
}

void dispatchWaiters(const Route& route, AdmissionQueue& queue, MonoTime now) {
  while (!queue.empty()) {
    Target* t = roomiest(route, now, nullptr, /*gated=*/true);
    if (t == nullptr) return;
    auto w = queue.pop();
    if (!w) return;
    t->observed.since.fetch_add(1, std::memory_order_relaxed);
    w->wake(AdmissionQueue::Outcome::kDispatched, t);
  }
}

std::optional<uint64_t> AdmissionQueue::push(Waiter w) {
  std::optional<Entry> shed;
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    if (size_.load(std::memory_order_relaxed) >= max_waiting_) {
      // Make room by shedding the newest waiter of the least important priority below this one.
      for (size_t p = 0; p < static_cast<size_t>(w.priority) && !shed; ++p) {
        if (levels_[p].size > 0) shed = takeNewest(levels_[p]);
      }
      // Else, of this priority, from the tenant that holds the most of it, when that is more
      // than the arrival's own tenant holds: each tenant keeps its share of the queue.
      if (!shed) {
        Level& l = level(w.priority);
        const std::string* longest = nullptr;
        size_t most = 0;
        for (const auto& [tenant, share] : l.tenants) {
          if (share.size > most) {
            most = share.size;
            longest = &tenant;
          }
        }
        auto own = l.tenants.find(w.tenant);
        const size_t mine = own == l.tenants.end() ? 0 : own->second.size;
        if (longest != nullptr && *longest != w.tenant && most > mine + 1) {
          const std::string victim = *longest;
          shed = takeNewest(l, &victim);
        }
      }
      if (!shed) return std::nullopt;
      where_.erase(shed->id);
      size_.fetch_sub(1, std::memory_order_relaxed);
    }
    id = next_id_++;
    Level& l = level(w.priority);
    Share& share = l.tenants[w.tenant];
    if (share.size == 0) l.turns.push_back(w.tenant);
    auto& team = share.teams[w.team];
    if (team.empty()) share.turns.push_back(w.team);
    where_.emplace(id, Place{w.priority, w.tenant, w.team});
    team.push_back({id, std::move(w)});
    ++share.size;
    ++l.size;
    size_.fetch_add(1, std::memory_order_relaxed);
  }
  if (shed) shed->waiter.wake(Outcome::kShed, nullptr);
  return id;
}

AdmissionQueue::Entry AdmissionQueue::takeAt(Level& l, const std::string& tenant,
                                             const std::string& team,
                                             std::deque<Entry>::iterator at) {
  Share& share = l.tenants[tenant];
  auto& line = share.teams[team];
  Entry e = std::move(*at);
  line.erase(at);
  --share.size;
  --l.size;
  if (line.empty()) {
    share.teams.erase(team);
    share.turns.erase(std::find(share.turns.begin(), share.turns.end(), team));
  }
  if (share.size == 0) {
    l.tenants.erase(tenant);
    l.turns.erase(std::find(l.turns.begin(), l.turns.end(), tenant));
  }
  return e;
}

std::optional<AdmissionQueue::Entry> AdmissionQueue::takeNewest(Level& l,
                                                                const std::string* only) {
  // The newest across the level's lines: the largest id at the back of a team's line.
  std::string tenant, team;
  uint64_t newest = 0;
  for (const auto& [t, share] : l.tenants) {
    if (only != nullptr && t != *only) continue;
    for (const auto& [name, line] : share.teams) {
      if (!line.empty() && line.back().id > newest) {
        newest = line.back().id;
        tenant = t;
        team = name;
      }
    }
  }
  if (newest == 0) return std::nullopt;
  auto& line = l.tenants[tenant].teams[team];
  return takeAt(l, tenant, team, std::prev(line.end()));
}

std::optional<AdmissionQueue::Waiter> AdmissionQueue::pop() {
  std::lock_guard lock(mu_);
  for (size_t p = 3; p-- > 0;) {
    Level& l = levels_[p];
    if (l.size == 0) continue;
    // The tenant whose turn it is, then its team whose turn it is; each goes to the back of its
    // line if it has more waiting.
    const std::string tenant = l.turns.front();
    Share& share = l.tenants[tenant];
    const std::string team = share.turns.front();
    const bool tenant_more = share.size > 1;
    const bool team_more = share.teams[team].size() > 1;
    Entry e = takeAt(l, tenant, team, share.teams[team].begin());
    if (tenant_more) {
      Share& rest = l.tenants[tenant];
      if (team_more) {
        rest.turns.erase(std::find(rest.turns.begin(), rest.turns.end(), team));
        rest.turns.push_back(team);  // its next request waits for the tenant's other teams
      }
      l.turns.erase(std::find(l.turns.begin(), l.turns.end(), tenant));
      l.turns.push_back(tenant);  // and the tenant's next waits for the other tenants
    }
    where_.erase(e.id);
    size_.fetch_sub(1, std::memory_order_relaxed);
    return std::move(e.waiter);
  }
  return std::nullopt;
}

bool AdmissionQueue::remove(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = where_.find(id);
  if (it == where_.end()) return false;
  const Place place = it->second;
  where_.erase(it);
  Level& l = level(place.priority);
  auto& line = l.tenants[place.tenant].teams[place.team];
  (void)takeAt(l, place.tenant, place.team,
               std::find_if(line.begin(), line.end(), [&](const Entry& e) { return e.id == id; }));
  size_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

size_t AdmissionQueue::size() const { return size_.load(std::memory_order_relaxed); }

size_t AdmissionQueue::waiting(Priority p) const {
  std::lock_guard lock(mu_);
  return levels_[static_cast<size_t>(p)].size;
}

}  // namespace purser::gateway
