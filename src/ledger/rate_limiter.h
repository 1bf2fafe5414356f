// RateLimiter: requests-per-minute and tokens-per-minute limits as exact token buckets (the
// generic cell rate algorithm), one bucket per key ("key:K:rpm", "team:T:tpm", ...).
//
// A bucket of `limit` per `period` starts full, refills continuously, and admits a cost while
// what is left covers it; integer arithmetic on nanoseconds, so a limit of 7 per minute admits
// exactly 7 in a burst and one more every 60/7 s. Several buckets are checked all or nothing.
// Tokens-per-minute takes an estimate up front and adjust() reconciles it with the actual count.
// Time comes from the Clock's monotonic side. Thread-safe (one mutex). Idle full buckets are
// forgotten, so memory follows the number of recently active keys.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "ledger/scope.h"

namespace purser::ledger {

struct BucketRequest {
  std::string key;
  int64_t limit = 0;  // units per period; <= 0 means unlimited (the bucket is skipped)
  int64_t cost = 1;
  Duration period = std::chrono::minutes(1);
};

struct RateDecision {
  bool allowed = true;
  // For the most constrained bucket (the one that refused, or the one with least left):
  std::string key;
  int64_t limit = 0;
  int64_t remaining = 0;    // whole units left after this decision
  Duration retry_after{0};  // when refused: how long until it would be admitted
  Duration reset{0};        // until the bucket is full again
  bool never = false;       // refused because cost > limit: waiting will not help
};

// The limits kept in a store several replicas share (rate_leases.h), for RateLimiter to hand its
// work to.
class SharedRateLimits {
 public:
  virtual ~SharedRateLimits() = default;
  virtual RateDecision acquire(std::span<const BucketRequest> requests) = 0;
  // As acquire(), from what this replica holds already: nullopt, with nothing taken, when the
  // answer needs a store round trip (the caller then calls acquire() where it may wait).
  virtual std::optional<RateDecision> tryAcquire(std::span<const BucketRequest> requests) = 0;
  virtual void adjust(const BucketRequest& bucket, int64_t delta) = 0;
};

class RateLimiter {
 public:
  explicit RateLimiter(const Clock& clock) : clock_(clock) {}

  // From now on the buckets are `shared`'s, in the store (replicas sharing it); set before
  // serving. `shared` outlives the limiter's use.
  void share(SharedRateLimits* shared) { shared_ = shared; }

  // Takes every request's cost, or none of them.
  RateDecision acquire(std::span<const BucketRequest> requests);
  RateDecision acquire(const BucketRequest& request) { return acquire({&request, 1}); }
  // As acquire(), but never waits on a shared store: nullopt, with nothing taken, when the
  // answer needs one (see SharedRateLimits::tryAcquire). Without a shared store, acquire().
  std::optional<RateDecision> tryAcquire(std::span<const BucketRequest> requests);

  // Adds `delta` units to a bucket's usage (negative: returns units, never beyond full).
  void adjust(const BucketRequest& bucket, int64_t delta);

  size_t bucketsForTest() const;

 private:
  // Theoretical arrival time, scaled by the bucket's limit: tat_ns * limit. 128 bits.
  struct Bucket {
    __int128 tat_scaled = 0;
    int64_t limit = 0;
  };
  void sweepLocked(__int128 now_ns);

  const Clock& clock_;
  std::atomic<SharedRateLimits*> shared_{nullptr};
  mutable std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;  // guarded by mu_
  uint64_t ops_ = 0;                                 // guarded by mu_
};

// A configured limit: requests and/or tokens per minute for everything a scope does, or only
// for one model.
struct RateLimitSpec {
  std::string id;
  std::string tenant_id;
  Scope scope;
  std::string model;  // empty: every model
  int64_t rpm = 0;    // 0: no request limit
  int64_t tpm = 0;    // 0: no token limit
};

// The configured limits, indexed by scope. Thread-safe.
class RateLimitBook {
 public:
  void put(RateLimitSpec spec);
  std::vector<RateLimitSpec> all() const;
  // The buckets one request by these scopes on `model` draws from: one request, `tokens` tokens.
  std::vector<BucketRequest> buckets(const std::vector<Scope>& scopes, std::string_view model,
                                     int64_t tokens) const;

 private:
  mutable std::mutex mu_;
  std::vector<RateLimitSpec> limits_;  // guarded by mu_
};

}  // namespace purser::ledger
