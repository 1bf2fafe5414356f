#include "gpushare/throttle.h"

#include <algorithm>
#include <cmath>

namespace purser::gpushare {

int64_t retuneRate(int64_t rate_milli, double util_percent, uint64_t launched_cost,
                   uint64_t window_ns, int target_percent) {
  if (launched_cost == 0 || window_ns == 0) return rate_milli;  // nothing ran: nothing learnt
  const double observed = static_cast<double>(launched_cost) * 1000.0 * 1e9 /
                          static_cast<double>(window_ns);  // milli-units per second
  double next;
  if (util_percent < 0.5) {
    // Work was launched and none was seen: the samples lag, or the work is tiny. Loosen.
    if (rate_milli <= 0) return 0;
    next = static_cast<double>(rate_milli) * 2.0;
  } else {
    const double wanted = observed * target_percent / util_percent;
    if (rate_milli <= 0) {
      next = wanted;
    } else {
      const double old = static_cast<double>(rate_milli);
      next = std::clamp(std::sqrt(old * wanted), old / 2.0, old * 2.0);
    }
  }
  // Never looser than four times what was launched (a pod that ran lightly must not bank a rate
  // that lets a sudden burst run unthrottled), never below one unit a second.
  next = std::min(next, std::max(observed * 4.0, 1000.0));
  return std::max<int64_t>(static_cast<int64_t>(next), 1000);
}

}  // namespace purser::gpushare
