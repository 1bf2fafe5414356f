// Purser killed with SIGKILL at 20 random points while workloads are submitted and deleted: after
// each restart, every pod that runs is one Purser knows (adopted and metered) — none runs
// unknown — no pod was started twice, no GPU is held by two pods, and nothing acknowledged is
// lost. The pods are shell loops marked with their workload's name; each notes its start (and its
// GPU) in its team's workspace. Waits are bounded by counts, never by timing; the kill points are
// drawn from a seeded generator (the seed is printed).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "fakes/eventually.h"
#include "fakes/temp_dir.h"
#include "integration/fleet_harness.h"

namespace purser {
namespace {

using nlohmann::json;

constexpr const char* kAdminKey = "fleet-chaos-test-admin-key-0123456789";

// The workloads whose pods live now: from every process's command line, its marker.
std::multiset<std::string> livePods(const std::string& mark) {
  std::multiset<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = testing::readFile(entry.path().string() + "/cmdline");
    // The pod's shell: "/bin/sh\0-c\0SCRIPT\0MARK-NAME\0"; its sleeps carry no mark.
    if (cmdline.rfind("/bin/sh", 0) != 0) continue;
    const size_t at = cmdline.find(std::string(1, '\0') + mark);
    if (at == std::string::npos) continue;
    std::string rest = cmdline.substr(at + 1 + mark.size());
    rest = rest.substr(0, rest.find('\0'));
    // A zombie (a pod's shell that is gone but not reaped yet) does not count.
    const std::string stat = testing::readFile(entry.path().string() + "/stat");
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') continue;
    out.insert(rest);
  }
  return out;
}

TEST(FleetChaosTest, KilledAtTwentyRandomPointsPurserNeverLosesStartsTwiceOrLeavesAPodUnknown) {
  testing::TempDir dir;
  testing::writeFile(dir.file("fleet.yaml"), testing::fleetManifests(64));
  testing::writeFile(dir.file("purser.yaml"),
                     "listen: 127.0.0.1:0\nthreads: 1\n"
                     "fleet:\n  manifests: [fleet.yaml]\n  termination_grace: 0s\n"
                     "  nodes:\n    - {name: n0, cpu: 64, memory: 256Gi, "
                     "gpus: {count: 8, model: H100, memory: 80Gi}}\n");
  testing::FleetServer server{dir, kAdminKey};
  std::string why;
  ASSERT_TRUE(server.start(&why)) << why;
  const std::string key = server.member();
  ASSERT_FALSE(key.empty());
  const std::string mark = "chaos-" + std::to_string(::getpid()) + "-";
  const std::string starts = dir.file("var/workspaces/ml/starts.txt");

  const char* given = std::getenv("PURSER_CHAOS_SEED");
  const unsigned seed =
      given != nullptr ? static_cast<unsigned>(std::stoul(given)) : std::random_device{}();
  std::mt19937 random(seed);
  std::fprintf(stderr, "fleet chaos: seed %u\n", seed);
  std::set<std::string> acknowledged, deleted, deletion_acknowledged;
  int kills_during_requests = 0;
  for (int round = 0; round < 20; ++round) {
    // The kill comes at a random point within the next stretch of submissions and deletions.
    const pid_t pid = server.pid();
    const int delay_ms = std::uniform_int_distribution<int>(0, 400)(random);
    std::atomic<bool> killed{false};
    std::thread killer([pid, delay_ms, &killed] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      ::kill(pid, SIGKILL);
      killed = true;
    });
    for (int i = 0; !killed; ++i) {
      const std::string name = "c" + std::to_string(round) + "-" + std::to_string(i);
      json w = {{"name", name},
                {"queue", "research"},
                {"pod_sets",
                 {{{"name", "main"},
                   {"requests", {{"cpu", "1"}, {"nvidia.com/gpu", "1"}}},
                   {"command",
                    {"/bin/sh", "-c",
                     "echo \"$PURSER_WORKLOAD $CUDA_VISIBLE_DEVICES\" >> starts.txt; "
                     "while :; do sleep 1; done",
                     mark + name}}}}}};
      int status = 0;
      server.call("POST", "/api/v1/workloads", key, w.dump(), "application/json", &status);
      if (status == 201) acknowledged.insert(name);
      if (status == 0) ++kills_during_requests;
      // Now and then one of the running ones is deleted.
      if (!acknowledged.empty() && std::uniform_int_distribution<int>(0, 2)(random) == 0) {
        auto it = acknowledged.begin();
        std::advance(it, std::uniform_int_distribution<size_t>(0, acknowledged.size() - 1)(random));
        if (deleted.count(*it) == 0) {
          // Asked, it may be gone whatever the answer (the kill may cut the answer off).
          deleted.insert(*it);
          server.call("DELETE", "/api/v1/workloads/ml/" + *it, key, "", "application/json",
                      &status);
          if (status >= 200 && status < 300) deletion_acknowledged.insert(*it);
        }
      }
    }
    killer.join();
    server.kill();
    ASSERT_TRUE(server.start(&why)) << "round " << round << ": " << why;
    // Settled: nothing is starting; what runs, runs.
    // (Not checked here: what follows is.)
    json all;
    testing::eventually(
        [&] {
          all = server.call("GET", "/api/v1/workloads?limit=1000", key);
          bool settled = all.is_object();
          for (const auto& w : all.value("data", json::array())) {
            const std::string st = w.value("state", "");
            settled = settled && st != "admitted" && st != "unknown";
          }
          return settled;
        },
        {.attempts = 3000, .pause = std::chrono::milliseconds(20), .what = "the fleet settled"});
    // No pod runs that Purser does not know as running; each running workload has its pod.
    // (A pod a deletion cut off by the kill stopped is found gone at the next poll.)
    std::map<std::string, std::string> state;
    std::multiset<std::string> live;
    EXPECT_TRUE(testing::eventually(
        [&] {
          all = server.call("GET", "/api/v1/workloads?limit=1000", key);
          state.clear();
          for (const auto& w : all.value("data", json::array())) {
            state[w.value("workload", "")] = w.value("state", "");
          }
          live = livePods(mark);
          bool agrees = true;
          for (const auto& name : live) agrees = agrees && state[name] == "running";
          for (const auto& [name, st] : state) {
            agrees = agrees && (st != "running" || live.count(name) == 1);
          }
          return agrees;
        },
        {.attempts = 500,
         .pause = std::chrono::milliseconds(20),
         .what = "the live pods agreeing with the workloads"}))
        << "round " << round;
    // Every acknowledged submission is known; every acknowledged deletion holds.
    for (const auto& name : acknowledged) {
      if (deleted.count(name) != 0) continue;
      EXPECT_EQ(state.count(name), 1u) << "round " << round << ": " << name << " was lost";
    }
    for (const auto& name : deletion_acknowledged) {
      EXPECT_EQ(state.count(name), 0u)
          << "round " << round << ": " << name << " was deleted, and is " << state[name];
    }
    for (const auto& name : live) {
      EXPECT_EQ(state[name], "running")
          << "round " << round << ": pod of " << name << " runs while Purser says " << state[name];
      EXPECT_EQ(live.count(name), 1u) << "round " << round << ": " << name << " runs twice";
    }
    for (const auto& [name, st] : state) {
      if (st == "running") {
        EXPECT_EQ(live.count(name), 1u) << "round " << round << ": " << name << " has no pod";
      }
    }
    // Started once each; no GPU held by two live pods.
    std::map<std::string, int> started;
    std::map<std::string, std::string> gpu_of;
    std::istringstream lines(testing::readFile(starts));
    for (std::string line; std::getline(lines, line);) {
      std::string name = line.substr(0, line.find(' '));
      if (name.rfind("ml/", 0) == 0) name = name.substr(3);
      ++started[name];
      gpu_of[name] = line.substr(line.find(' ') + 1);
    }
    for (const auto& [name, n] : started) {
      EXPECT_EQ(n, 1) << "round " << round << ": " << name << " started " << n << " times";
    }
    std::map<std::string, std::string> holder;
    for (const auto& name : std::set<std::string>(live.begin(), live.end())) {
      EXPECT_FALSE(gpu_of[name].empty()) << name << " has no GPU";
      auto [it, fresh] = holder.emplace(gpu_of[name], name);
      EXPECT_TRUE(fresh) << "round " << round << ": GPU " << gpu_of[name] << " is held by "
                         << it->second << " and " << name;
    }
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "the workloads after round " << round << ": " << all.dump()
                    << "\nthe starts: " << testing::readFile(starts);
      break;
    }
  }
  std::fprintf(stderr,
               "fleet chaos: 20 kills (%d in the middle of a request), %zu workloads "
               "acknowledged, %zu deleted\n",
               kills_during_requests, acknowledged.size(), deleted.size());
  // What still runs goes with its workloads (pods outlive a Purser that stops).
  json all = server.call("GET", "/api/v1/workloads?limit=1000", key);
  for (const auto& w : all.value("data", json::array())) {
    server.call("DELETE", "/api/v1/workloads/ml/" + w.value("workload", ""), key);
  }
  EXPECT_TRUE(testing::eventually([&] { return livePods(mark).empty(); },
                                  {.attempts = 1000,
                                   .pause = std::chrono::milliseconds(10),
                                   .what = "every deleted workload's pod gone"}));
  server.stop();
}

}  // namespace
}  // namespace purser
