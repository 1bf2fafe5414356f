// Scraper: reads Prometheus endpoints (model servers, GPU exporters) on an interval and writes
// what it keeps into a SeriesStore.
//
// Each target has its own loop: GET its URL (text format 0.0.4 or OpenMetrics), parse it with
// parsePrometheusText, keep the families its engine's profile names (observation.h), and append
// every kept sample with the label target="<name>" (a `target` label of the exposition's own is
// kept as `exported_target`, as Prometheus keeps `exported_instance`). A sample's own timestamp is
// used when it has one, the scrape's time otherwise. A scrape that fails — no answer within
// the timeout, a status other than 200, a body past the limits, text that does not parse —
// writes nothing and counts as a failure; the loop goes on at its interval whatever happens.
// After every attempt `on_scrape(target)` runs (on the loop's thread), so that the judgement of
// a server follows its metrics within one interval.
//
// It reports itself on /metrics: purser_scrape_up, purser_scrape_duration_seconds and
// purser_scrape_samples per target, and the store's series, bytes and refused series.
//
// Thread-safety: start() and stop() from one thread; status() from any. The loops run on the
// given io_context.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "http/metrics.h"
#include "observe/observation.h"
#include "observe/series.h"

namespace purser::observe {

struct ScrapeTarget {
  std::string name;  // the `target` label; unique
  std::string url;   // http(s)://host:port/metrics
  EngineKind engine = EngineKind::kVllm;
  Duration interval{std::chrono::seconds(1)};
  Duration timeout{std::chrono::seconds(1)};  // at most the interval
};

struct ScrapeStatus {
  std::string target;
  int64_t last_attempt_ms = 0;  // 0: never tried
  int64_t last_success_ms = 0;  // 0: never succeeded
  int consecutive_failures = 0;
  std::string last_error;  // empty after a success
  size_t samples = 0;      // kept from the last successful scrape
  double duration_s = 0;   // of the last attempt
};

struct ScraperOptions {
  // A vLLM server's /metrics is some 100 KB; parsing costs up to about twelve times the text.
  size_t max_body_bytes = 4 * 1024 * 1024;
  // How often series not written for the store's stale_after are dropped.
  Duration sweep_interval{std::chrono::seconds(60)};
};

class Scraper {
 public:
  Scraper(boost::asio::io_context& io, SeriesStore& store, http::MetricsRegistry& metrics,
          const Clock& clock, std::vector<ScrapeTarget> targets,
          std::function<void(const std::string& target)> on_scrape, ScraperOptions options = {});
  ~Scraper();
  Scraper(const Scraper&) = delete;
  Scraper& operator=(const Scraper&) = delete;

  // Starts every target's loop; the first scrape is immediate.
  void start();
  // Stops the loops (a scrape in flight is abandoned) and waits for none of them.
  void stop();

  // Scrapes `target` from now on, every interval, beside the configured ones (a replica the
  // fleet serves); a target of that name comes back at its new address. Thread-safe.
  void add(ScrapeTarget target);
  // Stops scraping `name` after the scrape in flight; its series go stale. Thread-safe.
  void remove(const std::string& name);

  std::vector<ScrapeStatus> statuses() const;
  std::optional<ScrapeStatus> status(const std::string& target) const;
  // Every target ever scraped, in the order added; read it before start() or on the scrape
  // loops' thread (add() appends there; elements never move).
  const std::deque<ScrapeTarget>& targets() const;

  // One scrape of target `index` now, outside its loop (tests, and `purser` commands).
  boost::asio::awaitable<void> scrapeOnce(size_t index);

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace purser::observe
