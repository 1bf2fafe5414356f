// WalletLeases: hard wallets kept exact across replicas that share one store, without a store
// round trip per request (docs/architecture.md rule 2 past one machine).
//
// Each replica spends a hard wallet only from its lease: a slice the store granted it in the
// wallet's current window (table wallet_leases: granted, and used — what of it the replica
// charged and shipped). A grant runs in one transaction, serialised per wallet (the wallet's row
// is locked on PostgreSQL; SQLite has one writer), and never gives more than
//
//     limit - spent - the free part (granted - used) of every other replica's unexpired lease
//                   - this replica's own free part,
//
// read in one statement, hence one snapshot. Shipping a charge moves it from a lease's free part
// to spent in one transaction (SpendBatch), which leaves that sum unchanged; so the sum of what
// was spent and what is leased never exceeds the limit whatever the replicas do, and a replica
// that never charges beyond its lease (WalletBook) cannot take a wallet past its limit.
//
// Leases are sized from demand: each tick (the server runs one every 50 ms) a wallet whose free
// part has fallen under half of about a second of its recent spending (at least twice its
// largest recent request) is refilled ahead of need; one idle for `idle` is given back; and when
// another replica could not get what a request needed (wanted_at_ms), the free part beyond one
// request is given back at once, so near the limit the slices shrink to what is in flight. A
// request that does not fit asks for the difference on the spot (topUp, one round trip).
//
// A lease is renewed every ttl/3 and lapses `ttl` after its last renewal by the store's rows:
// a replica that dies gives its free part back to the others then. A replica that could not renew
// in time (the store unreachable) admits nothing new on that wallet once 3/4 of the ttl has
// passed by its own monotonic clock, so its slice is never used after the others may have taken
// it. Expiry times are written by the replicas' wall clocks, which must agree to within a quarter
// of the ttl (NTP does far better).
//
// At start a replica adopts its own unexpired leases (what it charged under them included), and
// forfeits expired ones; at shutdown it gives back every free part.
//
// Thread-safe: one mutex orders every change to this replica's rows, so the book's view of its
// grants is always the store's.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "ledger/wallet_book.h"
#include "store/store.h"

namespace purser::ledger {

struct WalletLeaseOptions {
  std::string replica;                         // this replica's stable name
  Duration ttl = std::chrono::seconds(30);     // a dead replica's free part returns after this
  Duration horizon = std::chrono::seconds(1);  // a lease covers this much recent demand
  Duration idle = std::chrono::seconds(2);     // free part given back after this without demand
  Duration wanted_window = std::chrono::seconds(2);        // how long another's unmet need counts
  Duration wanted_every = std::chrono::milliseconds(250);  // how often the others' are read
};

struct LeaseCounters {
  uint64_t grants = 0;   // grant transactions
  uint64_t top_ups = 0;  // grants asked for by a request that did not fit
  uint64_t refused_top_ups = 0;
  uint64_t give_backs = 0;
  uint64_t renewals = 0;
};

class WalletLeases final : public LeaseSource {
 public:
  WalletLeases(store::Store& store, WalletBook& book, const Clock& clock,
               WalletLeaseOptions options);

  // At start, after the journal was replayed and the wallets loaded: takes over this replica's
  // unexpired leases and forfeits its expired ones.
  Result<void> adopt();
  // Refills, renews and gives back as the file comment says; at most one store write.
  Result<void> tick();
  Result<void> topUp(const std::vector<std::string>& wallet_ids, Money amount) override;
  // Gives back every free part (at shutdown, once the journal is shipped).
  Result<void> giveBackAll();

  LeaseCounters counters() const;
  const WalletLeaseOptions& options() const { return options_; }

 private:
  struct Want {
    std::string wallet_id;
    Window window;
    Money want;  // what to ask for
    Money need;  // the least that serves the request waiting (top-ups), else zero
  };
  struct Granted {
    std::string wallet_id;
    int64_t window_start_ms = 0;
    Money granted;
    Money spent;
    Money used;
  };
  // One grant inside `tx`; `fair` splits what is left among the replicas holding leases.
  Result<Granted> grantIn(store::Tx& tx, const Want& w, int64_t now_ms, bool fair) const;
  Result<std::vector<Granted>> grant(const std::vector<Want>& wants, bool fair);
  MonoTime validUntil(MonoTime asked) const;
  Money target(const std::string& wallet_id) const;

  store::Store& store_;
  WalletBook& book_;
  const Clock& clock_;
  const WalletLeaseOptions options_;

  mutable std::mutex mu_;  // orders every change to this replica's rows
  struct Demand {
    double nanos_per_second = 0;  // smoothed
    Money largest;                // the largest request lately (decays)
  };
  std::map<std::string, Demand> demand_;   // guarded by mu_
  MonoTime last_tick_ = MonoTime::min();   // guarded by mu_
  MonoTime last_renewal_{};                // guarded by mu_
  bool wanted_read_ = false;               // guarded by mu_
  MonoTime last_wanted_check_{};           // guarded by mu_
  std::map<std::string, int64_t> wanted_;  // wallet -> when another replica last fell short; mu_
  // Counted outside mu_: reading them (a scrape, on a worker) never waits behind a store round
  // trip that holds mu_.
  struct {
    std::atomic<uint64_t> grants{0}, top_ups{0}, refused_top_ups{0}, give_backs{0}, renewals{0};
  } counters_;
};

}  // namespace purser::ledger
