#include "ledger/wallet_book.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/assert.h"

namespace purser::ledger {

namespace {
// How many settled and expired event ids are remembered in memory for idempotency; older
// duplicates are caught by the store's unique event ids.
constexpr size_t kRemembered = 200'000;
}  // namespace

Result<void> validateWalletSpec(const WalletSpec& spec) {
  if (spec.limit.isNegative()) {
    return fail(invalidArgument("a limit cannot be negative").withField("limit"));
  }
  int previous = 0;
  for (int t : spec.alert_at) {
    if (t < 1 || t > 1000) {
      return fail(invalidArgument(fmt::format("threshold {} is outside 1..1000 percent", t))
                      .withField("alert_at"));
    }
    if (t <= previous) {
      return fail(invalidArgument("thresholds must be strictly increasing").withField("alert_at"));
    }
    previous = t;
  }
  return {};
}

void WalletBook::rollIfDue(WalletState& w, SystemTime now) const {
  if (now < w.window.end && now >= w.window.start) return;
  w.window = periodWindow(w.spec.period, w.spec.zone, now);
  w.spent = Money::zero();
  w.fired.clear();
  // A lease is the window's: the next one starts with none.
  w.granted = Money::zero();
  w.lease_charged = Money::zero();
  w.valid_until = MonoTime::min();
}

namespace {
Money nonNegative(Result<Money> m) { return (m && !m->isNegative()) ? *m : Money::zero(); }
Money leftOf(Money limit, Money a, Money b) {
  const auto used = a.add(b);
  return used ? nonNegative(limit.sub(*used)) : Money::zero();
}
}  // namespace

Money WalletBook::roomLocked(const WalletState& w) const {
  Money room = leftOf(w.spec.limit, w.spent, w.reserved);
  if (leased_ && w.spec.hard) room = std::min(room, leftOf(w.granted, w.lease_charged, w.reserved));
  return room;
}

void WalletBook::noteDemand(WalletState& w, Money amount, MonoTime now) {
  if (!leased_ || !w.spec.hard) return;
  w.demand = w.demand.add(amount).value_or(Money::max());
  if (amount > w.largest) w.largest = amount;
  w.last_demand = now;
}

WalletStatus WalletBook::statusOf(const WalletState& w) const {
  WalletStatus s;
  s.spec = w.spec;
  s.window = w.window;
  s.spent = w.spent;
  s.reserved = w.reserved;
  const auto used = w.spent.add(w.reserved);
  const auto left = used ? w.spec.limit.sub(*used) : Result<Money>(Money::zero());
  s.remaining = (left && !left->isNegative()) ? *left : Money::zero();
  s.used_basis_points = w.spec.limit.isZero()
                            ? (w.spent.isZero() ? 0 : 10'000)
                            : static_cast<int64_t>(static_cast<__int128>(w.spent.nanos()) * 10'000 /
                                                   w.spec.limit.nanos());
  return s;
}

Result<void> WalletBook::put(WalletSpec spec, Money spent) {
  PURSER_TRY(validateWalletSpec(spec));
  const SystemTime now = clock_.now();
  std::lock_guard lock(mu_);
  auto it = wallets_.find(spec.id);
  if (it != wallets_.end()) {
    WalletState& w = it->second;
    const bool new_window = w.spec.period != spec.period || w.spec.zone.name() != spec.zone.name();
    w.spec = std::move(spec);
    if (new_window) {
      w.window = periodWindow(w.spec.period, w.spec.zone, now);
    }
    return {};
  }
  by_scope_.emplace(fmt::format("{}:{}", scopeKindName(spec.scope.kind), spec.scope.id), spec.id);
  WalletState w;
  w.window = periodWindow(spec.period, spec.zone, now);
  w.spec = std::move(spec);
  w.spent = spent;
  const std::string id = w.spec.id;
  wallets_.emplace(id, std::move(w));
  return {};
}

Result<void> WalletBook::remove(const std::string& wallet_id) {
  std::lock_guard lock(mu_);
  auto it = wallets_.find(wallet_id);
  if (it == wallets_.end()) {
    return fail(Error(ErrorCode::kNotFound, fmt::format("no wallet \"{}\"", wallet_id)));
  }
  const auto key =
      fmt::format("{}:{}", scopeKindName(it->second.spec.scope.kind), it->second.spec.scope.id);
  auto [first, last] = by_scope_.equal_range(key);
  for (auto i = first; i != last; ++i) {
    if (i->second == wallet_id) {
      by_scope_.erase(i);
      break;
    }
  }
  wallets_.erase(it);
  return {};
}

Result<WalletStatus> WalletBook::status(const std::string& wallet_id) const {
  const SystemTime now = clock_.now();
  std::lock_guard lock(mu_);
  auto it = wallets_.find(wallet_id);
  if (it == wallets_.end()) {
    return fail(Error(ErrorCode::kNotFound, fmt::format("no wallet \"{}\"", wallet_id)));
  }
  rollIfDue(it->second, now);
  return statusOf(it->second);
}

std::vector<WalletStatus> WalletBook::all() const {
  const SystemTime now = clock_.now();
  std::lock_guard lock(mu_);
  std::vector<WalletStatus> out;
  out.reserve(wallets_.size());
  for (auto& [_, w] : wallets_) {
    rollIfDue(w, now);
    out.push_back(statusOf(w));
  }
  std::sort(out.begin(), out.end(),
            [](const WalletStatus& a, const WalletStatus& b) { return a.spec.id < b.spec.id; });
  return out;
}

Result<void> WalletBook::reserve(const ReserveRequest& request) {
  if (request.amount.isNegative()) {
    return fail(invalidArgument("a reservation cannot be negative"));
  }
  const SystemTime now = clock_.now();
  const MonoTime mono = clock_.monotonic();
  std::lock_guard lock(mu_);
  if (reservations_.contains(request.event_id) || settled_.contains(request.event_id)) {
    return fail(Error(ErrorCode::kAlreadyExists,
                      fmt::format("event \"{}\" already has a reservation", request.event_id)));
  }
  // Check every wallet first; change nothing unless all of them admit the amount.
  std::vector<WalletState*> chain;
  chain.reserve(request.wallet_ids.size());
  for (const auto& id : request.wallet_ids) {
    auto it = wallets_.find(id);
    if (it == wallets_.end()) {
      return fail(Error(ErrorCode::kNotFound, fmt::format("no wallet \"{}\"", id)));
    }
    WalletState& w = it->second;
    rollIfDue(w, now);
    if (w.spec.hard) {
      noteDemand(w, request.amount, mono);
      const bool lease_ok = !leased_ || mono < w.valid_until;
      if (!lease_ok || request.amount > roomLocked(w)) {
        const WalletStatus s = statusOf(w);
        return fail(
            Error(ErrorCode::kResourceExhausted,
                  fmt::format("budget exceeded: {} wallet {} has {} left of {} ({} "
                              "spent, {} reserved); this request may cost up to {}",
                              scopeKindName(w.spec.scope.kind), w.spec.id, s.remaining.toString(),
                              w.spec.limit.toString(), w.spent.toString(), w.reserved.toString(),
                              request.amount.toString())));
      }
    }
    chain.push_back(&w);
  }
  for (WalletState* w : chain) {
    auto r = w->reserved.add(request.amount);
    PURSER_CHECK(r.has_value());  // bounded by the checks above for hard wallets
    w->reserved = *r;
  }
  Reservation res;
  res.wallet_ids = request.wallet_ids;
  res.amount = request.amount;
  res.expires = mono + request.lease;
  res.expiry = expiries_.emplace(res.expires, request.event_id);
  reservations_.emplace(request.event_id, std::move(res));
  return {};
}

void WalletBook::rememberSettled(const std::string& event_id, Money charged) {
  settled_.emplace(event_id, charged);
  settled_order_.push_back(event_id);
  while (settled_order_.size() > kRemembered) {
    settled_.erase(settled_order_.front());
    settled_order_.pop_front();
  }
}

Result<Settlement> WalletBook::chargeLocked(const std::string& event_id,
                                            const std::vector<std::string>& wallet_ids,
                                            Money actual, std::optional<Money> cap,
                                            SystemTime now) {
  Settlement out;
  // What may be charged: the cost, within the hold and the room every hard wallet has left.
  Money charged = actual;
  if (cap && *cap < charged) charged = *cap;
  for (const auto& id : wallet_ids) {
    auto it = wallets_.find(id);
    if (it == wallets_.end()) continue;
    WalletState& w = it->second;
    rollIfDue(w, now);
    if (!w.spec.hard) continue;
    if (!cap) noteDemand(w, actual, clock_.monotonic());
    const Money room = roomLocked(w);
    if (room < charged) charged = room;
  }
  out.charged = charged;
  out.overage = actual.sub(charged).value_or(Money::zero());
  for (const auto& id : wallet_ids) {
    auto it = wallets_.find(id);
    if (it == wallets_.end()) continue;  // deleted since: nothing left to charge there
    WalletState& w = it->second;
    auto spent = w.spent.add(charged);
    w.spent = spent ? *spent : Money::max();
    if (leased_ && w.spec.hard)
      w.lease_charged = w.lease_charged.add(charged).value_or(Money::max());
    if (w.spec.limit.isNegative() || w.spec.alert_at.empty()) continue;
    for (int threshold : w.spec.alert_at) {
      if (w.fired.contains(threshold)) continue;
      // spent >= limit x threshold / 100, exactly.
      const __int128 lhs = static_cast<__int128>(w.spent.nanos()) * 100;
      const __int128 rhs = static_cast<__int128>(w.spec.limit.nanos()) * threshold;
      if (lhs >= rhs && lhs > 0) {
        w.fired.insert(threshold);
        out.alerts.push_back({w.spec.id, threshold, w.spent, w.spec.limit, w.window});
      }
    }
  }
  rememberSettled(event_id, charged);
  out.wallet_ids = wallet_ids;
  return out;
}

Result<Settlement> WalletBook::settle(const std::string& event_id, Money actual) {
  if (actual.isNegative()) return fail(invalidArgument("a cost cannot be negative"));
  const SystemTime now = clock_.now();
  std::lock_guard lock(mu_);
  if (auto done = settled_.find(event_id); done != settled_.end()) {
    return Settlement{done->second, Money::zero(), true, {}};
  }
  auto it = reservations_.find(event_id);
  if (it == reservations_.end()) {
    auto late = expired_.find(event_id);
    if (late == expired_.end()) {
      return fail(
          Error(ErrorCode::kNotFound, fmt::format("event \"{}\" has no reservation", event_id)));
    }
    const Expired was = std::move(late->second);
    expired_.erase(late);
    return chargeLocked(event_id, was.wallet_ids, actual, was.amount, now);
  }
  Reservation res = std::move(it->second);
  expiries_.erase(res.expiry);
  reservations_.erase(it);
  for (const auto& id : res.wallet_ids) {
    auto w = wallets_.find(id);
    if (w == wallets_.end()) continue;
    auto r = w->second.reserved.sub(res.amount);
    w->second.reserved = (r && !r->isNegative()) ? *r : Money::zero();
  }
  return chargeLocked(event_id, res.wallet_ids, actual, res.amount, now);
}

Result<Settlement> WalletBook::charge(const std::string& event_id,
                                      const std::vector<std::string>& wallet_ids, Money actual) {
  if (actual.isNegative()) return fail(invalidArgument("a cost cannot be negative"));
  const SystemTime now = clock_.now();
  std::lock_guard lock(mu_);
  if (auto done = settled_.find(event_id); done != settled_.end()) {
    return Settlement{done->second, Money::zero(), true, {}};
  }
  if (reservations_.contains(event_id)) {
    return fail(Error(ErrorCode::kAlreadyExists,
                      fmt::format("event \"{}\" has a reservation; settle it instead", event_id)));
  }
  return chargeLocked(event_id, wallet_ids, actual, std::nullopt, now);
}

Result<void> WalletBook::release(const std::string& event_id) {
  std::lock_guard lock(mu_);
  auto it = reservations_.find(event_id);
  if (it == reservations_.end()) {
    return fail(
        Error(ErrorCode::kNotFound, fmt::format("event \"{}\" has no reservation", event_id)));
  }
  for (const auto& id : it->second.wallet_ids) {
    auto w = wallets_.find(id);
    if (w == wallets_.end()) continue;
    auto r = w->second.reserved.sub(it->second.amount);
    w->second.reserved = (r && !r->isNegative()) ? *r : Money::zero();
  }
  expiries_.erase(it->second.expiry);
  reservations_.erase(it);
  return {};
}

std::vector<std::string> WalletBook::expireLeases() {
  const MonoTime now = clock_.monotonic();
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  while (!expiries_.empty() && expiries_.begin()->first <= now) {
    const std::string event_id = expiries_.begin()->second;
    expiries_.erase(expiries_.begin());
    auto it = reservations_.find(event_id);
    if (it == reservations_.end()) continue;
    for (const auto& id : it->second.wallet_ids) {
      auto w = wallets_.find(id);
      if (w == wallets_.end()) continue;
      auto r = w->second.reserved.sub(it->second.amount);
      w->second.reserved = (r && !r->isNegative()) ? *r : Money::zero();
    }
    expired_.emplace(event_id, Expired{std::move(it->second.wallet_ids), it->second.amount});
    expired_order_.push_back(event_id);
    while (expired_order_.size() > kRemembered) {
      expired_.erase(expired_order_.front());
      expired_order_.pop_front();
    }
    reservations_.erase(it);
    out.push_back(event_id);
  }
  return out;
}

int64_t windowMillis(SystemTime t) {
  if (t == SystemTime::min()) return INT64_MIN;
  if (t == SystemTime::max()) return INT64_MAX;
  return unixMillis(t);
}

void WalletBook::enableLeases() {
  std::lock_guard lock(mu_);
  leased_ = true;
}

bool WalletBook::leased() const {
  std::lock_guard lock(mu_);
  return leased_;
}

std::vector<LeaseState> WalletBook::takeLeaseStates() {
  const SystemTime now = clock_.now();
  const MonoTime mono = clock_.monotonic();
  std::lock_guard lock(mu_);
  std::vector<LeaseState> out;
  for (auto& [id, w] : wallets_) {
    if (!w.spec.hard) continue;
    rollIfDue(w, now);
    // Wallets this replica never used hold no lease and need none.
    if (!w.granted.isPositive() && !w.demand.isPositive() && !w.reserved.isPositive()) continue;
    out.push_back({id, w.window, w.spec.limit, w.granted, w.lease_charged, w.reserved, w.demand,
                   w.largest, mono < w.valid_until, w.last_demand});
    w.demand = Money::zero();
    w.largest = Money::zero();
  }
  std::sort(out.begin(), out.end(),
            [](const LeaseState& a, const LeaseState& b) { return a.wallet_id < b.wallet_id; });
  return out;
}

std::optional<LeaseState> WalletBook::leaseState(const std::string& wallet_id) const {
  const SystemTime now = clock_.now();
  const MonoTime mono = clock_.monotonic();
  std::lock_guard lock(mu_);
  auto it = wallets_.find(wallet_id);
  if (it == wallets_.end() || !it->second.spec.hard) return std::nullopt;
  WalletState& w = it->second;
  rollIfDue(w, now);
  return LeaseState{
      wallet_id, w.window,  w.spec.limit,         w.granted,    w.lease_charged, w.reserved,
      w.demand,  w.largest, mono < w.valid_until, w.last_demand};
}

void WalletBook::setLease(const std::string& wallet_id, int64_t window_start_ms, Money granted,
                          MonoTime valid_until, Money store_spent, Money store_used, bool adopt) {
  const SystemTime now = clock_.now();
  std::lock_guard lock(mu_);
  auto it = wallets_.find(wallet_id);
  if (it == wallets_.end()) return;
  WalletState& w = it->second;
  rollIfDue(w, now);
  if (windowMillis(w.window.start) != window_start_ms) return;
  w.granted = granted;
  w.valid_until = valid_until;
  if (adopt) w.lease_charged = store_used;
  // What the store knows was spent, and what this replica charged and has not shipped yet.
  const Money unshipped = nonNegative(w.lease_charged.sub(store_used));
  const Money spent = store_spent.add(unshipped).value_or(Money::max());
  if (spent > w.spent) w.spent = spent;
}

bool WalletBook::giveBack(const std::string& wallet_id, int64_t window_start_ms, Money amount) {
  std::lock_guard lock(mu_);
  auto it = wallets_.find(wallet_id);
  if (it == wallets_.end()) return false;
  WalletState& w = it->second;
  if (windowMillis(w.window.start) != window_start_ms || amount.isNegative()) return false;
  if (leftOf(w.granted, w.lease_charged, w.reserved) < amount) return false;
  w.granted = nonNegative(w.granted.sub(amount));
  return true;
}

void WalletBook::renewLeases(MonoTime valid_until) {
  std::lock_guard lock(mu_);
  for (auto& [_, w] : wallets_) {
    if (w.spec.hard && w.granted.isPositive()) w.valid_until = valid_until;
  }
}

std::vector<std::pair<std::string, Money>> WalletBook::shortfall(
    const std::vector<std::string>& wallet_ids, Money amount) const {
  const SystemTime now = clock_.now();
  const MonoTime mono = clock_.monotonic();
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, Money>> out;
  if (!leased_) return out;
  for (const auto& id : wallet_ids) {
    auto it = wallets_.find(id);
    if (it == wallets_.end() || !it->second.spec.hard) continue;
    WalletState& w = it->second;
    rollIfDue(w, now);
    const Money free =
        mono < w.valid_until ? leftOf(w.granted, w.lease_charged, w.reserved) : Money::zero();
    if (free < amount) out.emplace_back(id, nonNegative(amount.sub(free)));
  }
  return out;
}

std::vector<std::string> WalletBook::chain(const Charged& who, std::string_view model) const {
  const std::vector<Scope> scopes = scopesOf(who);
  std::vector<std::string> out;
  std::lock_guard lock(mu_);
  for (const Scope& scope : scopes) {
    if (scope.id.empty()) continue;
    auto [first, last] =
        by_scope_.equal_range(fmt::format("{}:{}", scopeKindName(scope.kind), scope.id));
    for (auto i = first; i != last; ++i) {
      const WalletSpec& spec = wallets_.at(i->second).spec;
      if (spec.model.empty() || spec.model == model) out.push_back(i->second);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> WalletBook::holding(const std::vector<std::string>& wallet_ids,
                                             SystemTime at) const {
  const SystemTime now = clock_.now();
  std::vector<std::string> out;
  std::lock_guard lock(mu_);
  for (const auto& id : wallet_ids) {
    auto it = wallets_.find(id);
    if (it == wallets_.end()) continue;
    rollIfDue(it->second, now);
    if (at >= it->second.window.start && at < it->second.window.end) out.push_back(id);
  }
  return out;
}

bool WalletBook::holds(const std::string& event_id) const {
  std::lock_guard lock(mu_);
  return reservations_.contains(event_id);
}

size_t WalletBook::outstanding() const {
  std::lock_guard lock(mu_);
  return reservations_.size();
}

}  // namespace purser::ledger
