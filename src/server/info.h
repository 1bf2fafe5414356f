// What `purser serve` says about itself: /healthz, /readyz (the store checked: on PostgreSQL a
// store that cannot be reached is "degraded", not "not ready", since the replicas serve from their
// leases meanwhile) and /metrics, purser_build_info, purser_start_time_seconds and (PostgreSQL)
// purser_store_up, and /api/v1/info (version, installation, workers and the warnings the console
// shows).
//
// The store is never checked on a worker: a StoreProbe asks it (`SELECT 1`) on the housekeeping
// thread every second, and /readyz and /metrics report its last answer, at most about a second
// old — a store that hangs holds no worker and no health check.
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "http/builtin.h"
#include "http/metrics.h"
#include "http/router.h"
#include "store/store.h"

namespace purser::server {

struct ServerFacts {
  std::string installation;
  SystemTime started_at;
  size_t workers = 0;
  const std::vector<std::string>* warnings = nullptr;  // read at each request, written at start
  std::function<bool()> draining;
};

// Whether the store answers. Thread-safe.
class StoreProbe {
 public:
  // A check still waiting after this long is the answer: the store does not answer.
  static constexpr Duration kPatience = std::chrono::seconds(3);

  // Checks once, on the calling thread: the first answer is known before any request.
  StoreProbe(store::Store& store, const Clock& clock) : store_(store), clock_(clock) { check(); }
  // Asks the store now and keeps its answer (housekeeping's thread; it may block).
  void check();
  // The last answer; kUnavailable while a check has waited longer than kPatience (a store that
  // hangs).
  Result<void> last() const;

 private:
  store::Store& store_;
  const Clock& clock_;
  mutable std::mutex mu_;
  Result<void> last_;                // guarded by mu_
  std::optional<MonoTime> waiting_;  // since when a check waits; guarded by mu_
};

Result<void> addServerInfo(http::Router& router, http::MetricsRegistry& metrics,
                           http::Readiness& readiness, const StoreProbe& store, bool shared_store,
                           ServerFacts facts);

}  // namespace purser::server
