// WorkPool: bounded twice (threads at once, pieces waiting), and nothing queued is dropped at stop.
#include "common/work_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <latch>

namespace purser {
namespace {

TEST(WorkPoolTest, RunsWorkOnItsOwnThreads) {
  WorkPool pool("test-pool", 2, 8);
  std::promise<std::thread::id> ran;
  ASSERT_TRUE(pool.post([&] { ran.set_value(std::this_thread::get_id()); }));
  EXPECT_NE(ran.get_future().get(), std::this_thread::get_id());
}

TEST(WorkPoolTest, RefusesBeyondWhatMayWait) {
  WorkPool pool("test-pool", 1, 2);
  std::latch started(1), release(1);
  ASSERT_TRUE(pool.post([&] {
    started.count_down();
    release.wait();
  }));
  started.wait();  // the one thread is busy: what comes next waits
  std::atomic<int> ran{0};
  EXPECT_TRUE(pool.post([&] { ++ran; }));
  EXPECT_TRUE(pool.post([&] { ++ran; }));
  EXPECT_FALSE(pool.post([&] { ++ran; })) << "a third waiting piece is beyond max_queued";
  release.count_down();
  pool.stop();
  EXPECT_EQ(ran.load(), 2) << "what was queued before the stop ran";
}

TEST(WorkPoolTest, RefusesAfterStopAndStopsTwice) {
  WorkPool pool("test-pool", 1, 4);
  pool.stop();
  EXPECT_FALSE(pool.post([] {}));
  pool.stop();
}

}  // namespace
}  // namespace purser
