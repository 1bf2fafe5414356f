// LlmSim: a simulated LLM inference server for demos, tests and benchmarks — the upstream the
// gateway is exercised against. OpenAI-compatible (/v1/chat/completions, /v1/completions,
// /v1/embeddings, /v1/models) and Anthropic-compatible (/v1/messages), streaming and not, with
// deterministic text and real `usage`.
//
// The engine behind it is EngineModel (engine_model.h): continuous batching of at most
// `max_num_seqs` sequences in a paged KV cache of `kv_cache_tokens`, admission by free KV space,
// preemption with recomputation when the cache is full, prefix caching, and steps whose length
// follows the batch — so load shows as queueing, KV pressure, preemptions and a slower time to
// first token, as on a real vLLM server. With `tokens_per_s`, `ttft` and
// `prefill_tokens_per_s` all 0 the engine takes no time: answers are immediate (benchmarks of the
// gateway use this). /metrics uses vLLM's metric names and buckets, labelled with the served
// model's name (the first of `models`, or "sim-model").
//
// Faults: `fail_rate` answers 500 before any output, `cut_rate` drops the connection midway, and
// at run time `POST /sim/faults` sets those two, `rate_limit_rate` (answers 429 with
// `Retry-After: 1` before any output: an outside provider's rate limit), `slow_factor` (every
// engine step takes that many times longer: a throttled GPU) and `down` (the engine stops, like a
// GPU lost to an XID error: requests in flight are cut, new ones get 500, GET /health answers 503).
//
// Thread-safety: handlers run on any worker; the engine and its sequences are behind one mutex,
// and a single engine loop (a coroutine) runs the steps.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "http/metrics.h"
#include "http/router.h"

namespace purser::sim {

struct LlmSimOptions {
  std::vector<std::string> models;     // empty: answer to any model name
  std::vector<std::string> api_keys;   // empty: no authentication
  std::chrono::milliseconds ttft{50};  // added to every step that computes a prompt
  int64_t tokens_per_s = 200;          // a lone sequence's decoding speed; 0: no decoding time
  double prefill_tokens_per_s = 0;     // prompt tokens computed per second; 0: free
  double batch_slowdown = 0.01;        // each further sequence in a step adds this fraction
  double fail_rate = 0;                // 0..1
  double cut_rate = 0;                 // 0..1
  int64_t kv_cache_tokens = 65536;
  int64_t max_num_seqs = 64;
  int64_t max_batched_tokens = 8192;
  bool prefix_caching = true;
  uint64_t seed = 1;
};

// Deterministic generation, shared with tests.
int64_t countTokens(std::string_view text);
// The `n`-th word of the completion for `prompt` (each word is one token).
std::string completionWord(std::string_view prompt, int64_t n);
// How many tokens the completion for `prompt` has when nothing limits it (20..59).
int64_t naturalLength(std::string_view prompt);

class LlmSim {
 public:
  // `clock` stamps the answers ("created") and times the vLLM latency metrics; the simulated
  // waits themselves are Asio's timers.
  LlmSim(LlmSimOptions options, http::MetricsRegistry& metrics,
         const Clock& clock = SystemClock::instance());
  ~LlmSim();
  Result<void> addRoutes(http::Router& router);

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace purser::sim
