// The composition root: `purser serve` builds every part from the configuration and runs them.
// This is the one place that constructs real implementations; everything else receives what it
// needs.
//
// Every thread it runs, who owns it and how it stops: docs/architecture.md, "Threads".
#pragma once

#include <functional>
#include <ostream>

#include "common/result.h"
#include "config/config.h"
#include "store/store.h"

namespace purser::server {

// Re-reads the configuration (on SIGHUP).
using ConfigLoader = std::function<Result<config::Config>()>;

// Runs the server until SIGTERM or SIGINT. Prints the URLs it serves on `out` once listening.
// On SIGHUP, `reload` (when given) is called and the providers' configured keys are replaced;
// everything else in the file takes effect at the next start.
// Returns the process exit code, or an error that stopped it from starting.
Result<int> serve(const config::Config& config, std::ostream& out, ConfigLoader reload = {});

}  // namespace purser::server
