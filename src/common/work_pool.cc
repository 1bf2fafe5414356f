// WorkPool: see work_pool.h.
#include "common/work_pool.h"

#include <pthread.h>

#include <utility>

namespace purser {

WorkPool::WorkPool(std::string name, size_t threads, size_t max_queued)
    : name_(std::move(name)), max_queued_(max_queued) {
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

bool WorkPool::post(std::function<void()> work) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= max_queued_ || threads_.empty()) return false;
    queue_.push_back(std::move(work));
  }
  wake_.notify_one();
  return true;
}

void WorkPool::run() {
  const std::string shown = name_.substr(0, 15);
  pthread_setname_np(pthread_self(), shown.c_str());
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      // What was queued before the stop still runs: its caller waits for the answer.
      if (queue_.empty()) return;
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    work();
  }
}

}  // namespace purser
