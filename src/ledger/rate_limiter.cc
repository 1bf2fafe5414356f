#include "ledger/rate_limiter.h"

#include <algorithm>
#include <vector>

namespace purser::ledger {

namespace {

__int128 nowNs(const Clock& clock) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock.monotonic().time_since_epoch())
      .count();
}

__int128 ceilDiv(__int128 a, __int128 b) { return a <= 0 ? 0 : (a + b - 1) / b; }

}  // namespace

std::optional<RateDecision> RateLimiter::tryAcquire(std::span<const BucketRequest> requests) {
  if (SharedRateLimits* shared = shared_.load()) return shared->tryAcquire(requests);
  return acquire(requests);
}

// GCRA with scaled time: with P the period in ns and L the limit, each unit advances the
// theoretical arrival time (TAT) by P/L; scaling everything by L keeps it an integer. A cost c
// is admitted when max(TAT, now) + c*P - now <= P*L, i.e. the bucket would not overflow.
RateDecision RateLimiter::acquire(std::span<const BucketRequest> requests) {
  if (SharedRateLimits* shared = shared_.load()) return shared->acquire(requests);
  const __int128 now = nowNs(clock_);
  std::lock_guard lock(mu_);
  if (++ops_ % 4096 == 0) sweepLocked(now);

  RateDecision decision;
  struct Planned {
    Bucket* bucket;
    __int128 new_tat;
  };
  std::vector<Planned> planned;
  planned.reserve(requests.size());
  int64_t least_left = -1;  // whole units
  for (const BucketRequest& r : requests) {
    if (r.limit <= 0) continue;
    const __int128 period = r.period.count();
    const __int128 capacity = period * r.limit;
    const __int128 now_scaled = now * r.limit;
    Bucket& b = buckets_[r.key];
    if (b.limit != r.limit) {
      // A new bucket, or its limit changed: keep the fraction used, rescaled.
      const __int128 used = b.limit > 0 ? std::max<__int128>(0, b.tat_scaled - now * b.limit) : 0;
      b.tat_scaled = now_scaled + (b.limit > 0 ? used * r.limit / b.limit : 0);
      b.limit = r.limit;
    }
    const __int128 base = std::max(b.tat_scaled, now_scaled);
    const __int128 new_tat = base + static_cast<__int128>(r.cost) * period;
    const __int128 over = new_tat - now_scaled - capacity;
    if (r.cost > r.limit || over > 0) {
      decision.allowed = false;
      decision.key = r.key;
      decision.limit = r.limit;
      decision.never = r.cost > r.limit;
      decision.remaining = static_cast<int64_t>((capacity - (base - now_scaled)) / period);
      decision.retry_after = Duration(static_cast<int64_t>(ceilDiv(over, r.limit)));
      decision.reset = Duration(static_cast<int64_t>(ceilDiv(base - now_scaled, r.limit)));
      return decision;
    }
    planned.push_back({&b, new_tat});
    const auto left = static_cast<int64_t>((capacity - (new_tat - now_scaled)) / period);
    if (least_left < 0 || left < least_left) {
      least_left = left;
      decision.key = r.key;
      decision.limit = r.limit;
      decision.remaining = left;
      decision.reset = Duration(static_cast<int64_t>(ceilDiv(new_tat - now_scaled, r.limit)));
    }
  }
  for (const Planned& p : planned) p.bucket->tat_scaled = p.new_tat;
  return decision;
}

void RateLimiter::adjust(const BucketRequest& bucket, int64_t delta) {
  if (bucket.limit <= 0 || delta == 0) return;
  if (SharedRateLimits* shared = shared_.load()) return shared->adjust(bucket, delta);
  const __int128 now = nowNs(clock_);
  std::lock_guard lock(mu_);
  auto it = buckets_.find(bucket.key);
  if (it == buckets_.end() || it->second.limit != bucket.limit) return;
  Bucket& b = it->second;
  const __int128 now_scaled = now * b.limit;
  const __int128 shift = static_cast<__int128>(delta) * bucket.period.count();
  // Taking more may run the bucket into debt (later requests wait); returning never fills it
  // beyond full.
  b.tat_scaled = std::max(b.tat_scaled, now_scaled) + shift;
  if (b.tat_scaled < now_scaled) b.tat_scaled = now_scaled;
}

void RateLimiter::sweepLocked(__int128 now_ns) {
  std::erase_if(buckets_, [&](const auto& entry) {
    return entry.second.tat_scaled <= now_ns * entry.second.limit;  // full again: forget it
  });
}

size_t RateLimiter::bucketsForTest() const {
  std::lock_guard lock(mu_);
  return buckets_.size();
}

void RateLimitBook::put(RateLimitSpec spec) {
  std::lock_guard lock(mu_);
  for (auto& existing : limits_) {
    if (existing.id == spec.id) {
      existing = std::move(spec);
      return;
    }
  }
  limits_.push_back(std::move(spec));
}

std::vector<RateLimitSpec> RateLimitBook::all() const {
  std::lock_guard lock(mu_);
  return limits_;
}

std::vector<BucketRequest> RateLimitBook::buckets(const std::vector<Scope>& scopes,
                                                  std::string_view model, int64_t tokens) const {
  std::vector<BucketRequest> out;
  std::lock_guard lock(mu_);
  for (const auto& l : limits_) {
    if (!l.model.empty() && l.model != model) continue;
    const bool applies =
        std::any_of(scopes.begin(), scopes.end(), [&](const Scope& s) { return s == l.scope; });
    if (!applies) continue;
    if (l.rpm > 0) out.push_back({"limit:" + l.id + ":rpm", l.rpm, 1});
    if (l.tpm > 0 && tokens > 0) out.push_back({"limit:" + l.id + ":tpm", l.tpm, tokens});
  }
  return out;
}

}  // namespace purser::ledger
