#include "ledger/wallet_leases.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

namespace purser::ledger {

namespace {

constexpr int64_t kMinuteMs = 60'000;

int64_t minuteOf(int64_t ms) {
  if (ms == INT64_MIN) return INT64_MIN;
  return ms >= 0 ? ms / kMinuteMs : (ms - (kMinuteMs - 1)) / kMinuteMs;
}

int64_t millisOf(Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

Money clampMoney(__int128 v) {
  if (v <= 0) return Money::zero();
  if (v >= INT64_MAX) return Money::max();
  return Money::fromNanos(static_cast<int64_t>(v));
}

__int128 freeOf(const LeaseState& s) {
  return static_cast<__int128>(s.granted.nanos()) - s.charged.nanos() - s.reserved.nanos();
}

constexpr const char* kGiveBack =
    "UPDATE wallet_leases SET granted_nanos = granted_nanos - $1 WHERE wallet_id = $2 AND"
    " replica = $3 AND window_start_ms = $4";
constexpr const char* kForfeit =
    "UPDATE wallet_leases SET granted_nanos = used_nanos WHERE replica = $1 AND"
    " expires_at_ms <= $2 AND granted_nanos > used_nanos RETURNING wallet_id, window_start_ms,"
    " used_nanos";
constexpr const char* kRenew =
    "UPDATE wallet_leases SET expires_at_ms = $1 WHERE replica = $2 AND window_end_ms > $3";
constexpr const char* kDropEnded =
    "DELETE FROM wallet_leases WHERE replica = $1 AND window_end_ms <= $2";

}  // namespace

WalletLeases::WalletLeases(store::Store& store, WalletBook& book, const Clock& clock,
                           WalletLeaseOptions options)
    : store_(store), book_(book), clock_(clock), options_(std::move(options)) {}

MonoTime WalletLeases::validUntil(MonoTime asked) const {
  return asked + std::chrono::duration_cast<Duration>(options_.ttl * 3 / 4);
}

Money WalletLeases::target(const std::string& wallet_id) const {
  auto it = demand_.find(wallet_id);
  if (it == demand_.end()) return Money::zero();
  const double horizon = std::chrono::duration<double>(options_.horizon).count();
  const double by_rate = it->second.nanos_per_second * horizon;
  const __int128 by_size = static_cast<__int128>(it->second.largest.nanos()) * 2;
  const __int128 rate_nanos =
      by_rate >= 9.2e18 ? INT64_MAX : static_cast<__int128>(std::max(0.0, by_rate));
  return clampMoney(std::max(rate_nanos, by_size));
}

Result<WalletLeases::Granted> WalletLeases::grantIn(store::Tx& tx, const Want& w, int64_t now_ms,
                                                    bool fair) const {
  const int64_t start_ms = windowMillis(w.window.start);
  const int64_t end_ms = windowMillis(w.window.end);
  Granted out{w.wallet_id, start_ms, Money::zero(), Money::zero(), Money::zero()};
  if (store_.dialect() == store::Dialect::kPostgres) {
    // Grants of one wallet queue here, one at a time across every replica.
    auto locked = PURSER_TRY_VALUE(
        tx.query("SELECT id FROM wallets WHERE id = $1 FOR UPDATE", {w.wallet_id}));
    if (locked.empty()) return out;  // deleted since
  }
  // One statement, so one snapshot: what was spent and what is leased are read together.
  auto rows = PURSER_TRY_VALUE(tx.query(
      "SELECT w.limit_nanos,"
      " (SELECT COALESCE(SUM(cost_nanos), 0) FROM wallet_spend WHERE wallet_id = $1 AND"
      "  minute >= $2),"
      " (SELECT COALESCE(SUM(granted_nanos - used_nanos), 0) FROM wallet_leases WHERE"
      "  wallet_id = $1 AND window_start_ms = $3 AND replica <> $4 AND expires_at_ms > $5 AND"
      "  granted_nanos > used_nanos),"
      " (SELECT COUNT(*) FROM wallet_leases WHERE wallet_id = $1 AND window_start_ms = $3 AND"
      "  replica <> $4 AND expires_at_ms > $5 AND granted_nanos > used_nanos),"
      " (SELECT granted_nanos FROM wallet_leases WHERE wallet_id = $1 AND replica = $4 AND"
      "  window_start_ms = $3),"
      " (SELECT used_nanos FROM wallet_leases WHERE wallet_id = $1 AND replica = $4 AND"
      "  window_start_ms = $3),"
      " (SELECT expires_at_ms FROM wallet_leases WHERE wallet_id = $1 AND replica = $4 AND"
      "  window_start_ms = $3)"
      " FROM wallets w WHERE w.id = $1",
      {w.wallet_id, minuteOf(start_ms), start_ms, options_.replica, now_ms}));
  if (rows.empty()) return out;
  const auto& r = rows[0];
  const __int128 limit = r.getInt(0);
  const __int128 spent = r.getInt(1);
  const __int128 others = r.getInt(2);
  const int64_t holders = r.getInt(3);
  const bool mine = !r.isNull(4);
  const int64_t granted = mine ? r.getInt(4) : 0;
  const int64_t used = mine ? r.getInt(5) : 0;
  // An expired lease is forfeited: the others may have been granted its free part already.
  const bool live = mine && r.getInt(6) > now_ms;
  const __int128 base = live ? granted : used;
  const __int128 own_free = std::max<__int128>(0, base - used);
  const __int128 available = std::max<__int128>(0, limit - spent - others - own_free);
  __int128 give = std::min<__int128>(w.want.nanos(), available / (holders + 1));
  if (!fair) give = std::max<__int128>(give, w.need.nanos());
  give = std::clamp<__int128>(give, 0, available);
  const __int128 now_granted = std::min<__int128>(base + give, INT64_MAX);
  const int64_t expires = now_ms + millisOf(options_.ttl);
  const int64_t wanted = give < w.need.nanos() ? now_ms : 0;
  if (mine) {
    PURSER_TRY(
        tx.exec("UPDATE wallet_leases SET granted_nanos = $1, expires_at_ms = $2, wanted_at_ms = $3"
                " WHERE wallet_id = $4 AND replica = $5 AND window_start_ms = $6",
                {static_cast<int64_t>(now_granted), expires, wanted, w.wallet_id, options_.replica,
                 start_ms}));
  } else {
    PURSER_TRY(tx.exec(
        "INSERT INTO wallet_leases (wallet_id, replica, window_start_ms, window_end_ms,"
        " granted_nanos, used_nanos, expires_at_ms, wanted_at_ms) VALUES ($1, $2, $3, $4, $5, 0,"
        " $6, $7)",
        {w.wallet_id, options_.replica, start_ms, end_ms, static_cast<int64_t>(now_granted),
         expires, wanted}));
  }
  out.granted = clampMoney(now_granted);
  out.spent = clampMoney(spent);
  out.used = Money::fromNanos(used);
  return out;
}

Result<std::vector<WalletLeases::Granted>> WalletLeases::grant(const std::vector<Want>& wants,
                                                               bool fair) {
  std::vector<Granted> out;
  if (wants.empty()) return out;
  const int64_t now_ms = unixMillis(clock_.now());
  const MonoTime asked = clock_.monotonic();
  // Wallets in id order, so two replicas' grants never wait for each other's locks in a cycle.
  std::vector<Want> sorted = wants;
  std::sort(sorted.begin(), sorted.end(),
            [](const Want& a, const Want& b) { return a.wallet_id < b.wallet_id; });
  PURSER_TRY(store_.writeAlone([&](store::Tx& tx) -> Result<void> {
    out.clear();
    for (const Want& w : sorted) out.push_back(PURSER_TRY_VALUE(grantIn(tx, w, now_ms, fair)));
    return {};
  }));
  ++counters_.grants;
  for (const auto& g : out) {
    book_.setLease(g.wallet_id, g.window_start_ms, g.granted, validUntil(asked), g.spent, g.used);
  }
  return out;
}

Result<void> WalletLeases::adopt() {
  std::lock_guard lock(mu_);
  const int64_t now_ms = unixMillis(clock_.now());
  const MonoTime asked = clock_.monotonic();
  store::Rows rows;
  PURSER_TRY(store_.write([&](store::Tx& tx) -> Result<void> {
    PURSER_TRY(tx.query(kForfeit, {options_.replica, now_ms}));
    rows = PURSER_TRY_VALUE(
        tx.query("SELECT wallet_id, window_start_ms, granted_nanos, used_nanos FROM wallet_leases"
                 " WHERE replica = $1 AND window_end_ms > $2",
                 {options_.replica, now_ms}));
    PURSER_TRY(tx.exec(kRenew, {now_ms + millisOf(options_.ttl), options_.replica, now_ms}));
    PURSER_TRY(tx.exec(kDropEnded, {options_.replica, now_ms}));
    return {};
  }));
  for (const auto& r : rows) {
    book_.setLease(r.getText(0), r.getInt(1), Money::fromNanos(r.getInt(2)), validUntil(asked),
                   Money::zero(), Money::fromNanos(r.getInt(3)), /*adopt=*/true);
  }
  last_renewal_ = asked;
  if (!rows.empty()) {
    spdlog::info("ledger: replica {} took over {} budget lease(s) it held before", options_.replica,
                 rows.size());
  }
  return {};
}

Result<void> WalletLeases::tick() {
  std::lock_guard lock(mu_);
  const MonoTime mono = clock_.monotonic();
  const int64_t now_ms = unixMillis(clock_.now());
  const double dt = last_tick_ == MonoTime::min()
                        ? 0.05
                        : std::max(1e-3, std::chrono::duration<double>(mono - last_tick_).count());
  last_tick_ = mono;
  if (!wanted_read_ || mono - last_wanted_check_ >= options_.wanted_every) {
    wanted_read_ = true;
    last_wanted_check_ = mono;
    wanted_.clear();
    PURSER_TRY(store_.read([&](store::Tx& tx) -> Result<void> {
      auto rows = PURSER_TRY_VALUE(
          tx.query("SELECT wallet_id, MAX(wanted_at_ms) FROM wallet_leases WHERE replica <> $1 AND"
                   " wanted_at_ms > $2 GROUP BY wallet_id",
                   {options_.replica, now_ms - millisOf(options_.wanted_window)}));
      for (const auto& r : rows) wanted_[r.getText(0)] = r.getInt(1);
      return {};
    }));
  }
  std::vector<Want> wants;
  struct Back {
    std::string wallet_id;
    int64_t window_start_ms;
    Money amount;
  };
  std::vector<Back> backs;
  for (const LeaseState& s : book_.takeLeaseStates()) {
    Demand& d = demand_[s.wallet_id];
    const double now_rate = static_cast<double>(s.demand.nanos()) / dt;
    d.nanos_per_second = std::max(now_rate, 0.8 * d.nanos_per_second + 0.2 * now_rate);
    const bool idle = s.last_demand == MonoTime::min() || mono - s.last_demand > options_.idle;
    if (idle) {
      d = Demand{};
    } else if (s.largest > d.largest) {
      d.largest = s.largest;
    }
    const Money t = target(s.wallet_id);
    const __int128 free = freeOf(s);
    const bool others_short = wanted_.contains(s.wallet_id);
    Money back;
    if (free > 0 && idle) {
      back = clampMoney(free);
    } else if (free > 0 && others_short) {
      // Another replica fell short: keep one request's worth, or nothing if what is free would
      // not serve one (a fragment is of use only to whoever can add it to theirs).
      back = clampMoney(free >= d.largest.nanos() ? free - d.largest.nanos() : free);
    } else if (t.isPositive() && free > static_cast<__int128>(t.nanos()) * 3) {
      back = clampMoney(free - t.nanos());
    }
    if (back.isPositive()) {
      // Lowered here first: the store then holds more than this replica uses, never less.
      const int64_t start = windowMillis(s.window.start);
      if (book_.giveBack(s.wallet_id, start, back)) backs.push_back({s.wallet_id, start, back});
      continue;
    }
    if (idle || others_short || !t.isPositive()) continue;
    if (free * 2 < t.nanos() || !s.valid) {
      wants.push_back({s.wallet_id, s.window, clampMoney(t.nanos() - std::max<__int128>(0, free)),
                       Money::zero()});
    }
  }
  const bool renew = mono - last_renewal_ >= options_.ttl / 3;
  if (backs.empty() && wants.empty() && !renew) return {};
  std::vector<Granted> granted;
  store::Rows forfeited;
  std::sort(wants.begin(), wants.end(),
            [](const Want& a, const Want& b) { return a.wallet_id < b.wallet_id; });
  PURSER_TRY(store_.writeAlone([&](store::Tx& tx) -> Result<void> {
    granted.clear();
    for (const auto& b : backs) {
      PURSER_TRY(
          tx.exec(kGiveBack, {b.amount.nanos(), b.wallet_id, options_.replica, b.window_start_ms}));
    }
    for (const Want& w : wants) {
      granted.push_back(PURSER_TRY_VALUE(grantIn(tx, w, now_ms, /*fair=*/true)));
    }
    if (renew) {
      forfeited = PURSER_TRY_VALUE(tx.query(kForfeit, {options_.replica, now_ms}));
      PURSER_TRY(tx.exec(kRenew, {now_ms + millisOf(options_.ttl), options_.replica, now_ms}));
      PURSER_TRY(tx.exec(kDropEnded, {options_.replica, now_ms}));
    }
    return {};
  }));
  counters_.give_backs += backs.size();
  if (!wants.empty()) ++counters_.grants;
  for (const auto& g : granted) {
    book_.setLease(g.wallet_id, g.window_start_ms, g.granted, validUntil(mono), g.spent, g.used);
  }
  if (renew) {
    for (const auto& r : forfeited) {
      spdlog::warn(
          "ledger: replica {} renewed its lease of wallet {} too late; its free part "
          "was forfeited",
          options_.replica, r.getText(0));
      book_.setLease(r.getText(0), r.getInt(1), Money::fromNanos(r.getInt(2)), MonoTime::min(),
                     Money::zero(), Money::fromNanos(r.getInt(2)));
    }
    book_.renewLeases(validUntil(mono));
    last_renewal_ = mono;
    ++counters_.renewals;
  }
  return {};
}

Result<void> WalletLeases::topUp(const std::vector<std::string>& wallet_ids, Money amount) {
  std::lock_guard lock(mu_);
  const auto shorts = book_.shortfall(wallet_ids, amount);
  if (shorts.empty()) return {};  // a tick refilled it meanwhile
  std::vector<Want> wants;
  for (const auto& [id, missing] : shorts) {
    auto s = book_.leaseState(id);
    if (!s) continue;
    const Money extra = target(id);
    wants.push_back({id, s->window, missing.add(extra).value_or(Money::max()), missing});
  }
  ++counters_.top_ups;
  PURSER_TRY(grant(wants, /*fair=*/false));
  if (auto still = book_.shortfall(wallet_ids, amount); !still.empty()) {
    ++counters_.refused_top_ups;
    return fail(Error(ErrorCode::kResourceExhausted,
                      fmt::format("wallet {} has nothing more to lease", still.front().first)));
  }
  return {};
}

Result<void> WalletLeases::giveBackAll() {
  std::lock_guard lock(mu_);
  struct Back {
    std::string wallet_id;
    int64_t window_start_ms;
    Money amount;
  };
  std::vector<Back> backs;
  for (const LeaseState& s : book_.takeLeaseStates()) {
    const __int128 free = freeOf(s);
    const int64_t start = windowMillis(s.window.start);
    if (free > 0 && book_.giveBack(s.wallet_id, start, clampMoney(free))) {
      backs.push_back({s.wallet_id, start, clampMoney(free)});
    }
  }
  if (backs.empty()) return {};
  PURSER_TRY(store_.write([&](store::Tx& tx) -> Result<void> {
    for (const auto& b : backs) {
      PURSER_TRY(
          tx.exec(kGiveBack, {b.amount.nanos(), b.wallet_id, options_.replica, b.window_start_ms}));
    }
    return {};
  }));
  counters_.give_backs += backs.size();
  return {};
}

LeaseCounters WalletLeases::counters() const {
  return {counters_.grants.load(), counters_.top_ups.load(), counters_.refused_top_ups.load(),
          counters_.give_backs.load(), counters_.renewals.load()};
}

}  // namespace purser::ledger
