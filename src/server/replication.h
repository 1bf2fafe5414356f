// Changes made on one replica reach the others (replicas sharing PostgreSQL; docs/operations.md).
//
// Triggers on the tables held in memory (identities, keys, wallets, rate limits, provider keys)
// bump a version row and NOTIFY channel "purser_changes" when a statement changes them; every
// replica LISTENs, and on a notice — or when a check every second finds the version moved, in
// case a notice was lost while its connection was down — reads those tables again into memory.
// A revoked key is therefore refused on every replica one notice and one re-read after the
// revocation commits. Admin writes are rare, so re-reading everything is cheaper than tracking
// each change.
#pragma once

#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "api/admin_api.h"
#include "gateway/gateway.h"
#include "gateway/secrets.h"
#include "mcp/upstream.h"
#include "store/store.h"

namespace purser::server {

// The notices' schema (PostgreSQL only): run after the tables it watches exist.
const std::vector<store::Migration>& changeNoticeMigrations();

// Reads identities, keys, wallets (limits and windows; what was spent stays), rate limits,
// sign-in sessions, provider keys and MCP servers' credentials from the store into memory again.
Result<void> reloadShared(store::Store& store, const api::Services& services,
                          gateway::Gateway& gateway, gateway::ProviderKeyStore& provider_keys,
                          const std::vector<std::shared_ptr<mcp::Upstream>>& mcp_servers);

// Until `stop`: waits for notices on `url` (a libpq connection string) and checks the version
// every second; calls `reload` after each change. Errors are logged, and it goes on.
void watchChanges(std::stop_token stop, const std::string& url, store::Store& store,
                  const std::function<void()>& reload);

}  // namespace purser::server
