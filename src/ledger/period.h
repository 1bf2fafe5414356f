// Budget periods: the calendar windows a wallet's spending is counted in, aligned to midnight in
// the wallet's own time zone. A daily wallet in Europe/Berlin resets at 00:00 Berlin time —
// which is 22:00 or 23:00 UTC depending on daylight saving. Weeks start on Monday (ISO 8601).
// Where a local midnight does not exist or happens twice (zones that change clocks at midnight),
// the period starts at the earliest instant of that local day.
//
// Pure functions of their inputs; TimeZone handles are immutable and safe to share.
#pragma once

#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/result.h"

namespace purser::ledger {

enum class Period { kNone, kDaily, kWeekly, kMonthly };

Result<Period> parsePeriod(std::string_view name);  // "none", "daily", "weekly", "monthly"
std::string_view periodName(Period p);

// An IANA time zone ("UTC", "Europe/Berlin", "America/New_York") from the system's tzdata.
class TimeZone {
 public:
  static Result<TimeZone> find(std::string_view name);
  static TimeZone utc();
  const std::string& name() const { return name_; }
  const void* handle() const { return zone_; }

 private:
  TimeZone(std::string name, const void* zone) : name_(std::move(name)), zone_(zone) {}
  std::string name_;
  const void* zone_;  // date::time_zone, owned by the tz database
};

struct Window {
  SystemTime start;  // inclusive
  SystemTime end;    // exclusive; SystemTime::max() for Period::kNone
  friend bool operator==(const Window&, const Window&) = default;
};

// The window of `period` in `zone` that contains `t`.
Window periodWindow(Period period, const TimeZone& zone, SystemTime t);

}  // namespace purser::ledger
