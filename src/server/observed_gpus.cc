#include "server/observed_gpus.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace purser::server {

ObservedGpus::ObservedGpus(const observe::SeriesStore& series, const observe::Scraper& scraper,
                           const Clock& clock)
    : series_(series), clock_(clock) {
  for (const auto& t : scraper.targets()) {
    if (t.engine != observe::EngineKind::kDcgm) continue;
    const int64_t interval_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(t.interval).count();
    max_age_ms_[t.name] = 3 * std::max<int64_t>(1, interval_ms) + 500;
  }
}

std::optional<fleet::GpuReading> ObservedGpus::reading(const std::string& node,
                                                       int gpu_index) const {
  if (max_age_ms_.empty() || node.empty() || gpu_index < 0) return std::nullopt;
  const int64_t now_ms = unixMillis(clock_.now());
  std::optional<fleet::GpuReading> best;
  // One series per exporter that reports the GPU (normally one).
  for (const auto& key : series_.select("DCGM_FI_DEV_GPU_UTIL",
                                        {{"Hostname", node}, {"gpu", std::to_string(gpu_index)}})) {
    const auto target = key.label("target");
    if (!target) continue;
    auto age = max_age_ms_.find(std::string(*target));
    if (age == max_age_ms_.end()) continue;
    const auto p = series_.latest(key);
    if (!p || std::isnan(p->value) || now_ms - p->t_ms > age->second) continue;
    if (!best || p->t_ms > best->at_ms) best = fleet::GpuReading{p->value, p->t_ms};
  }
  return best;
}

}  // namespace purser::server
