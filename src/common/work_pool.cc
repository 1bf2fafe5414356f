// WorkPool: see work_pool.h.
#include "common/work_pool.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

namespace purser {

WorkPool::WorkPool(std::string name, size_t threads, size_t max_queued, size_t max_queued_per_key)
    : name_(std::move(name)),
      max_queued_(max_queued),
      max_queued_per_key_(max_queued_per_key != 0 ? std::min(max_queued_per_key, max_queued)
                                                  : std::max<size_t>(1, max_queued / 4)) {
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

WorkPool::~WorkPool() { stop(); }

void WorkPool::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

WorkPool::Posted WorkPool::post(std::function<void()> work, const std::string& key) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || threads_.empty()) return Posted::kStopped;
    if (queued_ >= max_queued_) return Posted::kFull;
    auto& queue = queues_[key];
    if (queue.size() >= max_queued_per_key_) return Posted::kKeyFull;
    queue.push_back(std::move(work));
    ++queued_;
  }
  wake_.notify_one();
  return Posted::kQueued;
}

void WorkPool::run() {
  const std::string shown = name_.substr(0, 15);
  pthread_setname_np(pthread_self(), shown.c_str());
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || queued_ > 0; });
      // What was queued before the stop still runs: its caller waits for the answer.
      if (queued_ == 0) return;
      // The keys in turn: the first after the one served last, wrapping around.
      auto turn = queues_.upper_bound(last_key_);
      if (turn == queues_.end()) turn = queues_.begin();
      work = std::move(turn->second.front());
      turn->second.pop_front();
      --queued_;
      last_key_ = turn->first;
      if (turn->second.empty()) queues_.erase(turn);
    }
    work();
  }
}

}  // namespace purser
