// LlmSim: a simulated LLM inference server for demos, tests and benchmarks — the upstream the
// gateway is exercised against. OpenAI-compatible (/v1/chat/completions, /v1/completions,
// /v1/embeddings, /v1/models) and Anthropic-compatible (/v1/messages), streaming and not, with
// deterministic text and real `usage`.
//
// Load creates pressure as on a real server: at most `max_running` sequences decode at once and
// each holds KV-cache blocks (16 tokens a block) out of `kv_blocks`; the rest wait in a queue.
// Time to first token is `ttft` plus the wait; tokens then come at `tokens_per_s`. Faults can be
// injected: `fail_rate` answers 500 before any output, `cut_rate` drops the connection midway.
// /metrics uses vLLM's metric names with a model_name label.
//
// Thread-safety: handlers run on any worker; the shared scheduler state is behind a mutex.
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
  std::vector<std::string> models;    // empty: answer to any model name
  std::vector<std::string> api_keys;  // empty: no authentication
  std::chrono::milliseconds ttft{50};
  int64_t tokens_per_s = 200;  // 0: as fast as possible
  double fail_rate = 0;        // 0..1
  double cut_rate = 0;         // 0..1
  int64_t kv_blocks = 4096;    // 16 tokens each
  int64_t max_running = 64;
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
