#include "ledger/rate_leases.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace purser::ledger {

namespace {

__int128 ceilDiv(__int128 a, __int128 b) { return a <= 0 ? 0 : (a + b - 1) / b; }

int64_t unixNanos(SystemTime t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// A bucket's row, created full, and locked until the transaction ends; its arrival time.
constexpr const char* kLockBucket =
    "INSERT INTO rate_buckets (key, tat_ns) VALUES ($1, 0) ON CONFLICT (key) DO UPDATE SET"
    " tat_ns = rate_buckets.tat_ns RETURNING tat_ns";
constexpr const char* kSetBucket = "UPDATE rate_buckets SET tat_ns = $1 WHERE key = $2";
// Gives units back: the arrival time moves back by their worth, never before now.
constexpr const char* kGiveBack =
    "UPDATE rate_buckets SET tat_ns = CASE WHEN tat_ns - $1 > $2 THEN tat_ns - $1 ELSE $2 END"
    " WHERE key = $3";
// Pushes units owed: the arrival time moves on from itself or now, whichever is later.
constexpr const char* kOwe =
    "UPDATE rate_buckets SET tat_ns = CASE WHEN tat_ns > $2 THEN tat_ns ELSE $2 END + $1"
    " WHERE key = $3";

}  // namespace

RateLeases::RateLeases(store::Store& store, const Clock& clock, RateLeaseOptions options)
    : store_(store), clock_(clock), options_(options) {}

Result<std::vector<RateLeases::Taken>> RateLeases::take(const std::vector<Take>& takes,
                                                        RateDecision* refused) {
  std::vector<Taken> out;
  const __int128 now = unixNanos(clock_.now());
  std::optional<RateDecision> refusal;
  auto written = store_.writeAlone([&](store::Tx& tx) -> Result<void> {
    out.clear();
    for (const Take& t : takes) {
      auto rows = PURSER_TRY_VALUE(tx.query(kLockBucket, {t.key}));
      const __int128 period = t.period.count();
      const __int128 capacity = period * t.limit;
      const __int128 now_scaled = now * t.limit;
      const __int128 tat_scaled =
          static_cast<__int128>(rows.empty() ? 0 : rows[0].getInt(0)) * t.limit;
      const __int128 base = std::max(tat_scaled, now_scaled);
      const __int128 free_units = std::max<__int128>(0, (now_scaled + capacity - base) / period);
      if (free_units < t.need) {
        RateDecision d;
        d.allowed = false;
        d.key = t.key;
        d.limit = t.limit;
        d.remaining = static_cast<int64_t>(free_units);
        const __int128 over = base + t.need * period - now_scaled - capacity;
        d.retry_after = Duration(static_cast<int64_t>(ceilDiv(over, t.limit)));
        d.reset = Duration(static_cast<int64_t>(ceilDiv(base - now_scaled, t.limit)));
        refusal = d;
        // Nothing of this write is kept: every bucket's take or none.
        return fail(Error(ErrorCode::kResourceExhausted, "rate limit " + t.key + " reached"));
      }
      const __int128 got = std::min<__int128>(t.want, free_units);
      const __int128 new_tat = base + got * period;
      // Stored rounded up: a fraction of a nanosecond per take, always on the strict side.
      PURSER_TRY(tx.exec(kSetBucket, {static_cast<int64_t>(ceilDiv(new_tat, t.limit)), t.key}));
      out.push_back({static_cast<int64_t>(got), static_cast<int64_t>(free_units - got),
                     Duration(static_cast<int64_t>(ceilDiv(new_tat - now_scaled, t.limit)))});
    }
    return {};
  });
  if (refusal) {
    *refused = *refusal;
    return fail(Error(ErrorCode::kResourceExhausted, "rate limit " + refusal->key + " reached"));
  }
  if (!written) return fail(written.error());
  return out;
}

RateDecision RateLeases::acquire(std::span<const BucketRequest> requests) {
  return *acquire(requests, /*may_wait=*/true);
}

std::optional<RateDecision> RateLeases::tryAcquire(std::span<const BucketRequest> requests) {
  return acquire(requests, /*may_wait=*/false);
}

std::optional<RateDecision> RateLeases::acquire(std::span<const BucketRequest> requests,
                                                bool may_wait) {
  const MonoTime mono = clock_.monotonic();
  RateDecision decision;
  std::vector<Take> takes;
  // What this request took from units already held, per bucket, to put back if it is refused.
  std::vector<std::pair<std::string, int64_t>> from_held;
  {
    std::lock_guard lock(mu_);
    const auto undo = [&] {
      for (const auto& [key, n] : from_held) local_[key].held += n;
    };
    for (const BucketRequest& r : requests) {
      if (r.limit <= 0) continue;
      Local& l = local_[r.key];
      if (l.limit != r.limit || l.period != r.period) {
        l.limit = r.limit;
        l.period = r.period;
      }
      l.last_used = mono;
      l.used += r.cost;
      if (r.cost > r.limit ||
          (r.cost - l.held >= l.blocked_need && l.blocked_need > 0 && mono < l.blocked_until)) {
        undo();
        ++counters_.local_refusals;
        decision.allowed = false;
        decision.key = r.key;
        decision.limit = r.limit;
        decision.never = r.cost > r.limit;
        decision.remaining = l.held;
        decision.retry_after = decision.never ? Duration::zero() : l.blocked_until - mono;
        decision.reset = l.reset_hint;
        return decision;
      }
      const int64_t mine = std::min(l.held, r.cost);
      l.held -= mine;
      from_held.emplace_back(r.key, mine);
      if (mine == r.cost) continue;
      const double horizon = std::chrono::duration<double>(options_.prefetch_horizon).count();
      const auto cap = options_.prefetch_divisor > 0 ? r.limit / options_.prefetch_divisor : 0;
      const auto prefetch = std::min<int64_t>(
          cap, static_cast<int64_t>(std::llround(std::max(0.0, l.units_per_second * horizon))));
      takes.push_back({r.key, r.limit, r.period, r.cost - mine, r.cost - mine + prefetch});
    }
    if (!takes.empty() && !may_wait) {
      // The store must be asked: nothing is taken, and the demand is counted by the call that
      // waits for it.
      undo();
      for (const BucketRequest& r : requests) {
        if (r.limit > 0) local_[r.key].used -= r.cost;
      }
      return std::nullopt;
    }
    if (takes.empty()) {
      ++counters_.local;
      for (const BucketRequest& r : requests) {
        if (r.limit <= 0) continue;
        const Local& l = local_[r.key];
        if (decision.key.empty() || l.remaining_hint < decision.remaining) {
          decision.key = r.key;
          decision.limit = r.limit;
          decision.remaining = l.remaining_hint + l.held;
          decision.reset = l.reset_hint;
        }
      }
      return decision;
    }
  }
  std::sort(takes.begin(), takes.end(), [](const Take& a, const Take& b) { return a.key < b.key; });
  RateDecision refused;
  auto taken = take(takes, &refused);
  std::lock_guard lock(mu_);
  ++counters_.takes;
  if (!taken) {
    for (const auto& [key, n] : from_held) local_[key].held += n;
    if (refused.key.empty()) {
      // The store could not be reached: refused, as a limit that cannot be checked admits
      // nothing; the client may retry at once (on another replica too).
      spdlog::warn("ledger: a shared rate limit could not be checked: {}", taken.error().message);
      refused.allowed = false;
      refused.key = takes.front().key;
      refused.limit = takes.front().limit;
      refused.retry_after = std::chrono::seconds(1);
      return refused;
    }
    ++counters_.refused_takes;
    local_[refused.key].blocked_until = mono + refused.retry_after;
    for (const Take& t : takes) {
      if (t.key == refused.key) local_[refused.key].blocked_need = t.need;
    }
    local_[refused.key].reset_hint = refused.reset;
    return refused;
  }
  for (size_t i = 0; i < takes.size(); ++i) {
    Local& l = local_[takes[i].key];
    l.held += (*taken)[i].got - takes[i].need;
    l.remaining_hint = (*taken)[i].remaining;
    l.reset_hint = (*taken)[i].reset;
    if (decision.key.empty() || (*taken)[i].remaining + l.held < decision.remaining) {
      decision.key = takes[i].key;
      decision.limit = takes[i].limit;
      decision.remaining = (*taken)[i].remaining + l.held;
      decision.reset = (*taken)[i].reset;
    }
  }
  return decision;
}

void RateLeases::adjust(const BucketRequest& bucket, int64_t delta) {
  if (bucket.limit <= 0 || delta == 0) return;
  std::lock_guard lock(mu_);
  Local& l = local_[bucket.key];
  l.limit = bucket.limit;
  l.period = bucket.period;
  l.last_used = clock_.monotonic();
  if (delta < 0) {
    // Taken and not used: this replica may use them again (or give them back when idle).
    const int64_t back = -delta;
    const int64_t repaid = std::min(back, l.owed);
    l.owed -= repaid;
    l.held += back - repaid;
    return;
  }
  const int64_t mine = std::min(l.held, delta);
  l.held -= mine;
  l.owed += delta - mine;
  l.used += delta;
}

Result<void> RateLeases::flush(bool everything) {
  struct Change {
    std::string key;
    int64_t back_ns = 0;  // the worth of units given back
    int64_t owed_ns = 0;  // the worth of units owed
    int64_t held = 0;
    int64_t owed = 0;
  };
  std::vector<Change> changes;
  const MonoTime mono = clock_.monotonic();
  {
    std::lock_guard lock(mu_);
    const double dt =
        last_tick_ == MonoTime{}
            ? 0.05
            : std::max(1e-3, std::chrono::duration<double>(mono - last_tick_).count());
    last_tick_ = mono;
    for (auto it = local_.begin(); it != local_.end();) {
      Local& l = it->second;
      l.units_per_second =
          std::max(static_cast<double>(l.used) / dt,
                   0.8 * l.units_per_second + 0.2 * static_cast<double>(l.used) / dt);
      l.used = 0;
      const bool idle = everything || mono - l.last_used >= options_.idle;
      Change c{it->first};
      if (l.limit > 0) {
        const __int128 per_unit = static_cast<__int128>(l.period.count());
        if (idle && l.held > 0) {
          // Rounded down: what is given back is never worth more than the units.
          c.back_ns = static_cast<int64_t>(per_unit * l.held / l.limit);
          c.held = l.held;
          l.held = 0;
        }
        if (l.owed > 0) {
          c.owed_ns = static_cast<int64_t>(ceilDiv(per_unit * l.owed, l.limit));
          c.owed = l.owed;
          l.owed = 0;
        }
      }
      if (c.back_ns > 0 || c.owed_ns > 0) changes.push_back(std::move(c));
      if (idle && l.held == 0 && l.owed == 0 && mono >= l.blocked_until) {
        it = local_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (changes.empty()) return {};
  const int64_t now_ns = unixNanos(clock_.now());
  std::sort(changes.begin(), changes.end(),
            [](const Change& a, const Change& b) { return a.key < b.key; });
  auto written = store_.writeAlone([&](store::Tx& tx) -> Result<void> {
    for (const Change& c : changes) {
      if (c.owed_ns > 0) PURSER_TRY(tx.exec(kOwe, {c.owed_ns, now_ns, c.key}));
      if (c.back_ns > 0) PURSER_TRY(tx.exec(kGiveBack, {c.back_ns, now_ns, c.key}));
    }
    return {};
  });
  if (!written) {
    // Owed units are owed still; units held are dropped (the bucket stays stricter a while).
    std::lock_guard lock(mu_);
    for (const Change& c : changes) {
      if (c.owed > 0) local_[c.key].owed += c.owed;
    }
    return fail(written.error());
  }
  return {};
}

Result<void> RateLeases::tick() { return flush(/*everything=*/false); }

Result<void> RateLeases::giveBackAll() { return flush(/*everything=*/true); }

RateLeaseCounters RateLeases::counters() const {
  return {counters_.takes.load(), counters_.refused_takes.load(), counters_.local.load(),
          counters_.local_refusals.load()};
}

}  // namespace purser::ledger
