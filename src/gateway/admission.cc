#include "gateway/admission.h"

#include <algorithm>

namespace purser::gateway {

bool hasRoom(const Route& route, const Target& t, MonoTime now) {
  if (coolingDown(t, now)) return false;
  if (t.observed.condition.load(std::memory_order_relaxed) == Condition::kDown) return false;
  const double queue = t.observed.queue.load(std::memory_order_relaxed);
  const double kv = t.observed.kv_cache_usage.load(std::memory_order_relaxed);
  const int64_t since = t.observed.since.load(std::memory_order_relaxed);
  if (kv >= 0 && kv >= route.saturation_kv_cache && since >= 0) return false;
  if (queue > 0 && queue + static_cast<double>(since) >= route.saturation_queue) return false;
  return true;
}

Target* roomiest(const Route& route, MonoTime now, bool* saturated) {
  Target* best = nullptr;
  int64_t best_load = 0;
  if (saturated != nullptr) *saturated = false;
  for (Target* t : allTargets(route)) {
    if (!hasRoom(route, *t, now)) {
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
    Target* t = roomiest(route, now);
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
      if (!shed) return std::nullopt;
      where_.erase(shed->id);
      size_.fetch_sub(1, std::memory_order_relaxed);
    }
    id = next_id_++;
    Level& l = level(w.priority);
    auto& team = l.teams[w.team];
    if (team.empty()) l.turns.push_back(w.team);
    where_.emplace(id, std::pair{w.priority, w.team});
    team.push_back({id, std::move(w)});
    ++l.size;
    size_.fetch_add(1, std::memory_order_relaxed);
  }
  if (shed) shed->waiter.wake(Outcome::kShed, nullptr);
  return id;
}

std::optional<AdmissionQueue::Entry> AdmissionQueue::takeNewest(Level& l) {
  // The newest across the level's teams: the largest id at the back of a team's line.
  std::string team;
  uint64_t newest = 0;
  for (const auto& [name, line] : l.teams) {
    if (!line.empty() && line.back().id > newest) {
      newest = line.back().id;
      team = name;
    }
  }
  if (newest == 0) return std::nullopt;
  auto& line = l.teams[team];
  Entry e = std::move(line.back());
  line.pop_back();
  --l.size;
  if (line.empty()) {
    l.teams.erase(team);
    l.turns.erase(std::find(l.turns.begin(), l.turns.end(), team));
  }
  return e;
}

std::optional<AdmissionQueue::Waiter> AdmissionQueue::pop() {
  std::lock_guard lock(mu_);
  for (size_t p = 3; p-- > 0;) {
    Level& l = levels_[p];
    if (l.size == 0) continue;
    const std::string team = l.turns.front();
    l.turns.pop_front();
    auto& line = l.teams[team];
    Entry e = std::move(line.front());
    line.pop_front();
    if (line.empty()) {
      l.teams.erase(team);
    } else {
      l.turns.push_back(team);  // its next request waits for the other teams' turns
    }
    --l.size;
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
  Level& l = level(it->second.first);
  const std::string team = it->second.second;
  where_.erase(it);
  auto& line = l.teams[team];
  line.erase(std::find_if(line.begin(), line.end(), [&](const Entry& e) { return e.id == id; }));
  --l.size;
  size_.fetch_sub(1, std::memory_order_relaxed);
  if (line.empty()) {
    l.teams.erase(team);
    l.turns.erase(std::find(l.turns.begin(), l.turns.end(), team));
  }
  return true;
}

size_t AdmissionQueue::size() const { return size_.load(std::memory_order_relaxed); }

size_t AdmissionQueue::waiting(Priority p) const {
  std::lock_guard lock(mu_);
  return levels_[static_cast<size_t>(p)].size;
}

}  // namespace purser::gateway
