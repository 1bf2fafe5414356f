#include "sim/llm_sim.h"

#include <utility>

#include <fmt/format.h>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>

#include "common/hash.h"
#include "common/json.h"
#include "common/random.h"

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
        random_(options_.seed),
        running_(metrics.gaugeFamily("vllm:num_requests_running", "Requests decoding now.",
                                     {"model_name"})),
        waiting_(metrics.gaugeFamily("vllm:num_requests_waiting",
                                     "Requests waiting for a decoding slot.", {"model_name"})),
        kv_usage_(metrics.gaugeFamily("vllm:kv_cache_usage_perc",
                                      "Fraction of KV-cache blocks in use (0 to 1).",
                                      {"model_name"})),
        ttft_(metrics.histogramFamily("vllm:time_to_first_token_seconds",
                                      "Time to the first generated token.", {"model_name"},
                                      http::latencyBuckets())),
        e2e_(metrics.histogramFamily("vllm:e2e_request_latency_seconds",
                                     "Time from arrival to the last token.", {"model_name"},
                                     http::latencyBuckets())),
        itl_(metrics.histogramFamily("vllm:inter_token_latency_seconds",
                                     "Time between generated tokens.", {"model_name"},
                                     http::latencyBuckets())),
        prompt_tokens_(metrics.counterFamily("vllm:prompt_tokens_total", "Prompt tokens processed.",
                                             {"model_name"})),
        generation_tokens_(metrics.counterFamily("vllm:generation_tokens_total",
                                                 "Tokens generated.", {"model_name"})),
        success_(metrics.counterFamily("vllm:request_success_total", "Requests that finished.",
                                       {"model_name"})) {}

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

  bool roll(double rate) {
    if (rate <= 0) return false;
    if (rate >= 1) return true;
    return static_cast<double>(random_.uniform(1'000'000)) < rate * 1'000'000;
  }

  // Waits for a decoding slot and KV blocks; false if the request can never fit.
  asio::awaitable<bool> admit(const std::string& model, int64_t blocks) {
    if (blocks > options_.kv_blocks) co_return false;
    bool queued = false;
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (running_count_ < options_.max_running && kv_used_ + blocks <= options_.kv_blocks) {
          ++running_count_;
          kv_used_ += blocks;
          if (queued) waiting_.labels({model}).sub(1);
          running_.labels({model}).add(1);
          kv_usage_.labels({model}).set(static_cast<double>(kv_used_) /
                                        static_cast<double>(options_.kv_blocks));
          co_return true;
        }
        if (!queued) {
          queued = true;
          waiting_.labels({model}).add(1);
        }
      }
      timer.expires_after(std::chrono::milliseconds(2));
      co_await timer.async_wait(asio::use_awaitable);
    }
  }

  void release(const std::string& model, int64_t blocks) {
    std::lock_guard lock(mu_);
    --running_count_;
    kv_used_ -= blocks;
    running_.labels({model}).sub(1);
    kv_usage_.labels({model}).set(static_cast<double>(kv_used_) /
                                  static_cast<double>(options_.kv_blocks));
  }

  static asio::awaitable<void> sleepFor(std::chrono::nanoseconds d) {
    if (d.count() <= 0) co_return;
    asio::steady_timer timer(co_await asio::this_coro::executor, d);
    co_await timer.async_wait(asio::use_awaitable);
  }

  std::chrono::nanoseconds perToken() const {
    return options_.tokens_per_s > 0
               ? std::chrono::nanoseconds(1'000'000'000 / options_.tokens_per_s)
               : std::chrono::nanoseconds(0);
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
    g.tokens = max_tokens ? std::min(*max_tokens, natural) : natural;
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

  // Runs a whole generation for a non-streamed answer: queue, TTFT, decoding time.
  asio::awaitable<bool> runWhole(const Generation& g) {
    const MonoTime arrived = clock_.monotonic();
    const int64_t blocks = ceilDiv(g.prompt_tokens + g.tokens, kBlockTokens);
    if (!co_await admit(g.model, blocks)) co_return false;
    co_await sleepFor(options_.ttft);
    ttft_.labels({g.model}).observe(seconds(clock_.monotonic() - arrived));
    co_await sleepFor(perToken() * g.tokens);
    release(g.model, blocks);
    finish(g, arrived);
    co_return true;
  }

  void finish(const Generation& g, MonoTime arrived) {
    prompt_tokens_.labels({g.model}).inc(static_cast<uint64_t>(g.prompt_tokens));
    generation_tokens_.labels({g.model}).inc(static_cast<uint64_t>(g.tokens));
    success_.labels({g.model}).inc();
    e2e_.labels({g.model}).observe(seconds(clock_.monotonic() - arrived));
  }

  static double seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
  }

  // Streams a generation: `emit(i, word)` writes token i; `start`/`end` frame it. A cut drops
  // the connection after about half the tokens.
  template <typename Start, typename Emit, typename End>
  Response streamed(Generation g, bool cut, Start start, Emit emit, End end) {
    auto self = shared_from_this();
    Response r;
    r.headers.add("Content-Type", "text/event-stream");
    r.headers.add("Cache-Control", "no-cache");
    r.stream = [self, g = std::move(g), cut, start, emit,
                end](http::BodyWriter& w) -> asio::awaitable<void> {
      const MonoTime arrived = self->clock_.monotonic();
      const int64_t blocks = ceilDiv(g.prompt_tokens + g.tokens, kBlockTokens);
      if (!co_await self->admit(g.model, blocks)) throw http::AbortStream();
      struct Release {
        std::shared_ptr<Impl> self;
        const Generation& g;
        int64_t blocks;
        ~Release() { self->release(g.model, blocks); }
      } release{self, g, blocks};
      co_await sleepFor(self->options_.ttft);
      if (!co_await w.write(start(g))) co_return;
      self->ttft_.labels({g.model}).observe(seconds(self->clock_.monotonic() - arrived));
      MonoTime last = self->clock_.monotonic();
      for (int64_t i = 0; i < g.tokens; ++i) {
        if (cut && i == g.tokens / 2) throw http::AbortStream();
        if (i > 0) co_await sleepFor(self->perToken());
        const std::string word = (i > 0 ? " " : "") + completionWord(g.prompt, i);
        if (!co_await w.write(emit(g, word))) co_return;
        const MonoTime now = self->clock_.monotonic();
        if (i > 0) self->itl_.labels({g.model}).observe(seconds(now - last));
        last = now;
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
    if (roll(options_.fail_rate)) {
      co_return error(Api::kOpenAi, 500, "server_error", "simulated upstream failure");
    }
    const bool cut = roll(options_.cut_rate);
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
      if (!co_await runWhole(g)) {
        co_return error(Api::kOpenAi, 400, "invalid_request_error", "the request is too long");
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
        std::move(g), cut,
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
    if (roll(options_.fail_rate)) {
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
    prompt_tokens_.labels({model}).inc(static_cast<uint64_t>(tokens));
    success_.labels({model}).inc();
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
    if (roll(options_.fail_rate)) {
      co_return error(Api::kAnthropic, 500, "api_error", "simulated upstream failure");
    }
    const bool cut = roll(options_.cut_rate);
    Generation g = plan(model, prompt, body["max_tokens"].get<int64_t>(), "msg_");
    if (!body.value("stream", false)) {
      if (cut) {
        Response r;
        r.abort = true;
        co_return r;
      }
      if (!co_await runWhole(g)) {
        co_return error(Api::kAnthropic, 400, "invalid_request_error", "the request is too long");
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
        std::move(g), cut,
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
  SeededRandom random_;
  std::mutex mu_;
  int64_t running_count_ = 0;  // guarded by mu_
  int64_t kv_used_ = 0;        // guarded by mu_
  std::atomic<uint64_t> next_id_{1};
  http::Family<http::Gauge>& running_;
  http::Family<http::Gauge>& waiting_;
  http::Family<http::Gauge>& kv_usage_;
  http::Family<http::Histogram>& ttft_;
  http::Family<http::Histogram>& e2e_;
  http::Family<http::Histogram>& itl_;
  http::Family<http::Counter>& prompt_tokens_;
  http::Family<http::Counter>& generation_tokens_;
  http::Family<http::Counter>& success_;
};

LlmSim::LlmSim(LlmSimOptions options, http::MetricsRegistry& metrics, const Clock& clock)
    : impl_(std::make_shared<Impl>(std::move(options), metrics, clock)) {}
LlmSim::~LlmSim() = default;

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
  return {};
}

}  // namespace purser::sim
