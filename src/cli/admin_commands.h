// The CLI's governance commands, mirroring the admin REST API:
//   purser tenants|teams|users|service-accounts list|create ...
//   purser keys list|create|revoke|rotate ...
//   purser wallets list|create ...
//   purser limits list|create ...
//   purser spend --scope KIND:ID [--group-by ...]
//   purser audit list|verify
// The server is --server or PURSER_SERVER (default http://127.0.0.1:8080); the key is PURSER_KEY
// (never a flag: command lines are visible to other users of the machine).
#pragma once

#include "cli/cli.h"

namespace purser::cli {

void registerAdminCommands(CLI::App& root, int& exit_code);

}  // namespace purser::cli
