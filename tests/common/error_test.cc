#include "common/error.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/logging.h"
#include "common/result.h"

namespace purser {
namespace {

TEST(ErrorTest, ToStringNamesFileLineFieldAndMessage) {
  Error e = invalidArgument("expected a duration").withField("timeout").withField("http");
  EXPECT_EQ(e.field, "http.timeout");
  EXPECT_EQ(e.toString(), "http.timeout: expected a duration");
  EXPECT_EQ(e.at("a.yaml", 12, 3).toString(), "a.yaml:12:3: http.timeout: expected a duration");
  EXPECT_EQ(Error(ErrorCode::kNotFound, "no such key").toString(), "no such key");
  EXPECT_EQ(errorCodeName(ErrorCode::kResourceExhausted), "resource_exhausted");
}

Result<int> half(int v) {
  if (v % 2 != 0) return fail(invalidArgument("odd"));
  return v / 2;
}

Result<int> quarter(int v) {
  const int h = PURSER_TRY_VALUE(half(v));
  return half(h);
}

Result<void> checkEven(int v) {
  PURSER_TRY(half(v));
  return {};
}

TEST(ResultTest, TryMacrosPropagateErrors) {
  EXPECT_EQ(*quarter(8), 2);
  EXPECT_EQ(quarter(6).error().message, "odd");
  EXPECT_TRUE(checkEven(4).has_value());
  EXPECT_FALSE(checkEven(3).has_value());
}

TEST(ClockTest, ManualClockMovesOnlyWhenTold) {
  ManualClock clock;
  const auto wall = clock.now();
  const auto mono = clock.monotonic();
  EXPECT_EQ(clock.now(), wall);
  clock.advance(std::chrono::seconds(5));
  EXPECT_EQ(clock.now() - wall, std::chrono::seconds(5));
  EXPECT_EQ(clock.monotonic() - mono, std::chrono::seconds(5));
  clock.setNow(wall);  // wall steps back; monotonic does not
  EXPECT_EQ(clock.now(), wall);
  EXPECT_EQ(clock.monotonic() - mono, std::chrono::seconds(5));
  EXPECT_EQ(formatRfc3339(wall), "2026-01-01T00:00:00.000Z");
}

TEST(ClockTest, ParsesRfc3339) {
  const auto t = parseRfc3339("2026-11-29T18:04:05Z");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(formatRfc3339(*t), "2026-11-29T18:04:05.000Z");
  EXPECT_EQ(formatRfc3339(*parseRfc3339("2026-11-29T19:04:05.25+01:00")),
            "2026-11-29T18:04:05.250Z");
  EXPECT_EQ(formatRfc3339(*parseRfc3339("2026-11-29")), "2026-11-29T00:00:00.000Z");
  EXPECT_EQ(formatRfc3339(*parseRfc3339("2026-03-01T00:30:00-01:00")), "2026-03-01T01:30:00.000Z");
  for (const char* bad :
       {"", "2026-13-01", "2026-02-30", "2026-11-29T18:04:05", "29/11/2026", "2026-11-29T25:00:00Z",
        "2026-11-29T18:04:05Zjunk", "2026-11-29T18:04Z"}) {
    EXPECT_FALSE(parseRfc3339(bad).has_value()) << bad;
  }
}

TEST(LoggingTest, JsonEscapingAndOptionValidation) {
  EXPECT_EQ(jsonEscape("a\"b\\c\n\x01"), "a\\\"b\\\\c\\n\\u0001");
  EXPECT_TRUE(parseLogLevel("debug").has_value());
  EXPECT_FALSE(parseLogLevel("verbose").has_value());
  EXPECT_FALSE(parseLogFormat("xml").has_value());
  EXPECT_TRUE(setupLogging({.level = "warn", .format = LogFormat::kJson}).has_value());
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::warn);
  EXPECT_EQ(logger("test")->level(), spdlog::level::warn);
  EXPECT_FALSE(setupLogging({.level = "loud"}).has_value());
}

}  // namespace
}  // namespace purser

#include "common/hash.h"

namespace purser {
namespace {

TEST(HashTest, Fnv1aMatchesTheReferenceValues) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64Hex("foobar"), "85944171f73967e8");
}

}  // namespace
}  // namespace purser
