// Scope: what a budget or a rate limit applies to — a tenant, a team, a user, a service account
// or a single key. Plain values.
#pragma once

#include <string>
#include <string_view>

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

}  // namespace purser::ledger
