// No preemption loops. Kueue users have reported an oscillation: workload A borrows cohort
// capacity, B arrives in the lending ClusterQueue and reclaims it, A is preempted and requeued,
// and A is re-admitted into the capacity B reclaimed before B is, to be preempted again, and so
// on. Each case here builds that pattern and checks from the events that the engine settles:
// runUntilStable ends within a few cycles, B is admitted, A is preempted at most once and is not
// re-admitted while B holds what it reclaimed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fleet/engine.h"

namespace purser::fleet {
namespace {

constexpr Amount kUnit = 1000;  // one cpu in milli-units

// A ClusterQueue in cohort "all" with `nominal_units` cpus of flavor "default".
ClusterQueue queue(const std::string& name, Amount nominal_units,
                   PreemptionPolicy preemption = {}) {
  ClusterQueue cq;
  cq.name = name;
  cq.cohort = "all";
  cq.preemption = preemption;
  Quota q{.nominal = nominal_units * kUnit};
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
  if (!e) {
    ADD_FAILURE() << e.error().message;
    return nullptr;
  }
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
  // priority, older). With priority sorting within the cohort off, both entries borrow, and if A
  // kept its creation time it would go first, take the capacity again and be preempted again,
  // forever; a preempted workload queues as of its eviction (Kueue's fix), behind B2.
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

// Cohort "all" holds a and the sub-cohort "sub" of b and s. A (in a) borrows all of b's fa. B's
// first pod set goes to fb, borrowed from s inside "sub", because fa would need preemption; its
// second pod set, which only fa matches, reclaims fa from A (hierarchical reclaim). With A gone,
// B's first pod set fits fa within nominal and its second borrows fa from the root: B now borrows
// at A's level, and the two are ordered by priority and queue order.
std::unique_ptr<Engine> preemptorThatFitsAnotherWay(int32_t victim_priority) {
  World w;
  w.flavors = {{.name = "fa", .node_labels = {{"zone", "a"}}},
               {.name = "fb", .node_labels = {{"zone", "b"}}}};
  w.cohorts = {{.name = "all"}, {.name = "sub", .parent = "all"}};
  const auto cq = [](const std::string& name, const std::string& cohort, Amount fa, Amount fb) {
    ClusterQueue q{.name = name, .cohort = cohort};
    q.preemption.reclaim_within_cohort = ReclaimWithinCohort::kAny;
    q.resource_groups = {{.covered = {"cpu"},
                          .flavors = {{.flavor = "fa", .resources = {{"cpu", {.nominal = fa}}}},
                                      {.flavor = "fb", .resources = {{"cpu", {.nominal = fb}}}}}}};
    return q;
  };
  w.cluster_queues = {cq("a", "all", 2 * kUnit, 0), cq("b", "sub", 4 * kUnit, 0),
                      cq("s", "sub", 0, 4 * kUnit)};
  for (const auto& q : w.cluster_queues) w.local_queues.push_back({"ns", q.name, q.name});
  auto e = engineFor(w, {});
  EXPECT_TRUE(e->submit(workload("A", "a", 6, victim_priority, 0)).has_value());
  settle(*e);
  EXPECT_TRUE(admitted(*e, "A"));
  Workload b = workload("B", "b", 4, 0, 10);
  b.pod_sets.push_back({.name = "workers",
                        .count = 1,
                        .requests = {{"cpu", 2 * kUnit}},
                        .node_selector = {{"zone", "a"}}});
  EXPECT_TRUE(e->submit(b).has_value());
  settle(*e);
  return e;
}

TEST(NoPreemptionLoopTest, PreemptorThatFitsAnotherWayGoesBeforeItsOlderVictim) {
  // Equal priorities: the victim queues as of its eviction, behind B.
  auto e = preemptorThatFitsAnotherWay(0);
  EXPECT_TRUE(admitted(*e, "B")) << eventsText(*e);
  expectReclaimedOnce(*e, "A", "B");
}

// Loops found by the cycle-mode equivalence test's generator and cut down by hand. What they
// share: the preemptor reclaims for one assignment, and once its victim is gone it is nominated
// for another that borrows, at the victim's level, and the victim would win the ordering (by
// priority, or by fair share) and take the capacity back. A victim waits until its preemptor is
// admitted (or gives up), and does not preempt it in turn, so each settles.

TEST(NoPreemptionLoopTest, SettlesWhenPartialPreemptorAsksForItsFullCount) {
  // B reclaims with a partial count that fits its nominal quota (3 of 4 pods), A is preempted;
  // the next cycle nominates B's full count, which borrows one cpu, and A (borrowing too, and of
  // higher priority) is ordered first and re-admitted; B reclaims again, and so on.
  const PreemptionPolicy reclaim{.reclaim_within_cohort = ReclaimWithinCohort::kAny};
  auto e = engineFor(
      worldOf({queue("a", 3, reclaim), queue("b", 3, reclaim), queue("c", 4, reclaim)}), {});
  ASSERT_TRUE(e->submit(workload("A", "a", 8, 100, 0)).has_value());
  settle(*e);
  ASSERT_TRUE(admitted(*e, "A"));
  Workload b = workload("B", "b", 1, 10, 10);
  b.pod_sets[0].count = 4;
  b.pod_sets[0].min_count = 3;
  ASSERT_TRUE(e->submit(b).has_value());
  settle(*e);
  EXPECT_TRUE(admitted(*e, "B")) << eventsText(*e);
  expectReclaimedOnce(*e, "A", "B");
}

TEST(NoPreemptionLoopTest, SettlesWhenPreemptorFitsAnotherWayVictimOfHigherPriority) {
  // A has the higher priority: once both borrow, A is ordered first and re-admitted.
  auto e = preemptorThatFitsAnotherWay(100);
  EXPECT_TRUE(admitted(*e, "B")) << eventsText(*e);
  expectReclaimedOnce(*e, "A", "B");
}

TEST(NoPreemptionLoopTest, SettlesWhenFairSharingReclaimOfOneResourceWhileBorrowingAnother) {
  // Fair sharing, cohort "all": a has 1 cpu and 2 gpus, b 2 cpus and no gpu, c 2 gpus. A (in a)
  // takes 2 cpus and 2 gpus, borrowing a cpu of b's. B (in b) asks for the same: its cpus are
  // within b's nominal quota, so it reclaims the cpu from A, though it borrows both its gpus.
  // Once A is gone both fit and both borrow; A's share (a third of the cpus) is below B's (half
  // the gpus), so the tournament re-admits A first, and B reclaims again.
  World w;
  w.flavors = {{.name = "default"}};
  w.cohorts = {{.name = "all"}};
  const auto cq = [](const std::string& name, Amount cpu, Amount gpu) {
    ClusterQueue q{.name = name, .cohort = "all"};
    q.preemption.reclaim_within_cohort = ReclaimWithinCohort::kAny;
    q.resource_groups = {
        {.covered = {"cpu", "nvidia.com/gpu"},
         .flavors = {{.flavor = "default",
                      .resources = {{"cpu", {.nominal = cpu * kUnit}},
                                    {"nvidia.com/gpu", {.nominal = gpu * kUnit}}}}}}};
    return q;
  };
  w.cluster_queues = {cq("a", 1, 2), cq("b", 2, 0), cq("c", 0, 2)};
  for (const auto& q : w.cluster_queues) w.local_queues.push_back({"ns", q.name, q.name});
  auto e = engineFor(w, {.fair_sharing = true});
  const auto both = [](const std::string& name, const std::string& queue, int64_t created_s) {
    Workload wl = workload(name, queue, 2, 0, created_s);
    wl.pod_sets[0].requests["nvidia.com/gpu"] = 2 * kUnit;
    return wl;
  };
  ASSERT_TRUE(e->submit(both("A", "a", 0)).has_value());
  settle(*e);
  ASSERT_TRUE(admitted(*e, "A"));
  ASSERT_TRUE(e->submit(both("B", "b", 10)).has_value());
  settle(*e);
  EXPECT_TRUE(admitted(*e, "B")) << eventsText(*e);
  expectReclaimedOnce(*e, "A", "B");
}

}  // namespace
}  // namespace purser::fleet
