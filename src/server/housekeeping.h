// What `purser serve` does on a clock, beside the requests: on worker 0's timers, Purser's own
// metrics sampled into the series (every observe.interval), reservations whose lease ended
// released and denial windows summarised (every second), the fleet's tick (every second); on the
// housekeeping thread, the store asked whether it answers (every second, for /readyz and
// /metrics: info.h), the audit log's anchor written (every 5 s: a file write and fsync), sign-in
// sessions' use written (every minute) and ended ones purged (hourly) and, on PostgreSQL, next
// month's usage partition made (hourly). A turn that fails is logged and the
// loop goes on.
#pragma once

#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>

#include "api/admin_api.h"
#include "api/fleet_api.h"
#include "common/clock.h"
#include "http/metrics.h"
#include "ledger/audit.h"
#include "ledger/meter.h"
#include "observe/self_scrape.h"
#include "observe/series.h"
#include "server/info.h"
#include "store/store.h"

namespace purser::server {

class Housekeeping {
 public:
  struct Parts {
    const Clock& clock;
    boost::asio::io_context& worker;  // whose thread runs the timers
    Duration observe_interval;
    observe::SeriesStore& series;
    const http::MetricsRegistry& metrics;
    ledger::Meter& meter;
    const api::Services& services;
    ledger::AuditLog& audit;
    store::Store& store;
    bool shared_store = false;
    api::Fleet::Current current_fleet;
    StoreProbe* store_probe = nullptr;  // checked every second when given
  };

  explicit Housekeeping(Parts parts);
  // Arms the timers; they run once the worker does, and end with it.
  void start();
  // After the workers have ended: waits for the anchor being written, if one is.
  void join() { thread_.join(); }

 private:
  void selfScrape(const boost::system::error_code& ec);
  void expireLeases(const boost::system::error_code& ec);
  void anchor(const boost::system::error_code& ec);
  void fleetTick(const boost::system::error_code& ec);
  void probeStore(const boost::system::error_code& ec);
  void writeAnchor();  // on the housekeeping thread

  Parts p_;
  observe::SelfScrape self_scrape_;  // on the worker
  boost::asio::steady_timer self_timer_, lease_timer_, anchor_timer_, fleet_timer_, probe_timer_;
  boost::asio::thread_pool thread_{1};
  std::atomic<bool> anchoring_{false};
  std::atomic<bool> probing_{false};
  MonoTime next_partition_check_;  // on the housekeeping thread
  MonoTime next_session_flush_;    // on the housekeeping thread
  MonoTime next_session_purge_;    // on the housekeeping thread
};

}  // namespace purser::server
