// http/async.h: work runs where it is sent and the coroutine resumes on its own thread; a full
// pool answers kUnavailable at once; a worker waiting on a slow read keeps serving others.
#include "http/async.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <future>
#include <latch>
#include <optional>
#include <thread>

#include "fakes/busy_pool.h"

namespace purser::http {
namespace {

namespace asio = boost::asio;

TEST(AsyncTest, RunOnRunsThereAndResumesHere) {
  asio::io_context here;
  asio::thread_pool there(1);
  std::thread::id ran_on, resumed_on;
  int got = 0;
  asio::co_spawn(
      here,
      [&]() -> asio::awaitable<void> {
        got = co_await runOn(there.get_executor(), [&] {
          ran_on = std::this_thread::get_id();
          return 42;
        });
        resumed_on = std::this_thread::get_id();
      },
      asio::detached);
  here.run();
  EXPECT_EQ(got, 42);
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_EQ(resumed_on, std::this_thread::get_id());
  there.join();
}

TEST(AsyncTest, RunOnRethrowsHere) {
  asio::io_context here;
  asio::thread_pool there(1);
  std::string caught;
  asio::co_spawn(
      here,
      [&]() -> asio::awaitable<void> {
        try {
          co_await runOn(there.get_executor(), [] { throw std::runtime_error("boom"); });
        } catch (const std::runtime_error& e) {
          caught = e.what();
        }
      },
      asio::detached);
  here.run();
  EXPECT_EQ(caught, "boom");
  there.join();
}

TEST(AsyncTest, WhenCalledResumesOnItsOwnExecutorWhateverThreadCalls) {
  asio::io_context here;
  auto guard = asio::make_work_guard(here);
  std::thread other;
  std::optional<int> got;
  std::thread::id resumed_on;
  asio::co_spawn(
      here,
      [&]() -> asio::awaitable<void> {
        got = co_await whenCalled<int>(
            [&](std::function<void(int)> done) { other = std::thread([done] { done(7); }); });
        resumed_on = std::this_thread::get_id();
        guard.reset();
      },
      asio::detached);
  here.run();
  other.join();
  EXPECT_EQ(got, 7);
  EXPECT_EQ(resumed_on, std::this_thread::get_id());
}

TEST(AsyncTest, RunBlockingAnswersUnavailableWhenThePoolIsFull) {
  WorkPool pool("test-readers", 1, 1);
  testing::BusyThread busy(pool);
  ASSERT_TRUE(busy.holding());
  ASSERT_EQ(pool.post([] {}), WorkPool::Posted::kQueued);  // the one place to wait is taken
  asio::io_context here;
  std::optional<Result<int>> got;
  asio::co_spawn(
      here,
      [&]() -> asio::awaitable<void> {
        got = co_await runBlocking(&pool, []() -> Result<int> { return 1; });
      },
      asio::detached);
  here.run();
  busy.release();
  ASSERT_TRUE(got.has_value());
  ASSERT_FALSE(got->has_value());
  EXPECT_EQ(got->error().code, ErrorCode::kUnavailable);
  EXPECT_NE(got->error().message.find("busy"), std::string::npos) << got->error().message;
}

// A tenant whose share of the pool waits is told so at once; another tenant's read still runs.
TEST(AsyncTest, RunBlockingAnswersATenantAtItsShareAndServesAnother) {
  WorkPool pool("test-readers", 1, 8, 1);
  testing::BusyThread busy(pool, "flood");
  ASSERT_TRUE(busy.holding());
  ASSERT_EQ(pool.post([] {}, "flood"), WorkPool::Posted::kQueued);  // its one place is taken
  asio::io_context here;
  std::optional<Result<int>> flood, other;
  asio::co_spawn(
      here,
      [&]() -> asio::awaitable<void> {
        flood = co_await runBlocking(&pool, "flood", []() -> Result<int> { return 1; });
        busy.release();  // the flood's first piece ends; the other tenant's read runs
        other = co_await runBlocking(&pool, "other", []() -> Result<int> { return 2; });
      },
      asio::detached);
  here.run();
  ASSERT_TRUE(flood.has_value());
  ASSERT_FALSE(flood->has_value());
  EXPECT_EQ(flood->error().code, ErrorCode::kUnavailable);
  EXPECT_NE(flood->error().message.find("reads of yours"), std::string::npos)
      << flood->error().message;
  ASSERT_TRUE(other.has_value());
  ASSERT_TRUE(other->has_value()) << other->error().message;
  EXPECT_EQ(**other, 2);
}

TEST(AsyncTest, RunBlockingTurnsAThrowIntoAnError) {
  WorkPool pool("test-readers", 1, 4);
  asio::io_context here;
  auto guard = asio::make_work_guard(here);
  std::optional<Result<int>> got;
  asio::co_spawn(
      here,
      [&]() -> asio::awaitable<void> {
        got = co_await runBlocking(&pool, []() -> Result<int> { throw std::runtime_error("bad"); });
        guard.reset();
      },
      asio::detached);
  here.run();
  ASSERT_TRUE(got.has_value());
  ASSERT_FALSE(got->has_value());
  EXPECT_EQ(got->error().code, ErrorCode::kInternal);
}

// The wall this bridge exists for: one worker thread, one slow read in flight on the pool; the
// worker still serves another request, and the read's answer comes back to the worker after.
TEST(AsyncTest, AWorkerWaitingOnASlowReadServesOthers) {
  WorkPool pool("test-readers", 1, 4);
  asio::io_context worker;
  auto guard = asio::make_work_guard(worker);
  std::latch in_read(1), release(1);
  std::vector<std::string> order;
  asio::co_spawn(
      worker,
      [&]() -> asio::awaitable<void> {
        auto r = co_await runBlocking(&pool, [&]() -> Result<int> {
          in_read.count_down();
          release.wait();  // a report over a million rows
          return 3;
        });
        order.push_back("report " + std::to_string(r.value_or(-1)));
        guard.reset();
      },
      asio::detached);
  std::thread run([&] { worker.run(); });
  in_read.wait();
  // Another request arrives at the same worker while the read runs; it is answered before the read
  // is let go.
  std::promise<void> served;
  asio::post(worker, [&] {
    order.push_back("chat");
    served.set_value();
  });
  // Bounded only so that a bridge that blocks the worker fails here instead of hanging the run.
  const bool answered =
      served.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  release.count_down();
  run.join();
  ASSERT_TRUE(answered) << "the worker did not serve the other request while the read ran";
  EXPECT_EQ(order, (std::vector<std::string>{"chat", "report 3"}));
}

TEST(AsyncTest, LaterDeliveredBeforeOrAfterItIsAwaited) {
  for (bool early : {true, false}) {
    asio::io_context here;
    std::optional<int> got;
    asio::co_spawn(
        here,
        [&]() -> asio::awaitable<void> {
          auto later = std::make_shared<Later<int>>(co_await asio::this_coro::executor);
          auto deliver = Later<int>::deliver(later);
          if (early) {
            deliver(5);
            // Let the delivery land before the wait begins: get() finds the value there.
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
          } else {
            asio::post(here, [deliver] { deliver(5); });
          }
          got = co_await later->get();
        },
        asio::detached);
    here.run();
    EXPECT_EQ(got, 5) << (early ? "delivered first" : "delivered after the wait began");
  }
}

}  // namespace
}  // namespace purser::http
