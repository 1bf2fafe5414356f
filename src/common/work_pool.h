// WorkPool: a few threads for blocking work that must not run on a thread others wait on — the
// store reads behind reports run here, not on an HTTP worker, so that a slow report slows only
// itself. Bounded twice: `threads` run at once, at most `max_queued` more wait; beyond that
// post() refuses, and the caller answers "busy" instead of queueing without end.
//
// Fair between keys (the API keys its reads by tenant): each key's work waits in a queue of its
// own, the threads take from the keys in turn, and one key may have at most `max_queued_per_key`
// pieces waiting. So a tenant that floods the pool fills only its own share, and another
// tenant's read waits at most for the pieces already running — not behind the flood.
//
// Thread-safety: post() may be called from any thread, the pool's own included.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace purser {

class WorkPool {
 public:
  // `name` is the threads' name in the process's thread list (at most 15 characters shown).
  // `max_queued_per_key` 0: a quarter of max_queued (at least 1).
  WorkPool(std::string name, size_t threads, size_t max_queued, size_t max_queued_per_key = 0);
  // stop().
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  enum class Posted { kQueued, kFull, kKeyFull, kStopped };
  // Queues `work`, as `key`'s, to run on one of the pool's threads; anything but kQueued queues
  // nothing: max_queued pieces already wait (kFull), `key` already has its share waiting
  // (kKeyFull), or the pool is stopping. `work` must not throw.
  Posted post(std::function<void()> work, const std::string& key = {});

  // Refuses further work, runs what is queued, and joins the threads. Idempotent; not from one of
  // the pool's own threads.
  void stop();

  size_t threads() const { return threads_.size(); }
  size_t maxQueued() const { return max_queued_; }
  size_t maxQueuedPerKey() const { return max_queued_per_key_; }

 private:
  void run();

  const std::string name_;
  const size_t max_queued_;
  const size_t max_queued_per_key_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::map<std::string, std::deque<std::function<void()>>> queues_;  // by key, never empty; mu_
  std::string last_key_;   // the key served last (the next turn is the one after it); mu_
  size_t queued_ = 0;      // over all keys; guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::vector<std::thread> threads_;  // its size set by the constructor only
};

}  // namespace purser
