#include "ledger/reservations.h"

namespace purser::ledger {

void Reservations::put(const UsageEvent& draft, int64_t tokens_estimate) {
  std::lock_guard lock(mu_);
  drafts_[draft.id] = {draft, tokens_estimate};
  order_.push_back(draft.id);
  while (order_.size() > kMax) {
    drafts_.erase(order_.front());
    order_.pop_front();
  }
}

void Reservations::restore(const std::vector<RestoredReservation>& restored) {
  for (const auto& r : restored) put(r.draft, r.token_estimate);
}

std::optional<std::pair<UsageEvent, int64_t>> Reservations::get(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = drafts_.find(id);
  if (it == drafts_.end()) return std::nullopt;
  return it->second;
}

void Reservations::erase(const std::string& id) {
  std::lock_guard lock(mu_);
  drafts_.erase(id);
}

}  // namespace purser::ledger
