// The awaitable form of the ledger's durability wait (`ledger.sync: always`): a coroutine on a
// worker awaits the sync that covers its record and resumes on its own executor, never blocking
// the worker. A plain initiating function, not a coroutine: GCC 12 mishandles class-type
// parameters of coroutines awaited by other coroutines.
#pragma once

#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>

#include <memory>

#include "ledger/meter.h"

namespace purser::gateway {

// Completes with true once `sequence` is on disk, false if it never will be.
template <typename Token>
auto asyncDurable(ledger::Meter& meter, uint64_t sequence, Token&& token) {
  return boost::asio::async_initiate<Token, void(bool)>(
      [&meter](auto handler, uint64_t sequence) {
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        auto executor = boost::asio::get_associated_executor(*shared);
        meter.whenDurable(sequence, [shared, executor](bool durable) {
          boost::asio::post(executor, [shared, durable]() mutable { (*shared)(durable); });
        });
      },
      token, sequence);
}

}  // namespace purser::gateway
