// Case values and their times: see case.h. The reader and writer are in diagnose_io/case_io.cc.
#include "diagnose/case.h"

#include <fmt/format.h>

#include <ctime>

namespace purser::diagnose {
std::optional<std::string_view> Series::label(std::string_view key) const {
  for (const auto& [k, v] : labels) {
    if (k == key) return std::string_view(v);
  }
  return std::nullopt;
}

std::optional<TimeMs> parseTime(std::string_view s) {
  // YYYY-MM-DDTHH:MM:SS[.fff][Z|+HH:MM|-HH:MM]
  auto digits = [&](size_t at, size_t n) -> std::optional<int> {
    if (at + n > s.size()) return std::nullopt;
    int v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return std::nullopt;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' ||
      (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  auto y = digits(0, 4), mo = digits(5, 2), d = digits(8, 2), h = digits(11, 2), mi = digits(14, 2),
       se = digits(17, 2);
  if (!y || !mo || !d || !h || !mi || !se) return std::nullopt;
  if (*mo < 1 || *mo > 12 || *d < 1 || *d > 31 || *h > 23 || *mi > 59 || *se > 60) {
    return std::nullopt;
  }
  size_t i = 19;
  int64_t millis = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    int64_t scale = 100;
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (scale > 0) millis += (s[i] - '0') * scale;
      scale /= 10;
      ++i;
    }
    if (i == start) return std::nullopt;
  }
  int64_t offset_s = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) {
    ++i;
  } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    auto oh = digits(i + 1, 2), om = digits(i + 4, 2);
    if (!oh || !om || i + 3 >= s.size() || s[i + 3] != ':') return std::nullopt;
    offset_s = (*oh * 3600 + *om * 60) * (s[i] == '+' ? 1 : -1);
    i += 6;
  } else {
    return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  // Days from the civil date (Howard Hinnant's algorithm).
  int64_t yy = *y - (*mo <= 2 ? 1 : 0);
  int64_t era = (yy >= 0 ? yy : yy - 399) / 400;
  int64_t yoe = yy - era * 400;
  int64_t mp = (*mo + 9) % 12;
  int64_t doy = (153 * mp + 2) / 5 + *d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  int64_t days = era * 146097 + doe - 719468;
  int64_t secs = days * 86400 + *h * 3600 + *mi * 60 + *se - offset_s;
  return secs * 1000 + millis;
}

std::string formatTime(TimeMs t, bool millis) {
  time_t secs = static_cast<time_t>(t >= 0 ? t / 1000 : (t - 999) / 1000);
  const int64_t ms = t - static_cast<int64_t>(secs) * 1000;
  struct tm tm {};
  gmtime_r(&secs, &tm);
  if (millis && ms != 0) {
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900,
                       tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  }
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

}  // namespace purser::diagnose
