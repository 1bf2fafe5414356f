// Observer: `purser serve`'s eyes on the model servers and GPUs. It scrapes every provider that
// has a `metrics_url` (every observe.interval) and every configured exporter (DCGM, every
// observe.gpu_interval) into one SeriesStore, and after each scrape of a provider judges every
// route target that provider serves (observe::judgeTarget against the route's objectives) and
// sets the target's condition and facts, which routing and GET /api/v1/routes read.
//
// Thread-safety: created and started before the workers run; judging happens on the scrape
// loops' thread and writes only atomics and the targets' own locked facts.
#pragma once

#include <utility>

#include <boost/asio/io_context.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "config/config.h"
#include "gateway/routing.h"
#include "http/metrics.h"
#include "observe/scraper.h"
#include "observe/series.h"

namespace purser::server {

class Observer {
 public:
  using RouteList = std::function<std::vector<const gateway::Route*>()>;

  static Result<std::unique_ptr<Observer>> create(
      const config::ObserveConfig& config, const std::vector<config::ProviderConfig>& providers,
      boost::asio::io_context& io, http::MetricsRegistry& metrics, const Clock& clock,
      RouteList routes);
  ~Observer();

  // Called after each judgement of a provider's targets (on the scrape loop's thread); set
  // before start().
  void onJudged(std::function<void()> f) { on_judged_ = std::move(f); }

  void start();
  void stop();
  // Scrapes a replica the fleet serves (provider `name`) at `metrics_url` every
  // observe.interval, as `engine` (vllm, sglang, tgi) writes its metrics, until unwatch(name).
  // Thread-safe.
  void watch(const std::string& name, const std::string& metrics_url, const std::string& engine);
  void unwatch(const std::string& name);
  // After a scrape of `name`: judges the targets of that provider, or of the providers on that
  // exporter's GPUs, from what is known now.
  void judge(const std::string& name);

  const observe::SeriesStore& series() const { return *store_; }
  // For writers beside the scraper (Purser's own metrics, sampled by the server).
  observe::SeriesStore& mutableSeries() { return *store_; }
  const observe::Scraper& scraper() const { return *scraper_; }

 private:
  Observer(const config::ObserveConfig& config, const Clock& clock, RouteList routes);
  void judgeProvider(const std::string& name);
  // "GPU 0 on node-1 reported XID 79" when a GPU the provider runs on reports one now.
  std::string gpuFault(const std::string& provider, int64_t now_ms) const;
  const observe::ScrapeTarget* scrapeTarget(const std::string& name) const;

  const config::ObserveConfig config_;
  const Clock& clock_;
  http::Family<http::Gauge>* state_ = nullptr;
  http::Family<http::Gauge>* queue_ = nullptr;
  http::Family<http::Gauge>* kv_ = nullptr;
  http::Family<http::Gauge>* ttft_ = nullptr;
  RouteList routes_;
  std::function<void()> on_judged_;
  std::map<std::string, std::vector<std::string>> gpus_;  // provider -> "EXPORTER/GPU"
  std::unique_ptr<observe::SeriesStore> store_;
  std::unique_ptr<observe::Scraper> scraper_;
};

}  // namespace purser::server
