// The metering API's records and reports: usage that ran elsewhere, recorded after the fact
// (POST /api/v1/usage), and a scope's usage events and spend, grouped.
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "api/admin_common.h"
#include "api/admin_handlers.h"
#include "common/json.h"
#include "gateway/api_shape.h"
#include "http/async.h"
#include "ledger/ledger_store.h"

namespace purser::api {

namespace asio = boost::asio;
using http::Request;
using http::Response;
using identity::Action;
using identity::Principal;

namespace admin {

namespace {

json eventJson(const ledger::UsageEvent& e);

json toJson(const ledger::UsageEvent& e) {
  json out = eventJson(e);
  // A tool call's server and tool, beside its model ("server.tool") and provider ("mcp:server").
  if (e.route == "mcp" && e.provider.starts_with("mcp:")) {
    out["server"] = e.provider.substr(4);
    out["tool"] = e.model;
  }
  return out;
}

json eventJson(const ledger::UsageEvent& e) {
  return {{"id", e.id},
          {"at", formatRfc3339(e.at)},
          {"tenant", e.tenant_id},
          {"team", e.team_id},
          {"user", e.user_id.empty() ? json(nullptr) : json(e.user_id)},
          {"service_account",
           e.service_account_id.empty() ? json(nullptr) : json(e.service_account_id)},
          {"key", e.key_id},
          {"session_id", e.session_id},
          {"kind", ledger::usageKind(e)},
          {"route", e.route},
          {"provider", e.provider},
          {"model", e.model},
          {"tokens",
           {{"input", e.tokens.input},
            {"output", e.tokens.output},
            {"cached_input", e.tokens.cached_input},
            {"cache_write", e.tokens.cache_write},
            {"reasoning", e.tokens.reasoning}}},
          {"cost", e.cost.toString()},
          {"overage", e.overage.toString()},
          {"latency_ms", e.latency_ms},
          {"ttft_ms", e.ttft_ms},
          {"status", e.status},
          {"estimated", e.estimated},
          {"recovered", e.recovered}};
}

// At most this many events in one POST /usage.
constexpr size_t kMaxRecordedEvents = 1000;

// An optional label of a recorded event (model, route, provider, session): 1 to 256 bytes, no
// control characters.
Result<std::string> optionalLabel(const json& body, const std::string& field) {
  auto v = PURSER_TRY_VALUE(optionalString(body, field));
  if (!v) return std::string();
  if (v->empty() || v->size() > 256 || std::any_of(v->begin(), v->end(), [](char c) {
        return static_cast<unsigned char>(c) < 32 || c == 127;
      })) {
    return fail(
        invalidArgument(
            fmt::format("\"{}\" must be 1 to 256 characters with no control characters", field))
            .withField(field));
  }
  return *v;
}

struct RecordedEvent {
  ledger::UsageEvent event;
  ledger::Charged payer;  // who pays: its scopes and the key chain it came with
  std::string model;      // what budgets are scoped to: the model, else the route
};

// One event of POST /usage: {id, at, owner: {kind, id}, key?, model?, route?, provider?,
// session_id?, tokens?, cost?, status?, latency_ms?, ttft_ms?}.
Result<RecordedEvent> readRecordedEvent(const Services& s, const Principal& who, const json& body,
                                        SystemTime now) {
  if (!body.is_object()) return fail(invalidArgument("each event must be a JSON object"));
  RecordedEvent out;
  ledger::UsageEvent& e = out.event;
  e.id = PURSER_TRY_VALUE(requiredString(body, "id"));
  if (!validClientId(e.id)) {
    return fail(invalidArgument("\"id\" must be 1 to 128 characters of letters, digits, '.', '_', "
                                "':' or '-'")
                    .withField("id"));
  }
  const std::string at_text = PURSER_TRY_VALUE(requiredString(body, "at"));
  auto at = parseRfc3339(at_text);
  if (!at) {
    return fail(invalidArgument(fmt::format("\"at\" must be an RFC 3339 time such as "
                                            "\"2026-11-02T14:05:00Z\", got \"{}\"",
                                            at_text))
                    .withField("at"));
  }
  if (*at > now) {
    return fail(invalidArgument("\"at\" is in the future; only usage that ran is recorded")
                    .withField("at"));
  }
  if (*at < parseRfc3339("2000-01-01T00:00:00Z").value()) {
    return fail(invalidArgument("\"at\" is before 2000").withField("at"));
  }
  e.at = *at;
  auto owner = body.find("owner");
  if (owner == body.end() || !owner->is_object()) {
    return fail(invalidArgument("\"owner\" is required: {\"kind\": \"user\" or "
                                "\"service_account\", \"id\": id or name}")
                    .withField("owner"));
  }
  const std::string kind_text = PURSER_TRY_VALUE(requiredString(*owner, "kind"));
  auto kind = identity::parseOwnerKind(kind_text);
  if (!kind) return fail(kind.error().withField("owner.kind"));
  const std::string named = PURSER_TRY_VALUE(requiredString(*owner, "id"));
  const bool user = *kind == identity::OwnerKind::kUser;
  const std::string owner_id =
      resolveScope(s, who,
                   {user ? ledger::ScopeKind::kUser : ledger::ScopeKind::kServiceAccount, named})
          .id;
  if (user) {
    auto u = s.directory.user(owner_id);
    if (!u || u->tenant_id.empty()) return fail(notFound("user", named, "owner.id"));
    e.tenant_id = u->tenant_id;
    e.team_id = u->team_id;
    e.user_id = u->id;
  } else {
    auto a = s.directory.serviceAccount(owner_id);
    if (!a) return fail(notFound("service account", named, "owner.id"));
    e.tenant_id = a->tenant_id;
    e.team_id = a->team_id;
    e.service_account_id = a->id;
  }
  ledger::Charged charged{e.tenant_id, e.team_id, e.user_id, e.service_account_id, {}};
  if (auto key = PURSER_TRY_VALUE(optionalString(body, "key")); key) {
    auto k = s.directory.key(*key);
    if (!k || k->owner_id != owner_id) {
      return fail(invalidArgument(fmt::format("key \"{}\" is not a key of the owner", *key))
                      .withField("key"));
    }
    e.key_id = k->id;
    for (const auto& c : s.directory.keyChain(k->id)) charged.key_chain.push_back(c.id);
  }
  e.model = PURSER_TRY_VALUE(optionalLabel(body, "model"));
  e.route = PURSER_TRY_VALUE(optionalLabel(body, "route"));
  e.provider = PURSER_TRY_VALUE(optionalLabel(body, "provider"));
  e.session_id = PURSER_TRY_VALUE(optionalLabel(body, "session_id"));
  PURSER_TRY(readTokens(body, &e.tokens));
  e.cost = PURSER_TRY_VALUE(eventCost(s, body, e));
  e.status =
      static_cast<int>(PURSER_TRY_VALUE(optionalInt(body, "status", 100, 599)).value_or(200));
  e.latency_ms = PURSER_TRY_VALUE(optionalInt(body, "latency_ms", 0, int64_t{1} << 40)).value_or(0);
  e.ttft_ms = PURSER_TRY_VALUE(optionalInt(body, "ttft_ms", 0, int64_t{1} << 40)).value_or(0);
  out.payer = std::move(charged);
  out.model = e.model.empty() ? e.route : e.model;
  return out;
}

// A usage or spend query as asked, and the tenant whose share of the store readers it takes.
struct UsageAsk {
  ledger::UsageQuery query;
  std::string reader_key;
};

// The scope and time range a usage or spend read asks for, authorized for the caller; else the
// answer that refuses it (not authenticated, a bad parameter, or a denial, audited).
asio::awaitable<std::expected<UsageAsk, Response>> usageQuery(const Services& s, Request& req) {
  auto authenticated = authenticate(s, req);
  if (!authenticated) co_return std::unexpected(problem(authenticated.error()));
  const Principal& who = *authenticated;
  auto scope_text = req.queryParam("scope");
  if (!scope_text) {
    co_return std::unexpected(problem(
        invalidArgument("\"scope\" is required, e.g. scope=team:01jb...").withField("scope")));
  }
  auto named = parseScopeParam(*scope_text);
  if (!named) co_return std::unexpected(problem(named.error()));
  const std::optional<ledger::Scope> scope = resolveScope(s, who, *named);
  auto target = scopeTarget(s, who, *scope, /*for_write=*/false);
  if (!target) co_return std::unexpected(problem(target.error()));
  if (auto allowed = identity::authorize(who, Action::kReadSpend, *target); !allowed) {
    co_return std::unexpected(co_await deny(s, who, allowed.error(), "spend.read", *scope_text));
  }
  ledger::UsageQuery q;
  q.scope_kind = scope->kind;
  q.scope_id = scope->id;
  for (const char* bound : {"from", "to"}) {
    if (auto v = req.queryParam(bound)) {
      auto t = parseRfc3339(*v);
      if (!t) co_return std::unexpected(problem(t.error().withField(bound)));
      (std::string_view(bound) == "from" ? q.from : q.to) = *t;
    }
  }
  if (auto limit = req.queryParam("limit")) {
    char* end = nullptr;
    const long long n = std::strtoll(limit->c_str(), &end, 10);
    if (limit->empty() || *end != '\0' || n < 1 || n > 10'000) {
      co_return std::unexpected(problem(
          invalidArgument("\"limit\" must be a whole number from 1 to 10000").withField("limit")));
    }
    q.limit = n;
  }
  co_return UsageAsk{q, who.tenant_id};
}

}  // namespace

// POST /api/v1/usage: usage that ran elsewhere, recorded after the fact — history brought from
// another gateway, or work metered outside Purser (platform admins). Each event is charged to its
// owner's wallets whose current window holds its time (older events are history only: spend
// reports, not budgets) and recorded once by id: a retry answers the ids already recorded. A bad
// event refuses the whole request, naming it; nothing is recorded.
asio::awaitable<Response> recordUsage(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  if (auto denied = identity::authorize(who, Action::kRecordUsage, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), "usage.record", "usage");
  }
  API_TRY(body, parseObject(req));
  auto list = body.find("events");
  if (list == body.end() || !list->is_array() || list->empty()) {
    co_return problem(400, "\"events\" must be a non-empty list of usage events", "events");
  }
  if (list->size() > kMaxRecordedEvents) {
    co_return problem(400,
                      fmt::format("at most {} events per request, got {}; send the rest in "
                                  "further requests",
                                  kMaxRecordedEvents, list->size()),
                      "events");
  }
  const SystemTime now = s.clock.now();
  std::vector<RecordedEvent> events;
  std::set<std::string> ids;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string at = fmt::format("events[{}]", i);
    auto read = readRecordedEvent(s, who, (*list)[i], now);
    if (!read) {
      co_return problem(read.error().withField(at));
    }
    if (!ids.insert(read->event.id).second) {
      co_return problem(400, fmt::format("id \"{}\" is given twice", read->event.id), at + ".id");
    }
    if (s.wallets.holds(read->event.id)) {
      co_return problem(Error(ErrorCode::kAlreadyExists,
                              fmt::format("id \"{}\" is an outstanding reservation's; settle it "
                                          "instead",
                                          read->event.id))
                            .withField(at + ".id"));
    }
    events.push_back(std::move(*read));
  }
  // The ids the durable record already has: a retry, or ids in use (the journal's latest
  // settlements included, once the store has caught up with it).
  if (auto caught =
          co_await http::runBlocking(s.readers, who.tenant_id, [&] { return s.meter.catchUp(); });
      !caught) {
    co_return problem(caught.error());
  }
  std::set<std::string> recorded;
  std::vector<std::string> asked;
  asked.reserve(events.size());
  for (const auto& r : events) asked.push_back(r.event.id);
  std::vector<ledger::Change> lookup;
  lookup.push_back(ledger::change(ledger::findRecordedEvents, std::move(asked), &recorded));
  auto looked = co_await record(s, std::move(lookup), {});
  if (!looked) co_return problem(unavailable("the ledger could not be read; try again"));
  // Charged in memory first (as every charge is), then written together; a failed write leaves
  // memory charged (never under-counting), and the retry records what this attempt charged.
  struct TenantTotal {
    int64_t events = 0;
    Money charged, overage;
    SystemTime from = SystemTime::max(), to = SystemTime::min();
    std::vector<ledger::Alert> alerts;
  };
  std::map<std::string, TenantTotal> tenants;
  std::vector<ledger::Change> writes;
  Money charged, overage;
  json alerts = json::array();
  Error failed;
  bool stopped = false;
  for (const auto& r : events) {
    if (recorded.contains(r.event.id)) continue;
    auto c = s.budget->record(r.payer, r.model, r.event);
    if (!c) {
      // Only a race with a reservation made since the check above: record what was charged.
      failed = c.error().withField("events");
      stopped = true;
      break;
    }
    writes.push_back(std::move(c->write));
    TenantTotal& t = tenants[r.event.tenant_id];
    ++t.events;
    t.charged = t.charged.add(c->charged).value_or(Money::max());
    t.overage = t.overage.add(c->overage).value_or(Money::max());
    t.from = std::min(t.from, r.event.at);
    t.to = std::max(t.to, r.event.at);
    charged = charged.add(c->charged).value_or(Money::max());
    overage = overage.add(c->overage).value_or(Money::max());
    for (const auto& a : c->alerts) {
      t.alerts.push_back(a);
      alerts.push_back({{"wallet", a.wallet_id},
                        {"threshold", a.threshold},
                        {"spent", a.spent.toString()},
                        {"limit", a.limit.toString()}});
    }
  }
  // The charges, then per tenant its alerts and one summary entry, in one transaction.
  std::vector<ledger::AuditEntry> entries;
  for (const auto& [tenant, t] : tenants) {
    const std::vector<ledger::AuditEntry> alerted =
        ledger::alertEntries(t.alerts, tenant, who.id, "system");
    entries.insert(entries.end(), alerted.begin(), alerted.end());
    entries.push_back(auditEntry(who, "usage.record", "tenant:" + tenant, "",
                                 writeJson(json{{"events", t.events},
                                                {"charged", t.charged.toString()},
                                                {"overage", t.overage.toString()},
                                                {"from", formatRfc3339(t.from)},
                                                {"to", formatRfc3339(t.to)}}),
                                 tenant));
  }
  const size_t recorded_now = writes.size();
  auto written = co_await record(s, std::move(writes), std::move(entries));
  if (!written) {
    spdlog::error("api: recorded usage not written: {}", written.error().message);
    co_return problem(unavailable(
        "the ledger could not record the usage; send the same events again (ids already recorded "
        "are skipped)"));
  }
  for (const auto& [tenant, t] : tenants) {
    if (!t.alerts.empty() && s.alerts != nullptr) s.alerts->post(tenant, t.alerts);
  }
  if (stopped) co_return problem(failed);
  co_return jsonResponse(
      200, {{"recorded", recorded_now},
            {"already_recorded", json(std::vector<std::string>(recorded.begin(), recorded.end()))},
            {"charged", charged.toString()},
            {"overage", overage.toString()},
            {"alerts", alerts}});
}

asio::awaitable<Response> listUsage(const Services& s, Request& req) {
  auto q = co_await usageQuery(s, req);
  if (!q) co_return std::move(q.error());
  API_TRY(events, co_await http::runBlocking(s.readers, q->reader_key,
                                             [&] { return s.meter.events(q->query); }));
  json items = json::array();
  for (const auto& e : events) items.push_back(toJson(e));
  co_return jsonResponse(200, listOf(std::move(items)));
}

asio::awaitable<Response> spend(const Services& s, Request& req) {
  auto q = co_await usageQuery(s, req);
  if (!q) co_return std::move(q.error());
  const std::string group_by = req.queryParam("group_by").value_or("day");
  auto rows = co_await http::runBlocking(s.readers, q->reader_key,
                                         [&] { return s.meter.spend(q->query, group_by); });
  if (!rows) co_return problem(rows.error().withField("group_by"));
  // Who a group is, beside its id.
  std::optional<ledger::ScopeKind> named;
  if (group_by == "team") named = ledger::ScopeKind::kTeam;
  if (group_by == "key") named = ledger::ScopeKind::kKey;
  json items = json::array();
  Money total, overage;
  for (const auto& r : *rows) {
    std::string name;
    if (group_by == "user") {
      name = scopeName(s, ledger::ScopeKind::kUser, r.group);
      if (name.empty()) name = scopeName(s, ledger::ScopeKind::kServiceAccount, r.group);
    } else if (named) {
      name = scopeName(s, *named, r.group);
    }
    items.push_back({{"group", r.group},
                     {"name", name.empty() ? json(nullptr) : json(name)},
                     {"cost", r.cost.toString()},
                     {"overage", r.overage.toString()},
                     {"requests", r.requests},
                     {"tokens",
                      {{"input", r.tokens.input},
                       {"output", r.tokens.output},
                       {"cached_input", r.tokens.cached_input},
                       {"cache_write", r.tokens.cache_write},
                       {"reasoning", r.tokens.reasoning}}}});
    total = total.add(r.cost).value_or(Money::max());
    overage = overage.add(r.overage).value_or(Money::max());
  }
  co_return jsonResponse(200, {{"group_by", group_by},
                               {"total", total.toString()},
                               {"overage", overage.toString()},
                               {"data", items}});
}

// GET /api/v1/sessions/{id}: one agent run — every model and tool call that named the session
// (x-purser-session, or a tool call's _meta), oldest first, with what each cost, its tokens,
// duration and status, and the run's totals. Only the calls the caller may read spend of are
// shown (a session id is the client's own word and two tenants may use the same one); a session
// with none of them is not found.
asio::awaitable<Response> showSession(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  const std::string id(req.param("id").value_or(""));
  if (id.empty() || id.size() > gateway::kMaxSessionBytes || !isValidUtf8(id)) {
    co_return problem(404, "session not found", "id");
  }
  constexpr int64_t kMaxCalls = 10'000;
  API_TRY(events, co_await http::runBlocking(s.readers, who.tenant_id, [&] {
            return s.meter.sessionEvents(id, kMaxCalls + 1);
          }));
  const bool truncated = static_cast<int64_t>(events.size()) > kMaxCalls;
  if (truncated) events.resize(kMaxCalls);
  json calls = json::array();
  Money cost;
  int64_t tool_calls = 0, model_calls = 0, errors = 0, duration_ms = 0;
  ledger::TokenCounts tokens;
  std::string first, last;
  for (const auto& e : events) {
    const std::string& owner = e.user_id.empty() ? e.service_account_id : e.user_id;
    if (!identity::authorize(who, Action::kReadSpend, {e.tenant_id, e.team_id, owner})) continue;
    json call = toJson(e);
    if (e.route == "mcp") {
      ++tool_calls;
    } else {
      ++model_calls;
    }
    if (e.status < 200 || e.status >= 300) ++errors;
    cost = cost.add(e.cost).value_or(Money::max());
    duration_ms += std::max<int64_t>(e.latency_ms, 0);
    tokens.input += e.tokens.input;
    tokens.output += e.tokens.output;
    tokens.cached_input += e.tokens.cached_input;
    tokens.cache_write += e.tokens.cache_write;
    tokens.reasoning += e.tokens.reasoning;
    if (first.empty()) first = formatRfc3339(e.at);
    last = formatRfc3339(e.at);
    calls.push_back(std::move(call));
  }
  if (calls.empty()) co_return problem(404, "session not found", "id");
  co_return jsonResponse(200, {{"id", id},
                               {"first_at", first},
                               {"last_at", last},
                               {"total",
                                {{"cost", cost.toString()},
                                 {"calls", calls.size()},
                                 {"model_calls", model_calls},
                                 {"tool_calls", tool_calls},
                                 {"errors", errors},
                                 {"duration_ms", duration_ms},
                                 {"tokens",
                                  {{"input", tokens.input},
                                   {"output", tokens.output},
                                   {"cached_input", tokens.cached_input},
                                   {"cache_write", tokens.cache_write},
                                   {"reasoning", tokens.reasoning}}}}},
                               {"truncated", truncated},
                               {"data", std::move(calls)}});
}

}  // namespace admin

}  // namespace purser::api
