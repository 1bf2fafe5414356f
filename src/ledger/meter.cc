#include "ledger/meter.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <memory>

namespace purser::ledger {

namespace {

using nlohmann::json;

json toJson(const UsageEvent& e) {
  return {{"id", e.id},
          {"at_ms", unixMillis(e.at)},
          {"tenant_id", e.tenant_id},
          {"team_id", e.team_id},
          {"user_id", e.user_id},
          {"service_account_id", e.service_account_id},
          {"key_id", e.key_id},
          {"session_id", e.session_id},
          {"route", e.route},
          {"provider", e.provider},
          {"model", e.model}};
}

UsageEvent fromJson(const json& j) {
  UsageEvent e;
  e.id = j.value("id", "");
  e.at = SystemTime(std::chrono::milliseconds(j.value("at_ms", int64_t{0})));
  e.tenant_id = j.value("tenant_id", "");
  e.team_id = j.value("team_id", "");
  e.user_id = j.value("user_id", "");
  e.service_account_id = j.value("service_account_id", "");
  e.key_id = j.value("key_id", "");
  e.session_id = j.value("session_id", "");
  e.route = j.value("route", "");
  e.provider = j.value("provider", "");
  e.model = j.value("model", "");
  return e;
}

constexpr const char* kEventColumns =
    "id, at_ms, tenant_id, team_id, user_id, service_account_id, key_id, session_id, route,"
    " provider, model, input_tokens, output_tokens, cached_input_tokens, cache_write_tokens,"
    " reasoning_tokens, cost_nanos, latency_ms, ttft_ms, status, estimated, recovered";

Result<void> insertEvent(store::Tx& tx, const UsageEvent& e,
                         const std::vector<std::string>& wallets) {
  PURSER_TRY(tx.exec(
      fmt::format("INSERT INTO usage_events ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,"
                  " $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)",
                  kEventColumns),
      {e.id,
       unixMillis(e.at),
       e.tenant_id,
       e.team_id,
       e.user_id,
       e.service_account_id,
       e.key_id,
       e.session_id,
       e.route,
       e.provider,
       e.model,
       e.tokens.input,
       e.tokens.output,
       e.tokens.cached_input,
       e.tokens.cache_write,
       e.tokens.reasoning,
       e.cost.nanos(),
       e.latency_ms,
       e.ttft_ms,
       int64_t{e.status},
       int64_t{e.estimated ? 1 : 0},
       int64_t{e.recovered ? 1 : 0}}));
  for (const auto& w : wallets) {
    PURSER_TRY(
        tx.exec("INSERT INTO usage_charges (event_id, wallet_id, at_ms, cost_nanos) VALUES ($1, "
                "$2, $3, $4)",
                {e.id, w, unixMillis(e.at), e.cost.nanos()}));
  }
  PURSER_TRY(tx.exec("DELETE FROM usage_intents WHERE event_id = $1", {e.id}));
  return {};
}

UsageEvent eventFromRow(const store::Row& r) {
  UsageEvent e;
  e.id = r.getText(0);
  e.at = SystemTime(std::chrono::milliseconds(r.getInt(1)));
  e.tenant_id = r.getText(2);
  e.team_id = r.getText(3);
  e.user_id = r.getText(4);
  e.service_account_id = r.getText(5);
  e.key_id = r.getText(6);
  e.session_id = r.getText(7);
  e.route = r.getText(8);
  e.provider = r.getText(9);
  e.model = r.getText(10);
  e.tokens = {r.getInt(11), r.getInt(12), r.getInt(13), r.getInt(14), r.getInt(15)};
  e.cost = Money::fromNanos(r.getInt(16));
  e.latency_ms = r.getInt(17);
  e.ttft_ms = r.getInt(18);
  e.status = static_cast<int>(r.getInt(19));
  e.estimated = r.getInt(20) != 0;
  e.recovered = r.getInt(21) != 0;
  return e;
}

std::string scopeColumn(ScopeKind kind) {
  switch (kind) {
    case ScopeKind::kTenant:
      return "tenant_id";
    case ScopeKind::kTeam:
      return "team_id";
    case ScopeKind::kUser:
      return "user_id";
    case ScopeKind::kServiceAccount:
      return "service_account_id";
    case ScopeKind::kKey:
      return "key_id";
  }
  return "tenant_id";
}

int64_t toMs(SystemTime t, int64_t fallback) {
  if (t == SystemTime::min() || t == SystemTime::max()) return fallback;
  return unixMillis(t);
}

}  // namespace

Result<std::string> spendGroupColumn(std::string_view group_by, store::Dialect dialect) {
  if (group_by == "user")
    return std::string("CASE WHEN user_id != '' THEN user_id ELSE service_account_id END");
  if (group_by == "team") return std::string("team_id");
  if (group_by == "key") return std::string("key_id");
  if (group_by == "model") return std::string("model");
  if (group_by == "route") return std::string("route");
  if (group_by == "session") return std::string("session_id");
  // Time buckets in UTC: "2026-11-29", "2026-11-29T18:00", "2026-11-29T18:04".
  struct Bucket {
    std::string_view name, sqlite, postgres;
  };
  static constexpr Bucket kBuckets[] = {
      {"day", "%Y-%m-%d", "YYYY-MM-DD"},
      {"hour", "%Y-%m-%dT%H:00", "YYYY-MM-DD\"T\"HH24:00"},
      {"minute", "%Y-%m-%dT%H:%M", "YYYY-MM-DD\"T\"HH24:MI"},
  };
  for (const Bucket& b : kBuckets) {
    if (group_by != b.name) continue;
    return dialect == store::Dialect::kSqlite
               ? fmt::format("strftime('{}', at_ms / 1000, 'unixepoch')", b.sqlite)
               : fmt::format("to_char(to_timestamp(at_ms / 1000.0) AT TIME ZONE 'UTC', '{}')",
                             b.postgres);
  }
  return fail(invalidArgument(
      fmt::format("cannot group by \"{}\"; expected user, team, key, model, route, session, "
                  "day, hour or minute",
                  group_by)));
}

void Meter::reserve(UsageEvent draft, std::vector<std::string> wallet_ids, Money amount,
                    Duration lease, std::function<void(Result<void>)> done) {
  auto reserved = book_.reserve({draft.id, wallet_ids, amount, lease});
  if (!reserved) {
    done(fail(reserved.error()));
    return;
  }
  const std::string event_json = toJson(draft).dump();
  const std::string wallets_json = json(wallet_ids).dump();
  const int64_t at_ms = unixMillis(clock_.now());
  auto id = draft.id;
  store_.writeAsync(
      [id, event_json, wallets_json, at_ms, amount](store::Tx& tx) -> Result<void> {
        PURSER_TRY(
            tx.exec("INSERT INTO usage_intents (event_id, at_ms, amount_nanos, wallets, event)"
                    " VALUES ($1, $2, $3, $4, $5)",
                    {id, at_ms, amount.nanos(), wallets_json, event_json}));
        return {};
      },
      [this, id, done = std::move(done)](Result<void> r) {
        if (!r) {
          // Without its intent the work must not run: give the hold back.
          (void)book_.release(id);
          spdlog::error("ledger: could not record the intent of {}: {}", id, r.error().message);
          done(fail(unavailable("the ledger could not record the reservation; try again")));
          return;
        }
        done({});
      });
}

void Meter::settle(UsageEvent event, std::function<void(Result<Settlement>)> done) {
  if (event.at == SystemTime()) event.at = clock_.now();
  auto settled = book_.settle(event.id, event.cost);
  if (!settled) {
    done(fail(settled.error()));
    return;
  }
  if (settled->duplicate) {
    done(std::move(*settled));
    return;
  }
  auto shared = std::make_shared<Settlement>(std::move(*settled));
  store_.writeAsync(
      [event, shared](store::Tx& tx) { return insertEvent(tx, event, shared->wallet_ids); },
      [shared, id = event.id, done = std::move(done)](Result<void> r) {
        if (!r) {
          // Charged in memory, not on disk: the intent stays, so a restart recovers it.
          spdlog::error("ledger: could not record usage event {}: {}", id, r.error().message);
          done(fail(unavailable("the ledger could not record the usage; it will be recovered")));
          return;
        }
        done(std::move(*shared));
      });
}

Result<Meter::Charge> Meter::charge(UsageEvent event, std::vector<std::string> wallet_ids) {
  if (event.at == SystemTime()) event.at = clock_.now();
  auto charged = PURSER_TRY_VALUE(book_.charge(event.id, wallet_ids, event.cost));
  if (charged.duplicate) return Charge{[](store::Tx&) -> Result<void> { return {}; }, {}};
  return Charge{[event = std::move(event), wallets = std::move(charged.wallet_ids)](store::Tx& tx) {
                  return insertEvent(tx, event, wallets);
                },
                std::move(charged.alerts)};
}

Result<void> Meter::release(const std::string& event_id) {
  PURSER_TRY(book_.release(event_id));
  store_.writeAsync(
      [event_id](store::Tx& tx) -> Result<void> {
        PURSER_TRY(tx.exec("DELETE FROM usage_intents WHERE event_id = $1", {event_id}));
        return {};
      },
      [event_id](Result<void> r) {
        if (!r) spdlog::warn("ledger: intent {} not removed: {}", event_id, r.error().message);
      });
  return {};
}

Result<int> Meter::recover() {
  store::Rows intents;
  PURSER_TRY(store_.read([&](store::Tx& tx) -> Result<void> {
    intents = PURSER_TRY_VALUE(tx.query(
        "SELECT event_id, amount_nanos, wallets, event FROM usage_intents ORDER BY at_ms"));
    return {};
  }));
  int recovered = 0;
  for (const auto& row : intents) {
    const auto event_json = json::parse(row.getText(3), nullptr, false);
    const auto wallets_json = json::parse(row.getText(2), nullptr, false);
    if (!event_json.is_object() || !wallets_json.is_array()) {
      return fail(Error(ErrorCode::kDataLoss,
                        fmt::format("the intent of event {} is unreadable", row.getText(0))));
    }
    UsageEvent e = fromJson(event_json);
    e.id = row.getText(0);
    e.at = clock_.now();
    e.cost = Money::fromNanos(row.getInt(1));
    e.estimated = true;
    e.recovered = true;
    std::vector<std::string> wallets;
    for (const auto& w : wallets_json) wallets.push_back(w.get<std::string>());
    PURSER_TRY(store_.write([&](store::Tx& tx) { return insertEvent(tx, e, wallets); }));
    (void)book_.charge(e.id, wallets, e.cost);
    spdlog::warn("ledger: recovered event {} cut off by a restart; charged its reservation of {}",
                 e.id, e.cost.toString());
    ++recovered;
  }
  return recovered;
}

Result<std::vector<UsageEvent>> Meter::events(const UsageQuery& q) {
  std::vector<UsageEvent> out;
  PURSER_TRY(store_.read([&](store::Tx& tx) -> Result<void> {
    auto rows = PURSER_TRY_VALUE(tx.query(
        fmt::format("SELECT {} FROM usage_events WHERE {} = $1 AND at_ms >= $2 AND at_ms < $3"
                    " ORDER BY at_ms, id LIMIT {}",
                    kEventColumns, scopeColumn(q.scope_kind), std::max<int64_t>(1, q.limit)),
        {q.scope_id, toMs(q.from, INT64_MIN), toMs(q.to, INT64_MAX)}));
    for (const auto& r : rows) out.push_back(eventFromRow(r));
    return {};
  }));
  return out;
}

Result<std::vector<SpendRow>> Meter::spend(const UsageQuery& q, std::string_view group_by) {
  const std::string group = PURSER_TRY_VALUE(spendGroupColumn(group_by, store_.dialect()));
  std::vector<SpendRow> out;
  PURSER_TRY(store_.read([&](store::Tx& tx) -> Result<void> {
    auto rows = PURSER_TRY_VALUE(tx.query(
        fmt::format("SELECT {0} AS g, SUM(cost_nanos), COUNT(*), SUM(input_tokens),"
                    " SUM(output_tokens), SUM(cached_input_tokens), SUM(cache_write_tokens),"
                    " SUM(reasoning_tokens) FROM usage_events"
                    " WHERE {1} = $1 AND at_ms >= $2 AND at_ms < $3 GROUP BY g ORDER BY g",
                    group, scopeColumn(q.scope_kind)),
        {q.scope_id, toMs(q.from, INT64_MIN), toMs(q.to, INT64_MAX)}));
    for (const auto& r : rows) {
      SpendRow row;
      row.group = r.getText(0);
      row.cost = Money::fromNanos(r.getInt(1));
      row.requests = r.getInt(2);
      row.tokens = {r.getInt(3), r.getInt(4), r.getInt(5), r.getInt(6), r.getInt(7)};
      out.push_back(std::move(row));
    }
    return {};
  }));
  return out;
}

}  // namespace purser::ledger
