// IdentityStore: the SQL for identity objects. Writes take the caller's transaction so that a
// change, its audit entry and anything else it implies commit together.
#pragma once

#include <vector>

#include "common/result.h"
#include "identity/directory.h"
#include "identity/identity.h"
#include "store/store.h"

namespace purser::identity {

const std::vector<store::Migration>& identityMigrations();

Result<void> insertTenant(store::Tx& tx, const Tenant& t);
// Writes a tenant's priority grant.
Result<void> updateTenantGrant(store::Tx& tx, const Tenant& t);
// A grant as stored (JSON), and back; "" is the default grant.
std::string grantText(const PriorityGrant& g);
Result<PriorityGrant> grantFrom(const std::string& text);
// Writes a tenant's or a team's MCP tool grant.
Result<void> updateTenantTools(store::Tx& tx, const Tenant& t);
Result<void> updateTeamTools(store::Tx& tx, const Team& t);
Result<void> insertTeam(store::Tx& tx, const Team& t);
Result<void> insertUser(store::Tx& tx, const User& u);
// Writes every mutable field of a user (a sign-in's team or role, disabling).
Result<void> updateUser(store::Tx& tx, const User& u);
Result<void> insertServiceAccount(store::Tx& tx, const ServiceAccount& s);
Result<void> insertKey(store::Tx& tx, const ApiKey& k);
// Writes every mutable field of a key (revocation, rotation).
Result<void> updateKey(store::Tx& tx, const ApiKey& k);

Result<Snapshot> loadIdentity(store::Store& store);
// Makes identity's tables current and loads them into `directory` (at start).
Result<void> openDirectory(store::Store& store, Directory& directory);

}  // namespace purser::identity
