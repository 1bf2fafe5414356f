// SqliteStore: the embedded default Store, one SQLite database file in WAL mode.
//
// One writer connection, owned by the writer thread, commits batches of queued writes in one
// transaction (group commit: one fsync for many writers), each write inside its own SAVEPOINT so
// a failing write is undone alone. synchronous=FULL: a commit is on disk before it is reported.
// Readers use a small pool of read-only connections and see committed data in snapshots while
// the writer works. The write queue is bounded; when it is full, writes fail fast with
// kResourceExhausted rather than piling up.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "store/store.h"
#include "store/write_queue.h"

struct sqlite3;
struct sqlite3_stmt;

namespace purser::store {

// The values of the row `stmt` stands on (after sqlite3_step gave SQLITE_ROW), into `values`:
// integers, text (REAL as its text) and blobs as the store reads them, NULL as monostate.
void sqliteRowValues(sqlite3_stmt* stmt, std::vector<Value>& values);

struct SqliteOptions {
  std::string path;  // the database file; created if missing
  std::chrono::milliseconds busy_timeout{5000};
  size_t max_batch = 256;    // writes per group commit
  size_t max_queue = 65536;  // queued writes before writeAsync fails fast
  size_t max_readers = 8;    // read connections kept open
};

class SqliteConnection;

class SqliteStore final : public Store {
 public:
  static Result<std::unique_ptr<SqliteStore>> open(SqliteOptions options, const Clock& clock);
  ~SqliteStore() override;

  Dialect dialect() const override { return Dialect::kSqlite; }
  Result<int> migrate(std::string_view component,
                      const std::vector<Migration>& migrations) override;
  Result<void> write(TxFn fn) override;
  void writeAsync(TxFn fn, std::function<void(Result<void>)> done) override;
  Result<void> read(TxFn fn) override;
  void close() override;

  // Group commits done so far (one per batch); for tests of batching.
  uint64_t commitsForTest() const;

 private:
  SqliteStore(SqliteOptions options, const Clock& clock, std::unique_ptr<SqliteConnection> writer);
  std::vector<Result<void>> runBatch(std::vector<WriteQueue::Job>& batch);

  const SqliteOptions options_;
  const Clock& clock_;
  std::unique_ptr<SqliteConnection> writer_;  // used only by the writer thread
  ConnectionPool<SqliteConnection> readers_;
  std::unique_ptr<WriteQueue> queue_;  // last: its thread stops before the rest goes
};

}  // namespace purser::store
