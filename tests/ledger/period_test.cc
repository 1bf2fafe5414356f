#include "ledger/period.h"

#include <date/date.h>
#include <gtest/gtest.h>

namespace purser::ledger {
namespace {

using std::chrono::hours;
using std::chrono::minutes;

// A UTC instant from "YYYY-MM-DD HH:MM".
SystemTime utc(int y, unsigned m, unsigned d, int hh, int mm = 0) {
  return SystemTime(date::sys_days(date::year(y) / m / d).time_since_epoch() + hours(hh) +
                    minutes(mm));
}

struct WindowCase {
  const char* zone;
  Period period;
  SystemTime at;
  SystemTime start;
  SystemTime end;
  const char* what;
};

class PeriodWindowTest : public ::testing::TestWithParam<WindowCase> {};

TEST_P(PeriodWindowTest, AlignsToLocalCalendarBoundaries) {
  const WindowCase& c = GetParam();
  auto zone = TimeZone::find(c.zone);
  ASSERT_TRUE(zone.has_value());
  const Window w = periodWindow(c.period, *zone, c.at);
  EXPECT_EQ(w.start, c.start) << c.what << ": start " << formatRfc3339(w.start);
  EXPECT_EQ(w.end, c.end) << c.what << ": end " << formatRfc3339(w.end);
}

INSTANTIATE_TEST_SUITE_P(
    Table, PeriodWindowTest,
    ::testing::Values(
        // Berlin is UTC+1 in winter, UTC+2 in summer; DST began 2026-03-29 02:00 local.
        WindowCase{"Europe/Berlin", Period::kDaily, utc(2026, 1, 15, 23, 30), utc(2026, 1, 15, 23),
                   utc(2026, 1, 16, 23), "23:30 UTC on the 15th is already the 16th in Berlin"},
        WindowCase{"Europe/Berlin", Period::kDaily, utc(2026, 1, 15, 22, 59), utc(2026, 1, 14, 23),
                   utc(2026, 1, 15, 23), "one minute before midnight"},
        WindowCase{"Europe/Berlin", Period::kDaily, utc(2026, 3, 29, 12), utc(2026, 3, 28, 23),
                   utc(2026, 3, 29, 22), "the spring-forward day has 23 hours"},
        WindowCase{"Europe/Berlin", Period::kDaily, utc(2026, 10, 25, 12), utc(2026, 10, 24, 22),
                   utc(2026, 10, 25, 23), "the fall-back day has 25 hours"},
        WindowCase{"Europe/Berlin", Period::kWeekly, utc(2026, 3, 29, 12), utc(2026, 3, 22, 23),
                   utc(2026, 3, 29, 22), "the week (Mon 23 Mar .. Sun 29 Mar) ends in summer time"},
        WindowCase{"Europe/Berlin", Period::kMonthly, utc(2026, 3, 15, 0), utc(2026, 2, 28, 23),
                   utc(2026, 3, 31, 22), "March begins in winter time and ends in summer time"},
        WindowCase{"Europe/Berlin", Period::kMonthly, utc(2026, 3, 31, 22), utc(2026, 3, 31, 22),
                   utc(2026, 4, 30, 22), "the first instant of April"},
        // New York: DST began 2026-03-08 02:00 local (UTC-5 -> UTC-4).
        WindowCase{"America/New_York", Period::kDaily, utc(2026, 3, 8, 3), utc(2026, 3, 7, 5),
                   utc(2026, 3, 8, 5), "22:00 on the 7th, New York"},
        WindowCase{"America/New_York", Period::kDaily, utc(2026, 3, 8, 5), utc(2026, 3, 8, 5),
                   utc(2026, 3, 9, 4), "the day of the change, 23 hours long"},
        WindowCase{"America/New_York", Period::kWeekly, utc(2026, 3, 4, 12), utc(2026, 3, 2, 5),
                   utc(2026, 3, 9, 4), "a week that spans the change"},
        // Santiago moves its clocks at midnight: 2026-09-06 00:00 local does not exist.
        WindowCase{"America/Santiago", Period::kDaily, utc(2026, 9, 6, 12), utc(2026, 9, 6, 4),
                   utc(2026, 9, 7, 3), "a day whose midnight does not exist starts at the jump"},
        WindowCase{"UTC", Period::kMonthly, utc(2028, 2, 29, 12), utc(2028, 2, 1, 0),
                   utc(2028, 3, 1, 0), "a leap February"},
        WindowCase{"Asia/Kolkata", Period::kDaily, utc(2026, 6, 1, 18, 29),
                   utc(2026, 5, 31, 18, 30), utc(2026, 6, 1, 18, 30), "half-hour offsets"}));

TEST(PeriodTest, NoneIsOneEndlessWindow) {
  const Window w = periodWindow(Period::kNone, TimeZone::utc(), utc(2026, 5, 5, 5));
  EXPECT_EQ(w.start, SystemTime::min());
  EXPECT_EQ(w.end, SystemTime::max());
}

TEST(PeriodTest, ParsesNamesAndRejectsUnknownOnes) {
  EXPECT_EQ(*parsePeriod("weekly"), Period::kWeekly);
  EXPECT_EQ(periodName(Period::kMonthly), "monthly");
  auto bad = parsePeriod("fortnightly");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("expected one of none, daily, weekly, monthly"),
            std::string::npos);
  auto zone = TimeZone::find("Mars/Olympus_Mons");
  ASSERT_FALSE(zone.has_value());
  EXPECT_NE(zone.error().message.find("unknown time zone \"Mars/Olympus_Mons\""),
            std::string::npos);
  EXPECT_FALSE(TimeZone::find("").has_value());
}

}  // namespace
}  // namespace purser::ledger
