#include "gateway/gateway_impl.h"

#include <boost/asio/redirect_error.hpp>

namespace purser::gateway {

// Who is asking. A response when the request stops here.
std::optional<Response> Gateway::Impl::identify(Call& c, Request& req) {
  const Api api = c.api;
  auto presented = presentedKey(req);
  if (!presented && req.tls_client_subject.empty()) {
    return apiError(api, Fault::kUnauthenticated,
                    "You didn't provide an API key. Send it as \"Authorization: Bearer KEY\".", {},
                    "missing_api_key");
  }
  // A key wins over a client certificate; a certificate mapped to a key stands for it.
  auto who = presented ? d_.directory.verify(*presented)
                       : d_.directory.verifyCertificate(req.tls_client_subject);
  if (!who && !presented) {
    return apiError(api, Fault::kUnauthenticated,
                    who.error().message + ". Send an API key as \"Authorization: Bearer KEY\".", {},
                    who.error().reason == identity::KeyRefusal::kMissing ? "missing_api_key"
                                                                         : "invalid_api_key");
  }
  if (!who) {
    return apiError(api, Fault::kUnauthenticated,
                    who.error().reason == identity::KeyRefusal::kUnknown
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

// Rate limits and the reservation (ledger::Budget). A response when the request stops here.
asio::awaitable<std::optional<Response>> Gateway::Impl::reserve(Call& c) {
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
  const ledger::HoldRequest request{.payer = identity::payerOf(c.who, d_.directory),
                                    .model = c.route->alias,
                                    .draft = e,
                                    .amount = worst,
                                    .tokens = c.input_estimate + c.max_output,
                                    .lease = std::chrono::minutes(15),
                                    .options = {.fresh_id = true},
                                    .session_cap = c.session_cap};
  std::optional<Result<ledger::Hold>> held = d_.budget.tryHold(request, &rate);
  if (!held) {
    // The shared store must be asked first: off the worker, in the tenant's share of the pool.
    held = co_await http::runBlocking(d_.ledger_waits, c.who.tenant_id,
                                      [&] { return d_.budget.hold(request, &rate); });
  }
  if (*held) {
    c.hold = std::move(**held);
    co_return std::nullopt;
  }
  if (!rate.allowed) co_return rateLimited(c, rate);
  const Error& refused = held->error();
  if (refused.code == ErrorCode::kResourceExhausted) {
    co_return apiError(c.api, Fault::kBudget, "You exceeded your budget: " + refused.message + ".",
                       {}, "budget_exceeded");
  }
  // The ledger could not record the reservation, or this replica's budget lease ran out while
  // the shared store is unreachable (or its waits are full): nothing ran, and a retry (here or on
  // another replica) may succeed.
  co_return apiError(c.api, Fault::kOverloaded,
                     "The ledger is unavailable: " + refused.message + "; try again.", {},
                     "ledger_unavailable");
}

Response Gateway::Impl::rateLimited(const Call& c, const ledger::RateDecision& rate) const {
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
asio::awaitable<void> Gateway::Impl::settle(Call& c, ledger::TokenCounts tokens, bool estimated,
                                            int status, const Target* target,
                                            std::chrono::steady_clock::duration ttft) {
  ledger::UsageEvent& e = c.event;
  if (target != nullptr && !target->vouched && !estimated) {
    // A served replica's counts (members' code) are believed only within what was held for the
    // request, and only if they account for the prompt it was sent (at least a token for every
    // 32 bytes of it); else they are estimated from the bytes, and flagged.
    const int64_t floor_input = static_cast<int64_t>(c.raw.size()) / 32;
    if (tokens.input + tokens.cached_input + tokens.cache_write < floor_input) {
      spdlog::warn("gateway: {} reported {} input tokens for a {}-byte request; estimated instead",
                   target->provider->name(),
                   tokens.input + tokens.cached_input + tokens.cache_write, c.raw.size());
      tokens.input = c.input_estimate;
      tokens.cached_input = tokens.cache_write = 0;
      estimated = true;
    }
    if (tokens.output + tokens.reasoning > c.max_output) {
      tokens.reasoning = std::min(tokens.reasoning, c.max_output);
      tokens.output = c.max_output - tokens.reasoning;
      estimated = true;
    }
  }
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
  const TargetMetrics* m =
      metrics_ && target != nullptr ? &targetMetrics(*c.route, *target) : nullptr;
  if (m != nullptr) {
    m->ttft->observe(std::chrono::duration<double>(ttft).count());
    const int64_t counts[] = {tokens.input, tokens.output, tokens.cached_input, tokens.cache_write,
                              tokens.reasoning};
    for (size_t i = 0; i < m->tokens.size(); ++i) {
      if (counts[i] > 0) m->tokens[i]->inc(static_cast<uint64_t>(counts[i]));
    }
  }
  // Tokens-per-minute limits took the estimate; the hold reconciles them with what was used.
  auto settled = c.hold.settle(e);
  if (settled && !settled->duplicate && d_.budget.meter().syncsEachRecord()) {
    const auto asked = d_.clock.monotonic();
    if (!co_await durable(d_.budget.meter(), settled->journal_sequence)) {
      spdlog::error("gateway: the usage of {} may not be on disk", e.id);
    }
    c.commit_time += d_.clock.monotonic() - asked;
  }
  if (settled && m != nullptr && !settled->duplicate) {
    m->cost->inc(static_cast<uint64_t>(std::max<int64_t>(0, settled->charged.nanos())));
  }
  if (!settled) {
    spdlog::error("gateway: settling {} failed: {}", e.id, settled.error().message);
  } else if (!settled->alerts.empty() && d_.on_alerts) {
    d_.on_alerts(settled->alerts, e.tenant_id);
  }
}

asio::awaitable<Response> Gateway::Impl::handle(Surface surface, Request& req) {
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

asio::awaitable<Response> Gateway::Impl::serve(const std::shared_ptr<Call>& c, Request& req) {
  if (auto stop = identify(*c, req)) {
    overhead(*stop, *c);
    co_return std::move(*stop);
  }
  // The body is read in place (nothing is built from it); a large one off the I/O worker, so one
  // client's megabytes never hold up another client's small request. The call keeps the bytes:
  // a stream outlives the request.
  c->raw = std::move(req.body);
  Result<JsonView> scanned = fail(internalError("not read"));
  const std::function<void()> scan = [&] { scanned = scanJson(c->raw, req.max_nesting); };
  co_await offload(c->raw.size(), scan);
  if (auto stop = admit(*c, req, std::move(scanned))) {
    overhead(*stop, *c);
    co_return std::move(*stop);
  }
  if (auto stop = prioritise(*c, req)) {
    overhead(*stop, *c);
    co_return std::move(*stop);
  }
  // Budget is held only once a replica has room: nothing waiting holds money.
  if (auto stop = co_await waitForRoom(*c)) {
    overhead(*stop, *c);
    co_return std::move(*stop);
  }
  if (auto stop = co_await reserve(*c)) {
    unclaim(*c);
    overhead(*stop, *c);
    co_return std::move(*stop);
  }
  // A fault of Purser's own must not leave the reservation holding budget until its lease ends.
  try {
    // (Not a conditional expression: g++ 12 frees its co_await temporaries too early.)
    Response r;
    if (c->stream) {
      r = co_await streamed(c);
    } else {
      r = co_await whole(*c);
    }
    unclaim(*c);  // sent on by the queue, but no target could take it
    co_return r;
  } catch (const std::exception& e) {
    spdlog::error("gateway: request {} failed inside Purser: {}", c->event.id, e.what());
  }
  unclaim(*c);
  c->hold.release();
  Response r = apiError(c->api, Fault::kInternal, "The request failed inside the gateway.");
  overhead(r, *c);
  co_return r;
}

std::optional<Response> Gateway::Impl::prioritise(Call& c, const Request& req) {
  c.priority = c.key.priority;
  auto asked = req.headers.get("x-purser-priority");
  if (!asked) return std::nullopt;
  auto p = identity::parsePriority(*asked);
  if (!p) {
    return apiError(c.api, Fault::kBadRequest,
                    "The x-purser-priority header must be critical, standard or sheddable.",
                    "x-purser-priority");
  }
  if (*p > c.key.priority) {
    return apiError(c.api, Fault::kForbidden,
                    fmt::format("This key may send requests at priority {} at most, not {}.",
                                identity::priorityName(c.key.priority), identity::priorityName(*p)),
                    "x-purser-priority", "priority_not_allowed");
  }
  c.priority = *p;
  return std::nullopt;
}

Response Gateway::Impl::overloaded(const Call& c, std::string_view reason, std::string message) {
  if (metrics_) {
    metrics_->shed
        ->labels(
            {c.route->alias, std::string(identity::priorityName(c.priority)), std::string(reason)})
        .inc();
  }
  Response r = apiError(c.api, Fault::kOverloaded, message, {}, "overloaded");
  // Room comes back about as fast as the replicas finish requests; a second is a fair first try.
  r.headers.add("retry-after", "1");
  return r;
}

asio::awaitable<std::optional<Response>> Gateway::Impl::waitForRoom(Call& c) {
  Route& route = *c.route;
  AdmissionQueue* queue = route.queue.get();
  if (queue == nullptr) co_return std::nullopt;
  const MonoTime now = d_.clock.monotonic();
  // Nobody waits ahead of it and a target has room: straight on, as almost every request goes.
  // With every target down rather than busy, waiting would not help: on to fail over as usual.
  bool saturated = false;
  if (queue->empty() && (roomiest(route, now, &saturated) != nullptr || !saturated)) {
    co_return std::nullopt;
  }
  const std::string priority(identity::priorityName(c.priority));
  if (c.priority == Priority::kSheddable) {
    co_return overloaded(c, "saturated",
                         fmt::format("Every replica of `{}` is saturated; sheddable requests are "
                                     "refused first. Try again shortly.",
                                     route.alias));
  }
  // It waits on a timer set to its bound; the queue's wake (on any thread) cancels the timer on
  // this request's own executor, after saying why.
  struct Wait {
    explicit Wait(asio::any_io_executor ex) : timer(std::move(ex)) {}
    asio::steady_timer timer;
    std::atomic<int> outcome{0};
    std::atomic<Target*> target{nullptr};
  };
  auto wait = std::make_shared<Wait>(co_await asio::this_coro::executor);
  wait->timer.expires_after(route.queue_max_wait);
  const std::string team = c.who.tenant_id + "/" + c.who.team_id;
  auto id =
      queue->push({.priority = c.priority,
                   .team = team,
                   .wake =
                       [wait](AdmissionQueue::Outcome o, Target* t) {
                         wait->target.store(t);
                         wait->outcome.store(static_cast<int>(o));
                         asio::post(wait->timer.get_executor(), [wait] { wait->timer.cancel(); });
                       },
                   .tenant = c.who.tenant_id});
  if (!id) {
    co_return overloaded(c, "full",
                         fmt::format("Every replica of `{}` is saturated and {} requests as "
                                     "important as this one already wait. Try again shortly.",
                                     route.alias, queue->maxWaiting()));
  }
  if (metrics_) metrics_->waiting->labels({route.alias, priority}).add(1);
  pump(route);  // room may have come between the check and the push
  boost::system::error_code ec;
  co_await wait->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (wait->outcome.load() == 0 && queue->remove(*id)) {
    wait->outcome.store(static_cast<int>(AdmissionQueue::Outcome::kTimedOut));
  }
  while (wait->outcome.load() == 0) {
    // It left the queue just as its bound passed: the wake is on its way.
    wait->timer.expires_after(std::chrono::hours(1));
    co_await wait->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (metrics_) {
    metrics_->waiting->labels({route.alias, priority}).sub(1);
    metrics_->queue_wait->labels({route.alias, priority})
        .observe(std::chrono::duration<double>(d_.clock.monotonic() - now).count());
  }
  switch (static_cast<AdmissionQueue::Outcome>(wait->outcome.load())) {
    case AdmissionQueue::Outcome::kDispatched:
      c.dispatched_to = wait->target.load();
      co_return std::nullopt;
    case AdmissionQueue::Outcome::kShed:
      co_return overloaded(c, "full",
                           fmt::format("Every replica of `{}` is saturated and more important "
                                       "requests took this one's place. Try again shortly.",
                                       route.alias));
    default:
      co_return overloaded(
          c, "timed_out",
          fmt::format(
              "Every replica of `{}` stayed saturated for the {} s this request may wait. "
              "Try again shortly.",
              route.alias,
              std::chrono::duration_cast<std::chrono::seconds>(route.queue_max_wait).count()));
  }
}

void Gateway::Impl::pump(Route& route) {
  dispatchWaiters(route, *route.queue, d_.clock.monotonic());
}

Response Gateway::Impl::models(Request& req) {
  Call c;
  c.api = Api::kOpenAi;
  c.started = d_.clock.monotonic();
  auto presented = presentedKey(req);
  if (!presented && req.tls_client_subject.empty()) {
    return apiError(Api::kOpenAi, Fault::kUnauthenticated, "You didn't provide an API key.", {},
                    "missing_api_key");
  }
  auto who = presented ? d_.directory.verify(*presented)
                       : d_.directory.verifyCertificate(req.tls_client_subject);
  if (!who) {
    return apiError(Api::kOpenAi, Fault::kUnauthenticated, "Incorrect API key provided.", {},
                    "invalid_api_key");
  }
  auto key = d_.directory.key(who->key_id);
  json data = json::array();
  std::vector<std::string> names;
  for (const Route* route : routes()) {
    if (key && allowed(*key, *who, *route)) names.push_back(route->alias);
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

// Parsing, routing and permission. A response when the request stops here.
std::optional<Response> Gateway::Impl::admit(Call& c, Request& req, Result<JsonView> scanned) {
  const Api api = c.api;
  if (!scanned) {
    return apiError(api, Fault::kBadRequest,
                    fmt::format("We could not parse the JSON body of your request: {}.",
                                scanned.error().message));
  }
  c.doc = *scanned;
  if (!c.doc.isObject()) {
    return apiError(api, Fault::kBadRequest, "The request body must be a JSON object.");
  }
  // One pass over the members. The fields Purser governs must say one thing: with a key given
  // twice, Purser and the upstream could read different values.
  const char* required = c.surface == Surface::kCompletions  ? "prompt"
                         : c.surface == Surface::kEmbeddings ? "input"
                                                             : "messages";
  constexpr std::array<std::string_view, 5> kGoverned = {"model", "stream", "stream_options",
                                                         "max_tokens", "max_completion_tokens"};
  std::array<std::optional<JsonView>, kGoverned.size()> governed;
  std::optional<JsonView> metadata, content;
  for (const auto& [raw_key, value] : c.doc.members()) {
    // Keys written with escapes are decoded to be compared; plain ones (all real ones) are not.
    std::string decoded;
    std::string_view key = raw_key;
    if (raw_key.find('\\') != std::string_view::npos) {
      decoded = decodeJsonKey(raw_key);
      key = decoded;
    }
    if (key == required) content = value;
    if (key == "metadata") metadata = value;
    for (size_t i = 0; i < kGoverned.size(); ++i) {
      if (key != kGoverned[i]) continue;
      if (governed[i]) {
        return apiError(api, Fault::kBadRequest,
                        fmt::format("'{}' is given more than once", kGoverned[i]),
                        std::string(kGoverned[i]));
      }
      governed[i] = value;
    }
  }
  const auto& [model, stream, stream_options, max_tokens, max_completion_tokens] = governed;
  // The session a request belongs to (agents' runs, conversations): from the header, else the
  // body's metadata. It is stored with the usage and shown back, so it must be text.
  if (auto v = req.headers.get("x-purser-session")) {
    c.session_id = std::string(*v);
  } else if (metadata && metadata->isObject()) {
    if (auto id = metadata->get("session_id"); id && id->isString()) c.session_id = *id->string();
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
  if (auto v = req.headers.get("x-purser-session-budget")) {
    auto cap = sessionCap(*v, c.session_id);
    if (!cap) return apiError(api, Fault::kBadRequest, cap.error().message, "session_budget");
    c.session_cap = *cap;
  }
  const std::optional<std::string> name = model ? model->string() : std::nullopt;
  if (!name || name->empty()) {
    return apiError(api, Fault::kBadRequest, "you must provide a model parameter", "model");
  }
  c.model = *model;
  if (!content || (std::string_view(required) == "messages" && !content->isArray())) {
    return apiError(api, Fault::kBadRequest, fmt::format("'{}' is a required property", required),
                    required);
  }
  // What the APIs themselves refuse is refused here, not forwarded for an upstream to misread.
  if (auto wrong = shapeError(required, *content)) {
    return apiError(api, Fault::kBadRequest, wrong->first, wrong->second);
  }
  c.route = findRoute(std::string(*name));
  // A tenant's own route (a served model's) does not exist for anyone else.
  if (c.route == nullptr || (c.route->owned && !allowed(c.key, c.who, *c.route))) {
    return apiError(
        api, Fault::kNotFound,
        fmt::format("The model `{}` does not exist or you do not have access to it.", *name),
        "model", "model_not_found");
  }
  if (!allowed(c.key, c.who, *c.route)) {
    return apiError(api, Fault::kForbidden,
                    fmt::format("This key may not use the model `{}`.", *name), "model",
                    "model_not_allowed");
  }
  if (stream && !stream->isBool()) {
    return apiError(api, Fault::kBadRequest, "'stream' must be a boolean", "stream");
  }
  for (const auto& [f, v] : {std::pair{"max_completion_tokens", max_completion_tokens},
                             std::pair{"max_tokens", max_tokens}}) {
    if (v && !v->isNull() && !(v->integer().value_or(0) >= 1)) {
      return apiError(api, Fault::kBadRequest, fmt::format("'{}' must be an integer >= 1", f), f);
    }
  }
  c.stream = stream && *stream->boolean() && c.surface != Surface::kEmbeddings;
  c.stream_options = stream_options;
  if (c.stream && api == Api::kOpenAi && stream_options && stream_options->isObject()) {
    auto include = stream_options->get("include_usage");
    c.client_wants_usage = include && include->boolean().value_or(false);
  }
  // The worst case: the input (an upper bound from the size of the whole body, which also
  // counts tools and system prompts, without writing it out again) plus the output cap.
  c.input_estimate = ceilDiv(static_cast<int64_t>(c.raw.size()), 3);
  if (c.surface == Surface::kEmbeddings) {
    c.max_output = 0;
  } else {
    // The route's max_tokens caps the output and fills it in when the request sets none, so
    // the upstream can never produce more than was reserved.
    c.max_output = c.route->max_tokens;
    // When the request sets none: chat's current name (OpenAI's reasoning models refuse
    // max_tokens); completions and messages know only max_tokens.
    c.max_field = c.surface == Surface::kChat ? "max_completion_tokens" : "max_tokens";
    c.max_value = c.surface == Surface::kChat ? max_completion_tokens : max_tokens;
    for (const auto& [f, v] : {std::pair{"max_completion_tokens", max_completion_tokens},
                               std::pair{"max_tokens", max_tokens}}) {
      if (v && v->integer()) {
        c.max_field = f;
        c.max_value = v;
        c.max_output = std::clamp<int64_t>(*v->integer(), int64_t{0}, c.route->max_tokens);
        break;
      }
    }
  }
  if (auto v = req.headers.get("anthropic-version")) c.anthropic_version = std::string(*v);
  if (auto v = req.headers.get("anthropic-beta")) c.anthropic_beta = std::string(*v);
  return std::nullopt;
}

Gateway::Gateway(GatewayDeps deps, std::vector<std::unique_ptr<Provider>> providers,
                 std::vector<std::unique_ptr<Route>> routes)
    : impl_(std::make_shared<Impl>(deps, std::move(providers), std::move(routes))) {}
Gateway::~Gateway() = default;

Result<void> Gateway::reloadRoute(const std::string& alias, Strategy strategy,
                                  const std::vector<TargetSpec>& targets) {
  return impl_->reloadRoute(alias, strategy, targets);
}

Provider* Gateway::provider(const std::string& name) { return impl_->provider(name); }
std::vector<Provider*> Gateway::providers() { return impl_->providers(); }
const Route* Gateway::route(const std::string& alias) const { return impl_->route(alias); }
std::vector<const Route*> Gateway::routes() const { return impl_->routes(); }

Result<const Route*> Gateway::addRoute(std::unique_ptr<Route> route) {
  return impl_->addRoute(std::move(route));
}

std::vector<GatewayEvent> Gateway::events() const { return impl_->events(); }

void Gateway::pumpQueues() { impl_->pumpAll(); }

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
