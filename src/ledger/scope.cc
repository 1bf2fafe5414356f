#include "ledger/scope.h"

#include <fmt/format.h>

namespace purser::ledger {

Result<ScopeKind> parseScopeKind(std::string_view name) {
  if (name == "tenant") return ScopeKind::kTenant;
  if (name == "team") return ScopeKind::kTeam;
  if (name == "user") return ScopeKind::kUser;
  if (name == "service_account") return ScopeKind::kServiceAccount;
  if (name == "key") return ScopeKind::kKey;
  return fail(invalidArgument(fmt::format(
      "unknown scope kind \"{}\"; expected tenant, team, user, service_account or key", name)));
}

std::string_view scopeKindName(ScopeKind kind) {
  switch (kind) {
    case ScopeKind::kTenant:
      return "tenant";
    case ScopeKind::kTeam:
      return "team";
    case ScopeKind::kUser:
      return "user";
    case ScopeKind::kServiceAccount:
      return "service_account";
    case ScopeKind::kKey:
      return "key";
  }
  return "tenant";
}

}  // namespace purser::ledger
