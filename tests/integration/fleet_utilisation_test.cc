// GPU utilisation end to end: `purser serve` with a node of two GPUs, scraping a `purser sim dcgm`
// exporter whose Hostname is that node's name; a workload holding one GPU; the utilisation the
// exporter reports shown per GPU on the node map, and per workload in the efficiency report
// (allocated, observed and busy GPU-hours, efficiency, allocated but idle), other teams' work
// unnamed, what was recorded kept across a restart.
//
// Waits poll the API and are bounded by a count, never by timing.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "fakes/eventually.h"
#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/temp_dir.h"
#include "integration/fleet_harness.h"

namespace purser {
namespace {

using nlohmann::json;
using testing::Process;

constexpr const char* kAdminKey = "fleet-utilisation-test-admin-key-0123456789";

class FleetUtilisationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dcgm = std::make_unique<Process>(
        std::vector<std::string>{PURSER_BINARY, "sim", "dcgm", "--listen", "127.0.0.1:0",
                                 "--hostname", "node-1", "--gpus", "2"});
    auto line = dcgm->waitForStdout("listening on ");
    ASSERT_TRUE(line.has_value()) << dcgm->err();
    dcgm_port = testing::portFromListeningLine(*line);
    testing::writeFile(dir.file("fleet.yaml"), testing::fleetManifests(64));
    testing::writeFile(
        dir.file("purser.yaml"),
        fmt::format("listen: 127.0.0.1:0\nthreads: 1\n"
                    "gpu_prices:\n  - {{flavor: h100, per_gpu_hour: \"3.60\"}}\n"
                    "observe:\n"
                    "  exporters: [{{name: node-1-dcgm, url: 'http://127.0.0.1:{}/metrics',"
                    " interval: 100ms}}]\n"
                    "fleet:\n  manifests: [fleet.yaml]\n  metering_interval: 1s\n"
                    "  nodes:\n"
                    "    - name: node-1\n      cpu: 64\n      memory: 512Gi\n"
                    "      gpus: {{count: 2, model: H100-SXM-80GB, memory: 80Gi}}\n",
                    dcgm_port));
    std::string why;
    ASSERT_TRUE(server.start(&why)) << why;
    key = server.member();
    ASSERT_FALSE(key.empty());
  }

  json call(const std::string& method, const std::string& target, const std::string& as,
            const std::string& body = "", int* status = nullptr) {
    return server.call(method, target, as, body, "application/json", status);
  }

  // Sets a reading of the simulated exporter's GPU `gpu`.
  void setUtil(int gpu, double util) {
    const testing::RawResponse r = testing::callJson(dcgm_port, "POST", "/sim/gpus", {},
                                                     json{{"gpu", gpu}, {"util", util}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
  }

  // Polls `what` until `done` holds for it; its last value (a failure is added when it never
  // does).
  json waitUntil(const std::string& what, const std::function<json()>& read,
                 const std::function<bool(const json&)>& done) {
    json last;
    EXPECT_TRUE(testing::eventually(
        [&] {
          last = read();
          return done(last);
        },
        {.attempts = 1500, .pause = std::chrono::milliseconds(20), .what = what.c_str()}))
        << "last: " << last.dump();
    return last;
  }

  // GPU `index` of node-1 on the node map, as `as` sees it.
  json gpuOnMap(const std::string& as, int index) {
    const json nodes = call("GET", "/api/v1/fleet/nodes", as);
    if (!nodes.is_object() || !nodes["data"].is_array()) return nullptr;
    for (const auto& n : nodes["data"]) {
      if (n["name"] != "node-1") continue;
      for (const auto& g : n["gpus"]) {
        if (g["index"] == index) return g;
      }
    }
    return nullptr;
  }

  // The report's entry for `workload` (null: other teams'), as `as` sees it.
  json entry(const std::string& as, const json& workload) {
    const json report = call("GET", "/api/v1/fleet/utilisation", as);
    if (!report.is_object() || !report["data"].is_array()) return nullptr;
    for (const auto& e : report["data"]) {
      if (e["workload"] == workload) return e;
    }
    return nullptr;
  }

  testing::TempDir dir;
  std::unique_ptr<Process> dcgm;
  uint16_t dcgm_port = 0;
  testing::FleetServer server{dir, kAdminKey};
  std::string key;
};

TEST_F(FleetUtilisationTest, AllocatedButIdleGpusAreSeenOnTheNodeMapAndInTheReport) {
  // A notebook that holds one GPU and runs nothing on it.
  int status = 0;
  json submitted = call("POST", "/api/v1/workloads", key,
                        R"({"name": "notebook", "queue": "research", "pod_sets": [{"name": "main",
                            "count": 1, "requests": {"nvidia.com/gpu": "1"}}]})",
                        &status);
  ASSERT_EQ(status, 201) << submitted.dump();
  ASSERT_EQ(submitted["state"], "admitted") << submitted.dump();
  const json& placed = submitted["admission"]["pod_sets"][0]["placements"][0];
  ASSERT_EQ(placed["node"], "node-1");
  const int gpu = placed["gpus"][0];
  const int other = 1 - gpu;

  // The exporter says its GPU does almost nothing while the other is busy.
  setUtil(gpu, 3);
  setUtil(other, 95);
  json mine = waitUntil(
      "GPU utilisation on the node map", [&] { return gpuOnMap(key, gpu); },
      [](const json& g) { return g.is_object() && g["utilisation"] == 3; });
  EXPECT_TRUE(mine["utilisation_at"].is_string()) << mine.dump();
  EXPECT_EQ(mine["shares"][0]["workload"], "ml/notebook");
  waitUntil(
      "the other GPU's utilisation", [&] { return gpuOnMap(key, other); },
      [](const json& g) { return g.is_object() && g["utilisation"] == 95; });

  // Allocated but idle: observed, recorded with its charges, under 10 %.
  json idle = waitUntil(
      "the notebook flagged idle", [&] { return entry(key, "ml/notebook"); },
      [](const json& e) {
        return e.is_object() && e["idle"] == true && e["observed_gpu_hours"].get<double>() > 0 &&
               e["efficiency"].is_number();
      });
  EXPECT_EQ(idle["live"], true);
  EXPECT_EQ(idle["state"], "admitted");
  EXPECT_EQ(idle["tenant"], "acme");
  EXPECT_LT(idle["efficiency"].get<double>(), 0.1) << idle.dump();
  EXPECT_LT(idle["recent_utilisation"].get<double>(), 10.0) << idle.dump();
  EXPECT_GE(idle["allocated_gpu_hours"].get<double>(), idle["observed_gpu_hours"].get<double>());
  ASSERT_EQ(idle["gpus"].size(), 1u) << idle.dump();
  EXPECT_EQ(idle["gpus"][0]["node"], "node-1");
  EXPECT_EQ(idle["gpus"][0]["index"], gpu);
  EXPECT_EQ(idle["gpus"][0]["gpu_milli"], 1000);
  EXPECT_EQ(idle["gpus"][0]["utilisation"], 3);
  const json report = call("GET", "/api/v1/fleet/utilisation?since=1h", key);
  EXPECT_EQ(report["idle_rule"]["window_s"], 600);
  EXPECT_EQ(report["idle_rule"]["below_percent"], 10);
  EXPECT_TRUE(report["since"].is_string());
  EXPECT_TRUE(report["totals"]["efficiency"].is_number()) << report.dump();
  call("GET", "/api/v1/fleet/utilisation?since=forever", key, "", &status);
  EXPECT_EQ(status, 400);

  // Another team sees that a GPU is held and idle, not whose.
  call("POST", "/api/v1/teams", kAdminKey, R"({"name":"labs","tenant":"acme"})");
  const json bob =
      call("POST", "/api/v1/users", kAdminKey, R"({"name":"bob","tenant":"acme","team":"labs"})");
  const json bob_key =
      call("POST", "/api/v1/keys", kAdminKey,
           json{{"name", "laptop"}, {"owner", {{"kind", "user"}, {"id", bob["id"]}}}}.dump());
  ASSERT_TRUE(bob_key["key"].is_string()) << bob_key.dump();
  const json theirs = call("GET", "/api/v1/fleet/utilisation", bob_key["key"].get<std::string>());
  ASSERT_EQ(theirs["data"].size(), 1u) << theirs.dump();
  EXPECT_TRUE(theirs["data"][0]["workload"].is_null());
  EXPECT_TRUE(theirs["data"][0]["tenant"].is_null());
  EXPECT_EQ(theirs["data"][0]["idle"], true);
  EXPECT_EQ(theirs.dump().find("notebook"), std::string::npos) << theirs.dump();

  // Busy again: no longer idle once its last ten minutes average 10 % or more.
  setUtil(gpu, 90);
  json busy = waitUntil(
      "the notebook busy again", [&] { return entry(key, "ml/notebook"); },
      [](const json& e) { return e.is_object() && e["idle"] == false; });
  EXPECT_GE(busy["recent_utilisation"].get<double>(), 10.0) << busy.dump();

  // What was recorded survives a restart (and the notebook, still holding its GPU, goes on).
  const json before = entry(key, "ml/notebook");
  ASSERT_TRUE(before.is_object());
  ASSERT_EQ(server.stop(), 0);
  std::string why;
  ASSERT_TRUE(server.start(&why)) << why;
  const json after = entry(key, "ml/notebook");
  ASSERT_TRUE(after.is_object());
  // (Less at most what had not been metered yet when it stopped: a metering interval and a tick.)
  EXPECT_GE(after["allocated_gpu_hours"].get<double>(),
            before["allocated_gpu_hours"].get<double>() - 5.0 / 3600)
      << "before: " << before.dump() << "\nafter: " << after.dump();
  EXPECT_GT(after["busy_gpu_hours"].get<double>(), 0);
}

}  // namespace
}  // namespace purser
