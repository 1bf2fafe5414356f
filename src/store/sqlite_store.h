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
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "store/store.h"

struct sqlite3;

namespace purser::store {

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
  void writerLoop();
  struct Job {
    TxFn fn;
    std::function<void(Result<void>)> done;
  };
  void runBatch(std::vector<Job>& batch);
  Result<std::unique_ptr<SqliteConnection>> acquireReader();
  void releaseReader(std::unique_ptr<SqliteConnection> conn);

  const SqliteOptions options_;
  const Clock& clock_;
  std::unique_ptr<SqliteConnection> writer_;  // used only by the writer thread

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;  // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  uint64_t commits_ = 0;   // guarded by mu_
  std::thread writer_thread_;

  std::mutex readers_mu_;
  std::condition_variable readers_cv_;
  std::vector<std::unique_ptr<SqliteConnection>> idle_readers_;  // guarded by readers_mu_
  size_t open_readers_ = 0;                                      // guarded by readers_mu_
};

}  // namespace purser::store
