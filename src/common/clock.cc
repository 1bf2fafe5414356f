#include "common/clock.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <string>

namespace purser {

SystemClock& SystemClock::instance() {
  static SystemClock clock;
  return clock;
}

namespace {
// 2026-01-01T00:00:00Z
constexpr int64_t kDefaultStartNs = 1767225600LL * 1'000'000'000LL;
}  // namespace

ManualClock::ManualClock() : wall_ns_(kDefaultStartNs), mono_ns_(1'000'000'000) {}

ManualClock::ManualClock(SystemTime start)
    : wall_ns_(
          std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count()),
      mono_ns_(1'000'000'000) {}

SystemTime ManualClock::now() const {
  return SystemTime(std::chrono::duration_cast<SystemTime::duration>(
      std::chrono::nanoseconds(wall_ns_.load(std::memory_order_acquire))));
}

MonoTime ManualClock::monotonic() const {
  return MonoTime(std::chrono::duration_cast<MonoTime::duration>(
      std::chrono::nanoseconds(mono_ns_.load(std::memory_order_acquire))));
}

void ManualClock::advance(Duration d) {
  if (d.count() < 0) return;  // time never runs backwards on the monotonic side
  wall_ns_.fetch_add(d.count(), std::memory_order_acq_rel);
  mono_ns_.fetch_add(d.count(), std::memory_order_acq_rel);
}

void ManualClock::setNow(SystemTime t) {
  const int64_t target =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  const int64_t prev = wall_ns_.exchange(target, std::memory_order_acq_rel);
  if (target > prev) mono_ns_.fetch_add(target - prev, std::memory_order_acq_rel);
}

int64_t unixMillis(SystemTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

std::string formatRfc3339(SystemTime t) {
  const int64_t ms = unixMillis(t);
  const auto secs =
      std::chrono::sys_seconds(std::chrono::seconds(ms >= 0 ? ms / 1000 : (ms - 999) / 1000));
  const int64_t frac = ((ms % 1000) + 1000) % 1000;
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z", secs, frac);
}

Result<SystemTime> parseRfc3339(std::string_view text) {
  const auto bad = [&] {
    return fail(invalidArgument(fmt::format(
        "invalid time \"{}\"; expected RFC 3339 such as \"2026-11-29T18:04:05Z\"", text)));
  };
  const auto digits = [&](size_t pos, size_t n, int& out) {
    if (pos + n > text.size()) return false;
    out = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      out = out * 10 + (text[i] - '0');
    }
    return true;
  };
  int y, mo, d, h = 0, mi = 0, s = 0;
  if (!digits(0, 4, y) || text.size() < 10 || text[4] != '-' || !digits(5, 2, mo) ||
      text[7] != '-' || !digits(8, 2, d)) {
    return bad();
  }
  const std::chrono::year_month_day ymd{std::chrono::year(y), std::chrono::month(mo),
                                        std::chrono::day(d)};
  if (!ymd.ok()) return bad();
  int64_t ms = 0;
  int offset_minutes = 0;
  size_t i = 10;
  if (i < text.size()) {
    if ((text[i] != 'T' && text[i] != 't' && text[i] != ' ') || !digits(11, 2, h) ||
        text.size() < 19 || text[13] != ':' || !digits(14, 2, mi) || text[16] != ':' ||
        !digits(17, 2, s) || h > 23 || mi > 59 || s > 60) {
      return bad();
    }
    i = 19;
    if (i < text.size() && text[i] == '.') {
      ++i;
      int64_t scale = 100;
      const size_t start = i;
      while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
        ms += (text[i] - '0') * scale;
        scale /= 10;
        ++i;
      }
      if (i == start) return bad();
    }
    if (i >= text.size()) return bad();  // a time needs its offset
    if (text[i] == 'Z' || text[i] == 'z') {
      ++i;
    } else if (text[i] == '+' || text[i] == '-') {
      int oh, om;
      if (!digits(i + 1, 2, oh) || i + 3 >= text.size() || text[i + 3] != ':' ||
          !digits(i + 4, 2, om) || oh > 23 || om > 59) {
        return bad();
      }
      offset_minutes = (text[i] == '+' ? 1 : -1) * (oh * 60 + om);
      i += 6;
    } else {
      return bad();
    }
    if (i != text.size()) return bad();
  }
  const auto day = std::chrono::sys_days(ymd);
  const auto t = day + std::chrono::hours(h) + std::chrono::minutes(mi) + std::chrono::seconds(s) +
                 std::chrono::milliseconds(ms) - std::chrono::minutes(offset_minutes);
  return std::chrono::time_point_cast<SystemTime::duration>(t);
}

}  // namespace purser
