// Admission when a route's model servers are saturated: requests wait in Purser, by priority,
// instead of piling onto replicas that cannot start them.
//
// A target has room unless its last scrape found it full (requests waiting, or its KV cache past
// the route's saturation mark) and what Purser has sent it since (TargetObserved::since: sent
// minus finished) has not made room again: with a queue of q at the scrape it takes requests
// while q + since stays under the route's saturation queue (also with q = 0 while requests wait
// in Purser); with a full KV cache only once more have finished than were sent. So while
// saturated, Purser sends a replica about one request for each it finishes, and each scrape
// corrects the count. A target that is down or cooling down has
// no room; one never scraped always has (it is judged by its traffic alone).
//
// A route has room when any of its targets has. When none has, a request waits in the route's
// AdmissionQueue: critical before standard, and within a priority the tenants take turns, and
// within a tenant its teams (each team's own requests in arrival order), so one tenant's burst —
// critical or not — does not starve another's: each tenant with requests waiting gets an equal
// share of the room, as fair queuing gives each flow its own. Sheddable requests never wait: they
// are refused at once (503 with Retry-After; 529 for Anthropic's API). A full queue sheds its
// newest least important waiter for a more important arrival; for one of the same priority it
// sheds the newest waiter of the tenant holding the most of that priority's places, when that
// tenant holds more than the arrival's own (the longest queue drops first, so a tenant's flood
// fills only its share of the queue); otherwise it refuses the arrival. A waiter whose bound
// passes is refused the same way. Budget is held only when a
// request leaves the queue for a replica (Gateway::Impl::reserve), so nothing waiting holds money.
//
// Thread-safety: AdmissionQueue is locked inside; hasRoom() reads atomics only.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "gateway/routing.h"
#include "identity/identity.h"

namespace purser::gateway {

using identity::Priority;

// Whether `t` can take another request of `route` now (see above).
// `gated`: requests are waiting, so a target whose last scrape found its queue empty is held to
// the route's saturation queue too (see hasRoom's comment).
bool hasRoom(const Route& route, const Target& t, MonoTime now, bool gated = false);
// The target with room to send the next waiter to (the fewest requests in flight), or null.
// `saturated`, when given, says whether any target lacks room only for being saturated: when
// every target is down instead, waiting would not help and requests go on to fail over as usual.
Target* roomiest(const Route& route, MonoTime now, bool* saturated = nullptr, bool gated = false);

class AdmissionQueue {
 public:
  enum class Outcome : int { kWaiting = 0, kDispatched, kShed, kTimedOut };
  // Told once, outside the queue's lock, when a waiter leaves it other than by remove().
  using Wake = std::function<void(Outcome, Target*)>;

  struct Waiter {
    Priority priority = Priority::kStandard;
    std::string team;  // turns within a tenant are taken by this (tenant/team)
    Wake wake;
    std::string tenant;  // turns are taken by this first
  };

  explicit AdmissionQueue(size_t max_waiting) : max_waiting_(max_waiting) {}

  // Queues `w`; its id, or nullopt when refused because the queue is full of requests at least
  // as important. A less important waiter may be shed (told kShed) to make room.
  std::optional<uint64_t> push(Waiter w);
  // The waiter to dispatch next, taken out of the queue (its wake is the caller's to call).
  std::optional<Waiter> pop();
  // Takes waiter `id` out (its bound passed). False when it has already left (dispatched or
  // shed): its wake has been or is being called.
  bool remove(uint64_t id);

  size_t size() const;
  size_t waiting(Priority p) const;
  bool empty() const { return size_.load(std::memory_order_relaxed) == 0; }
  size_t maxWaiting() const { return max_waiting_; }

 private:
  struct Entry {
    uint64_t id;
    Waiter waiter;
  };
  // One tenant's waiters of one priority: per team in arrival order, and the teams' turn order.
  struct Share {
    std::map<std::string, std::deque<Entry>> teams;
    std::deque<std::string> turns;  // teams with waiters; the front goes next
    size_t size = 0;
  };
  // One priority's waiters: per tenant, and the tenants' turn order.
  struct Level {
    std::map<std::string, Share> tenants;
    std::deque<std::string> turns;  // tenants with waiters; the front goes next
    size_t size = 0;
  };
  struct Place {
    Priority priority;
    std::string tenant, team;
  };
  Level& level(Priority p) { return levels_[static_cast<size_t>(p)]; }
  // The newest waiter of `l` (of `tenant` only, when given), taken out.
  std::optional<Entry> takeNewest(Level& l, const std::string* tenant = nullptr);
  // Takes `team`'s entry at `at` of tenant `tenant` out of `l`, tidying the turn orders.
  Entry takeAt(Level& l, const std::string& tenant, const std::string& team,
               std::deque<Entry>::iterator at);

  const size_t max_waiting_;
  mutable std::mutex mu_;
  Level levels_[3];                  // by Priority's value; guarded by mu_
  uint64_t next_id_ = 1;             // guarded by mu_
  std::map<uint64_t, Place> where_;  // id -> where it waits; guarded by mu_
  std::atomic<size_t> size_{0};
};

// Sends `queue`'s waiters on (wake kDispatched with the target they are counted against) while
// a target of `route` has room; each is counted in its target's `since` before the next look.
void dispatchWaiters(const Route& route, AdmissionQueue& queue, MonoTime now);

}  // namespace purser::gateway
