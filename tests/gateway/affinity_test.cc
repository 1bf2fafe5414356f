#include "gateway/affinity.h"

#include <gtest/gtest.h>

#include <set>

#include "gateway/routing.h"

namespace purser::gateway {
namespace {

TEST(PrefixBlocksTest, ChainedOverWholeBlocksAndBounded) {
  const std::string a(640, 'a');
  std::string b = a;
  b[100] = 'b';  // in the second block
  const auto ha = prefixBlocks(a);
  const auto hb = prefixBlocks(b);
  ASSERT_EQ(ha.size(), 10u);
  EXPECT_EQ(ha[0], hb[0]);
  for (size_t i = 1; i < 10; ++i) EXPECT_NE(ha[i], hb[i]) << i;  // everything after differs
  EXPECT_NE(ha[0], ha[1]) << "the same bytes at another place are another block";
  EXPECT_EQ(prefixBlocks(std::string(63, 'x')).size(), 0u);
  EXPECT_EQ(prefixBlocks(std::string(6400, 'x'), 64, 5).size(), 5u);
  EXPECT_EQ(prefixBlocks(a, 0).size(), 0u);
  EXPECT_EQ(prefixBlocks(std::string(100, 'x'), 7).size(), 14u) << "odd block sizes work too";
}

TEST(PrefixIndexTest, MatchesTheLeadingRunAndForgetsLeastRecentlyUsedTailsFirst) {
  PrefixIndex index(8);
  const auto p = prefixBlocks(std::string(64 * 6, 'p'));
  EXPECT_EQ(index.match(p), 0u);
  index.insert(std::span(p).first(4));
  EXPECT_EQ(index.match(p), 4u);
  index.insert(p);
  EXPECT_EQ(index.match(p), 6u);
  EXPECT_EQ(index.size(), 6u);
  // Another prompt fills the index: the first one's tail goes first, its head stays longest.
  const auto q = prefixBlocks(std::string(64 * 4, 'q'));
  index.insert(q);
  EXPECT_EQ(index.size(), 8u);
  EXPECT_EQ(index.match(q), 4u);
  EXPECT_EQ(index.match(p), 4u);
  PrefixIndex none(0);
  none.insert(p);
  EXPECT_EQ(none.match(p), 0u);
}

TEST(AffinityScoresTest, QueueKvAndPrefixWeighedAsTheEndpointPickerDoes) {
  std::vector<Candidate> c(3);
  c[0] = {.in_flight = 0, .queue = 0, .kv_cache = 0.2, .prefix_matched = 0};
  c[1] = {.in_flight = 2, .queue = 8, .kv_cache = 0.9, .prefix_matched = 10};
  c[2] = {.in_flight = 1, .queue = 4, .kv_cache = 0.5, .prefix_matched = 5};
  const auto s = affinityScores(c, 10);
  // Queue: min-max over 0..10 of in_flight + queue. KV: 1 - usage. Prefix: matched share.
  EXPECT_DOUBLE_EQ(s[0], 2 * 1.0 + 2 * 0.8 + 3 * 0.0);
  EXPECT_DOUBLE_EQ(s[1], 2 * 0.0 + 2 * 0.1 + 3 * 1.0);
  EXPECT_DOUBLE_EQ(s[2], 2 * 0.5 + 2 * 0.5 + 3 * 0.5);
  // Unknown facts count as idle; equal loads score the same.
  const auto flat = affinityScores(std::vector<Candidate>(2), 0);
  EXPECT_DOUBLE_EQ(flat[0], flat[1]);
  EXPECT_DOUBLE_EQ(flat[0], 4.0);
  EXPECT_TRUE(affinityScores({}, 3).empty());
  const auto custom = affinityScores(c, 10, {.queue = 0, .kv_cache = 0, .prefix = 1});
  EXPECT_DOUBLE_EQ(custom[1], 1.0);
}

class SloRoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    route.strategy = Strategy::kSlo;
    for (const char* name : {"a", "b", "c", "d"}) {
      auto t = std::make_unique<Target>();
      t->provider = &provider;
      t->model = name;
      route.targets.push_back(std::move(t));
    }
  }
  Target& t(size_t i) { return *route.targets[i]; }
  std::string first(std::span<const uint64_t> blocks = {}) {
    return orderTargets(route, clock.monotonic(), random, blocks).front()->model;
  }

  Provider provider{"p", ProviderKind::kOpenAi,   "http://x/v1",
                    {},  std::chrono::seconds(1), std::chrono::seconds(1)};
  Route route;
  ManualClock clock;
  SeededRandom random{7};
};

TEST_F(SloRoutingTest, APromptGoesWhereItsPrefixIsUnlessThatServerIsFarBusier) {
  const auto prompt = prefixBlocks(std::string(64 * 40, 's'));
  t(2).prefixes.insert(prompt);
  EXPECT_EQ(first(prompt), "c");
  // Busier, but not by enough to lose the prefix's worth.
  t(2).observed.set(Condition::kHealthy, {.queue = 1, .kv_cache_usage = 0.5});
  for (size_t i : {0, 1, 3})
    t(i).observed.set(Condition::kHealthy, {.queue = 0, .kv_cache_usage = 0.1});
  EXPECT_EQ(first(prompt), "c");
  // Far busier: another serves it (and will cache it there).
  t(2).observed.set(Condition::kHealthy, {.queue = 40, .kv_cache_usage = 0.79});
  t(2).health.in_flight = 40;
  EXPECT_NE(first(prompt), "c");
  t(2).health.in_flight = 0;
  // Saturated: behind every other whatever its score.
  t(2).observed.set(Condition::kSaturated, {.queue = 9, .kv_cache_usage = 0.95});
  EXPECT_NE(first(prompt), "c");
  EXPECT_EQ(orderTargets(route, clock.monotonic(), random, prompt).back()->model, "c");
}

TEST_F(SloRoutingTest, ColdPromptsSpreadAndGoToTheLeastLoaded) {
  std::set<std::string> firsts;
  for (int i = 0; i < 64; ++i) firsts.insert(first());
  EXPECT_EQ(firsts.size(), 4u) << "an idle fleet: ties broken at random";
  t(0).health.in_flight = 3;
  t(1).health.in_flight = 2;
  t(3).health.in_flight = 5;
  t(2).observed.set(Condition::kHealthy, {.queue = 1, .kv_cache_usage = 0.0});
  for (int i = 0; i < 16; ++i) EXPECT_EQ(first(), "c");
  EXPECT_EQ(strategyName(*parseStrategy("slo")), "slo");
}

}  // namespace
}  // namespace purser::gateway
