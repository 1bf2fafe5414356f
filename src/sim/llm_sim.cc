#include "sim/llm_sim.h"

#include <utility>

#include <fmt/format.h>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "common/hash.h"
#include "common/json.h"
#include "common/random.h"
#include "sim/engine_model.h"

namespace purser::sim {

namespace asio = boost::asio;
using http::Method;
using http::Request;
using http::Response;
using nlohmann::json;

namespace {

constexpr std::array<std::string_view, 48> kWords = {
    "the",   "model",   "answers", "with",     "simulated", "tokens", "so",      "that",
    "every", "request", "is",      "metered",  "exactly",   "and",    "budgets", "hold",
    "under", "load",    "while",   "queues",   "fill",      "kv",     "cache",   "blocks",
    "warm",  "up",      "routes",  "fall",     "back",      "across", "targets", "when",
    "one",   "fails",   "a",       "stream",   "relays",    "each",   "chunk",   "as",
    "it",    "arrives", "never",   "buffered", "whole",     "purser", "keeps",   "count"};

constexpr int64_t kBlockTokens = 16;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// vLLM's histogram buckets, so that dashboards and quantiles read the same as a real server's.
std::vector<double> ttftBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itlBuckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> requestBuckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

// The text of OpenAI/Anthropic content: a string, or a list of parts with "text".
std::string contentText(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {
    for (const auto& part : content) {
      if (part.is_object() && part.contains("text") && part["text"].is_string()) {
        out += part["text"].get<std::string>();
        out += ' ';
      }
    }
  }
  return out;
}

}  // namespace

int64_t countTokens(std::string_view text) {
  return std::max<int64_t>(1, ceilDiv(static_cast<int64_t>(text.size()), 4));
}

std::string completionWord(std::string_view prompt, int64_t n) {
  const uint64_t h = fnv1a64(fmt::format("{}#{}", prompt, n));
  return std::string(kWords[h % kWords.size()]);
}

int64_t naturalLength(std::string_view prompt) {
  return 20 + static_cast<int64_t>(fnv1a64(prompt) % 40);
}

class LlmSim::Impl : public std::enable_shared_from_this<LlmSim::Impl> {
 public:
  Impl(LlmSimOptions options, http::MetricsRegistry& metrics, const Clock& clock)
      : options_(std::move(options)),
        clock_(clock),
        served_(options_.models.empty() ? "sim-model" : options_.models.front()),
        engine_(engineOptions(options_)),
        running_(metrics.gaugeFamily("vllm:num_requests_running",
                                     "Number of requests in model execution batches.",
                                     {"model_name"})),
        waiting_(metrics.gaugeFamily("vllm:num_requests_waiting",
                                     "Number of requests waiting to be processed.",
                                     {"model_name"})),
        kv_usage_(metrics.gaugeFamily("vllm:kv_cache_usage_perc",
                                      "KV-cache usage: 1 means 100 percent usage.",
                                      {"model_name"})),
        preemptions_(metrics.counterFamily("vllm:num_preemptions_total",
                                           "Cumulative number of preemptions from the engine.",
                                           {"model_name"})),
        prefix_queries_(metrics.counterFamily(
            "vllm:prefix_cache_queries_total",
            "Prefix-cache queries, in terms of number of queried tokens.", {"model_name"})),
        prefix_hits_(metrics.counterFamily(
            "vllm:prefix_cache_hits_total",
            "Prefix-cache hits, in terms of number of cached tokens.", {"model_name"})),
        ttft_(metrics.histogramFamily("vllm:time_to_first_token_seconds",
                                      "Histogram of time to first token in seconds.",
                                      {"model_name"}, ttftBuckets())),
        e2e_(metrics.histogramFamily("vllm:e2e_request_latency_seconds",
                                     "Histogram of end to end request latency in seconds.",
                                     {"model_name"}, requestBuckets())),
        queue_time_(metrics.histogramFamily("vllm:request_queue_time_seconds",
                                            "Histogram of time spent in WAITING phase for request.",
                                            {"model_name"}, requestBuckets())),
        itl_(metrics.histogramFamily("vllm:inter_token_latency_seconds",
                                     "Histogram of inter-token latency in seconds.", {"model_name"},
                                     itlBuckets())),
        prompt_tokens_(metrics.counterFamily(
            "vllm:prompt_tokens_total", "Number of prefill tokens processed.", {"model_name"})),
        generation_tokens_(metrics.counterFamily("vllm:generation_tokens_total",
                                                 "Number of generation tokens processed.",
                                                 {"model_name"})),
        success_(metrics.counterFamily("vllm:request_success_total",
                                       "Count of successfully processed requests.",
                                       {"model_name"})) {
    std::lock_guard lock(mu_);
    fail_rate_ = options_.fail_rate;
    cut_rate_ = options_.cut_rate;
    publish();  // every series present from the start, at 0
  }

  static EngineOptions engineOptions(const LlmSimOptions& o) {
    return {.kv_cache_tokens = o.kv_cache_tokens,
            .block_tokens = kBlockTokens,
            .max_num_seqs = o.max_num_seqs,
            .max_batched_tokens = o.max_batched_tokens,
            .prefix_caching = o.prefix_caching,
            .decode_step = o.tokens_per_s > 0
                               ? Duration(std::chrono::nanoseconds(1'000'000'000 / o.tokens_per_s))
                               : Duration(0),
            .prefill_step = o.ttft,
            .prefill_tokens_per_s = o.prefill_tokens_per_s,
            .batch_slowdown = o.batch_slowdown};
  }

  // --- request handling ---------------------------------------------------------------------

  enum class Api { kOpenAi, kAnthropic };

  Response error(Api api, int status, std::string_view type, std::string_view message) const {
    json body =
        api == Api::kOpenAi
            ? json{{"error",
                    {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}}
            : json{{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
    return Response::json(status, writeJson(body));
  }

  // A provider's rate limit: 429 with Retry-After, as OpenAI and Anthropic answer it.
  Response rateLimited(Api api) const {
    Response r = error(api, 429, "rate_limit_error", "simulated rate limit: too many requests");
    r.headers.add("Retry-After", "1");
    return r;
  }

  // Checks the provider key and the model; an error response when either is wrong.
  std::optional<Response> check(Api api, const Request& req, const std::string& model) const {
    if (!options_.api_keys.empty()) {
      std::string key;
      if (auto auth = req.headers.get("authorization"); auth && auth->starts_with("Bearer ")) {
        key = std::string(auth->substr(7));
      } else if (auto x = req.headers.get("x-api-key")) {
        key = std::string(*x);
      }
      if (std::find(options_.api_keys.begin(), options_.api_keys.end(), key) ==
          options_.api_keys.end()) {
        return error(api, 401,
                     api == Api::kOpenAi ? "invalid_request_error" : "authentication_error",
                     "Incorrect API key provided.");
      }
    }
    if (model.empty()) {
      return error(api, 400, "invalid_request_error", "you must provide a model parameter");
    }
    if (!options_.models.empty() &&
        std::find(options_.models.begin(), options_.models.end(), model) == options_.models.end()) {
      return error(api, 404, api == Api::kOpenAi ? "invalid_request_error" : "not_found_error",
                   fmt::format("The model `{}` does not exist.", model));
    }
    return std::nullopt;
  }

  // --- faults ---------------------------------------------------------------------------------

  struct Faults {
    double fail_rate = 0;
    double cut_rate = 0;
    double slow_factor = 1;
    bool down = false;
    double rate_limit_rate = 0;
  };

  Faults faults() {
    std::lock_guard lock(mu_);
    return {fail_rate_, cut_rate_, engine_.options().slow_factor, down_, rate_limit_rate_};
  }

  static json faultsJson(const Faults& f) {
    return {{"fail_rate", f.fail_rate},
            {"cut_rate", f.cut_rate},
            {"slow_factor", f.slow_factor},
            {"down", f.down},
            {"rate_limit_rate", f.rate_limit_rate}};
  }

  Response getFaults() { return Response::json(200, writeJson(faultsJson(faults()))); }

  // POST /sim/faults: sets the fields given, leaves the others; all or nothing.
  Response setFaults(const Request& req) {
    json body = parseJsonOrDiscarded(req.body);
    auto bad = [](std::string message) {
      return Response::json(
          400,
          writeJson(json{{"error", {{"message", message}, {"type", "invalid_request_error"}}}}));
    };
    if (!body.is_object()) return bad("the body must be a JSON object");
    Faults f = faults();
    for (const auto& [name, value] : body.items()) {
      if (name == "fail_rate" || name == "cut_rate" || name == "rate_limit_rate") {
        if (!value.is_number() || value.get<double>() < 0 || value.get<double>() > 1) {
          return bad(fmt::format("'{}' must be a number from 0 to 1", name));
        }
        (name == "fail_rate"  ? f.fail_rate
         : name == "cut_rate" ? f.cut_rate
                              : f.rate_limit_rate) = value.get<double>();
      } else if (name == "slow_factor") {
        if (!value.is_number() || !(value.get<double>() > 0) || value.get<double>() > 1000) {
          return bad("'slow_factor' must be a number above 0 and at most 1000");
        }
        f.slow_factor = value.get<double>();
      } else if (name == "down") {
        if (!value.is_boolean()) return bad("'down' must be true or false");
        f.down = value.get<bool>();
      } else {
        return bad(fmt::format(
            "unknown fault '{}'; the faults are fail_rate, cut_rate, rate_limit_rate, slow_factor "
            "and down",
            name));
      }
    }
    {
      std::lock_guard lock(mu_);
      fail_rate_ = f.fail_rate;
      cut_rate_ = f.cut_rate;
      rate_limit_rate_ = f.rate_limit_rate;
      EngineOptions timing = engine_.options();
      timing.slow_factor = f.slow_factor;
      engine_.setTiming(timing);
    }
    setDown(f.down);
    return Response::json(200, writeJson(faultsJson(f)));
  }

  // GET /health, as vLLM answers it: 200 while the engine runs.
  Response health() {
    if (down()) {
      return Response::json(503, writeJson(json{{"error", {{"message", "the engine is dead"}}}}));
    }
    Response r;
    r.status = 200;
    return r;
  }

  bool roll(double rate) {
    if (rate <= 0) return false;
    if (rate >= 1) return true;
    std::lock_guard lock(mu_);
    return static_cast<double>(random_.uniform(1'000'000)) < rate * 1'000'000;
  }

  // One generation: what to say and how it ends.
  struct Generation {
    std::string model;
    std::string prompt;
    int64_t prompt_tokens = 0;
    int64_t tokens = 0;      // to generate
    bool truncated = false;  // stopped by max_tokens
    std::string id;
  };

  Generation plan(std::string model, std::string prompt, std::optional<int64_t> max_tokens,
                  const char* id_prefix) {
    Generation g;
    g.model = std::move(model);
    g.prompt_tokens = countTokens(prompt);
    const int64_t natural = naturalLength(prompt);
    g.tokens = max_tokens ? std::min(std::max<int64_t>(*max_tokens, 0), natural) : natural;
    g.truncated = max_tokens && *max_tokens < natural;
    g.prompt = std::move(prompt);
    g.id = fmt::format("{}{:08x}", id_prefix, next_id_.fetch_add(1));
    return g;
  }

  std::string text(const Generation& g) const {
    std::string out;
    for (int64_t i = 0; i < g.tokens; ++i) {
      if (i > 0) out += ' ';
      out += completionWord(g.prompt, i);
    }
    return out;
  }

  // --- the engine ------------------------------------------------------------------------------

  // One request's view of its sequence: the events the engine loop hands it, in order.
  struct Channel {
    std::mutex mu;
    std::deque<StepEvent> events;  // guarded by mu
    bool closed = false;           // guarded by mu: the engine stopped
    std::function<void()> wake;    // guarded by mu: set while its coroutine waits
    bool tokens = true;            // every token, or only the first and the end
  };

  // The next event of `ch`, or nothing once the engine stopped. A plain initiating function:
  // completes on the waiting coroutine's own executor.
  template <typename Token>
  static auto nextEvent(std::shared_ptr<Channel> ch, Token&& token) {
    return asio::async_initiate<Token, void(std::optional<StepEvent>)>(
        [](auto handler, std::shared_ptr<Channel> ch) {
          auto shared = std::make_shared<decltype(handler)>(std::move(handler));
          auto executor = asio::get_associated_executor(*shared);
          std::unique_lock lock(ch->mu);
          auto deliver = [shared, executor](std::optional<StepEvent> e) {
            asio::post(executor, [shared, e]() mutable { (*shared)(e); });
          };
          if (!ch->events.empty()) {
            const StepEvent e = ch->events.front();
            ch->events.pop_front();
            lock.unlock();
            deliver(e);
          } else if (ch->closed) {
            lock.unlock();
            deliver(std::nullopt);
          } else {
            ch->wake = [ch, deliver] {
              // Called with ch->mu held, once something arrived.
              if (!ch->events.empty()) {
                const StepEvent e = ch->events.front();
                ch->events.pop_front();
                deliver(e);
              } else {
                deliver(std::nullopt);
              }
            };
          }
        },
        token, std::move(ch));
  }

  static void push(Channel& ch, std::optional<StepEvent> e) {
    std::function<void()> wake;
    {
      std::lock_guard lock(ch.mu);
      if (e) {
        ch.events.push_back(*e);
      } else {
        ch.closed = true;
      }
      if (ch.wake) {
        wake = std::move(ch.wake);
        ch.wake = nullptr;
        wake();
      }
    }
  }

  bool instant() const {
    return options_.tokens_per_s == 0 && options_.ttft.count() == 0 &&
           options_.prefill_tokens_per_s <= 0;
  }

  // Publishes the engine's state on /metrics. Called with mu_ held.
  void publish() {
    const EngineStats s = engine_.stats();
    running_.labels({served_}).set(static_cast<double>(s.running));
    waiting_.labels({served_}).set(static_cast<double>(s.waiting));
    kv_usage_.labels({served_}).set(s.kvUsage());
    preemptions_.labels({served_}).inc(s.preemptions - published_.preemptions);
    prefix_queries_.labels({served_}).inc(s.prefix_queries - published_.prefix_queries);
    prefix_hits_.labels({served_}).inc(s.prefix_hits - published_.prefix_hits);
    published_ = s;
  }

  // A sequence in the engine for the life of one request; leaving early aborts it.
  struct Sequence {
    std::shared_ptr<Impl> self;
    SeqId id = 0;
    std::shared_ptr<Channel> channel;
    bool done = false;
    Sequence() = default;
    Sequence(const Sequence&) = delete;
    Sequence& operator=(const Sequence&) = delete;
    ~Sequence() {
      if (self == nullptr || done) return;
      std::lock_guard lock(self->mu_);
      self->engine_.abort(id);
      self->channels_.erase(id);
      self->publish();
    }
  };

  enum class Admission { kQueued, kTooLong, kDown };

  // Queues `g` in the engine. In instant mode the whole generation runs here and then.
  Admission submit(const Generation& g, bool tokens, Sequence& seq,
                   const asio::any_io_executor& executor) {
    SeqSpec spec{.prompt_tokens = g.prompt_tokens,
                 .block_hashes = promptBlockHashes(g.prompt, kBlockTokens * 4),
                 .output_tokens = std::max<int64_t>(1, g.tokens)};
    std::lock_guard lock(mu_);
    if (down_) return Admission::kDown;
    auto id = engine_.add(std::move(spec));
    if (!id) return Admission::kTooLong;
    if (instant()) {
      // Nothing takes time, so every sequence in the engine is run to its end at once.
      while (engine_.hasWork()) engine_.step();
      publish();
      seq.done = true;
      return Admission::kQueued;
    }
    seq.self = shared_from_this();
    seq.id = *id;
    seq.channel = std::make_shared<Channel>();
    seq.channel->tokens = tokens;
    channels_.emplace(*id, seq.channel);
    publish();
    if (!loop_running_) {
      loop_running_ = true;
      asio::co_spawn(executor, runEngine(shared_from_this()), asio::detached);
    }
    return Admission::kQueued;
  }

  // The engine loop: a step, its time, then its events to their requests; ends when idle.
  static asio::awaitable<void> runEngine(std::shared_ptr<Impl> self) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
      StepResult r;
      {
        std::lock_guard lock(self->mu_);
        if (self->down_ || !self->engine_.hasWork()) {
          self->loop_running_ = false;
          co_return;
        }
        r = self->engine_.step();
        self->publish();
      }
      if (r.duration.count() > 0) {
        timer.expires_after(r.duration);
        boost::system::error_code ec;
        co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      } else {
        co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
      }
      std::vector<std::pair<std::shared_ptr<Channel>, StepEvent>> out;
      {
        std::lock_guard lock(self->mu_);
        for (const StepEvent& e : r.events) {
          auto it = self->channels_.find(e.seq);
          if (it == self->channels_.end()) continue;
          if (e.kind == EventKind::kFinished) {
            out.emplace_back(it->second, e);
            self->channels_.erase(it);
          } else if (it->second->tokens || e.kind == EventKind::kScheduled || e.index == 0) {
            out.emplace_back(it->second, e);
          }
        }
      }
      for (auto& [ch, e] : out) push(*ch, e);
    }
  }

  // Every request still waiting is told the engine stopped (at shutdown: a waiting request's
  // coroutine would otherwise be kept alive by the channel that the engine keeps).
  void closeAll() {
    std::vector<std::shared_ptr<Channel>> cut;
    {
      std::lock_guard lock(mu_);
      for (auto& [id, ch] : channels_) {
        engine_.abort(id);
        cut.push_back(ch);
      }
      channels_.clear();
      publish();
    }
    for (auto& ch : cut) push(*ch, std::nullopt);
  }

  // Stops or restarts the engine (the `down` fault): requests in flight are cut.
  void setDown(bool down) {
    {
      std::lock_guard lock(mu_);
      if (down_ == down) return;
      down_ = down;
    }
    if (down) closeAll();
  }

  bool fits(const Generation& g) const {
    return engine_.canEverFit(g.prompt_tokens + std::max<int64_t>(1, g.tokens));
  }

  bool down() {
    std::lock_guard lock(mu_);
    return down_;
  }

  Response tooLong(Api api, const Generation& g) const {
    return error(api, 400, "invalid_request_error",
                 fmt::format("This model's maximum context length is {} tokens. However, you "
                             "requested {} tokens ({} in the messages, {} in the completion).",
                             options_.kv_cache_tokens, g.prompt_tokens + g.tokens, g.prompt_tokens,
                             g.tokens));
  }

  Response engineDead(Api api) const {
    return error(api, 500, api == Api::kOpenAi ? "server_error" : "api_error",
                 "the engine is dead (simulated GPU failure); the server must be restarted");
  }

  // What became of a whole (non-streamed) generation.
  enum class Outcome { kDone, kTooLong, kDown };

  // Runs a whole generation for a non-streamed answer: queue, prompt, decoding.
  asio::awaitable<Outcome> runWhole(const Generation& g) {
    const MonoTime arrived = clock_.monotonic();
    Sequence seq;
    switch (submit(g, /*tokens=*/false, seq, co_await asio::this_coro::executor)) {
      case Admission::kTooLong:
        co_return Outcome::kTooLong;
      case Admission::kDown:
        co_return Outcome::kDown;
      case Admission::kQueued:
        break;
    }
    if (!seq.done) {
      for (;;) {
        auto e = co_await nextEvent(seq.channel, asio::use_awaitable);
        if (!e) co_return Outcome::kDown;
        if (e->kind == EventKind::kScheduled) {
          queue_time_.labels({served_}).observe(seconds(clock_.monotonic() - arrived));
        } else if (e->kind == EventKind::kToken) {
          ttft_.labels({served_}).observe(seconds(clock_.monotonic() - arrived));
        } else {
          seq.done = true;
          break;
        }
      }
    } else {
      queue_time_.labels({served_}).observe(0);
      ttft_.labels({served_}).observe(0);
    }
    finish(g, arrived);
    co_return Outcome::kDone;
  }

  void finish(const Generation& g, MonoTime arrived) {
    prompt_tokens_.labels({served_}).inc(static_cast<uint64_t>(g.prompt_tokens));
    generation_tokens_.labels({served_}).inc(static_cast<uint64_t>(g.tokens));
    success_.labels({served_}).inc();
    e2e_.labels({served_}).observe(seconds(clock_.monotonic() - arrived));
  }

  static double seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
  }

  // Streams a generation: `emit(i, word)` writes token i; `start`/`end` frame it. A cut drops
  // the connection after about half the tokens; so does the engine going down.
  template <typename Start, typename Emit, typename End>
  Response streamed(Api api, Generation g, bool cut, Start start, Emit emit, End end) {
    if (!fits(g)) return tooLong(api, g);
    if (down()) return engineDead(api);
    auto self = shared_from_this();
    Response r;
    r.headers.add("Content-Type", "text/event-stream");
    r.headers.add("Cache-Control", "no-cache");
    r.stream = [self, g = std::move(g), cut, start, emit,
                end](http::BodyWriter& w) -> asio::awaitable<void> {
      const MonoTime arrived = self->clock_.monotonic();
      Sequence seq;
      if (self->submit(g, /*tokens=*/true, seq, co_await asio::this_coro::executor) !=
          Admission::kQueued) {
        throw http::AbortStream();
      }
      MonoTime last = arrived;
      // The engine's tokens as they come (or, in instant mode, all at once).
      for (int64_t i = 0; i < g.tokens;) {
        if (!seq.done) {
          auto e = co_await nextEvent(seq.channel, asio::use_awaitable);
          if (!e) throw http::AbortStream();
          if (e->kind == EventKind::kScheduled) {
            self->queue_time_.labels({self->served_})
                .observe(seconds(self->clock_.monotonic() - arrived));
            continue;
          }
          if (e->kind == EventKind::kFinished) seq.done = true;
          if (e->kind != EventKind::kToken) continue;
        }
        if (cut && i == g.tokens / 2) throw http::AbortStream();
        const MonoTime now = self->clock_.monotonic();
        if (i == 0) {
          if (!co_await w.write(start(g))) co_return;
          self->ttft_.labels({self->served_}).observe(seconds(now - arrived));
        } else {
          self->itl_.labels({self->served_}).observe(seconds(now - last));
        }
        last = now;
        const std::string word = (i > 0 ? " " : "") + completionWord(g.prompt, i);
        if (!co_await w.write(emit(g, word))) co_return;
        ++i;
      }
      if (g.tokens == 0 && !co_await w.write(start(g))) co_return;
      // The engine ran one token for an empty answer; its end is the end here too.
      while (!seq.done) {
        auto e = co_await nextEvent(seq.channel, asio::use_awaitable);
        if (!e) throw http::AbortStream();
        if (e->kind == EventKind::kFinished) seq.done = true;
      }
      if (!co_await w.write(end(g))) co_return;
      self->finish(g, arrived);
    };
    return r;
  }

  // --- OpenAI ---------------------------------------------------------------------------------

  static json usageJson(const Generation& g) {
    return {{"prompt_tokens", g.prompt_tokens},
            {"completion_tokens", g.tokens},
            {"total_tokens", g.prompt_tokens + g.tokens}};
  }

  // Unix seconds, as OpenAI's "created".
  int64_t now() const { return unixMillis(clock_.now()) / 1000; }

  asio::awaitable<Response> openAi(Request& req, bool chat) {
    json body = parseJsonOrDiscarded(req.body);
    if (!body.is_object()) {
      co_return error(Api::kOpenAi, 400, "invalid_request_error", "the body is not a JSON object");
    }
    const std::string model = body.value("model", "");
    if (auto bad = check(Api::kOpenAi, req, model)) co_return std::move(*bad);
    if (down()) co_return engineDead(Api::kOpenAi);
    std::string prompt;
    if (chat) {
      if (!body.contains("messages") || !body["messages"].is_array()) {
        co_return error(Api::kOpenAi, 400, "invalid_request_error", "'messages' is required");
      }
      for (const auto& m : body["messages"]) {
        if (m.is_object() && m.contains("content")) prompt += contentText(m["content"]) + "\n";
      }
    } else {
      if (!body.contains("prompt")) {
        co_return error(Api::kOpenAi, 400, "invalid_request_error", "'prompt' is required");
      }
      prompt = contentText(body["prompt"].is_array() && !body["prompt"].empty() &&
                                   body["prompt"][0].is_string()
                               ? body["prompt"][0]
                               : body["prompt"]);
    }
    std::optional<int64_t> max_tokens;
    for (const char* field : {"max_completion_tokens", "max_tokens"}) {
      if (body.contains(field) && body[field].is_number_integer()) {
        max_tokens = body[field].get<int64_t>();
        break;
      }
    }
    if (roll(faults().rate_limit_rate)) co_return rateLimited(Api::kOpenAi);
    if (roll(faults().fail_rate)) {
      co_return error(Api::kOpenAi, 500, "server_error", "simulated upstream failure");
    }
    const bool cut = roll(faults().cut_rate);
    Generation g = plan(model, prompt, max_tokens, chat ? "chatcmpl-" : "cmpl-");
    // vLLM's ignore_eos: the answer runs to max_tokens (benchmarks use it for a fixed length).
    if (max_tokens && *max_tokens > 0 && body.contains("ignore_eos") &&
        body["ignore_eos"].is_boolean() && body["ignore_eos"].get<bool>()) {
      g.tokens = std::min<int64_t>(*max_tokens, int64_t{1} << 20);
      g.truncated = true;
    }
    const bool stream = body.value("stream", false);
    if (!stream) {
      if (cut) {
        Response r;
        r.abort = true;
        co_return r;
      }
      switch (co_await runWhole(g)) {
        case Outcome::kTooLong:
          co_return tooLong(Api::kOpenAi, g);
        case Outcome::kDown:
          co_return engineDead(Api::kOpenAi);
        case Outcome::kDone:
          break;
      }
      const std::string finish = g.truncated ? "length" : "stop";
      json choice = chat ? json{{"index", 0},
                                {"message", {{"role", "assistant"}, {"content", text(g)}}},
                                {"logprobs", nullptr},
                                {"finish_reason", finish}}
                         : json{{"index", 0},
                                {"text", text(g)},
                                {"logprobs", nullptr},
                                {"finish_reason", finish}};
      co_return Response::json(
          200, writeJson(json{{"id", g.id},
                              {"object", chat ? "chat.completion" : "text_completion"},
                              {"created", now()},
                              {"model", g.model},
                              {"choices", json::array({choice})},
                              {"usage", usageJson(g)}}));
    }
    const bool include_usage = body.contains("stream_options") &&
                               body["stream_options"].is_object() &&
                               body["stream_options"].value("include_usage", false);
    const std::string object = chat ? "chat.completion.chunk" : "text_completion";
    const auto chunk = [this, object, chat](const Generation& gen, json delta_or_text,
                                            json finish) {
      json choice = chat ? json{{"index", 0},
                                {"delta", std::move(delta_or_text)},
                                {"logprobs", nullptr},
                                {"finish_reason", std::move(finish)}}
                         : json{{"index", 0},
                                {"text", std::move(delta_or_text)},
                                {"logprobs", nullptr},
                                {"finish_reason", std::move(finish)}};
      return json{{"id", gen.id},
                  {"object", object},
                  {"created", now()},
                  {"model", gen.model},
                  {"choices", json::array({choice})}};
    };
    co_return streamed(
        Api::kOpenAi, std::move(g), cut,
        [chunk, chat](const Generation& gen) {
          return "data: " +
                 writeJson(chunk(gen,
                                 chat ? json{{"role", "assistant"}, {"content", ""}} : json(""),
                                 nullptr)) +
                 "\n\n";
        },
        [chunk, chat](const Generation& gen, const std::string& word) {
          return "data: " +
                 writeJson(chunk(gen, chat ? json{{"content", word}} : json(word), nullptr)) +
                 "\n\n";
        },
        [this, chunk, chat, include_usage, object](const Generation& gen) {
          std::string out = "data: " +
                            writeJson(chunk(gen, chat ? json::object() : json(""),
                                            gen.truncated ? "length" : "stop")) +
                            "\n\n";
          if (include_usage) {
            out += "data: " +
                   writeJson(json{{"id", gen.id},
                                  {"object", object},
                                  {"created", now()},
                                  {"model", gen.model},
                                  {"choices", json::array()},
                                  {"usage", usageJson(gen)}}) +
                   "\n\n";
          }
          return out + "data: [DONE]\n\n";
        });
  }

  Response embeddings(Request& req) {
    json body = parseJsonOrDiscarded(req.body);
    if (!body.is_object()) {
      return error(Api::kOpenAi, 400, "invalid_request_error", "the body is not a JSON object");
    }
    const std::string model = body.value("model", "");
    if (auto bad = check(Api::kOpenAi, req, model)) return std::move(*bad);
    if (!body.contains("input")) {
      return error(Api::kOpenAi, 400, "invalid_request_error", "'input' is required");
    }
    std::vector<std::string> inputs;
    if (body["input"].is_string()) {
      inputs.push_back(body["input"].get<std::string>());
    } else if (body["input"].is_array()) {
      for (const auto& i : body["input"])
        inputs.push_back(i.is_string() ? i.get<std::string>() : writeJson(i));
    }
    if (roll(faults().rate_limit_rate)) return rateLimited(Api::kOpenAi);
    if (roll(faults().fail_rate)) {
      return error(Api::kOpenAi, 500, "server_error", "simulated upstream failure");
    }
    json data = json::array();
    int64_t tokens = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      tokens += countTokens(inputs[i]);
      json vector = json::array();
      for (int d = 0; d < 8; ++d) {
        vector.push_back(
            static_cast<double>(fnv1a64(fmt::format("{}#{}", inputs[i], d)) % 2000) / 1000.0 - 1.0);
      }
      data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", vector}});
    }
    prompt_tokens_.labels({served_}).inc(static_cast<uint64_t>(tokens));
    success_.labels({served_}).inc();
    return Response::json(
        200, writeJson(json{{"object", "list"},
                            {"data", data},
                            {"model", model},
                            {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}));
  }

  Response models() const {
    json data = json::array();
    const std::vector<std::string> names =
        options_.models.empty() ? std::vector<std::string>{"sim-model"} : options_.models;
    for (const auto& m : names) {
      data.push_back(
          {{"id", m}, {"object", "model"}, {"created", 1767225600}, {"owned_by", "purser-sim"}});
    }
    return Response::json(200, writeJson(json{{"object", "list"}, {"data", data}}));
  }

  // --- Anthropic ------------------------------------------------------------------------------

  static std::string event(std::string_view name, const json& data) {
    return fmt::format("event: {}\ndata: {}\n\n", name, writeJson(data));
  }

  asio::awaitable<Response> messages(Request& req) {
    json body = parseJsonOrDiscarded(req.body);
    if (!body.is_object()) {
      co_return error(Api::kAnthropic, 400, "invalid_request_error",
                      "the body is not a JSON object");
    }
    const std::string model = body.value("model", "");
    if (auto bad = check(Api::kAnthropic, req, model)) co_return std::move(*bad);
    if (down()) co_return engineDead(Api::kAnthropic);
    if (!body.contains("max_tokens") || !body["max_tokens"].is_number_integer()) {
      co_return error(Api::kAnthropic, 400, "invalid_request_error", "max_tokens: Field required");
    }
    if (!body.contains("messages") || !body["messages"].is_array()) {
      co_return error(Api::kAnthropic, 400, "invalid_request_error", "messages: Field required");
    }
    if (body["messages"].empty()) {
      co_return error(Api::kAnthropic, 400, "invalid_request_error",
                      "messages: at least one message is required");
    }
    std::string prompt = body.contains("system") ? contentText(body["system"]) + "\n" : "";
    for (const auto& m : body["messages"]) {
      if (m.is_object() && m.contains("content")) prompt += contentText(m["content"]) + "\n";
    }
    if (roll(faults().rate_limit_rate)) co_return rateLimited(Api::kAnthropic);
    if (roll(faults().fail_rate)) {
      co_return error(Api::kAnthropic, 500, "api_error", "simulated upstream failure");
    }
    const bool cut = roll(faults().cut_rate);
    Generation g = plan(model, prompt, body["max_tokens"].get<int64_t>(), "msg_");
    if (!body.value("stream", false)) {
      if (cut) {
        Response r;
        r.abort = true;
        co_return r;
      }
      switch (co_await runWhole(g)) {
        case Outcome::kTooLong:
          co_return tooLong(Api::kAnthropic, g);
        case Outcome::kDown:
          co_return engineDead(Api::kAnthropic);
        case Outcome::kDone:
          break;
      }
      co_return Response::json(
          200, writeJson(json{
                   {"id", g.id},
                   {"type", "message"},
                   {"role", "assistant"},
                   {"model", g.model},
                   {"content", json::array({{{"type", "text"}, {"text", text(g)}}})},
                   {"stop_reason", g.truncated ? "max_tokens" : "end_turn"},
                   {"stop_sequence", nullptr},
                   {"usage", {{"input_tokens", g.prompt_tokens}, {"output_tokens", g.tokens}}}}));
    }
    co_return streamed(
        Api::kAnthropic, std::move(g), cut,
        [](const Generation& gen) {
          return event(
                     "message_start",
                     {{"type", "message_start"},
                      {"message",
                       {{"id", gen.id},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", gen.model},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", {{"input_tokens", gen.prompt_tokens}, {"output_tokens", 1}}}}}}) +
                 event("content_block_start",
                       {{"type", "content_block_start"},
                        {"index", 0},
                        {"content_block", {{"type", "text"}, {"text", ""}}}}) +
                 event("ping", {{"type", "ping"}});
        },
        [](const Generation&, const std::string& word) {
          return event("content_block_delta",
                       {{"type", "content_block_delta"},
                        {"index", 0},
                        {"delta", {{"type", "text_delta"}, {"text", word}}}});
        },
        [](const Generation& gen) {
          return event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}}) +
                 event("message_delta",
                       {{"type", "message_delta"},
                        {"delta",
                         {{"stop_reason", gen.truncated ? "max_tokens" : "end_turn"},
                          {"stop_sequence", nullptr}}},
                        {"usage", {{"output_tokens", gen.tokens}}}}) +
                 event("message_stop", {{"type", "message_stop"}});
        });
  }

 private:
  LlmSimOptions options_;
  const Clock& clock_;
  const std::string served_;  // the model_name label
  std::mutex mu_;
  SeededRandom random_{options_.seed};                            // guarded by mu_
  EngineModel engine_;                                            // guarded by mu_
  std::unordered_map<SeqId, std::shared_ptr<Channel>> channels_;  // guarded by mu_
  EngineStats published_;                                         // guarded by mu_
  bool loop_running_ = false;                                     // guarded by mu_
  double fail_rate_ = 0;                                          // guarded by mu_
  double cut_rate_ = 0;                                           // guarded by mu_
  double rate_limit_rate_ = 0;                                    // guarded by mu_
  bool down_ = false;                                             // guarded by mu_
  std::atomic<uint64_t> next_id_{1};
  http::Family<http::Gauge>& running_;
  http::Family<http::Gauge>& waiting_;
  http::Family<http::Gauge>& kv_usage_;
  http::Family<http::Counter>& preemptions_;
  http::Family<http::Counter>& prefix_queries_;
  http::Family<http::Counter>& prefix_hits_;
  http::Family<http::Histogram>& ttft_;
  http::Family<http::Histogram>& e2e_;
  http::Family<http::Histogram>& queue_time_;
  http::Family<http::Histogram>& itl_;
  http::Family<http::Counter>& prompt_tokens_;
  http::Family<http::Counter>& generation_tokens_;
  http::Family<http::Counter>& success_;
};

LlmSim::LlmSim(LlmSimOptions options, http::MetricsRegistry& metrics, const Clock& clock)
    : impl_(std::make_shared<Impl>(std::move(options), metrics, clock)) {}
LlmSim::~LlmSim() { impl_->closeAll(); }

Result<void> LlmSim::addRoutes(http::Router& router) {
  auto impl = impl_;
  PURSER_TRY(router.addAsync(Method::kPost, "/v1/chat/completions",
                             [impl](Request& r) { return impl->openAi(r, true); }));
  PURSER_TRY(router.addAsync(Method::kPost, "/v1/completions",
                             [impl](Request& r) { return impl->openAi(r, false); }));
  PURSER_TRY(router.add(Method::kPost, "/v1/embeddings",
                        [impl](Request& r) { return impl->embeddings(r); }));
  PURSER_TRY(router.add(Method::kGet, "/v1/models", [impl](Request&) { return impl->models(); }));
  PURSER_TRY(router.addAsync(Method::kPost, "/v1/messages",
                             [impl](Request& r) { return impl->messages(r); }));
  PURSER_TRY(router.add(Method::kGet, "/health", [impl](Request&) { return impl->health(); }));
  PURSER_TRY(
      router.add(Method::kGet, "/sim/faults", [impl](Request&) { return impl->getFaults(); }));
  PURSER_TRY(
      router.add(Method::kPost, "/sim/faults", [impl](Request& r) { return impl->setFaults(r); }));
  return {};
}

}  // namespace purser::sim
