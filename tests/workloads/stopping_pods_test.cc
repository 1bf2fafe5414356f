// StoppingPods, the fleet service's pods on their way out, on its own (no service, no process): a
// fake executor says which pods still run. GPUs held until the pod is gone, a serving replica
// signalled only once its requests are done (or at its deadline), everything signalled when the
// service stops, and an executor that cannot be asked keeps its pods listed.
#include "workloads/stopping_pods.h"

#include <gtest/gtest.h>

#include <map>

#include "fakes/fake_executor.h"

namespace purser::workloads {
namespace {

using testing::FakeExecutor;

class StoppingPodsTest : public ::testing::Test {
 protected:
  fleet::Admission placedOn(const std::string& node, std::vector<int> gpus) {
    fleet::PodSetAssignment a;
    a.name = "main";
    a.count = 1;
    a.placements.push_back({node, std::move(gpus), 1000});
    return fleet::Admission{"research", {a}};
  }

  // Replica `replica` of ml/llm on route "chat", pod `handle`, draining until 60 s.
  static StoppingPods::Pod draining(const std::string& handle, const std::string& replica) {
    StoppingPods::Pod p{"ml/llm", "local", handle, std::nullopt};
    p.route = "chat";
    p.replica = replica;
    p.signalled = false;
    p.drain_until_ms = 60'000;
    return p;
  }

  FakeExecutor local;
  StoppingPods stopping{[this](const std::string& name) -> exec::Executor* {
                          return name == "local" ? &local : nullptr;
                        },
                        std::chrono::seconds(30)};
};

TEST_F(StoppingPodsTest, APodHoldsItsGpusUntilItsExecutorSaysItIsGone) {
  stopping.add({"ml/old", "local", "h1", fleet::PodPlacement{"n1", {0, 1}, 1000}});
  EXPECT_TRUE(stopping.blocks(placedOn("n1", {1, 2}))) << "GPU 1 is still the old pod's";
  EXPECT_FALSE(stopping.blocks(placedOn("n1", {2, 3})));
  EXPECT_FALSE(stopping.blocks(placedOn("n2", {0, 1}))) << "another node's GPUs";
  stopping.poll(nullptr, 0);
  EXPECT_EQ(stopping.size(), 1u) << "still running";
  local.end("h1");
  stopping.poll(nullptr, 1'000);
  EXPECT_TRUE(stopping.empty());
  EXPECT_TRUE(local.forgotten.contains("h1"));
  EXPECT_FALSE(stopping.blocks(placedOn("n1", {1, 2})));
}

TEST_F(StoppingPodsTest, AServingReplicaIsSignalledOnlyOnceItsRequestsAreDoneOrAtItsDeadline) {
  stopping.add(draining("h1", "fleet:ml/llm/main-0"));
  stopping.add(draining("h2", "fleet:ml/llm/main-1"));
  std::map<std::string, int64_t> in_flight = {{"fleet:ml/llm/main-0", 2},
                                              {"fleet:ml/llm/main-1", 5}};
  const StoppingPods::InFlight ask = [&](const std::string& route, const std::string& replica) {
    EXPECT_EQ(route, "chat");
    return in_flight[replica];
  };
  stopping.poll(ask, 10'000);
  EXPECT_TRUE(local.stopped.empty()) << "both still serve what they had";
  in_flight["fleet:ml/llm/main-0"] = 0;
  stopping.poll(ask, 20'000);
  EXPECT_EQ(local.stopped["h1"], 1);
  EXPECT_EQ(local.stopped.count("h2"), 0u);
  stopping.poll(ask, 60'000);  // the deadline: signalled though requests remain
  EXPECT_EQ(local.stopped["h2"], 1);
  stopping.poll(ask, 61'000);
  EXPECT_EQ(local.stopped["h1"], 1) << "signalled once";
}

TEST_F(StoppingPodsTest, StoppingTheServiceSignalsEveryReplicaStillDraining) {
  stopping.add(draining("h1", "r"));
  stopping.add({"ml/train", "local", "h2", std::nullopt});  // signalled when it was added
  stopping.signalAll();
  EXPECT_EQ(local.stopped["h1"], 1);
  EXPECT_EQ(local.stopped.count("h2"), 0u);
  stopping.signalAll();
  EXPECT_EQ(local.stopped["h1"], 1);
}

TEST_F(StoppingPodsTest, AnExecutorThatCannotBeAskedKeepsItsPodsAndAGoneExecutorForgetsThem) {
  stopping.add({"ml/a", "local", "h1", fleet::PodPlacement{"n1", {0}, 1000}});
  stopping.add({"ml/b", "slurm", "h2", fleet::PodPlacement{"n2", {0}, 1000}});  // no such executor
  local.unreachable = true;
  stopping.poll(nullptr, 0);
  EXPECT_EQ(stopping.size(), 1u) << "the unreachable executor's pod stays; the unknown one goes";
  EXPECT_TRUE(stopping.blocks(placedOn("n1", {0})));
  local.unreachable = false;
  local.end("h1");
  stopping.poll(nullptr, 1'000);
  EXPECT_TRUE(stopping.empty());
}

}  // namespace
}  // namespace purser::workloads
