// What `purser serve` does on a clock: see housekeeping.h.
#include "server/housekeeping.h"

#include <boost/asio/post.hpp>

#include <spdlog/spdlog.h>

#include "ledger/ledger_store.h"
#include "server/startup.h"

namespace purser::server {

Housekeeping::Housekeeping(Parts parts)
    : p_(std::move(parts)),
      self_scrape_(p_.series, p_.metrics),
      self_timer_(p_.worker),
      lease_timer_(p_.worker),
      anchor_timer_(p_.worker),
      fleet_timer_(p_.worker),
      probe_timer_(p_.worker),
      next_partition_check_(p_.clock.monotonic() + std::chrono::hours(1)) {}

void Housekeeping::start() {
  self_timer_.expires_after(p_.observe_interval);
  self_timer_.async_wait([this](const auto& ec) { selfScrape(ec); });
  lease_timer_.expires_after(std::chrono::seconds(1));
  lease_timer_.async_wait([this](const auto& ec) { expireLeases(ec); });
  anchor_timer_.expires_after(std::chrono::seconds(5));
  anchor_timer_.async_wait([this](const auto& ec) { anchor(ec); });
  fleet_timer_.expires_after(std::chrono::seconds(1));
  fleet_timer_.async_wait([this](const auto& ec) { fleetTick(ec); });
  if (p_.store_probe != nullptr) {
    probe_timer_.expires_after(std::chrono::seconds(1));
    probe_timer_.async_wait([this](const auto& ec) { probeStore(ec); });
  }
}

// Purser's own metrics join the series, for live diagnosis.
void Housekeeping::selfScrape(const boost::system::error_code& ec) {
  if (ec) return;
  guardedTurn("self-scrape", [&] {
    if (auto sampled = self_scrape_.sample(unixMillis(p_.clock.now())); !sampled) {
      spdlog::warn("observe: Purser's own metrics were not sampled: {}", sampled.error().message);
    }
  });
  self_timer_.expires_after(p_.observe_interval);
  self_timer_.async_wait([this](const auto& e) { selfScrape(e); });
}

// Reservations whose lease ended are released (a crashed or vanished client never holds budget
// for long), and the denial windows that closed are summarised in the audit log.
void Housekeeping::expireLeases(const boost::system::error_code& ec) {
  if (ec) return;
  guardedTurn("ledger leases", [&] {
    for (const auto& id : p_.meter.expireLeases()) {
      spdlog::warn("ledger: reservation {} expired unsettled; its hold was released", id);
    }
  });
  guardedTurn("denial summaries", [&] {
    if (p_.services.denials == nullptr) return;
    auto summaries = p_.services.denials->closed();
    if (summaries.empty()) return;
    p_.services.records.commit({}, std::move(summaries), [](Result<void> r) {
      if (!r) spdlog::error("api: could not audit a denial: {}", r.error().message);
    });
  });
  lease_timer_.expires_after(std::chrono::seconds(1));
  lease_timer_.async_wait([this](const auto& e) { expireLeases(e); });
}

// The audit log's anchor follows its newest entry, written off the workers.
void Housekeeping::anchor(const boost::system::error_code& ec) {
  if (ec) return;
  if (!anchoring_.exchange(true)) boost::asio::post(thread_, [this] { writeAnchor(); });
  anchor_timer_.expires_after(std::chrono::seconds(5));
  anchor_timer_.async_wait([this](const auto& e) { anchor(e); });
}

// Whether the store answers, asked off the workers; a check still waiting on a store that hangs
// is not asked again meanwhile.
void Housekeeping::probeStore(const boost::system::error_code& ec) {
  if (ec) return;
  if (!probing_.exchange(true)) {
    boost::asio::post(thread_, [this] {
      guardedTurn("store check", [&] { p_.store_probe->check(); });
      probing_ = false;
    });
  }
  probe_timer_.expires_after(std::chrono::seconds(1));
  probe_timer_.async_wait([this](const auto& e) { probeStore(e); });
}

void Housekeeping::writeAnchor() {
  guardedTurn("audit anchor", [&] {
    if (auto anchored = p_.audit.anchor(p_.store); !anchored) {
      spdlog::error("audit: {}", anchored.error().message);
    }
  });
  // PostgreSQL: next month's partition of the usage events is made well before it begins (every
  // hour; the statement does nothing once it exists).
  if (p_.shared_store && p_.clock.monotonic() >= next_partition_check_) {
    next_partition_check_ = p_.clock.monotonic() + std::chrono::hours(1);
    guardedTurn("usage partitions", [&] {
      if (auto made = ledger::ensureUsagePartitions(p_.store, p_.clock.now()); !made) {
        next_partition_check_ = p_.clock.monotonic() + std::chrono::minutes(1);
        spdlog::warn("ledger: the usage events' partitions were not made: {}",
                     made.error().message);
      }
    });
  }
  // Sign-in sessions: their latest use written (every minute), so that another replica, or this
  // one after a restart, keeps the idle timeout; those long over purged (hourly).
  if (p_.services.sessions != nullptr && p_.clock.monotonic() >= next_session_flush_) {
    next_session_flush_ = p_.clock.monotonic() + std::chrono::minutes(1);
    guardedTurn("sessions", [&] {
      identity::SessionBook& sessions = *p_.services.sessions;
      sessions.sweep(p_.clock.now());
      auto uses = sessions.dirty();
      const bool purge = p_.clock.monotonic() >= next_session_purge_;
      if (uses.empty() && !purge) return;
      if (purge) next_session_purge_ = p_.clock.monotonic() + std::chrono::hours(1);
      const SystemTime before = p_.clock.now() - std::chrono::hours(24);
      auto written = p_.store.write([&](store::Tx& tx) -> Result<void> {
        PURSER_TRY(identity::touchSessions(tx, uses));
        if (purge) PURSER_TRY(identity::purgeSessions(tx, before));
        return {};
      });
      if (!written)
        spdlog::warn("sessions: their use was not written: {}", written.error().message);
    });
  }
  anchoring_ = false;
}

// The fleet service meters and schedules on its own thread; its budget alerts are posted here.
void Housekeeping::fleetTick(const boost::system::error_code& ec) {
  if (ec) return;
  guardedTurn("fleet tick", [&] {
    if (auto f = p_.current_fleet()) f->tick();
  });
  fleet_timer_.expires_after(std::chrono::seconds(1));
  fleet_timer_.async_wait([this](const auto& e) { fleetTick(e); });
}

}  // namespace purser::server
