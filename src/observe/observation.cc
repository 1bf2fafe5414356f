#include "observe/observation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace purser::observe {

Result<EngineKind> parseEngineKind(std::string_view name) {
  if (name == "vllm") return EngineKind::kVllm;
  if (name == "sglang") return EngineKind::kSglang;
  if (name == "tgi") return EngineKind::kTgi;
  if (name == "dcgm") return EngineKind::kDcgm;
  return fail(invalidArgument(
      fmt::format("unknown engine \"{}\"; the engines are vllm, sglang, tgi and dcgm", name)));
}

std::string_view engineKindName(EngineKind kind) {
  switch (kind) {
    case EngineKind::kVllm:
      return "vllm";
    case EngineKind::kSglang:
      return "sglang";
    case EngineKind::kTgi:
      return "tgi";
    case EngineKind::kDcgm:
      return "dcgm";
  }
  return "vllm";
}

namespace {

bool hasSuffixed(const std::vector<std::string>& bases, std::string_view name) {
  for (const auto& base : bases) {
    if (name == base) return true;
    if (name.size() > base.size() && name.starts_with(base)) {
      const std::string_view rest = name.substr(base.size());
      if (rest == "_bucket" || rest == "_sum" || rest == "_count") return true;
    }
  }
  return false;
}

bool listed(const std::vector<std::string>& names, std::string_view name) {
  for (const auto& n : names) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace

bool EngineProfile::keeps(std::string_view name) const {
  for (const auto& p : prefixes) {
    if (name.starts_with(p)) return true;
  }
  return listed(queue, name) || listed(running, name) || listed(kv_usage, name) ||
         listed(preemptions, name) || listed(prefix_queries, name) || listed(prefix_hits, name) ||
         hasSuffixed(ttft, name) || hasSuffixed(itl, name);
}

const EngineProfile& profileOf(EngineKind kind) {
  static const EngineProfile kVllm{
      .queue = {"vllm:num_requests_waiting"},
      .running = {"vllm:num_requests_running"},
      .kv_usage = {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
      .ttft = {"vllm:time_to_first_token_seconds"},
      .itl = {"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"},
      .preemptions = {"vllm:num_preemptions_total"},
      .prefix_queries = {"vllm:prefix_cache_queries_total"},
      .prefix_hits = {"vllm:prefix_cache_hits_total"}};
  static const EngineProfile kSglang{
      .queue = {"sglang:num_queue_reqs"},
      .running = {"sglang:num_running_reqs"},
      .kv_usage = {"sglang:token_usage"},
      .ttft = {"sglang:time_to_first_token_seconds"},
      .itl = {"sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"}};
  static const EngineProfile kTgi{.queue = {"tgi_queue_size"},
                                  .running = {"tgi_batch_current_size"},
                                  .itl = {"tgi_request_mean_time_per_token_duration"}};
  static const EngineProfile kDcgm{.prefixes = {"DCGM_FI_"}};
  switch (kind) {
    case EngineKind::kVllm:
      return kVllm;
    case EngineKind::kSglang:
      return kSglang;
    case EngineKind::kTgi:
      return kTgi;
    case EngineKind::kDcgm:
      return kDcgm;
  }
  return kVllm;
}

namespace {

struct Reader {
  const SeriesStore& store;
  Labels matchers;
  int64_t now_ms;
  int64_t window_ms;
  int64_t max_age_ms;
  int64_t newest_ms = 0;

  // The first listed gauge with a believable value: summed over its series (one per model
  // name, say), or their largest.
  std::optional<double> gauge(const std::vector<std::string>& names, bool take_max) {
    for (const auto& name : names) {
      std::optional<double> out;
      for (const SeriesKey& key : store.select(name, matchers)) {
        auto p = store.latest(key);
        if (!p || std::isnan(p->value) || now_ms - p->t_ms > max_age_ms) continue;
        newest_ms = std::max(newest_ms, p->t_ms);
        out = !out ? p->value : take_max ? std::max(*out, p->value) : *out + p->value;
      }
      if (out) return out;
    }
    return std::nullopt;
  }

  std::optional<double> quantile(const std::vector<std::string>& bases, double q) {
    for (const auto& base : bases) {
      const double v =
          store.histogramQuantileOver(base + "_bucket", matchers, q, now_ms - window_ms, now_ms);
      if (!std::isnan(v) && std::isfinite(v)) return v;
    }
    return std::nullopt;
  }

  // How much the first listed counter grew over the window, summed over its series.
  std::optional<double> increase(const std::vector<std::string>& names) {
    for (const auto& name : names) {
      std::optional<double> out;
      for (const SeriesKey& key : store.select(name, matchers)) {
        auto v = store.increase(key, now_ms - window_ms, now_ms);
        if (v) out = out.value_or(0) + *v;
      }
      if (out) return out;
    }
    return std::nullopt;
  }
};

}  // namespace

Observation observeTarget(const SeriesStore& store, std::string_view target,
                          const EngineProfile& profile, int64_t now_ms, int64_t window_ms,
                          int64_t max_age_ms) {
  Reader r{store, {{"target", std::string(target)}}, now_ms, window_ms, max_age_ms};
  Observation o;
  o.queue = r.gauge(profile.queue, false);
  o.running = r.gauge(profile.running, false);
  o.kv_usage = r.gauge(profile.kv_usage, true);
  o.ttft_p95_s = r.quantile(profile.ttft, 0.95);
  o.itl_p95_s = r.quantile(profile.itl, 0.95);
  if (auto preempted = r.increase(profile.preemptions); preempted && window_ms > 0) {
    o.preemptions_per_s = *preempted / (static_cast<double>(window_ms) / 1000.0);
  }
  auto queries = r.increase(profile.prefix_queries);
  auto hits = r.increase(profile.prefix_hits);
  if (queries && hits && *queries > 0) o.prefix_hit_rate = std::clamp(*hits / *queries, 0.0, 1.0);
  o.newest_ms = r.newest_ms;
  return o;
}

std::string_view targetStateName(TargetState state) {
  switch (state) {
    case TargetState::kUnknown:
      return "unknown";
    case TargetState::kHealthy:
      return "healthy";
    case TargetState::kDegraded:
      return "degraded";
    case TargetState::kSaturated:
      return "saturated";
    case TargetState::kDown:
      return "down";
  }
  return "unknown";
}

namespace {

std::string ms(double seconds) { return fmt::format("{:.0f} ms", seconds * 1000.0); }

}  // namespace

TargetHealthJudgement judgeTarget(const TargetEvidence& e, const ServiceObjectives& slo) {
  // Down first: nothing else matters about a server that does not answer.
  if (e.cooling_down) {
    return {TargetState::kDown,
            fmt::format("{} requests failed in a row; cooling down", e.consecutive_failures)};
  }
  if (!e.gpu_fault.empty()) return {TargetState::kDown, e.gpu_fault};
  if (e.scraped && e.scrape_failures >= kScrapeFailuresForDown) {
    return {TargetState::kDown,
            fmt::format("its metrics did not answer the last {} scrapes", e.scrape_failures)};
  }
  const Observation& o = e.observation;
  const bool observed = e.scraped && e.fresh;
  if (observed) {
    if (o.queue && *o.queue >= slo.saturation_queue) {
      return {TargetState::kSaturated, fmt::format("{:g} requests waiting (saturated at {:g})",
                                                   *o.queue, slo.saturation_queue)};
    }
    if (o.kv_usage && *o.kv_usage >= slo.saturation_kv) {
      return {TargetState::kSaturated, fmt::format("KV cache {:.0f} % full (saturated at {:.0f} %)",
                                                   *o.kv_usage * 100, slo.saturation_kv * 100)};
    }
    const double ttft_slo = std::chrono::duration<double>(slo.ttft_p95).count();
    if (ttft_slo > 0 && o.ttft_p95_s && *o.ttft_p95_s > ttft_slo) {
      return {TargetState::kDegraded,
              fmt::format("time to first token p95 {} over its objective {}", ms(*o.ttft_p95_s),
                          ms(ttft_slo))};
    }
    const double itl_slo = std::chrono::duration<double>(slo.itl_p95).count();
    if (itl_slo > 0 && o.itl_p95_s && *o.itl_p95_s > itl_slo) {
      return {TargetState::kDegraded,
              fmt::format("time between tokens p95 {} over its objective {}", ms(*o.itl_p95_s),
                          ms(itl_slo))};
    }
  }
  // What users feel, whatever the server says: Purser's own measurement of its answers.
  const double ttft_objective = std::chrono::duration<double>(slo.ttft_p95).count();
  if (ttft_objective > 0 && e.measured >= kMinMeasured && e.measured_ttft_p95_s &&
      *e.measured_ttft_p95_s > ttft_objective) {
    return {TargetState::kDegraded,
            fmt::format("time to first token p95 {} over its objective {}, as Purser measured its "
                        "last {} requests",
                        ms(*e.measured_ttft_p95_s), ms(ttft_objective), e.measured)};
  }
  if (e.consecutive_failures > 0) {
    return {TargetState::kDegraded,
            fmt::format("the last {} request(s) to it failed", e.consecutive_failures)};
  }
  if (observed) return {TargetState::kHealthy, "within its objectives"};
  if (e.scraped && e.scrape_failures > 0) {
    return {TargetState::kUnknown, "its last scrape failed"};
  }
  if (e.any_traffic) return {TargetState::kHealthy, "its requests succeed"};
  return {TargetState::kUnknown, e.scraped ? "not scraped yet" : "no traffic and no metrics"};
}

}  // namespace purser::observe
