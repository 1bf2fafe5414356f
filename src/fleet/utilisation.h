// GPU utilisation of placed work: the seam the fleet reads a GPU's utilisation through (in
// `purser serve`, the DCGM exporters' DCGM_FI_DEV_GPU_UTIL; in tests, a fake), and the arithmetic
// that turns readings into how much of a workload's GPU time was busy.
//
// A workload's GPU time is counted on its placement: a share of `gpu_milli` thousandths of a GPU
// held for `ms` milliseconds is gpu_milli × ms milli-GPU-milliseconds *placed*. While its GPU has
// a reading, that time is *observed*, and util/100 of it is *busy*. Efficiency is busy / observed.
//
// A GPU shared by several workloads (HAMi shares) reports one utilisation for the whole device:
// DCGM's counter cannot be split by process, so each share on it is attributed the device's
// utilisation, weighted by the share's size. Summed over the shares this is the device's busy
// time; how it divides between them is an attribution, not a measurement (one busy share makes
// an idle neighbour look busy too).
//
// Pure: no I/O, time passed in. Thread-compatible; a GpuUtilisation implementation must be safe to
// call from the fleet's thread while its source is written from another.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fleet/model.h"

namespace purser::fleet {

struct GpuReading {
  double util_percent = 0;  // as the source reported it (usablePercent() decides what counts)
  int64_t at_ms = 0;        // when it was sampled, Unix milliseconds
};

// Where the fleet learns how busy a GPU is.
class GpuUtilisation {
 public:
  virtual ~GpuUtilisation() = default;
  // The latest reading of GPU `gpu_index` of node `node` (the inventory's names); nullopt when
  // there is none, or it is too old to believe.
  virtual std::optional<GpuReading> reading(const std::string& node, int gpu_index) const = 0;
};

// A reading as the fleet believes it: NaN, infinite or negative is no reading; above 100 is 100
// (DCGM's counter is a percentage; a glitch must not make a workload more than fully busy).
std::optional<double> usablePercent(double percent);

// GPU time in milli-GPU-milliseconds (a whole GPU for one millisecond is 1000).
struct GpuTime {
  int64_t placed = 0;    // held on the placement's GPUs
  int64_t observed = 0;  // of that, while the GPU had a reading
  double busy = 0;       // of that, weighted by the reading (0 ≤ busy ≤ observed)

  GpuTime& operator+=(const GpuTime& other);
  // busy / observed in percent; nullopt when nothing was observed.
  std::optional<double> averagePercent() const;
};

// Usable utilisation (0..100) of GPU `gpu_index` on `node`, or nullopt.
using PercentOf = std::function<std::optional<double>(const std::string& node, int gpu_index)>;

// The GPU time of `pods` (one placement per pod) over `elapsed_ms`, each GPU at its reading now.
// Nothing for elapsed_ms ≤ 0 or a non-positive share.
GpuTime gpuTimeOf(const std::vector<PodPlacement>& pods, int64_t elapsed_ms,
                  const PercentOf& percent);

// "Allocated but idle": a workload that holds GPUs and whose observed utilisation over the last
// kIdleWindowMs (or since it started, when that is shorter) averages under kIdleBelowPercent.
inline constexpr int64_t kIdleWindowMs = 600'000;
inline constexpr double kIdleBelowPercent = 10;
bool isIdle(const GpuTime& recent);

// GPU time over a trailing window, kept in fixed buckets so that its memory is bounded whatever
// the sampling rate (window / bucket buckets). A bucket that overlaps the window counts whole.
class RecentUtilisation {
 public:
  explicit RecentUtilisation(int64_t window_ms = kIdleWindowMs, int64_t bucket_ms = 10'000);
  // GPU time of a stretch that ended at `at_ms` (times should not go back; a late one joins the
  // newest bucket).
  void add(int64_t at_ms, const GpuTime& t);
  // The sum over the buckets that overlap (now_ms - window, now_ms].
  GpuTime over(int64_t now_ms) const;
  void clear() { buckets_.clear(); }

 private:
  int64_t window_ms_;
  int64_t bucket_ms_;
  std::deque<std::pair<int64_t, GpuTime>> buckets_;  // bucket start, oldest first
};

}  // namespace purser::fleet
