// PodRunner, the fleet service's pods on their executors, on its own (no service, no process, no
// store): a fake executor runs the pods, the accounts and the events are recorded in memory, and
// a loopback listener answers the served replicas' health checks.
#include "workloads/pod_runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fakes/fake_executor.h"
#include "fakes/fake_upstream.h"
#include "workloads/gpu_meter.h"

namespace purser::workloads {
namespace {

using testing::FakeExecutor;

// The gateway's routes as the runner sees them: who joined, who left, requests in flight.
class FakeRoutes final : public ServedRoutes {
 public:
  Result<void> mayServe(const std::string&, const Owner&) const override { return {}; }
  Result<void> join(const std::string& alias, const std::string& id, const std::string& base_url,
                    const std::string&, const std::string&, const std::string&, const std::string&,
                    const Owner& owner) override {
    if (alias != "chat") return fail(Error(ErrorCode::kNotFound, "no route " + alias));
    joined[id] = base_url;
    owners.insert(owner.tenant_id + "/" + owner.team_id);
    return {};
  }
  void leave(const std::string& alias, const std::string& id) override {
    left.push_back(alias + " " + id);
    joined.erase(id);
  }
  int64_t inFlight(const std::string&, const std::string& id) const override {
    auto it = in_flight.find(id);
    return it == in_flight.end() ? 0 : it->second;
  }

  std::map<std::string, std::string> joined;  // replica -> base URL
  std::set<std::string> owners;
  std::vector<std::string> left;
  std::map<std::string, int64_t> in_flight;
};

struct Note {
  std::string kind, workload, queue, reason, message;
};

class PodRunnerTest : public ::testing::Test {
 protected:
  // ml/train, admitted to ClusterQueue "research": `pods` pods of one GPU each, placed on GPU i
  // of node n1 (GPU flavor a100), run 3 of workload sequence number 7.
  static Record admitted(int64_t pods, const std::string& name = "ml/train") {
    Record r;
    r.spec.name = name;
    r.spec.namespace_ = "ml";
    r.spec.local_queue = "research";
    r.seq = 7;
    r.runs = 3;
    r.tenant_id = "acme";
    r.team_id = "team-ml";
    r.state = "admitted";
    fleet::PodSet ps;
    ps.name = "main";
    ps.count = pods;
    ps.command = {"python", "train.py"};
    ps.env = {{"EPOCHS", "3"}};
    ps.requests = {{kGpu, 1000}, {"cpu", 2000}, {"memory", (int64_t{4} << 30) * 1000}};
    ps.limits = {{"memory", (int64_t{8} << 30) * 1000}};
    r.spec.pod_sets = {ps};
    fleet::PodSetAssignment a;
    a.name = "main";
    a.count = pods;
    a.flavors = {{kGpu, "a100"}};
    for (int i = 0; i < pods; ++i) a.placements.push_back({"n1", {i}, 1000});
    r.admission = fleet::Admission{"research", {a}};
    return r;
  }

  // The kinds of the events noted, in order.
  std::vector<std::string> kinds() const {
    std::vector<std::string> out;
    for (const auto& n : notes) out.push_back(n.kind);
    return out;
  }

  FakeExecutor local;
  FakeRoutes routes;
  std::vector<Note> notes;
  std::vector<std::string> accounts_asked;
  std::optional<Error> no_account;
  PodRunner runner{{[this](const std::string& name) -> exec::Executor* {
                      return name == "local" ? &local : nullptr;
                    },
                    [this](const std::string& team) -> Result<int64_t> {
                      accounts_asked.push_back(team);
                      if (no_account) return fail(*no_account);
                      return 200'007;
                    },
                    [this](std::string kind, const std::string& workload, std::string queue,
                           std::string reason, std::string message) {
                      notes.push_back({kind, workload, queue, reason, message});
                    },
                    &routes},
                   {std::chrono::seconds(30), 16, "inst", {}}};
};

TEST_F(PodRunnerTest, ARunStartsOnePodPerPlacementToldItsPlacementAndItsKeyAsItsTeamsAccount) {
  Record r = admitted(2);
  local.started_at = SystemTime(std::chrono::milliseconds(9'000));
  ASSERT_TRUE(runner.mayStart(r, 10'000));
  EXPECT_EQ(runner.start(r, 10'000, /*resumed=*/false, nullptr), std::nullopt);
  ASSERT_EQ(local.launches.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const exec::PodLaunch& l = local.launches[i];
    EXPECT_EQ(l.workload, "ml/train");
    EXPECT_EQ(l.index, i);
    EXPECT_EQ(l.key, "inst-7-3") << "installation, workload, run: a second start takes it back";
    EXPECT_EQ(l.uid, 200'007);
    EXPECT_EQ(l.gpus, 1);
    EXPECT_EQ(l.cpu_milli, 2000);
    EXPECT_EQ(l.memory_bytes, int64_t{4} << 30);
    EXPECT_EQ(l.memory_limit_bytes, int64_t{8} << 30);
    EXPECT_EQ(l.gpu_indices, std::vector<int>{i});
    EXPECT_EQ(l.node, "n1");
    EXPECT_EQ(l.env.at("EPOCHS"), "3") << "the template's env stays";
    EXPECT_EQ(l.env.at("PURSER_POD_INDEX"), std::to_string(i));
    EXPECT_EQ(l.env.at("JOB_COMPLETION_INDEX"), std::to_string(i));
    EXPECT_EQ(l.env.at("PURSER_POD_COUNT"), "2");
    EXPECT_EQ(l.env.at("PURSER_CLUSTER_QUEUE"), "research");
    EXPECT_EQ(l.env.at("PURSER_GPU_FLAVOR"), "a100");
    EXPECT_EQ(l.placement.at("main"), (std::vector<std::string>{"n1", "n1"}));
  }
  EXPECT_EQ(accounts_asked, (std::vector<std::string>{"team-ml", "team-ml"}));
  EXPECT_EQ(r.state, "running");
  ASSERT_EQ(r.pods.size(), 2u);
  EXPECT_EQ(r.pods[0].handle, "pod-1");
  EXPECT_EQ(r.started_ms, 9'000) << "GPU time counts from the first pod's start";
  EXPECT_EQ(r.metered_until_ms, 9'000);
  EXPECT_EQ(kinds(), std::vector<std::string>{"Started"});
  EXPECT_EQ(notes[0].message, "2 pod(s) started (run 3)");

  // A pod placed without GPUs sees none of the machine's.
  Record cpu = admitted(1, "ml/cpu");
  cpu.admission->pod_sets[0].placements[0].gpus.clear();
  EXPECT_EQ(podEnvironment(cpu, "main", 0, nullptr).at("CUDA_VISIBLE_DEVICES"), "");
  // Of a namespace no team owns: the namespace's account.
  cpu.team_id.clear();
  EXPECT_EQ(runner.start(cpu, 10'000, false, nullptr), std::nullopt);
  EXPECT_EQ(accounts_asked.back(), "namespace:ml");
}

TEST_F(PodRunnerTest, AFullExecutorLetsGoWhatStartedAndTheWorkloadWaitsLongerEachTime) {
  Record r = admitted(3);
  local.refuse = [&](const exec::PodLaunch& l) -> std::optional<Error> {
    if (l.index == 2) return Error(ErrorCode::kResourceExhausted, "fleet.local.max_pods reached");
    return std::nullopt;
  };
  r.launching = true;
  EXPECT_EQ(runner.start(r, 10'000, false, nullptr), std::nullopt) << "waiting is no failure";
  EXPECT_TRUE(r.pods.empty());
  EXPECT_FALSE(r.launching);
  EXPECT_EQ(r.runs, 3) << "the run keeps its number: the pods let go claimed its keys";
  EXPECT_EQ(r.reason, "WaitingForExecutor");
  EXPECT_EQ(local.stopped.at("pod-1"), 1);
  EXPECT_EQ(local.stopped.at("pod-2"), 1);
  EXPECT_EQ(runner.stopping(), 2u) << "the pods let go hold their GPUs until gone";
  EXPECT_FALSE(runner.mayStart(r, 10'500)) << "held by its own pods on the way out";
  local.end("pod-1");
  local.end("pod-2");
  runner.pollStopping(10'600);
  EXPECT_EQ(runner.stopping(), 0u);
  EXPECT_FALSE(runner.mayStart(r, 10'999));
  EXPECT_TRUE(runner.mayStart(r, 11'000)) << "tried again after a second";
  EXPECT_EQ(runner.start(r, 11'000, false, nullptr), std::nullopt);
  EXPECT_FALSE(runner.mayStart(r, 12'999));
  EXPECT_TRUE(runner.mayStart(r, 13'000)) << "then after two";
  EXPECT_EQ(kinds(), std::vector<std::string>{"Waiting"}) << "noted once, not at every try";
  runner.settled(r.spec.name);
  EXPECT_TRUE(runner.mayStart(r, 11'000));
}

TEST_F(PodRunnerTest, AWaitForRoomEndsWithTheWorkloadsStopOrEnd) {
  local.refuse = [](const exec::PodLaunch&) -> std::optional<Error> {
    return Error(ErrorCode::kResourceExhausted, "fleet.local.max_pods reached");
  };
  Record r = admitted(1);
  EXPECT_EQ(runner.start(r, 10'000, false, nullptr), std::nullopt);
  EXPECT_FALSE(runner.mayStart(r, 10'500));
  runner.stop(r, "Preempted", 10'100);  // evicted (or deleted) while it waited
  EXPECT_TRUE(runner.mayStart(r, 10'500)) << "admitted again, it starts afresh";
  EXPECT_EQ(runner.start(r, 10'500, false, nullptr), std::nullopt);
  EXPECT_FALSE(runner.mayStart(r, 11'000));
  runner.finish(r);  // ended
  EXPECT_TRUE(runner.mayStart(r, 11'000)) << "nothing of an ended workload is kept";
}

TEST_F(PodRunnerTest, APodThatCannotStartStopsTheOthersAndTheFailureIsReturned) {
  Record r = admitted(3);
  local.refuse = [&](const exec::PodLaunch& l) -> std::optional<Error> {
    if (l.index == 1) return invalidArgument("no such program: python");
    return std::nullopt;
  };
  const auto failure = runner.start(r, 10'000, false, nullptr);
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(*failure, "pod main-1 could not start: no such program: python");
  EXPECT_EQ(local.stopped.at("pod-1"), 1);
  EXPECT_TRUE(r.pods.empty());
  EXPECT_EQ(r.started_ms, 10'000);
  EXPECT_EQ(r.metered_until_ms, 10'000);
  EXPECT_TRUE(notes.empty()) << "the service notes how it ended";

  // No account to run as: nothing starts.
  Record other = admitted(1, "ml/other");
  no_account = Error(ErrorCode::kResourceExhausted, "every account is some team's");
  EXPECT_EQ(runner.start(other, 10'000, false, nullptr).value_or(""),
            "pod main-0 has no account to run as: every account is some team's");
  EXPECT_EQ(local.launches.size(), 1u);

  // No such executor.
  Record elsewhere = admitted(1, "ml/elsewhere");
  elsewhere.external = "slurm:42";
  EXPECT_EQ(runner.start(elsewhere, 10'000, false, nullptr).value_or(""),
            "this Purser has no executor \"slurm\" to run pods on");
}

TEST_F(PodRunnerTest, OneFailedPodStopsTheOthersAndTheFirstToFailDecidesTheRun) {
  Record r = admitted(3);
  ASSERT_EQ(runner.start(r, 0, false, nullptr), std::nullopt);
  auto w = runner.watch(r, 1'000);
  EXPECT_FALSE(w.changed);
  EXPECT_FALSE(w.ended);
  local.end("pod-2", 1);
  w = runner.watch(r, 2'000);
  EXPECT_TRUE(w.changed);
  EXPECT_FALSE(w.ended) << "two pods still run";
  EXPECT_EQ(local.stopped.at("pod-1"), 1) << "the others are stopped";
  EXPECT_EQ(local.stopped.at("pod-3"), 1);
  EXPECT_EQ(local.stopped.count("pod-2"), 0u);
  local.runs_for = std::chrono::seconds(2);  // the others end after it
  local.end("pod-1", std::nullopt, 15);
  local.end("pod-3", std::nullopt, 15);
  w = runner.watch(r, 3'000);
  EXPECT_TRUE(w.ended);
  const auto how = PodRunner::outcome(r);
  EXPECT_TRUE(how.failed);
  EXPECT_EQ(how.reason, "PodFailed");
  EXPECT_EQ(how.message, "pod main-1 exited with code 1");
  EXPECT_EQ(PodRunner::runEnd(r), 2'000) << "its last pod's end";

  local.logs["pod-2"] = "Traceback: something went wrong";
  runner.finish(r);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.log_tail, "thing went wrong") << "its last 16 bytes";
  EXPECT_EQ(local.forgotten, (std::set<std::string>{"pod-1", "pod-2", "pod-3"}));
}

TEST_F(PodRunnerTest, AKilledPodReadsAsItDiedAndAPodItsExecutorForgotFails) {
  Record oom = admitted(1, "ml/oom");
  ASSERT_EQ(runner.start(oom, 0, false, nullptr), std::nullopt);
  local.end("pod-1", 137, std::nullopt, "OOMKilled");
  EXPECT_TRUE(runner.watch(oom, 1'000).ended);
  EXPECT_EQ(PodRunner::outcome(oom).reason, "OOMKilled");
  EXPECT_EQ(PodRunner::outcome(oom).message,
            "pod main-0 was killed for going over its memory limit (OOMKilled, exit code 137)");

  Record killed = admitted(1, "ml/killed");
  ASSERT_EQ(runner.start(killed, 0, false, nullptr), std::nullopt);
  local.end("pod-2", std::nullopt, 9);
  EXPECT_TRUE(runner.watch(killed, 1'000).ended);
  runner.finish(killed);
  EXPECT_EQ(killed.exit_code, 128 + 9) << "as a shell reports a death by signal";

  Record lost = admitted(1, "ml/lost");
  ASSERT_EQ(runner.start(lost, 0, false, nullptr), std::nullopt);
  local.lost.insert("pod-3");
  EXPECT_TRUE(runner.watch(lost, 5'000).ended);
  EXPECT_EQ(lost.pods[0].phase, "failed");
  EXPECT_EQ(lost.pods[0].finished_ms, 5'000);
  EXPECT_EQ(PodRunner::outcome(lost).message, "pod main-0 exited with code -1");

  Record fine = admitted(2, "ml/fine");
  ASSERT_EQ(runner.start(fine, 0, false, nullptr), std::nullopt);
  local.end("pod-4");
  local.end("pod-5");
  EXPECT_TRUE(runner.watch(fine, 1'000).ended);
  EXPECT_FALSE(PodRunner::outcome(fine).failed);
  EXPECT_EQ(PodRunner::outcome(fine).message, "2 pod(s) exited with code 0");
}

TEST_F(PodRunnerTest, AnUnreachableExecutorMakesTheWorkloadUnknownUntilItAnswersAgain) {
  Record r = admitted(1);
  ASSERT_EQ(runner.start(r, 0, false, nullptr), std::nullopt);
  local.unreachable = true;
  auto w = runner.watch(r, 1'000);
  EXPECT_TRUE(w.changed);
  EXPECT_FALSE(w.ended) << "not known to have ended";
  EXPECT_EQ(r.state, "unknown");
  EXPECT_EQ(r.reason, "ExecutorUnreachable");
  EXPECT_EQ(r.message, "the engine cannot be asked");
  w = runner.watch(r, 2'000);
  EXPECT_FALSE(w.changed) << "noted once";
  local.unreachable = false;
  w = runner.watch(r, 3'000);
  EXPECT_TRUE(w.changed);
  EXPECT_EQ(r.state, "running");
  EXPECT_TRUE(r.reason.empty());
  EXPECT_EQ(kinds(), (std::vector<std::string>{"Started", "Unknown", "Running"}));
}

TEST_F(PodRunnerTest, StoppedPodsHoldTheirGpusAndAServingReplicaIsDrainedFirst) {
  Record r = admitted(2, "ml/llm");
  r.spec.serve = fleet::ServeSpec{"chat", 8000, "openai", "llama", "/health", "", "vllm"};
  ASSERT_EQ(runner.start(r, 0, false, nullptr), std::nullopt);
  r.pods[0].serving = true;  // replica 0 serves; replica 1 has not joined yet
  routes.in_flight["ml/llm/main-0"] = 2;
  runner.stop(r, "Preempted", 5'000);
  EXPECT_EQ(r.pods[0].phase, "stopped");
  EXPECT_EQ(r.pods[1].phase, "stopped");
  EXPECT_EQ(r.pods[0].finished_ms, 5'000);
  EXPECT_FALSE(r.pods[0].serving);
  EXPECT_EQ(routes.left, std::vector<std::string>{"chat ml/llm/main-0"}) << "out of its route";
  EXPECT_EQ(local.stopped.count("pod-1"), 0u) << "not signalled while it serves what it had";
  EXPECT_EQ(local.stopped.at("pod-2"), 1);
  ASSERT_EQ(kinds(), (std::vector<std::string>{"Started", "Draining"}));
  EXPECT_EQ(notes[1].reason, "Preempted");

  Record next = admitted(1, "ml/next");
  EXPECT_FALSE(runner.mayStart(next, 5'000)) << "GPU 0 of n1 is still the stopping pod's";
  runner.pollStopping(6'000);
  EXPECT_EQ(local.stopped.count("pod-1"), 0u);
  routes.in_flight["ml/llm/main-0"] = 0;
  runner.pollStopping(7'000);
  EXPECT_EQ(local.stopped.at("pod-1"), 1) << "signalled once its requests are done";
  local.end("pod-1", std::nullopt, 15);
  local.end("pod-2", std::nullopt, 15);
  runner.pollStopping(8'000);
  EXPECT_TRUE(runner.mayStart(next, 8'000));

  // Stopping again stops nothing more: its pods are no longer running.
  runner.stop(r, "Deleted", 9'000);
  EXPECT_EQ(runner.stopping(), 0u);
}

TEST_F(PodRunnerTest, HealthyReplicasJoinTheirRouteAndOnesFailingThreeChecksLeaveIt) {
  std::atomic<bool> healthy{false};
  testing::FakeUpstream server([&](int fd) {
    (void)testing::FakeUpstream::readRequestHead(fd);
    testing::FakeUpstream::writeAll(fd, healthy ? "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
                                                : "HTTP/1.1 503 Service Unavailable\r\n"
                                                  "Content-Length: 0\r\n\r\n");
  });
  Record r = admitted(1, "ml/llm");
  r.spec.serve = fleet::ServeSpec{"chat", server.port(), "openai", "llama", "/health", "", "vllm"};
  ASSERT_EQ(runner.start(r, 0, false, nullptr), std::nullopt);
  EXPECT_FALSE(runner.serve(r)) << "no address yet";
  local.addresses["pod-1"] = "127.0.0.1";
  EXPECT_FALSE(runner.serve(r)) << "not healthy yet";
  EXPECT_TRUE(routes.joined.empty());
  healthy = true;
  EXPECT_TRUE(runner.serve(r));
  EXPECT_TRUE(r.pods[0].serving);
  EXPECT_EQ(routes.joined.at("ml/llm/main-0"),
            "http://127.0.0.1:" + std::to_string(server.port()) + "/v1");
  EXPECT_EQ(routes.owners, std::set<std::string>{"acme/team-ml"});
  healthy = false;
  EXPECT_FALSE(runner.serve(r));
  EXPECT_FALSE(runner.serve(r));
  EXPECT_TRUE(r.pods[0].serving) << "two failed checks are not yet three";
  EXPECT_TRUE(runner.serve(r));
  EXPECT_FALSE(r.pods[0].serving);
  EXPECT_EQ(routes.left, std::vector<std::string>{"chat ml/llm/main-0"});
  EXPECT_EQ(kinds(), (std::vector<std::string>{"Started", "Serving", "NotServing"}));
  EXPECT_EQ(notes.back().reason, "ReplicaUnhealthy");

  // A route that is not there: noted once, with the reason on the record.
  healthy = true;
  r.spec.serve->route = "missing";
  EXPECT_TRUE(runner.serve(r));
  EXPECT_EQ(r.reason, "RouteMissing");
  EXPECT_FALSE(runner.serve(r));
}

TEST_F(PodRunnerTest, AfterARestartRunningPodsAreAdoptedByTheirExecutors) {
  std::map<std::string, Record> records;
  Record a = admitted(1, "ml/a");
  ASSERT_EQ(runner.start(a, 0, false, nullptr), std::nullopt);
  Record b = admitted(1, "ml/b");
  ASSERT_EQ(runner.start(b, 0, false, nullptr), std::nullopt);
  b.pods[0].phase = "succeeded";
  Record c = admitted(1, "ml/c");
  c.state = "running";
  c.pods.push_back(PodRun{.pod_set = "main", .executor = "slurm", .handle = "42"});
  records.emplace(a.spec.name, a);
  records.emplace(b.spec.name, b);
  records.emplace(c.spec.name, c);
  runner.adopt(records);
  EXPECT_EQ(local.adopted, std::vector<std::string>{"pod-1"})
      << "ended pods and executors not configured now are left";
}

}  // namespace
}  // namespace purser::workloads
