// RateLeases: requests- and tokens-per-minute limits kept exact across replicas that share one
// store (the lease mode of RateLimiter).
//
// Each bucket lives in the store (table rate_buckets) as the same generic cell rate algorithm the
// local limiter runs: its theoretical arrival time, in Unix nanoseconds, advanced P/L per unit
// (P the period, L the limit). A replica takes units from it in one transaction — the row is
// locked, so takes from every replica queue — and spends them locally; whatever it takes was
// admitted by the one bucket, so the replicas together admit exactly what one limiter would.
//
// Units are taken when a request needs them (one store round trip) plus, for busy buckets, a
// prefetch of about 100 ms of this replica's recent use — never more than L/200, so a limit
// under 200 a minute is never prefetched and is exact to the unit. Units left unused for `idle`
// are given back (the arrival time moves back, never before now); a replica that dies holding
// some loses them, which only makes the bucket stricter for a moment, never looser. A bucket the
// store refused is refused locally until it could admit again, so a client hammering a spent
// limit costs no round trips. Tokens-per-minute estimates reconciled later (adjust) use the
// replica's own units first; more than it holds is owed and pushed to the store at the next tick.
//
// Arrival times are written with the replicas' wall clocks, which must agree (NTP) to well under
// a limit's emission interval for the count to be exact at the boundary.
//
// Thread-safe. A take blocks its caller for one store write; nothing is held locked meanwhile.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "ledger/rate_limiter.h"
#include "store/store.h"

namespace purser::ledger {

struct RateLeaseOptions {
  Duration prefetch_horizon = std::chrono::milliseconds(100);
  int64_t prefetch_divisor = 200;  // at most limit / this is prefetched
  Duration idle = std::chrono::seconds(1);
};

struct RateLeaseCounters {
  uint64_t takes = 0;  // store round trips made to take units
  uint64_t refused_takes = 0;
  uint64_t local = 0;  // acquisitions served from units already held
  uint64_t local_refusals = 0;
};

class RateLeases final : public SharedRateLimits {
 public:
  RateLeases(store::Store& store, const Clock& clock, RateLeaseOptions options = {});

  RateDecision acquire(std::span<const BucketRequest> requests) override;
  std::optional<RateDecision> tryAcquire(std::span<const BucketRequest> requests) override;
  void adjust(const BucketRequest& bucket, int64_t delta) override;
  // Gives back units idle for `idle` and pushes what is owed; at most one store write.
  Result<void> tick();
  // Gives back every unit held and pushes what is owed (at shutdown).
  Result<void> giveBackAll();
  RateLeaseCounters counters() const;

 private:
  // Takes from what is held, then (when `may_wait`) the store; nullopt when it would have to ask
  // the store and may not.
  std::optional<RateDecision> acquire(std::span<const BucketRequest> requests, bool may_wait);

  struct Local {
    int64_t limit = 0;
    Duration period{0};
    int64_t held = 0;  // units taken from the store and not used yet
    int64_t owed = 0;  // units used beyond what was held, not yet pushed to the store
    int64_t used = 0;  // since the last tick, for the prefetch
    double units_per_second = 0;
    MonoTime last_used{};
    MonoTime blocked_until{};  // refused by the store: refused here until then...
    int64_t blocked_need = 0;  // ...when needing at least this many units more than held
    int64_t remaining_hint = 0;
    Duration reset_hint{0};
  };
  struct Take {
    std::string key;
    int64_t limit = 0;
    Duration period{0};
    int64_t need = 0;  // units the request still needs
    int64_t want = 0;  // with the prefetch
  };
  struct Taken {
    int64_t got = 0;
    int64_t remaining = 0;
    Duration reset{0};
  };
  // One write: every take or none. A refusal fills `refused`.
  Result<std::vector<Taken>> take(const std::vector<Take>& takes, RateDecision* refused);
  Result<void> flush(bool everything);

  store::Store& store_;
  const Clock& clock_;
  const RateLeaseOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Local> local_;  // guarded by mu_
  MonoTime last_tick_{};                          // guarded by mu_
  // Counted outside mu_, as WalletLeases' are.
  struct {
    std::atomic<uint64_t> takes{0}, refused_takes{0}, local{0}, local_refusals{0};
  } counters_;
};

}  // namespace purser::ledger
