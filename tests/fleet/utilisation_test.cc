// GPU utilisation of placed work: the GPU time a placement holds, how much of it was observed
// and busy, readings that are not believed, a shared GPU's attribution, and the trailing window
// behind "allocated but idle".
#include "fleet/utilisation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

namespace purser::fleet {
namespace {

// Readings by (node, GPU index); a GPU not listed has none.
PercentOf readings(std::map<std::pair<std::string, int>, double> table) {
  return [table = std::move(table)](const std::string& node, int gpu) -> std::optional<double> {
    auto it = table.find({node, gpu});
    if (it == table.end()) return std::nullopt;
    return it->second;
  };
}

TEST(UtilisationTest, ReadingsThatCannotBeTrueAreClampedOrIgnored) {
  EXPECT_EQ(usablePercent(0), 0.0);
  EXPECT_EQ(usablePercent(73.5), 73.5);
  EXPECT_EQ(usablePercent(100), 100.0);
  EXPECT_EQ(usablePercent(250), 100.0);
  EXPECT_EQ(usablePercent(-1), std::nullopt);
  EXPECT_EQ(usablePercent(std::numeric_limits<double>::quiet_NaN()), std::nullopt);
  EXPECT_EQ(usablePercent(std::numeric_limits<double>::infinity()), std::nullopt);
  EXPECT_EQ(usablePercent(-std::numeric_limits<double>::infinity()), std::nullopt);
}

TEST(UtilisationTest, WholeGpusAreBusyByTheirReadings) {
  // Two pods of two whole GPUs each, on two nodes, for one minute.
  const std::vector<PodPlacement> pods = {{"node-1", {0, 1}, 1000}, {"node-2", {2, 3}, 1000}};
  const GpuTime t = gpuTimeOf(
      pods, 60'000,
      readings(
          {{{"node-1", 0}, 100}, {{"node-1", 1}, 50}, {{"node-2", 2}, 0}, {{"node-2", 3}, 10}}));
  EXPECT_EQ(t.placed, 4 * 1000 * 60'000);
  EXPECT_EQ(t.observed, 4 * 1000 * 60'000);
  EXPECT_DOUBLE_EQ(t.busy, (1.0 + 0.5 + 0.0 + 0.1) * 1000 * 60'000);
  ASSERT_TRUE(t.averagePercent().has_value());
  EXPECT_DOUBLE_EQ(*t.averagePercent(), 40.0);
}

TEST(UtilisationTest, GpusWithoutAReadingArePlacedButNotObserved) {
  const std::vector<PodPlacement> pods = {{"node-1", {0, 1}, 1000}};
  // GPU 1's exporter is silent; the same index on another node does not count for it.
  const GpuTime t = gpuTimeOf(pods, 1'000, readings({{{"node-1", 0}, 80}, {{"node-2", 1}, 100}}));
  EXPECT_EQ(t.placed, 2 * 1000 * 1'000);
  EXPECT_EQ(t.observed, 1000 * 1'000);
  EXPECT_DOUBLE_EQ(t.busy, 0.8 * 1000 * 1'000);
  EXPECT_DOUBLE_EQ(*t.averagePercent(), 80.0);

  // No source at all: the time is placed, nothing is observed, there is no average.
  const GpuTime blind = gpuTimeOf(pods, 1'000, nullptr);
  EXPECT_EQ(blind.placed, 2 * 1000 * 1'000);
  EXPECT_EQ(blind.observed, 0);
  EXPECT_EQ(blind.busy, 0);
  EXPECT_EQ(blind.averagePercent(), std::nullopt);
}

TEST(UtilisationTest, OddReadingsNeverMakeWorkMoreThanFullyBusyOrNegative) {
  const std::vector<PodPlacement> pods = {{"n", {0, 1, 2, 3}, 1000}};
  const GpuTime t = gpuTimeOf(pods, 1'000,
                              readings({{{"n", 0}, std::numeric_limits<double>::quiet_NaN()},
                                        {{"n", 1}, -20},
                                        {{"n", 2}, 400},
                                        {{"n", 3}, std::numeric_limits<double>::infinity()}}));
  EXPECT_EQ(t.placed, 4 * 1000 * 1'000);
  EXPECT_EQ(t.observed, 1000 * 1'000) << "only the reading of 400 (as 100) is believed";
  EXPECT_DOUBLE_EQ(t.busy, 1000.0 * 1'000);
  EXPECT_DOUBLE_EQ(*t.averagePercent(), 100.0);
  // Nothing for no time, for time going backwards, or for a share of nothing.
  EXPECT_EQ(gpuTimeOf(pods, 0, readings({{{"n", 0}, 50}})).placed, 0);
  EXPECT_EQ(gpuTimeOf(pods, -5'000, readings({{{"n", 0}, 50}})).placed, 0);
  EXPECT_EQ(gpuTimeOf({{"n", {0}, 0}}, 1'000, readings({{{"n", 0}, 50}})).placed, 0);
  EXPECT_EQ(gpuTimeOf({{"n", {0}, -300}}, 1'000, readings({{{"n", 0}, 50}})).placed, 0);
  // A share beyond the whole GPU counts as the whole GPU.
  EXPECT_EQ(gpuTimeOf({{"n", {0}, 5000}}, 1'000, nullptr).placed, 1000 * 1'000);
}

// The device's counter cannot be split by process: every share on a GPU is attributed the
// device's utilisation, weighted by its size, so the shares add up to the device's busy time.
TEST(UtilisationTest, SharesOfOneGpuAreEachAttributedTheDevicesUtilisation) {
  const PercentOf device = readings({{{"node-1", 3}, 60}});
  const GpuTime quarter = gpuTimeOf({{"node-1", {3}, 250}}, 10'000, device);
  const GpuTime half = gpuTimeOf({{"node-1", {3}, 500}}, 10'000, device);
  EXPECT_EQ(quarter.placed, 250 * 10'000);
  EXPECT_DOUBLE_EQ(quarter.busy, 0.6 * 250 * 10'000);
  EXPECT_DOUBLE_EQ(*quarter.averagePercent(), 60.0);
  EXPECT_DOUBLE_EQ(*half.averagePercent(), 60.0);
  // Together (three quarters of the GPU held): 60 % of the device for 10 s, weighted by 0.75.
  GpuTime both = quarter;
  both += half;
  EXPECT_DOUBLE_EQ(both.busy, 0.6 * 750 * 10'000);
}

TEST(UtilisationTest, IdleMeansHoldingGpusObservedUnderTenPercent) {
  const auto over = [](int64_t placed, int64_t observed, double busy) {
    GpuTime t;
    t.placed = placed;
    t.observed = observed;
    t.busy = busy;
    return t;
  };
  EXPECT_TRUE(isIdle(over(1000, 1000, 0)));
  EXPECT_TRUE(isIdle(over(1000, 1000, 99)));    // 9.9 %
  EXPECT_FALSE(isIdle(over(1000, 1000, 100)));  // 10 %: not under
  EXPECT_FALSE(isIdle(over(1000, 0, 0))) << "nothing observed: not known to be idle";
  EXPECT_FALSE(isIdle(over(0, 0, 0))) << "no GPUs held";
  EXPECT_TRUE(isIdle(over(2000, 1000, 50))) << "judged on what was observed";
}

TEST(UtilisationTest, TheRecentWindowForgetsWhatIsOlderThanTenMinutes) {
  RecentUtilisation recent;  // 10 minutes, 10-second buckets
  const auto minute = [](double percent) {
    GpuTime t;
    t.placed = t.observed = 1000 * 60'000;
    t.busy = percent / 100 * 1000 * 60'000;
    return t;
  };
  const int64_t t0 = 1'767'225'600'000;  // 2026-01-01T00:00:00Z, on a bucket boundary
  // Five busy minutes, then idle minutes: the average falls as the busy ones leave the window.
  for (int m = 1; m <= 5; ++m) recent.add(t0 + m * 60'000, minute(90));
  EXPECT_DOUBLE_EQ(*recent.over(t0 + 5 * 60'000).averagePercent(), 90.0);
  EXPECT_FALSE(isIdle(recent.over(t0 + 5 * 60'000)));
  for (int m = 6; m <= 20; ++m) recent.add(t0 + m * 60'000, minute(2));
  // At minute 20 the window (minute 10 to 20) holds only idle minutes (the bucket stamped minute
  // 10 overlaps it, and is idle too).
  const GpuTime last = recent.over(t0 + 20 * 60'000);
  EXPECT_EQ(last.observed, 11 * int64_t{1000} * 60'000);
  EXPECT_DOUBLE_EQ(*last.averagePercent(), 2.0);
  EXPECT_TRUE(isIdle(last));
  // Later, with nothing new: nothing in the window, so nothing is known.
  EXPECT_EQ(recent.over(t0 + 60 * 60'000).observed, 0);
  EXPECT_FALSE(isIdle(recent.over(t0 + 60 * 60'000)));
  // Shorter than the window since it started: the average is over what there is.
  RecentUtilisation young;
  young.add(t0 + 30'000, minute(4));
  EXPECT_TRUE(isIdle(young.over(t0 + 30'000)));
}

}  // namespace
}  // namespace purser::fleet
