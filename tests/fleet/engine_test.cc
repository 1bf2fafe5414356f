// Unit tests of the admission engine beyond the conformance cases: validation of the world,
// holds, per-queue usage and explanations.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "fleet/engine.h"
#include "fleet_io/manifest.h"
#include "fleet_io/scenario.h"

namespace purser::fleet {
namespace {

TEST(EngineTest, RejectsABadWorldWithTheObjectAndReason) {
  const auto errorOf = [](const std::string& yaml) {
    auto s = parseScenario("mode: single_cycle\n" + yaml, "w.yaml");
    if (!s) return s.error().message;
    auto r = runScenario(*s);
    return r ? std::string() : r.error().message;
  };
  EXPECT_NE(errorOf("flavors: [{name: a}]\ncluster_queues:\n  - name: q\n    resource_groups:\n"
                    "      - covered: [cpu]\n        flavors: [{flavor: nope, resources: {cpu: "
                    "{nominal: \"1\"}}}]\n")
                .find("no ResourceFlavor named \"nope\""),
            std::string::npos);
  EXPECT_NE(errorOf("cohorts: [{name: a, parent: b}, {name: b, parent: a}]\n").find("cycle"),
            std::string::npos);
  EXPECT_NE(errorOf("flavors: [{name: a}]\ncluster_queues:\n  - name: q\n    resource_groups:\n"
                    "      - covered: [cpu, memory]\n        flavors: [{flavor: a, resources: "
                    "{cpu: {nominal: \"1\"}}}]\n")
                .find("lists no quota for covered resource \"memory\""),
            std::string::npos);
  EXPECT_NE(errorOf("flavors: [{name: a}]\ncluster_queues: [{name: q}]\n"
                    "local_queues: [{namespace: n, name: l, cluster_queue: q}]\n"
                    "pending: [{name: n/w, local_queue: missing, pod_sets: [{name: m, count: 1, "
                    "requests: {cpu: \"1\"}}]}]\n")
                .find("no LocalQueue named \"missing\""),
            std::string::npos);
  EXPECT_NE(errorOf("flavors: [{name: a}]\ncluster_queues:\n  - name: q\n    resource_groups:\n"
                    "      - covered: [cpu]\n        flavors: [{flavor: a, resources: {cpu: "
                    "{nominal: \"-1\"}}}]\n")
                .find("may not be negative"),
            std::string::npos);
}

// Two ClusterQueues in one cohort: "a" (4 GPUs nominal, may borrow) and "b" (4 GPUs, lends 2).
World twoQueues() {
  World w;
  w.flavors.push_back({"h100", {}, {}, {}});
  for (const char* name : {"a", "b"}) {
    ClusterQueue cq;
    cq.name = name;
    cq.cohort = "gpus";
    cq.preemption.within_cluster_queue = WithinClusterQueue::kLowerPriority;
    cq.preemption.reclaim_within_cohort = ReclaimWithinCohort::kAny;
    Quota gpu{4000, std::nullopt, std::nullopt};
    if (std::string(name) == "b") gpu.lending_limit = 2000;
    cq.resource_groups.push_back({{"nvidia.com/gpu"}, {{"h100", {{"nvidia.com/gpu", gpu}}}}});
    w.cluster_queues.push_back(cq);
    w.local_queues.push_back({"ml", name, name});
  }
  w.namespaces["ml"] = {};
  return w;
}

Workload gpuJob(const std::string& name, const std::string& queue, int64_t gpus,
                int32_t priority = 0, int64_t created = 0) {
  Workload w;
  w.name = "ml/" + name;
  w.namespace_ = "ml";
  w.local_queue = queue;
  w.priority = priority;
  w.created_ms = created;
  PodSet ps;
  ps.name = "main";
  ps.count = 1;
  ps.requests["nvidia.com/gpu"] = gpus * 1000;
  w.pod_sets.push_back(ps);
  return w;
}

TEST(EngineTest, AHeldWorkloadWaitsWithItsReasonAndOthersPassIt) {
  auto engine = Engine::create(twoQueues());
  ASSERT_TRUE(engine) << engine.error().message;
  Engine& e = **engine;
  ASSERT_TRUE(e.submit(gpuJob("first", "a", 2, 0, 1)));
  ASSERT_TRUE(e.submit(gpuJob("second", "a", 2, 0, 2)));
  ASSERT_TRUE(e.hold("ml/first", "BudgetExhausted", "the budget is used up"));
  e.runUntilStable();
  EXPECT_EQ(e.status("ml/first")->state, WorkloadStatus::State::kPending);
  EXPECT_EQ(e.status("ml/first")->reason, "BudgetExhausted");
  EXPECT_EQ(e.status("ml/first")->message, "the budget is used up");
  EXPECT_EQ(e.status("ml/second")->state, WorkloadStatus::State::kAdmitted);
  // Quota released elsewhere does not release a hold; release() does.
  ASSERT_TRUE(e.finish("ml/second"));
  e.runUntilStable();
  EXPECT_EQ(e.status("ml/first")->state, WorkloadStatus::State::kPending);
  ASSERT_TRUE(e.release("ml/first"));
  e.runUntilStable();
  EXPECT_EQ(e.status("ml/first")->state, WorkloadStatus::State::kAdmitted);
  EXPECT_FALSE(e.hold("ml/nobody", "x", "y"));
}

TEST(EngineTest, QueuesReportUsageBorrowingAndLending) {
  auto engine = Engine::create(twoQueues());
  ASSERT_TRUE(engine);
  Engine& e = **engine;
  // "a" uses its 4 and borrows 2 of "b"'s lendable 2.
  ASSERT_TRUE(e.submit(gpuJob("big", "a", 6)));
  ASSERT_TRUE(e.submit(gpuJob("more", "a", 1, 0, 1)));
  e.runUntilStable();
  ASSERT_EQ(e.status("ml/big")->state, WorkloadStatus::State::kAdmitted);
  const auto queues = e.queues();
  ASSERT_EQ(queues.size(), 2u);
  const QueueStatus& a = queues[0].name == "a" ? queues[0] : queues[1];
  const QueueStatus& b = queues[0].name == "a" ? queues[1] : queues[0];
  ASSERT_EQ(a.usage.size(), 1u);
  EXPECT_EQ(a.usage[0].usage, 6000);
  EXPECT_EQ(a.usage[0].borrowed, 2000);
  EXPECT_EQ(a.usage[0].available, 0);
  EXPECT_EQ(a.pending, 1);
  EXPECT_EQ(a.admitted, 1);
  EXPECT_EQ(b.usage[0].usage, 0);
  EXPECT_EQ(b.usage[0].lent, 2000);
  EXPECT_EQ(b.usage[0].lending_limit, 2000);
  // "b" keeps 2 for itself; the 2 it lends are in use by "a" (it can reclaim them, but they are
  // not available now).
  EXPECT_EQ(b.usage[0].available, 2000);
}

TEST(EngineTest, ExplainSaysWhatIsAskedWhatIsThereAndWhatPreemptionWouldTake) {
  auto engine = Engine::create(twoQueues());
  ASSERT_TRUE(engine);
  Engine& e = **engine;
  ASSERT_TRUE(e.submit(gpuJob("low", "a", 4, 0, 1)));
  e.runUntilStable();
  ASSERT_TRUE(e.submit(gpuJob("same", "a", 4, 0, 2)));
  ASSERT_TRUE(e.submit(gpuJob("huge", "a", 9, 0, 3)));
  e.runUntilStable();
  using Verdict = Explanation::FlavorTry::Verdict;
  auto same = e.explain("ml/same");
  ASSERT_TRUE(same) << same.error().message;
  EXPECT_EQ(same->state, Explanation::State::kPending);
  ASSERT_EQ(same->pod_sets.size(), 1u);
  ASSERT_FALSE(same->pod_sets[0].flavors.empty());
  const auto& flavor = same->pod_sets[0].flavors[0];
  EXPECT_EQ(flavor.flavor, "h100");
  EXPECT_EQ(flavor.requested, 4000);
  EXPECT_EQ(flavor.nominal, 4000);
  EXPECT_EQ(flavor.in_use, 4000);
  EXPECT_EQ(flavor.available, 2000);  // what "b" lends
  EXPECT_EQ(flavor.borrowable, 2000);
  EXPECT_EQ(flavor.at_most, 6000);
  EXPECT_EQ(flavor.verdict, Verdict::kNeedsPreemption);
  // Equal priority: LowerPriority lets nothing be preempted.
  EXPECT_TRUE(same->tried);
  EXPECT_EQ(same->mode, Explanation::Mode::kPreempt);
  EXPECT_TRUE(same->would_preempt.empty());
  auto huge = e.explain("ml/huge");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->pod_sets[0].flavors[0].verdict, Verdict::kNeverFits);
  // A higher-priority workload would preempt the low one, and explain() names it.
  ASSERT_TRUE(e.submit(gpuJob("urgent", "a", 4, 100, 4)));
  auto urgent = e.explain("ml/urgent");
  ASSERT_TRUE(urgent);
  ASSERT_EQ(urgent->would_preempt.size(), 1u);
  EXPECT_EQ(urgent->would_preempt[0].workload, "ml/low");
  EXPECT_EQ(urgent->would_preempt[0].reason, "InClusterQueue");
  EXPECT_EQ(urgent->would_preempt[0].priority, 0);
  auto low = e.explain("ml/low");
  ASSERT_TRUE(low);
  EXPECT_EQ(low->state, Explanation::State::kAdmitted);
  EXPECT_TRUE(low->pod_sets.empty()) << "an admitted workload's explanation stops at its state";
  EXPECT_FALSE(e.explain("ml/nobody"));
}

// Kueue's flavor attempt stops at the first resource short now (cpu here), so by its message
// alone a workload no flavor could ever hold would seem to wait for quota. The headline says
// the truth: it exceeds the most the ClusterQueue can ever use, unless a smaller partial count
// could fit.
TEST(EngineTest, AWorkloadThatCanNeverFitSaysSoThoughAnotherResourceIsShortFirst) {
  World world;
  world.flavors.push_back({"h100", {}, {}, {}});
  ClusterQueue cq;
  cq.name = "a";
  cq.resource_groups.push_back({{"cpu", "nvidia.com/gpu"},
                                {{"h100",
                                  {{"cpu", Quota{8000, std::nullopt, std::nullopt}},
                                   {"nvidia.com/gpu", Quota{4000, std::nullopt, std::nullopt}}}}}});
  world.cluster_queues.push_back(cq);
  world.local_queues.push_back({"ml", "a", "a"});
  world.namespaces["ml"] = {};
  auto engine = Engine::create(world);
  ASSERT_TRUE(engine) << engine.error().message;
  Engine& e = **engine;
  const auto job = [](const std::string& name, int64_t count, Amount cpu, Amount gpus,
                      int64_t created) {
    Workload w = gpuJob(name, "a", gpus, 0, created);
    w.pod_sets[0].count = count;
    w.pod_sets[0].requests["cpu"] = cpu * 1000;
    return w;
  };
  ASSERT_TRUE(e.submit(job("busy", 1, 8, 0, 1)));  // every cpu, no GPU
  e.runUntilStable();
  ASSERT_EQ(e.status("ml/busy")->state, WorkloadStatus::State::kAdmitted);
  ASSERT_TRUE(e.submit(job("huge", 1, 1, 8, 2)));   // 8 GPUs: never
  ASSERT_TRUE(e.submit(job("later", 1, 1, 2, 3)));  // fits once cpu is free
  Workload partial = job("partial", 4, 1, 2, 4);    // 8 GPUs in full, 4 at two pods
  partial.pod_sets[0].min_count = 2;
  ASSERT_TRUE(e.submit(partial));
  e.runUntilStable();
  const auto huge = e.status("ml/huge");
  EXPECT_EQ(huge->state, WorkloadStatus::State::kPending);
  EXPECT_EQ(huge->reason, "ExceedsMaxQuota");
  // The headline first: what will never change, before what is short now.
  const size_t never = huge->message.find(
      "it can never fit in ClusterQueue a: flavor h100 holds at most 4 nvidia.com/gpu (8 asked)");
  EXPECT_NE(never, std::string::npos) << huge->message;
  EXPECT_LT(never, huge->message.find("insufficient")) << huge->message;
  EXPECT_EQ(e.status("ml/later")->reason, "WaitingForQuota");
  EXPECT_EQ(e.status("ml/partial")->reason, "WaitingForQuota");
  EXPECT_EQ(e.status("ml/later")->message.find("never"), std::string::npos);
}

TEST(EngineTest, RequestsBeyondAnyQuotaAreRefused) {
  auto engine = Engine::create(twoQueues());
  ASSERT_TRUE(engine);
  Workload huge = gpuJob("huge", "a", 1);
  huge.pod_sets[0].requests["nvidia.com/gpu"] = Amount{1'000'000'000'000'000'000};
  huge.pod_sets[0].count = 2;  // the total would overflow
  auto refused = (*engine)->submit(huge);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("more nvidia.com/gpu than any quota can hold"),
            std::string::npos);
  Workload negative = gpuJob("negative", "a", 1);
  negative.pod_sets[0].count = -1;
  EXPECT_FALSE((*engine)->submit(negative));
  EXPECT_FALSE((*engine)->status("ml/huge"));
  EXPECT_FALSE((*engine)->status("ml/negative"));
}

TEST(EngineTest, RestoredStateKeepsQueueAndCandidateOrder) {
  // A restart hands the engine what it had: admitted workloads with their admission times, and
  // a preempted workload's place in the queue (queued_ms).
  auto engine = Engine::create(twoQueues());
  ASSERT_TRUE(engine);
  Engine& e = **engine;
  Workload old_one = gpuJob("old", "a", 2, 0, 1);
  old_one.admission =
      Admission{"a", {{"main", 1, {{"nvidia.com/gpu", "h100"}}, {{"nvidia.com/gpu", 2000}}}}};
  old_one.admitted_ms = 1'700'000'000'000;  // wall-clock milliseconds, as the server keeps them
  ASSERT_TRUE(e.addAdmitted(old_one));
  ASSERT_TRUE(e.submit(gpuJob("filler", "b", 4, 0, 0)));  // nothing left to lend to "a"
  ASSERT_TRUE(e.submit(gpuJob("new", "a", 2, 0, 2)));
  e.runUntilStable();
  ASSERT_EQ(e.status("ml/new")->state, WorkloadStatus::State::kAdmitted);
  // Preempting one of two equal victims takes the most recently admitted: "new", not the
  // restored one.
  ASSERT_TRUE(e.submit(gpuJob("urgent", "a", 2, 100, 3)));
  e.runUntilStable();
  EXPECT_EQ(e.status("ml/old")->state, WorkloadStatus::State::kAdmitted);
  EXPECT_EQ(e.status("ml/urgent")->state, WorkloadStatus::State::kAdmitted);
  auto victim = e.status("ml/new");
  ASSERT_EQ(victim->state, WorkloadStatus::State::kPending);
  ASSERT_TRUE(victim->queued_ms.has_value());
  // A later workload created before the eviction queues ahead of the victim; so it does once
  // the victim comes back with its queued_ms.
  auto fresh = Engine::create(twoQueues());
  ASSERT_TRUE(fresh);
  Workload back = gpuJob("new", "a", 2, 0, 2);
  back.queued_ms = *victim->queued_ms;
  ASSERT_TRUE((*fresh)->submit(back));
  ASSERT_TRUE((*fresh)->submit(gpuJob("between", "a", 6, 0, 3)));
  (*fresh)->runUntilStable();
  EXPECT_EQ((*fresh)->status("ml/between")->state, WorkloadStatus::State::kAdmitted);
  EXPECT_EQ((*fresh)->status("ml/new")->state, WorkloadStatus::State::kPending);
}

TEST(EngineTest, ANewNamespaceJoinsWithoutARebuild) {
  World w = twoQueues();
  w.cluster_queues[0].namespace_selector = std::map<std::string, std::vector<std::string>>{
      {"kubernetes.io/metadata.name", {"ml", "vision"}}};
  w.local_queues.push_back({"vision", "a", "a"});
  auto engine = Engine::create(w);
  ASSERT_TRUE(engine);
  Engine& e = **engine;
  Workload job = gpuJob("see", "a", 1);
  job.name = "vision/see";
  job.namespace_ = "vision";
  ASSERT_TRUE(e.submit(job));
  e.runUntilStable();
  EXPECT_EQ(e.status("vision/see")->reason, "Misconfigured");
  EXPECT_FALSE(e.hasNamespace("vision"));
  e.setNamespace("vision", {{"kubernetes.io/metadata.name", "vision"}});
  EXPECT_TRUE(e.hasNamespace("vision"));
  e.runUntilStable();
  EXPECT_EQ(e.status("vision/see")->state, WorkloadStatus::State::kAdmitted);
}

TEST(EngineTest, TheExampleFleetLoads) {
  // examples/fleet.yaml is what `make run` serves; it must stay valid.
  std::ifstream in(std::string(PURSER_SOURCE_DIR) + "/examples/fleet.yaml");
  ASSERT_TRUE(in);
  std::stringstream text;
  text << in.rdbuf();
  auto set = parseManifests(text.str(), "examples/fleet.yaml");
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_TRUE(set->warnings.empty());
  EXPECT_EQ(set->cluster_queues.size(), 2u);
  auto engine = Engine::create(toWorld(*set));
  EXPECT_TRUE(engine) << engine.error().message;
}

}  // namespace
}  // namespace purser::fleet
