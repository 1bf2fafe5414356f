#include "observe/series.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "common/hash.h"

namespace purser::observe {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kForever = std::numeric_limits<int64_t>::max();

// Ten raw points at 1 s, 5 s buckets for 100 s: small enough to wrap in a few appends.
SeriesLimits smallLimits() {
  SeriesLimits l;
  l.max_series = 100;
  l.raw_retention_ms = 10'000;
  l.raw_interval_ms = 1'000;
  l.rollup_ms = 5'000;
  l.rollup_retention_ms = 100'000;
  l.stale_after_ms = 60'000;
  return l;
}

std::unique_ptr<SeriesStore> makeStore(const SeriesLimits& limits) {
  Result<std::unique_ptr<SeriesStore>> store = SeriesStore::create(limits);
  EXPECT_TRUE(store.has_value()) << store.error().toString();
  return std::move(store).value();
}

SeriesKey key(std::string name, Labels labels = {}) {
  return SeriesKey(std::move(name), std::move(labels));
}

// Appends value = f(second) at every second in [first_s, last_s].
template <typename F>
void appendSeconds(SeriesStore& store, const SeriesKey& k, int64_t first_s, int64_t last_s, F f) {
  for (int64_t s = first_s; s <= last_s; ++s) {
    ASSERT_EQ(store.append(k, s * 1000, f(s)), AppendStatus::kAppended) << s;
  }
}

std::vector<Point> pts(std::initializer_list<std::pair<int64_t, double>> list) {
  std::vector<Point> out;
  for (auto [t, v] : list) out.push_back(Point{t, v});
  return out;
}

void expectPoints(const std::vector<Point>& got, const std::vector<Point>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].t_ms, want[i].t_ms) << "point " << i;
    EXPECT_DOUBLE_EQ(got[i].value, want[i].value) << "point " << i;
  }
}

TEST(SeriesKeyTest, SameLabelsInAnyOrderAreOneKey) {
  SeriesKey a = key("m", {{"target", "sim-a"}, {"model", "llama"}});
  SeriesKey b = key("m", {{"model", "llama"}, {"target", "sim-a"}});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.labels()[0].first, "model");
  EXPECT_NE(a, key("m", {{"model", "llama"}}));
  EXPECT_NE(a, key("n", {{"model", "llama"}, {"target", "sim-a"}}));
}

TEST(SeriesKeyTest, HashIsFnvOfTheCanonicalForm) {
  // Stable across processes: dashboards and diagnosis may name a series by it.
  SeriesKey k = key("m", {{"b", "2"}, {"a", "1"}});
  EXPECT_EQ(k.hash(), fnv1a64(std::string("m\xff"
                                          "a\xfe"
                                          "1\xff"
                                          "b\xfe"
                                          "2")));
}

TEST(SeriesKeyTest, EmptyValuesDropAndRepeatedNamesKeepTheFirst) {
  SeriesKey k = key("m", {{"x", "1"}, {"empty", ""}, {"x", "2"}});
  ASSERT_EQ(k.labels().size(), 1u);
  EXPECT_EQ(k.label("x"), "1");
  EXPECT_FALSE(k.label("empty").has_value());
  EXPECT_EQ(k, key("m", {{"x", "1"}}));
}

TEST(SeriesKeyTest, ToStringEscapesValues) {
  EXPECT_EQ(key("m", {{"b", "say \"hi\"\n"}, {"a", "c:\\"}}).toString(),
            "m{a=\"c:\\\\\",b=\"say \\\"hi\\\"\\n\"}");
  EXPECT_EQ(key("up").toString(), "up");
}

TEST(SeriesLimitsTest, DefaultsGiveAnHourOfSecondsAndADayOfMinutes) {
  SeriesLimits l;
  EXPECT_TRUE(validateSeriesLimits(l).has_value());
  EXPECT_EQ(l.rawCapacity(), 3600u);
  EXPECT_EQ(l.rollupCapacity(), 1440u);
  // 16-byte points and 48-byte buckets plus a few hundred bytes of bookkeeping: ~124 KiB.
  EXPECT_GE(SeriesStore::fullSeriesBytes(l), 3600u * 16 + 1440u * 48);
  EXPECT_LE(SeriesStore::fullSeriesBytes(l), 3600u * 16 + 1440u * 48 + 512);
}

TEST(SeriesLimitsTest, BadLimitsNameTheirField) {
  struct Case {
    const char* field;
    void (*mutate)(SeriesLimits&);
  };
  const Case cases[] = {
      {"max_series", [](SeriesLimits& l) { l.max_series = 0; }},
      {"raw_interval", [](SeriesLimits& l) { l.raw_interval_ms = 0; }},
      {"raw_retention", [](SeriesLimits& l) { l.raw_retention_ms = 500; }},
      {"raw_retention", [](SeriesLimits& l) { l.raw_retention_ms = int64_t{1} << 40; }},
      {"rollup", [](SeriesLimits& l) { l.rollup_ms = -1; }},
      {"rollup_retention", [](SeriesLimits& l) { l.rollup_retention_ms = 1000; }},
      {"stale_after", [](SeriesLimits& l) { l.stale_after_ms = 0; }},
  };
  for (const Case& c : cases) {
    SeriesLimits l;
    c.mutate(l);
    Result<void> r = validateSeriesLimits(l);
    ASSERT_FALSE(r.has_value()) << c.field;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().field, c.field);
    EXPECT_FALSE(SeriesStore::create(l).has_value()) << c.field;
  }
}

TEST(SeriesStoreTest, RingWrapsAroundKeepingTheNewestPoints) {
  auto store = makeStore(smallLimits());
  SeriesKey k = key("m");
  appendSeconds(*store, k, 0, 24, [](int64_t s) { return double(s); });

  std::optional<SeriesReach> r = store->reach(k);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->raw_points, 10u);
  EXPECT_EQ(r->raw_from_ms, 15'000);
  EXPECT_EQ(r->newest_ms, 24'000);
  std::optional<Point> last = store->latest(k);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->t_ms, 24'000);
  EXPECT_EQ(last->value, 24);

  // The ten newest, in order, across the ring's seam.
  Range raw = store->range(k, 15'000, 24'000);
  EXPECT_EQ(raw.rollup_points, 0u);
  ASSERT_EQ(raw.points.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(raw.points[i].t_ms, int64_t(15 + i) * 1000);
    EXPECT_EQ(raw.points[i].value, double(15 + i));
  }

  // A full raw ring no longer grows: more appends (within the rollup ring's first allocation)
  // leave memory where it was.
  size_t before = store->memoryBytes();
  appendSeconds(*store, k, 25, 40, [](int64_t s) { return double(s); });
  EXPECT_EQ(store->memoryBytes(), before);

  // The rollup ring wraps too: 20 buckets of 5 s reach back 100 s.
  appendSeconds(*store, k, 41, 200, [](int64_t s) { return double(s); });
  r = store->reach(k);
  EXPECT_EQ(r->rollup_buckets, 20u);
  EXPECT_EQ(r->rollup_from_ms, 105'000);
  EXPECT_EQ(r->raw_from_ms, 195'000);
  Range all = store->range(k, 0, kForever);
  EXPECT_EQ(all.rollup_points, 18u);  // buckets 105 s .. 190 s
  EXPECT_EQ(all.points.front().t_ms, 105'000);
  EXPECT_EQ(all.points.back().t_ms, 200'000);
}

TEST(SeriesStoreTest, RollupsAggregateEachBucketAcrossBoundaries) {
  SeriesLimits l = smallLimits();
  l.rollup_ms = 10'000;
  auto store = makeStore(l);
  SeriesKey k = key("m");
  for (auto [t, v] : std::vector<std::pair<int64_t, double>>{
           {1000, 5}, {4000, -1}, {9999, 3}, {10000, 7}, {15000, kNaN}, {19000, 2}, {31000, 4}}) {
    ASSERT_EQ(store->append(k, t, v), AppendStatus::kAppended);
  }
  std::vector<Rollup> b = store->rollups(k, 0, 40'000);
  ASSERT_EQ(b.size(), 3u);  // nothing was written in [20 s, 30 s): no bucket
  EXPECT_EQ(b[0].start_ms, 0);
  EXPECT_EQ(b[0].min, -1);
  EXPECT_EQ(b[0].max, 5);
  EXPECT_EQ(b[0].sum, 7);
  EXPECT_EQ(b[0].count, 3u);
  EXPECT_EQ(b[0].last, 3);
  EXPECT_DOUBLE_EQ(b[0].avg(), 7.0 / 3);
  EXPECT_EQ(b[1].start_ms, 10'000);  // the NaN is no value: two samples, last is 2
  EXPECT_EQ(b[1].min, 2);
  EXPECT_EQ(b[1].max, 7);
  EXPECT_EQ(b[1].sum, 9);
  EXPECT_EQ(b[1].count, 2u);
  EXPECT_EQ(b[1].last, 2);
  EXPECT_EQ(b[2].start_ms, 30'000);
  EXPECT_EQ(b[2].count, 1u);
  EXPECT_EQ(b[2].last, 4);

  // Overlap selects: [9999, 10000] touches two buckets, [10000, 10000] one.
  EXPECT_EQ(store->rollups(k, 9'999, 10'000).size(), 2u);
  ASSERT_EQ(store->rollups(k, 10'000, 10'000).size(), 1u);
  EXPECT_EQ(store->rollups(k, 10'000, 10'000)[0].start_ms, 10'000);
  EXPECT_TRUE(store->rollups(k, 20'000, 29'999).empty());
}

TEST(SeriesStoreTest, RangeSpansRollupAndRawTiersWithoutDoubleCounting) {
  auto store = makeStore(smallLimits());
  SeriesKey k = key("m");
  appendSeconds(*store, k, 0, 29, [](int64_t s) { return double(s); });
  // Raw holds 20..29 s; its oldest point opens a bucket, so raw answers from 20 s.
  Range avg = store->range(k, 0, 29'000);
  EXPECT_EQ(avg.rollup_points, 4u);
  expectPoints(avg.points, pts({{0, 2},
                                {5000, 7},
                                {10000, 12},
                                {15000, 17},
                                {20000, 20},
                                {21000, 21},
                                {22000, 22},
                                {23000, 23},
                                {24000, 24},
                                {25000, 25},
                                {26000, 26},
                                {27000, 27},
                                {28000, 28},
                                {29000, 29}}));
  auto head = [&](RollupValue v) {
    Range r = store->range(k, 0, 19'999, v);
    std::vector<double> out;
    for (const Point& p : r.points) out.push_back(p.value);
    return out;
  };
  EXPECT_EQ(head(RollupValue::kLast), (std::vector<double>{4, 9, 14, 19}));
  EXPECT_EQ(head(RollupValue::kMin), (std::vector<double>{0, 5, 10, 15}));
  EXPECT_EQ(head(RollupValue::kMax), (std::vector<double>{4, 9, 14, 19}));

  // Every point lies inside the window: the bucket starting at 5 s is left out of [7 s, 22 s].
  Range mid = store->range(k, 7'000, 22'000);
  EXPECT_EQ(mid.rollup_points, 2u);
  expectPoints(mid.points, pts({{10000, 12}, {15000, 17}, {20000, 20}, {21000, 21}, {22000, 22}}));
  EXPECT_TRUE(store->range(k, 22'000, 7'000).points.empty());
  EXPECT_TRUE(store->range(key("unknown"), 0, kForever).points.empty());
}

TEST(SeriesStoreTest, RangeSwitchesTiersAtTheBucketAfterAnUnalignedOldestPoint) {
  auto store = makeStore(smallLimits());
  SeriesKey k = key("m");
  for (int64_t i = 0; i < 30; ++i) store->append(k, 500 + i * 1000, double(i));
  // Raw holds 20.5..29.5 s. Its oldest point is not at a bucket's start, so as far as the store
  // can tell the bucket [20 s, 25 s) lost samples to the ring: it comes from rollups, and raw
  // answers from 25 s on.
  Range r = store->range(k, 0, kForever);
  EXPECT_EQ(r.rollup_points, 5u);
  expectPoints(r.points, pts({{0, 2},
                              {5000, 7},
                              {10000, 12},
                              {15000, 17},
                              {20000, 22},
                              {25500, 25},
                              {26500, 26},
                              {27500, 27},
                              {28500, 28},
                              {29500, 29}}));
  EXPECT_EQ(store->reach(k)->raw_from_ms, 25'000);
}

TEST(SeriesStoreTest, IncreaseHandlesCounterResets) {
  auto store = makeStore(SeriesLimits{});
  SeriesKey k = key("vllm:request_success_total", {{"target", "sim-a"}});
  const double values[] = {0, 10, 20, 5, 15, 30};  // restarted between 2 s and 3 s
  for (int64_t i = 0; i < 6; ++i) store->append(k, i * 1000, values[i]);

  EXPECT_EQ(store->increase(k, 0, 5'000), 10 + 10 + 5 + 10 + 15);
  EXPECT_EQ(store->rate(k, 0, 5'000), 50.0 / 5);
  EXPECT_EQ(store->increase(k, 1'000, 3'000), 10 + 5);  // both ends inclusive
  // No extrapolation: the rate is over the samples' own span, 1 s .. 3 s.
  EXPECT_EQ(store->rate(k, 500, 3'500), 15.0 / 2);
  EXPECT_FALSE(store->increase(k, 0, 999).has_value());  // one sample is no increase
  EXPECT_FALSE(store->increase(k, 5'000, 0).has_value());
  EXPECT_FALSE(store->increase(key("unknown"), 0, kForever).has_value());
}

TEST(SeriesStoreTest, IncreaseAcrossTiersSeesOneSamplePerBucket) {
  auto store = makeStore(smallLimits());
  SeriesKey k = key("c");
  // Counts 1/s, restarting at 12 s.
  appendSeconds(*store, k, 0, 29, [](int64_t s) { return s < 12 ? double(s) : double(s - 12); });
  // Buckets' last values at 4.999, 9.999, 14.999, 19.999 s: 4, 9, 2 (reset), 7; then raw
  // 20..29 s: 8..17. 5 + 2 + 5 + 1 + 9 = 22; the growth 9 -> 11 before the reset is lost, as
  // documented (raw samples would give 24 from 4 s).
  EXPECT_EQ(store->increase(k, 0, 29'000), 22);
  EXPECT_DOUBLE_EQ(*store->rate(k, 0, 29'000), 22 / 24.001);
  // A window that ends inside the raw tier only.
  EXPECT_EQ(store->increase(k, 20'000, 29'000), 9);
}

// vLLM's TTFT histogram, written as Prometheus exposes it: cumulative `le` buckets.
void writeHistogram(SeriesStore& store, const std::string& target, int64_t t_ms,
                    std::vector<std::pair<std::string, double>> buckets) {
  for (const auto& [le, count] : buckets) {
    SeriesKey k = key("vllm:time_to_first_token_seconds_bucket",
                      {{"target", target}, {"le", le}, {"model", "llama"}});
    ASSERT_EQ(store.append(k, t_ms, count), AppendStatus::kAppended);
  }
}

TEST(SeriesStoreTest, HistogramQuantileOverAWindowMatchesHandComputation) {
  auto store = makeStore(SeriesLimits{});
  const std::string name = "vllm:time_to_first_token_seconds_bucket";
  writeHistogram(*store, "a", 0, {{"0.1", 10}, {"0.5", 20}, {"1", 30}, {"+Inf", 30}});
  writeHistogram(*store, "a", 60'000, {{"0.1", 10}, {"0.5", 50}, {"1", 80}, {"+Inf", 100}});
  writeHistogram(*store, "b", 0, {{"0.1", 0}, {"0.5", 0}, {"1", 0}, {"+Inf", 0}});
  writeHistogram(*store, "b", 60'000, {{"0.1", 0}, {"0.5", 0}, {"1", 10}, {"+Inf", 10}});

  // Target a over the window: increases 0, 30, 50, 70.
  const Labels a = {{"target", "a"}};
  // q=0.5: rank 35 lies in (0.5, 1] holding 30..50: 0.5 + 0.5 * (35 - 30) / 20.
  EXPECT_DOUBLE_EQ(store->histogramQuantileOver(name, a, 0.5, 0, 60'000), 0.625);
  // q=0.1: rank 7 lies in (0.1, 0.5] holding 0..30: 0.1 + 0.4 * 7 / 30.
  EXPECT_DOUBLE_EQ(store->histogramQuantileOver(name, a, 0.1, 0, 60'000), 0.1 + 0.4 * 7 / 30);
  // q=0.99: rank 69.3 lies in +Inf: the highest finite bound.
  EXPECT_DOUBLE_EQ(store->histogramQuantileOver(name, a, 0.99, 0, 60'000), 1.0);
  // An `le` matcher is ignored: the quantile needs every bucket.
  EXPECT_DOUBLE_EQ(
      store->histogramQuantileOver(name, {{"target", "a"}, {"le", "0.5"}}, 0.5, 0, 60'000), 0.625);

  // Both targets sum per bound: 0, 30, 60, 80; rank 40 in (0.5, 1]: 0.5 + 0.5 * 10 / 30.
  EXPECT_DOUBLE_EQ(store->histogramQuantileOver(name, {{"model", "llama"}}, 0.5, 0, 60'000),
                   0.5 + 0.5 * 10 / 30);

  EXPECT_EQ(store->histogramQuantileOver(name, a, -0.1, 0, 60'000),
            -std::numeric_limits<double>::infinity());
  EXPECT_EQ(store->histogramQuantileOver(name, a, 1.5, 0, 60'000),
            std::numeric_limits<double>::infinity());
  // One sample per bucket in the window is no increase at all.
  EXPECT_TRUE(std::isnan(store->histogramQuantileOver(name, a, 0.5, 30'000, 60'000)));
  EXPECT_TRUE(std::isnan(store->histogramQuantileOver(name, {{"target", "zz"}}, 0.5, 0, 60'000)));
  EXPECT_TRUE(std::isnan(store->histogramQuantileOver("other_bucket", {}, 0.5, 0, 60'000)));
}

TEST(SeriesStoreTest, HistogramQuantileIsNanWithoutObservationsOrInfBucket) {
  auto store = makeStore(SeriesLimits{});
  const std::string name = "vllm:time_to_first_token_seconds_bucket";
  writeHistogram(*store, "idle", 0, {{"0.1", 4}, {"1", 7}, {"+Inf", 9}});
  writeHistogram(*store, "idle", 60'000, {{"0.1", 4}, {"1", 7}, {"+Inf", 9}});
  EXPECT_TRUE(std::isnan(store->histogramQuantileOver(name, {{"target", "idle"}}, 0.5, 0, 60'000)));

  writeHistogram(*store, "noinf", 0, {{"0.1", 0}, {"1", 0}});
  writeHistogram(*store, "noinf", 60'000, {{"0.1", 5}, {"1", 9}});
  EXPECT_TRUE(
      std::isnan(store->histogramQuantileOver(name, {{"target", "noinf"}}, 0.5, 0, 60'000)));
}

TEST(SeriesStoreTest, HistogramQuantileCountsAcrossACounterReset) {
  auto store = makeStore(SeriesLimits{});
  const std::string name = "vllm:time_to_first_token_seconds_bucket";
  writeHistogram(*store, "d", 0, {{"0.1", 5}, {"0.5", 5}, {"1", 5}, {"+Inf", 5}});
  writeHistogram(*store, "d", 30'000, {{"0.1", 0}, {"0.5", 0}, {"1", 0}, {"+Inf", 0}});  // restart
  writeHistogram(*store, "d", 60'000, {{"0.1", 0}, {"0.5", 10}, {"1", 10}, {"+Inf", 20}});
  // Increases 0, 10, 10, 20. q=0.5: rank 10 lies in (0.1, 0.5] holding 0..10: 0.5.
  EXPECT_DOUBLE_EQ(store->histogramQuantileOver(name, {{"target", "d"}}, 0.5, 0, 60'000), 0.5);
  // q=0.75: rank 15 lies in +Inf: the highest finite bound.
  EXPECT_DOUBLE_EQ(store->histogramQuantileOver(name, {{"target", "d"}}, 0.75, 0, 60'000), 1.0);
}

TEST(SeriesStoreTest, RefusesSeriesBeyondMaxSeries) {
  SeriesLimits l = smallLimits();
  l.max_series = 3;
  auto store = makeStore(l);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(store->getOrCreate(key("m", {{"i", std::to_string(i)}})).has_value());
  }
  size_t bytes = store->memoryBytes();
  Result<SeriesRef> refused = store->getOrCreate(key("m", {{"i", "3"}}));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(refused.error().message.find("m{i=\"3\"}"), std::string::npos);
  EXPECT_EQ(store->append(key("m", {{"i", "4"}}), 1000, 1), AppendStatus::kSeriesLimit);
  EXPECT_EQ(store->droppedSeries(), 2u);
  EXPECT_EQ(store->seriesCount(), 3u);
  EXPECT_EQ(store->memoryBytes(), bytes);
  EXPECT_FALSE(store->latest(key("m", {{"i", "4"}})).has_value());
  // Existing series still take samples.
  EXPECT_EQ(store->append(key("m", {{"i", "0"}}), 1000, 1), AppendStatus::kAppended);

  // Once a series is swept there is room again (i=1 and i=2 were never written).
  EXPECT_EQ(store->sweep(2000), 2u);
  EXPECT_EQ(store->append(key("m", {{"i", "4"}}), 2000, 1), AppendStatus::kAppended);
  EXPECT_EQ(store->seriesCount(), 2u);
}

TEST(SeriesStoreTest, SweepRemovesSeriesNotWrittenForStaleAfter) {
  SeriesLimits l;
  l.stale_after_ms = 600'000;
  auto store = makeStore(l);
  SeriesKey a = key("m", {{"target", "a"}});
  SeriesKey b = key("m", {{"target", "b"}});
  SeriesRef ref_a = store->getOrCreate(a).value();
  store->append(ref_a, 0, 1);
  store->append(b, 540'000, 1);

  EXPECT_EQ(store->sweep(600'000), 0u);  // exactly stale_after old is not yet stale
  EXPECT_EQ(store->sweep(600'001), 1u);
  EXPECT_EQ(store->seriesCount(), 1u);
  EXPECT_FALSE(store->find(a).has_value());
  EXPECT_TRUE(store->latest(b).has_value());
  EXPECT_EQ(store->select("m", {}).size(), 1u);

  // The swept series' ref is dead even when its slot is reused by another series.
  SeriesKey c = key("m", {{"target", "c"}});
  SeriesRef ref_c = store->getOrCreate(c).value();
  EXPECT_EQ(ref_c.slot, ref_a.slot);
  EXPECT_NE(ref_c, ref_a);
  EXPECT_EQ(store->append(ref_a, 700'000, 99), AppendStatus::kUnknownSeries);
  EXPECT_FALSE(store->latest(c).has_value());
  EXPECT_EQ(store->append(SeriesRef{}, 700'000, 99), AppendStatus::kUnknownSeries);

  // Written again, `a` starts afresh.
  SeriesRef again = store->getOrCreate(a).value();
  EXPECT_NE(again, ref_a);
  EXPECT_EQ(store->append(again, 700'000, 2), AppendStatus::kAppended);
  EXPECT_EQ(store->latest(a)->value, 2);
}

TEST(SeriesStoreTest, MemoryGrowsWithSeriesAndShrinksWhenSwept) {
  auto store = makeStore(smallLimits());
  size_t empty = store->memoryBytes();
  store->append(key("m", {{"i", "0"}}), 1000, 1);
  size_t one = store->memoryBytes();
  EXPECT_GT(one, empty);
  for (int i = 1; i < 10; ++i) store->append(key("m", {{"i", std::to_string(i)}}), 1000, 1);
  size_t ten = store->memoryBytes();
  EXPECT_GT(ten, one + 8 * (one - empty) / 2);
  EXPECT_EQ(store->sweep(1'000'000), 10u);
  EXPECT_LT(store->memoryBytes(), one);
}

TEST(SeriesStoreTest, FullStoreStaysUnderTheConfiguredBound) {
  // 100 targets x 30 series at 1 s, with rings short enough to fill in a test: 60 raw points
  // and 60 buckets of 10 s.
  SeriesLimits l;
  l.max_series = 3000;
  l.raw_retention_ms = 60'000;
  l.raw_interval_ms = 1'000;
  l.rollup_ms = 10'000;
  l.rollup_retention_ms = 600'000;
  auto store = makeStore(l);
  std::vector<SeriesRef> refs;
  for (int target = 0; target < 100; ++target) {
    for (int metric = 0; metric < 30; ++metric) {
      SeriesKey k =
          key("vllm:metric_" + std::to_string(metric),
              {{"target", "sim-" + std::to_string(target)}, {"instance", "10.0.0.1:8000"}});
      refs.push_back(store->getOrCreate(k).value());
    }
  }
  std::vector<RefSample> scrape(refs.size());
  for (int64_t s = 0; s < 700; ++s) {
    for (size_t i = 0; i < refs.size(); ++i) scrape[i] = RefSample{refs[i], s * 1000, double(s)};
    ASSERT_EQ(store->appendBatch(scrape), refs.size());
  }
  SeriesKey probe = key("vllm:metric_7", {{"target", "sim-42"}, {"instance", "10.0.0.1:8000"}});
  ASSERT_EQ(store->reach(probe)->raw_points, 60u);
  ASSERT_EQ(store->reach(probe)->rollup_buckets, 60u);

  // The sizing formula: every series full, plus its key (two labels: a 64-byte pair each) and
  // its index entries, plus a fixed part for the store itself.
  const size_t n = refs.size();
  const size_t per_series = SeriesStore::fullSeriesBytes(l) + 512;
  const size_t bound = n * per_series + 64 * 1024;
  const size_t floor = n * (60 * sizeof(Point) + 60 * sizeof(Rollup));
  size_t bytes = store->memoryBytes();
  EXPECT_LE(bytes, bound);
  EXPECT_GE(bytes, floor);
  // More of the same changes nothing: the rings are full.
  for (size_t i = 0; i < refs.size(); ++i) scrape[i] = RefSample{refs[i], 700'000, 1};
  store->appendBatch(scrape);
  EXPECT_EQ(store->memoryBytes(), bytes);
}

TEST(SeriesStoreTest, OutOfOrderAndDuplicateSamplesAreIgnoredAndCounted) {
  auto store = makeStore(smallLimits());
  SeriesKey k = key("m");
  EXPECT_EQ(store->append(k, 1000, 1), AppendStatus::kAppended);
  EXPECT_EQ(store->append(k, 1000, 5), AppendStatus::kOutOfOrder);
  EXPECT_EQ(store->append(k, 500, 5), AppendStatus::kOutOfOrder);
  EXPECT_EQ(store->append(k, 2000, 2), AppendStatus::kAppended);
  EXPECT_EQ(store->outOfOrderSamples(), 2u);
  EXPECT_EQ(store->latest(k)->value, 2);
  expectPoints(store->range(k, 0, kForever).points, pts({{1000, 1}, {2000, 2}}));
  EXPECT_EQ(store->rollups(k, 0, kForever)[0].count, 2u);
  EXPECT_EQ(store->rollups(k, 0, kForever)[0].sum, 3);
}

TEST(SeriesStoreTest, NanIsStoredButIsNoValueInAggregations) {
  auto store = makeStore(smallLimits());
  SeriesKey k = key("c");
  for (auto [t, v] :
       std::vector<std::pair<int64_t, double>>{{1000, 1}, {2000, kNaN}, {3000, 3}, {4000, kNaN}}) {
    ASSERT_EQ(store->append(k, t, v), AppendStatus::kAppended);
  }
  std::optional<Point> last = store->latest(k);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->t_ms, 4000);
  EXPECT_TRUE(std::isnan(last->value));
  EXPECT_TRUE(store->isStale(k, 4000, 60'000));  // a staleness marker is stale however recent

  Range r = store->range(k, 0, kForever);
  ASSERT_EQ(r.points.size(), 4u);
  EXPECT_TRUE(std::isnan(r.points[1].value));
  EXPECT_TRUE(std::isnan(r.points[3].value));

  Rollup b = store->rollups(k, 0, kForever).at(0);
  EXPECT_EQ(b.count, 2u);
  EXPECT_EQ(b.sum, 4);
  EXPECT_EQ(b.min, 1);
  EXPECT_EQ(b.max, 3);
  EXPECT_EQ(b.last, 3);
  EXPECT_EQ(store->increase(k, 0, kForever), 2);
  EXPECT_EQ(store->rate(k, 0, kForever), 1);  // over 1 s .. 3 s, the non-NaN samples

  // A bucket of markers only has no value: beyond the raw tier it yields no point.
  SeriesKey g = key("g");
  appendSeconds(*store, g, 0, 29, [](int64_t s) { return s < 5 ? kNaN : double(s); });
  Range tiers = store->range(g, 0, kForever);
  EXPECT_EQ(tiers.rollup_points, 3u);
  EXPECT_EQ(tiers.points.front().t_ms, 5000);
  std::vector<Rollup> buckets = store->rollups(g, 0, 4999);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].count, 0u);
  EXPECT_TRUE(std::isnan(buckets[0].avg()));
}

TEST(SeriesStoreTest, IsStaleLeavesTheJudgementOfAgeToTheCaller) {
  auto store = makeStore(smallLimits());
  SeriesKey k = key("m");
  EXPECT_TRUE(store->isStale(k, 0, 1000));  // unknown
  store->append(k, 10'000, 1);
  EXPECT_FALSE(store->isStale(k, 11'000, 1000));
  EXPECT_TRUE(store->isStale(k, 11'001, 1000));
}

TEST(SeriesStoreTest, SelectMatchesLabelsByEquality) {
  auto store = makeStore(smallLimits());
  const std::string waiting = "vllm:num_requests_waiting";
  store->append(key(waiting, {{"target", "sim-a"}, {"gpu", "1"}}), 1000, 1);
  store->append(key(waiting, {{"target", "sim-a"}, {"gpu", "0"}}), 1000, 1);
  store->append(key(waiting, {{"target", "sim-b"}}), 1000, 1);
  store->append(key("vllm:num_requests_running", {{"target", "sim-a"}}), 1000, 1);

  std::vector<SeriesKey> a = store->select(waiting, {{"target", "sim-a"}});
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].label("gpu"), "0");
  EXPECT_EQ(a[1].label("gpu"), "1");
  std::vector<SeriesKey> no_gpu = store->select(waiting, {{"gpu", ""}});
  ASSERT_EQ(no_gpu.size(), 1u);
  EXPECT_EQ(no_gpu[0].label("target"), "sim-b");
  EXPECT_EQ(store->select(waiting, {}).size(), 3u);
  EXPECT_TRUE(store->select("absent", {}).empty());
  ASSERT_TRUE(store->find(a[0]).has_value());
}

TEST(SeriesStoreTest, AppendBatchCountsWhatItAppended) {
  auto store = makeStore(smallLimits());
  SeriesRef r = store->getOrCreate(key("m")).value();
  std::vector<RefSample> batch = {{r, 1000, 1}, {r, 1000, 2}, {SeriesRef{}, 1000, 3}, {r, 2000, 4}};
  EXPECT_EQ(store->appendBatch(batch), 2u);
  EXPECT_EQ(store->latest(key("m"))->value, 4);
}

// One writer, three readers, each bounded by its own amount of work. Readers check what must
// hold in any state the writer can leave: values agree with their timestamps, time increases,
// counters never fall, a consistent histogram gives one answer.
TEST(SeriesStoreTest, ConcurrentWriterAndReadersSeeConsistentState) {
  SeriesLimits l;
  l.raw_retention_ms = 100'000;
  l.rollup_ms = 10'000;
  l.rollup_retention_ms = 1'000'000;
  l.stale_after_ms = 50'000;
  auto store = makeStore(l);
  const std::string hist = "h_bucket";
  std::vector<SeriesKey> keys;
  for (int i = 0; i < 20; ++i) keys.push_back(key("m", {{"i", std::to_string(i)}}));
  const std::vector<std::pair<std::string, double>> les = {{"1", 1}, {"2", 2}, {"+Inf", 3}};
  for (const auto& [le, mult] : les) keys.push_back(key(hist, {{"le", le}}));
  std::vector<SeriesRef> refs;
  for (const SeriesKey& k : keys) refs.push_back(store->getOrCreate(k).value());

  constexpr int64_t kSteps = 2000;
  std::thread writer([&] {
    std::vector<RefSample> batch(refs.size());
    for (int64_t step = 1; step <= kSteps; ++step) {
      const int64_t t = step * 1000;
      for (size_t i = 0; i < 20; ++i) batch[i] = RefSample{refs[i], t, double(step)};
      for (size_t j = 0; j < les.size(); ++j) {
        batch[20 + j] = RefSample{refs[20 + j], t, les[j].second * double(step)};
      }
      store->appendBatch(batch);
      if (step % 50 == 0) store->append(key("ephemeral", {{"step", std::to_string(step)}}), t, 1);
      if (step % 200 == 0) store->sweep(t);
    }
  });

  std::atomic<int> failures{0};
  auto reader = [&](int seed) {
    for (int iter = 0; iter < 400; ++iter) {
      const SeriesKey& k = keys[(iter + seed) % 20];
      if (std::optional<Point> p = store->latest(k); p && p->value * 1000 != double(p->t_ms)) {
        ++failures;
      }
      Range r = store->range(k, 0, kForever, RollupValue::kLast);
      for (size_t i = 1; i < r.points.size(); ++i) {
        if (r.points[i].t_ms <= r.points[i - 1].t_ms) ++failures;
      }
      for (size_t i = r.rollup_points; i < r.points.size(); ++i) {
        if (r.points[i].value * 1000 != double(r.points[i].t_ms)) ++failures;
      }
      if (std::optional<double> inc = store->increase(k, 0, kForever); inc && *inc < 0) {
        ++failures;
      }
      double q = store->histogramQuantileOver(hist, {}, 0.5, 0, kForever);
      if (!std::isnan(q) && q != 1.5) ++failures;
      if (store->memoryBytes() == 0 || store->select("m", {}).size() != 20) ++failures;
    }
  };
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) readers.emplace_back(reader, i * 7);
  writer.join();
  for (std::thread& t : readers) t.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store->latest(keys[0])->t_ms, kSteps * 1000);
  EXPECT_EQ(store->increase(keys[0], (kSteps - 50) * 1000, kSteps * 1000), 50);
  EXPECT_DOUBLE_EQ(store->histogramQuantileOver(hist, {}, 0.5, 0, kForever), 1.5);
  // Of the ephemeral series, written once every 50 s, the last sweep (at 2000 s, stale after
  // 50 s) kept those of 1950 s and 2000 s.
  EXPECT_EQ(store->select("ephemeral", {}).size(), 2u);
}

TEST(SeriesTargetIndexTest, AQueryForOneTargetReadsOnlyItsSeriesAndFollowsRemovals) {
  SeriesLimits limits;
  limits.stale_after_ms = 1000;
  auto store = *SeriesStore::create(limits);
  for (int t = 0; t < 50; ++t) {
    for (const char* le : {"0.1", "1", "+Inf"}) {
      ASSERT_EQ(
          store->append(SeriesKey("h_bucket", {{"le", le}, {"target", fmt::format("t{}", t)}}),
                        1000, 0),
          AppendStatus::kAppended);
      ASSERT_EQ(
          store->append(SeriesKey("h_bucket", {{"le", le}, {"target", fmt::format("t{}", t)}}),
                        2000, t == 7 ? 10 : 0),
          AppendStatus::kAppended);
    }
  }
  EXPECT_EQ(store->select("h_bucket", {{"target", "t7"}}).size(), 3u);
  EXPECT_EQ(store->select("h_bucket", {}).size(), 150u);
  EXPECT_TRUE(store->select("h_bucket", {{"target", "nobody"}}).empty());
  EXPECT_NEAR(store->histogramQuantileOver("h_bucket", {{"target", "t7"}}, 0.5, 0, 3000), 0.05,
              1e-9);
  EXPECT_TRUE(
      std::isnan(store->histogramQuantileOver("h_bucket", {{"target", "t8"}}, 0.5, 0, 3000)));
  // Swept series leave the index too.
  ASSERT_EQ(store->append(SeriesKey("h_bucket", {{"le", "1"}, {"target", "late"}}), 5000, 1),
            AppendStatus::kAppended);
  store->sweep(5500);
  EXPECT_TRUE(store->select("h_bucket", {{"target", "t7"}}).empty());
  EXPECT_EQ(store->select("h_bucket", {{"target", "late"}}).size(), 1u);
}

}  // namespace
}  // namespace purser::observe
