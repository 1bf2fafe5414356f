#include "ledger/period.h"

#include <date/tz.h>
#include <fmt/format.h>

namespace purser::ledger {

Result<Period> parsePeriod(std::string_view name) {
  if (name == "none") return Period::kNone;
  if (name == "daily") return Period::kDaily;
  if (name == "weekly") return Period::kWeekly;
  if (name == "monthly") return Period::kMonthly;
  return fail(invalidArgument(
      fmt::format("unknown period \"{}\"; expected one of none, daily, weekly, monthly", name)));
}

std::string_view periodName(Period p) {
  switch (p) {
    case Period::kNone:
      return "none";
    case Period::kDaily:
      return "daily";
    case Period::kWeekly:
      return "weekly";
    case Period::kMonthly:
      return "monthly";
  }
  return "none";
}

Result<TimeZone> TimeZone::find(std::string_view name) {
  if (name.empty()) return fail(invalidArgument("the time zone is empty; use e.g. \"UTC\""));
  try {
    const date::time_zone* zone = date::locate_zone(name);
    return TimeZone(std::string(name), zone);
  } catch (const std::exception&) {
    return fail(invalidArgument(fmt::format(
        "unknown time zone \"{}\"; expected an IANA name such as \"UTC\" or \"Europe/Berlin\"",
        name)));
  }
}

TimeZone TimeZone::utc() {
  static const TimeZone kUtc = *find("UTC");
  return kUtc;
}

namespace {

// The instant a local day begins in `zone`.
SystemTime startOfLocalDay(const date::time_zone* zone, date::local_days day) {
  const auto info = zone->get_info(date::local_seconds(day.time_since_epoch()));
  date::sys_seconds start;
  switch (info.result) {
    case date::local_info::unique:
      start = date::sys_seconds(day.time_since_epoch()) - info.first.offset;
      break;
    case date::local_info::ambiguous:  // midnight happens twice: the first one
      start = date::sys_seconds(day.time_since_epoch()) - info.first.offset;
      break;
    case date::local_info::nonexistent:  // clocks jump over midnight: the day starts at the jump
      start = info.second.begin;
      break;
  }
  return std::chrono::time_point_cast<SystemTime::duration>(start);
}

}  // namespace

Window periodWindow(Period period, const TimeZone& zone, SystemTime t) {
  if (period == Period::kNone) return {SystemTime::min(), SystemTime::max()};
  const auto* tz = static_cast<const date::time_zone*>(zone.handle());
  const auto local = tz->to_local(std::chrono::time_point_cast<std::chrono::seconds>(t));
  date::local_days day = date::floor<date::days>(local);
  date::local_days first;
  date::local_days next;
  switch (period) {
    case Period::kDaily:
      first = day;
      next = day + date::days(1);
      break;
    case Period::kWeekly: {
      const date::weekday wd(day);
      first = day - (wd - date::Monday);
      next = first + date::days(7);
      break;
    }
    case Period::kMonthly: {
      const date::year_month_day ymd(day);
      const date::year_month ym = ymd.year() / ymd.month();
      first = date::local_days(ym / 1);
      next = date::local_days((ym + date::months(1)) / 1);
      break;
    }
    case Period::kNone:
      break;
  }
  return {startOfLocalDay(tz, first), startOfLocalDay(tz, next)};
}

}  // namespace purser::ledger
