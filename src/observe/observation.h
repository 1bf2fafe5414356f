// What Purser reads from a model server's metrics, and how it judges the server from them.
//
// Each serving engine names the same few facts differently; an EngineProfile maps them:
//   vllm    vllm:num_requests_waiting / _running, vllm:kv_cache_usage_perc (gpu_cache_usage_perc
//           before v0.10), vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds
//           (time_per_output_token_seconds before), vllm:num_preemptions_total,
//           vllm:prefix_cache_queries_total / _hits_total
//   sglang  sglang:num_queue_reqs / num_running_reqs, sglang:token_usage,
//           sglang:time_to_first_token_seconds, sglang:inter_token_latency_seconds
//           (time_per_output_token_seconds before)
//   tgi     tgi_queue_size, tgi_batch_current_size, tgi_request_mean_time_per_token_duration
//           (TGI exposes no KV usage and no time to first token)
// Only the families a profile names are kept from a scrape (plus DCGM's for GPU exporters), so
// the memory a target costs is known in advance.
//
// judgeTarget() turns an Observation (and what Purser saw of the target's traffic) into one of
// healthy / degraded / saturated / down / unknown with the reason, by the rules of the Gateway
// API Inference Extension's endpoint picker: a server is saturated when its queue reaches 5
// or its KV cache 80 % (both configurable), degraded when it misses the route's objectives for
// time to first token or between tokens, and down when its metrics stop answering, its
// requests keep failing or a GPU it runs on reports an XID error.
//
// Pure: no I/O, time passed in. Thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "observe/series.h"

namespace purser::observe {

enum class EngineKind { kVllm, kSglang, kTgi, kDcgm };

Result<EngineKind> parseEngineKind(std::string_view name);
std::string_view engineKindName(EngineKind kind);

struct EngineProfile {
  std::vector<std::string> queue;  // gauges: the first present is read
  std::vector<std::string> running;
  std::vector<std::string> kv_usage;  // 0..1
  std::vector<std::string> ttft;      // histogram base names (without _bucket)
  std::vector<std::string> itl;
  std::vector<std::string> preemptions;  // counters
  std::vector<std::string> prefix_queries;
  std::vector<std::string> prefix_hits;
  // Families kept from a scrape: the above, and for histograms their _bucket/_sum/_count.
  bool keeps(std::string_view sample_name) const;
  std::vector<std::string> prefixes;  // kDcgm: every family with one of these prefixes
};

const EngineProfile& profileOf(EngineKind kind);

// The latest facts about one target, from its series. Absent values were not reported.
struct Observation {
  std::optional<double> queue;
  std::optional<double> running;
  std::optional<double> kv_usage;
  std::optional<double> ttft_p95_s;  // over the window
  std::optional<double> itl_p95_s;
  std::optional<double> preemptions_per_s;
  std::optional<double> prefix_hit_rate;  // hits / queries over the window, 0..1
  int64_t newest_ms = 0;                  // the newest sample read
};

// Reads target `target`'s series (label target="<target>") as of `now_ms`; percentiles and
// rates over [now_ms - window_ms, now_ms]. A gauge is read only when its newest sample is
// younger than `max_age_ms` (older ones are stale and not believed).
Observation observeTarget(const SeriesStore& store, std::string_view target,
                          const EngineProfile& profile, int64_t now_ms, int64_t window_ms,
                          int64_t max_age_ms);

enum class TargetState { kUnknown, kHealthy, kDegraded, kSaturated, kDown };
std::string_view targetStateName(TargetState state);

// A route's service-level objectives (0: none) and when a server counts as saturated.
struct ServiceObjectives {
  Duration ttft_p95{0};
  Duration itl_p95{0};
  double saturation_queue = 5;
  double saturation_kv = 0.8;
};

struct TargetEvidence {
  bool scraped = false;  // the target has a metrics endpoint
  // Consecutive failed scrapes, and whether a successful one is recent enough to believe.
  int scrape_failures = 0;
  bool fresh = false;
  Observation observation;
  // Purser's own view of the target's traffic.
  bool cooling_down = false;
  // A GPU it runs on reported a fatal error (an XID), in words; empty when none.
  std::string gpu_fault;
  int consecutive_failures = 0;
  bool any_traffic = false;
  // Time to first byte p95 of its recent successful requests as Purser measured them (over the
  // window), and how many there were; judged only from kMinMeasured requests on.
  std::optional<double> measured_ttft_p95_s;
  size_t measured = 0;
};

// The fewest requests Purser's own time-to-first-token p95 is judged from.
inline constexpr size_t kMinMeasured = 20;

struct TargetHealthJudgement {
  TargetState state = TargetState::kUnknown;
  std::string reason;
};

// Scrapes failing this many times in a row make a target down.
inline constexpr int kScrapeFailuresForDown = 2;

TargetHealthJudgement judgeTarget(const TargetEvidence& evidence,
                                  const ServiceObjectives& objectives);

}  // namespace purser::observe
