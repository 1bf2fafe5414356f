#include "ledger/meter.h"
#include "common/json.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <memory>

namespace purser::ledger {

namespace {

using nlohmann::json;

// The draft kept in an intent, and how its work runs.
json intentJson(const UsageEvent& e, const ReserveOptions& options) {
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
          {"model", e.model},
          {"external", options.external},
          {"token_estimate", options.token_estimate}};
}

std::string textAt(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t intAt(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

UsageEvent draftFromJson(const json& j) {
  UsageEvent e;
  e.id = textAt(j, "id");
  e.at = SystemTime(std::chrono::milliseconds(intAt(j, "at_ms")));
  e.tenant_id = textAt(j, "tenant_id");
  e.team_id = textAt(j, "team_id");
  e.user_id = textAt(j, "user_id");
  e.service_account_id = textAt(j, "service_account_id");
  e.key_id = textAt(j, "key_id");
  e.session_id = textAt(j, "session_id");
  e.route = textAt(j, "route");
  e.provider = textAt(j, "provider");
  e.model = textAt(j, "model");
  return e;
}

constexpr const char* kEventColumns =
    "id, at_ms, tenant_id, team_id, user_id, service_account_id, key_id, session_id, route,"
    " provider, model, input_tokens, output_tokens, cached_input_tokens, cache_write_tokens,"
    " reasoning_tokens, cost_nanos, latency_ms, ttft_ms, status, estimated, recovered,"
    " overage_nanos";

Result<void> insertEvent(store::Tx& tx, const UsageEvent& e,
                         const std::vector<std::string>& wallets) {
  PURSER_TRY(tx.exec(
      fmt::format("INSERT INTO usage_events ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,"
                  " $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)",
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
       int64_t{e.recovered ? 1 : 0},
       e.overage.nanos()}));
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
  e.overage = Money::fromNanos(r.getInt(22));
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
                    Duration lease, std::function<void(Result<void>)> done,
                    ReserveOptions options) {
  auto reserved = book_.reserve({draft.id, wallet_ids, amount, lease});
  if (!reserved) {
    done(fail(reserved.error()));
    return;
  }
  const std::string event_json = writeJson(intentJson(draft, options));
  const std::string wallets_json = writeJson(json(wallet_ids));
  const int64_t at_ms = unixMillis(clock_.now());
  const int64_t expires_ms =
      at_ms + std::chrono::duration_cast<std::chrono::milliseconds>(lease).count();
  auto id = draft.id;
  store_.writeAsync(
      [id, event_json, wallets_json, at_ms, expires_ms, amount,
       external = options.external](store::Tx& tx) -> Result<void> {
        // Ids are unique across the durable record, not only across what memory remembers.
        auto used =
            PURSER_TRY_VALUE(tx.query("SELECT 1 FROM usage_events WHERE id = $1 LIMIT 1", {id}));
        if (!used.empty()) {
          return fail(Error(ErrorCode::kAlreadyExists,
                            fmt::format("a usage event with id \"{}\" already exists", id)));
        }
        PURSER_TRY(
            tx.exec("INSERT INTO usage_intents (event_id, at_ms, amount_nanos, wallets, event,"
                    " expires_at_ms, external) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    {id, at_ms, amount.nanos(), wallets_json, event_json, expires_ms,
                     int64_t{external ? 1 : 0}}));
        return {};
      },
      [this, id, done = std::move(done)](Result<void> r) {
        if (!r) {
          // Without its intent the work must not run: give the hold back.
          (void)book_.release(id);
          if (r.error().code == ErrorCode::kAlreadyExists) {
            done(fail(Error(ErrorCode::kAlreadyExists,
                            fmt::format("id \"{}\" is already used by another reservation or usage "
                                        "event; choose another",
                                        id))
                          .withField("id")));
            return;
          }
          spdlog::error("ledger: could not record the intent of {}: {}", id, r.error().message);
          done(fail(unavailable("the ledger could not record the reservation; try again")));
          return;
        }
        done({});
      });
}

store::TxFn Meter::recordWrite(UsageEvent event, std::vector<std::string> wallets) const {
  return [event = std::move(event), wallets = std::move(wallets),
          audit = audit_](store::Tx& tx) -> Result<void> {
    PURSER_TRY(insertEvent(tx, event, wallets));
    if (audit != nullptr && event.overage.isPositive()) {
      AuditEntry e;
      e.tenant_id = event.tenant_id;
      e.actor = "ledger";
      e.actor_role = "system";
      e.action = "usage.overage";
      e.target = "event:" + event.id;
      e.after = writeJson(json{{"charged", event.cost.toString()},
                               {"overage", event.overage.toString()},
                               {"recovered", event.recovered},
                               {"wallets", wallets}});
      PURSER_TRY(audit->append(tx, e));
    }
    return {};
  };
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
  event.cost = settled->charged;
  event.overage = settled->overage;
  if (event.overage.isPositive()) {
    spdlog::warn("ledger: event {} cost {} more than its wallets allow; recorded as overage",
                 event.id, event.overage.toString());
  }
  auto shared = std::make_shared<Settlement>(std::move(*settled));
  store_.writeAsync(
      recordWrite(event, shared->wallet_ids),
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
  if (charged.duplicate) {
    return Charge{[](store::Tx&) -> Result<void> { return {}; }, {}, charged.charged, {}};
  }
  event.cost = charged.charged;
  event.overage = charged.overage;
  return Charge{recordWrite(std::move(event), std::move(charged.wallet_ids)),
                std::move(charged.alerts), charged.charged, charged.overage};
}

Result<Meter::Charge> Meter::record(UsageEvent event, std::vector<std::string> wallet_ids) {
  if (event.at > clock_.now()) {
    return fail(invalidArgument(fmt::format(
        "usage event \"{}\" is dated in the future; only usage that ran is recorded", event.id)));
  }
  wallet_ids = book_.holding(wallet_ids, event.at);
  const Money cost = event.cost;
  auto charged = PURSER_TRY_VALUE(book_.charge(event.id, wallet_ids, cost));
  event.cost = charged.charged;
  event.overage = cost.sub(charged.charged).value_or(Money::zero());
  if (!charged.duplicate) wallet_ids = std::move(charged.wallet_ids);
  store::TxFn write = recordWrite(event, wallet_ids);
  return Charge{[write = std::move(write), id = event.id](store::Tx& tx) -> Result<void> {
                  auto used = PURSER_TRY_VALUE(
                      tx.query("SELECT 1 FROM usage_events WHERE id = $1 LIMIT 1", {id}));
                  if (!used.empty()) return {};
                  return write(tx);
                },
                charged.duplicate ? std::vector<Alert>{} : std::move(charged.alerts), event.cost,
                event.overage};
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

std::vector<std::string> Meter::expireLeases() {
  std::vector<std::string> ids = book_.expireLeases();
  if (ids.empty()) return ids;
  store_.writeAsync(
      [ids](store::Tx& tx) -> Result<void> {
        for (const auto& id : ids) {
          PURSER_TRY(tx.exec("DELETE FROM usage_intents WHERE event_id = $1", {id}));
        }
        return {};
      },
      [](Result<void> r) {
        if (!r) spdlog::warn("ledger: expired intents not removed: {}", r.error().message);
      });
  return ids;
}

Result<void> Meter::quarantine(const std::string& event_id, const std::string& intent,
                               const std::string& reason) {
  spdlog::error(
      "ledger: the intent of event {} cannot be resolved ({}); it is set aside in "
      "ledger_quarantine and nothing was charged for it",
      event_id, reason);
  const int64_t at_ms = unixMillis(clock_.now());
  return store_.write([&](store::Tx& tx) -> Result<void> {
    PURSER_TRY(tx.exec(
        "INSERT INTO ledger_quarantine (event_id, at_ms, reason, intent) VALUES ($1, $2, $3, $4)",
        {event_id, at_ms, reason, intent}));
    PURSER_TRY(tx.exec("DELETE FROM usage_intents WHERE event_id = $1", {event_id}));
    if (audit_ != nullptr) {
      AuditEntry e;
      e.actor = "ledger";
      e.actor_role = "system";
      e.action = "ledger.quarantine";
      e.target = "event:" + event_id;
      e.after = writeJson(json{{"reason", reason}});
      PURSER_TRY(audit_->append(tx, e));
    }
    return {};
  });
}

Result<Recovery> Meter::recover() {
  store::Rows intents;
  PURSER_TRY(store_.read([&](store::Tx& tx) -> Result<void> {
    intents = PURSER_TRY_VALUE(
        tx.query("SELECT event_id, amount_nanos, wallets, event, expires_at_ms, external"
                 " FROM usage_intents ORDER BY at_ms"));
    return {};
  }));
  Recovery out;
  const SystemTime now = clock_.now();
  const int64_t now_ms = unixMillis(now);
  for (const auto& row : intents) {
    const std::string& id = row.getText(0);
    const json event_json = parseJsonOrDiscarded(row.getText(3));
    const json wallets_json = parseJsonOrDiscarded(row.getText(2));
    std::vector<std::string> wallets;
    bool readable =
        event_json.is_object() && wallets_json.is_array() && !row.isNull(1) && row.getInt(1) >= 0;
    for (const auto& w : readable ? wallets_json : json::array()) {
      if (!w.is_string()) readable = false;
      if (readable) wallets.push_back(w.get<std::string>());
    }
    const std::string raw = row.getText(3);
    if (!readable) {
      PURSER_TRY(quarantine(id, raw, "the intent is unreadable"));
      ++out.quarantined;
      continue;
    }
    bool recorded = false;
    PURSER_TRY(store_.read([&](store::Tx& tx) -> Result<void> {
      recorded =
          !PURSER_TRY_VALUE(tx.query("SELECT 1 FROM usage_events WHERE id = $1 LIMIT 1", {id}))
               .empty();
      return {};
    }));
    if (recorded) {
      PURSER_TRY(quarantine(id, raw, "its id already has a usage event"));
      ++out.quarantined;
      continue;
    }
    UsageEvent e = draftFromJson(event_json);
    e.id = id;
    const Money amount = Money::fromNanos(row.getInt(1));
    const bool external = row.getInt(5) != 0;
    const int64_t expires_ms = row.getInt(4);
    if (external && expires_ms <= now_ms) {
      // Its client had the lease to settle; as when a lease ends while running, nothing is held
      // or charged.
      PURSER_TRY(store_.write([&](store::Tx& tx) -> Result<void> {
        PURSER_TRY(tx.exec("DELETE FROM usage_intents WHERE event_id = $1", {id}));
        return {};
      }));
      spdlog::warn("ledger: reservation {} ended its lease while the server was down; dropped", id);
      ++out.dropped;
      continue;
    }
    if (external) {
      const auto left = std::chrono::milliseconds(expires_ms - now_ms);
      if (book_.reserve({id, wallets, amount, left})) {
        RestoredReservation r;
        r.draft = e;
        r.amount = amount;
        r.token_estimate = intAt(event_json, "token_estimate");
        r.lease_ends = SystemTime(std::chrono::milliseconds(expires_ms));
        out.reservations.push_back(std::move(r));
        ++out.restored;
        continue;
      }
      // Its hold no longer fits (a limit was lowered): charged by the recovery rule below.
    }
    e.at = now;
    e.estimated = true;
    e.recovered = true;
    auto charged = book_.charge(e.id, wallets, amount);
    if (!charged) {
      PURSER_TRY(quarantine(id, raw, charged.error().message));
      ++out.quarantined;
      continue;
    }
    e.cost = charged->charged;
    e.overage = charged->overage;
    PURSER_TRY(store_.write(recordWrite(e, wallets)));
    spdlog::warn(
        "ledger: recovered event {} cut off by a restart; charged {} of its reservation of {}",
        e.id, e.cost.toString(), amount.toString());
    ++out.charged;
  }
  return out;
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
                    " SUM(reasoning_tokens), SUM(overage_nanos) FROM usage_events"
                    " WHERE {1} = $1 AND at_ms >= $2 AND at_ms < $3 GROUP BY g ORDER BY g",
                    group, scopeColumn(q.scope_kind)),
        {q.scope_id, toMs(q.from, INT64_MIN), toMs(q.to, INT64_MAX)}));
    for (const auto& r : rows) {
      SpendRow row;
      row.group = r.getText(0);
      row.cost = Money::fromNanos(r.getInt(1));
      row.requests = r.getInt(2);
      row.tokens = {r.getInt(3), r.getInt(4), r.getInt(5), r.getInt(6), r.getInt(7)};
      row.overage = Money::fromNanos(r.getInt(8));
      out.push_back(std::move(row));
    }
    return {};
  }));
  return out;
}

}  // namespace purser::ledger
