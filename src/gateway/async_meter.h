// Awaitable forms of the Meter's completion callbacks: a coroutine on a worker awaits the
// durable reservation or settlement and resumes on its own executor, never blocking the worker.
// Plain initiating functions, not coroutines: GCC 12 mishandles class-type parameters of
// coroutines awaited by other coroutines.
#pragma once

#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>

#include <memory>
#include <string>
#include <vector>

#include "ledger/meter.h"

namespace purser::gateway {

namespace detail {
template <typename Handler>
auto resumeOn(std::shared_ptr<Handler> handler) {
  auto executor = boost::asio::get_associated_executor(*handler);
  return [handler, executor](auto result) {
    boost::asio::post(executor,
                      [handler, r = std::move(result)]() mutable { (*handler)(std::move(r)); });
  };
}
}  // namespace detail

template <typename Token>
auto asyncReserve(ledger::Meter& meter, ledger::UsageEvent draft, std::vector<std::string> chain,
                  Money amount, Duration lease, ledger::ReserveOptions options, Token&& token) {
  return boost::asio::async_initiate<Token, void(Result<void>)>(
      [&meter](auto handler, ledger::UsageEvent draft, std::vector<std::string> chain, Money amount,
               Duration lease, ledger::ReserveOptions options) {
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        meter.reserve(std::move(draft), std::move(chain), amount, lease, detail::resumeOn(shared),
                      options);
      },
      token, std::move(draft), std::move(chain), amount, lease, options);
}

template <typename Token>
auto asyncSettle(ledger::Meter& meter, ledger::UsageEvent event, Token&& token) {
  return boost::asio::async_initiate<Token, void(Result<ledger::Settlement>)>(
      [&meter](auto handler, ledger::UsageEvent event) {
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        meter.settle(std::move(event), detail::resumeOn(shared));
      },
      token, std::move(event));
}

}  // namespace purser::gateway
