#include "ledger/meter.h"
#include "common/json.h"
#include "ledger/ledger_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <unordered_set>

namespace purser::ledger {

namespace {

using nlohmann::json;

// The draft kept in an intent, and how its work runs.
json intentJson(const UsageEvent& e, bool external, int64_t token_estimate) {
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
          {"external", external},
          {"token_estimate", token_estimate}};
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

// One text per statement, so the store's prepared-statement cache serves every request.
constexpr const char* kInsertEvent =
    "INSERT INTO usage_events (id, at_ms, tenant_id, team_id, user_id, service_account_id, key_id,"
    " session_id, route, provider, model, input_tokens, output_tokens, cached_input_tokens,"
    " cache_write_tokens, reasoning_tokens, cost_nanos, latency_ms, ttft_ms, status, estimated,"
    " recovered, overage_nanos) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,"
    " $14, $15, $16, $17, $18, $19, $20, $21, $22, $23) ON CONFLICT ";
constexpr const char* kDeleteIntent = "DELETE FROM usage_intents WHERE event_id = $1";
constexpr const char* kEventExists = "SELECT 1 FROM usage_events WHERE id = $1 LIMIT 1";
constexpr const char* kInsertIntents =
    "INSERT INTO usage_intents (event_id, at_ms, amount_nanos, wallets, event, expires_at_ms,"
    " external, replica) VALUES ";

// The parameters of one usage_events row, in kEventColumns' order.
void appendEventValues(const UsageEvent& e, std::vector<store::Value>& v) {
  v.insert(v.end(), {e.id,
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
                     e.overage.nanos()});
}

// Records the event unless its id is already recorded (a replayed record), adds its charges to
// `spend`, and removes its intent. Returns whether it was recorded now.
Result<bool> insertEvent(store::Tx& tx, store::Dialect dialect, const UsageEvent& e,
                         const std::vector<std::string>& wallets, bool had_intent,
                         SpendBatch& spend) {
  std::vector<store::Value> values;
  values.reserve(23);
  appendEventValues(e, values);
  const int64_t inserted = PURSER_TRY_VALUE(
      tx.exec(std::string(kInsertEvent) + usageEventConflict(dialect) + " DO NOTHING", values));
  if (inserted > 0) {
    for (const auto& w : wallets) spend.add(w, unixMillis(e.at), e.cost.nanos());
  }
  if (had_intent) PURSER_TRY(tx.exec(kDeleteIntent, {e.id}));
  return inserted > 0;
}

// Chunk sizes for statements that take many rows at once: few distinct texts, so the store's
// prepared-statement cache stays small.
constexpr size_t kChunks[] = {256, 64, 16, 4, 1};

// "($1, ..., $n), ($n+1, ...)": `rows` groups of `width` placeholders.
std::string placeholderRows(size_t rows, size_t width) {
  std::string out;
  size_t n = 0;
  for (size_t r = 0; r < rows; ++r) {
    out += r == 0 ? "(" : ", (";
    for (size_t c = 0; c < width; ++c) {
      if (c > 0) out += ", ";
      out += "$" + std::to_string(++n);
    }
    out += ")";
  }
  return out;
}

// Runs `emit(first, count)` over [0, n) in chunks of kChunks' sizes.
template <typename F>
Result<void> inChunks(size_t n, F&& emit) {
  size_t at = 0;
  for (size_t size : kChunks) {
    while (n - at >= size) {
      PURSER_TRY(emit(at, size));
      at += size;
    }
  }
  return {};
}

// Deletes the intents of `ids`, many to a statement.
Result<void> deleteIntents(store::Tx& tx, const std::vector<const std::string*>& ids) {
  return inChunks(ids.size(), [&](size_t first, size_t count) -> Result<void> {
    std::vector<store::Value> values;
    std::string sql = "DELETE FROM usage_intents WHERE event_id IN (";
    for (size_t i = 0; i < count; ++i) {
      sql += (i == 0 ? "$" : ", $") + std::to_string(i + 1);
      values.emplace_back(*ids[first + i]);
    }
    PURSER_TRY(tx.exec(sql + ")", values));
    return {};
  });
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

std::string hexOf(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 0xF]);
  }
  return out;
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
  // A tool call's model is its qualified tool name ("server.tool"); everything else is "".
  if (group_by == "tool") return std::string("CASE WHEN route = 'mcp' THEN model ELSE '' END");
  if (group_by == "kind") {
    return std::string(
        "CASE WHEN route = 'mcp' THEN 'tool' WHEN provider = 'fleet' THEN 'gpu' ELSE 'model' END");
  }
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
                  "tool, kind, day, hour or minute",
                  group_by)));
}

Result<std::unique_ptr<Meter>> Meter::open(store::Store& store, WalletBook& book,
                                           const Clock& clock, const AuditLog* audit,
                                           JournalOptions journal, std::string replica) {
  PURSER_TRY(store.migrate("ledger", ledgerMigrations()));
  if (store.dialect() == store::Dialect::kPostgres) {
    PURSER_TRY(store.migrate("usage_partitions", usagePartitionMigrations()));
    PURSER_TRY(ensureUsagePartitions(store, clock.now()));
  }
  PURSER_TRY(store.migrate("audit", AuditLog::migrations()));
  std::unique_ptr<Meter> m(new Meter(store, book, clock, audit));
  m->replica_ = std::move(replica);
  Meter* raw = m.get();
  m->journal_ = PURSER_TRY_VALUE(Journal::open(
      std::move(journal), store,
      [raw](store::Tx& tx, const std::vector<std::string_view>& records, bool replaying) {
        return raw->apply(tx, records, replaying);
      },
      [raw](uint64_t through) { raw->applied(through); }));
  return m;
}

Meter::~Meter() { close(); }

void Meter::close() {
  if (journal_) journal_->close();
}

void Meter::abandon() {
  if (journal_) journal_->abandon();
}

Result<void> Meter::apply(store::Tx& tx, const std::vector<std::string_view>& records,
                          bool replaying) const {
  std::vector<Result<LedgerRecord>> decoded;
  decoded.reserve(records.size());
  // Intents whose settlement or release comes later in the same batch are never written: the
  // row would be inserted and deleted in one transaction. Their deletes are skipped too, except
  // in a replay, where an earlier batch may have written the intent.
  std::unordered_set<std::string_view> ended;
  std::unordered_set<std::string_view> unwritten;
  SpendBatch spend(leaseReplica());        // the batch's charges, one upsert per wallet and minute
  std::vector<const UsageRecord*> usages;  // recorded together at the end (recordMany)
  std::vector<const IntentRecord*> intents;  // written together at the end
  std::vector<const std::string*> released;  // intents of earlier batches to delete
  for (std::string_view bytes : records) {
    decoded.push_back(decodeRecord(bytes));
    if (!decoded.back()) continue;
    if (const auto* us = std::get_if<UsageRecord>(&*decoded.back())) {
      ended.insert(us->event.id);
    } else if (const auto* rel = std::get_if<ReleaseRecord>(&*decoded.back())) {
      for (const auto& id : rel->ids) ended.insert(id);
    }
  }
  for (size_t i = 0; i < records.size(); ++i) {
    if (!decoded[i]) {
      // Its checksum held, so these are the bytes written: a format this binary does not know.
      // Kept, never silently dropped, and never allowed to stop the journal.
      spdlog::error("ledger: a journal record cannot be read ({}); set aside in ledger_quarantine",
                    decoded[i].error().message);
      PURSER_TRY(
          tx.exec("INSERT INTO ledger_quarantine (event_id, at_ms, reason, intent) VALUES "
                  "($1, $2, $3, $4)",
                  {std::string("journal"), unixMillis(clock_.now()), decoded[i].error().message,
                   hexOf(records[i])}));
      continue;
    }
    const LedgerRecord& record = *decoded[i];
    if (const auto* in = std::get_if<IntentRecord>(&record)) {
      if (ended.contains(in->draft.id)) {
        if (!replaying) unwritten.insert(in->draft.id);
        continue;
      }
      // A replayed intent whose event is already recorded was settled since. (Appended now, an
      // intent comes before its settlement, which is then in this batch or a later one.)
      if (replaying && !PURSER_TRY_VALUE(tx.query(kEventExists, {in->draft.id})).empty()) {
        continue;
      }
      intents.push_back(in);
    } else if (const auto* us = std::get_if<UsageRecord>(&record)) {
      usages.push_back(us);
    } else {
      for (const auto& id : std::get<ReleaseRecord>(record).ids) {
        if (!unwritten.contains(id)) released.push_back(&id);
      }
    }
  }
  // Intents of requests still running at the batch's end, many rows to a statement (none of
  // them is released in this batch, so their order against the deletes does not matter).
  PURSER_TRY(inChunks(intents.size(), [&](size_t first, size_t count) -> Result<void> {
    std::vector<store::Value> values;
    values.reserve(count * 8);
    for (size_t i = first; i < first + count; ++i) {
      const IntentRecord* in = intents[i];
      values.insert(values.end(),
                    {in->draft.id, in->at_ms, in->amount.nanos(), writeJson(json(in->wallets)),
                     writeJson(intentJson(in->draft, in->external, in->token_estimate)),
                     in->expires_ms, int64_t{in->external ? 1 : 0}, replica_});
    }
    PURSER_TRY(tx.exec(std::string(kInsertIntents) + placeholderRows(count, 8) +
                           " ON CONFLICT (event_id) DO NOTHING",
                       values));
    return {};
  }));
  PURSER_TRY(deleteIntents(tx, released));
  PURSER_TRY(recordMany(tx, usages, unwritten, spend));
  return spend.write(tx);
}

Result<void> Meter::recordMany(store::Tx& tx, const std::vector<const UsageRecord*>& usages,
                               const std::unordered_set<std::string_view>& unwritten,
                               SpendBatch& spend) const {
  // The events, many rows to a statement; those already recorded (a replay) are skipped, and
  // only what is inserted now is charged to the wallets' spend.
  std::unordered_set<std::string> inserted;
  PURSER_TRY(inChunks(usages.size(), [&](size_t first, size_t count) -> Result<void> {
    std::vector<store::Value> values;
    values.reserve(count * 23);
    for (size_t i = first; i < first + count; ++i) appendEventValues(usages[i]->event, values);
    auto rows = PURSER_TRY_VALUE(
        tx.query(std::string("INSERT INTO usage_events (") + kEventColumns + ") VALUES " +
                     placeholderRows(count, 23) + " ON CONFLICT " +
                     usageEventConflict(store_.dialect()) + " DO NOTHING RETURNING id",
                 values));
    for (const auto& r : rows) inserted.insert(r.getText(0));
    return {};
  }));
  std::vector<const std::string*> intents;  // of events whose intent an earlier batch wrote
  for (const UsageRecord* us : usages) {
    const UsageEvent& e = us->event;
    if (!unwritten.contains(e.id)) intents.push_back(&e.id);
    if (!inserted.contains(e.id)) continue;
    for (const auto& w : us->wallets) spend.add(w, unixMillis(e.at), e.cost.nanos());
    if (audit_ != nullptr && e.overage.isPositive()) PURSER_TRY(auditOverage(tx, e, us->wallets));
  }
  return deleteIntents(tx, intents);
}

Result<uint64_t> Meter::append(const LedgerRecord& record) {
  thread_local std::string bytes;
  bytes.clear();
  encodeRecord(record, bytes);
  return journal_->append(bytes);
}

bool Meter::pendingSettlement(const std::string& id) const {
  std::lock_guard lock(pending_mu_);
  return pending_.contains(id);
}

void Meter::applied(uint64_t through) {
  std::lock_guard lock(pending_mu_);
  while (!pending_order_.empty() && pending_order_.front().first <= through) {
    auto it = pending_.find(pending_order_.front().second);
    if (it != pending_.end() && it->second == pending_order_.front().first) pending_.erase(it);
    pending_order_.pop_front();
  }
}

Result<void> Meter::hold(const std::string& id, const std::vector<std::string>& wallet_ids,
                         Money amount, Duration lease, bool may_wait) {
  auto reserved = book_.reserve({id, wallet_ids, amount, lease});
  if (!reserved && reserved.error().code == ErrorCode::kResourceExhausted && leases_ != nullptr &&
      !book_.shortfall(wallet_ids, amount).empty()) {
    if (!may_wait) {
      return fail(Error(ErrorCode::kAborted,
                        "this replica's budget lease must be extended from the store first"));
    }
    // This replica's lease is short, not necessarily the wallet: ask the store for more, once.
    auto more = leases_->topUp(wallet_ids, amount);
    if (!more && more.error().code == ErrorCode::kUnavailable) {
      return fail(unavailable(
          "this replica's budget lease is used up and the store cannot be reached to extend "
          "it: " +
          more.error().message));
    }
    reserved = book_.reserve({id, wallet_ids, amount, lease});
  }
  return reserved;
}

Result<void> Meter::holdAhead(const std::string& id, const std::vector<std::string>& wallet_ids,
                              Money amount, Duration lease) {
  return hold(id, wallet_ids, amount, lease);
}

void Meter::releaseAhead(const std::string& id) { (void)book_.release(id); }

Result<uint64_t> Meter::reserve(const UsageEvent& draft, const std::vector<std::string>& wallet_ids,
                                Money amount, Duration lease, ReserveOptions options) {
  auto used = [&] {
    return Error(ErrorCode::kAlreadyExists,
                 fmt::format("id \"{}\" is already used by another reservation or usage event; "
                             "choose another",
                             draft.id))
        .withField("id");
  };
  if (!options.fresh_id && !options.may_wait) {
    return fail(Error(ErrorCode::kAborted, "the store must be asked whether the id is used"));
  }
  if (!options.fresh_id) {
    // Ids are unique across the durable record, not only across what memory remembers.
    if (pendingSettlement(draft.id)) return fail(used());
    bool recorded = false;
    auto read = store_.read([&](store::Tx& tx) -> Result<void> {
      recorded = !PURSER_TRY_VALUE(tx.query(kEventExists, {draft.id})).empty();
      return {};
    });
    if (!read) {
      spdlog::error("ledger: cannot look up event id {}: {}", draft.id, read.error().message);
      return fail(unavailable("the ledger could not be read; try again"));
    }
    if (recorded) return fail(used());
  }
  if (auto reserved = hold(draft.id, wallet_ids, amount, lease, options.may_wait); !reserved) {
    if (reserved.error().code == ErrorCode::kAlreadyExists) return fail(used());
    return fail(reserved.error());
  }
  IntentRecord in;
  in.draft = draft;
  in.wallets = wallet_ids;
  in.amount = amount;
  in.at_ms = unixMillis(clock_.now());
  in.expires_ms = in.at_ms + std::chrono::duration_cast<std::chrono::milliseconds>(lease).count();
  in.external = options.external;
  in.token_estimate = options.token_estimate;
  auto sequence = append(in);
  if (!sequence) {
    // Without its intent the work must not run: give the hold back.
    (void)book_.release(draft.id);
    spdlog::error("ledger: could not record the intent of {}: {}", draft.id,
                  sequence.error().message);
    return fail(unavailable("the ledger could not record the reservation; try again"));
  }
  return *sequence;
}

Result<Settlement> Meter::settle(UsageEvent event) {
  if (event.at == SystemTime()) event.at = clock_.now();
  auto settled = PURSER_TRY_VALUE(book_.settle(event.id, event.cost));
  if (settled.duplicate) return settled;
  event.cost = settled.charged;
  event.overage = settled.overage;
  if (event.overage.isPositive()) {
    spdlog::warn("ledger: event {} cost {} more than its wallets allow; recorded as overage",
                 event.id, event.overage.toString());
  }
  const std::string id = event.id;
  auto sequence = append(UsageRecord{std::move(event), settled.wallet_ids});
  if (!sequence) {
    // Charged in memory, not in the journal: the intent stays, so a restart recovers it.
    spdlog::error("ledger: could not record usage event {}: {}", id, sequence.error().message);
    return fail(unavailable("the ledger could not record the usage; it will be recovered"));
  }
  {
    std::lock_guard lock(pending_mu_);
    pending_[id] = *sequence;
    pending_order_.emplace_back(*sequence, id);
  }
  settled.journal_sequence = *sequence;
  return settled;
}

store::TxFn Meter::recordWrite(UsageEvent event, std::vector<std::string> wallets) const {
  return [this, event = std::move(event), wallets = std::move(wallets)](store::Tx& tx) {
    return recordIn(tx, event, wallets);
  };
}

Result<void> Meter::recordIn(store::Tx& tx, const UsageEvent& event,
                             const std::vector<std::string>& wallets, bool had_intent,
                             SpendBatch* spend) const {
  SpendBatch own(leaseReplica());
  const bool recorded = PURSER_TRY_VALUE(
      insertEvent(tx, store_.dialect(), event, wallets, had_intent, spend ? *spend : own));
  PURSER_TRY(own.write(tx));
  if (recorded && audit_ != nullptr && event.overage.isPositive()) {
    PURSER_TRY(auditOverage(tx, event, wallets));
  }
  return {};
}

Result<void> Meter::auditOverage(store::Tx& tx, const UsageEvent& event,
                                 const std::vector<std::string>& wallets) const {
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
  PURSER_TRY(audit_->append(tx, e));
  return {};
}

void Meter::topUpFor(const std::vector<std::string>& wallet_ids, Money amount) {
  if (leases_ == nullptr || book_.shortfall(wallet_ids, amount).empty()) return;
  // What the store will not grant is charged as far as it goes, the rest recorded as overage.
  if (auto r = leases_->topUp(wallet_ids, amount); !r) {
    spdlog::warn("ledger: a budget lease for usage known after the fact was not extended: {}",
                 r.error().message);
  }
}

Result<Meter::Charge> Meter::charge(UsageEvent event, std::vector<std::string> wallet_ids) {
  if (event.at == SystemTime()) event.at = clock_.now();
  topUpFor(wallet_ids, event.cost);
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
  topUpFor(wallet_ids, cost);
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
  if (auto r = append(ReleaseRecord{{event_id}}); !r) {
    // The intent stays; if the server stops before another release reaches it, the recovery
    // rule charges it.
    spdlog::warn("ledger: the release of {} was not recorded: {}", event_id, r.error().message);
  }
  return {};
}

std::vector<std::string> Meter::expireLeases() {
  std::vector<std::string> ids = book_.expireLeases();
  constexpr size_t kPerRecord = 10'000;
  for (size_t i = 0; i < ids.size(); i += kPerRecord) {
    ReleaseRecord r;
    r.ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(i),
                 ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), i + kPerRecord)));
    if (auto a = append(r); !a) {
      spdlog::warn("ledger: expired intents not removed: {}", a.error().message);
    }
  }
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
  if (!replica_.empty()) {
    // Intents written before replicas had names are claimed by the first replica to start, so
    // that exactly one recovers them.
    PURSER_TRY(store_.write([&](store::Tx& tx) -> Result<void> {
      PURSER_TRY(tx.exec("UPDATE usage_intents SET replica = $1 WHERE replica = ''", {replica_}));
      return {};
    }));
  }
  store::Rows intents;
  PURSER_TRY(store_.read([&](store::Tx& tx) -> Result<void> {
    intents = PURSER_TRY_VALUE(
        tx.query("SELECT event_id, amount_nanos, wallets, event, expires_at_ms, external"
                 " FROM usage_intents WHERE replica = $1 ORDER BY at_ms",
                 {replica_}));
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
  PURSER_TRY(catchUp());
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

Result<std::vector<UsageEvent>> Meter::sessionEvents(const std::string& session_id, int64_t limit) {
  PURSER_TRY(catchUp());
  std::vector<UsageEvent> out;
  PURSER_TRY(store_.read([&](store::Tx& tx) -> Result<void> {
    auto rows =
        PURSER_TRY_VALUE(tx.query(fmt::format("SELECT {} FROM usage_events WHERE session_id = $1"
                                              " ORDER BY at_ms, id LIMIT {}",
                                              kEventColumns, std::max<int64_t>(1, limit)),
                                  {session_id}));
    for (const auto& r : rows) out.push_back(eventFromRow(r));
    return {};
  }));
  return out;
}

Result<Money> Meter::sessionSpent(const std::string& tenant_id, const std::string& session_id) {
  PURSER_TRY(catchUp());
  Money out;
  PURSER_TRY(store_.read([&](store::Tx& tx) -> Result<void> {
    auto rows = PURSER_TRY_VALUE(
        tx.query("SELECT COALESCE(SUM(cost_nanos), 0) FROM usage_events WHERE session_id = $1"
                 " AND tenant_id = $2",
                 {session_id, tenant_id}));
    if (!rows.empty()) out = Money::fromNanos(rows[0].getInt(0));
    return {};
  }));
  return out;
}

Result<std::vector<SpendRow>> Meter::spend(const UsageQuery& q, std::string_view group_by) {
  const std::string group = PURSER_TRY_VALUE(spendGroupColumn(group_by, store_.dialect()));
  PURSER_TRY(catchUp());
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

Result<std::vector<RequestSample>> Meter::recentRequests(const RecentQuery& q) {
  std::string where = "at_ms >= $1";
  std::vector<store::Value> params = {q.from_ms};
  if (!q.tenant_id.empty()) {
    where += " AND tenant_id = $2";
    params.emplace_back(q.tenant_id);
    if (!q.team_id.empty()) {
      where += " AND team_id = $3";
      params.emplace_back(q.team_id);
    }
  }
  PURSER_TRY(catchUp());
  std::vector<RequestSample> out;
  PURSER_TRY(store_.read([&](store::Tx& tx) -> Result<void> {
    auto rows = PURSER_TRY_VALUE(tx.query(
        fmt::format("SELECT route, provider, model, status, latency_ms, input_tokens, "
                    "output_tokens, cost_nanos FROM usage_events WHERE {} ORDER BY at_ms DESC "
                    "LIMIT {}",
                    where, std::max<int64_t>(1, q.limit)),
        params));
    out.reserve(rows.size());
    for (const auto& r : rows) {
      out.push_back({r.getText(0), r.getText(1), r.getText(2), r.getInt(3), r.getInt(4),
                     r.getInt(5), r.getInt(6), Money::fromNanos(r.getInt(7))});
    }
    return {};
  }));
  return out;
}

}  // namespace purser::ledger
