#include "ledger/session_caps.h"

#include <fmt/format.h>

namespace purser::ledger {

bool SessionCaps::tracked(const std::string& tenant, const std::string& session) const {
  std::lock_guard lock(mu_);
  return entries_.contains({tenant, session});
}

size_t SessionCaps::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

void SessionCaps::evictLocked() {
  auto oldest = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (!it->second.held.isZero()) continue;
    if (oldest == entries_.end() || it->second.used < oldest->second.used) oldest = it;
  }
  if (oldest != entries_.end()) entries_.erase(oldest);
}

void SessionCaps::track(const std::string& tenant, const std::string& session, Money spent) {
  std::lock_guard lock(mu_);
  Key key{tenant, session};
  if (entries_.contains(key)) return;
  if (entries_.size() >= max_) evictLocked();
  entries_[key] = Entry{std::nullopt, spent, Money(), ++tick_};
}

Result<Money> SessionCaps::hold(const std::string& tenant, const std::string& session,
                                std::optional<Money> cap, Money amount) {
  std::lock_guard lock(mu_);
  auto it = entries_.find({tenant, session});
  if (it == entries_.end()) return Money();
  Entry& e = it->second;
  e.used = ++tick_;
  if (cap) e.cap = cap;
  if (e.cap) {
    const Money committed = e.spent.add(e.held).value_or(Money::max());
    const Money after = committed.add(amount).value_or(Money::max());
    if (after > *e.cap) {
      return fail(Error(ErrorCode::kResourceExhausted,
                        fmt::format("session \"{}\" reached its cap of {} (spent {}, {} held by "
                                    "calls in flight, this call may cost {})",
                                    session, e.cap->toString(), e.spent.toString(),
                                    e.held.toString(), amount.toString())));
    }
  }
  e.held = e.held.add(amount).value_or(Money::max());
  return amount;
}

void SessionCaps::settle(const std::string& tenant, const std::string& session, Money held,
                         Money cost) {
  std::lock_guard lock(mu_);
  auto it = entries_.find({tenant, session});
  if (it == entries_.end()) return;
  Entry& e = it->second;
  e.held = held > e.held ? Money() : e.held.sub(held).value_or(Money());
  e.spent = e.spent.add(cost).value_or(Money::max());
}

void SessionCaps::release(const std::string& tenant, const std::string& session, Money held) {
  settle(tenant, session, held, Money());
}

}  // namespace purser::ledger
