// The parts both Store back-ends share: the writer side (a bounded queue of writes taken in
// batches by one writer thread; close() commits what is queued first), a bounded pool of read
// connections, and the checks of a component's migrations against what a store has recorded.
//
// Thread-safety: WriteQueue and ConnectionPool may be used from any thread; the batch function
// runs on the writer thread only.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "common/result.h"
#include "store/store.h"

namespace purser::store {

class WriteQueue {
 public:
  struct Job {
    TxFn fn;
    std::function<void(Result<void>)> done;
    bool alone = false;  // committed in a transaction of its own
  };
  // Commits one batch and says how each of its writes ended (one result per job, in order).
  using RunBatch = std::function<std::vector<Result<void>>(std::vector<Job>& batch)>;

  WriteQueue(size_t max_batch, size_t max_queue, RunBatch run);
  ~WriteQueue();

  // A write that does not fit (the queue is full: kResourceExhausted; closed: kUnavailable) is
  // refused at once, on the caller's thread.
  void writeAsync(TxFn fn, std::function<void(Result<void>)> done, bool alone = false);
  Result<void> write(TxFn fn, bool alone = false);
  // Commits what is queued, then stops the writer thread; later writes fail with kUnavailable.
  void close();
  uint64_t batches() const;  // batches run so far (each one commit)

 private:
  void loop();

  const size_t max_batch_;
  const size_t max_queue_;
  const RunBatch run_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;  // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  uint64_t batches_ = 0;   // guarded by mu_
  std::thread thread_;
};

// At most `max` connections open; acquire() waits for one when all are in use.
template <typename Conn>
class ConnectionPool {
 public:
  using Open = std::function<Result<std::unique_ptr<Conn>>()>;
  ConnectionPool(size_t max, Open open) : max_(max), open_(std::move(open)) {}

  Result<std::unique_ptr<Conn>> acquire() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !idle_.empty() || open_count_ < max_; });
    if (!idle_.empty()) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      return conn;
    }
    ++open_count_;
    lock.unlock();
    auto conn = open_();
    if (!conn) {
      std::lock_guard relock(mu_);
      --open_count_;
      cv_.notify_one();
    }
    return conn;
  }

  // Back to the pool; a broken connection is dropped, and the idle ones with it (they were
  // connected to the same server that went away).
  void release(std::unique_ptr<Conn> conn, bool broken = false) {
    std::lock_guard lock(mu_);
    if (broken) {
      open_count_ -= 1 + idle_.size();
      idle_.clear();
    } else {
      idle_.push_back(std::move(conn));
    }
    cv_.notify_one();
  }

  void clear() {
    std::lock_guard lock(mu_);
    open_count_ -= idle_.size();
    idle_.clear();
  }

 private:
  const size_t max_;
  const Open open_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Conn>> idle_;  // guarded by mu_
  size_t open_count_ = 0;                    // guarded by mu_
};

// Migrations must be numbered 1, 2, 3, ... in order.
Result<void> checkNumbering(std::string_view component, const std::vector<Migration>& migrations);
// What a store recorded (rows of version, name, checksum, by version) against what this binary
// knows: a version it does not know (a newer Purser wrote it) or an edited migration is refused.
Result<void> checkRecorded(std::string_view component, const std::vector<Migration>& migrations,
                           const Rows& recorded);
// The checksum recorded with a migration.
std::string migrationChecksum(std::string_view sql);

}  // namespace purser::store
