// A usage event: one request or one run of work, who did it, what it used and what it cost.
#pragma once

#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/money.h"
#include "ledger/price.h"

namespace purser::ledger {

struct UsageEvent {
  std::string id;
  SystemTime at;
  std::string tenant_id;
  std::string team_id;
  std::string user_id;
  std::string service_account_id;
  std::string key_id;
  std::string session_id;
  std::string route;
  std::string provider;
  std::string model;
  TokenCounts tokens;
  Money cost;     // what the wallets were charged
  Money overage;  // the cost beyond what the hold and the hard wallets allowed (not charged)
  int64_t latency_ms = 0;
  int64_t ttft_ms = 0;
  int status = 0;
  bool estimated = false;  // usage had to be estimated (no usage reported)
  bool recovered = false;  // charged at restart from a write-ahead intent
};

// What an event was: "tool" (an MCP tool call), "gpu" (fleet work's GPU time) or "model" (a
// model request, and anything recorded after the fact). The same rule as spend's group_by=kind.
inline const char* usageKind(const UsageEvent& e) {
  if (e.route == "mcp") return "tool";
  if (e.provider == "fleet") return "gpu";
  return "model";
}

}  // namespace purser::ledger
