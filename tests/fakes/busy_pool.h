// Holds one thread of a WorkPool busy, as a slow report would, until release() (or the end of
// the scope): what is posted next waits. For the pool's and the bridges' tests.
//   testing::BusyThread busy(pool, "tenant-a");
//   ASSERT_TRUE(busy.holding());
#pragma once

#include <latch>
#include <memory>
#include <string>

#include "common/work_pool.h"

namespace purser::testing {

class BusyThread {
 public:
  explicit BusyThread(WorkPool& pool, const std::string& key = {})
      : started_(std::make_shared<std::latch>(1)), release_(std::make_shared<std::latch>(1)) {
    holding_ = pool.post(
                   [started = started_, release = release_] {
                     started->count_down();
                     release->wait();
                   },
                   key) == WorkPool::Posted::kQueued;
    if (holding_) started_->wait();
  }
  ~BusyThread() { release(); }
  BusyThread(const BusyThread&) = delete;
  BusyThread& operator=(const BusyThread&) = delete;

  // Whether the pool took the piece and one of its threads is running it now.
  bool holding() const { return holding_; }
  // Lets the thread go on (once).
  void release() {
    if (!released_) {
      released_ = true;
      release_->count_down();
    }
  }

 private:
  std::shared_ptr<std::latch> started_, release_;
  bool holding_ = false;
  bool released_ = false;
};

}  // namespace purser::testing
