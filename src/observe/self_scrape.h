// SelfScrape: Purser's own metrics sampled into the SeriesStore beside the model servers' and
// the GPUs', so that live diagnosis reads the gateway's requests and errors, the wallets and the
// fleet's queues as series over time, exactly as an incident case holds them.
//
// Every sample() renders the registry (http::MetricsRegistry::render(), the text GET /metrics
// answers), reads it with parsePrometheusText and appends the samples of the kept families at
// the time given. Kept are only the families diagnosis reads (diagnosedFamilies()); every other
// family is left out, so a label with many values elsewhere never fills the store. The samples
// keep their own labels: no `target` label is added (the gateway's series carry one of their own).
//
// A counter's series appears in the text only once it first counts (the first 5xx of a target);
// before that it was 0 since this process started. So when a counter or histogram series is new,
// it is written as 0 at the earlier sample times this SelfScrape made (at most the raw ring's
// capacity of them) before its first value: its rate then starts from a true baseline, as a
// series Prometheus had scraped all along would.
//
// Bounded like any scrape: the text by ParseLimits, the series by the store's max_series (a new
// series past it is refused and counted there), the kept samples by Options::max_samples.
//
// Thread-safety: sample() from one thread at a time (the server's timer); the store is itself
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "http/metrics.h"
#include "observe/series.h"

namespace purser::observe {

class SelfScrape {
 public:
  struct Options {
    std::vector<std::string> families = diagnosedFamilies();
    size_t max_samples = 50'000;  // kept per sample(); the rest of a larger text is dropped
  };

  // The families live diagnosis reads: purser_gateway_requests_total,
  // purser_gateway_upstream_errors_total, purser_gateway_ttft_seconds,
  // purser_gateway_queue_waiting, purser_gateway_shed_total, purser_wallet_spent_ratio,
  // purser_fleet_pending_workloads, purser_fleet_quota_used, purser_fleet_quota_nominal.
  static std::vector<std::string> diagnosedFamilies();

  SelfScrape(SeriesStore& store, const http::MetricsRegistry& registry);
  SelfScrape(SeriesStore& store, const http::MetricsRegistry& registry, Options options);

  // Renders the registry and appends what is kept at `now_ms`. Returns the samples appended.
  Result<size_t> sample(int64_t now_ms);
  // The same from exposition text (the registry's render(), or a test's).
  Result<size_t> sampleText(std::string_view text, int64_t now_ms);

 private:
  bool kept(std::string_view family) const;

  SeriesStore& store_;
  const http::MetricsRegistry& registry_;
  const Options options_;
  std::deque<int64_t> times_;  // earlier sample times, oldest first (at most the raw capacity)
};

}  // namespace purser::observe
