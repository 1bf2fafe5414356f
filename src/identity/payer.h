// Who pays for work done with a key, as the ledger's Budget needs it: the principal's scopes and
// the rate limits of its key and every key above it. Built here, once, for the gateway, the
// reservations API and the fleet alike.
#pragma once

#include <string>

#include "identity/directory.h"
#include "identity/identity.h"
#include "ledger/budget.h"

namespace purser::identity {

// Work done now, by an authenticated principal.
ledger::Payer payerOf(const Principal& who, const Directory& directory);

// Work recorded earlier (a workload, a reservation): its tenant, team and owner as stored, and the
// key it came with (its chain read from the directory now; a key since deleted still pays as
// itself).
ledger::Payer payerOf(ledger::Charged charged, const std::string& key_id,
                      const Directory& directory);

// A wallet's scope as Purser's metrics and answers name it: "team:ml", "user:dana",
// "service_account:ci", "key:KEY-NAME", "tenant:acme" (the id when the owner is gone; a key by its
// name only, never its secret or hash).
std::string walletScopeName(const Directory& directory, const ledger::Scope& scope);

}  // namespace purser::identity
