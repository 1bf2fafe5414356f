#include "common/duration.h"

#include <fmt/format.h>

#include <array>

namespace purser {
namespace {

struct Unit {
  std::string_view name;
  int64_t nanos;
};
// Longest names first so "ms" is not read as "m".
constexpr std::array<Unit, 6> kUnits{{{"ns", 1},
                                      {"us", 1'000},
                                      {"ms", 1'000'000},
                                      {"s", 1'000'000'000},
                                      {"m", 60'000'000'000},
                                      {"h", 3'600'000'000'000}}};

}  // namespace

Result<Duration> parseDuration(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return fail(invalidArgument(fmt::format(
        "invalid duration \"{}\": {}; expected a number with a unit (ns, us, ms, s, m, h), like "
        "\"30s\", \"250ms\" or \"1h30m\"",
        text, why)));
  };
  if (text.empty()) return bad("it is empty");
  if (text == "0") return Duration(0);
  __int128 total = 0;
  size_t i = 0;
  while (i < text.size()) {
    __int128 whole = 0;
    __int128 frac = 0;
    __int128 frac_scale = 1;
    size_t digits = 0;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
      whole = whole * 10 + (text[i] - '0');
      if (whole > INT64_MAX) return bad("too large");
    }
    if (i < text.size() && text[i] == '.') {
      ++i;
      for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
        if (frac_scale < 1'000'000'000'000'000LL) {
          frac = frac * 10 + (text[i] - '0');
          frac_scale *= 10;
        }
      }
    }
    if (digits == 0) return bad("expected a number");
    const Unit* unit = nullptr;
    for (const Unit& u : kUnits) {
      if (text.substr(i, u.name.size()) == u.name) {
        // "m" must not swallow the "m" of "ms".
        if (u.name == "m" && text.substr(i, 2) == "ms") continue;
        unit = &u;
        break;
      }
    }
    if (unit == nullptr) return bad("missing or unknown unit");
    i += unit->name.size();
    total += whole * unit->nanos + frac * unit->nanos / frac_scale;
    if (total > INT64_MAX) return bad("too large");
  }
  return Duration(static_cast<int64_t>(total));
}

std::string formatDuration(Duration d) {
  int64_t ns = d.count();
  if (ns == 0) return "0s";
  std::string out;
  if (ns < 0) {
    out = "-";
    ns = -ns;
  }
  if (ns < 1'000'000'000) {
    if (ns % 1'000'000 == 0) return out + fmt::format("{}ms", ns / 1'000'000);
    if (ns % 1'000 == 0) return out + fmt::format("{}us", ns / 1'000);
    return out + fmt::format("{}ns", ns);
  }
  const int64_t h = ns / 3'600'000'000'000;
  ns %= 3'600'000'000'000;
  const int64_t m = ns / 60'000'000'000;
  ns %= 60'000'000'000;
  if (h > 0) out += fmt::format("{}h", h);
  if (m > 0) out += fmt::format("{}m", m);
  if (ns > 0) {
    std::string frac = fmt::format("{:09}", ns % 1'000'000'000);
    while (!frac.empty() && frac.back() == '0') frac.pop_back();
    out += frac.empty() ? fmt::format("{}s", ns / 1'000'000'000)
                        : fmt::format("{}.{}s", ns / 1'000'000'000, frac);
  }
  return out;
}

}  // namespace purser
