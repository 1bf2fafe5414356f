#include "identity/payer.h"

#include <fmt/format.h>

namespace purser::identity {

ledger::Payer payerOf(ledger::Charged charged, const std::string& key_id,
                      const Directory& directory) {
  ledger::Payer p;
  p.charged = std::move(charged);
  p.charged.key_chain.clear();
  for (const ApiKey& k : directory.keyChain(key_id)) {
    p.charged.key_chain.push_back(k.id);
    p.keys.push_back({k.id, k.rpm, k.tpm});
  }
  if (p.charged.key_chain.empty() && !key_id.empty()) p.charged.key_chain.push_back(key_id);
  return p;
}

ledger::Payer payerOf(const Principal& who, const Directory& directory) {
  ledger::Charged c;
  c.tenant_id = who.tenant_id;
  c.team_id = who.team_id;
  (who.kind == OwnerKind::kUser ? c.user_id : c.service_account_id) = who.id;
  return payerOf(std::move(c), who.key_id, directory);
}

std::string walletScopeName(const Directory& directory, const ledger::Scope& scope) {
  std::string name = scope.id;
  switch (scope.kind) {
    case ledger::ScopeKind::kTenant:
      if (auto t = directory.tenant(scope.id)) name = t->name;
      break;
    case ledger::ScopeKind::kTeam:
      if (auto t = directory.team(scope.id)) name = t->name;
      break;
    case ledger::ScopeKind::kUser:
      if (auto u = directory.user(scope.id)) name = u->name;
      break;
    case ledger::ScopeKind::kServiceAccount:
      if (auto a = directory.serviceAccount(scope.id)) name = a->name;
      break;
    case ledger::ScopeKind::kKey:
      // A key is named by its name only: never its secret, hash or lookup.
      for (const auto& k : directory.keys()) {
        if (k.id == scope.id) name = k.name;
      }
      break;
  }
  return fmt::format("{}:{}", ledger::scopeKindName(scope.kind), name);
}

}  // namespace purser::identity
