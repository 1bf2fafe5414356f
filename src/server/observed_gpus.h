// The fleet's view of how busy its GPUs are, from what the Observer scrapes: the newest
// DCGM_FI_DEV_GPU_UTIL sample of a DCGM exporter (observe.exporters, engine dcgm) whose
// `Hostname` label is the inventory node's name and whose `gpu` label is the GPU's index
// (dcgm-exporter's labels; `purser sim dcgm --hostname NODE` writes the same). A sample older than
// three of its exporter's scrape intervals (and half a second) is not believed, and neither is a
// staleness marker (NaN).
//
// Thread-safety: reading() may be called from any thread (the SeriesStore is); the exporters'
// intervals are read once, at construction.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/clock.h"
#include "fleet/utilisation.h"
#include "observe/scraper.h"
#include "observe/series.h"

namespace purser::server {

class ObservedGpus final : public fleet::GpuUtilisation {
 public:
  ObservedGpus(const observe::SeriesStore& series, const observe::Scraper& scraper,
               const Clock& clock);

  std::optional<fleet::GpuReading> reading(const std::string& node, int gpu_index) const override;

 private:
  const observe::SeriesStore& series_;
  const Clock& clock_;
  std::map<std::string, int64_t> max_age_ms_;  // DCGM exporter (its `target` label) -> ms
};

}  // namespace purser::server
