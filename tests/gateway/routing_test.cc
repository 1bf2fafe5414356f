#include "gateway/routing.h"

#include <gtest/gtest.h>

#include <map>

namespace purser::gateway {
namespace {

Money m(const char* s) { return *Money::parse(s); }

class RoutingTest : public ::testing::Test {
 protected:
  std::unique_ptr<Route> route(Strategy s) {
    auto owned = std::make_unique<Route>();
    Route& r = *owned;
    r.alias = "chat";
    r.strategy = s;
    for (const char* name : {"a", "b", "c"}) {
      auto t = std::make_unique<Target>();
      t->provider = &provider;
      t->model = name;
      r.targets.push_back(std::move(t));
    }
    return owned;
  }
  static std::string names(const std::vector<Target*>& order) {
    std::string out;
    for (const Target* t : order) out += t->model;
    return out;
  }

  Provider provider{"p",          ProviderKind::kOpenAi,   "http://x/v1/",
                    {"k1", "k2"}, std::chrono::seconds(1), std::chrono::seconds(1)};
  ManualClock clock;
  SeededRandom random{3};
};

TEST_F(RoutingTest, FallbackKeepsTheConfiguredOrder) {
  std::unique_ptr<Route> owned = route(Strategy::kFallback);
  Route& r = *owned;
  EXPECT_EQ(names(orderTargets(r, clock.monotonic(), random)), "abc");
}

TEST_F(RoutingTest, WeightedPicksFirstInProportionToWeight) {
  std::unique_ptr<Route> owned = route(Strategy::kWeighted);
  Route& r = *owned;
  r.targets[0]->weight = 6;
  r.targets[1]->weight = 3;
  r.targets[2]->weight = 1;
  std::map<std::string, int> first;
  for (int i = 0; i < 10'000; ++i) {
    const auto order = orderTargets(r, clock.monotonic(), random);
    ASSERT_EQ(order.size(), 3u) << "every target is in the order: the rest are fallbacks";
    ++first[order[0]->model];
  }
  EXPECT_NEAR(first["a"], 6000, 300);
  EXPECT_NEAR(first["b"], 3000, 300);
  EXPECT_NEAR(first["c"], 1000, 300);
  r.targets[2]->weight = 0;
  for (int i = 0; i < 1000; ++i)
    EXPECT_NE(orderTargets(r, clock.monotonic(), random)[0]->model, "c");
}

TEST_F(RoutingTest, LeastLatencyLeastCostAndLeastLoaded) {
  std::unique_ptr<Route> owned_lat = route(Strategy::kLeastLatency);
  Route& lat = *owned_lat;
  recordSuccess(*lat.targets[0], std::chrono::milliseconds(300));
  recordSuccess(*lat.targets[1], std::chrono::milliseconds(100));
  recordSuccess(*lat.targets[2], std::chrono::milliseconds(200));
  EXPECT_EQ(names(orderTargets(lat, clock.monotonic(), random)), "bca");
  // The average moves with new samples.
  for (int i = 0; i < 20; ++i) recordSuccess(*lat.targets[1], std::chrono::milliseconds(900));
  EXPECT_EQ(names(orderTargets(lat, clock.monotonic(), random)), "cab");

  std::unique_ptr<Route> owned_cost = route(Strategy::kLeastCost);
  Route& cost = *owned_cost;
  const ledger::TokenPrice cheap{m("0.10"), m("0.40")}, dear{m("3"), m("15")};
  cost.targets[0]->price = &dear;
  cost.targets[2]->price = &cheap;  // b is unpriced: last
  EXPECT_EQ(names(orderTargets(cost, clock.monotonic(), random)), "cab");

  std::unique_ptr<Route> owned_load = route(Strategy::kLeastLoaded);
  Route& load = *owned_load;
  load.targets[0]->health.in_flight = 5;
  load.targets[1]->health.in_flight = 2;
  load.targets[2]->health.in_flight = 9;
  EXPECT_EQ(names(orderTargets(load, clock.monotonic(), random)), "bac");
}

TEST_F(RoutingTest, ATargetNotMeasuredYetGoesBehindTheMeasuredOnesUnderLeastLatency) {
  // A replica that just joined reports no latency; it must not take the traffic for that.
  std::unique_ptr<Route> owned = route(Strategy::kLeastLatency);
  Route& r = *owned;
  recordSuccess(*r.targets[1], std::chrono::milliseconds(400));
  recordSuccess(*r.targets[2], std::chrono::milliseconds(100));
  EXPECT_EQ(names(orderTargets(r, clock.monotonic(), random)), "cba");
  // Once measured, it takes its place by its latency.
  recordSuccess(*r.targets[0], std::chrono::milliseconds(200));
  EXPECT_EQ(names(orderTargets(r, clock.monotonic(), random)), "cab");
}

TEST_F(RoutingTest, AFailingTargetCoolsDownThenIsProbedAgain) {
  std::unique_ptr<Route> owned = route(Strategy::kFallback);
  Route& r = *owned;
  Target& a = *r.targets[0];
  recordFailure(a, clock.monotonic());
  recordFailure(a, clock.monotonic());
  EXPECT_EQ(names(orderTargets(r, clock.monotonic(), random)), "abc") << "two failures are noise";
  recordFailure(a, clock.monotonic());
  EXPECT_EQ(names(orderTargets(r, clock.monotonic(), random)), "bca") << "cooled down: last";
  clock.advance(std::chrono::seconds(30));
  EXPECT_EQ(names(orderTargets(r, clock.monotonic(), random)), "abc") << "probed again";
  for (int i = 0; i < 3; ++i) recordFailure(a, clock.monotonic());
  clock.advance(std::chrono::seconds(30));
  EXPECT_TRUE(coolingDown(a, clock.monotonic())) << "failing again: the cooldown doubles";
  clock.advance(std::chrono::seconds(30));
  EXPECT_FALSE(coolingDown(a, clock.monotonic()));
  recordSuccess(a, std::chrono::milliseconds(10));
  for (int i = 0; i < 3; ++i) recordFailure(a, clock.monotonic());
  clock.advance(std::chrono::seconds(30));
  EXPECT_FALSE(coolingDown(a, clock.monotonic())) << "a success resets the backoff";
}

TEST_F(RoutingTest, ProviderKeysAreUsedInTurnAndReplaceable) {
  EXPECT_EQ(provider.baseUrl(), "http://x/v1");
  EXPECT_EQ(provider.nextKey(), "k1");
  EXPECT_EQ(provider.nextKey(), "k2");
  EXPECT_EQ(provider.nextKey(), "k1");
  provider.replaceKeys({"k9"});
  EXPECT_EQ(provider.nextKey(), "k9");
  EXPECT_EQ(provider.nextKey(), "k9");
  EXPECT_FALSE(parseStrategy("random").has_value());
}

}  // namespace
}  // namespace purser::gateway

namespace purser::gateway {
namespace {

TEST(LatencyWindowTest, QuantilesOverTheWindowOfTheLatestSamples) {
  LatencyWindow w;
  const MonoTime t0{};
  EXPECT_EQ(w.quantile(0.95, t0).second, 0u);
  EXPECT_FALSE(w.quantile(0.95, t0).first.has_value());
  // 1..100 ms: p95 is 95 ms (nearest rank), p50 50 ms.
  for (int i = 1; i <= 100; ++i)
    w.record(t0 + std::chrono::seconds(i), std::chrono::milliseconds(i));
  auto [p95, n] = w.quantile(0.95, t0);
  EXPECT_EQ(n, 100u);
  EXPECT_DOUBLE_EQ(*p95, 0.095);
  EXPECT_DOUBLE_EQ(*w.quantile(0.5, t0).first, 0.050);
  // Only those taken since: the last 10 (91..100 ms).
  auto [recent, m] = w.quantile(0.95, t0 + std::chrono::seconds(91));
  EXPECT_EQ(m, 10u);
  EXPECT_DOUBLE_EQ(*recent, 0.100);
  // It keeps the latest 256: 300 more samples of 1 s push the old ones out.
  for (int i = 0; i < 300; ++i)
    w.record(t0 + std::chrono::seconds(200 + i), std::chrono::seconds(1));
  auto [all, k] = w.quantile(0.0, t0);
  EXPECT_EQ(k, 256u);
  EXPECT_DOUBLE_EQ(*all, 1.0);
}

}  // namespace
}  // namespace purser::gateway
