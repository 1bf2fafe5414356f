// WorkPool: a few threads for blocking work that must not run on a thread others wait on — the
// store reads behind reports run here, not on an HTTP worker, so that a slow report slows only
// itself. Bounded twice: `threads` run at once, at most `max_queued` more wait; beyond that
// post() refuses, and the caller answers "busy" instead of queueing without end.
//
// Thread-safety: post() may be called from any thread, the pool's own included.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace purser {

class WorkPool {
 public:
  // `name` is the threads' name in the process's thread list (at most 15 characters shown).
  WorkPool(std::string name, size_t threads, size_t max_queued);
  // stop().
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues `work` to run on one of the pool's threads; false, and nothing queued, when
  // max_queued pieces already wait or the pool is stopping. `work` must not throw.
  bool post(std::function<void()> work);

  // Refuses further work, runs what is queued, and joins the threads. Idempotent; not from one of
  // the pool's own threads.
  void stop();

  size_t threads() const { return threads_.size(); }
  size_t maxQueued() const { return max_queued_; }

 private:
  void run();

  const std::string name_;
  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> threads_;         // its size set by the constructor only
};

}  // namespace purser
