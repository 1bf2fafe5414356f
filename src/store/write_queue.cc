#include "store/write_queue.h"

#include <fmt/format.h>

#include <future>

#include "common/hash.h"

namespace purser::store {

WriteQueue::WriteQueue(size_t max_batch, size_t max_queue, RunBatch run)
    : max_batch_(max_batch), max_queue_(max_queue), run_(std::move(run)) {
  thread_ = std::thread([this] { loop(); });
}

WriteQueue::~WriteQueue() { close(); }

void WriteQueue::close() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t WriteQueue::batches() const {
  std::lock_guard lock(mu_);
  return batches_;
}

void WriteQueue::writeAsync(TxFn fn, std::function<void(Result<void>)> done, bool alone) {
  Error refused;
  {
    std::lock_guard lock(mu_);
    if (!stopping_ && queue_.size() < max_queue_) {
      queue_.push_back(Job{std::move(fn), std::move(done), alone});
      cv_.notify_one();
      return;
    }
    refused = stopping_ ? Error(ErrorCode::kUnavailable, "store: closed")
                        : Error(ErrorCode::kResourceExhausted, "store: write queue is full");
  }
  done(fail(std::move(refused)));  // outside the lock: `done` may be arbitrary code
}

Result<void> WriteQueue::write(TxFn fn, bool alone) {
  std::promise<Result<void>> promise;
  auto future = promise.get_future();
  writeAsync(
      std::move(fn), [&promise](Result<void> r) { promise.set_value(std::move(r)); }, alone);
  return future.get();
}

void WriteQueue::loop() {
  for (;;) {
    std::vector<Job> batch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued is committed
      while (!queue_.empty() && batch.size() < max_batch_) {
        // A write that must be alone ends the batch before it, or is the batch.
        if (queue_.front().alone && !batch.empty()) break;
        const bool alone = queue_.front().alone;
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
        if (alone) break;
      }
    }
    std::vector<Result<void>> results = run_(batch);
    {
      std::lock_guard lock(mu_);
      ++batches_;
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!batch[i].done) continue;
      batch[i].done(i < results.size() ? std::move(results[i])
                                       : fail(internalError("store: a write had no outcome")));
    }
  }
}

Result<void> checkNumbering(std::string_view component, const std::vector<Migration>& migrations) {
  for (size_t i = 0; i < migrations.size(); ++i) {
    if (migrations[i].version != static_cast<int>(i) + 1) {
      return fail(internalError(fmt::format(
          "migrations of {} must be numbered 1, 2, 3, ... in order; found {} at position {}",
          component, migrations[i].version, i + 1)));
    }
  }
  return {};
}

Result<void> checkRecorded(std::string_view component, const std::vector<Migration>& migrations,
                           const Rows& recorded) {
  for (const Row& row : recorded) {
    const int64_t version = row.getInt(0);
    if (version < 1 || version > static_cast<int64_t>(migrations.size())) {
      return fail(Error(ErrorCode::kFailedPrecondition,
                        fmt::format("the store has migration {} version {} (\"{}\"), which this "
                                    "purser does not know: the data was written by a newer "
                                    "version; upgrade purser to use it",
                                    component, version, row.getText(1))));
    }
    const Migration& m = migrations[static_cast<size_t>(version - 1)];
    if (row.getText(2) != migrationChecksum(m.sql)) {
      return fail(Error(ErrorCode::kFailedPrecondition,
                        fmt::format("migration {} version {} (\"{}\") was changed after it was "
                                    "applied; migrations must never be edited, add a new one",
                                    component, version, m.name)));
    }
  }
  return {};
}

std::string migrationChecksum(std::string_view sql) { return fnv1a64Hex(sql); }

}  // namespace purser::store
