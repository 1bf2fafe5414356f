// The small steps of `purser serve`'s start that are not a part of their own: the server's schema
// and installation id, this replica's name, secrets taken from the environment, the store opened
// as configured, the HTTP server's options, the address other replicas reach this one at, and
// the guard every background loop's turn runs under.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/id.h"
#include "common/result.h"
#include "config/config.h"
#include "http/server.h"
#include "identity/directory.h"
#include "server/data_dir.h"
#include "store/store.h"

namespace purser::server {

// The server's own schema (installation facts), applied by serve() and by `purser migrate`.
const std::vector<store::Migration>& serverMigrations();

// This installation's id, made at the first start.
Result<std::string> installationId(store::Store& store, IdGenerator& ids, const Clock& clock);

// This replica's name among those sharing a store: the configured one, else one made at the
// first start and kept in the data directory, so a restart adopts what it held before.
Result<std::string> replicaName(const config::Config& c, const DataDir& dir, IdGenerator& ids);

// A secret handed in through the environment, read once and then gone from it: scrubbed from the
// memory /proc/<pid>/environ shows, and unset, so that no child and no reader of that file sees
// it.
std::optional<std::string> takeSecretEnv(const char* name);

// The configured store: PostgreSQL (`store.postgres`) or SQLite in the data directory.
Result<std::unique_ptr<store::Store>> openStore(const config::Config& c, const DataDir& dir,
                                                const Clock& clock);

// Warns when the configuration file can be read by other users than Purser's (it may hold
// provider keys).
void warnIfReadableByOthers(const config::Config& c);

http::ServerOptions serverOptions(const config::Config& c);

// The client certificates `tls.clients` maps to service accounts' keys.
std::vector<identity::CertificateBinding> certificateBindings(const config::Config& c);

// The URL other replicas forward the fleet's API to while this one leads: `fleet.advertise`, else
// this host's name and the port the server listens on.
std::string advertisedAddress(const config::Config& c, uint16_t port);

// Runs one turn of a background loop. A turn that fails is logged and the loop goes on: no input
// may stop a background loop (metering, lease expiry) for the rest of the process's life.
template <typename F>
void guardedTurn(const char* loop, F&& turn) {
  try {
    turn();
  } catch (const std::exception& e) {
    spdlog::error("{}: a turn failed and was skipped; the loop goes on: {}", loop, e.what());
  }
}

}  // namespace purser::server
