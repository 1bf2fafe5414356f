// FleetLeadership: replicas sharing PostgreSQL run one fleet engine between them, and another
// takes it over when the one that ran it dies.
//
// The replica that leads holds a session advisory lock on a connection of its own; PostgreSQL
// frees it when that connection ends (the process died, or its machine vanished: the connection
// asks the server to probe it, so in about 15 s). Every other replica with `fleet.enabled` is a
// follower: it tries the lock every `interval`, and the first to get it leads.
//
// Taking the lead bumps the epoch in the row `fleet_leader` (with this replica's name and
// address), then opens the fleet: it reads the workloads, adopts the pods that run, and
// schedules. Every write of the fleet checks the epoch inside its own transaction (a fence): a
// leader that lost its lock but has not noticed yet writes nothing once another has taken over,
// and the new leader's bump waits for the old leader's write in flight, so it reads everything
// that write recorded. A run is written before its pods start (workloads::Options::fence), so a
// start cut off by the leader's death is resumed, not repeated.
//
// The leader checks its lock's connection every `interval`; once it is lost it steps down at
// once (its fleet stops; the pods keep running, for the next leader to adopt), then tries again
// like a follower.
//
// Followers answer the fleet's API by forwarding each request to the leader's address (one
// hop: a request already forwarded is not forwarded again).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "api/fleet_api.h"
#include "common/clock.h"
#include "common/result.h"
#include "http/client.h"
#include "http/message.h"
#include "http/metrics.h"
#include "http/workers.h"
#include "store/postgres_store.h"
#include "store/store.h"

namespace purser::server {

// The leadership's schema (PostgreSQL only), which create() applies (and `purser migrate` too).
const std::vector<store::Migration>& fleetLeaderMigrations();

struct FleetLeadershipOptions {
  std::string url;      // PostgreSQL (libpq connection string)
  std::string replica;  // this replica's name
  // How often a follower tries to take the lead, and the leader checks that it still holds it.
  Duration interval = std::chrono::seconds(1);
};

// The replica leading the fleet, as its row says.
struct FleetLeader {
  int64_t epoch = 0;
  std::string replica;
  std::string address;  // "http://host:port"; empty until it is listening
  int64_t since_ms = 0;
};

class FleetLeadership {
 public:
  using Fence = std::function<Result<void>(store::Tx&)>;
  // Opens the fleet, every write of it behind `fence`.
  using Open = std::function<Result<std::unique_ptr<api::Fleet>>(Fence fence)>;

  // Applies the row's schema; the lock is not tried yet.
  static Result<std::unique_ptr<FleetLeadership>> create(store::Store& store,
                                                         FleetLeadershipOptions options, Open open,
                                                         const Clock& clock);
  ~FleetLeadership();
  FleetLeadership(const FleetLeadership&) = delete;
  FleetLeadership& operator=(const FleetLeadership&) = delete;

  // Tries once to take the lead (at start, so that the first replica leads before it serves):
  // true when this replica leads now. An error when the fleet could not be opened.
  Result<bool> tryLead();
  // Where the others reach this replica (once it listens); recorded while it leads.
  void setAddress(std::string address);
  // Starts the thread that takes the lead when it is free and checks it while held.
  void start();
  // Ends the thread, stops the fleet if it runs here (its pods keep running) and lets go of the
  // lock. Idempotent.
  void stop();

  // The fleet while this replica leads it; null otherwise.
  std::shared_ptr<api::Fleet> current() const;
  // The leader as the store says.
  Result<std::optional<FleetLeader>> leader();
  // Answers a fleet request on a follower: forwarded to the leader through `client`.
  boost::asio::awaitable<http::Response> forward(http::Request& request, http::HttpClient& client);

  // purser_fleet_leader (1 while this replica leads), purser_fleet_leader_epoch and
  // purser_fleet_takeovers_total (the times this replica took the lead).
  void addMetrics(http::MetricsRegistry& metrics);

 private:
  FleetLeadership(store::Store& store, FleetLeadershipOptions options, Open open,
                  const Clock& clock);
  Result<bool> takeOver();
  void stepDown(const std::string& why);
  void run(std::stop_token stop);

  store::Store& store_;
  const FleetLeadershipOptions options_;
  const Open open_;
  const Clock& clock_;
  store::PgSessionLock lock_;

  mutable std::mutex mu_;
  std::shared_ptr<api::Fleet> fleet_;  // mu_
  int64_t epoch_ = 0;                  // mu_: the epoch this replica leads in (0: none)
  std::string address_;                // mu_
  std::atomic<uint64_t> takeovers_{0};
  std::atomic<int64_t> epoch_seen_{0};

  std::mutex wait_mu_;                // guards nothing but the wait on wake_
  std::condition_variable_any wake_;  // wakes run() early (stop, a lost lock)
  std::jthread thread_;
  bool stopped_ = false;  // stop() has run (the calling thread's only)
};

}  // namespace purser::server
