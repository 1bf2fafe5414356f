// Budgets through the admin API: wallets (a limit on a scope's spend per period, optionally for
// one model) and rate limits (requests and tokens per minute), created and listed within what the
// caller may see.
#include <utility>

#include <fmt/format.h>

#include <optional>

#include "api/admin_common.h"
#include "api/admin_handlers.h"
#include "common/json.h"
#include "ledger/ledger_store.h"

namespace purser::api {

namespace asio = boost::asio;
using http::Request;
using http::Response;
using identity::Action;

namespace admin {

namespace {

std::string percent(int64_t basis_points) {
  return fmt::format("{}.{:02}", basis_points / 100, basis_points % 100);
}

json toJson(const ledger::WalletStatus& w) {
  const auto& s = w.spec;
  json window = nullptr;
  if (s.period != ledger::Period::kNone) {
    window = {{"start", formatRfc3339(w.window.start)}, {"end", formatRfc3339(w.window.end)}};
  }
  return {{"id", s.id},
          {"tenant", s.tenant_id},
          {"scope", {{"kind", ledger::scopeKindName(s.scope.kind)}, {"id", s.scope.id}}},
          {"limit", s.limit.toString()},
          {"period", ledger::periodName(s.period)},
          {"timezone", s.zone.name()},
          {"hard", s.hard},
          {"alert_at", s.alert_at},
          {"model", s.model.empty() ? json(nullptr) : json(s.model)},
          {"window", window},
          {"spent", w.spent.toString()},
          {"reserved", w.reserved.toString()},
          {"remaining", w.remaining.toString()},
          {"percent_used", percent(w.used_basis_points)}};
}

json toJson(const ledger::RateLimitSpec& l) {
  return {{"id", l.id},
          {"tenant", l.tenant_id},
          {"scope", {{"kind", ledger::scopeKindName(l.scope.kind)}, {"id", l.scope.id}}},
          {"model", l.model.empty() ? json(nullptr) : json(l.model)},
          {"rpm", l.rpm},
          {"tpm", l.tpm}};
}

// GET on a collection of scoped things (wallets, rate limits): optionally narrowed to one scope
// (which the caller must be allowed to read), else everything the caller may see.
template <typename Fetch, typename ScopeOf, typename View>
asio::awaitable<Response> scopedList(const Services& s, Request& req, const char* read_action,
                                     Fetch fetch, ScopeOf scope_of, View view) {
  API_TRY(who, authenticate(s, req));
  std::optional<ledger::Scope> only;
  if (auto scope_text = req.queryParam("scope")) {
    API_TRY(named, parseScopeParam(*scope_text));
    const ledger::Scope scope = resolveScope(s, who, named);
    API_TRY(target, scopeTarget(s, who, scope, /*for_write=*/false));
    if (auto denied = identity::authorize(who, Action::kReadWallet, target); !denied) {
      co_return co_await deny(s, who, denied.error(), read_action, *scope_text);
    }
    only = scope;
  }
  json items = json::array();
  for (const auto& item : fetch(s)) {
    const ledger::Scope& scope = scope_of(item);
    if (only && !(scope == *only)) continue;
    auto target = scopeTarget(s, who, scope, false);
    if (!target || !identity::canSee(who, Action::kReadWallet, *target)) continue;
    json shown = view(item);
    shown["scope"]["name"] = scopeName(s, scope.kind, scope.id);
    items.push_back(std::move(shown));
  }
  co_return jsonResponse(200, listOf(std::move(items)));
}

}  // namespace

asio::awaitable<Response> createWallet(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  API_TRY(named, parseScopeObject(body));
  const ledger::Scope scope = resolveScope(s, who, named);
  API_TRY(target, scopeTarget(s, who, scope, /*for_write=*/true));
  if (auto denied = identity::authorize(who, Action::kWriteWallet, target); !denied) {
    co_return co_await deny(s, who, denied.error(), "wallet.create",
                            std::string(ledger::scopeKindName(scope.kind)) + ":" + scope.id);
  }
  API_TRY(limit, requiredMoney(body, "limit"));
  if (limit.isNegative()) co_return problem(400, "\"limit\" cannot be negative", "limit");
  API_TRY(period_text, optionalString(body, "period"));
  API_TRY(zone_text, optionalString(body, "timezone"));
  API_TRY(hard, optionalBool(body, "hard"));
  API_TRY(model, optionalString(body, "model"));
  ledger::WalletSpec w;
  w.id = s.ids.next();
  w.tenant_id = target.tenant_id;
  w.scope = scope;
  w.limit = limit;
  if (period_text) {
    auto p = ledger::parsePeriod(*period_text);
    if (!p) co_return problem(p.error().withField("period"));
    w.period = *p;
  }
  if (zone_text) {
    auto z = ledger::TimeZone::find(*zone_text);
    if (!z) co_return problem(z.error().withField("timezone"));
    w.zone = *z;
  }
  w.hard = hard.value_or(true);
  w.model = model.value_or("");
  w.alert_at = {50, 80, 100};
  if (auto it = body.find("alert_at"); it != body.end() && !it->is_null()) {
    if (!it->is_array())
      co_return problem(400, "\"alert_at\" must be a list of percents", "alert_at");
    w.alert_at.clear();
    for (const auto& v : *it) {
      const std::optional<int64_t> percent = jsonInt(v);
      if (!percent) {
        co_return problem(400, "\"alert_at\" must be a list of whole percents", "alert_at");
      }
      if (*percent < 1 || *percent > 1000) {
        co_return problem(400,
                          fmt::format("\"alert_at\": {} is outside 1..1000 percent", writeJson(v)),
                          "alert_at");
      }
      w.alert_at.push_back(static_cast<int>(*percent));
    }
  }
  if (auto valid = ledger::validateWalletSpec(w); !valid) co_return problem(valid.error());
  for (const auto& existing : s.wallets.all()) {
    if (existing.spec.scope == w.scope && existing.spec.model == w.model) {
      co_return problem(
          409,
          fmt::format("{} {} already has a wallet{} ({})", ledger::scopeKindName(w.scope.kind),
                      w.scope.id, w.model.empty() ? "" : " for model " + w.model, existing.spec.id),
          "scope");
    }
  }
  ledger::WalletStatus fresh;
  fresh.spec = w;
  fresh.window = ledger::periodWindow(w.period, w.zone, s.clock.now());
  fresh.remaining = w.limit;
  auto done = co_await commitAudited(s, ledger::change(ledger::insertWallet, w, now(s)),
                                     auditEntry(who, "wallet.create", "wallet:" + w.id, "",
                                                writeJson(toJson(fresh)), w.tenant_id));
  if (!done) {
    if (done.error().code == ErrorCode::kAlreadyExists) {
      co_return problem(409, "this scope already has a wallet for that model", "scope");
    }
    co_return problem(done.error());
  }
  if (auto put = s.wallets.put(w); !put) co_return problem(put.error());
  API_TRY(status, s.wallets.status(w.id));
  co_return jsonResponse(201, toJson(status));
}

// GET on a collection of scoped things (wallets, rate limits): optionally narrowed to one scope

asio::awaitable<Response> listWallets(const Services& s, Request& req) {
  return scopedList(
      s, req, "wallet.read", [](const Services& s) { return s.wallets.all(); },
      [](const ledger::WalletStatus& w) -> const ledger::Scope& { return w.spec.scope; },
      [](const ledger::WalletStatus& w) { return toJson(w); });
}

asio::awaitable<Response> createRateLimit(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  API_TRY(named, parseScopeObject(body));
  const ledger::Scope scope = resolveScope(s, who, named);
  API_TRY(target, scopeTarget(s, who, scope, /*for_write=*/true));
  if (auto denied = identity::authorize(who, Action::kWriteWallet, target); !denied) {
    co_return co_await deny(s, who, denied.error(), "rate_limit.create",
                            std::string(ledger::scopeKindName(scope.kind)) + ":" + scope.id);
  }
  API_TRY(model, optionalString(body, "model"));
  API_TRY(rpm, optionalInt(body, "rpm", 0, 1'000'000'000));
  API_TRY(tpm, optionalInt(body, "tpm", 0, int64_t{1} << 40));
  if (rpm.value_or(0) == 0 && tpm.value_or(0) == 0) {
    co_return problem(400, "give \"rpm\", \"tpm\" or both (per minute, above zero)", "rpm");
  }
  ledger::RateLimitSpec l{s.ids.next(),       target.tenant_id, scope,
                          model.value_or(""), rpm.value_or(0),  tpm.value_or(0)};
  for (const auto& existing : s.rate_limits.all()) {
    if (existing.scope == l.scope && existing.model == l.model) {
      co_return problem(409,
                        fmt::format("this scope already has a rate limit{} ({})",
                                    l.model.empty() ? "" : " for model " + l.model, existing.id),
                        "scope");
    }
  }
  auto done = co_await commitAudited(s, ledger::change(ledger::insertRateLimit, l, now(s)),
                                     auditEntry(who, "rate_limit.create", "rate_limit:" + l.id, "",
                                                writeJson(toJson(l)), l.tenant_id));
  if (!done) co_return problem(done.error().withField("scope"));
  s.rate_limits.put(l);
  co_return jsonResponse(201, toJson(l));
}

asio::awaitable<Response> listRateLimits(const Services& s, Request& req) {
  return scopedList(
      s, req, "rate_limit.read", [](const Services& s) { return s.rate_limits.all(); },
      [](const ledger::RateLimitSpec& l) -> const ledger::Scope& { return l.scope; },
      [](const ledger::RateLimitSpec& l) { return toJson(l); });
}

}  // namespace admin

}  // namespace purser::api
