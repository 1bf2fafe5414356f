// The awaitable form of the ledger's durability wait (`ledger.sync: always`): a coroutine awaits
// the sync that covers its record without blocking its worker, and resumes on its own executor.
// Used by the model API (gateway.cc) and the reservations API (api/admin_metering.cc).
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <functional>

#include "http/async.h"
#include "ledger/meter.h"

namespace purser::gateway {

// Completes with true once `sequence` is on disk, false if it never will be.
inline boost::asio::awaitable<bool> durable(ledger::Meter& meter, uint64_t sequence) {
  return http::whenCalled<bool>([&meter, sequence](std::function<void(bool)> done) {
    meter.whenDurable(sequence, std::move(done));
  });
}

}  // namespace purser::gateway
