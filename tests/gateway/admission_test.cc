#include "gateway/admission.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace purser::gateway {
namespace {

using Outcome = AdmissionQueue::Outcome;

struct Log {
  std::vector<std::pair<std::string, Outcome>> woken;
  AdmissionQueue::Waiter waiter(Priority p, std::string team, std::string name) {
    return {.priority = p, .team = std::move(team), .wake = [this, name](Outcome o, Target*) {
              woken.emplace_back(name, o);
            }};
  }
};

std::vector<std::string> drain(AdmissionQueue& q, Log& log) {
  std::vector<std::string> order;
  while (auto w = q.pop()) {
    const size_t before = log.woken.size();
    w->wake(Outcome::kDispatched, nullptr);
    order.push_back(log.woken.at(before).first);
  }
  return order;
}

TEST(AdmissionQueueTest, CriticalFirstThenTeamsTakeTurnsEachInArrivalOrder) {
  AdmissionQueue q(100);
  Log log;
  // Team a floods standard requests; team b sends two; a critical one comes last.
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(q.push(log.waiter(Priority::kStandard, "a", "a" + std::to_string(i))));
  ASSERT_TRUE(q.push(log.waiter(Priority::kStandard, "b", "b0")));
  ASSERT_TRUE(q.push(log.waiter(Priority::kStandard, "b", "b1")));
  ASSERT_TRUE(q.push(log.waiter(Priority::kCritical, "c", "c0")));
  EXPECT_EQ(q.size(), 7u);
  EXPECT_EQ(q.waiting(Priority::kCritical), 1u);
  EXPECT_EQ(drain(q, log), (std::vector<std::string>{"c0", "a0", "b0", "a1", "b1", "a2", "a3"}));
  EXPECT_TRUE(q.empty());
  EXPECT_FALSE(q.pop());
}

TEST(AdmissionQueueTest, AFullQueueShedsItsNewestLeastImportantWaiterOrRefusesTheArrival) {
  AdmissionQueue q(3);
  Log log;
  ASSERT_TRUE(q.push(log.waiter(Priority::kSheddable, "a", "s0")));
  ASSERT_TRUE(q.push(log.waiter(Priority::kStandard, "a", "d0")));
  ASSERT_TRUE(q.push(log.waiter(Priority::kStandard, "b", "d1")));
  // A standard arrival sheds the sheddable waiter.
  ASSERT_TRUE(q.push(log.waiter(Priority::kStandard, "a", "d2")));
  ASSERT_EQ(log.woken.size(), 1u);
  EXPECT_EQ(log.woken[0], std::pair(std::string("s0"), Outcome::kShed));
  // Another standard one finds nothing less important: refused, nobody shed.
  EXPECT_FALSE(q.push(log.waiter(Priority::kStandard, "c", "d3")));
  EXPECT_EQ(log.woken.size(), 1u);
  // A critical one sheds the newest standard waiter (d2, not d0 who came first).
  ASSERT_TRUE(q.push(log.waiter(Priority::kCritical, "c", "c0")));
  EXPECT_EQ(log.woken.back(), std::pair(std::string("d2"), Outcome::kShed));
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(drain(q, log), (std::vector<std::string>{"c0", "d0", "d1"}));
}

TEST(AdmissionQueueTest, TenantsTakeTurnsWhateverTheirNumberOfTeamsOrTheirFlood) {
  AdmissionQueue q(100);
  Log log;
  const auto as = [&](Priority p, std::string tenant, std::string team, std::string name) {
    AdmissionQueue::Waiter w = log.waiter(p, tenant + "/" + team, std::move(name));
    w.tenant = std::move(tenant);
    return w;
  };
  // Tenant a floods critical requests from three teams; tenant b has two critical requests.
  for (int i = 0; i < 3; ++i) {
    for (const char* team : {"x", "y", "z"}) {
      ASSERT_TRUE(q.push(as(Priority::kCritical, "a", team, std::string(team) + std::to_string(i))));
    }
  }
  ASSERT_TRUE(q.push(as(Priority::kCritical, "b", "m", "b0")));
  ASSERT_TRUE(q.push(as(Priority::kCritical, "b", "m", "b1")));
  // b gets every other turn while it has requests waiting; a's teams take turns within a's.
  EXPECT_EQ(drain(q, log), (std::vector<std::string>{"x0", "b0", "y0", "b1", "z0", "x1", "y1",
                                                     "z1", "x2", "y2", "z2"}));
}

TEST(AdmissionQueueTest, AFullQueueShedsTheFloodingTenantsNewestForAnotherTenantsArrival) {
  AdmissionQueue q(4);
  Log log;
  const auto as = [&](std::string tenant, std::string name) {
    AdmissionQueue::Waiter w = log.waiter(Priority::kCritical, tenant + "/t", std::move(name));
    w.tenant = std::move(tenant);
    return w;
  };
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q.push(as("a", "a" + std::to_string(i))));
  // a's fifth is refused (it holds the queue); b's first sheds a's newest.
  EXPECT_FALSE(q.push(as("a", "a4")));
  ASSERT_TRUE(q.push(as("b", "b0")));
  EXPECT_EQ(log.woken.back(), std::pair(std::string("a3"), Outcome::kShed));
  ASSERT_TRUE(q.push(as("b", "b1")));
  EXPECT_EQ(log.woken.back(), std::pair(std::string("a2"), Outcome::kShed));
  // Now each holds half: b's third is refused rather than taking a's share.
  EXPECT_FALSE(q.push(as("b", "b2")));
  EXPECT_EQ(drain(q, log), (std::vector<std::string>{"a0", "b0", "a1", "b1"}));
}

TEST(AdmissionQueueTest, RemoveTakesOutOnlyThoseStillWaiting) {
  AdmissionQueue q(10);
  Log log;
  auto a = q.push(log.waiter(Priority::kStandard, "a", "a"));
  auto b = q.push(log.waiter(Priority::kStandard, "b", "b"));
  auto c = q.push(log.waiter(Priority::kStandard, "a", "c"));
  ASSERT_TRUE(a && b && c);
  EXPECT_TRUE(q.remove(*a));
  EXPECT_FALSE(q.remove(*a)) << "twice";
  auto first = q.pop();
  ASSERT_TRUE(first);
  first->wake(Outcome::kDispatched, nullptr);
  EXPECT_EQ(log.woken.back().first, "c") << "team a's turn came first; c is its next";
  EXPECT_FALSE(q.remove(*c)) << "already dispatched";
  EXPECT_TRUE(q.remove(*b));
  EXPECT_TRUE(q.empty());
  EXPECT_FALSE(q.remove(12345)) << "an id never given";
  AdmissionQueue none(0);
  EXPECT_FALSE(none.push(log.waiter(Priority::kCritical, "a", "x"))) << "max_waiting 0: none wait";
}

std::unique_ptr<Route> route(size_t targets) {
  auto owned = std::make_unique<Route>();
  Route& r = *owned;
  r.alias = "chat";
  r.saturation_queue = 5;
  r.saturation_kv_cache = 0.8;
  for (size_t i = 0; i < targets; ++i) r.targets.push_back(std::make_unique<Target>());
  return owned;
}

TEST(RoomTest, UnobservedTargetsAlwaysHaveRoomDownOnesNever) {
  std::unique_ptr<Route> owned = route(2);
  Route& r = *owned;
  const MonoTime now{};
  EXPECT_TRUE(hasRoom(r, *r.targets[0], now));
  r.targets[0]->observed.set(Condition::kDown, {});
  EXPECT_FALSE(hasRoom(r, *r.targets[0], now));
  r.targets[1]->health.cooldown_until_ns = 1'000'000'000;
  EXPECT_FALSE(hasRoom(r, *r.targets[1], now));
  bool saturated = true;
  EXPECT_EQ(roomiest(r, now, &saturated), nullptr);
  EXPECT_FALSE(saturated) << "down and cooling down are not saturated: waiting would not help";
}

TEST(RoomTest, AFullReplicaTakesOneRequestForEachItFinishesUntilTheNextScrape) {
  std::unique_ptr<Route> owned = route(1);
  Route& r = *owned;
  Target& t = *r.targets[0];
  const MonoTime now{};
  // A queue of 3 at the scrape: room for 2 more.
  t.observed.set(Condition::kHealthy, {.queue = 3.0, .kv_cache_usage = 0.5});
  EXPECT_TRUE(hasRoom(r, t, now));
  t.observed.since = 2;
  EXPECT_FALSE(hasRoom(r, t, now));
  bool saturated = false;
  EXPECT_EQ(roomiest(r, now, &saturated), nullptr);
  EXPECT_TRUE(saturated);
  t.observed.since = 1;  // one finished
  EXPECT_EQ(roomiest(r, now), &t);
  // KV cache past the mark: room only once more finished than were sent.
  t.observed.set(Condition::kSaturated, {.queue = 0.0, .kv_cache_usage = 0.9});
  EXPECT_EQ(t.observed.since.load(), 0) << "a scrape starts the count again";
  EXPECT_FALSE(hasRoom(r, t, now));
  t.observed.since = -1;
  EXPECT_TRUE(hasRoom(r, t, now));
  // Nothing waiting and KV below the mark: room, however many were sent since.
  t.observed.set(Condition::kHealthy, {.queue = 0.0, .kv_cache_usage = 0.3});
  t.observed.since = 50;
  EXPECT_TRUE(hasRoom(r, t, now));
}

TEST(RoomTest, WhileRequestsWaitAReplicaSeenIdleTakesOnlyTheSaturationQueueBeyondItsFinished) {
  Route r;
  r.saturation_queue = 2;
  auto t = std::make_unique<Target>();
  r.targets.push_back(std::move(t));
  Target& target = *r.targets[0];
  const MonoTime now{};
  target.observed.queue = 0;  // the last scrape caught it between two requests
  target.observed.since = 2;  // two sent since, none finished
  EXPECT_TRUE(hasRoom(r, target, now)) << "nobody waits: it is not held back";
  EXPECT_FALSE(hasRoom(r, target, now, /*gated=*/true)) << "waiters are not all flushed into it";
  target.observed.since = 1;  // one of them finished
  EXPECT_TRUE(hasRoom(r, target, now, /*gated=*/true));
}

TEST(RoomTest, TheRoomiestIsTheLeastLoadedOfThoseWithRoom) {
  std::unique_ptr<Route> owned = route(3);
  Route& r = *owned;
  const MonoTime now{};
  r.targets[0]->observed.set(Condition::kSaturated, {.queue = 9.0, .kv_cache_usage = 0.5});
  r.targets[1]->health.in_flight = 4;
  r.targets[2]->health.in_flight = 2;
  EXPECT_EQ(roomiest(r, now), r.targets[2].get());
  r.targets[2]->observed.since = 3;
  EXPECT_EQ(roomiest(r, now), r.targets[1].get());
}

}  // namespace
}  // namespace purser::gateway
