// The compute share's controller: how many launch-cost units a second a pod may launch on a
// device so that the device's utilisation by the pod settles at its percentage.
//
// A launch costs its grid's block count (a graph launch costs one). The controller cannot know
// what a unit is worth in time, so it learns it: over each window it sees the cost the pod
// launched and the utilisation NVML measured for the pod's processes, and sets the rate to the
// cost that would have given the target, moved at most a factor of two per window and by the
// geometric mean of old and new (NVML's samples lag; a full step oscillates). Pure: the caller
// passes what was measured.
#pragma once

#include <cstdint>

namespace purser::gpushare {

// The window the controller looks at; launches check whether it has passed.
constexpr uint64_t kControlPeriodNs = 100'000'000;

// `rate_milli`: units per second x 1000, 0 while unmeasured (launches pass). `util_percent`: the
// pod's utilisation over the window, negative when none could be read. Returns the new rate.
int64_t retuneRate(int64_t rate_milli, double util_percent, uint64_t launched_cost,
                   uint64_t window_ns, int target_percent);

}  // namespace purser::gpushare
