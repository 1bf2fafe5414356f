// Awaiting a store write from a coroutine without blocking the worker thread: the write runs on
// the store's writer thread and the coroutine resumes on its own executor once it is durable.
#pragma once

#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <memory>

#include "store/store.h"

namespace purser::api {

template <typename Token>
auto asyncWrite(store::Store& store, store::TxFn fn, Token&& token) {
  return boost::asio::async_initiate<Token, void(Result<void>)>(
      [&store](auto handler, store::TxFn fn) {
        auto executor = boost::asio::get_associated_executor(handler);
        // std::function needs a copyable callable: share the move-only handler.
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        store.writeAsync(std::move(fn), [shared, executor](Result<void> r) {
          boost::asio::post(executor,
                            [shared, r = std::move(r)]() mutable { (*shared)(std::move(r)); });
        });
      },
      token, std::move(fn));
}

inline boost::asio::awaitable<Result<void>> commit(store::Store& store, store::TxFn fn) {
  co_return co_await asyncWrite(store, std::move(fn), boost::asio::use_awaitable);
}

}  // namespace purser::api
