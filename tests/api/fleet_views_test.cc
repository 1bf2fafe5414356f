// The rendering of the engine's explanation of a workload (GET /api/v1/workloads/.../why): the
// words and shape the API has always answered with, from the engine's facts.
#include "api/fleet_views.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace purser::api {
namespace {

using fleet::Explanation;
using nlohmann::json;
using Verdict = Explanation::FlavorTry::Verdict;

Explanation pending() {
  Explanation e;
  e.workload = "ml/train";
  e.cluster_queue = "research";
  e.local_queue = "ml";
  e.priority = 5;
  e.namespace_ = "ml";
  Explanation::PodSet ps{"main", 2, std::nullopt, {}};
  ps.flavors.push_back({.resource = "example.com/tpu",
                        .verdict = Verdict::kNotCovered,
                        .detail = "ClusterQueue \"research\" has no quota for example.com/tpu"});
  ps.flavors.push_back({.flavor = "a100",
                        .resource = "nvidia.com/gpu",
                        .verdict = Verdict::kDoesNotMatch,
                        .detail = "flavor a100 needs node label gpu=a100"});
  ps.flavors.push_back({.flavor = "h100",
                        .resource = "nvidia.com/gpu",
                        .verdict = Verdict::kNeedsPreemption,
                        .requested = 8000,
                        .nominal = 4000,
                        .in_use = 2000,
                        .available = 6000,
                        .borrowable = 4000,
                        .at_most = 12000});
  e.pod_sets.push_back(std::move(ps));
  e.policy.within_cluster_queue = fleet::WithinClusterQueue::kLowerPriority;
  e.policy.reclaim_within_cohort = fleet::ReclaimWithinCohort::kAny;
  e.tried = true;
  e.mode = Explanation::Mode::kPreempt;
  return e;
}

TEST(FleetViewsTest, APendingWorkloadsExplanationNamesEveryFlavorTried) {
  const json out = explanationJson(pending());
  EXPECT_EQ(out["state"], "pending");
  EXPECT_EQ(out["reason"], "NotYetAttempted");
  EXPECT_FALSE(out.contains("stopped"));
  EXPECT_FALSE(out.contains("namespace_mismatch"));
  const json& flavors = out["pod_sets"][0]["flavors"];
  ASSERT_EQ(flavors.size(), 3u);
  EXPECT_EQ(flavors[0],
            (json{{"resource", "example.com/tpu"},
                  {"verdict", "not covered"},
                  {"detail", "ClusterQueue \"research\" has no quota for example.com/tpu"}}));
  EXPECT_EQ(flavors[1], (json{{"flavor", "a100"},
                              {"resource", "nvidia.com/gpu"},
                              {"verdict", "does not match"},
                              {"detail", "flavor a100 needs node label gpu=a100"}}));
  EXPECT_EQ(flavors[2], (json{{"flavor", "h100"},
                              {"resource", "nvidia.com/gpu"},
                              {"verdict", "needs preemption or released quota"},
                              {"requested", 8000},
                              {"nominal", 4000},
                              {"in_use", 2000},
                              {"available", 6000},
                              {"borrowable", 4000},
                              {"at_most", 12000}}));
  EXPECT_TRUE(out["pod_sets"][0]["min_count"].is_null());
  // Preemption was tried and found no victims: why not, in the queue's policy words.
  EXPECT_EQ(out["preemption"]["mode"], "preempt");
  EXPECT_EQ(out["preemption"]["within_cluster_queue"], "LowerPriority");
  EXPECT_EQ(out["preemption"]["reclaim_within_cohort"], "Any");
  EXPECT_EQ(out["preemption"]["borrow_within_cohort"], "Never");
  EXPECT_EQ(out["preemption"]["why_not"],
            "no set of workloads this queue's policy lets it preempt frees enough quota "
            "(withinClusterQueue LowerPriority, reclaimWithinCohort Any, borrowWithinCohort "
            "Never)");
  // ... and the sentences say the same.
  const json sentences = whySentences(out);
  EXPECT_NE(std::find(sentences.begin(), sentences.end(),
                      "pod set main: example.com/tpu: ClusterQueue \"research\" has no quota for "
                      "example.com/tpu"),
            sentences.end())
      << sentences.dump();
}

TEST(FleetViewsTest, VictimsStoppedQueuesAndForeignNamespacesAreSaid) {
  Explanation e = pending();
  e.would_preempt.push_back({"ml/low", "research", 0, "InClusterQueue"});
  e.queue_stopped = true;
  e.namespace_mismatch = true;
  e.reason = "WaitingForQuota";
  e.assignment = "insufficient quota";
  const json out = explanationJson(e);
  EXPECT_FALSE(out["preemption"].contains("why_not"));
  EXPECT_EQ(out["preemption"]["would_preempt"], (json::array({{{"workload", "ml/low"},
                                                               {"cluster_queue", "research"},
                                                               {"priority", 0},
                                                               {"reason", "InClusterQueue"}}})));
  EXPECT_EQ(out["preemption"]["assignment"], "insufficient quota");
  EXPECT_EQ(out["reason"], "WaitingForQuota");
  EXPECT_EQ(out["stopped"],
            "the ClusterQueue is stopped (stopPolicy); nothing is admitted from it");
  EXPECT_EQ(out["namespace_mismatch"],
            "namespace \"ml\" is not selected by ClusterQueue \"research\"");
}

TEST(FleetViewsTest, AdmittedAndFinishedWorkloadsSayOnlyWhereTheyAre) {
  Explanation e = pending();
  e.state = Explanation::State::kAdmitted;
  EXPECT_EQ(explanationJson(e), (json{{"workload", "ml/train"},
                                      {"cluster_queue", "research"},
                                      {"local_queue", "ml"},
                                      {"priority", 5},
                                      {"state", "admitted"}}));
  e.state = Explanation::State::kFinished;
  EXPECT_EQ(explanationJson(e)["state"], "finished");
  EXPECT_FALSE(explanationJson(e).contains("preemption"));
}

}  // namespace
}  // namespace purser::api
