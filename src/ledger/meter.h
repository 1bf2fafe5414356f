// Meter: reservations made durable, usage metered exactly, nothing acknowledged ever lost
// (DESIGN.md rules 2 and 3).
//
//   reserve  the worst case is held on every wallet of the chain (WalletBook), then a write-ahead
//            intent is committed; only then may the work run.
//   settle   the actual cost is charged, and the usage event, what it charged to each wallet and
//            the removal of the intent are committed together; the caller answers its client
//            only after that.
//   expire   a reservation whose lease ends unsettled gives its hold back and its intent is
//            removed (a late settlement is still charged, within the wallets' room).
//   recover  at start, every intent left behind is resolved, and the start goes on whatever it
//            finds: a reservation made through the API whose lease has not ended is held again
//            (its client may still settle it); one whose lease ended is dropped; the intent of
//            in-process work cut off by a crash becomes a usage event charged by the recovery
//            rule — the reserved worst case, marked estimated and recovered, since the work may
//            have run to completion upstream. An intent that cannot be resolved (unreadable, or
//            its id already has a usage event) is set aside in ledger_quarantine, audited and
//            reported; it never stops the server from starting.
//
// No charge takes a hard wallet past its limit (WalletBook): what a settlement or a recovery
// could not charge is recorded on the usage event as `overage`, and audited.
//
// Event ids are unique across the durable record: a reservation whose id already has a usage
// event is refused (kAlreadyExists) before anything runs.
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
#include "ledger/audit.h"
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
  Money cost;     // what the wallets were charged
  Money overage;  // the cost beyond what the hold and the hard wallets allowed (not charged)
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
  Money overage;
  int64_t requests = 0;
  TokenCounts tokens;
};

// group_by: user (users and service accounts), team, key, model, route, session, or a time
// bucket in UTC: day, hour, minute.
Result<std::string> spendGroupColumn(std::string_view group_by, store::Dialect dialect);

// How a reservation's work runs, for recovery after a restart.
struct ReserveOptions {
  // The work runs outside this process (a client of the reservations API): after a restart its
  // hold is taken again for the rest of its lease instead of being charged.
  bool external = false;
  int64_t token_estimate = 0;  // the tokens the rate limits were charged, kept for the client
};

// A reservation held again at start (ReserveOptions::external), for the API to serve.
struct RestoredReservation {
  UsageEvent draft;
  Money amount;
  int64_t token_estimate = 0;
  SystemTime lease_ends;
};

struct Recovery {
  int charged = 0;      // cut-off in-process work charged by the recovery rule
  int restored = 0;     // external reservations held again
  int dropped = 0;      // external reservations whose lease had ended
  int quarantined = 0;  // intents set aside as inconsistent
  std::vector<RestoredReservation> reservations;
};

class Meter {
 public:
  // `audit`, when given, records overages and quarantined intents.
  Meter(store::Store& store, WalletBook& book, const Clock& clock, const AuditLog* audit = nullptr)
      : store_(store), book_(book), clock_(clock), audit_(audit) {}

  void reserve(UsageEvent draft, std::vector<std::string> wallet_ids, Money amount, Duration lease,
               std::function<void(Result<void>)> done, ReserveOptions options = {});
  void settle(UsageEvent event, std::function<void(Result<Settlement>)> done);
  // Usage known only after it ran (GPU time already used): charges `wallet_ids` in memory now,
  // idempotently by event id, and returns the write that records the event and its charges, for
  // the caller to commit together with its own state so both are durable or neither is.
  struct Charge {
    store::TxFn write;
    std::vector<Alert> alerts;  // thresholds the charge crossed
    Money charged;
    Money overage;
  };
  Result<Charge> charge(UsageEvent event, std::vector<std::string> wallet_ids);
  // Usage that ran elsewhere, recorded after the fact (history brought from another gateway, work
  // metered outside Purser): charged like charge(), but only to those of `wallet_ids` whose
  // current window holds `event.at`, and recorded once — the write skips an event whose id the
  // durable record already has, and an id charged in memory by an attempt whose write failed is
  // recorded now with what that attempt charged. `event.at` must not be in the future.
  Result<Charge> record(UsageEvent event, std::vector<std::string> wallet_ids);
  // Drops a reservation whose work never ran; the intent is removed in the background.
  Result<void> release(const std::string& event_id);
  // Gives back the holds whose lease ended; their intents are removed in the background.
  std::vector<std::string> expireLeases();
  // Resolves every intent left from before this start (see the file comment).
  Result<Recovery> recover();

  Result<std::vector<UsageEvent>> events(const UsageQuery& query);
  Result<std::vector<SpendRow>> spend(const UsageQuery& query, std::string_view group_by);

 private:
  // The write that records `event` (and its overage's audit entry) and removes its intent.
  store::TxFn recordWrite(UsageEvent event, std::vector<std::string> wallets) const;
  Result<void> quarantine(const std::string& event_id, const std::string& intent,
                          const std::string& reason);

  store::Store& store_;
  WalletBook& book_;
  const Clock& clock_;
  const AuditLog* audit_;
};

}  // namespace purser::ledger
