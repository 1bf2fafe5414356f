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

}  // namespace purser
