// Scope: what a budget or a rate limit applies to — a tenant, a team, a user, a service account
// or a single key. Plain values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace purser::ledger {

enum class ScopeKind { kTenant, kTeam, kUser, kServiceAccount, kKey };

Result<ScopeKind> parseScopeKind(std::string_view name);  // tenant, team, user, ...
std::string_view scopeKindName(ScopeKind kind);

struct Scope {
  ScopeKind kind = ScopeKind::kTenant;
  std::string id;
  friend bool operator==(const Scope&, const Scope&) = default;
};

// Whose budgets and limits a piece of usage counts against: its tenant, team and owner (a user
// or a service account), and the key it came with together with every key that key was derived
// from (nearest first). Empty ids are left out. The one place this chain is spelled out.
struct Charged {
  std::string tenant_id;
  std::string team_id;
  std::string user_id;
  std::string service_account_id;
  std::vector<std::string> key_chain;
};
std::vector<Scope> scopesOf(const Charged& who);

}  // namespace purser::ledger
