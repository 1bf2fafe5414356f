// No preemption loops. Kueue users have reported an oscillation: workload A borrows cohort
// capacity, B arrives in the lending ClusterQueue and reclaims it, A is preempted and requeued,
// and A is re-admitted into the capacity B reclaimed before B is, to be preempted again, and so
// on. Each case here builds that pattern and checks from the events that the engine settles:
// runUntilStable ends within a few cycles, B is admitted, A is preempted at most once and is not
// re-admitted while B holds what it reclaimed.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "fleet/engine.h"

namespace purser::fleet {
namespace {

constexpr Amount kUnit = 1000;  // one cpu in milli-units

ClusterQueue queue(const std::string& name, Amount nominal_units, PreemptionPolicy preemption = {},
                   std::optional<Amount> borrowing_limit_units = std::nullopt) {
  ClusterQueue cq;
  cq.name = name;
  cq.cohort = "all";
  cq.preemption = preemption;
  Quota q{.nominal = nominal_units * kUnit};
  if (borrowing_limit_units) q.borrowing_limit = *borrowing_limit_units * kUnit;
  cq.resource_groups = {
      {.covered = {"cpu"}, .flavors = {{.flavor = "default", .resources = {{"cpu", q}}}}}};
  return cq;
}

World worldOf(std::vector<ClusterQueue> queues) {
  World w;
  w.flavors = {{.name = "default"}};
  w.cohorts = {{.name = "all"}};
  for (const auto& q : queues) w.local_queues.push_back({"ns", q.name, q.name});
  w.cluster_queues = std::move(queues);
  return w;
}

Workload workload(const std::string& name, const std::string& queue, Amount cpu_units,
                  int32_t priority = 0, int64_t created_s = 0) {
  Workload w;
  w.name = "ns/" + name;
  w.namespace_ = "ns";
  w.local_queue = queue;
  w.priority = priority;
  w.created_ms = created_s * 1000;
  w.pod_sets = {{.name = "main", .count = 1, .requests = {{"cpu", cpu_units * kUnit}}}};
  return w;
}

std::unique_ptr<Engine> engineFor(World world, EngineOptions options) {
  auto e = Engine::create(std::move(world), options);
  EXPECT_TRUE(e.has_value()) << e.error().message;
  return std::move(*e);
}

int countOf(const Engine& e, Event::Kind kind, const std::string& name) {
  int n = 0;
  for (const auto& ev : e.events()) n += ev.kind == kind && ev.workload == "ns/" + name ? 1 : 0;
  return n;
}

// The first events (a loop repeats itself after a few).
std::string eventsText(const Engine& e) {
  static const char* kKinds[] = {"admitted", "preempted", "evicted", "finished", "pending"};
  constexpr size_t kMost = 24;
  std::string out;
  for (size_t i = 0; i < e.events().size(); ++i) {
    if (i == kMost) {
      out += "  ... " + std::to_string(e.events().size() - kMost) + " more\n";
      break;
    }
    const Event& ev = e.events()[i];
    out += "  cycle " + std::to_string(ev.cycle) + ": " + kKinds[static_cast<int>(ev.kind)] + " " +
           ev.workload + (ev.by.empty() ? "" : " by " + ev.by) +
           (ev.reason.empty() ? "" : " (" + ev.reason + ")") + "\n";
  }
  return out;
}

bool admitted(const Engine& e, const std::string& name) {
  auto s = e.status("ns/" + name);
  return s && s->state == WorkloadStatus::State::kAdmitted;
}

// Runs to a stable state and checks it took few cycles (a loop would take the whole budget).
void settle(Engine& e, int64_t most_cycles = 6) {
  const int64_t before = e.cycles();
  e.runUntilStable(100);
  EXPECT_LE(e.cycles() - before, most_cycles) << "no stable state; events:\n" << eventsText(e);
}

// Checks the reclaim story for `borrower` and `lender`: the borrower was preempted by the lender
// at most once, and after its last preemption it was not admitted again before the lender was.
void expectReclaimedOnce(const Engine& e, const std::string& borrower, const std::string& lender) {
  EXPECT_LE(countOf(e, Event::Kind::kPreempted, borrower), 1) << eventsText(e);
  bool preempted = false;
  for (const auto& ev : e.events()) {
    if (ev.kind == Event::Kind::kPreempted && ev.workload == "ns/" + borrower) preempted = true;
    if (ev.kind == Event::Kind::kAdmitted && ev.workload == "ns/" + lender) break;
    EXPECT_FALSE(preempted && ev.kind == Event::Kind::kAdmitted && ev.workload == "ns/" + borrower)
        << borrower << " went back into the reclaimed capacity before " << lender
        << " was admitted; events:\n"
        << eventsText(e);
  }
}

TEST(NoPreemptionLoopTest, ReclaimedBorrowerWaitsForTheLender) {
  // a lends nothing to speak of; b lends 4 of its 4 while idle. A borrows 3 of them.
  const PreemptionPolicy reclaim{.reclaim_within_cohort = ReclaimWithinCohort::kAny};
  auto e = engineFor(worldOf({queue("a", 2, reclaim), queue("b", 4, reclaim)}), {});
  ASSERT_TRUE(e->submit(workload("A", "a", 5)).has_value());
  settle(*e);
  ASSERT_TRUE(admitted(*e, "A"));

  ASSERT_TRUE(e->submit(workload("B", "b", 4, 0, 10)).has_value());
  settle(*e);
  EXPECT_TRUE(admitted(*e, "B")) << eventsText(*e);
  EXPECT_FALSE(admitted(*e, "A"));
  EXPECT_EQ(countOf(*e, Event::Kind::kPreempted, "A"), 1) << eventsText(*e);
  expectReclaimedOnce(*e, "A", "B");
  // Still stable: another run changes nothing.
  const size_t events = e->events().size();
  EXPECT_FALSE(e->runUntilStable(100).changed);
  EXPECT_EQ(e->events().size(), events);

  // Once B is done, A gets its borrowed capacity back.
  ASSERT_TRUE(e->finish("ns/B").has_value());
  settle(*e);
  EXPECT_TRUE(admitted(*e, "A")) << eventsText(*e);
}

TEST(NoPreemptionLoopTest, ReclaimedBorrowerWaitsEvenWhenOlderAndOfHigherPriority) {
  // A is older and of higher priority than B; entries that borrow still go after those that do
  // not, so A cannot slip back in ahead of B.
  const PreemptionPolicy reclaim{.reclaim_within_cohort = ReclaimWithinCohort::kAny};
  for (bool sorting : {true, false}) {
    SCOPED_TRACE(sorting ? "priority sorting within cohort" : "no priority sorting");
    auto e = engineFor(worldOf({queue("a", 2, reclaim), queue("b", 4, reclaim)}),
                       {.priority_sorting_within_cohort = sorting});
    ASSERT_TRUE(e->submit(workload("A", "a", 5, 100, 0)).has_value());
    settle(*e);
    ASSERT_TRUE(e->submit(workload("B", "b", 4, 0, 10)).has_value());
    settle(*e);
    EXPECT_TRUE(admitted(*e, "B")) << eventsText(*e);
    EXPECT_FALSE(admitted(*e, "A"));
    expectReclaimedOnce(*e, "A", "B");
  }
}

TEST(NoPreemptionLoopTest, TwoBorrowersWithPrioritiesEachPreemptedAtMostOnce) {
  // a1 and a2 each borrow from b; B needs all of b back. Reclaim takes the lower priority first.
  const PreemptionPolicy reclaim{.reclaim_within_cohort = ReclaimWithinCohort::kAny};
  for (bool strict : {false, true}) {
    SCOPED_TRACE(strict ? "StrictFIFO" : "BestEffortFIFO");
    auto a1 = queue("a1", 1, reclaim);
    auto a2 = queue("a2", 1, reclaim);
    auto b = queue("b", 6, reclaim);
    if (strict) {
      for (auto* q : {&a1, &a2, &b}) q->strategy = QueueingStrategy::kStrictFifo;
    }
    auto e = engineFor(worldOf({a1, a2, b}), {});
    ASSERT_TRUE(e->submit(workload("A1", "a1", 4, 100, 0)).has_value());
    ASSERT_TRUE(e->submit(workload("A2", "a2", 4, 0, 1)).has_value());
    settle(*e);
    ASSERT_TRUE(admitted(*e, "A1"));
    ASSERT_TRUE(admitted(*e, "A2"));

    // B needs 5 of b's 6: only 0 is free, so both borrowers must go.
    ASSERT_TRUE(e->submit(workload("B", "b", 5, 10, 10)).has_value());
    settle(*e);
    EXPECT_TRUE(admitted(*e, "B")) << eventsText(*e);
    expectReclaimedOnce(*e, "A1", "B");
    expectReclaimedOnce(*e, "A2", "B");
    // What B left over (8 - 5 = 3) is not enough for either borrower.
    EXPECT_FALSE(admitted(*e, "A1"));
    EXPECT_FALSE(admitted(*e, "A2"));
  }
}

TEST(NoPreemptionLoopTest, LowerPriorityReclaimTakesOnlyTheLowerBorrower) {
  // With reclaimWithinCohort LowerPriority, B (priority 10) may take A2 (0) but never A1 (100).
  const PreemptionPolicy reclaim{.reclaim_within_cohort = ReclaimWithinCohort::kLowerPriority};
  auto e = engineFor(
      worldOf({queue("a1", 1, reclaim), queue("a2", 1, reclaim), queue("b", 6, reclaim)}), {});
  ASSERT_TRUE(e->submit(workload("A1", "a1", 3, 100, 0)).has_value());
  ASSERT_TRUE(e->submit(workload("A2", "a2", 4, 0, 1)).has_value());
  settle(*e);
  ASSERT_TRUE(admitted(*e, "A1") && admitted(*e, "A2"));
  // 8 in the cohort, 7 used; B needs 4: taking A2 frees enough.
  ASSERT_TRUE(e->submit(workload("B", "b", 4, 10, 10)).has_value());
  settle(*e);
  EXPECT_TRUE(admitted(*e, "B")) << eventsText(*e);
  EXPECT_TRUE(admitted(*e, "A1"));
  EXPECT_EQ(countOf(*e, Event::Kind::kPreempted, "A1"), 0);
  EXPECT_EQ(countOf(*e, Event::Kind::kPreempted, "A2"), 1);
  expectReclaimedOnce(*e, "A2", "B");
}

TEST(NoPreemptionLoopTest, FairSharingReclaimSettles) {
  // Fair sharing: A borrows, B reclaims within its nominal quota; the tournament puts the
  // non-borrowing B first, so A does not come back while B needs the capacity.
  const PreemptionPolicy reclaim{.within_cluster_queue = WithinClusterQueue::kLowerPriority,
                                 .reclaim_within_cohort = ReclaimWithinCohort::kAny};
  auto e =
      engineFor(worldOf({queue("a", 2, reclaim), queue("b", 4, reclaim)}), {.fair_sharing = true});
  ASSERT_TRUE(e->submit(workload("A", "a", 5, 100)).has_value());
  settle(*e);
  ASSERT_TRUE(admitted(*e, "A"));
  ASSERT_TRUE(e->submit(workload("B", "b", 4, 0, 10)).has_value());
  settle(*e);
  EXPECT_TRUE(admitted(*e, "B")) << eventsText(*e);
  EXPECT_FALSE(admitted(*e, "A"));
  EXPECT_EQ(countOf(*e, Event::Kind::kPreempted, "A"), 1) << eventsText(*e);
  expectReclaimedOnce(*e, "A", "B");
}

TEST(NoPreemptionLoopTest, FairSharingTwoBorrowersSettle) {
  // Both a and c borrow from b; with fair sharing the one with the larger share is preempted
  // first, and neither comes back ahead of B.
  const PreemptionPolicy reclaim{.reclaim_within_cohort = ReclaimWithinCohort::kAny};
  auto e =
      engineFor(worldOf({queue("a", 1, reclaim), queue("c", 1, reclaim), queue("b", 6, reclaim)}),
                {.fair_sharing = true});
  ASSERT_TRUE(e->submit(workload("A", "a", 4, 0, 0)).has_value());
  ASSERT_TRUE(e->submit(workload("C", "c", 3, 0, 1)).has_value());
  settle(*e);
  ASSERT_TRUE(admitted(*e, "A") && admitted(*e, "C"));
  ASSERT_TRUE(e->submit(workload("B", "b", 6, 0, 10)).has_value());
  settle(*e);
  EXPECT_TRUE(admitted(*e, "B")) << eventsText(*e);
  expectReclaimedOnce(*e, "A", "B");
  expectReclaimedOnce(*e, "C", "B");
}

TEST(NoPreemptionLoopTest, BorrowWithinCohortWithoutPrioritySorting) {
  // Kueue's issue 2821: B2 (high priority) needs to borrow and preempts the borrowing A (low
  // priority, older). With priority sorting within the cohort off, both entries borrow and the
  // older A went first, took the capacity again, and was preempted again, forever.
  const PreemptionPolicy policy{.within_cluster_queue = WithinClusterQueue::kLowerPriority,
                                .reclaim_within_cohort = ReclaimWithinCohort::kAny,
                                .borrow_within_cohort = BorrowWithinCohort::kLowerPriority};
  auto e = engineFor(worldOf({queue("a", 2, policy), queue("b", 2, policy), queue("c", 4, policy)}),
                     {.priority_sorting_within_cohort = false});
  ASSERT_TRUE(e->submit(workload("A", "a", 4, 0, 0)).has_value());
  ASSERT_TRUE(e->submit(workload("B1", "b", 2, 0, 1)).has_value());
  settle(*e);
  ASSERT_TRUE(admitted(*e, "A") && admitted(*e, "B1"));
  // 8 in the cohort, 6 used. B2 needs 4, borrowing all of it: only by preempting A.
  ASSERT_TRUE(e->submit(workload("B2", "b", 4, 100, 10)).has_value());
  settle(*e);
  EXPECT_TRUE(admitted(*e, "B2")) << eventsText(*e);
  expectReclaimedOnce(*e, "A", "B2");
}

}  // namespace
}  // namespace purser::fleet
