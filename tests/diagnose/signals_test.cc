#include "diagnose/signals.h"

#include <gtest/gtest.h>

#include <cmath>

namespace purser::diagnose {
namespace {

Points steps(std::vector<double> x) {
  Points p;
  for (size_t i = 0; i < x.size(); ++i) p.t.push_back(static_cast<TimeMs>(i) * 30'000);
  p.x = std::move(x);
  return p;
}

TEST(Signals, UpShiftFindsTheLevelAndWhereItBegan) {
  Shift s = upShift(steps({1, 1.1, 0.9, 1, 1, 1, 5, 5.2, 4.9, 5.1, 5, 5}));
  ASSERT_TRUE(s.valid);
  EXPECT_NEAR(s.base, 1, 0.1);
  EXPECT_NEAR(s.peak, 5.1, 0.11);
  EXPECT_EQ(s.onset, 6 * 30'000);
  EXPECT_EQ(s.high, 6);
  EXPECT_NEAR(s.ratio(0.01), 5.1, 0.2);
}

TEST(Signals, OneSpikeIsNotAShift) {
  Shift s = upShift(steps({1, 1, 1, 1, 1, 40, 1, 1, 1, 1, 1, 1}));
  ASSERT_TRUE(s.valid);
  EXPECT_DOUBLE_EQ(s.peak, 1);
}

TEST(Signals, TooFewPointsAnswerNoShift) {
  EXPECT_FALSE(upShift(steps({1, 2, 3})).valid);
  EXPECT_FALSE(upShift(steps({NAN, NAN, NAN, NAN, NAN, 1})).valid);
}

TEST(Signals, DownShiftMirrorsUp) {
  Shift s = downShift(steps({10, 10, 10, 10, 10, 3, 3, 3, 3, 3}));
  ASSERT_TRUE(s.valid);
  EXPECT_DOUBLE_EQ(s.base, 10);
  EXPECT_DOUBLE_EQ(s.peak, 3);
}

TEST(Signals, RatesAndHistogramMeans) {
  Series c;
  c.t = {0, 30'000, 60'000, 90'000};
  c.v = {0, 30, 90, 60};  // the last interval goes down: NaN
  Points r = rateOf(c);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_DOUBLE_EQ(r.x[0], 1);
  EXPECT_DOUBLE_EQ(r.x[1], 2);
  EXPECT_TRUE(std::isnan(r.x[2]));

  Series sum, count;
  sum.t = count.t = {0, 30'000, 60'000};
  sum.v = {0, 3, 3};
  count.v = {0, 6, 6};
  Points m = meanOf(sum, count);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_DOUBLE_EQ(m.x[0], 0.5);
  EXPECT_TRUE(std::isnan(m.x[1]));  // nothing observed
}

TEST(Signals, RatesOverASpanSmoothRareEventsOnAFineGrid) {
  // One event a second on a 200 ms grid: per interval, 1 in 5 points is 5/s and the rest 0,
  // which a median of three reads as nothing; over 1 s spans it is 1/s throughout.
  Series c;
  for (int i = 0; i <= 48; ++i) {
    c.t.push_back(i * 200);
    c.v.push_back(i / 5);
  }
  Points fine = rateOf(c);
  EXPECT_DOUBLE_EQ(fine.x[4], 5);
  EXPECT_DOUBLE_EQ(fine.x[5], 0);
  EXPECT_FALSE(upShift(fine).peak > 0) << "lone spikes are not a peak";
  Points spanned = rateOf(c, 1000);
  ASSERT_EQ(spanned.size(), 48u);
  EXPECT_DOUBLE_EQ(spanned.x[0], 0);  // 0..200 ms: less than a span, from the first sample
  for (size_t i = 4; i < spanned.size(); ++i) EXPECT_DOUBLE_EQ(spanned.x[i], 1) << i;
  // A span shorter than the grid is the plain rate.
  EXPECT_EQ(rateOf(c, 100).x, fine.x);
}

TEST(Signals, SumAndRatioAlignByTime) {
  Points a{{0, 30, 60}, {1, 2, 3}};
  Points b{{30, 60, 90}, {10, 20, 30}};
  Points s = sumOf({a, b});
  EXPECT_EQ(s.t, (std::vector<TimeMs>{0, 30, 60, 90}));
  EXPECT_EQ(s.x, (std::vector<double>{1, 12, 23, 30}));
  Points r = ratioOf(b, a);
  EXPECT_EQ(r.t, (std::vector<TimeMs>{30, 60}));
  EXPECT_DOUBLE_EQ(r.x[0], 5);
}

TEST(Signals, NumbersReadWell) {
  EXPECT_EQ(num(0.4213), "0.421");
  EXPECT_EQ(num(12.34), "12.3");
  EXPECT_EQ(num(1980), "1980");
  EXPECT_EQ(num(0), "0");
  EXPECT_EQ(num(NAN), "n/a");
}

}  // namespace
}  // namespace purser::diagnose
