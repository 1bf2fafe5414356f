// WorkPool: bounded twice (threads at once, pieces waiting), fair between keys (each key its own
// queue, taken in turn, and its share of what may wait), and nothing queued is dropped at stop.
#include "common/work_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "fakes/busy_pool.h"

namespace purser {
namespace {

TEST(WorkPoolTest, RunsWorkOnItsOwnThreads) {
  WorkPool pool("test-pool", 2, 8);
  std::promise<std::thread::id> ran;
  ASSERT_EQ(pool.post([&] { ran.set_value(std::this_thread::get_id()); }),
            WorkPool::Posted::kQueued);
  EXPECT_NE(ran.get_future().get(), std::this_thread::get_id());
}

TEST(WorkPoolTest, RefusesBeyondWhatMayWait) {
  WorkPool pool("test-pool", 1, 2, 2);
  testing::BusyThread busy(pool);  // the one thread is busy: what comes next waits
  ASSERT_TRUE(busy.holding());
  std::atomic<int> ran{0};
  EXPECT_EQ(pool.post([&] { ++ran; }), WorkPool::Posted::kQueued);
  EXPECT_EQ(pool.post([&] { ++ran; }), WorkPool::Posted::kQueued);
  EXPECT_EQ(pool.post([&] { ++ran; }), WorkPool::Posted::kFull)
      << "a third waiting piece is beyond max_queued";
  busy.release();
  pool.stop();
  EXPECT_EQ(ran.load(), 2) << "what was queued before the stop ran";
}

TEST(WorkPoolTest, RefusesAfterStopAndStopsTwice) {
  WorkPool pool("test-pool", 1, 4);
  pool.stop();
  EXPECT_EQ(pool.post([] {}), WorkPool::Posted::kStopped);
  pool.stop();
}

// A tenant that floods the pool fills only its own share; another tenant's work is taken at the
// next turn, not after the flood.
TEST(WorkPoolTest, AKeyThatFloodsThePoolFillsOnlyItsShareAndOthersGoNext) {
  WorkPool pool("test-pool", 1, 8, 3);
  EXPECT_EQ(pool.maxQueuedPerKey(), 3u);
  testing::BusyThread busy(pool, "flood");  // the thread is busy: everything below waits
  ASSERT_TRUE(busy.holding());
  std::mutex mu;
  std::vector<std::string> order;
  const auto piece = [&](std::string name) {
    return [&, name] {
      std::lock_guard lock(mu);
      order.push_back(name);
    };
  };
  EXPECT_EQ(pool.post(piece("flood-1"), "flood"), WorkPool::Posted::kQueued);
  EXPECT_EQ(pool.post(piece("flood-2"), "flood"), WorkPool::Posted::kQueued);
  EXPECT_EQ(pool.post(piece("flood-3"), "flood"), WorkPool::Posted::kQueued);
  EXPECT_EQ(pool.post(piece("flood-4"), "flood"), WorkPool::Posted::kKeyFull)
      << "the flooding key has its share waiting";
  EXPECT_EQ(pool.post(piece("other-1"), "other"), WorkPool::Posted::kQueued)
      << "another key still has room";
  EXPECT_EQ(pool.post(piece("other-2"), "other"), WorkPool::Posted::kQueued);
  EXPECT_EQ(pool.post(piece("platform-1"), ""), WorkPool::Posted::kQueued);
  busy.release();
  pool.stop();
  // The keys in turn (in key order from the one served last): never three of the flood in a row
  // while another key waits.
  EXPECT_EQ(order, (std::vector<std::string>{"other-1", "platform-1", "flood-1", "other-2",
                                             "flood-2", "flood-3"}));
}

TEST(WorkPoolTest, EachKeysShareIsAQuarterOfWhatMayWaitByDefault) {
  EXPECT_EQ(WorkPool("test-pool", 1, 64).maxQueuedPerKey(), 16u);
  EXPECT_EQ(WorkPool("test-pool", 1, 2).maxQueuedPerKey(), 1u);
  EXPECT_EQ(WorkPool("test-pool", 1, 4, 10).maxQueuedPerKey(), 4u) << "never beyond the total";
}

}  // namespace
}  // namespace purser
