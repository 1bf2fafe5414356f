#include "gateway/gateway.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <optional>

#include "common/json.h"
#include "gateway/async_meter.h"
#include "gateway/sse.h"
#include "gateway/translate.h"
#include "http/metrics.h"
#include "identity/payer.h"
#include "ledger/budget.h"

namespace purser::gateway {

namespace asio = boost::asio;
using http::Method;
using http::Request;
using http::Response;
using nlohmann::json;
using SteadyTime = MonoTime;

namespace {

enum class Api { kOpenAi, kAnthropic };
enum class Surface { kChat, kCompletions, kEmbeddings, kMessages };

Api apiOf(Surface s) { return s == Surface::kMessages ? Api::kAnthropic : Api::kOpenAi; }

// --- Errors in each API's own shape -----------------------------------------------------------

// What went wrong, independent of the API that reports it.
enum class Fault {
  kBadRequest,
  kUnauthenticated,
  kForbidden,
  kNotFound,
  kTooLarge,
  kRateLimited,
  kBudget,
  kUpstream,
  kTimeout,
  kInternal,
};

int statusOf(Fault f) {
  switch (f) {
    case Fault::kBadRequest:
      return 400;
    case Fault::kUnauthenticated:
      return 401;
    case Fault::kForbidden:
      return 403;
    case Fault::kNotFound:
      return 404;
    case Fault::kTooLarge:
      return 413;
    case Fault::kRateLimited:
    case Fault::kBudget:
      return 429;
    case Fault::kUpstream:
      return 502;
    case Fault::kTimeout:
      return 504;
    case Fault::kInternal:
      return 500;
  }
  return 500;
}

Response apiError(Api api, Fault fault, std::string_view message, std::string_view param = {},
                  std::string_view code = {}) {
  const int status = statusOf(fault);
  json body;
  if (api == Api::kOpenAi) {
    std::string type = "invalid_request_error";
    if (fault == Fault::kBudget) type = "insufficient_quota";
    if (fault == Fault::kRateLimited) type = "rate_limit_exceeded";
    if (fault == Fault::kUpstream || fault == Fault::kTimeout || fault == Fault::kInternal) {
      type = "server_error";
    }
    body = {{"error",
             {{"message", message},
              {"type", type},
              {"param", param.empty() ? json(nullptr) : json(param)},
              {"code", code.empty() ? json(nullptr) : json(code)}}}};
  } else {
    std::string type = "invalid_request_error";
    switch (fault) {
      case Fault::kUnauthenticated:
        type = "authentication_error";
        break;
      case Fault::kForbidden:
        type = "permission_error";
        break;
      case Fault::kNotFound:
        type = "not_found_error";
        break;
      case Fault::kTooLarge:
        type = "request_too_large";
        break;
      case Fault::kRateLimited:
      case Fault::kBudget:
        type = "rate_limit_error";
        break;
      case Fault::kUpstream:
      case Fault::kInternal:
        type = "api_error";
        break;
      case Fault::kTimeout:
        type = "timeout_error";
        break;
      case Fault::kBadRequest:
        break;
    }
    body = {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
  }
  Response r = Response::json(status, writeJson(body));
  if (fault == Fault::kBudget) r.headers.add("x-should-retry", "false");
  return r;
}

ProviderKind kindOf(Api api) {
  return api == Api::kAnthropic ? ProviderKind::kAnthropic : ProviderKind::kOpenAi;
}

// An upstream's refusal in the client's API's error shape (the status is kept); `parsed` is its
// answer as JSON, or discarded when it was not JSON.
Response translatedError(Api api, int status, const json& parsed) {
  std::string message = "The upstream model refused the request.";
  std::string type = "invalid_request_error";
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object()) {
    const json& err = parsed["error"];
    if (err.contains("message") && err["message"].is_string()) message = err["message"];
  }
  if (status == 401) type = "authentication_error";
  if (status == 403) type = "permission_error";
  if (status == 404) type = "not_found_error";
  if (status >= 500) type = api == Api::kOpenAi ? "server_error" : "api_error";
  json body;
  if (api == Api::kOpenAi) {
    body = {
        {"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}};
  } else {
    body = {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
  }
  return Response::json(status, writeJson(body));
}

// --- Usage in each API's terms -----------------------------------------------------------------

// The most tokens one count may say: far above any real request, far below what could
// overflow a cost.
constexpr int64_t kMaxTokenCount = int64_t{1} << 40;

// A token count at `path`: 0 when absent (or null), nullopt when present but not a whole number
// from 0 to kMaxTokenCount (negative, fractional, a string, an overflowing number).
std::optional<int64_t> countAt(const json& obj, std::initializer_list<const char*> path) {
  const json* v = &obj;
  for (const char* key : path) {
    if (!v->is_object()) return 0;
    auto it = v->find(key);
    if (it == v->end()) return 0;
    v = &*it;
  }
  if (v->is_null()) return 0;
  if (v->is_number_unsigned()) {
    const uint64_t n = v->get<uint64_t>();
    if (n > static_cast<uint64_t>(kMaxTokenCount)) return std::nullopt;
    return static_cast<int64_t>(n);
  }
  if (!v->is_number_integer()) return std::nullopt;
  const int64_t n = v->get<int64_t>();
  if (n < 0 || n > kMaxTokenCount) return std::nullopt;
  return n;
}

// Usage as the upstream reported it, in Purser's terms; nullopt when a count is not believable,
// which is treated as missing usage (estimated and flagged, never recorded as zero).
// OpenAI counts cached input inside prompt_tokens and reasoning inside completion_tokens;
// Purser's kinds are disjoint.
std::optional<ledger::TokenCounts> openAiUsage(const json& usage) {
  const auto cached = countAt(usage, {"prompt_tokens_details", "cached_tokens"});
  const auto reasoning = countAt(usage, {"completion_tokens_details", "reasoning_tokens"});
  const auto prompt = countAt(usage, {"prompt_tokens"});
  const auto completion = countAt(usage, {"completion_tokens"});
  if (!cached || !reasoning || !prompt || !completion) return std::nullopt;
  ledger::TokenCounts t;
  t.input = std::max<int64_t>(0, *prompt - *cached);
  t.cached_input = std::min(*cached, *prompt);
  t.output = std::max<int64_t>(0, *completion - *reasoning);
  t.reasoning = std::min(*reasoning, *completion);
  return t;
}

std::optional<ledger::TokenCounts> anthropicUsage(const json& usage) {
  const auto input = countAt(usage, {"input_tokens"});
  const auto cached = countAt(usage, {"cache_read_input_tokens"});
  const auto write = countAt(usage, {"cache_creation_input_tokens"});
  const auto output = countAt(usage, {"output_tokens"});
  if (!input || !cached || !write || !output) return std::nullopt;
  return ledger::TokenCounts{
      .input = *input, .output = *output, .cached_input = *cached, .cache_write = *write};
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The longest session id kept with a request's usage.
constexpr size_t kMaxSessionBytes = 256;

// Bodies at least this large are parsed and written on the CPU pool, not on an I/O worker.
constexpr size_t kOffloadBytes = 64 * 1024;

// The most of an upstream's error answer read before it is relayed.
constexpr size_t kMaxErrorBody = 64 * 1024;

// Puts the alias where an answer names the upstream model ("model": "<upstream>"): clients see
// the name they asked for, never what serves it. A byte-level rewrite, no parse: inside a JSON
// string every quote is escaped, so the sequence can only be a key and its value.
void hideUpstreamModel(std::string& text, const std::string& upstream, const std::string& alias) {
  if (upstream == alias) return;
  const std::string from = writeJson(Json(upstream)), to = writeJson(Json(alias));
  for (const char* key : {"\"model\":", "\"model\": "}) {
    const std::string needle = key + from;
    const std::string replacement = key + to;
    for (size_t at = text.find(needle); at != std::string::npos;
         at = text.find(needle, at + replacement.size())) {
      text.replace(at, needle.size(), replacement);
    }
  }
}

// Runs `work` on `pool`; completes on the caller's executor, with the exception `work` threw.
// A plain initiating function, not a coroutine (see async_meter.h).
template <typename Token>
auto runOn(asio::thread_pool& pool, const std::function<void()>& work, Token&& token) {
  return asio::async_initiate<Token, void(std::exception_ptr)>(
      [&pool](auto handler, const std::function<void()>* work) {
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        asio::post(pool, [shared, work] {
          std::exception_ptr error;
          try {
            (*work)();
          } catch (...) {
            error = std::current_exception();
          }
          auto executor = asio::get_associated_executor(*shared);
          asio::post(executor, [shared, error]() mutable { (*shared)(error); });
        });
      },
      token, &work);
}

std::string upstreamPath(Surface s) {
  switch (s) {
    case Surface::kChat:
      return "/chat/completions";
    case Surface::kCompletions:
      return "/completions";
    case Surface::kEmbeddings:
      return "/embeddings";
    case Surface::kMessages:
      return "/v1/messages";
  }
  return "/";
}

// Worth another try elsewhere: overloaded or failing upstreams, and upstreams that refuse the
// provider's own key (the client's request is not at fault; another target may serve it).
bool retryable(int status) {
  return status == 429 || status >= 500 || status == 401 || status == 403;
}

// The Retry-After of an upstream answer, capped; zero when absent.
std::chrono::milliseconds retryAfter(const http::Headers& h) {
  auto v = h.get("retry-after");
  if (!v) return std::chrono::milliseconds(0);
  char* end = nullptr;
  const double secs = std::strtod(std::string(*v).c_str(), &end);
  if (secs <= 0) return std::chrono::milliseconds(0);
  return std::min(std::chrono::milliseconds(static_cast<int64_t>(secs * 1000)),
                  std::chrono::milliseconds(5000));
}

asio::awaitable<void> sleepFor(std::chrono::milliseconds d) {
  if (d.count() <= 0) co_return;
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(asio::use_awaitable);
}

int64_t micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

}  // namespace

// --- The gateway ---------------------------------------------------------------------------

// The gateway's own metrics (names as docs/operations.md lists them).
struct GatewayMetrics {
  explicit GatewayMetrics(http::MetricsRegistry& m)
      : requests(&m.counterFamily("purser_gateway_requests_total",
                                  "Model API requests by route, the target that served them (\"\" "
                                  "when none did) and status code.",
                                  {"route", "target", "code"})),
        upstream_errors(&m.counterFamily(
            "purser_gateway_upstream_errors_total",
            "Failed tries of an upstream, by target and kind: 5xx, 4xx, 429, connect, timeout.",
            {"target", "kind"})),
        ttft(&m.histogramFamily("purser_gateway_ttft_seconds",
                                "Time to the first byte of an answer (the whole answer when not "
                                "streamed), by route and target.",
                                {"route", "target"}, http::latencyBuckets())),
        upstream_latency(&m.histogramFamily(
            "purser_gateway_upstream_latency_seconds",
            "Time an upstream took for one try, to its last byte, by route and target.",
            {"route", "target"}, http::latencyBuckets())),
        tokens(&m.counterFamily("purser_gateway_tokens_total",
                                "Tokens metered, by route, target and kind (input, output, "
                                "cached_input, cache_write, reasoning).",
                                {"route", "target", "kind"})),
        cost(&m.counterFamily("purser_gateway_cost_nanos_total",
                              "Cost charged, in nano-units (1e-9) of the currency, by route and "
                              "target.",
                              {"route", "target"})) {}
  http::Family<http::Counter>* requests;
  http::Family<http::Counter>* upstream_errors;
  http::Family<http::Histogram>* ttft;
  http::Family<http::Histogram>* upstream_latency;
  http::Family<http::Counter>* tokens;
  http::Family<http::Counter>* cost;
};

class Gateway::Impl : public std::enable_shared_from_this<Gateway::Impl> {
 public:
  Impl(GatewayDeps deps, std::vector<std::unique_ptr<Provider>> providers,
       std::vector<std::unique_ptr<Route>> routes)
      : d_(deps),
        providers_(std::move(providers)),
        cpu_(std::make_unique<asio::thread_pool>(std::max<size_t>(1, deps.cpu_threads))) {
    if (deps.metrics != nullptr) metrics_.emplace(*deps.metrics);
    for (auto& r : routes) {
      const std::string alias = r->alias;
      routes_.emplace(alias, std::move(r));
    }
  }

  Provider* provider(const std::string& name) {
    for (auto& p : providers_) {
      if (p->name() == name) return p.get();
    }
    return nullptr;
  }
  std::vector<Provider*> providers() {
    std::vector<Provider*> out;
    for (auto& p : providers_) out.push_back(p.get());
    return out;
  }
  const Route* route(const std::string& alias) const {
    auto it = routes_.find(alias);
    return it == routes_.end() ? nullptr : it->second.get();
  }
  std::vector<const Route*> routes() const {
    std::vector<const Route*> out;
    for (const auto& [alias, r] : routes_) out.push_back(r.get());
    std::sort(out.begin(), out.end(),
              [](const Route* a, const Route* b) { return a->alias < b->alias; });
    return out;
  }

  // Everything decided before a request goes upstream.
  struct Call {
    Surface surface;
    Api api;
    identity::Principal who;
    identity::ApiKey key;
    Route* route = nullptr;
    json body;
    bool stream = false;
    bool client_wants_usage = false;  // OpenAI stream_options.include_usage as the client sent it
    int64_t input_estimate = 0;
    int64_t max_output = 0;
    ledger::Hold hold;  // the reservation; released if the call ends without a settlement
    ledger::UsageEvent event;
    Money reserved;
    SteadyTime started;
    std::chrono::steady_clock::duration upstream_time{0};
    std::chrono::steady_clock::duration commit_time{0};  // waiting for durable ledger commits
    std::string anthropic_version;
    std::string anthropic_beta;
    std::string session_id;
    size_t max_nesting = kDefaultMaxNesting;
    size_t body_bytes = 0;                // of the client's request
    const Target* last_target = nullptr;  // the upstream tried last
    bool counted = false;                 // in purser_gateway_requests_total
  };

  std::optional<std::string> presentedKey(const Request& req) const {
    if (auto auth = req.headers.get("authorization")) {
      std::string_view v = *auth;
      if (v.size() > 7 && http::equalsIgnoreCase(v.substr(0, 7), "bearer ")) {
        return std::string(v.substr(7));
      }
    }
    if (auto key = req.headers.get("x-api-key")) return std::string(*key);
    return std::nullopt;
  }

  // Who is asking. A response when the request stops here.
  std::optional<Response> identify(Call& c, Request& req) {
    const Api api = c.api;
    auto presented = presentedKey(req);
    if (!presented) {
      return apiError(api, Fault::kUnauthenticated,
                      "You didn't provide an API key. Send it as \"Authorization: Bearer KEY\".",
                      {}, "missing_api_key");
    }
    auto who = d_.directory.authenticate(*presented);
    if (!who) {
      return apiError(api, Fault::kUnauthenticated,
                      who.error().message == "invalid API key"
                          ? "Incorrect API key provided."
                          : "Your API key is not valid: " + who.error().message + ".",
                      {}, "invalid_api_key");
    }
    c.who = *who;
    auto key = d_.directory.key(c.who.key_id);
    if (!key) return apiError(api, Fault::kUnauthenticated, "Incorrect API key provided.");
    c.key = *key;
    return std::nullopt;
  }

  // Parsing, routing and permission. A response when the request stops here.
  std::optional<Response> admit(Call& c, Request& req, Result<json> parsed) {
    const Api api = c.api;
    if (!parsed) {
      return apiError(api, Fault::kBadRequest,
                      fmt::format("We could not parse the JSON body of your request: {}.",
                                  parsed.error().message));
    }
    c.body = std::move(*parsed);
    if (!c.body.is_object()) {
      return apiError(api, Fault::kBadRequest, "The request body must be a JSON object.");
    }
    // The session a request belongs to (agents' runs, conversations): from the header, else the
    // body's metadata. It is stored with the usage and shown back, so it must be text.
    if (auto v = req.headers.get("x-purser-session")) {
      c.session_id = std::string(*v);
    } else if (c.body.contains("metadata") && c.body["metadata"].is_object() &&
               c.body["metadata"].contains("session_id") &&
               c.body["metadata"]["session_id"].is_string()) {
      c.session_id = c.body["metadata"]["session_id"].get<std::string>();
    }
    if (c.session_id.size() > kMaxSessionBytes || !isValidUtf8(c.session_id) ||
        std::any_of(c.session_id.begin(), c.session_id.end(),
                    [](char ch) { return static_cast<unsigned char>(ch) < 0x20; })) {
      return apiError(api, Fault::kBadRequest,
                      fmt::format("The session id (x-purser-session or metadata.session_id) must "
                                  "be UTF-8 text without control characters, at most {} bytes.",
                                  kMaxSessionBytes),
                      "session_id");
    }
    if (!c.body.contains("model") || !c.body["model"].is_string() ||
        c.body["model"].get<std::string>().empty()) {
      return apiError(api, Fault::kBadRequest, "you must provide a model parameter", "model");
    }
    const std::string model = c.body["model"].get<std::string>();
    const char* required = c.surface == Surface::kCompletions  ? "prompt"
                           : c.surface == Surface::kEmbeddings ? "input"
                                                               : "messages";
    if (!c.body.contains(required) ||
        (std::string_view(required) == "messages" && !c.body[required].is_array())) {
      return apiError(api, Fault::kBadRequest, fmt::format("'{}' is a required property", required),
                      required);
    }
    auto it = routes_.find(model);
    if (it == routes_.end()) {
      return apiError(
          api, Fault::kNotFound,
          fmt::format("The model `{}` does not exist or you do not have access to it.", model),
          "model", "model_not_found");
    }
    c.route = it->second.get();
    if (!allowed(c.key, c.who, *c.route)) {
      return apiError(api, Fault::kForbidden,
                      fmt::format("This key may not use the model `{}`.", model), "model",
                      "model_not_allowed");
    }
    if (c.body.contains("stream") && !c.body["stream"].is_boolean()) {
      return apiError(api, Fault::kBadRequest, "'stream' must be a boolean", "stream");
    }
    for (const char* f : {"max_completion_tokens", "max_tokens"}) {
      if (c.body.contains(f) && !c.body[f].is_null() && !(jsonInt(c.body[f]).value_or(0) >= 1)) {
        return apiError(api, Fault::kBadRequest, fmt::format("'{}' must be an integer >= 1", f), f);
      }
    }
    c.stream = c.body.value("stream", false) && c.surface != Surface::kEmbeddings;
    if (c.stream && api == Api::kOpenAi && c.body.contains("stream_options") &&
        c.body["stream_options"].is_object()) {
      const json& options = c.body["stream_options"];
      c.client_wants_usage = options.contains("include_usage") &&
                             options["include_usage"].is_boolean() &&
                             options["include_usage"].get<bool>();
    }
    // The worst case: the input (an upper bound from the size of the whole body, which also
    // counts tools and system prompts, without writing it out again) plus the output cap.
    c.input_estimate = ceilDiv(static_cast<int64_t>(req.body.size()), 3);
    if (c.surface == Surface::kEmbeddings) {
      c.max_output = 0;
    } else {
      // The route's max_tokens caps the output and fills it in when the request sets none, so
      // the upstream can never produce more than was reserved.
      c.max_output = c.route->max_tokens;
      // When the request sets none: chat's current name (OpenAI's reasoning models refuse
      // max_tokens); completions and messages know only max_tokens.
      const char* field = c.surface == Surface::kChat ? "max_completion_tokens" : "max_tokens";
      for (const char* f : {"max_completion_tokens", "max_tokens"}) {
        if (c.body.contains(f) && jsonInt(c.body[f])) {
          field = f;
          c.max_output = std::clamp<int64_t>(*jsonInt(c.body[f]), int64_t{0}, c.route->max_tokens);
          break;
        }
      }
      c.body[field] = c.max_output;
    }
    if (auto v = req.headers.get("anthropic-version")) c.anthropic_version = std::string(*v);
    if (auto v = req.headers.get("anthropic-beta")) c.anthropic_beta = std::string(*v);
    return std::nullopt;
  }

  static bool allowed(const identity::ApiKey& key, const identity::Principal& who,
                      const Route& route) {
    if (!key.models.empty() &&
        std::find(key.models.begin(), key.models.end(), route.alias) == key.models.end()) {
      return false;
    }
    return allowsTenant(route, who.tenant_id) && allowsTeam(route, who.team_id);
  }

  // Rate limits and the reservation (ledger::Budget). A response when the request stops here.
  std::optional<Response> reserve(Call& c) {
    // The worst case over every target the route may fall back to.
    Money worst;
    for (const Target* t : allTargets(*c.route)) {
      if (t->price == nullptr) continue;
      auto cost = ledger::tokenCost(*t->price, {.input = c.input_estimate, .output = c.max_output},
                                    Rounding::kCeil);
      if (cost && *cost > worst) worst = *cost;
    }
    c.reserved = worst;
    ledger::UsageEvent& e = c.event;
    e.id = d_.ids.next();
    e.tenant_id = c.who.tenant_id;
    e.team_id = c.who.team_id;
    (c.who.kind == identity::OwnerKind::kUser ? e.user_id : e.service_account_id) = c.who.id;
    e.key_id = c.key.id;
    e.route = c.route->alias;
    e.session_id = c.session_id;
    // The intent is in the journal when this returns; nothing waits for a sync here (the
    // response, which comes later, is what waits when ledger.sync is "always").
    ledger::RateDecision rate;
    auto held = budget_.hold({.payer = identity::payerOf(c.who, d_.directory),
                              .model = c.route->alias,
                              .draft = e,
                              .amount = worst,
                              .tokens = c.input_estimate + c.max_output,
                              .lease = std::chrono::minutes(15),
                              .options = {.fresh_id = true}},
                             &rate);
    if (held) {
      c.hold = std::move(*held);
      return std::nullopt;
    }
    if (!rate.allowed) return rateLimited(c, rate);
    if (held.error().code == ErrorCode::kResourceExhausted) {
      return apiError(c.api, Fault::kBudget,
                      "You exceeded your budget: " + held.error().message + ".", {},
                      "budget_exceeded");
    }
    return apiError(c.api, Fault::kUpstream, "The ledger is unavailable; try again.");
  }

  Response rateLimited(const Call& c, const ledger::RateDecision& rate) const {
    Response r = apiError(
        c.api, Fault::kRateLimited,
        rate.never
            ? fmt::format("This request needs more than the whole limit of {} per minute ({}).",
                          rate.limit, rate.key)
            : fmt::format("Rate limit reached for {} ({} per minute). Please try again in {}ms.",
                          rate.key, rate.limit,
                          std::chrono::ceil<std::chrono::milliseconds>(rate.retry_after).count()),
        {}, "rate_limit_exceeded");
    const bool tokens_bucket = rate.key.ends_with(":tpm");
    const auto secs =
        std::max<int64_t>(1, std::chrono::ceil<std::chrono::seconds>(rate.retry_after).count());
    if (!rate.never) r.headers.add("retry-after", std::to_string(secs));
    const std::string kind = tokens_bucket ? "tokens" : "requests";
    r.headers.add("x-ratelimit-limit-" + kind, std::to_string(rate.limit));
    r.headers.add("x-ratelimit-remaining-" + kind,
                  std::to_string(std::max<int64_t>(0, rate.remaining)));
    r.headers.add("x-ratelimit-reset-" + kind, fmt::format("{}s", secs));
    return r;
  }

  // Settles the event durably; logs (never fails the client) if the ledger cannot.
  asio::awaitable<void> settle(Call& c, ledger::TokenCounts tokens, bool estimated, int status,
                               const Target* target, std::chrono::steady_clock::duration ttft) {
    ledger::UsageEvent& e = c.event;
    e.at = d_.clock.now();
    e.tokens = tokens;
    e.estimated = estimated;
    e.status = status;
    e.provider = target != nullptr ? target->provider->name() : "";
    e.model = target != nullptr ? target->model : "";
    e.latency_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(d_.clock.monotonic() - c.started)
            .count();
    e.ttft_ms = std::chrono::duration_cast<std::chrono::milliseconds>(ttft).count();
    e.cost = Money();
    if (target != nullptr && target->price != nullptr) {
      auto cost = ledger::tokenCost(*target->price, tokens, Rounding::kHalfEven);
      if (cost) e.cost = *cost;
    }
    countRequest(c, target, status);
    if (metrics_ && target != nullptr) {
      const std::vector<std::string> where = {c.route->alias, target->provider->name()};
      metrics_->ttft->labels(where).observe(std::chrono::duration<double>(ttft).count());
      for (const auto& [kind, n] : {std::pair{"input", tokens.input},
                                    {"output", tokens.output},
                                    {"cached_input", tokens.cached_input},
                                    {"cache_write", tokens.cache_write},
                                    {"reasoning", tokens.reasoning}}) {
        if (n > 0) {
          metrics_->tokens->labels({where[0], where[1], kind}).inc(static_cast<uint64_t>(n));
        }
      }
    }
    // Tokens-per-minute limits took the estimate; the hold reconciles them with what was used.
    auto settled = c.hold.settle(e);
    if (settled && !settled->duplicate && d_.meter.syncsEachRecord()) {
      const auto asked = d_.clock.monotonic();
      if (!co_await asyncDurable(d_.meter, settled->journal_sequence, asio::use_awaitable)) {
        spdlog::error("gateway: the usage of {} may not be on disk", e.id);
      }
      c.commit_time += d_.clock.monotonic() - asked;
    }
    if (settled && metrics_ && target != nullptr && !settled->duplicate) {
      metrics_->cost->labels({c.route->alias, target->provider->name()})
          .inc(static_cast<uint64_t>(std::max<int64_t>(0, settled->charged.nanos())));
    }
    if (!settled) {
      spdlog::error("gateway: settling {} failed: {}", e.id, settled.error().message);
    } else if (!settled->alerts.empty() && d_.on_alerts) {
      d_.on_alerts(co_await asio::this_coro::executor, settled->alerts, e.tenant_id);
    }
  }

  void countRequest(Call& c, const Target* t, int status) {
    c.counted = true;
    if (!metrics_) return;
    metrics_->requests
        ->labels({c.route != nullptr ? c.route->alias : std::string(),
                  t != nullptr ? t->provider->name() : std::string(), std::to_string(status)})
        .inc();
  }

  // An upstream that failed a try: `kind` is 5xx, 4xx, 429, connect or timeout.
  void upstreamError(const Target& t, std::string_view kind) {
    if (metrics_) metrics_->upstream_errors->labels({t.provider->name(), std::string(kind)}).inc();
  }
  static const char* errorKind(int status) {
    return status == 429 ? "429" : status >= 500 ? "5xx" : "4xx";
  }
  static const char* errorKind(const Error& e) {
    return e.code == ErrorCode::kDeadlineExceeded    ? "timeout"
           : e.code == ErrorCode::kResourceExhausted ? "5xx"
                                                     : "connect";
  }
  void observeUpstream(const Call& c, const Target& t, std::chrono::steady_clock::duration d) {
    if (metrics_) {
      metrics_->upstream_latency->labels({c.route->alias, t.provider->name()})
          .observe(std::chrono::duration<double>(d).count());
    }
  }

  // Runs `work` here when `bytes` is small, else on the gateway's CPU pool, resuming on this
  // worker once it is done: one client's megabytes (parsing, re-writing) never hold up the I/O
  // worker other clients' requests share. Exceptions from `work` are rethrown here.
  asio::awaitable<void> offload(size_t bytes, const std::function<void()>& work) {
    if (bytes < kOffloadBytes || !cpu_) {
      work();
      co_return;
    }
    co_await runOn(*cpu_, work, asio::use_awaitable);
  }

  // The upstream request for `t` (see upstreamRequest), built off the worker for large bodies.
  asio::awaitable<Result<http::ClientRequest>> buildUpstream(const Call& c, const Target& t) {
    Result<http::ClientRequest> out = fail(internalError("not built"));
    const std::function<void()> build = [&] { out = upstreamRequest(c, t); };
    co_await offload(c.body_bytes, build);
    co_return out;
  }

  // Whether the target speaks the other API than the client (chat <-> messages translation).
  static bool crosses(const Call& c, const Target& t) {
    return t.provider->kind() != kindOf(c.api);
  }

  // The request as the target's provider expects it, translated when the target speaks the
  // other API.
  Result<http::ClientRequest> upstreamRequest(const Call& c, const Target& t) const {
    json body;
    Surface path = c.surface;
    if (!crosses(c, t)) {
      body = c.body;
      body["model"] = t.model;
    } else {
      // A field of an unexpected type surfaces as a JSON type error: the client's request is
      // at fault, not the upstream.
      try {
        if (c.surface == Surface::kChat) {
          body = PURSER_TRY_VALUE(chatToMessagesRequest(c.body, t.model, c.max_output));
          path = Surface::kMessages;
        } else {
          body = PURSER_TRY_VALUE(messagesToChatRequest(c.body, t.model));
          path = Surface::kChat;
        }
      } catch (const json::exception& e) {
        return fail(invalidArgument(
            fmt::format("The request cannot be translated for this model's API: {}", e.what())));
      }
    }
    if (c.stream && t.provider->kind() == ProviderKind::kOpenAi) {
      if (!body.contains("stream_options") || !body["stream_options"].is_object()) {
        body["stream_options"] = json::object();
      }
      body["stream_options"]["include_usage"] = true;
    }
    http::ClientRequest r;
    r.method = Method::kPost;
    r.url = t.provider->baseUrl() + upstreamPath(path);
    r.headers.add("Content-Type", "application/json");
    const std::string key = t.provider->nextKey();
    if (t.provider->kind() == ProviderKind::kAnthropic) {
      if (!key.empty()) r.headers.add("x-api-key", key);
      r.headers.add("anthropic-version",
                    c.anthropic_version.empty() ? "2023-06-01" : c.anthropic_version);
      if (!c.anthropic_beta.empty()) r.headers.add("anthropic-beta", c.anthropic_beta);
    } else if (!key.empty()) {
      r.headers.add("Authorization", "Bearer " + key);
    }
    if (c.stream) r.headers.add("Accept", "text/event-stream");
    r.body = writeJson(body);
    r.timeout = t.provider->timeout();
    r.max_response_bytes = t.provider->limits().max_response_bytes;
    return r;
  }

  // Targets that can serve this surface: any kind for chat and messages (translated), the
  // client's own kind for completions and embeddings.
  std::vector<Target*> candidates(const Call& c) {
    std::vector<Target*> out;
    const bool translatable = c.surface == Surface::kChat || c.surface == Surface::kMessages;
    for (Target* t : orderTargets(*c.route, d_.clock.monotonic(), d_.random)) {
      if (translatable || t->provider->kind() == kindOf(c.api)) out.push_back(t);
    }
    return out;
  }

  static std::string failureMessage(const Call& c, Fault fault, const std::string& last_error) {
    if (fault == Fault::kBadRequest) return last_error;
    return fmt::format("The upstream models for `{}` failed: {}.", c.route->alias, last_error);
  }

  void overhead(Response& r, const Call& c) const {
    const auto inside = d_.clock.monotonic() - c.started - c.upstream_time;
    r.headers.add("x-purser-overhead-us", std::to_string(std::max<int64_t>(0, micros(inside))));
    // The part of it spent waiting for the ledger's durable commits (the disk's flush time).
    r.headers.add("x-purser-commit-us", std::to_string(micros(c.commit_time)));
  }

  // --- Non-streamed ---------------------------------------------------------------------------

  asio::awaitable<Response> whole(Call& c) {
    http::HttpClient& client = d_.clients.current();
    const auto targets = candidates(c);
    Fault last_fault = Fault::kUpstream;
    std::string last_error = "no target of this route can serve this API";
    for (Target* t : targets) {
      for (int64_t attempt = 0; attempt <= c.route->retries; ++attempt) {
        if (attempt > 0) co_await sleepFor(std::chrono::milliseconds(100 << (attempt - 1)));
        auto request = co_await buildUpstream(c, *t);
        if (!request) {
          // The request cannot be put in this target's API; another target may take it as is.
          last_fault = Fault::kBadRequest;
          last_error = request.error().message;
          break;
        }
        const auto sent = d_.clock.monotonic();
        t->health.in_flight.fetch_add(1, std::memory_order_relaxed);
        c.last_target = t;
        auto res = co_await client.request(std::move(*request));
        t->health.in_flight.fetch_sub(1, std::memory_order_relaxed);
        c.upstream_time += d_.clock.monotonic() - sent;
        observeUpstream(c, *t, d_.clock.monotonic() - sent);
        if (!res) {
          recordFailure(*t, d_.clock.monotonic());
          upstreamError(*t, errorKind(res.error()));
          if (res.error().code == ErrorCode::kResourceExhausted) {
            // It ran and answered more than a provider may send: not retried (the work is
            // done), charged as estimated at the worst case that was held for it.
            co_await settle(c, {.input = c.input_estimate, .output = c.max_output}, true, 502, t,
                            d_.clock.monotonic() - c.started);
            Response r =
                apiError(c.api, Fault::kUpstream,
                         fmt::format("The answer of {} exceeded {} bytes.", t->provider->name(),
                                     t->provider->limits().max_response_bytes));
            overhead(r, c);
            co_return r;
          }
          last_fault =
              res.error().code == ErrorCode::kDeadlineExceeded ? Fault::kTimeout : Fault::kUpstream;
          last_error = res.error().message;
          continue;
        }
        if (retryable(res->status)) {
          recordFailure(*t, d_.clock.monotonic());
          upstreamError(*t, errorKind(res->status));
          last_fault = Fault::kUpstream;
          last_error = fmt::format("{} answered {}", t->provider->name(), res->status);
          co_await sleepFor(retryAfter(res->headers));
          continue;
        }
        recordSuccess(*t, d_.clock.monotonic() - sent);
        json body;
        const std::function<void()> parse_answer = [&] {
          body = parseJsonOrDiscarded(res->body, c.max_nesting);
        };
        co_await offload(res->body.size(), parse_answer);
        if (res->status >= 400) {
          upstreamError(*t, errorKind(res->status));
          // The upstream refused the request itself: nothing ran, nothing is charged. Its
          // answer reaches the client in the client's API's shape; one that is not such a JSON
          // error is put in that shape.
          c.hold.release();
          const bool own_shape = !crosses(c, *t) && body.is_object() && body.contains("error");
          Response r = own_shape ? Response::json(res->status, std::move(res->body))
                                 : translatedError(c.api, res->status, body);
          overhead(r, c);
          co_return r;
        }
        std::optional<ledger::TokenCounts> reported;
        if (body.is_object() && body.contains("usage") && body["usage"].is_object()) {
          reported = t->provider->kind() == ProviderKind::kAnthropic ? anthropicUsage(body["usage"])
                                                                     : openAiUsage(body["usage"]);
          if (!reported) {
            spdlog::warn("gateway: {} reported usage that is not believable; estimated instead",
                         t->provider->name());
          }
        }
        ledger::TokenCounts tokens;
        if (reported) {
          tokens = *reported;
        } else {
          tokens.input = c.input_estimate;
          tokens.output = ceilDiv(static_cast<int64_t>(res->body.size()), 4);
        }
        co_await settle(c, tokens, !reported, res->status, t, d_.clock.monotonic() - c.started);
        if (!body.is_object()) {
          // The upstream ran (and is metered, estimated) but its answer is not what its API
          // promises: the client is told so, in its own API's shape.
          Response r =
              apiError(c.api, Fault::kUpstream,
                       fmt::format("The answer of {} was not a JSON object.", t->provider->name()));
          overhead(r, c);
          co_return r;
        }
        if (crosses(c, *t)) {
          std::optional<std::string> translated;
          try {
            if (body.is_object()) {
              const json answer = c.api == Api::kOpenAi ? messagesToChatResponse(body)
                                                        : chatToMessagesResponse(body);
              translated = writeJson(answer);
            }
          } catch (const json::exception& e) {
            spdlog::warn("gateway: the answer of {} could not be translated: {}",
                         t->provider->name(), e.what());
          }
          if (!translated) {
            // The upstream ran and was metered; its answer was not what its API promises.
            Response r = apiError(
                c.api, Fault::kUpstream,
                fmt::format("The answer of {} could not be translated.", t->provider->name()));
            overhead(r, c);
            co_return r;
          }
          res->body = std::move(*translated);
        }
        hideUpstreamModel(res->body, t->model, c.route->alias);
        Response r = Response::json(res->status, std::move(res->body));
        overhead(r, c);
        co_return r;
      }
    }
    c.hold.release();
    Response r = apiError(c.api, last_fault, failureMessage(c, last_fault, last_error));
    overhead(r, c);
    co_return r;
  }

  // --- Streamed -------------------------------------------------------------------------------

  // Reads what an answer carries about usage; decides whether to forward an event.
  struct StreamState {
    ledger::TokenCounts tokens;
    bool usage_seen = false;
    bool usage_invalid = false;  // a usage report that was not believable: estimate instead
    int64_t output_chars = 0;
    bool first_byte = false;
    SteadyTime first_byte_at;
  };

  // Returns false to drop the event (the usage-only chunk the client did not ask for), and
  // whether it is the stream's final marker, held until the usage is settled.
  std::pair<bool, bool> inspect(const Call& c, ProviderKind upstream, const SseEvent& e,
                                StreamState& s) const {
    if (upstream == ProviderKind::kOpenAi) {
      if (e.data == "[DONE]") return {true, true};
      json chunk = parseJsonOrDiscarded(e.data, c.max_nesting);
      if (!chunk.is_object()) return {true, false};
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        if (auto u = openAiUsage(chunk["usage"])) {
          s.tokens = *u;
          s.usage_seen = true;
        } else {
          s.usage_invalid = true;
        }
        const bool usage_only = !chunk.contains("choices") || chunk["choices"].empty();
        if (usage_only && !c.client_wants_usage) return {false, false};
      }
      if (chunk.contains("choices") && chunk["choices"].is_array() && !chunk["choices"].empty()) {
        const json& ch = chunk["choices"][0];
        if (ch.contains("delta") && ch["delta"].is_object() && ch["delta"].contains("content") &&
            ch["delta"]["content"].is_string()) {
          s.output_chars += static_cast<int64_t>(ch["delta"]["content"].get<std::string>().size());
        } else if (ch.contains("text") && ch["text"].is_string()) {
          s.output_chars += static_cast<int64_t>(ch["text"].get<std::string>().size());
        }
      }
      return {true, false};
    }
    if (e.event == "message_stop") return {true, true};
    if (e.event == "message_start" || e.event == "message_delta") {
      json ev = parseJsonOrDiscarded(e.data, c.max_nesting);
      const json* usage = nullptr;
      if (ev.is_object() && e.event == "message_start" && ev.contains("message") &&
          ev["message"].is_object() && ev["message"].contains("usage")) {
        usage = &ev["message"]["usage"];
      } else if (ev.is_object() && e.event == "message_delta" && ev.contains("usage")) {
        usage = &ev["usage"];
      }
      if (usage != nullptr && usage->is_object() && !anthropicUsage(*usage)) {
        s.usage_invalid = true;
      } else if (usage != nullptr && usage->is_object()) {
        const ledger::TokenCounts u = *anthropicUsage(*usage);
        if (e.event == "message_start") {
          s.tokens.input = u.input;
          s.tokens.cached_input = u.cached_input;
          s.tokens.cache_write = u.cache_write;
          s.tokens.output = u.output;
        } else {
          s.tokens.output = u.output;  // cumulative
          s.usage_seen = true;
        }
      }
    } else if (e.event == "content_block_delta") {
      json ev = parseJsonOrDiscarded(e.data, c.max_nesting);
      if (ev.is_object() && ev.contains("delta") && ev["delta"].is_object() &&
          ev["delta"].contains("text") && ev["delta"]["text"].is_string()) {
        s.output_chars += static_cast<int64_t>(ev["delta"]["text"].get<std::string>().size());
      }
    }
    return {true, false};
  }

  ledger::TokenCounts estimate(const Call& c, const StreamState& s) const {
    ledger::TokenCounts t = s.tokens;
    if (t.input == 0 && t.cached_input == 0) t.input = c.input_estimate;
    t.output = std::max(t.output, ceilDiv(s.output_chars, 4));
    return t;
  }

  std::string errorEvent(Api api, std::string_view message) const {
    if (api == Api::kOpenAi) {
      return "data: " +
             writeJson(json{{"error",
                             {{"message", message},
                              {"type", "server_error"},
                              {"param", nullptr},
                              {"code", "upstream_disconnected"}}}}) +
             "\n\n";
    }
    return "event: error\ndata: " +
           writeJson(
               json{{"type", "error"}, {"error", {{"type", "api_error"}, {"message", message}}}}) +
           "\n\n";
  }

  asio::awaitable<Response> streamed(const std::shared_ptr<Call>& c) {
    http::HttpClient& client = d_.clients.current();
    const auto targets = candidates(*c);
    Fault last_fault = Fault::kUpstream;
    std::string last_error = "no target of this route can serve this API";
    for (Target* t : targets) {
      for (int64_t attempt = 0; attempt <= c->route->retries; ++attempt) {
        if (attempt > 0) co_await sleepFor(std::chrono::milliseconds(100 << (attempt - 1)));
        auto request = co_await buildUpstream(*c, *t);
        if (!request) {
          last_fault = Fault::kBadRequest;
          last_error = request.error().message;
          break;
        }
        const auto sent = d_.clock.monotonic();
        c->last_target = t;
        auto upstream = co_await client.stream(std::move(*request));
        c->upstream_time += d_.clock.monotonic() - sent;
        if (!upstream) {
          recordFailure(*t, d_.clock.monotonic());
          upstreamError(*t, errorKind(upstream.error()));
          last_fault = upstream.error().code == ErrorCode::kDeadlineExceeded ? Fault::kTimeout
                                                                             : Fault::kUpstream;
          last_error = upstream.error().message;
          continue;
        }
        const int status = (*upstream)->status();
        if (retryable(status) || status >= 400) {
          upstreamError(*t, errorKind(status));
          // Read the (small) error body, at most 64 pieces; nothing has reached the client yet.
          std::string error_body;
          for (int i = 0; i < 64 && error_body.size() < kMaxErrorBody; ++i) {
            auto piece = co_await (*upstream)->next();
            if (!piece || !*piece) break;
            error_body += **piece;
          }
          if (retryable(status)) {
            recordFailure(*t, d_.clock.monotonic());
            last_error = fmt::format("{} answered {}", t->provider->name(), status);
            co_await sleepFor(retryAfter((*upstream)->headers()));
            continue;
          }
          c->hold.release();
          const json parsed = parseJsonOrDiscarded(error_body, c->max_nesting);
          const bool own_shape = !crosses(*c, *t) && parsed.is_object() && parsed.contains("error");
          Response r = own_shape ? Response::json(status, std::move(error_body))
                                 : translatedError(c->api, status, parsed);
          overhead(r, *c);
          co_return r;
        }
        t->health.in_flight.fetch_add(1, std::memory_order_relaxed);
        Response r;
        r.status = 200;
        r.headers.add("Content-Type", "text/event-stream");
        r.headers.add("Cache-Control", "no-cache");
        overhead(r, *c);
        auto self = shared_from_this();
        auto stream_ptr = std::shared_ptr<http::ClientStream>(std::move(*upstream));
        r.stream = [self, c, t, stream_ptr, sent](http::BodyWriter& w) -> asio::awaitable<void> {
          co_await self->relay(*c, *t, *stream_ptr, w, sent);
        };
        co_return r;
      }
    }
    c->hold.release();
    Response r = apiError(c->api, last_fault, failureMessage(*c, last_fault, last_error));
    overhead(r, *c);
    co_return r;
  }

  // Relays an upstream stream event by event; settles before the final marker goes out.
  asio::awaitable<void> relay(Call& c, Target& t, http::ClientStream& upstream, http::BodyWriter& w,
                              SteadyTime sent) {
    SseParser parser(t.provider->limits().max_event_bytes);
    StreamState s;
    std::function<std::vector<TranslatedEvent>(const SseEvent&)> translator;
    if (crosses(c, t) && c.api == Api::kOpenAi) {
      translator = [tr = std::make_shared<MessagesToChatStream>(c.client_wants_usage)](
                       const SseEvent& e) { return tr->translate(e); };
    } else if (crosses(c, t)) {
      translator = [tr = std::make_shared<ChatToMessagesStream>()](const SseEvent& e) {
        return tr->translate(e);
      };
    }
    std::string held;  // the final marker, sent after the usage is durable
    bool client_gone = false;
    bool cut = false;
    for (;;) {
      auto piece = co_await upstream.next();
      if (!piece) {
        cut = true;
        break;
      }
      if (!*piece) break;
      auto events = parser.feed(**piece);
      if (!events) {
        cut = true;
        break;
      }
      // Reading the events (their JSON) is work proportional to their size: large ones are read
      // off the I/O worker.
      std::string out;
      size_t batch_bytes = 0;
      for (const auto& e : *events) batch_bytes += e.raw.size();
      const std::function<void()> read_events = [&] {
        for (const auto& e : *events) {
          auto [forward, final_marker] = inspect(c, t.provider->kind(), e, s);
          if (translator) {
            // The client speaks the other API: its events are made from the upstream's. An
            // event that cannot be translated ends the stream as a cut one.
            try {
              for (auto& te : translator(e)) (te.final ? held : out) += te.raw;
            } catch (const json::exception& ex) {
              spdlog::warn("gateway: an event from {} could not be translated: {}",
                           t.provider->name(), ex.what());
              cut = true;
              return;
            }
            continue;
          }
          if (!forward) continue;
          if (final_marker) {
            held += e.raw;
            continue;
          }
          out += e.raw;
        }
      };
      co_await offload(batch_bytes, read_events);
      hideUpstreamModel(out, t.model, c.route->alias);
      if (!out.empty()) {
        if (!s.first_byte) {
          s.first_byte = true;
          s.first_byte_at = d_.clock.monotonic();
        }
        if (!co_await w.write(out)) {
          client_gone = true;
          break;
        }
      }
      if (cut) break;
    }
    // An upstream that closed without its final marker ([DONE], message_stop) did not finish.
    if (!cut && !client_gone && held.empty()) cut = true;
    t.health.in_flight.fetch_sub(1, std::memory_order_relaxed);
    const auto ttft =
        s.first_byte ? s.first_byte_at - c.started : std::chrono::steady_clock::duration(0);
    observeUpstream(c, t, d_.clock.monotonic() - sent);
    if (cut) {
      recordFailure(t, d_.clock.monotonic());
      upstreamError(t, "5xx");
    } else {
      recordSuccess(t, d_.clock.monotonic() - sent);
    }
    const bool estimated = !s.usage_seen || s.usage_invalid || cut || client_gone;
    co_await settle(c, estimated ? estimate(c, s) : s.tokens, estimated, cut ? 502 : 200, &t, ttft);
    if (client_gone) co_return;
    if (cut) {
      (void)co_await w.write(errorEvent(c.api, "The upstream connection was lost mid-stream."));
      throw http::AbortStream();  // the client sees the stream end without its final marker
    }
    if (!held.empty()) {
      hideUpstreamModel(held, t.model, c.route->alias);
      (void)co_await w.write(held);
    }
  }

  // --- Entry points ---------------------------------------------------------------------------

  asio::awaitable<Response> handle(Surface surface, Request& req) {
    auto c = std::make_shared<Call>();
    c->surface = surface;
    c->api = apiOf(surface);
    c->started = d_.clock.monotonic();
    c->max_nesting = req.max_nesting;
    c->body_bytes = req.body.size();
    Response r = co_await serve(c, req);
    // A stream is counted when it settles; whatever was not settled (refused, failed) is counted
    // here, against the target it last tried ("" when it never reached one).
    if (!r.stream && !c->counted) countRequest(*c, c->last_target, r.status);
    co_return r;
  }

  asio::awaitable<Response> serve(const std::shared_ptr<Call>& c, Request& req) {
    if (auto stop = identify(*c, req)) {
      overhead(*stop, *c);
      co_return std::move(*stop);
    }
    // A large body is parsed off the I/O worker, so one client's megabytes never hold up
    // another client's small request.
    Result<json> parsed = fail(internalError("not parsed"));
    const std::function<void()> parse = [&] { parsed = parseJson(req.body, req.max_nesting); };
    co_await offload(req.body.size(), parse);
    if (auto stop = admit(*c, req, std::move(parsed))) {
      overhead(*stop, *c);
      co_return std::move(*stop);
    }
    if (auto stop = reserve(*c)) {
      overhead(*stop, *c);
      co_return std::move(*stop);
    }
    // A fault of Purser's own must not leave the reservation holding budget until its lease ends.
    try {
      if (c->stream) co_return co_await streamed(c);
      co_return co_await whole(*c);
    } catch (const std::exception& e) {
      spdlog::error("gateway: request {} failed inside Purser: {}", c->event.id, e.what());
    }
    c->hold.release();
    Response r = apiError(c->api, Fault::kInternal, "The request failed inside the gateway.");
    overhead(r, *c);
    co_return r;
  }

  Response models(Request& req) {
    Call c;
    c.api = Api::kOpenAi;
    c.started = d_.clock.monotonic();
    auto presented = presentedKey(req);
    if (!presented) {
      return apiError(Api::kOpenAi, Fault::kUnauthenticated, "You didn't provide an API key.", {},
                      "missing_api_key");
    }
    auto who = d_.directory.authenticate(*presented);
    if (!who) {
      return apiError(Api::kOpenAi, Fault::kUnauthenticated, "Incorrect API key provided.", {},
                      "invalid_api_key");
    }
    auto key = d_.directory.key(who->key_id);
    json data = json::array();
    std::vector<std::string> names;
    for (const auto& [alias, route] : routes_) {
      if (key && allowed(*key, *who, *route)) names.push_back(alias);
    }
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      data.push_back(
          {{"id", n}, {"object", "model"}, {"created", 1767225600}, {"owned_by", "purser"}});
    }
    Response r = Response::json(200, writeJson(json{{"object", "list"}, {"data", data}}));
    overhead(r, c);
    return r;
  }

 private:
  GatewayDeps d_;
  ledger::Budget budget_{d_.wallets, d_.meter, d_.limiter, d_.rate_limits};
  std::vector<std::unique_ptr<Provider>> providers_;
  std::unordered_map<std::string, std::unique_ptr<Route>> routes_;
  std::unique_ptr<asio::thread_pool> cpu_;  // parses and writes large bodies
  std::optional<GatewayMetrics> metrics_;
};

Gateway::Gateway(GatewayDeps deps, std::vector<std::unique_ptr<Provider>> providers,
                 std::vector<std::unique_ptr<Route>> routes)
    : impl_(std::make_shared<Impl>(deps, std::move(providers), std::move(routes))) {}
Gateway::~Gateway() = default;

Provider* Gateway::provider(const std::string& name) { return impl_->provider(name); }
std::vector<Provider*> Gateway::providers() { return impl_->providers(); }
const Route* Gateway::route(const std::string& alias) const { return impl_->route(alias); }
std::vector<const Route*> Gateway::routes() const { return impl_->routes(); }

Result<void> Gateway::addRoutes(http::Router& router) {
  auto impl = impl_;
  const auto surface = [&](const char* path, Surface s) {
    return router.addAsync(Method::kPost, path,
                           [impl, s](Request& req) { return impl->handle(s, req); });
  };
  PURSER_TRY(surface("/v1/chat/completions", Surface::kChat));
  PURSER_TRY(surface("/v1/completions", Surface::kCompletions));
  PURSER_TRY(surface("/v1/embeddings", Surface::kEmbeddings));
  PURSER_TRY(surface("/v1/messages", Surface::kMessages));
  PURSER_TRY(
      router.add(Method::kGet, "/v1/models", [impl](Request& req) { return impl->models(req); }));
  return {};
}

}  // namespace purser::gateway
