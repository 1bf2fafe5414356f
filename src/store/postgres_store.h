// PostgresStore: the Store on a PostgreSQL server (libpq), for several Purser replicas sharing
// one database that an organisation already operates and backs up.
//
// Like SqliteStore: one writer connection, owned by the writer thread, commits batches of queued
// writes in one transaction (group commit), each write inside its own SAVEPOINT so a failing
// write is undone alone; a commit is durable (synchronous_commit as the server has it, `on` by
// default) before it is reported. Readers use a bounded pool of connections, each read in a
// REPEATABLE READ READ ONLY transaction (one snapshot). The write queue is bounded; when full,
// writes fail fast with kResourceExhausted.
//
// Statements are prepared once per connection. Parameters are sent typed by their Value (int64
// as bigint, text as text, Blob as bytea in binary); results are read by column type: integers
// (and whole numerics, as SUM() of bigints gives) as int64, bytea as Blob, everything else as
// text. A lost connection fails the writes of its batch with kUnavailable, and the next batch
// reconnects; readers reconnect on their next use. Migrations take a transaction-level advisory
// lock, so replicas starting together apply each migration once.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "store/store.h"
#include "store/write_queue.h"

namespace purser::store {

// A migration's SQL as PostgreSQL runs it. Schemas are written once, in SQLite's column types;
// here INTEGER becomes BIGINT (an SQLite integer is 64-bit, PostgreSQL's INTEGER 32) and BLOB
// becomes BYTEA — whole words outside quoted literals and identifiers, any case. The recorded
// checksum stays that of the text as written, the same on both back-ends.
std::string postgresSchemaSql(std::string_view sql);

struct PostgresOptions {
  // A libpq connection string: "postgresql://user:pass@host:5432/purser" or key=value pairs
  // ("host=/run/postgresql dbname=purser").
  std::string url;
  std::chrono::seconds connect_timeout{5};
  size_t max_batch = 256;    // writes per group commit
  size_t max_queue = 65536;  // queued writes before writeAsync fails fast
  size_t max_readers = 8;    // read connections at most (the pool's limit)
};

class PgConnection;

class PostgresStore final : public Store {
 public:
  // Connects (the writer's connection is made at once, so a wrong URL or a server that is down
  // is a clear error here) and creates the migrations table.
  static Result<std::unique_ptr<PostgresStore>> open(PostgresOptions options, const Clock& clock);
  ~PostgresStore() override;

  Dialect dialect() const override { return Dialect::kPostgres; }
  Result<int> migrate(std::string_view component,
                      const std::vector<Migration>& migrations) override;
  Result<void> write(TxFn fn) override;
  void writeAsync(TxFn fn, std::function<void(Result<void>)> done) override;
  Result<void> read(TxFn fn) override;
  void close() override;

  // Group commits done so far (one per batch); for tests of batching.
  uint64_t commitsForTest() const;

 private:
  PostgresStore(PostgresOptions options, const Clock& clock, std::unique_ptr<PgConnection> writer);
  std::vector<Result<void>> runBatch(std::vector<WriteQueue::Job>& batch);

  const PostgresOptions options_;
  const Clock& clock_;
  std::unique_ptr<PgConnection> writer_;  // used only by the writer thread
  ConnectionPool<PgConnection> readers_;
  std::unique_ptr<WriteQueue> queue_;  // last: its thread stops before the rest goes
};

}  // namespace purser::store
