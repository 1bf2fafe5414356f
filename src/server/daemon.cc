// `purser serve`, the composition root: each part built from the configuration and connected to
// the others, in order — the store, the ledger and the governance services, the gateway, the
// observer, the fleet, live diagnosis and the console, the HTTP server — then run until a signal,
// and stopped in the reverse order. What a part needs to be made lives in its own file
// (startup, ledger_setup, gateway_tables, served_routes, fleet_setup, info, reload,
// housekeeping); this file only wires.
#include "server/daemon.h"

#include <utility>

#include <atomic>
#include <functional>
#include <optional>
#include <thread>

#include <sys/prctl.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <boost/asio/signal_set.hpp>

#include "api/admin_api.h"
#include "api/console_api.h"
#include "api/diagnose_api.h"
#include "api/fleet_api.h"
#include "api/mcp_api.h"
#include "cli/cli.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/id.h"
#include "common/logging.h"
#include "common/random.h"
#include "common/secret_key.h"
#include "common/work_pool.h"
#include "gateway/gateway.h"
#include "gateway/secrets.h"
#include "http/builtin.h"
#include "http/client.h"
#include "http/metrics.h"
#include "http/router.h"
#include "http/server.h"
#include "http/workers.h"
#include "identity/denial_log.h"
#include "identity/directory.h"
#include "identity/identity_store.h"
#include "identity/sessions.h"
#include "ledger/audit.h"
#include "ledger/ledger_store.h"
#include "ledger/meter.h"
#include "ledger/rate_leases.h"
#include "ledger/rate_limiter.h"
#include "ledger/records.h"
#include "ledger/wallet_book.h"
#include "ledger/wallet_leases.h"
#include "server/alert_webhook.h"
#include "server/console.h"
#include "server/data_dir.h"
#include "server/fleet_leader.h"
#include "server/fleet_setup.h"
#include "server/gateway_tables.h"
#include "server/housekeeping.h"
#include "server/info.h"
#include "server/ledger_setup.h"
#include "server/mcp_setup.h"
#include "server/observed_gpus.h"
#include "server/observer.h"
#include "server/reload.h"
#include "server/replication.h"
#include "server/served_routes.h"
#include "server/sign_in_setup.h"
#include "server/startup.h"

namespace purser::server {

Result<int> serve(const config::Config& config, std::ostream& out, ConfigLoader reload) {
  PURSER_TRY(setupLogging(config.log));
  // FIPS before anything draws a random byte or fetches an algorithm: what is fetched is kept.
  if (config.crypto.fips) {
    PURSER_TRY(crypto::enableFips());
    spdlog::info("crypto: OpenSSL's FIPS provider is loaded; every algorithm is fetched fips=yes");
  }
  const Clock& clock = SystemClock::instance();
  IdGenerator ids(clock, SystemRandom::instance());
  const auto started_at = clock.now();
  // Nothing of this process is another's to read — its memory, its environment, its open files —
  // not even a process of its own user (a pod in a user namespace is one): not dumpable.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  const std::optional<std::string> audit_env = takeSecretEnv("PURSER_AUDIT_KEY");
  const std::optional<std::string> admin_env = takeSecretEnv("PURSER_ADMIN_KEY");
  const std::optional<std::string> master_env = takeSecretEnv("PURSER_MASTER_KEY");
  warnIfReadableByOthers(config);
  std::vector<std::string> warnings;  // for /api/v1/info (the console) and /readyz

  auto data_dir = PURSER_TRY_VALUE(DataDir::open(config.data_dir));
  std::unique_ptr<store::Store> store = PURSER_TRY_VALUE(openStore(config, *data_dir, clock));
  PURSER_TRY(store->migrate("server", serverMigrations()));
  const std::string installation = PURSER_TRY_VALUE(installationId(*store, ids, clock));

  identity::Directory directory(clock);
  ledger::WalletBook wallets(clock);
  const std::string replica = PURSER_TRY_VALUE(replicaName(config, *data_dir, ids));
  // Replicas sharing PostgreSQL spend hard wallets from leases (ledger/wallet_leases.h).
  const bool shared_store = config.store.driver == "postgres";
  if (shared_store) wallets.enableLeases();
  // The audit log is signed with a key kept outside the database, and anchored beside it.
  const std::optional<std::string>& audit_key_hex = audit_env;
  const SecretKey audit_key = PURSER_TRY_VALUE(loadOrCreateSecretKey(
      audit_key_hex, "PURSER_AUDIT_KEY", data_dir->file("audit.key"), SystemRandom::instance()));
  ledger::AuditLog audit(clock, audit_key, data_dir->file("audit.anchor"));
  // The ledger's journal is replayed into the store before anything reads what was spent.
  auto meter_owner =
      PURSER_TRY_VALUE(openMeter(config, *store, wallets, clock, audit, *data_dir, replica));
  ledger::Meter& meter = *meter_owner;
  ledger::RateLimiter limiter(clock);
  ledger::RateLimitBook rate_limits;
  const ledger::PriceBook prices = priceBook(config);
  http::Workers workers(config.threads);
  http::WorkerLocal<http::HttpClient> http_clients(workers, [&clock](boost::asio::io_context& ctx) {
    return std::make_unique<http::HttpClient>(ctx, http::ClientOptions{}, clock);
  });
  ledger::Records records(*store, audit);
  AlertWebhook alert_webhook(clock, config.alerts.webhook_url, workers, http_clients);
  api::Services services{clock,         SystemRandom::instance(),
                         ids,           records,
                         directory,     wallets,
                         meter,         limiter,
                         rate_limits,   prices,
                         &alert_webhook};
  // The API's store reads run here, never on an HTTP worker.
  WorkPool readers("purser-reader", static_cast<size_t>(config.store.readers),
                   static_cast<size_t>(config.store.read_queue));
  services.readers = &readers;
  identity::DenialLog denials(clock);
  services.denials = &denials;
  PURSER_TRY(identity::openDirectory(*store, directory));
  directory.setCertificateBindings(certificateBindings(config));
  // People signed in through the identity provider: their sessions, live ones read back.
  identity::SessionBook sessions;
  PURSER_TRY(store->migrate("sessions", identity::sessionMigrations()));
  sessions.load(PURSER_TRY_VALUE(identity::loadSessions(*store, clock.now())));
  services.sessions = &sessions;
  PURSER_TRY(ledger::migrateLedger(*store));
  PURSER_TRY(ledger::loadBooks(*store, clock, wallets, rate_limits, /*keep_known=*/false));
  PURSER_TRY(audit.open(*store));
  std::optional<ledger::WalletLeases> leases;
  std::optional<ledger::RateLeases> rate_leases;
  std::jthread lease_loop;
  if (shared_store) {
    leases.emplace(*store, wallets, clock,
                   ledger::WalletLeaseOptions{.replica = replica, .ttl = config.store.lease_ttl});
    PURSER_TRY(leases->adopt());
    meter.setLeaseSource(&*leases);
    // Rate limits are counted in the store too, so that N replicas admit what one would.
    rate_leases.emplace(*store, clock);
    limiter.share(&*rate_leases);
    spdlog::info("store: replica {}; hard wallets are spent from leases (ttl {}s)", replica,
                 std::chrono::duration_cast<std::chrono::seconds>(config.store.lease_ttl).count());
  }
  {
    const ledger::Recovery recovery = PURSER_TRY_VALUE(meter.recover());
    services.reservations->restore(recovery.reservations);
    logRecovery(recovery);
  }
  // Started once recovery has charged what the last stop cut off, within the leases taken
  // over (a first turn would give an idle replica's free part back).
  if (shared_store) lease_loop = leaseLoop(*leases, *rate_leases);
  const std::optional<std::string>& admin_key = admin_env;
  const auto generated = PURSER_TRY_VALUE(api::bootstrap(services, admin_key));

  http::MetricsRegistry metrics;
  http::Router router;
  http::Readiness readiness;
  std::unique_ptr<http::Server> server;

  StoreProbe store_probe(*store, clock);  // asked again every second by housekeeping
  PURSER_TRY(addServerInfo(router, metrics, readiness, store_probe, shared_store,
                           {.installation = installation,
                            .started_at = started_at,
                            .workers = workers.size(),
                            .warnings = &warnings,
                            .draining = [&server] { return server && server->draining(); }}));
  // The model API: providers and routes from the configuration.
  GatewayTables tables = PURSER_TRY_VALUE(gatewayTables(config, directory, prices));
  // Budget alerts raised by model traffic: audited, and posted to the webhook when one is set.
  const auto on_alerts = [&alert_webhook, &records](const std::vector<ledger::Alert>& alerts,
                                                    const std::string& tenant_id) {
    alert_webhook.post(tenant_id, alerts);
    records.commit(
        {}, ledger::alertEntries(alerts, tenant_id, "gateway", "system"), [](Result<void> r) {
          if (!r) spdlog::error("gateway: a budget alert was not audited: {}", r.error().message);
        });
  };
  gateway::Gateway gateway(
      {clock, SystemRandom::instance(), ids, directory, *services.budget, prices, http_clients,
       on_alerts, std::max<size_t>(1, workers.size() / 2), &readers, &metrics},
      std::move(tables.providers), std::move(tables.routes));
  addLedgerMetrics(metrics, wallets, directory, leases ? &*leases : nullptr,
                   rate_leases ? &*rate_leases : nullptr);
  PURSER_TRY(gateway.addRoutes(router));
  // Provider keys replaced through the API are kept sealed (AES-256-GCM) and win over the
  // configuration's.
  const std::optional<std::string>& master_key = master_env;
  auto sealer = PURSER_TRY_VALUE(
      gateway::Sealer::open(master_key, data_dir->file("master.key"), SystemRandom::instance()));
  PURSER_TRY(store->migrate("gateway", gateway::ProviderKeyStore::migrations()));
  // Single sign-on (oidc): its cookies are MACed with a key derived from the master key, so any
  // replica can finish a sign-in another began.
  SignInSetup sign_in = PURSER_TRY_VALUE(signInSetup(config, http_clients, clock, sealer));
  gateway::ProviderKeyStore provider_keys(*store, std::move(sealer), SystemRandom::instance(),
                                          clock);
  // MCP servers behind /mcp (when `mcp:` names any); a credential set through the API is
  // sealed beside the provider keys.
  api::McpOptions mcp = PURSER_TRY_VALUE(mcpOptions(config, http_clients, clock));
  const std::vector<std::shared_ptr<mcp::Upstream>> mcp_servers = mcp.servers;
  auto stored_keys = PURSER_TRY_VALUE(provider_keys.loadAll());
  applyMcpCredentials(stored_keys, mcp_servers);
  for (auto& [name, keys] : stored_keys) {
    if (auto* p = gateway.provider(name)) p->replaceKeys(std::move(keys));
  }
  services.gateway = &gateway;
  // Observation: the providers' metrics and the exporters, judged into the targets' conditions.
  auto observer = PURSER_TRY_VALUE(
      Observer::create(config.observe, config.providers, workers.context(0), metrics,
                       SystemClock::instance(), [&gateway] { return gateway.routes(); }));
  services.series = &observer->series();
  services.observe_window = config.observe.window;
  // Requests waiting for a saturated route go on as soon as a scrape shows room.
  observer->onJudged([&gateway] { gateway.pumpQueues(); });
  services.provider_keys = &provider_keys;
  // Replicas sharing PostgreSQL: what an admin changes on one reaches the others' memory.
  std::jthread change_watch;
  if (shared_store) {
    PURSER_TRY(store->migrate("replicas", changeNoticeMigrations()));
    change_watch = std::jthread([&](std::stop_token stop) {
      watchChanges(stop, config.store.postgres, *store, [&] {
        guardedTurn("replicas", [&] {
          if (auto r = reloadShared(*store, services, gateway, provider_keys, mcp_servers); !r) {
            spdlog::error("replicas: a change from another replica was not read: {}",
                          r.error().message);
          }
        });
      });
    });
  }
  PURSER_TRY(api::addAdminRoutes(router, services));
  PURSER_TRY(api::addMeteringRoutes(router, services));
  PURSER_TRY(api::addConsoleApiRoutes(router, services));
  PURSER_TRY(api::addSignInRoutes(router, services, sign_in.options));
  // MCP tools through the same door (/mcp), when `mcp:` names servers.
  if (!mcp.servers.empty()) spdlog::info("mcp: {} server(s) behind /mcp", mcp.servers.size());
  PURSER_TRY(api::addMcpRoutes(router, services, std::move(mcp)));
  if (sign_in.options) {
    spdlog::info("sso: people sign in with {} ({} role rules)", config.oidc->issuer,
                 config.oidc->roles.size());
  }
  // The fleet: the configured Kueue manifests, then what was applied and submitted since.
  FleetSetup fleet_setup = PURSER_TRY_VALUE(fleetSetup(config, *data_dir, installation, warnings));
  if (!warnings.empty()) {
    // Ready (nothing else is amiss), but degraded: said in every answer until it is fixed.
    readiness.addDegraded("fleet.local", [&warnings]() -> Result<void> {
      return fail(unavailable(fmt::format("{}", fmt::join(warnings, "; "))));
    });
  }
  // Models the fleet serves join the gateway's routes (served_routes.h).
  auto served_routes = gatewayServedRoutes(gateway, prices, *observer, directory);
  fleet_setup.served = served_routes.get();
  // The GPUs' utilisation, from the DCGM exporters, for the fleet's efficiency figures.
  std::unique_ptr<ObservedGpus> observed_gpus;
  if (!config.observe.exporters.empty()) {
    observed_gpus = std::make_unique<ObservedGpus>(observer->series(), observer->scraper(),
                                                   SystemClock::instance());
    fleet_setup.gpu_utilisation = observed_gpus.get();
  }
  // The fleet runs here (one replica), or on the replica that leads it (replicas sharing
  // PostgreSQL: fleet_leader.h); the API answers with the fleet current at each request.
  std::shared_ptr<api::Fleet> fleet_api;
  std::unique_ptr<FleetLeadership> leadership;
  api::Fleet::Current current_fleet = [] { return std::shared_ptr<api::Fleet>(); };
  if (config.fleet.enabled && shared_store) {
    FleetLeadershipOptions lo;
    lo.url = config.store.postgres;
    lo.replica = replica;
    lo.interval = config.fleet.leader_check;
    leadership = PURSER_TRY_VALUE(FleetLeadership::create(
        *store, std::move(lo),
        [&services, &store, &audit,
         fleet_setup](FleetLeadership::Fence fence) -> Result<std::unique_ptr<api::Fleet>> {
          FleetSetup setup = fleet_setup;
          setup.service.fence = std::move(fence);
          return openFleet(services, *store, audit, std::move(setup));
        },
        clock));
    if (!PURSER_TRY_VALUE(leadership->tryLead())) {
      spdlog::info(
          "fleet: another replica leads the fleet; this one follows (forwards the fleet's "
          "API to it, and takes the lead if it goes)");
    }
    FleetLeadership* l = leadership.get();
    current_fleet = [l] { return l->current(); };
    http::WorkerLocal<http::HttpClient>* clients = &http_clients;
    PURSER_TRY(api::Fleet::addRoutes(
        router, services, current_fleet,
        [l, clients](http::Request& req) { return l->forward(req, clients->current()); }));
    api::Fleet::addMetrics(metrics, current_fleet);
    leadership->addMetrics(metrics);
  } else if (config.fleet.enabled) {
    fleet_api = PURSER_TRY_VALUE(openFleet(services, *store, audit, std::move(fleet_setup)));
    for (const auto& w : fleet_api->warnings()) spdlog::warn("fleet: {}", w);
    PURSER_TRY(fleet_api->addRoutes(router));
    fleet_api->addMetrics(metrics);
    current_fleet = [&fleet_api] { return fleet_api; };
  } else {
    spdlog::info("fleet: not run by this replica (fleet.enabled: false)");
  }
  // Live diagnosis: the engine over the series, the fleet's events and the audit log.
  PURSER_TRY(api::addDiagnoseRoutes(router, services, liveDiagnosis(config, current_fleet)));
  if (config.console.enabled) PURSER_TRY(addConsoleRoutes(router));

  server = std::make_unique<http::Server>(serverOptions(config), router, workers, metrics, clock);
  PURSER_TRY(server->listen());
  server->start();
  if (leadership) {
    // The other replicas forward the fleet's API here while this one leads.
    leadership->setAddress(advertisedAddress(config, server->port()));
    leadership->start();
  }

  // The first SIGTERM/SIGINT drains; a second one stops at once (exit code 1).
  boost::asio::signal_set signals(workers.context(0), SIGINT, SIGTERM);
  std::atomic<bool> forced{false};
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int signal) {
        if (ec) return;
        const char* name = signal == SIGTERM ? "SIGTERM" : "SIGINT";
        if (server->draining()) {
          spdlog::warn("received {} again; stopping now without waiting for requests in flight",
                       name);
          forced = true;
          workers.stop();
          return;
        }
        spdlog::info("received {}; shutting down (send it again to stop at once)", name);
        server->shutdown([&workers] { workers.stop(); });
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);

  // SIGHUP re-reads the configuration and applies what may change without a restart (reload.h).
  Reload reloader(config.routes, gateway, services);
  boost::asio::signal_set hangups(workers.context(0), SIGHUP);
  std::function<void(const boost::system::error_code&, int)> on_hangup =
      [&](const boost::system::error_code& ec, int) {
        if (ec) return;
        hangups.async_wait(on_hangup);
        (void)server->reloadTls();  // logs what it did; the files named at the start
        if (!reload) return;
        auto fresh = reload();
        if (!fresh) {
          spdlog::error("reload: the configuration was not applied: {}", fresh.error().toString());
          return;
        }
        directory.setCertificateBindings(certificateBindings(*fresh));
        reloader.apply(*fresh);
      };
  hangups.async_wait(on_hangup);

  // The timers of worker 0 and the housekeeping thread (housekeeping.h).
  Housekeeping housekeeping({.clock = clock,
                             .worker = workers.context(0),
                             .observe_interval = config.observe.interval,
                             .series = observer->mutableSeries(),
                             .metrics = metrics,
                             .meter = meter,
                             .services = services,
                             .audit = audit,
                             .store = *store,
                             .shared_store = shared_store,
                             .current_fleet = current_fleet,
                             .store_probe = &store_probe});
  housekeeping.start();

  observer->start();
  workers.start();
  spdlog::info("{} serving on {} with {} worker(s); data in {}", cli::versionLine(), server->url(),
               workers.size(), data_dir->path());
  out << "purser: listening on " << server->url() << "\n";
  if (config.console.enabled) out << "purser: console at " << server->url() << "/\n";
  if (generated) {
    out << "purser: platform admin key (shown this once; keep it safe): " << *generated << "\n";
  }
  out.flush();

  workers.join();
  // Reads in flight finish before what they read from (the fleet, the meter, the store) stops.
  readers.stop();
  housekeeping.join();
  // The fleet service stops next (its pods keep running, to be adopted at the next start): after
  // it, nothing can queue more writes. Anchor the audit log, then flush the store last.
  if (leadership) leadership->stop();
  if (fleet_api) fleet_api->stop();
  // The journal is synced and materialised before the store's last commit; the leases' free
  // parts go back once what was charged under them is shipped.
  if (lease_loop.joinable()) {
    lease_loop.request_stop();
    lease_loop.join();
  }
  if (change_watch.joinable()) {
    change_watch.request_stop();
    change_watch.join();
  }
  meter.close();
  if (rate_leases) {
    if (auto r = rate_leases->giveBackAll(); !r) {
      spdlog::warn("ledger: rate limit units not given back: {}", r.error().message);
    }
  }
  if (leases) {
    if (auto r = leases->giveBackAll(); !r) {
      spdlog::warn("ledger: budget leases not given back (they lapse after store.lease_ttl): {}",
                   r.error().message);
    }
  }
  if (auto anchored = audit.anchor(*store); !anchored) {
    spdlog::error("audit: {}", anchored.error().message);
  }
  store->close();
  spdlog::info(forced ? "stopped at once" : "stopped");
  return forced ? 1 : 0;
}

}  // namespace purser::server
