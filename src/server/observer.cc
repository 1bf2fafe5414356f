#include "server/observer.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace purser::server {

namespace {

gateway::Condition conditionOf(observe::TargetState s) {
  switch (s) {
    case observe::TargetState::kUnknown:
      return gateway::Condition::kUnknown;
    case observe::TargetState::kHealthy:
      return gateway::Condition::kHealthy;
    case observe::TargetState::kDegraded:
      return gateway::Condition::kDegraded;
    case observe::TargetState::kSaturated:
      return gateway::Condition::kSaturated;
    case observe::TargetState::kDown:
      return gateway::Condition::kDown;
  }
  return gateway::Condition::kUnknown;
}

int64_t millis(Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// A scrape may take up to its interval (at least 50 ms, at most 10 s).
Duration timeoutFor(Duration interval) {
  return std::clamp<Duration>(interval, std::chrono::milliseconds(50), std::chrono::seconds(10));
}

std::optional<double> toMillis(std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  return *seconds * 1000.0;
}

}  // namespace

Observer::Observer(const config::ObserveConfig& config, const Clock& clock, RouteList routes)
    : config_(config), clock_(clock), routes_(std::move(routes)) {}

Observer::~Observer() {
  if (scraper_) scraper_->stop();
}

Result<std::unique_ptr<Observer>> Observer::create(
    const config::ObserveConfig& config, const std::vector<config::ProviderConfig>& providers,
    boost::asio::io_context& io, http::MetricsRegistry& metrics, const Clock& clock,
    RouteList routes) {
  std::unique_ptr<Observer> o(new Observer(config, clock, std::move(routes)));
  observe::SeriesLimits limits;
  limits.max_series = config.max_series;
  limits.raw_retention_ms = millis(config.raw_retention);
  limits.raw_interval_ms = std::max<int64_t>(1, millis(config.interval));
  limits.rollup_ms = std::max<int64_t>(1000, millis(config.rollup));
  limits.rollup_retention_ms = millis(config.rollup_retention);
  // A series no scrape has written for a while is gone (a replica that left, a renamed label).
  limits.stale_after_ms = std::max<int64_t>(600'000, 10 * millis(config.gpu_interval));
  o->store_ = PURSER_TRY_VALUE(observe::SeriesStore::create(limits));

  for (const auto& p : providers) {
    if (!p.gpus.empty()) o->gpus_[p.name] = p.gpus;
  }
  std::vector<observe::ScrapeTarget> targets;
  for (const auto& p : providers) {
    if (p.metrics_url.empty()) continue;
    targets.push_back({.name = p.name,
                       .url = p.metrics_url,
                       .engine = PURSER_TRY_VALUE(observe::parseEngineKind(p.engine)),
                       .interval = config.interval,
                       .timeout = timeoutFor(config.interval)});
  }
  for (const auto& e : config.exporters) {
    targets.push_back({.name = e.name,
                       .url = e.url,
                       .engine = PURSER_TRY_VALUE(observe::parseEngineKind(e.engine)),
                       .interval = e.interval,
                       .timeout = timeoutFor(e.interval)});
  }
  // What it judged, for a real Prometheus (and its recording rules over Purser's SLO view).
  const std::vector<std::string> labels = {"route", "provider", "model"};
  o->state_ = &metrics.gaugeFamily(
      "purser_target_state",
      "A route target's state from its metrics: 0 unknown, 1 healthy, 2 degraded, 3 saturated, "
      "4 down.",
      labels);
  o->queue_ = &metrics.gaugeFamily(
      "purser_target_queue", "Requests waiting at a route target's server (-1: unknown).", labels);
  o->kv_ = &metrics.gaugeFamily("purser_target_kv_cache_usage",
                                "KV-cache usage of a route target's server, 0 to 1 (-1: unknown).",
                                labels);
  o->ttft_ = &metrics.gaugeFamily(
      "purser_target_ttft_p95_seconds",
      "Time to first token p95 at a route target's server over observe.window (-1: unknown).",
      labels);
  Observer* raw = o.get();
  o->scraper_ =
      std::make_unique<observe::Scraper>(io, *o->store_, metrics, clock, std::move(targets),
                                         [raw](const std::string& name) { raw->judge(name); });
  return o;
}

void Observer::start() { scraper_->start(); }

void Observer::watch(const std::string& name, const std::string& metrics_url,
                     const std::string& engine) {
  auto kind = observe::parseEngineKind(engine);
  scraper_->add({.name = name,
                 .url = metrics_url,
                 .engine = kind ? *kind : observe::EngineKind::kVllm,
                 .interval = config_.interval,
                 .timeout = timeoutFor(config_.interval)});
}

void Observer::unwatch(const std::string& name) { scraper_->remove(name); }
void Observer::stop() { scraper_->stop(); }

const observe::ScrapeTarget* Observer::scrapeTarget(const std::string& name) const {
  for (const auto& t : scraper_->targets()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void Observer::judge(const std::string& name) {
  const observe::ScrapeTarget* target = scrapeTarget(name);
  if (target != nullptr && target->engine == observe::EngineKind::kDcgm) {
    for (const auto& [provider, gpus] : gpus_) {
      const bool on_it = std::any_of(gpus.begin(), gpus.end(), [&](const std::string& g) {
        return g.starts_with(name + "/");
      });
      if (on_it) judgeProvider(provider);
    }
  } else {
    judgeProvider(name);
  }
  if (on_judged_) on_judged_();
}

std::string Observer::gpuFault(const std::string& provider, int64_t now_ms) const {
  auto it = gpus_.find(provider);
  if (it == gpus_.end()) return "";
  for (const std::string& ref : it->second) {
    const size_t slash = ref.find('/');
    const std::string exporter = ref.substr(0, slash);
    const std::string gpu = ref.substr(slash + 1);
    const observe::ScrapeTarget* t = scrapeTarget(exporter);
    if (t == nullptr) continue;
    auto p = store_->latest(
        observe::SeriesKey("DCGM_FI_DEV_XID_ERRORS", {{"gpu", gpu}, {"target", exporter}}));
    if (!p) {
      // dcgm-exporter writes more labels (UUID, Hostname, ...): find the GPU's series by label.
      for (const auto& key :
           store_->select("DCGM_FI_DEV_XID_ERRORS", {{"gpu", gpu}, {"target", exporter}})) {
        p = store_->latest(key);
        if (p) break;
      }
    }
    const int64_t max_age_ms = 2 * millis(t->interval) + 500;
    if (p && p->value > 0 && now_ms - p->t_ms <= max_age_ms) {
      return fmt::format("GPU {} on {} reported XID {}", gpu, exporter,
                         static_cast<int64_t>(p->value));
    }
  }
  return "";
}

void Observer::judgeProvider(const std::string& name) {
  const int64_t now_ms = unixMillis(clock_.now());
  observe::TargetEvidence evidence;
  evidence.gpu_fault = gpuFault(name, now_ms);
  const observe::ScrapeTarget* target = scrapeTarget(name);
  std::optional<observe::ScrapeStatus> status;
  if (target != nullptr) {
    status = scraper_->status(name);
    const int64_t interval_ms = std::max<int64_t>(1, millis(target->interval));
    // A scrape older than two intervals is not believed: the server may have changed since.
    const int64_t max_age_ms = 2 * interval_ms + 500;
    evidence.scraped = true;
    evidence.scrape_failures = status->consecutive_failures;
    evidence.fresh = status->last_success_ms > 0 && now_ms - status->last_success_ms <= max_age_ms;
    evidence.observation = observe::observeTarget(*store_, name, observe::profileOf(target->engine),
                                                  now_ms, millis(config_.window), max_age_ms);
  } else if (!gpus_.contains(name)) {
    return;  // neither scraped nor on observed GPUs: judged by its traffic alone
  }
  const MonoTime mono = clock_.monotonic();
  for (const gateway::Route* route : routes_()) {
    for (gateway::Target* t : gateway::allTargets(*route)) {
      if (t->provider == nullptr || t->provider->name() != name) continue;
      observe::TargetEvidence e = evidence;
      e.cooling_down = gateway::coolingDown(*t, mono);
      e.consecutive_failures = t->health.consecutive_failures.load(std::memory_order_relaxed);
      e.any_traffic = t->health.ewma_latency_us.load(std::memory_order_relaxed) != 0;
      std::tie(e.measured_ttft_p95_s, e.measured) =
          t->health.ttft.quantile(0.95, mono - config_.window);
      const observe::TargetHealthJudgement j =
          observe::judgeTarget(e, {.ttft_p95 = route->slo_ttft_p95,
                                   .itl_p95 = route->slo_itl_p95,
                                   .saturation_queue = route->saturation_queue,
                                   .saturation_kv = route->saturation_kv_cache});
      const observe::Observation& o = evidence.observation;
      const std::vector<std::string> labels = {route->alias, name, t->model};
      state_->labels(labels).set(static_cast<double>(static_cast<int>(j.state)));
      queue_->labels(labels).set(o.queue.value_or(-1));
      kv_->labels(labels).set(o.kv_usage.value_or(-1));
      ttft_->labels(labels).set(o.ttft_p95_s.value_or(-1));
      t->observed.set(conditionOf(j.state),
                      {.reason = j.reason,
                       .queue = o.queue,
                       .running = o.running,
                       .kv_cache_usage = o.kv_usage,
                       .ttft_p95_ms = toMillis(o.ttft_p95_s),
                       .itl_p95_ms = toMillis(o.itl_p95_s),
                       .prefix_cache_hit_rate = o.prefix_hit_rate,
                       .observed_at_ms = evidence.fresh ? status->last_success_ms : 0});
    }
  }
}

}  // namespace purser::server
