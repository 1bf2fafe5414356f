// Meter: reservations made durable, usage metered exactly, nothing acknowledged ever lost
// (DESIGN.md rules 2 and 3).
//
//   reserve  the worst case is held on every wallet of the chain (WalletBook), then a write-ahead
//            intent is committed; only then may the work run.
//   settle   the actual cost is charged, and the usage event, what it charged to each wallet and
//            the removal of the intent are committed together; the caller answers its client
//            only after that.
//   recover  at start, every intent left by a crash becomes a usage event charged by the
//            recovery rule: the reserved worst case, marked estimated and recovered — the work
//            may have run to completion upstream, so the budget is never under-charged.
//
// Completion callbacks run on the store's writer thread (or at once on the caller's thread when
// refused up front); they must not block. Thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/money.h"
#include "common/result.h"
#include "ledger/price.h"
#include "ledger/wallet_book.h"
#include "store/store.h"

namespace purser::ledger {

struct UsageEvent {
  std::string id;
  SystemTime at;
  std::string tenant_id;
  std::string team_id;
  std::string user_id;
  std::string service_account_id;
  std::string key_id;
  std::string session_id;
  std::string route;
  std::string provider;
  std::string model;
  TokenCounts tokens;
  Money cost;
  int64_t latency_ms = 0;
  int64_t ttft_ms = 0;
  int status = 0;
  bool estimated = false;  // usage had to be estimated (no usage reported)
  bool recovered = false;  // charged at restart from a write-ahead intent
};

struct UsageQuery {
  ScopeKind scope_kind = ScopeKind::kTenant;
  std::string scope_id;
  SystemTime from = SystemTime::min();
  SystemTime to = SystemTime::max();
  int64_t limit = 1000;
};

struct SpendRow {
  std::string group;  // the value grouped by (a user id, a model, a day "2026-11-29", ...)
  Money cost;
  int64_t requests = 0;
  TokenCounts tokens;
};

// group_by: user (users and service accounts), team, key, model, route, session, or a time
// bucket in UTC: day, hour, minute.
Result<std::string> spendGroupColumn(std::string_view group_by, store::Dialect dialect);

class Meter {
 public:
  Meter(store::Store& store, WalletBook& book, const Clock& clock)
      : store_(store), book_(book), clock_(clock) {}

  void reserve(UsageEvent draft, std::vector<std::string> wallet_ids, Money amount, Duration lease,
               std::function<void(Result<void>)> done);
  void settle(UsageEvent event, std::function<void(Result<Settlement>)> done);
  // Usage known only after it ran (GPU time already used): charges `wallet_ids` in memory now,
  // idempotently by event id, and returns the write that records the event and its charges, for
  // the caller to commit together with its own state so both are durable or neither is.
  struct Charge {
    store::TxFn write;
    std::vector<Alert> alerts;  // thresholds the charge crossed
  };
  Result<Charge> charge(UsageEvent event, std::vector<std::string> wallet_ids);
  // Drops a reservation whose work never ran; the intent is removed in the background.
  Result<void> release(const std::string& event_id);
  // Charges every leftover intent by the recovery rule; returns how many were recovered.
  Result<int> recover();

  Result<std::vector<UsageEvent>> events(const UsageQuery& query);
  Result<std::vector<SpendRow>> spend(const UsageQuery& query, std::string_view group_by);

 private:
  store::Store& store_;
  WalletBook& book_;
  const Clock& clock_;
};

}  // namespace purser::ledger
