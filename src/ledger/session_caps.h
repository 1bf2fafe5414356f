// SessionCaps: spending caps on agent runs. A caller names a run (x-purser-session) and may cap
// it (x-purser-session-budget): every model and tool call of the run is then held against the
// cap as well as against the wallets, so one runaway loop stops at its cap while the owner's
// wallets still hold the rest. A cap only ever lowers what may be spent: the wallets and rate
// limits apply as before.
//
// A session is tracked in this process from the first call that caps it, starting from what the
// store says it spent (Budget loads it); later calls of the run are counted whether or not they
// repeat the header, and the latest cap given is the run's. Replicas each track what they serve
// on top of the store's figure at their first sight: a run spread over several replicas can pass
// its cap by what the others spent after that (said in docs/tools.md).
//
// Bounded: at most `max_sessions` runs are tracked; past that the least recently used run with
// nothing held is forgotten (its next capped call loads it again).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "common/money.h"
#include "common/result.h"

namespace purser::ledger {

class SessionCaps {
 public:
  explicit SessionCaps(size_t max_sessions = 100'000) : max_(max_sessions) {}

  // Whether `session` of `tenant` is tracked here.
  bool tracked(const std::string& tenant, const std::string& session) const;
  // Starts tracking a run that had spent `spent` (from the store) before this process saw it.
  void track(const std::string& tenant, const std::string& session, Money spent);
  // Holds `amount` against the run's cap; `cap`, when given, becomes the run's. Returns what was
  // held (zero when the run is not tracked). kResourceExhausted, naming the run, its cap and what
  // it spent, when the hold would take it past its cap.
  Result<Money> hold(const std::string& tenant, const std::string& session,
                     std::optional<Money> cap, Money amount);
  // A held call ran and cost `cost`; `held` is what hold() returned.
  void settle(const std::string& tenant, const std::string& session, Money held, Money cost);
  // A held call did not run.
  void release(const std::string& tenant, const std::string& session, Money held);

  size_t size() const;

 private:
  struct Entry {
    std::optional<Money> cap;
    Money spent;
    Money held;
    uint64_t used = 0;
  };
  using Key = std::pair<std::string, std::string>;
  void evictLocked();

  const size_t max_;
  mutable std::mutex mu_;
  std::map<Key, Entry> entries_;  // guarded by mu_
  uint64_t tick_ = 0;             // guarded by mu_
};

}  // namespace purser::ledger
