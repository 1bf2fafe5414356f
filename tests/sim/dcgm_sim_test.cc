#include "sim/dcgm_sim.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace purser::sim {
namespace {

using nlohmann::json;

class DcgmSimTest : public ::testing::Test {
 protected:
  http::Response call(http::Method method, const std::string& path, const std::string& body = "") {
    http::Request req;
    req.method = method;
    req.target = path;
    req.body = body;
    auto match = router.match(req);
    EXPECT_NE(match.route, nullptr) << path;
    if (match.route == nullptr) return {};
    return std::get<http::SyncHandler>(match.route->handler)(req);
  }

  DcgmSim sim{{.hostname = "gpu-7", .gpus = 2, .memory_mib = 1000, .seed = 3}};
  http::Router router;
  void SetUp() override { ASSERT_TRUE(sim.addRoutes(router)); }
};

TEST_F(DcgmSimTest, ExportsEveryGpuWithTheExportersNamesAndLabels) {
  const std::string text = call(http::Method::kGet, "/metrics").body;
  for (const char* family : {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                             "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
                             "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_XID_ERRORS"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + family + " gauge"), std::string::npos) << family;
  }
  EXPECT_NE(text.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-"), std::string::npos) << text;
  EXPECT_NE(text.find("device=\"nvidia1\""), std::string::npos);
  EXPECT_NE(text.find("Hostname=\"gpu-7\"} 0"), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_FB_FREE{gpu=\"0\""), std::string::npos);
  // Same host and seed, same UUIDs.
  DcgmSim again({.hostname = "gpu-7", .gpus = 2, .memory_mib = 1000, .seed = 3});
  http::Router other;
  ASSERT_TRUE(again.addRoutes(other));
  http::Request req;
  req.target = "/metrics";
  auto m = other.match(req);
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(std::get<http::SyncHandler>(m.route->handler)(req).body, text);
}

TEST_F(DcgmSimTest, ReadingsAreSetAtRunTimeAllOrNothing) {
  auto set = call(http::Method::kPost, "/sim/gpus", R"({"gpu": 1, "util": 95, "xid": 79})");
  ASSERT_EQ(set.status, 200) << set.body;
  const std::string text = call(http::Method::kGet, "/metrics").body;
  EXPECT_NE(text.find("DCGM_FI_DEV_XID_ERRORS{gpu=\"1\""), std::string::npos);
  const json state = json::parse(call(http::Method::kGet, "/sim/gpus").body)["gpus"];
  EXPECT_EQ(state[1]["xid"], 79);
  EXPECT_EQ(state[1]["util"], 95);
  EXPECT_EQ(state[0]["util"], 0);
  // Every GPU when none is named.
  ASSERT_EQ(call(http::Method::kPost, "/sim/gpus", R"({"temp": 80})").status, 200);
  EXPECT_EQ(json::parse(call(http::Method::kGet, "/sim/gpus").body)["gpus"][0]["temp"], 80);
  for (const char* bad : {R"({"gpu": 2, "util": 1})", R"({"util": 101})", R"({"fan": 3})",
                          R"({"util": 50, "memory_used_mib": 5000})", "[]", "nope"}) {
    auto r = call(http::Method::kPost, "/sim/gpus", bad);
    EXPECT_EQ(r.status, 400) << bad;
  }
  EXPECT_EQ(json::parse(call(http::Method::kGet, "/sim/gpus").body)["gpus"][0]["util"], 0)
      << "a refused change changes nothing";
}

TEST(DcgmSimThrottle, AThrottledGpuClocksDownAndAccruesThermalViolationTime) {
  ManualClock clock;
  DcgmSim sim({.hostname = "gpu-7", .gpus = 2, .memory_mib = 1000, .seed = 3}, clock);
  http::Router router;
  ASSERT_TRUE(sim.addRoutes(router));
  auto call = [&](http::Method method, const std::string& body) {
    http::Request req;
    req.method = method;
    req.target = method == http::Method::kGet ? "/metrics" : "/sim/gpus";
    req.body = body;
    auto match = router.match(req);
    EXPECT_NE(match.route, nullptr);
    if (match.route == nullptr) return http::Response{};
    return std::get<http::SyncHandler>(match.route->handler)(req);
  };
  auto value = [](const std::string& text, const std::string& series) {
    const size_t at = text.find(series);
    if (at == std::string::npos) return -1.0;
    const size_t space = text.find("} ", at);
    return std::stod(text.substr(space + 2));
  };
  ASSERT_EQ(call(http::Method::kPost, R"({"util": 90})").status, 200);
  std::string text = call(http::Method::kGet, "").body;
  EXPECT_EQ(value(text, "DCGM_FI_DEV_SM_CLOCK{gpu=\"0\""), DcgmSim::kBoostClockMhz);
  EXPECT_EQ(value(text, "DCGM_FI_DEV_THERMAL_VIOLATION{gpu=\"0\""), 0);

  EXPECT_EQ(call(http::Method::kPost, R"({"throttle": 1})").status, 400);
  ASSERT_EQ(call(http::Method::kPost, R"({"gpu": 0, "throttle": true, "temp": 88})").status, 200);
  clock.advance(std::chrono::seconds(2));
  text = call(http::Method::kGet, "").body;
  EXPECT_EQ(value(text, "DCGM_FI_DEV_SM_CLOCK{gpu=\"0\""), DcgmSim::kThrottledClockMhz);
  EXPECT_EQ(value(text, "DCGM_FI_DEV_THERMAL_VIOLATION{gpu=\"0\""), 2e6);
  EXPECT_EQ(value(text, "DCGM_FI_DEV_THERMAL_VIOLATION{gpu=\"1\""), 0) << "only GPU 0 is hot";
  EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_THERMAL_VIOLATION counter"), std::string::npos);

  // Cooled down: the clock comes back and the counter keeps what it had.
  ASSERT_EQ(call(http::Method::kPost, R"({"gpu": 0, "throttle": false})").status, 200);
  clock.advance(std::chrono::seconds(5));
  text = call(http::Method::kGet, "").body;
  EXPECT_EQ(value(text, "DCGM_FI_DEV_SM_CLOCK{gpu=\"0\""), DcgmSim::kBoostClockMhz);
  EXPECT_EQ(value(text, "DCGM_FI_DEV_THERMAL_VIOLATION{gpu=\"0\""), 2e6);
}

}  // namespace
}  // namespace purser::sim
