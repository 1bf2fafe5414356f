// Workloads that run: a real `purser serve` starting admitted work as local processes, and what
// users see of it — pending → admitted → running → succeeded or failed with its exit code and the
// end of its log; a preempted workload's processes stopped (politely, then forcefully) and the
// workload requeued and run again when room returns; GPU time charged from the pods' start to
// their end; and a Purser killed with SIGKILL that, restarted, adopts the pods still running
// instead of starting them twice, and charges their GPU time once.
//
// The pods are shell scripts that wait for a file the test creates, so every state is reached by
// the test's own steps; waits poll the API and are bounded by a count, never by timing.
#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <thread>

#include "common/money.h"
#include "fakes/eventually.h"
#include "fakes/kueue_manifest.h"
#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/temp_dir.h"
#include "integration/fleet_harness.h"

namespace purser {
namespace {

using nlohmann::json;

constexpr const char* kAdminKey = "fleet-run-test-admin-key-0123456789";

int64_t millisOf(const json& rfc3339) {
  // "2026-12-02T01:02:03.456Z"
  const std::string t = rfc3339.get<std::string>();
  std::tm tm{};
  strptime(t.substr(0, 19).c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  return static_cast<int64_t>(timegm(&tm)) * 1000 + std::stoi(t.substr(20, 3));
}

class FleetRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::writeFile(dir.file("fleet.yaml"), testing::fleetManifests(64));
    // The gates the pods wait for are shown to them (read-only); nothing else of the test's.
    std::filesystem::create_directories(dir.file("gates"));
    // 3600.00 per GPU-hour: one GPU-second costs 1.00.
    testing::writeFile(dir.file("purser.yaml"),
                       "listen: 127.0.0.1:0\nthreads: 1\n"
                       "gpu_prices:\n  - {flavor: h100, per_gpu_hour: \"3600.00\"}\n"
                       "fleet:\n  manifests: [fleet.yaml]\n  metering_interval: 1s\n"
                       "  termination_grace: 30s\n"
                       "  local: {read_only_paths: [\"" +
                           dir.file("gates") + "\"]}\n");
    std::string why;
    ASSERT_TRUE(server.start(&why)) << why;
    key = server.member();
    ASSERT_FALSE(key.empty());
  }
  void TearDown() override {
    // Whatever still runs is let go, then the server stops.
    std::filesystem::create_directories(dir.file("gates"));
    for (const char* g : {"a", "b", "c", "d", "e"}) {
      testing::writeFile(dir.file(std::string("gates/") + g), "");
    }
    server.stop();
  }

  json call(const std::string& method, const std::string& target, const std::string& as,
            const std::string& body = "", const std::string& type = "application/json",
            int* status = nullptr) {
    return server.call(method, target, as, body, type, status);
  }

  // A workload in the short form whose pods print a line, wait for gate `gate`, print another
  // and exit with `code`; on SIGTERM they say so and exit 143.
  json submit(const std::string& name, int pods, int gpus_each, const std::string& gate,
              int code = 0, const std::string& priority_class = "") {
    const std::string script =
        "trap 'echo stopping $PURSER_POD_INDEX; exit 143' TERM; "
        "echo \"pod $JOB_COMPLETION_INDEX of $PURSER_WORKLOAD in $PURSER_CLUSTER_QUEUE\"; "
        "while [ ! -e '" +
        dir.file("gates/" + gate) +
        "' ]; do sleep 0.02; done; "
        "echo finished; exit " +
        std::to_string(code);
    json w = {{"name", name},
              {"queue", "research"},
              {"pod_sets",
               {{{"name", "main"},
                 {"count", pods},
                 {"requests", {{"cpu", "1"}, {"nvidia.com/gpu", std::to_string(gpus_each)}}},
                 {"command", {"/bin/sh", "-c", script}},
                 {"env", {{"EPOCHS", "3"}}}}}}};
    if (!priority_class.empty()) w["priority_class"] = priority_class;
    int status = 0;
    json out = call("POST", "/api/v1/workloads", key, w.dump(), "application/json", &status);
    EXPECT_EQ(status, 201) << out.dump();
    return out;
  }
  void open(const std::string& gate) {
    std::filesystem::create_directories(dir.file("gates"));
    testing::writeFile(dir.file("gates/" + gate), "");
  }

  json get(const std::string& name) { return server.workload(key, name); }
  json waitFor(const std::string& name, const std::string& state) {
    return server.waitFor(key, name, state);
  }
  std::string logs(const std::string& name, const std::string& pod = "") {
    return call("GET",
                "/api/v1/workloads/ml/" + name + "/logs" + (pod.empty() ? "" : "?pod=" + pod), key)
        .get<std::string>();
  }
  bool logHolds(const std::string& name, const std::string& pod, const std::string& text) {
    return server.logHolds(key, name, pod, text);
  }
  std::vector<std::string> events(const std::string& name) {
    std::vector<std::string> out;
    const json all = call("GET", "/api/v1/fleet/events?workload=ml/" + name, key);
    for (const auto& e : all["data"]) {
      const std::string reason = e["reason"].get<std::string>();
      out.push_back(e["kind"].get<std::string>() + (reason.empty() ? "" : "/" + reason));
    }
    return out;
  }
  // The GPU time a workload of `gpus` GPUs running from started_at to finished_at costs, at 1.00
  // per GPU-second.
  static Money expectedCharge(const json& w, int gpus) {
    const int64_t ms = millisOf(w["finished_at"]) - millisOf(w["started_at"]);
    return Money::fromNanos(ms * gpus * 1'000'000);
  }
  static Money money(const json& v) { return *Money::parse(v.get<std::string>()); }

  testing::TempDir dir;
  testing::FleetServer server{dir, kAdminKey};
  std::string key;
};

TEST_F(FleetRunTest, AJobRunsFromAdmissionToSuccessAndPaysForItsGpusFromStartToEnd) {
  json submitted = submit("train", 2, 2, "a");
  EXPECT_TRUE(submitted["state"] == "running" || submitted["state"] == "admitted")
      << submitted.dump();
  json running = waitFor("train", "running");
  ASSERT_EQ(running["pods"].size(), 2u) << running.dump();
  EXPECT_FALSE(running["started_at"].is_null());
  EXPECT_TRUE(running["finished_at"].is_null());
  EXPECT_TRUE(running["exit_code"].is_null());
  EXPECT_EQ(running["runs"], 1);
  // Each pod runs with its index, Purser's identity and the template's env.
  EXPECT_TRUE(logHolds("train", "main-1", "pod 1 of ml/train in research"));
  EXPECT_TRUE(logHolds("train", "main-0", "pod 0 of ml/train in research"));

  open("a");
  json done = waitFor("train", "succeeded");
  EXPECT_EQ(done["exit_code"], 0);
  EXPECT_EQ(done["reason"], "Completed");
  EXPECT_FALSE(done["finished_at"].is_null());
  for (const auto& p : done["pods"]) EXPECT_EQ(p["phase"], "succeeded") << done.dump();
  EXPECT_EQ(logs("train", "main-0"), "pod 0 of ml/train in research\nfinished\n");
  // 4 GPUs from the pods' start to their end, to the millisecond.
  EXPECT_EQ(money(done["gpu_charged"]), expectedCharge(done, 4)) << done.dump();
  const std::vector<std::string> expected = {"Submitted", "Admitted/QuotaReserved",
                                             "Started/PodsStarted", "Succeeded/Completed"};
  EXPECT_EQ(events("train"), expected);
  // Its quota is free again; it is listed among the finished.
  json queues = call("GET", "/api/v1/queues", kAdminKey);
  EXPECT_EQ(queues["data"][0]["admitted"], 0) << queues.dump();
  json finished = call("GET", "/api/v1/workloads?state=succeeded", key);
  ASSERT_EQ(finished["data"].size(), 1u);
  EXPECT_EQ(finished["data"][0]["name"], "ml/train");
}

TEST_F(FleetRunTest, AFailingCommandFailsWithItsExitCodeAndTheEndOfItsLog) {
  open("b");
  submit("broken", 1, 1, "b", 3);
  json failed = waitFor("broken", "failed");
  EXPECT_EQ(failed["exit_code"], 3);
  EXPECT_EQ(failed["reason"], "PodFailed");
  EXPECT_NE(failed["message"].get<std::string>().find("exited with code 3"), std::string::npos);
  EXPECT_EQ(failed["log_tail"], "pod 0 of ml/broken in research\nfinished\n");
  EXPECT_EQ(logs("broken"), "pod 0 of ml/broken in research\nfinished\n");
  // The same through the CLI, and the table of workloads shows the exit code.
  EXPECT_EQ(server.cli({"logs", "ml/broken"}, key),
            std::make_pair(0, std::string("pod 0 of ml/broken in research\nfinished\n")));
  const auto [listed, table] = server.cli({"workloads", "--state", "failed"}, key);
  EXPECT_EQ(listed, 0);
  EXPECT_NE(table.find("EXIT"), std::string::npos) << table;
  const auto [missing, said] = server.cli({"logs", "ml/nothing-here"}, key);
  EXPECT_NE(missing, 0);
  EXPECT_NE(said.find("no workload named \"ml/nothing-here\""), std::string::npos) << said;
  // A program that cannot run fails at once, saying why, and holds nothing.
  json bad = {
      {"name", "typo"},
      {"queue", "research"},
      {"pod_sets",
       {{{"name", "main"}, {"requests", {{"cpu", "1"}}}, {"command", {"pyhton", "x.py"}}}}}};
  json typo = call("POST", "/api/v1/workloads", key, bad.dump());
  EXPECT_EQ(typo["state"], "failed") << typo.dump();
  EXPECT_EQ(typo["reason"], "StartFailed");
  EXPECT_NE(typo["message"].get<std::string>().find("cannot run \"pyhton\""), std::string::npos);
  json queues = call("GET", "/api/v1/queues", kAdminKey);
  EXPECT_EQ(queues["data"][0]["admitted"], 0) << queues.dump();
  // Asking for logs of a pod that does not exist is a clear 404.
  int status = 0;
  call("GET", "/api/v1/workloads/ml/broken/logs?pod=main-9", key, "", "", &status);
  EXPECT_EQ(status, 404);
}

TEST_F(FleetRunTest, ARunPastItsMaximumExecutionTimeIsStoppedAndFails) {
  json w = {{"name", "forever"},
            {"queue", "research"},
            {"max_execution_seconds", 1},
            {"pod_sets",
             {{{"name", "main"},
               {"requests", {{"cpu", "1"}, {"nvidia.com/gpu", "1"}}},
               {"command",
                {"/bin/sh", "-c",
                 "trap 'echo stopped; exit 143' TERM; echo started; "
                 "while true; do sleep 0.05; done"}}}}}};
  json submitted = call("POST", "/api/v1/workloads", key, w.dump());
  EXPECT_EQ(submitted["max_execution_seconds"], 1) << submitted.dump();
  json failed = waitFor("forever", "failed");
  EXPECT_EQ(failed["reason"], "MaximumExecutionTimeExceeded");
  EXPECT_NE(failed["message"].get<std::string>().find("maximum execution time of 1 s"),
            std::string::npos);
  // Its process was told to stop (and did), and it is not queued again.
  EXPECT_TRUE(logHolds("forever", "", "stopped"));
  const std::vector<std::string> expected = {"Submitted", "Admitted/QuotaReserved",
                                             "Started/PodsStarted",
                                             "Failed/MaximumExecutionTimeExceeded"};
  EXPECT_EQ(events("forever"), expected);
  EXPECT_GT(money(failed["gpu_charged"]), Money());
}

TEST_F(FleetRunTest, APreemptedWorkloadIsStoppedRequeuedAndRunsAgainWhenRoomReturns) {
  submit("steady", 1, 4, "a");
  submit("scavenger", 1, 4, "c", 0, "low");
  waitFor("steady", "running");
  waitFor("scavenger", "running");
  ASSERT_TRUE(logHolds("scavenger", "main-0", "pod 0 of ml/scavenger"));
  // An urgent workload needs 4 GPUs: the low-priority one makes room.
  submit("urgent", 1, 4, "d", 0, "urgent");
  json evicted = waitFor("scavenger", "evicted");
  EXPECT_EQ(evicted["preemptions"], 1);
  // While it waits, its reason is why it waits now (the eviction is among its events).
  EXPECT_EQ(evicted["reason"], "WaitingForQuota") << evicted.dump();
  ASSERT_EQ(evicted["pods"].size(), 1u);
  EXPECT_EQ(evicted["pods"][0]["phase"], "stopped");
  waitFor("urgent", "running");
  // The victim's pod was asked to stop: SIGTERM, which it handles, well within its grace.
  EXPECT_TRUE(logHolds("scavenger", "main-0", "stopping 0"));
  const std::vector<std::string> kinds = events("scavenger");
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "Evicted/Preempted"), kinds.end());
  // Its first run's GPU time is charged up to the eviction, and no further.
  const Money first_run = money(evicted["gpu_charged"]);
  EXPECT_GT(first_run, Money());
  // Room returns when "steady" ends: the victim runs again, a second run of the same pods.
  open("a");
  waitFor("steady", "succeeded");
  json again = waitFor("scavenger", "running");
  EXPECT_EQ(again["runs"], 2);
  ASSERT_TRUE(logHolds("scavenger", "main-0", "pod 0 of ml/scavenger"));
  open("c");
  open("d");
  json done = waitFor("scavenger", "succeeded");
  EXPECT_EQ(money(done["gpu_charged"]), first_run.add(expectedCharge(done, 4)).value());
  waitFor("urgent", "succeeded");
}

TEST_F(FleetRunTest, AKilledPurserAdoptsItsRunningPodsAndChargesTheirGpuTimeOnce) {
  submit("long", 2, 1, "e");
  json before = waitFor("long", "running");
  ASSERT_TRUE(logHolds("long", "main-0", "pod 0 of ml/long"));
  ASSERT_TRUE(logHolds("long", "main-1", "pod 1 of ml/long"));
  // Let at least one metering land, then kill Purser with no chance to clean up.
  EXPECT_TRUE(testing::eventually(
      [&] { return !money(get("long")["gpu_charged"]).isZero(); },
      {.pause = std::chrono::milliseconds(20), .what = "a first metering of the run"}));
  EXPECT_EQ(server.kill(), 128 + SIGKILL);
  std::string why;
  ASSERT_TRUE(server.start(&why)) << why;
  json adopted = get("long");
  EXPECT_EQ(adopted["state"], "running") << adopted.dump();
  EXPECT_EQ(adopted["runs"], 1) << "adopted, not started again";
  EXPECT_EQ(adopted["started_at"], before["started_at"]);
  open("e");
  json done = waitFor("long", "succeeded");
  // Each pod printed its first line once: nothing ran twice.
  EXPECT_EQ(logs("long", "main-0"), "pod 0 of ml/long in research\nfinished\n");
  EXPECT_EQ(logs("long", "main-1"), "pod 1 of ml/long in research\nfinished\n");
  int started = 0;
  for (const auto& k : events("long")) started += k.rfind("Started", 0) == 0 ? 1 : 0;
  EXPECT_EQ(started, 1);
  // GPU time from start to end, including the minutes Purser was down, charged once.
  EXPECT_EQ(money(done["gpu_charged"]), expectedCharge(done, 2)) << done.dump();
  json spend = call("GET", "/api/v1/spend?scope=tenant:acme&group_by=model", kAdminKey);
  ASSERT_EQ(spend["data"].size(), 1u) << spend.dump();
  EXPECT_EQ(money(spend["data"][0]["cost"]), money(done["gpu_charged"])) << spend.dump();
}

// The operator removes a ClusterQueue from the manifest file while a workload is admitted in it:
// Purser still starts, keeps the queue terminating (it admits nothing new, says so) until its
// workloads have ended, then removes it — Kueue's finalizer on a deleted ClusterQueue.
TEST_F(FleetRunTest, AQueueRemovedFromTheManifestsWhileWorkIsAdmittedTerminatesUntilItEnds) {
  submit("long", 1, 1, "a");
  waitFor("long", "running");
  EXPECT_EQ(server.kill(), 128 + SIGKILL);
  // The new file: ClusterQueue research and its LocalQueue are gone; another takes their place.
  testing::KueueQueue batch;
  batch.cluster_queue = "batch";
  testing::writeFile(dir.file("fleet.yaml"), batch.yaml());
  std::string why;
  ASSERT_TRUE(server.start(&why)) << "a removed queue with work in it must not stop the start: "
                                  << why;
  const auto queue = [&](const std::string& name) {
    const json all = call("GET", "/api/v1/queues", kAdminKey);
    for (const auto& q : all["data"]) {
      if (q["name"] == name) return q;
    }
    return json();
  };
  json research = queue("research");
  ASSERT_TRUE(research.is_object()) << call("GET", "/api/v1/queues", kAdminKey).dump();
  EXPECT_EQ(research["terminating"], true);
  EXPECT_EQ(research["admitted"], 1);
  EXPECT_EQ(queue("batch")["terminating"], false);
  EXPECT_EQ(get("long")["state"], "running") << "its workload runs on, adopted";
  EXPECT_TRUE(
      server.logLine("ClusterQueue research is no longer in the manifests, but 1 "
                     "workload(s) are admitted in it"));
  // Nothing new is admitted from it.
  submit("late", 1, 1, "b");
  json late = get("late");
  EXPECT_EQ(late["state"], "pending") << late.dump();
  EXPECT_EQ(queue("research")["pending"], 1);
  // Its workload ends; the one waiting is deleted; then the queue goes.
  open("a");
  waitFor("long", "succeeded");
  EXPECT_EQ(get("late")["state"], "pending") << "a terminating queue admits nothing";
  int status = 0;
  call("DELETE", "/api/v1/workloads/ml/late", key, "", "application/json", &status);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(testing::eventually([&] { return !queue("research").is_object(); },
                                  {.pause = std::chrono::milliseconds(20),
                                   .what = "the terminating queue's removal once its work ended"}));
  // And the new queue works.
  json w = {{"name", "next"},
            {"queue", "batch"},
            {"pod_sets",
             {{{"name", "main"},
               {"requests", {{"cpu", "1"}}},
               {"command", {"/bin/sh", "-c", "echo ok"}}}}}};
  call("POST", "/api/v1/workloads", key, w.dump(), "application/json", &status);
  EXPECT_EQ(status, 201);
  waitFor("next", "succeeded");
}

}  // namespace
}  // namespace purser
