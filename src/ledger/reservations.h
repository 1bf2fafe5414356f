// Reservations: who made each outstanding reservation taken through the metering API, with its
// token estimate, so that only they (or their admins) can settle or release it, and the
// settlement can reconcile the tokens-per-minute limits. One table per API (Services owns it):
// two servers in one process keep their own.
//
// Bounded: past kMax outstanding reservations the oldest are forgotten (the ledger still holds
// them until their lease ends). Thread-safe: every method may be called from any worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ledger/meter.h"
#include "ledger/usage_event.h"

namespace purser::ledger {

class Reservations {
 public:
  static constexpr size_t kMax = 500'000;

  void put(const UsageEvent& draft, int64_t tokens_estimate);
  // Those the ledger held again at start (Meter::recover).
  void restore(const std::vector<RestoredReservation>& restored);
  // The draft event and token estimate of reservation `id`.
  std::optional<std::pair<UsageEvent, int64_t>> get(const std::string& id) const;
  void erase(const std::string& id);

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::pair<UsageEvent, int64_t>> drafts_;  // guarded by mu_
  std::deque<std::string> order_;  // ids, oldest first; guarded by mu_
};

}  // namespace purser::ledger
