// The one way a coroutine has work done elsewhere and resumes where it was: on another
// executor (a service's own thread, a CPU pool), on a bounded pool of blocking threads (store
// reads), or through a callback (a durable write, a journal sync). The coroutine's worker is
// free while it waits, and it always resumes on its own executor, never on the thread that did
// the work.
//
// These are plain initiating functions, not coroutines: GCC 12 mishandles class-type parameters
// of coroutines awaited by other coroutines.
#pragma once

#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <exception>
#include <functional>
#include <memory>
#include <type_traits>

#include <fmt/format.h>

#include "common/error.h"
#include "common/result.h"
#include "common/work_pool.h"

namespace purser::http {

// Runs fn() on `where` (any executor) and resumes the awaiting coroutine on its own executor with
// what fn returned, or rethrows what it threw. A non-void result must be default-constructible.
template <typename Executor, typename F>
auto runOn(const Executor& where, F fn) {
  namespace asio = boost::asio;
  using T = std::invoke_result_t<F&>;
  if constexpr (std::is_void_v<T>) {
    return asio::async_initiate<const asio::use_awaitable_t<>&, void(std::exception_ptr)>(
        [where](auto handler, F f) {
          asio::post(where, [handler = std::move(handler), f = std::move(f)]() mutable {
            std::exception_ptr error;
            try {
              f();
            } catch (...) {
              error = std::current_exception();
            }
            auto back = asio::get_associated_executor(handler);
            asio::post(back, [handler = std::move(handler), error]() mutable {
              std::move(handler)(error);
            });
          });
        },
        asio::use_awaitable, std::move(fn));
  } else {
    return asio::async_initiate<const asio::use_awaitable_t<>&, void(std::exception_ptr, T)>(
        [where](auto handler, F f) {
          asio::post(where, [handler = std::move(handler), f = std::move(f)]() mutable {
            std::exception_ptr error;
            T out{};
            try {
              out = f();
            } catch (...) {
              error = std::current_exception();
            }
            auto back = asio::get_associated_executor(handler);
            asio::post(back, [handler = std::move(handler), error, out = std::move(out)]() mutable {
              std::move(handler)(error, std::move(out));
            });
          });
        },
        asio::use_awaitable, std::move(fn));
  }
}

// Awaits an operation that reports through a callback: start(done) runs on the awaiting thread;
// done(value) is called exactly once, from any thread; the coroutine resumes on its own executor
// with the value.
template <typename T, typename Start>
auto whenCalled(Start start) {
  namespace asio = boost::asio;
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(T)>(
      [](auto handler, Start start) {
        auto back = asio::get_associated_executor(handler);
        // std::function needs a copyable callable: share the move-only handler.
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        start(std::function<void(T)>([shared, back](T value) {
          asio::post(back, [shared, value = std::move(value)]() mutable {
            std::move (*shared)(std::move(value));
          });
        }));
      },
      asio::use_awaitable, std::move(start));
}

// Runs fn() — blocking work returning a Result — on `pool`, as `key`'s (the caller's tenant: the
// pool is fair between keys, work_pool.h), and resumes here with its result; with no pool, runs
// it here (unit tests' seam). When the pool already has as much waiting as it takes, or `key` its
// share, completes with kUnavailable at once (the API answers 503): a flood of slow reports
// waits nowhere, and fills only its own tenant's share. What fn throws completes as kInternal.
template <typename F>
auto runBlocking(WorkPool* pool, std::string key, F fn) {
  using T = std::invoke_result_t<F&>;
  return whenCalled<T>(
      [pool, key = std::move(key), fn = std::move(fn)](std::function<void(T)> done) mutable {
        auto shared = std::make_shared<F>(std::move(fn));
        auto work = [shared, done] {
          try {
            done((*shared)());
          } catch (const std::exception& e) {
            done(T(fail(internalError(fmt::format("{}", e.what())))));
          }
        };
        if (pool == nullptr) {
          work();
          return;
        }
        switch (pool->post(work, key)) {
          case WorkPool::Posted::kQueued:
            return;
          case WorkPool::Posted::kKeyFull:
            done(T(fail(serverBusy(fmt::format(
                "the server is busy: {} reads of yours already wait for its store readers; try "
                "again shortly",
                pool->maxQueuedPerKey())))));
            return;
          case WorkPool::Posted::kFull:
          case WorkPool::Posted::kStopped:
            done(T(fail(serverBusy(
                fmt::format("the server is busy: {} reads already wait for its {} store readers; "
                            "try again shortly",
                            pool->maxQueued(), pool->threads())))));
            return;
        }
      });
}

// The same, unkeyed (work of no one tenant).
template <typename F>
auto runBlocking(WorkPool* pool, F fn) {
  return runBlocking(pool, std::string(), std::move(fn));
}

// A value handed over later than it was asked for: an operation started inside another call
// (the fleet's submit, its write queued there) reports through deliver(), and the coroutine that
// started it awaits get() when it is ready to; the value may arrive first. Made with
// std::make_shared on the awaiting coroutine's executor, where get() resumes.
template <typename T>
class Later {
 public:
  explicit Later(const boost::asio::any_io_executor& executor) : timer_(executor) {}

  // The callback that delivers the value: from any thread, once.
  static std::function<void(T)> deliver(const std::shared_ptr<Later>& self) {
    return [self](T value) {
      boost::asio::post(self->timer_.get_executor(), [self, value = std::move(value)]() mutable {
        self->done_ = true;
        self->value_ = std::move(value);
        self->timer_.cancel();
      });
    };
  }

  // The value, once delivered. Awaited once, on the executor the Later was made with.
  boost::asio::awaitable<T> get() {
    if (!done_) {
      timer_.expires_at(boost::asio::steady_timer::time_point::max());
      boost::system::error_code ec;
      co_await timer_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    }
    co_return std::move(value_);
  }

 private:
  boost::asio::steady_timer timer_;
  bool done_ = false;  // on the executor only
  T value_{};          // on the executor only
};

}  // namespace purser::http
