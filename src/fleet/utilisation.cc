#include "fleet/utilisation.h"

#include <algorithm>
#include <cmath>

namespace purser::fleet {

std::optional<double> usablePercent(double percent) {
  if (!std::isfinite(percent) || percent < 0) return std::nullopt;
  return std::min(percent, 100.0);
}

GpuTime& GpuTime::operator+=(const GpuTime& other) {
  placed += other.placed;
  observed += other.observed;
  busy += other.busy;
  return *this;
}

std::optional<double> GpuTime::averagePercent() const {
  if (observed <= 0) return std::nullopt;
  return std::clamp(busy / static_cast<double>(observed) * 100.0, 0.0, 100.0);
}

GpuTime gpuTimeOf(const std::vector<PodPlacement>& pods, int64_t elapsed_ms,
                  const PercentOf& percent) {
  GpuTime out;
  if (elapsed_ms <= 0) return out;
  for (const auto& pod : pods) {
    // A share is at most the whole GPU; anything else in a stored record is not believed.
    const int64_t share = std::min<int64_t>(pod.gpu_milli, 1000);
    if (share <= 0) continue;
    for (int gpu : pod.gpus) {
      const int64_t held = share * elapsed_ms;
      out.placed += held;
      const std::optional<double> p = percent ? percent(pod.node, gpu) : std::nullopt;
      if (!p) continue;
      const std::optional<double> usable = usablePercent(*p);
      if (!usable) continue;
      out.observed += held;
      out.busy += static_cast<double>(held) * *usable / 100.0;
    }
  }
  return out;
}

bool isIdle(const GpuTime& recent) {
  if (recent.placed <= 0) return false;
  const std::optional<double> avg = recent.averagePercent();
  return avg && *avg < kIdleBelowPercent;
}

RecentUtilisation::RecentUtilisation(int64_t window_ms, int64_t bucket_ms)
    : window_ms_(std::max<int64_t>(1, window_ms)), bucket_ms_(std::max<int64_t>(1, bucket_ms)) {}

void RecentUtilisation::add(int64_t at_ms, const GpuTime& t) {
  int64_t start = at_ms - ((at_ms % bucket_ms_) + bucket_ms_) % bucket_ms_;
  if (!buckets_.empty() && start < buckets_.back().first) start = buckets_.back().first;
  if (buckets_.empty() || buckets_.back().first != start) {
    buckets_.emplace_back(start, GpuTime{});
  }
  buckets_.back().second += t;
  while (!buckets_.empty() && buckets_.front().first + bucket_ms_ <= start - window_ms_) {
    buckets_.pop_front();
  }
}

GpuTime RecentUtilisation::over(int64_t now_ms) const {
  GpuTime out;
  for (const auto& [start, t] : buckets_) {
    if (start + bucket_ms_ > now_ms - window_ms_ && start <= now_ms) out += t;
  }
  return out;
}

}  // namespace purser::fleet
