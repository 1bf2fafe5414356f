// `purser migrate`: moves a stopped single-node Purser from its SQLite store into an empty
// PostgreSQL database, which replicas then share (docs/operations.md, "Moving one node to
// PostgreSQL").
//
// It refuses, changing nothing in the data directory or the rows of either store, when the data
// directory is in use (a `purser serve` holds its lock), when the ledger's journal holds records
// that may not be in purser.db yet (the node was not stopped cleanly), when the SQLite store's
// schema is not the one this purser writes (older, newer, or another program's), and when a table
// to copy already holds rows in PostgreSQL. Otherwise it applies every component's migrations in
// PostgreSQL as `purser serve` does, copies every table in one transaction, and checks row counts
// and integer sums on both sides before that transaction commits (store/store_copy.h). The
// migrations that reshape tables holding rows (usage events into monthly partitions) come after
// the copy, as on a PostgreSQL store that held the rows before them; then it checks again.
//
// Thread-safety: runs on the calling thread, once per process.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>

#include "cli/cli.h"
#include "common/result.h"

namespace purser::server {

struct MigrateOptions {
  std::string data_dir;  // the node's data directory: purser.db, journal/, its lock
  std::string postgres;  // the target, a libpq connection string
  size_t batch_rows = 500;
};

// Copies and checks; prints the check, a table per line, on `out`. Returns the exit code: 0 when
// everything was copied and checks out, 1 when the check found a difference (then nothing was
// kept). An error when it refused or failed; nothing was copied then.
Result<int> migrateToPostgres(const MigrateOptions& options, std::ostream& out);

// `purser migrate --to URL [--data DIR] [--config FILE]`.
void registerMigrateCommand(CLI::App& root, int& exit_code);

}  // namespace purser::server
