// Awaiting a store write from a coroutine without blocking the worker thread: the write runs on
// the store's writer thread and the coroutine resumes on its own executor once it is durable.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>

#include <functional>

#include "http/async.h"
#include "store/store.h"

namespace purser::api {

inline boost::asio::awaitable<Result<void>> commit(store::Store& store, store::TxFn fn) {
  return http::whenCalled<Result<void>>(
      [&store, fn = std::move(fn)](std::function<void(Result<void>)> done) mutable {
        store.writeAsync(std::move(fn), std::move(done));
      });
}

}  // namespace purser::api
