// The metering API's reservations: held on the caller's wallets and rate limits before work runs
// elsewhere (ledger::Budget), then settled with what it cost or released; and the budget alerts
// that settling and recording usage raise (a webhook and the audit log).
#include <utility>

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

#include "api/admin_common.h"
#include "api/admin_handlers.h"
#include "common/duration.h"
#include "common/json.h"
#include "gateway/durable.h"
#include "http/async.h"
#include "identity/payer.h"
#include "ledger/budget.h"

namespace purser::api {

using nlohmann::json;

namespace asio = boost::asio;
using http::Method;
using http::Request;
using http::Response;
using identity::Action;
using identity::Principal;

namespace admin {

namespace {

// Which reservation, and may the caller act on it?
Result<std::pair<ledger::UsageEvent, int64_t>> ownReservation(const Services& s,
                                                              const Principal& who,
                                                              const std::string& id) {
  auto r = s.reservations->get(id);
  if (!r || !inReach(who, r->first.tenant_id)) {
    return fail(Error(ErrorCode::kNotFound, fmt::format("reservation \"{}\" not found", id))
                    .withField("id"));
  }
  const ledger::UsageEvent& d = r->first;
  const std::string owner = d.user_id.empty() ? d.service_account_id : d.user_id;
  if (owner != who.id)
    PURSER_TRY(identity::authorize(who, Action::kManageKey, {d.tenant_id, d.team_id, owner}));
  return *r;
}

}  // namespace

// An id a client chose for its reservation: printable, and safe in a URL path.
bool validClientId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
  });
}

// The optional "tokens" object of a settlement or a recorded event: {input, output, cached_input,
// cache_write, reasoning}.
Result<void> readTokens(const json& body, ledger::TokenCounts* tokens) {
  auto it = body.find("tokens");
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_object()) {
    return fail(invalidArgument("\"tokens\" must be an object of counts").withField("tokens"));
  }
  for (const auto& [name, field] :
       std::initializer_list<std::pair<const char*, int64_t ledger::TokenCounts::*>>{
           {"input", &ledger::TokenCounts::input},
           {"output", &ledger::TokenCounts::output},
           {"cached_input", &ledger::TokenCounts::cached_input},
           {"cache_write", &ledger::TokenCounts::cache_write},
           {"reasoning", &ledger::TokenCounts::reasoning}}) {
    auto v = optionalInt(*it, name, 0, int64_t{1} << 40);
    if (!v) return fail(v.error().withField("tokens"));
    tokens->*field = v->value_or(0);
  }
  return {};
}

// What an event costs: "cost" as given, or its tokens at the model's price.
Result<Money> eventCost(const Services& s, const json& body, const ledger::UsageEvent& event) {
  if (body.contains("cost")) {
    auto cost = PURSER_TRY_VALUE(requiredMoney(body, "cost"));
    if (cost.isNegative()) {
      return fail(invalidArgument("\"cost\" cannot be negative").withField("cost"));
    }
    return cost;
  }
  const ledger::TokenPrice* price = s.prices.find(event.provider, event.model);
  if (price == nullptr) {
    return fail(invalidArgument(
                    fmt::format("there is no price for model \"{}\"; give \"cost\"", event.model))
                    .withField("cost"));
  }
  auto priced = ledger::tokenCost(*price, event.tokens, Rounding::kHalfEven);
  if (!priced) return fail(priced.error().withField("cost"));
  return *priced;
}

asio::awaitable<Response> createReservation(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  if (who.tenant_id.empty()) {
    co_return problem(400, "platform admins have no budget to reserve on; use a tenant's key");
  }
  API_TRY(id, optionalString(body, "id"));
  if (id && !validClientId(*id)) {
    co_return problem(
        400, "\"id\" must be 1 to 128 characters of letters, digits, '.', '_', ':' or '-'", "id");
  }
  API_TRY(model, optionalString(body, "model"));
  API_TRY(provider, optionalString(body, "provider"));
  API_TRY(input_tokens, optionalInt(body, "input_tokens", 0, int64_t{1} << 40));
  API_TRY(max_tokens, optionalInt(body, "max_tokens", 0, int64_t{1} << 40));
  Money amount;
  if (body.contains("amount")) {
    API_TRY(explicit_amount, requiredMoney(body, "amount"));
    amount = explicit_amount;
  } else {
    // The worst case: the counted input plus max_tokens of output, at the model's prices.
    const ledger::TokenPrice* price =
        model ? s.prices.find(provider.value_or(""), *model) : nullptr;
    if (price == nullptr || !max_tokens) {
      co_return problem(
          400,
          model && price == nullptr
              ? fmt::format("there is no price for model \"{}\"; give \"amount\"", *model)
              : std::string("give \"amount\", or \"model\" with \"input_tokens\" "
                            "and \"max_tokens\""),
          "amount");
    }
    auto worst = ledger::tokenCost(
        *price, {.input = input_tokens.value_or(0), .output = *max_tokens}, Rounding::kCeil);
    if (!worst) co_return problem(worst.error().withField("amount"));
    amount = *worst;
  }
  if (amount.isNegative()) co_return problem(400, "\"amount\" cannot be negative", "amount");
  API_TRY(route, optionalString(body, "route"));
  API_TRY(session, optionalString(body, "session_id"));
  API_TRY(tokens, optionalInt(body, "tokens", 0, int64_t{1} << 40));
  API_TRY(lease_text, optionalString(body, "lease"));
  Duration lease = std::chrono::minutes(10);
  if (lease_text) {
    auto l = parseDuration(*lease_text);
    if (!l || *l < std::chrono::seconds(1) || *l > std::chrono::hours(24)) {
      co_return problem(400, "\"lease\" must be a duration from 1s to 24h, e.g. \"10m\"", "lease");
    }
    lease = *l;
  }
  const auto key = s.directory.key(who.key_id);
  if (!key) co_return problem(401, "invalid API key");
  const std::string model_name = model.value_or(route.value_or(""));
  if (!key->models.empty() &&
      std::find(key->models.begin(), key->models.end(), model_name) == key->models.end()) {
    const Error why = Error(ErrorCode::kPermissionDenied,
                            fmt::format("this key may not use model \"{}\"", model_name))
                          .withField("model");
    co_return co_await deny(s, who, why, "reservation.create", "key:" + key->id);
  }
  const int64_t token_estimate = tokens.value_or(input_tokens.value_or(0) + max_tokens.value_or(0));
  ledger::UsageEvent draft;
  draft.id = id.value_or(s.ids.next());
  draft.tenant_id = who.tenant_id;
  draft.team_id = who.team_id;
  (who.kind == identity::OwnerKind::kUser ? draft.user_id : draft.service_account_id) = who.id;
  draft.key_id = key->id;
  draft.session_id = session.value_or("");
  draft.route = route.value_or("");
  draft.model = model.value_or("");
  draft.provider = provider.value_or("");
  ledger::Budget& budget = *s.budget;
  ledger::RateDecision rate;
  // A client-chosen id is looked up in the store (ids are unique across the durable record):
  // off the worker, like every store read. A fresh id needs no read.
  auto held = co_await http::runBlocking(id ? s.readers : nullptr, who.tenant_id, [&] {
    return budget.hold({.payer = identity::payerOf(who, s.directory),
                        .model = model_name,
                        .draft = draft,
                        .amount = amount,
                        .tokens = token_estimate,
                        .lease = lease,
                        .options = {.external = true,
                                    .token_estimate = token_estimate,
                                    .fresh_id = !id.has_value()}},
                       &rate);
  });
  if (!held && !rate.allowed) {
    Error why(ErrorCode::kResourceExhausted,
              rate.never ? fmt::format("this request needs more than the key's whole limit of {} "
                                       "per minute ({})",
                                       rate.limit, rate.key)
                         : fmt::format("rate limit {} of {} per minute reached; retry in {}",
                                       rate.key, rate.limit, formatDuration(rate.retry_after)));
    auto entries = denialEntries(s, who, "rate.deny", "key:" + key->id,
                                 writeJson(json{{"bucket", rate.key}, {"limit", rate.limit}}));
    if (!entries.empty()) {
      (void)co_await record(s, {}, std::move(entries));
    }
    Response r = problem(why);
    if (!rate.never) {
      const auto secs = std::chrono::ceil<std::chrono::seconds>(rate.retry_after).count();
      r.headers.add("Retry-After", std::to_string(std::max<int64_t>(1, secs)));
    }
    co_return r;
  }
  if (!held) {
    if (held.error().code == ErrorCode::kResourceExhausted) {
      co_return co_await deny(s, who, held.error(), "budget.deny", "event:" + draft.id);
    }
    co_return problem(held.error());
  }
  if (s.meter.syncsEachRecord() && !co_await gateway::durable(s.meter, held->journalSequence())) {
    co_return problem(unavailable("the ledger could not make the reservation durable; try again"));
  }
  const std::vector<std::string> chain = held->wallets();
  held->detach();  // settled or released by id, through this API
  s.reservations->put(draft, token_estimate);
  co_return jsonResponse(201, {{"id", draft.id},
                               {"amount", amount.toString()},
                               {"wallets", chain},
                               {"lease_expires_at", formatRfc3339(s.clock.now() + lease)}});
}

asio::awaitable<Response> settleReservation(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  const std::string id(*req.param("id"));
  API_TRY(body, parseObject(req));
  API_TRY(own, ownReservation(s, who, id));
  auto [event, estimate] = own;
  if (auto read = readTokens(body, &event.tokens); !read) co_return problem(read.error());
  API_TRY(status, optionalInt(body, "status", 0, 999));
  API_TRY(latency, optionalInt(body, "latency_ms", 0, int64_t{1} << 40));
  API_TRY(ttft, optionalInt(body, "ttft_ms", 0, int64_t{1} << 40));
  API_TRY(provider, optionalString(body, "provider"));
  API_TRY(estimated, optionalBool(body, "estimated"));
  if (provider) event.provider = *provider;
  API_TRY(cost, eventCost(s, body, event));
  event.cost = cost;
  event.status = static_cast<int>(status.value_or(200));
  event.latency_ms = latency.value_or(0);
  event.ttft_ms = ttft.value_or(0);
  event.estimated = estimated.value_or(false);
  event.at = s.clock.now();
  // The tokens-per-minute limits took the estimate at reservation; the settlement reconciles.
  ledger::Budget& budget = *s.budget;
  ledger::Charged charged{
      event.tenant_id, event.team_id, event.user_id, event.service_account_id, {}};
  auto settled = budget.settle(identity::payerOf(std::move(charged), event.key_id, s.directory),
                               event.model.empty() ? event.route : event.model, event, estimate);
  if (!settled) co_return problem(settled.error());
  if (!settled->duplicate && s.meter.syncsEachRecord() &&
      !co_await gateway::durable(s.meter, settled->journal_sequence)) {
    co_return problem(
        unavailable("the ledger could not make the usage durable; it will be "
                    "recovered at the next start"));
  }
  json alerts = json::array();
  for (const auto& a : settled->alerts) {
    alerts.push_back({{"wallet", a.wallet_id},
                      {"threshold", a.threshold},
                      {"spent", a.spent.toString()},
                      {"limit", a.limit.toString()}});
  }
  if (!settled->alerts.empty()) {
    if (s.alerts != nullptr) s.alerts->post(event.tenant_id, settled->alerts);
    (void)co_await record(s, {},
                          ledger::alertEntries(settled->alerts, event.tenant_id, who.id,
                                               std::string(identity::roleName(who.role))));
  }
  co_return jsonResponse(200, {{"id", id},
                               {"charged", settled->charged.toString()},
                               {"overage", settled->overage.toString()},
                               {"duplicate", settled->duplicate},
                               {"wallets", settled->wallet_ids},
                               {"alerts", alerts}});
}

asio::awaitable<Response> releaseReservation(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  const std::string id(*req.param("id"));
  API_TRY(own, ownReservation(s, who, id));
  (void)own;
  auto released = s.budget->release(id);
  if (!released) co_return problem(released.error().withField("id"));
  s.reservations->erase(id);
  co_return jsonResponse(200, {{"id", id}, {"released", true}});
}

}  // namespace admin

}  // namespace purser::api
