// The gateway's insides, shared by the files its stages live in (private to src/gateway):
//   gateway.cc           parse and admit a request; the routes; the model list
//   gateway_upstream.cc  the upstream request, and a whole (non-streamed) answer with its retries
//   gateway_stream.cc    a streamed answer, relayed event by event
// Identification, the hold (ledger::Budget) and the settlement are small members here.
#pragma once

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
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>

#include "common/json.h"
#include "common/json_scan.h"
#include "gateway/admission.h"
#include "gateway/api_shape.h"
#include "gateway/durable.h"
#include "gateway/gateway.h"
#include "gateway/sse.h"
#include "gateway/translate.h"
#include "http/async.h"
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

inline asio::awaitable<void> sleepFor(std::chrono::milliseconds d) {
  if (d.count() <= 0) co_return;
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(asio::use_awaitable);
}

inline int64_t micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

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
                              {"route", "target"})),
        waiting(&m.gaugeFamily("purser_gateway_queue_waiting",
                               "Requests waiting in Purser for a replica with room, by route and "
                               "priority.",
                               {"route", "priority"})),
        queue_wait(&m.histogramFamily(
            "purser_gateway_queue_wait_seconds",
            "Time requests that had to wait in Purser waited before they were sent on or "
            "refused, by route and priority.",
            {"route", "priority"}, http::latencyBuckets())),
        shed(&m.counterFamily("purser_gateway_shed_total",
                              "Requests refused because every replica of the route was saturated, "
                              "by route, priority and reason: saturated (sheddable), full (the "
                              "queue had no place), timed_out (waited its bound).",
                              {"route", "priority", "reason"})) {}
  http::Family<http::Counter>* requests;
  http::Family<http::Counter>* upstream_errors;
  http::Family<http::Histogram>* ttft;
  http::Family<http::Histogram>* upstream_latency;
  http::Family<http::Counter>* tokens;
  http::Family<http::Counter>* cost;
  http::Family<http::Gauge>* waiting;
  http::Family<http::Histogram>* queue_wait;
  http::Family<http::Counter>* shed;
};

// The children of the gateway's metrics for one route and target, looked up once: a lookup
// builds label vectors and takes the family's lock, which every request would pay otherwise.
struct TargetMetrics {
  http::Counter* ok = nullptr;  // requests answered 200
  http::Histogram* ttft = nullptr;
  http::Histogram* upstream_latency = nullptr;
  std::array<http::Counter*, 5> tokens{};  // input, output, cached_input, cache_write, reasoning
  http::Counter* cost = nullptr;
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
  Result<void> reloadRoute(const std::string& alias, Strategy strategy,
                           const std::vector<TargetSpec>& specs) {
    Route* found = nullptr;
    {
      std::shared_lock lock(routes_mu_);
      auto it = routes_.find(alias);
      if (it != routes_.end()) found = it->second.get();
    }
    if (found == nullptr) {
      return std::unexpected(Error(ErrorCode::kNotFound, fmt::format("no route \"{}\"", alias)));
    }
    if (specs.empty()) {
      return std::unexpected(
          Error(ErrorCode::kInvalidArgument, fmt::format("route \"{}\" has no targets", alias)));
    }
    Route& route = *found;
    // Every target the route has had, for reuse: as built, then those reloads made.
    std::vector<Target*> known;
    for (const auto& t : route.targets) known.push_back(t.get());
    for (Target* t : route.reloaded->added()) known.push_back(t);
    std::vector<Target*> order;
    std::vector<std::unique_ptr<Target>> added;
    std::vector<std::pair<Target*, int64_t>> weights;
    for (const TargetSpec& spec : specs) {
      Provider* p = provider(spec.provider);
      if (p == nullptr) {
        return std::unexpected(Error(ErrorCode::kInvalidArgument,
                                     fmt::format("route \"{}\": provider \"{}\" is new; it is "
                                                 "used after a restart",
                                                 alias, spec.provider)));
      }
      Target* t = nullptr;
      for (Target* k : known) {
        if (k->provider == p && k->model == spec.model &&
            std::find(order.begin(), order.end(), k) == order.end()) {
          t = k;
          break;
        }
      }
      if (t == nullptr) {
        auto made = std::make_unique<Target>();
        made->provider = p;
        made->model = spec.model;
        made->price = d_.prices.find(spec.provider, spec.model);
        t = made.get();
        known.push_back(t);
        added.push_back(std::move(made));
      }
      weights.emplace_back(t, spec.weight);
      order.push_back(t);
    }
    for (auto& [t, w] : weights) t->weight.store(w, std::memory_order_relaxed);
    route.strategy.store(strategy, std::memory_order_relaxed);
    route.reloaded->set(std::move(order), std::move(added));
    return {};
  }

  Route* findRoute(const std::string& alias) const {
    std::shared_lock lock(routes_mu_);
    auto it = routes_.find(alias);
    return it == routes_.end() ? nullptr : it->second.get();
  }
  const Route* route(const std::string& alias) const { return findRoute(alias); }
  Result<const Route*> addRoute(std::unique_ptr<Route> r) {
    std::unique_lock lock(routes_mu_);
    const std::string alias = r->alias;
    if (routes_.contains(alias)) {
      return std::unexpected(
          Error(ErrorCode::kAlreadyExists, fmt::format("route \"{}\" exists", alias)));
    }
    const Route* made = r.get();
    routes_.emplace(alias, std::move(r));
    return made;
  }
  std::vector<const Route*> routes() const {
    std::vector<const Route*> out;
    std::shared_lock lock(routes_mu_);
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
    // The client's body, read in place: forwarded as these bytes with only the model, the output
    // cap and (streams) the usage option spliced in, unless the target speaks the other API.
    std::string raw;
    JsonView doc;                            // the body's top-level object
    JsonView model;                          // its "model" value
    std::optional<JsonView> max_value;       // the value of max_field when the body has one
    std::optional<JsonView> stream_options;  // "stream_options" when the body has it
    const char* max_field = nullptr;         // the output cap's field; null for embeddings
    // The body as a document, built only to translate it for the other API (see document()).
    std::optional<json> body;
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
    std::optional<Money> session_cap;  // x-purser-session-budget
    size_t max_nesting = kDefaultMaxNesting;
    size_t body_bytes = 0;                // of the client's request
    const Target* last_target = nullptr;  // the upstream tried last
    bool counted = false;                 // in purser_gateway_requests_total
    Priority priority = Priority::kStandard;
    // Where the admission queue sent it (counted in that target's `since` already); null once
    // the first try has claimed a target.
    Target* dispatched_to = nullptr;
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
  std::optional<Response> identify(Call& c, Request& req);

  // Parsing, routing and permission. A response when the request stops here.
  std::optional<Response> admit(Call& c, Request& req, Result<JsonView> scanned);

  // The client's body as a document with the output cap set (for translation), parsed once.
  static const json& document(Call& c) {
    if (!c.body) {
      c.body = parseJsonOrDiscarded(c.raw, c.max_nesting);
      if (c.max_field != nullptr && c.body->is_object()) (*c.body)[c.max_field] = c.max_output;
    }
    return *c.body;
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
  // A hold that needs the shared store waits for it on d_.ledger_waits, never on the worker.
  asio::awaitable<std::optional<Response>> reserve(Call& c);

  // The request's priority: its key's, or lower when the x-purser-priority header asks.
  std::optional<Response> prioritise(Call& c, const Request& req);
  // Waits, when every target of the route is saturated, until one has room (admission.h). A
  // response when the request is refused instead.
  asio::awaitable<std::optional<Response>> waitForRoom(Call& c);
  // Sends waiters of `route` on while its targets have room.
  void pump(Route& route);
  Response overloaded(const Call& c, std::string_view reason, std::string message);
  // A try of `t` begins / ends: counted in its in-flight requests and in `since`.
  void beginTry(Call& c, Target& t) {
    t.health.in_flight.fetch_add(1, std::memory_order_relaxed);
    if (c.dispatched_to != &t) {
      t.observed.since.fetch_add(1, std::memory_order_relaxed);
      if (c.dispatched_to != nullptr) {
        c.dispatched_to->observed.since.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    c.dispatched_to = nullptr;
  }
  void endTry(Call& c, Target& t) {
    t.health.in_flight.fetch_sub(1, std::memory_order_relaxed);
    t.observed.since.fetch_sub(1, std::memory_order_relaxed);
    if (c.route->queue && !c.route->queue->empty()) pump(*c.route);
  }
  // A request the queue sent on that never tried a target gives its place back.
  void unclaim(Call& c) {
    if (c.dispatched_to == nullptr) return;
    c.dispatched_to->observed.since.fetch_sub(1, std::memory_order_relaxed);
    c.dispatched_to = nullptr;
    if (c.route->queue && !c.route->queue->empty()) pump(*c.route);
  }
  // Every route's waiters, after the targets' facts changed.
  void pumpAll() {
    std::vector<Route*> all;
    {
      std::shared_lock lock(routes_mu_);
      for (auto& [alias, r] : routes_) all.push_back(r.get());
    }
    for (Route* r : all) {
      if (r->queue && !r->queue->empty()) pump(*r);
    }
  }

  Response rateLimited(const Call& c, const ledger::RateDecision& rate) const;

  // Settles the event durably; logs (never fails the client) if the ledger cannot.
  asio::awaitable<void> settle(Call& c, ledger::TokenCounts tokens, bool estimated, int status,
                               const Target* target, std::chrono::steady_clock::duration ttft);

  // The metrics of `t` serving `route` (metrics_ is set).
  const TargetMetrics& targetMetrics(const Route& route, const Target& t) {
    std::lock_guard lock(target_metrics_mu_);
    auto [it, added] = target_metrics_.try_emplace({&route, &t});
    if (added) {
      TargetMetrics& m = it->second;
      const std::string& alias = route.alias;
      const std::string& provider = t.provider->name();
      m.ok = &metrics_->requests->labels({alias, provider, "200"});
      m.ttft = &metrics_->ttft->labels({alias, provider});
      m.upstream_latency = &metrics_->upstream_latency->labels({alias, provider});
      const char* kinds[] = {"input", "output", "cached_input", "cache_write", "reasoning"};
      for (size_t i = 0; i < m.tokens.size(); ++i) {
        m.tokens[i] = &metrics_->tokens->labels({alias, provider, kinds[i]});
      }
      m.cost = &metrics_->cost->labels({alias, provider});
    }
    return it->second;
  }

  void countRequest(Call& c, const Target* t, int status) {
    c.counted = true;
    if (!metrics_) return;
    if (status == 200 && t != nullptr && c.route != nullptr) {
      targetMetrics(*c.route, *t).ok->inc();
      return;
    }
    metrics_->requests
        ->labels({c.route != nullptr ? c.route->alias : std::string(),
                  t != nullptr ? t->provider->name() : std::string(), std::to_string(status)})
        .inc();
  }

  // A failed try of `t` on `route`; a cooldown it starts is kept as an event.
  void failed(const Route* route, Target& t) {
    if (!recordFailure(t, d_.clock.monotonic())) return;
    const int64_t ms = t.health.cooldown_ns.load(std::memory_order_relaxed) / 1'000'000;
    GatewayEvent e{
        unixMillis(d_.clock.now()), "target.cooldown",
        (route != nullptr ? route->alias : std::string()) + "/" + t.provider->name(),
        fmt::format("{} failed repeatedly and is cooling down for {} ms", t.provider->name(), ms)};
    std::lock_guard lock(events_mu_);
    events_.push_back(std::move(e));
    while (events_.size() > Gateway::kMaxEvents) events_.pop_front();
  }
  std::vector<GatewayEvent> events() const {
    std::lock_guard lock(events_mu_);
    return {events_.begin(), events_.end()};
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
      targetMetrics(*c.route, t)
          .upstream_latency->observe(std::chrono::duration<double>(d).count());
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
    co_await http::runOn(cpu_->get_executor(), [&work] { work(); });
  }

  // The upstream request for `t` (see upstreamRequest), built off the worker for large bodies.
  asio::awaitable<Result<http::ClientRequest>> buildUpstream(Call& c, const Target& t) {
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
  Result<http::ClientRequest> upstreamRequest(Call& c, const Target& t) const;

  // Targets that can serve this surface: any kind for chat and messages (translated), the
  // client's own kind for completions and embeddings.
  std::vector<Target*> candidates(const Call& c) {
    std::vector<Target*> out;
    const bool translatable = c.surface == Surface::kChat || c.surface == Surface::kMessages;
    // The slo strategy scores the replicas by how much of this prompt each has seen; the
    // prompt is the messages (or prompt) as sent, the part that repeats across requests.
    std::vector<uint64_t> blocks;
    if (c.route->strategy == Strategy::kSlo) {
      for (const char* field : {"messages", "prompt", "input"}) {
        if (auto v = c.doc.get(field)) {
          const std::string_view system = c.doc.get("system") ? c.doc.get("system")->text() : "";
          blocks = prefixBlocks(std::string(system) + std::string(v->text()));
          break;
        }
      }
    }
    for (Target* t : orderTargets(*c.route, d_.clock.monotonic(), d_.random, blocks)) {
      if (translatable || t->provider->kind() == kindOf(c.api)) out.push_back(t);
    }
    // Where it goes first is where its prefix will be cached.
    if (!blocks.empty() && !out.empty()) out.front()->prefixes.insert(blocks);
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

  asio::awaitable<Response> whole(Call& c);

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
    const auto textLength = [](const std::optional<JsonView>& v) -> int64_t {
      if (!v || !v->isString()) return 0;
      return static_cast<int64_t>(v->string()->size());
    };
    if (upstream == ProviderKind::kOpenAi) {
      if (e.data == "[DONE]") return {true, true};
      auto chunk = scanJson(e.data, c.max_nesting);
      if (!chunk || !chunk->isObject()) return {true, false};
      const std::optional<JsonView> choices = chunk->get("choices");
      if (auto usage = chunk->get("usage"); usage && usage->isObject()) {
        if (auto u = openAiUsage(*usage)) {
          s.tokens = *u;
          s.usage_seen = true;
        } else {
          s.usage_invalid = true;
        }
        const bool usage_only = !choices || choices->isNull() || choices->empty();
        if (usage_only && !c.client_wants_usage) return {false, false};
      }
      if (choices && choices->isArray()) {
        if (auto first = choices->at(0); first && first->isObject()) {
          auto delta = first->get("delta");
          if (delta && delta->isObject() && delta->get("content") &&
              delta->get("content")->isString()) {
            s.output_chars += textLength(delta->get("content"));
          } else {
            s.output_chars += textLength(first->get("text"));
          }
        }
      }
      return {true, false};
    }
    if (e.event == "message_stop") return {true, true};
    if (e.event == "message_start" || e.event == "message_delta") {
      auto ev = scanJson(e.data, c.max_nesting);
      std::optional<JsonView> usage;
      if (ev && ev->isObject() && e.event == "message_start") {
        if (auto message = ev->get("message"); message && message->isObject()) {
          usage = message->get("usage");
        }
      } else if (ev && ev->isObject()) {
        usage = ev->get("usage");
      }
      if (usage && usage->isObject()) {
        if (auto u = anthropicUsage(*usage); !u) {
          s.usage_invalid = true;
        } else if (e.event == "message_start") {
          s.tokens.input = u->input;
          s.tokens.cached_input = u->cached_input;
          s.tokens.cache_write = u->cache_write;
          s.tokens.output = u->output;
        } else {
          s.tokens.output = u->output;  // cumulative
          s.usage_seen = true;
        }
      }
    } else if (e.event == "content_block_delta") {
      auto ev = scanJson(e.data, c.max_nesting);
      if (ev && ev->isObject()) {
        if (auto delta = ev->get("delta"); delta && delta->isObject()) {
          s.output_chars += textLength(delta->get("text"));
        }
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

  asio::awaitable<Response> streamed(const std::shared_ptr<Call>& c);

  // Relays an upstream stream event by event; settles before the final marker goes out.
  asio::awaitable<void> relay(Call& c, Target& t, http::ClientStream& upstream, http::BodyWriter& w,
                              SteadyTime sent);

  // --- Entry points ---------------------------------------------------------------------------

  asio::awaitable<Response> handle(Surface surface, Request& req);

  asio::awaitable<Response> serve(const std::shared_ptr<Call>& c, Request& req);

  Response models(Request& req);

 private:
  GatewayDeps d_;
  std::vector<std::unique_ptr<Provider>> providers_;
  // Routes are only ever added (a served model's own route at run time), never removed, so a
  // Route* stays valid for the gateway's life; the map itself is guarded by routes_mu_.
  mutable std::shared_mutex routes_mu_;
  std::unordered_map<std::string, std::unique_ptr<Route>> routes_;
  std::unique_ptr<asio::thread_pool> cpu_;  // parses and writes large bodies
  std::optional<GatewayMetrics> metrics_;
  mutable std::mutex events_mu_;
  std::deque<GatewayEvent> events_;  // guarded by events_mu_; at most Gateway::kMaxEvents
  std::mutex target_metrics_mu_;
  std::map<std::pair<const Route*, const Target*>, TargetMetrics> target_metrics_;  // guarded
};

}  // namespace purser::gateway
