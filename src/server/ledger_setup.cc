// The ledger's parts of `purser serve`: see ledger_setup.h.
#include "server/ledger_setup.h"

#include <chrono>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "identity/payer.h"
#include "server/startup.h"
#include "store/postgres_store.h"

namespace purser::server {

Result<std::unique_ptr<ledger::Meter>> openMeter(const config::Config& config, store::Store& store,
                                                 ledger::WalletBook& wallets, const Clock& clock,
                                                 ledger::AuditLog& audit, const DataDir& data_dir,
                                                 const std::string& replica) {
  auto meter = PURSER_TRY_VALUE(ledger::Meter::open(
      store, wallets, clock, &audit,
      {.dir = data_dir.file("journal"),
       .sync =
           config.ledger.sync == "always" ? ledger::SyncMode::kAlways : ledger::SyncMode::kBatch,
       .sync_interval = config.ledger.sync_interval,
       .apply_interval =
           config.store.driver == "postgres" ? config.store.ship_interval : Duration::zero(),
       .ack_after_store = config.store.driver == "postgres" && config.ledger.sync == "always"},
      replica));
  if (meter->replayed().dropped_bytes > 0) {
    spdlog::warn(
        "ledger: the journal ended in {} byte(s) a crash left unsynced; what they held was "
        "never acknowledged as durable (ledger.sync: {})",
        meter->replayed().dropped_bytes, config.ledger.sync);
  }
  return meter;
}

ledger::PriceBook priceBook(const config::Config& config) {
  std::vector<ledger::ModelPrice> model_prices;
  for (const auto& p : config.prices) {
    model_prices.push_back(
        {p.provider,
         p.model,
         {p.input, p.output, p.cached_input, p.cache_write, p.reasoning.value_or(p.output)}});
  }
  std::vector<ledger::GpuPrice> gpu_prices;
  for (const auto& g : config.gpu_prices) gpu_prices.push_back({g.flavor, g.per_gpu_hour});
  return ledger::PriceBook(std::move(model_prices), std::move(gpu_prices));
}

void logRecovery(const ledger::Recovery& recovery) {
  if (recovery.charged > 0) {
    spdlog::warn("ledger: {} request(s) cut off by the last shutdown were recovered and charged",
                 recovery.charged);
  }
  if (recovery.restored > 0) {
    spdlog::info("ledger: {} reservation(s) made through the API are held again",
                 recovery.restored);
  }
  if (recovery.quarantined > 0) {
    spdlog::error(
        "ledger: {} intent(s) could not be resolved and were set aside in ledger_quarantine "
        "(see the audit log); the server starts anyway",
        recovery.quarantined);
  }
}

void addLedgerMetrics(http::MetricsRegistry& metrics, const ledger::WalletBook& wallets,
                      const identity::Directory& directory, ledger::WalletLeases* leases,
                      ledger::RateLeases* rate_leases) {
  {
    auto& spent_ratio = metrics.gaugeFamily(
        "purser_wallet_spent_ratio",
        "What a wallet has spent of its limit in its current window (1 = all), by scope "
        "(kind:name), tenant and wallet id.",
        {"scope", "tenant", "wallet"});
    auto& outstanding =
        metrics.gauge("purser_ledger_reservations_outstanding", "Reservations holding budget now.");
    metrics.addCollector([&wallets, &directory, &spent_ratio, &outstanding] {
      outstanding.set(static_cast<double>(wallets.outstanding()));
      for (const auto& w : wallets.all()) {
        // "team:ml", "key:KEY-NAME": a key is named by its name, never anything secret.
        const auto tenant = directory.tenant(w.spec.tenant_id);
        spent_ratio
            .labels({identity::walletScopeName(directory, w.spec.scope),
                     tenant ? tenant->name : std::string(), w.spec.id})
            .set(static_cast<double>(w.used_basis_points) / 10'000.0);
      }
    });
  }
  if (leases != nullptr && rate_leases != nullptr) {
    auto& trips = metrics.counter(
        "purser_store_round_trips_total",
        "Requests this process sent to PostgreSQL and had answered (statements, prepares, BEGIN, "
        "COMMIT).");
    auto& grants = metrics.counter("purser_ledger_lease_grants_total",
                                   "Store transactions that granted budget leases.");
    auto& top_ups = metrics.counter(
        "purser_ledger_lease_top_ups_total",
        "Budget leases extended because a request did not fit what this replica held.");
    auto& refused =
        metrics.counter("purser_ledger_lease_top_ups_refused_total",
                        "Top-ups the store could not grant (the wallet had no more to lease).");
    auto& takes = metrics.counter("purser_rate_limit_store_takes_total",
                                  "Store transactions that took units of shared rate limits.");
    metrics.addCollector(
        [&trips, &grants, &top_ups, &refused, &takes, &wl = *leases, &rl = *rate_leases] {
          const auto sync = [](http::Counter& c, uint64_t v) {
            if (v > c.value()) c.inc(v - c.value());
          };
          sync(trips, store::postgresRoundTrips());
          const auto l = wl.counters();
          sync(grants, l.grants);
          sync(top_ups, l.top_ups);
          sync(refused, l.refused_top_ups);
          sync(takes, rl.counters().takes);
        });
  }
}

std::jthread leaseLoop(ledger::WalletLeases& leases, ledger::RateLeases& rate_leases) {
  return std::jthread([&leases, &rate_leases](std::stop_token stop) {
    bool failing = false;  // logged when it starts and when it ends, not every turn
    while (!stop.stop_requested()) {
      guardedTurn("budget leases", [&] {
        auto r = leases.tick();
        if (r) r = rate_leases.tick();
        if (!r && !failing) {
          spdlog::error(
              "ledger: budget leases cannot be refreshed; new requests are served "
              "from what this replica holds until it runs out or lapses: {}",
              r.error().message);
        } else if (r && failing) {
          spdlog::info("ledger: budget leases are refreshed again");
        }
        failing = !r;
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
}

}  // namespace purser::server
