// Durations in configuration and on the command line: "250ms", "30s", "5m", "1h30m", "1.5s".
// Units: ns, us, ms, s, m, h. A bare "0" is zero. Parsing is exact for every unit down to ns.
#pragma once

#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/result.h"

namespace purser {

Result<Duration> parseDuration(std::string_view text);
// The shortest exact form using the units above: 1500ms -> "1.5s", 90s -> "1m30s".
std::string formatDuration(Duration d);

}  // namespace purser
