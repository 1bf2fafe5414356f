// Workers: the I/O threads. N single-threaded io_contexts, one thread each (Envoy's worker
// model). A connection lives its whole life on one worker, so its coroutine, its timers and the
// upstream connections it borrows never need a strand or a lock. Work that must reach a worker
// from elsewhere is posted to its context.
//
// WorkerLocal<T> gives each worker its own T (connection pools, caches); current() returns the
// calling worker's instance and may only be called from a worker thread.
#pragma once

#include <utility>

#include <boost/asio/io_context.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/assert.h"

namespace purser::http {

class Workers {
 public:
  // threads == 0 means one per core.
  explicit Workers(size_t threads);
  ~Workers();
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  size_t size() const { return contexts_.size(); }
  boost::asio::io_context& context(size_t i) { return *contexts_[i]; }
  // Round-robin choice for new connections.
  boost::asio::io_context& next();

  // The index of the worker running on the calling thread, or -1 on any other thread.
  static int currentIndex();

  void start();
  // Stops every context; handlers not yet run are dropped. Thread-safe; idempotent.
  void stop();
  // Waits for the threads to end (after stop(), or when every context ran out of work).
  void join();

 private:
  std::vector<std::unique_ptr<boost::asio::io_context>> contexts_;
  std::vector<std::thread> threads_;
  std::atomic<size_t> next_{0};
  using Guard = decltype(boost::asio::make_work_guard(std::declval<boost::asio::io_context&>()));
  std::vector<Guard> guards_;
};

template <typename T>
class WorkerLocal {
 public:
  WorkerLocal(Workers& workers,
              const std::function<std::unique_ptr<T>(boost::asio::io_context&)>& make) {
    for (size_t i = 0; i < workers.size(); ++i) items_.push_back(make(workers.context(i)));
  }
  T& current() {
    const int i = Workers::currentIndex();
    PURSER_CHECK_MSG(i >= 0 && static_cast<size_t>(i) < items_.size(),
                     "WorkerLocal::current() called off a worker thread");
    return *items_[static_cast<size_t>(i)];
  }
  T& at(size_t i) { return *items_[i]; }
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::unique_ptr<T>> items_;
};

}  // namespace purser::http
