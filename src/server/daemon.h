// The composition root: `purser serve` builds every part from the configuration and runs them.
// This is the one place that constructs real implementations; everything else receives what it
// needs.
//
// Threading model (the only one in Purser):
//   - N I/O workers (config `threads`, default one per core), each a single-threaded io_context.
//     A client connection lives on one worker; handlers run there and must never block.
//   - One store writer thread owns the write connection and commits in groups; reads run on the
//     calling thread from a small pool of read connections.
//   - The fleet service (scheduler/) runs on a thread of its own: one admission cycle at a time,
//     driven by the API's requests (handed to it, and awaited by the handlers) and by its timer
//     (pods polled every 200 ms, GPU time metered and budget holds checked every second). The
//     local executor's pods are processes with a supervisor each, outliving Purser.
//   - The gateway's CPU pool (one thread per two workers) parses and writes model API bodies and
//     reads stream events of 64 KiB and more, so one client's megabytes never hold up a worker.
//   - One housekeeping thread writes the audit log's anchor (a file and its fsync).
//   - The main thread starts everything, then waits for the workers to end.
// Shutdown order on SIGTERM/SIGINT: stop accepting, close idle connections, let requests in
// flight finish within http.drain_timeout, stop the workers, then flush and close the store.
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
