// Clock: the one source of time for everything that decides (budgets, rate limits, admission,
// expiry). Engines take a Clock& so tests drive time with ManualClock instead of sleeping.
//
// now() is wall-clock time (for periods, audit timestamps, ids); monotonic() never goes back and
// is what durations and deadlines are measured with. Both are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace purser {

using SystemTime = std::chrono::system_clock::time_point;
using MonoTime = std::chrono::steady_clock::time_point;
using Duration = std::chrono::nanoseconds;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual SystemTime now() const = 0;
  virtual MonoTime monotonic() const = 0;
};

// The real clocks of the machine.
class SystemClock final : public Clock {
 public:
  SystemTime now() const override { return std::chrono::system_clock::now(); }
  MonoTime monotonic() const override { return std::chrono::steady_clock::now(); }

  // A process-wide instance for composition roots; everything else receives a Clock&.
  static SystemClock& instance();
};

// A clock that moves only when told to. Wall and monotonic time advance together.
class ManualClock final : public Clock {
 public:
  // Starts at 2026-01-01T00:00:00Z unless given another instant.
  ManualClock();
  explicit ManualClock(SystemTime start);

  SystemTime now() const override;
  MonoTime monotonic() const override;

  void advance(Duration d);
  // Sets wall time; monotonic time moves forward by the same amount (never backwards).
  void setNow(SystemTime t);

 private:
  std::atomic<int64_t> wall_ns_;
  std::atomic<int64_t> mono_ns_;
};

// Milliseconds since the Unix epoch.
int64_t unixMillis(SystemTime t);
// RFC 3339 in UTC with millisecond precision: "2026-11-29T18:04:05.123Z".
std::string formatRfc3339(SystemTime t);
// Parses RFC 3339 ("2026-11-29T18:04:05Z", "2026-11-29T19:04:05.5+01:00", a bare date
// "2026-11-29" meaning its midnight UTC). Fractions beyond milliseconds are truncated.
Result<SystemTime> parseRfc3339(std::string_view text);

}  // namespace purser
