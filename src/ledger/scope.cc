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

std::vector<Scope> scopesOf(const Charged& who) {
  std::vector<Scope> out;
  const auto add = [&](ScopeKind kind, const std::string& id) {
    if (!id.empty()) out.push_back({kind, id});
  };
  add(ScopeKind::kTenant, who.tenant_id);
  add(ScopeKind::kTeam, who.team_id);
  add(ScopeKind::kUser, who.user_id);
  add(ScopeKind::kServiceAccount, who.service_account_id);
  for (const auto& k : who.key_chain) add(ScopeKind::kKey, k);
  return out;
}

}  // namespace purser::ledger
