// LedgerStore: the SQL for wallets and usage. Writes take the caller's transaction.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "ledger/rate_limiter.h"
#include "ledger/wallet_book.h"
#include "store/store.h"

namespace purser::ledger {

const std::vector<store::Migration>& ledgerMigrations();

// PostgreSQL only, after ledgerMigrations(): usage_events becomes a table partitioned by month
// of at_ms (UTC), keyed by (id, at_ms) — an event's id and time never change, so a replayed
// event still conflicts with itself. Rows already there move into a partition per month they
// fall in; a default partition takes what no month's partition covers. Old months can then be
// detached, archived or dropped whole (docs/operations.md).
const std::vector<store::Migration>& usagePartitionMigrations();
// The conflict target that makes an event insert idempotent in `dialect`: "(id)" on SQLite,
// "(id, at_ms)" on PostgreSQL (partitioned).
const char* usageEventConflict(store::Dialect dialect);
// PostgreSQL: makes sure the partitions of the month of `now` and of the next month exist.
Result<void> ensureUsagePartitions(store::Store& store, SystemTime now);

Result<void> insertWallet(store::Tx& tx, const WalletSpec& w, const std::string& created_at);
Result<std::vector<WalletSpec>> loadWallets(store::Store& store);

Result<void> insertRateLimit(store::Tx& tx, const RateLimitSpec& l, const std::string& created_at);
Result<std::vector<RateLimitSpec>> loadRateLimits(store::Store& store);

// What a wallet has been charged since `since` (the start of its current window), summed from
// wallet_spend (used to rebuild WalletBook at start). Spend is kept per wallet and UTC minute, so
// the minute `since` falls in counts whole: exact for every window that starts on a minute (those
// of every time zone in use), and never less than the truth otherwise — a budget may refuse a
// little early after a restart, never overspend.
Result<Money> spentSince(store::Tx& tx, const std::string& wallet_id, SystemTime since);

// The wallet book made to hold the stored wallets, each with what it spent in its current window
// (spentSince), the one rebuild for a start and for another replica's change. With
// `keep_known`, a wallet the book already has keeps what it spent and holds (only its spec is
// replaced) and a wallet the store no longer has is removed; without, every stored wallet is
// put with its spend read again.
Result<void> loadWalletBook(store::Store& store, WalletBook& book, const Clock& clock,
                            bool keep_known);

// Adds to `found` the ids among `ids` that the store already has as usage events.
Result<void> findRecordedEvents(store::Tx& tx, const std::vector<std::string>& ids,
                                std::set<std::string>* found);

// Makes the ledger's tables (wallets, usage, rate limits, the audit log) current.
Result<void> migrateLedger(store::Store& store);

// The books as stored: the wallet book (loadWalletBook, with `keep_known`) and the rate limits.
// The one load for a start (keep_known false) and for another replica's change (true).
Result<void> loadBooks(store::Store& store, const Clock& clock, WalletBook& wallets,
                       RateLimitBook& rate_limits, bool keep_known);

// What events charged each wallet, summed per wallet and minute until write() adds it to
// wallet_spend: one upsert per wallet and minute however many events a journal batch holds.
//
// With `lease_replica` (lease mode, wallet_leases.h) the same write marks the charges as used in
// that replica's leases, so a charge and its lease's use reach the store together.
class SpendBatch {
 public:
  explicit SpendBatch(std::string lease_replica = {}) : lease_replica_(std::move(lease_replica)) {}
  void add(const std::string& wallet_id, int64_t at_ms, int64_t cost_nanos);
  // Adds everything to wallet_spend in `tx` and starts empty again.
  Result<void> write(store::Tx& tx);

 private:
  std::string lease_replica_;
  std::map<std::pair<std::string, int64_t>, int64_t> sums_;
};

}  // namespace purser::ledger
