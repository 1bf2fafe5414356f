// WalletBook: the wallets (budgets) and the reservations held against them — the arithmetic that
// makes "no overspend" true (docs/architecture.md rule 2).
//
// Before work runs, its worst-case cost is reserved on every wallet in the principal's chain,
// all or nothing: a hard wallet admits a reservation only if spent + reserved + amount stays
// within its limit, so no interleaving of concurrent requests can overspend it. Afterwards the
// reservation is settled at the actual cost, idempotently by event id, and the rest is released.
// A reservation that is neither settled nor released before its lease ends is released by
// expireLeases(), so a crash or a dropped connection never leaves a phantom hold.
//
// What is charged never takes a hard wallet past its limit, whatever the caller says the work
// cost: a settlement charges at most what was reserved, and every charge at most the room its
// hard wallets have left (which matters after a lease expired, after a limit was lowered, and for
// usage known only afterwards). The rest is the settlement's `overage`, for the caller to record
// and flag; it is never added to a wallet and never silently dropped.
//
// Spending is counted per period window (see period.h); a new window starts with nothing spent
// (holds carry over) and re-arms the alert thresholds, each of which fires once per window.
//
// Lease mode (several replicas sharing one store, see wallet_leases.h): a hard wallet also admits
// a reservation only within this replica's lease on it — what the store granted it in the
// current window (G), less what it charged under that lease (C) and holds now (R). The store
// never grants more than a wallet's limit less its spend and every other replica's leases, so no
// replica can overspend it whatever the others do. A lease that could not be renewed in time
// admits nothing new; holds already taken still settle within it.
//
// Pure and in memory: time comes from the Clock, persistence is the caller's. Thread-safe: one
// mutex guards the book; every operation holds it for a few hundred nanoseconds.
#pragma once

#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/money.h"
#include "common/result.h"
#include "ledger/period.h"
#include "ledger/scope.h"

namespace purser::ledger {

struct WalletSpec {
  std::string id;
  std::string tenant_id;  // the tenant the wallet belongs to (isolation)
  Scope scope;
  Money limit;
  Period period = Period::kNone;
  TimeZone zone = TimeZone::utc();
  bool hard = true;           // hard: blocks; soft: alerts only
  std::vector<int> alert_at;  // percent thresholds, strictly increasing, 1..1000
  std::string model;          // empty: every model; else only usage of this model or route
};

// Checks a spec's own fields (limit, thresholds); names the field that is wrong.
Result<void> validateWalletSpec(const WalletSpec& spec);

struct WalletStatus {
  WalletSpec spec;
  Window window;
  Money spent;                    // settled in this window
  Money reserved;                 // held by outstanding reservations
  Money remaining;                // limit - spent - reserved, never below zero
  int64_t used_basis_points = 0;  // spent / limit in hundredths of a percent
};

// An alert threshold crossed by a settlement.
struct Alert {
  std::string wallet_id;
  int threshold = 0;  // percent
  Money spent;
  Money limit;
  Window window;
};

struct ReserveRequest {
  std::string event_id;
  std::vector<std::string> wallet_ids;  // the principal's chain; unknown ids are errors
  Money amount;                         // the worst case
  Duration lease = std::chrono::minutes(10);
};

struct Settlement {
  Money charged;           // what the wallets were charged
  Money overage;           // the cost beyond what could be charged (see the file comment)
  bool duplicate = false;  // settled before: nothing changed this time
  std::vector<Alert> alerts;
  std::vector<std::string> wallet_ids;  // the wallets charged
  uint64_t journal_sequence = 0;        // the ledger journal's record of it (Meter::settle)
};

// A window bound in Unix milliseconds, the open ends of Period::kNone as INT64_MIN and INT64_MAX.
int64_t windowMillis(SystemTime t);

// A replica's lease on a hard wallet, as the book sees it (lease mode).
struct LeaseState {
  std::string wallet_id;
  Window window;
  Money limit;
  Money granted;  // G: granted to this replica in the window
  Money charged;  // C: charged under the lease in the window (shipped to the store or not)
  Money reserved;
  Money demand;        // reserved and charged since the last takeLeaseStates()
  Money largest;       // the largest single reservation or charge since then
  bool valid = false;  // renewed in time; an invalid lease admits nothing new
  MonoTime last_demand;
};

// Extends a replica's leases when a reservation does not fit (lease mode): called by Meter
// outside the book's lock, blocking for one store round trip. kResourceExhausted when the store
// has no more to grant, kUnavailable when it cannot be reached.
class LeaseSource {
 public:
  virtual ~LeaseSource() = default;
  virtual Result<void> topUp(const std::vector<std::string>& wallet_ids, Money amount) = 0;
};

class WalletBook {
 public:
  explicit WalletBook(const Clock& clock) : clock_(clock) {}

  // Adds a wallet, or replaces the spec of an existing one keeping what it has spent and holds.
  // `spent` (for a new wallet) is what the store says was spent in the current window.
  Result<void> put(WalletSpec spec, Money spent = Money::zero());
  Result<void> remove(const std::string& wallet_id);
  Result<WalletStatus> status(const std::string& wallet_id) const;
  std::vector<WalletStatus> all() const;

  // All or nothing over the chain. kResourceExhausted names the wallet that would be exceeded
  // (and leaves every wallet as it was); kAlreadyExists for a reused event id; kNotFound for an
  // unknown wallet.
  Result<void> reserve(const ReserveRequest& request);

  // Charges `actual` to the reservation's wallets, at most the amount reserved and the room of its
  // hard wallets, and releases its hold. Settling an event twice charges once. An event whose
  // lease already expired is still charged (to the wallets it reserved on, within their room
  // now). kNotFound if the event was never reserved here.
  Result<Settlement> settle(const std::string& event_id, Money actual);

  // Charges `actual` to `wallet_ids` without a prior reservation (usage known only afterwards,
  // e.g. recovered at restart), at most the room their hard wallets have left. Idempotent by
  // event id like settle().
  Result<Settlement> charge(const std::string& event_id, const std::vector<std::string>& wallet_ids,
                            Money actual);

  // Of `wallet_ids`, those whose current window holds `at` (usage recorded after the fact counts
  // only toward the window it ran in).
  std::vector<std::string> holding(const std::vector<std::string>& wallet_ids, SystemTime at) const;

  // Drops a reservation without charging (the work never ran).
  Result<void> release(const std::string& event_id);

  // Releases every reservation whose lease has ended; returns their event ids.
  std::vector<std::string> expireLeases();

  size_t outstanding() const;
  // Whether a reservation with this event id is outstanding.
  bool holds(const std::string& event_id) const;

  // Lease mode (see the file comment); from then on hard wallets admit only within their lease.
  void enableLeases();
  bool leased() const;
  // Every hard wallet's lease (the current window's); resets the demand counters.
  std::vector<LeaseState> takeLeaseStates();
  // One hard wallet's lease, leaving the counters as they are.
  std::optional<LeaseState> leaseState(const std::string& wallet_id) const;
  // What the store now grants this replica on `wallet_id` in the window starting at
  // `window_start_ms` (windowMillis; ignored for another window), valid for new reservations until
  // `valid_until`. `store_spent` is the window's spend the store knows of (every replica),
  // `store_used` what of it is this replica's under the lease: the book's spent becomes the store's
  // plus what this replica charged and has not shipped yet, when that is more than it knew. `adopt`
  // (at start) also takes `store_used` as what this replica charged under the lease.
  void setLease(const std::string& wallet_id, int64_t window_start_ms, Money granted,
                MonoTime valid_until, Money store_spent, Money store_used, bool adopt = false);
  // Lowers the grant by `amount` if that much of it is free (neither charged nor held) and
  // returns true; the caller then gives it back in the store.
  bool giveBack(const std::string& wallet_id, int64_t window_start_ms, Money amount);
  // Renewed: leases granted before stay valid for new reservations until `valid_until`.
  void renewLeases(MonoTime valid_until);
  // Of `wallet_ids`, the hard wallets whose lease cannot take `amount` now, with the shortfall.
  std::vector<std::pair<std::string, Money>> shortfall(const std::vector<std::string>& wallet_ids,
                                                       Money amount) const;

  // The wallet chain: the wallets usage by `who` on `model` is charged to — those on any of its
  // scopes (scopesOf) with no model, or with exactly this model. Sorted by id. The one place a
  // chain is made; Budget and the fleet's metering both ask here.
  std::vector<std::string> chain(const Charged& who, std::string_view model) const;

 private:
  struct WalletState {
    WalletSpec spec;
    Window window;
    Money spent;
    Money reserved;
    std::set<int> fired;  // thresholds fired in this window
    // Lease mode (hard wallets):
    Money granted;
    Money lease_charged;
    MonoTime valid_until = MonoTime::min();
    Money demand;
    Money largest;
    MonoTime last_demand = MonoTime::min();
  };
  struct Reservation {
    std::vector<std::string> wallet_ids;
    Money amount;
    MonoTime expires;
    std::multimap<MonoTime, std::string>::iterator expiry;
  };

  void rollIfDue(WalletState& w, SystemTime now) const;
  // What a hard wallet can still take: within its limit and, in lease mode, its lease.
  Money roomLocked(const WalletState& w) const;
  void noteDemand(WalletState& w, Money amount, MonoTime now);
  WalletStatus statusOf(const WalletState& w) const;
  // Charges min(actual, cap, room of the hard wallets) to `wallet_ids`.
  Result<Settlement> chargeLocked(const std::string& event_id,
                                  const std::vector<std::string>& wallet_ids, Money actual,
                                  std::optional<Money> cap, SystemTime now);
  void rememberSettled(const std::string& event_id, Money charged);

  const Clock& clock_;
  mutable std::mutex mu_;
  bool leased_ = false;                                           // guarded by mu_
  mutable std::unordered_map<std::string, WalletState> wallets_;  // guarded by mu_
  std::unordered_multimap<std::string, std::string> by_scope_;    // "kind:id" -> id; mu_
  std::unordered_map<std::string, Reservation> reservations_;     // guarded by mu_
  std::multimap<MonoTime, std::string> expiries_;                 // guarded by mu_
  // Reservations released by lease expiry, kept so a late settlement still charges them.
  struct Expired {
    std::vector<std::string> wallet_ids;
    Money amount;
  };
  std::unordered_map<std::string, Expired> expired_;  // guarded by mu_
  std::deque<std::string> expired_order_;             // guarded by mu_
  // Recently settled events and what they were charged, for idempotency.
  std::unordered_map<std::string, Money> settled_;  // guarded by mu_
  std::deque<std::string> settled_order_;           // guarded by mu_
};

}  // namespace purser::ledger
