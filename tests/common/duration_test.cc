#include "common/duration.h"

#include <gtest/gtest.h>

namespace purser {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::nanoseconds;
using std::chrono::seconds;

TEST(DurationTest, ParsesUnitsAndCompounds) {
  EXPECT_EQ(*parseDuration("30s"), seconds(30));
  EXPECT_EQ(*parseDuration("250ms"), milliseconds(250));
  EXPECT_EQ(*parseDuration("1h30m"), minutes(90));
  EXPECT_EQ(*parseDuration("1.5s"), milliseconds(1500));
  EXPECT_EQ(*parseDuration("5m"), minutes(5));
  EXPECT_EQ(*parseDuration("10us"), nanoseconds(10'000));
  EXPECT_EQ(*parseDuration("7ns"), nanoseconds(7));
  EXPECT_EQ(*parseDuration("2h"), hours(2));
  EXPECT_EQ(*parseDuration("0"), nanoseconds(0));
  EXPECT_EQ(*parseDuration("1m1ms"), minutes(1) + milliseconds(1));
}

TEST(DurationTest, RejectsBadText) {
  for (const char* bad : {"", "30", "s", "1x", "-5s", "1.s5", "5 s", "99999999999999999999h"}) {
    auto d = parseDuration(bad);
    ASSERT_FALSE(d.has_value()) << bad;
    EXPECT_NE(d.error().message.find("invalid duration"), std::string::npos) << bad;
  }
}

TEST(DurationTest, FormatsShortestExactForm) {
  EXPECT_EQ(formatDuration(milliseconds(1500)), "1.5s");
  EXPECT_EQ(formatDuration(seconds(90)), "1m30s");
  EXPECT_EQ(formatDuration(milliseconds(250)), "250ms");
  EXPECT_EQ(formatDuration(hours(2)), "2h");
  EXPECT_EQ(formatDuration(nanoseconds(0)), "0s");
  for (const char* text : {"1h30m", "250ms", "1.5s", "10us", "7ns", "45s"}) {
    EXPECT_EQ(*parseDuration(formatDuration(*parseDuration(text))), *parseDuration(text)) << text;
  }
}

}  // namespace
}  // namespace purser
