// What the observer records while a team's hard wallet runs out, for the diagnosis tests: over the
// 20 minutes before `now_ms`, sampled every 30 s, the wallet's spent ratio climbs from 0.2 to 1.0
// and stays there, while route "chat" serves 30 requests a sample until then and 5 after, and
// refuses 30 a sample (429) once it is spent.
#pragma once

#include <cstdint>
#include <string>

#include "observe/series.h"

namespace purser::testing {

inline void recordWalletRunningOut(observe::SeriesStore& series, int64_t now_ms,
                                   const std::string& wallet_id,
                                   const std::string& scope = "team:zephyr",
                                   const std::string& tenant = "borealis") {
  const observe::SeriesKey ratio("purser_wallet_spent_ratio",
                                 {{"scope", scope}, {"tenant", tenant}, {"wallet", wallet_id}});
  const observe::SeriesKey refused("purser_gateway_requests_total",
                                   {{"route", "chat"}, {"code", "429"}});
  const observe::SeriesKey served("purser_gateway_requests_total",
                                  {{"route", "chat"}, {"target", "openai"}, {"code", "200"}});
  double refused_total = 0, served_total = 0;
  for (int i = 0; i <= 40; ++i) {
    const int64_t t = now_ms - (40 - i) * 30'000;
    series.append(ratio, t, i < 20 ? 0.2 + 0.04 * i : 1.0);
    refused_total += i < 20 ? 0 : 30;
    served_total += i < 20 ? 30 : 5;
    series.append(refused, t, refused_total);
    series.append(served, t, served_total);
  }
}

}  // namespace purser::testing
