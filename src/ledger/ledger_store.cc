#include "ledger/ledger_store.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <set>

#include "common/json.h"
#include "ledger/audit.h"

namespace purser::ledger {

const std::vector<store::Migration>& ledgerMigrations() {
  static const std::vector<store::Migration> kMigrations = {
      {1, "wallets, usage events and charges",
       "CREATE TABLE wallets (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL,"
       " scope_kind TEXT NOT NULL, scope_id TEXT NOT NULL, limit_nanos INTEGER NOT NULL,"
       " period TEXT NOT NULL, timezone TEXT NOT NULL, hard INTEGER NOT NULL,"
       " alert_at TEXT NOT NULL, model TEXT NOT NULL, created_at TEXT NOT NULL);"
       "CREATE UNIQUE INDEX wallets_scope ON wallets (scope_kind, scope_id, model);"
       "CREATE TABLE rate_limits (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL,"
       " scope_kind TEXT NOT NULL, scope_id TEXT NOT NULL, model TEXT NOT NULL,"
       " rpm INTEGER NOT NULL, tpm INTEGER NOT NULL, created_at TEXT NOT NULL,"
       " UNIQUE (scope_kind, scope_id, model));"
       // One row per request or workload interval; append-only.
       "CREATE TABLE usage_events (id TEXT PRIMARY KEY, at_ms INTEGER NOT NULL,"
       " tenant_id TEXT NOT NULL, team_id TEXT NOT NULL, user_id TEXT NOT NULL,"
       " service_account_id TEXT NOT NULL, key_id TEXT NOT NULL, session_id TEXT NOT NULL,"
       " route TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,"
       " input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,"
       " cached_input_tokens INTEGER NOT NULL, cache_write_tokens INTEGER NOT NULL,"
       " reasoning_tokens INTEGER NOT NULL, cost_nanos INTEGER NOT NULL,"
       " latency_ms INTEGER NOT NULL, ttft_ms INTEGER NOT NULL, status INTEGER NOT NULL,"
       " estimated INTEGER NOT NULL, recovered INTEGER NOT NULL);"
       "CREATE INDEX usage_events_tenant_at ON usage_events (tenant_id, at_ms);"
       // What each event charged to each wallet, for wallet balances after a restart.
       "CREATE TABLE usage_charges (event_id TEXT NOT NULL, wallet_id TEXT NOT NULL,"
       " at_ms INTEGER NOT NULL, cost_nanos INTEGER NOT NULL, PRIMARY KEY (event_id, wallet_id));"
       "CREATE INDEX usage_charges_wallet_at ON usage_charges (wallet_id, at_ms);"
       // Write-ahead intents: a reservation whose work may be running. Removed at settlement;
       // what is left after a crash is recovered at start.
       "CREATE TABLE usage_intents (event_id TEXT PRIMARY KEY, at_ms INTEGER NOT NULL,"
       " amount_nanos INTEGER NOT NULL, wallets TEXT NOT NULL, event TEXT NOT NULL)"},
      {2, "overage, intent leases and the quarantine",
       // The cost of an event beyond what its hold and its hard wallets allowed (not charged).
       "ALTER TABLE usage_events ADD COLUMN overage_nanos INTEGER NOT NULL DEFAULT 0;"
       // When an intent's lease ends, and whether its work runs outside the process (a client
       // of the reservations API, who may settle it after a restart).
       "ALTER TABLE usage_intents ADD COLUMN expires_at_ms INTEGER NOT NULL DEFAULT 0;"
       "ALTER TABLE usage_intents ADD COLUMN external INTEGER NOT NULL DEFAULT 0;"
       // Intents recovery could not resolve, set aside with the reason.
       "CREATE TABLE ledger_quarantine (event_id TEXT NOT NULL, at_ms INTEGER NOT NULL,"
       " reason TEXT NOT NULL, intent TEXT NOT NULL)"},
      {3, "wallet spend summed per minute instead of a charge row per event and wallet",
       // Balances are all the charges are read for; one row per wallet and minute is written
       // once per journal batch, where a row per event and wallet cost three B-tree inserts each.
       "CREATE TABLE wallet_spend (wallet_id TEXT NOT NULL, minute INTEGER NOT NULL,"
       " cost_nanos INTEGER NOT NULL, PRIMARY KEY (wallet_id, minute));"
       "INSERT INTO wallet_spend (wallet_id, minute, cost_nanos)"
       " SELECT wallet_id, CASE WHEN at_ms >= 0 THEN at_ms / 60000 ELSE (at_ms - 59999) / 60000 "
       "END,"
       " SUM(cost_nanos) FROM usage_charges GROUP BY 1, 2;"
       "DROP TABLE usage_charges"},
      {4, "replicas: whose intents are whose, wallet leases and shared rate limits",
       // Each replica recovers only its own intents after a restart.
       "ALTER TABLE usage_intents ADD COLUMN replica TEXT NOT NULL DEFAULT '';"
       "CREATE INDEX usage_intents_replica ON usage_intents (replica, at_ms);"
       // A replica's slice of a hard wallet in one window (wallet_leases.h): granted, and what
       // of it was charged and shipped; the rest is free until the lease expires.
       "CREATE TABLE wallet_leases (wallet_id TEXT NOT NULL, replica TEXT NOT NULL,"
       " window_start_ms INTEGER NOT NULL, window_end_ms INTEGER NOT NULL,"
       " granted_nanos INTEGER NOT NULL, used_nanos INTEGER NOT NULL,"
       " expires_at_ms INTEGER NOT NULL, wanted_at_ms INTEGER NOT NULL,"
       " PRIMARY KEY (wallet_id, replica, window_start_ms));"
       "CREATE INDEX wallet_leases_replica ON wallet_leases (replica);"
       // Rate limits shared by replicas (rate_leases.h): each bucket's theoretical arrival
       // time in Unix nanoseconds.
       "CREATE TABLE rate_buckets (key TEXT PRIMARY KEY, tat_ns INTEGER NOT NULL)"},
      {5, "usage events found by session",
       // One agent run's model and tool calls, in order (GET /api/v1/sessions/{id}).
       "CREATE INDEX IF NOT EXISTS usage_events_session ON usage_events (session_id, at_ms)"},
  };
  return kMigrations;
}

const std::vector<store::Migration>& usagePartitionMigrations() {
  static const std::vector<store::Migration> kMigrations = {
      {1, "usage events partitioned by month",
       "ALTER TABLE usage_events RENAME TO usage_events_flat;"
       "ALTER INDEX usage_events_tenant_at RENAME TO usage_events_flat_tenant_at;"
       "CREATE TABLE usage_events (LIKE usage_events_flat INCLUDING DEFAULTS)"
       " PARTITION BY RANGE (at_ms);"
       "ALTER TABLE usage_events ADD PRIMARY KEY (id, at_ms);"
       "CREATE INDEX usage_events_tenant_at ON usage_events (tenant_id, at_ms);"
       "CREATE TABLE usage_events_default PARTITION OF usage_events DEFAULT;"
       // A partition for every month the events already span.
       "DO $do$ DECLARE m timestamp; BEGIN"
       " FOR m IN SELECT DISTINCT date_trunc('month', to_timestamp(at_ms / 1000.0)"
       " AT TIME ZONE 'UTC') FROM usage_events_flat LOOP"
       " EXECUTE format('CREATE TABLE usage_events_%s PARTITION OF usage_events"
       " FOR VALUES FROM (%s) TO (%s)', to_char(m, 'YYYYMM'),"
       " (extract(epoch FROM m AT TIME ZONE 'UTC') * 1000)::bigint,"
       " (extract(epoch FROM (m + interval '1 month') AT TIME ZONE 'UTC') * 1000)::bigint);"
       " END LOOP; END $do$;"
       "INSERT INTO usage_events SELECT * FROM usage_events_flat;"
       "DROP TABLE usage_events_flat"},
      {2, "usage events found by session, on the partitioned table",
       "CREATE INDEX IF NOT EXISTS usage_events_session ON usage_events (session_id, at_ms)"},
  };
  return kMigrations;
}

const char* usageEventConflict(store::Dialect dialect) {
  return dialect == store::Dialect::kPostgres ? "(id, at_ms)" : "(id)";
}

Result<void> ensureUsagePartitions(store::Store& store, SystemTime now) {
  using namespace std::chrono;
  const year_month_day today{floor<days>(now)};
  year_month month = today.year() / today.month();
  for (int i = 0; i < 2; ++i, month += months(1)) {
    const year_month next = month + months(1);
    const auto start = sys_days(month / 1);
    const auto end = sys_days(next / 1);
    const std::string sql = fmt::format(
        "CREATE TABLE IF NOT EXISTS usage_events_{:04d}{:02d} PARTITION OF usage_events FOR "
        "VALUES FROM ({}) TO ({})",
        static_cast<int>(month.year()), static_cast<unsigned>(month.month()),
        duration_cast<milliseconds>(start.time_since_epoch()).count(),
        duration_cast<milliseconds>(end.time_since_epoch()).count());
    PURSER_TRY(store.writeAlone([&](store::Tx& tx) -> Result<void> {
      PURSER_TRY(tx.exec(sql));
      return {};
    }));
  }
  return {};
}

Result<void> insertWallet(store::Tx& tx, const WalletSpec& w, const std::string& created_at) {
  PURSER_TRY(tx.exec(
      "INSERT INTO wallets (id, tenant_id, scope_kind, scope_id, limit_nanos, period, timezone,"
      " hard, alert_at, model, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
      {w.id, w.tenant_id, std::string(scopeKindName(w.scope.kind)), w.scope.id, w.limit.nanos(),
       std::string(periodName(w.period)), w.zone.name(), int64_t{w.hard ? 1 : 0},
       writeJson(nlohmann::json(w.alert_at)), w.model, created_at}));
  return {};
}

Result<void> findRecordedEvents(store::Tx& tx, const std::vector<std::string>& ids,
                                std::set<std::string>* found) {
  for (const std::string& id : ids) {
    auto rows =
        PURSER_TRY_VALUE(tx.query("SELECT 1 FROM usage_events WHERE id = $1 LIMIT 1", {id}));
    if (!rows.empty()) found->insert(id);
  }
  return {};
}

Result<void> migrateLedger(store::Store& store) {
  PURSER_TRY(store.migrate("ledger", ledgerMigrations()));
  PURSER_TRY(store.migrate("audit", AuditLog::migrations()));
  return {};
}

Result<void> loadBooks(store::Store& store, const Clock& clock, WalletBook& wallets,
                       RateLimitBook& rate_limits, bool keep_known) {
  PURSER_TRY(loadWalletBook(store, wallets, clock, keep_known));
  for (auto& l : PURSER_TRY_VALUE(loadRateLimits(store))) rate_limits.put(std::move(l));
  return {};
}

Result<void> loadWalletBook(store::Store& store, WalletBook& book, const Clock& clock,
                            bool keep_known) {
  const auto specs = PURSER_TRY_VALUE(loadWallets(store));
  std::set<std::string> stored;
  for (const auto& spec : specs) {
    stored.insert(spec.id);
    if (keep_known && book.status(spec.id)) {
      PURSER_TRY(book.put(spec));  // what it spent and holds stays
      continue;
    }
    const auto window = periodWindow(spec.period, spec.zone, clock.now());
    Money spent;
    PURSER_TRY(store.read([&](store::Tx& tx) -> Result<void> {
      spent = PURSER_TRY_VALUE(spentSince(tx, spec.id, window.start));
      return {};
    }));
    PURSER_TRY(book.put(spec, spent));
  }
  if (keep_known) {
    for (const auto& w : book.all()) {
      if (!stored.contains(w.spec.id)) (void)book.remove(w.spec.id);
    }
  }
  return {};
}

Result<std::vector<WalletSpec>> loadWallets(store::Store& store) {
  std::vector<WalletSpec> out;
  PURSER_TRY(store.read([&](store::Tx& tx) -> Result<void> {
    auto rows = PURSER_TRY_VALUE(
        tx.query("SELECT id, tenant_id, scope_kind, scope_id, limit_nanos, period, timezone, hard,"
                 " alert_at, model FROM wallets ORDER BY id"));
    for (const auto& r : rows) {
      WalletSpec w;
      w.id = r.getText(0);
      w.tenant_id = r.getText(1);
      auto kind = parseScopeKind(r.getText(2));
      auto period = parsePeriod(r.getText(5));
      auto zone = TimeZone::find(r.getText(6));
      if (!kind || !period || !zone) {
        return fail(Error(ErrorCode::kDataLoss,
                          "stored wallet " + w.id + " has an unknown scope, period or time zone"));
      }
      w.scope = {*kind, r.getText(3)};
      w.limit = Money::fromNanos(r.getInt(4));
      w.period = *period;
      w.zone = *zone;
      w.hard = r.getInt(7) != 0;
      auto alerts = parseJsonOrDiscarded(r.getText(8));
      if (alerts.is_array()) {
        for (const auto& a : alerts) {
          if (a.is_number_integer()) w.alert_at.push_back(a.get<int>());
        }
      }
      w.model = r.getText(9);
      out.push_back(std::move(w));
    }
    return {};
  }));
  return out;
}

Result<void> insertRateLimit(store::Tx& tx, const RateLimitSpec& l, const std::string& created_at) {
  PURSER_TRY(tx.exec(
      "INSERT INTO rate_limits (id, tenant_id, scope_kind, scope_id, model, rpm, tpm, created_at)"
      " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
      {l.id, l.tenant_id, std::string(scopeKindName(l.scope.kind)), l.scope.id, l.model, l.rpm,
       l.tpm, created_at}));
  return {};
}

Result<std::vector<RateLimitSpec>> loadRateLimits(store::Store& store) {
  std::vector<RateLimitSpec> out;
  PURSER_TRY(store.read([&](store::Tx& tx) -> Result<void> {
    auto rows =
        PURSER_TRY_VALUE(tx.query("SELECT id, tenant_id, scope_kind, scope_id, model, rpm, tpm "
                                  "FROM rate_limits ORDER BY id"));
    for (const auto& r : rows) {
      auto kind = parseScopeKind(r.getText(2));
      if (!kind)
        return fail(Error(ErrorCode::kDataLoss, "a stored rate limit has an unknown scope"));
      out.push_back({r.getText(0),
                     r.getText(1),
                     {*kind, r.getText(3)},
                     r.getText(4),
                     r.getInt(5),
                     r.getInt(6)});
    }
    return {};
  }));
  return out;
}

namespace {

constexpr int64_t kMinuteMs = 60'000;

int64_t minuteOf(int64_t at_ms) {
  return at_ms >= 0 ? at_ms / kMinuteMs : (at_ms - (kMinuteMs - 1)) / kMinuteMs;
}

}  // namespace

Result<Money> spentSince(store::Tx& tx, const std::string& wallet_id, SystemTime since) {
  const int64_t since_minute = since == SystemTime::min() ? INT64_MIN : minuteOf(unixMillis(since));
  auto rows = PURSER_TRY_VALUE(
      tx.query("SELECT COALESCE(SUM(cost_nanos), 0) FROM wallet_spend WHERE wallet_id = $1 AND"
               " minute >= $2",
               {wallet_id, since_minute}));
  return Money::fromNanos(rows.empty() ? 0 : rows[0].getInt(0));
}

void SpendBatch::add(const std::string& wallet_id, int64_t at_ms, int64_t cost_nanos) {
  sums_[{wallet_id, minuteOf(at_ms)}] += cost_nanos;
}

Result<void> SpendBatch::write(store::Tx& tx) {
  for (const auto& [where, nanos] : sums_) {
    if (!lease_replica_.empty() && nanos != 0) {
      // Shipped: what this replica charged under its lease on a hard wallet is now spent.
      PURSER_TRY(
          tx.exec("UPDATE wallet_leases SET used_nanos = used_nanos + $1 WHERE wallet_id = $2 AND"
                  " replica = $3 AND window_start_ms <= $4 AND window_end_ms > $4",
                  {nanos, where.first, lease_replica_, where.second * kMinuteMs}));
    }
    PURSER_TRY(
        tx.exec("INSERT INTO wallet_spend (wallet_id, minute, cost_nanos) VALUES ($1, $2, $3)"
                " ON CONFLICT (wallet_id, minute) DO UPDATE SET cost_nanos ="
                " wallet_spend.cost_nanos + excluded.cost_nanos",
                {where.first, where.second, nanos}));
  }
  sums_.clear();
  return {};
}

}  // namespace purser::ledger
