#include "server/daemon.h"

#include <utility>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>

#include "api/admin_api.h"
#include "api/console_api.h"
#include "api/diagnose_api.h"
#include "api/diagnose_live.h"
#include "api/fleet_api.h"
#include "cli/cli.h"
#include "common/clock.h"
#include "common/id.h"
#include "common/json.h"
#include "common/random.h"
#include "common/secret_key.h"
#include "config/route_changes.h"
#include "gateway/admission.h"
#include "gateway/gateway.h"
#include "gateway/secrets.h"
#include "http/builtin.h"
#include "http/client.h"
#include "http/metrics.h"
#include "http/router.h"
#include "http/server.h"
#include "http/workers.h"
#include "identity/directory.h"
#include "ledger/audit.h"
#include "ledger/ledger_store.h"
#include "ledger/meter.h"
#include "ledger/rate_leases.h"
#include "ledger/rate_limiter.h"
#include "ledger/wallet_book.h"
#include "ledger/wallet_leases.h"
#include "observe/self_scrape.h"
#include "server/console.h"
#include "server/data_dir.h"
#include "server/fleet_leader.h"
#include "server/fleet_setup.h"
#include "server/observed_gpus.h"
#include "server/observer.h"
#include "server/replication.h"
#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace purser::server {

namespace {

// The server's own schema: facts about this installation.
const std::vector<store::Migration> kServerMigrations = {
    {1, "installation facts",
     "CREATE TABLE server_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"},
};

// Returns this installation's id, creating it on first start.
Result<std::string> installationId(store::Store& store, IdGenerator& ids, const Clock& clock) {
  std::string id;
  PURSER_TRY(store.write([&](store::Tx& tx) -> Result<void> {
    auto rows =
        PURSER_TRY_VALUE(tx.query("SELECT value FROM server_meta WHERE key = 'installation_id'"));
    if (!rows.empty()) {
      id = rows[0].getText(0);
      return {};
    }
    id = ids.next();
    PURSER_TRY(
        tx.exec("INSERT INTO server_meta (key, value) VALUES ('installation_id', $1)", {id}));
    PURSER_TRY(tx.exec("INSERT INTO server_meta (key, value) VALUES ('created_at', $1)",
                       {formatRfc3339(clock.now())}));
    return {};
  }));
  return id;
}

// Runs one turn of a background loop. A turn that fails is logged and the loop goes on: no input
// may stop a background loop (metering, lease expiry) for the rest of the process's life.
template <typename F>
void guardedTurn(const char* loop, F&& turn) {
  try {
    turn();
  } catch (const std::exception& e) {
    spdlog::error("{}: a turn failed and was skipped; the loop goes on: {}", loop, e.what());
  }
}

// This replica's name among those sharing a store: the configured one, else one made at the
// first start and kept in the data directory, so a restart adopts what it held before.
Result<std::string> replicaName(const config::Config& c, const DataDir& dir, IdGenerator& ids) {
  if (!c.store.replica.empty()) return c.store.replica;
  const std::string path = dir.file("replica");
  std::ifstream in(path);
  std::string name;
  if (in && std::getline(in, name) && config::validReplicaName(name)) return name;
  name = "r-" + ids.next();
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  std::ofstream outf(path, std::ios::trunc);
  outf << name << "\n";
  outf.close();
  if (!outf) return fail(unavailable("cannot write " + path));
  return name;
}

// A secret handed in through the environment, read once and then gone from it: scrubbed from
// the memory /proc/<pid>/environ shows, and unset, so that no child and no reader of that file
// sees it.
std::optional<std::string> takeSecretEnv(const char* name) {
  char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  std::optional<std::string> out;
  if (*value != '\0') out = std::string(value);
  std::memset(value, 0, std::strlen(value));
  ::unsetenv(name);
  return out;
}

http::ServerOptions serverOptions(const config::Config& c) {
  http::ServerOptions o;
  o.host = c.host;
  o.port = c.port;
  o.max_body_bytes = c.http.max_body_bytes;
  o.max_header_bytes = c.http.max_header_bytes;
  o.max_nesting = c.http.max_nesting_depth;
  o.max_connections = c.http.max_connections;
  o.max_requests_per_connection = c.http.max_requests_per_connection;
  o.idle_timeout = c.http.idle_timeout;
  o.header_timeout = c.http.header_timeout;
  o.body_timeout = c.http.body_timeout;
  o.write_timeout = c.http.write_timeout;
  o.drain_timeout = c.http.drain_timeout;
  if (c.http.tls) o.tls = http::TlsOptions{c.http.tls->cert_file, c.http.tls->key_file};
  return o;
}

}  // namespace

const std::vector<store::Migration>& serverMigrations() { return kServerMigrations; }

Result<int> serve(const config::Config& config, std::ostream& out, ConfigLoader reload) {
  PURSER_TRY(setupLogging(config.log));
  const Clock& clock = SystemClock::instance();
  IdGenerator ids(clock, SystemRandom::instance());
  const auto started_at = clock.now();
  // Nothing of this process is another's to read — its memory, its environment, its open files —
  // not even a process of its own user (a pod in a user namespace is one): not dumpable.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  const std::optional<std::string> audit_env = takeSecretEnv("PURSER_AUDIT_KEY");
  const std::optional<std::string> admin_env = takeSecretEnv("PURSER_ADMIN_KEY");
  const std::optional<std::string> master_env = takeSecretEnv("PURSER_MASTER_KEY");
  if (!config.file.empty()) {
    if (struct stat st{}; ::stat(config.file.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      spdlog::warn(
          "{} can be read by other users than Purser's; it may hold provider keys "
          "(chmod 600 it)",
          config.file);
    }
  }
  std::vector<std::string> warnings;  // for /api/v1/info (the console) and /readyz

  auto data_dir = PURSER_TRY_VALUE(DataDir::open(config.data_dir));
  std::unique_ptr<store::Store> store;
  if (config.store.driver == "postgres") {
    store = PURSER_TRY_VALUE(store::PostgresStore::open(
        {.url = config.store.postgres,
         .max_readers =
             static_cast<size_t>(std::max<int64_t>(1, config.store.max_connections - 1))},
        clock));
    spdlog::info("store: PostgreSQL");
  } else {
    store = PURSER_TRY_VALUE(store::SqliteStore::open(
        {.path = data_dir->file("purser.db"),
         .busy_timeout =
             std::chrono::duration_cast<std::chrono::milliseconds>(config.store.busy_timeout)},
        clock));
  }
  PURSER_TRY(store->migrate("server", kServerMigrations));
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
  auto meter_owner = PURSER_TRY_VALUE(ledger::Meter::open(
      *store, wallets, clock, &audit,
      {.dir = data_dir->file("journal"),
       .sync =
           config.ledger.sync == "always" ? ledger::SyncMode::kAlways : ledger::SyncMode::kBatch,
       .sync_interval = config.ledger.sync_interval,
       .apply_interval =
           config.store.driver == "postgres" ? config.store.ship_interval : Duration::zero(),
       .ack_after_store = config.store.driver == "postgres" && config.ledger.sync == "always"},
      replica));
  ledger::Meter& meter = *meter_owner;
  if (meter.replayed().dropped_bytes > 0) {
    spdlog::warn(
        "ledger: the journal ended in {} byte(s) a crash left unsynced; what they held was "
        "never acknowledged as durable (ledger.sync: {})",
        meter.replayed().dropped_bytes, config.ledger.sync);
  }
  ledger::RateLimiter limiter(clock);
  ledger::RateLimitBook rate_limits;
  std::vector<ledger::ModelPrice> model_prices;
  for (const auto& p : config.prices) {
    model_prices.push_back(
        {p.provider,
         p.model,
         {p.input, p.output, p.cached_input, p.cache_write, p.reasoning.value_or(p.output)}});
  }
  std::vector<ledger::GpuPrice> gpu_prices;
  for (const auto& g : config.gpu_prices) gpu_prices.push_back({g.flavor, g.per_gpu_hour});
  const ledger::PriceBook prices(std::move(model_prices), std::move(gpu_prices));
  http::Workers workers(config.threads);
  http::WorkerLocal<http::HttpClient> http_clients(workers, [&clock](boost::asio::io_context& ctx) {
    return std::make_unique<http::HttpClient>(ctx, http::ClientOptions{}, clock);
  });
  api::Services services{clock,        SystemRandom::instance(),
                         ids,          *store,
                         directory,    wallets,
                         audit,        meter,
                         limiter,      rate_limits,
                         prices,       config.alerts.webhook_url,
                         &http_clients};
  api::DenialLog denials(clock);
  services.denials = &denials;
  PURSER_TRY(api::loadState(services));
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
    api::restoreReservations(services, recovery.reservations);
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
  // Started once recovery has charged what the last stop cut off, within the leases taken
  // over (a first turn would give an idle replica's free part back).
  if (shared_store) {
    // Refilled ahead of need, renewed and given back on a thread of its own: each turn may wait
    // for the store.
    lease_loop = std::jthread([&leases, &rate_leases](std::stop_token stop) {
      bool failing = false;  // logged when it starts and when it ends, not every turn
      while (!stop.stop_requested()) {
        guardedTurn("budget leases", [&] {
          auto r = leases->tick();
          if (r) r = rate_leases->tick();
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
  const std::optional<std::string>& admin_key = admin_env;
  const auto generated = PURSER_TRY_VALUE(api::bootstrap(services, admin_key));

  http::MetricsRegistry metrics;
  http::Router router;
  http::Readiness readiness;
  std::unique_ptr<http::Server> server;

  const auto& build = cli::buildInfo();
  metrics
      .gaugeFamily("purser_build_info", "Version of the running purser (always 1).",
                   {"version", "commit"})
      .labels({build.version, build.commit})
      .set(1);
  metrics.gauge("purser_start_time_seconds", "When this process started, in Unix seconds.")
      .set(static_cast<double>(unixMillis(started_at)) / 1000.0);

  const auto store_check = [&store]() -> Result<void> {
    return store->read([](store::Tx& tx) -> Result<void> {
      PURSER_TRY(tx.query("SELECT 1"));
      return {};
    });
  };
  if (shared_store) {
    // PostgreSQL down: every replica goes on serving from its budget leases and rate-limit units
    // until they run out, so none is taken out of its load balancer for it; /readyz says
    // "degraded" with the reason, and purser_store_up is 0.
    readiness.addDegraded("store", store_check);
    auto& up = metrics.gauge("purser_store_up",
                             "1 when the last check reached the store, 0 when it did not.");
    metrics.addCollector([&up, store_check] { up.set(store_check() ? 1 : 0); });
  } else {
    readiness.add("store", store_check);
  }
  PURSER_TRY(http::addBuiltinRoutes(router, metrics, readiness,
                                    [&server] { return server && server->draining(); }));
  PURSER_TRY(router.add(http::Method::kGet, "/api/v1/info", [&](http::Request&) {
    nlohmann::json body = {
        {"name", "purser"},
        {"version", build.version},
        {"commit", build.commit},
        {"installation_id", installation},
        {"started_at", formatRfc3339(started_at)},
        {"workers", workers.size()},
        {"warnings", warnings},
    };
    return http::Response::json(200, writeJson(body));
  }));
  // The model API: providers and routes from the configuration.
  std::vector<std::unique_ptr<gateway::Provider>> providers;
  for (const auto& p : config.providers) {
    providers.push_back(std::make_unique<gateway::Provider>(
        p.name,
        p.kind == "anthropic" ? gateway::ProviderKind::kAnthropic : gateway::ProviderKind::kOpenAi,
        p.base_url, p.api_keys, p.timeout, p.connect_timeout,
        gateway::ProviderLimits{p.max_response_bytes, p.max_event_bytes}));
  }
  std::vector<std::unique_ptr<gateway::Route>> routes;
  for (size_t ri = 0; ri < config.routes.size(); ++ri) {
    const auto& r = config.routes[ri];
    auto route = std::make_unique<gateway::Route>();
    route->alias = r.model;
    route->strategy = *gateway::parseStrategy(r.strategy);  // validated with the configuration
    // allow: names (as the documentation writes them) or ids; a name that matches nothing fails
    // the start instead of quietly locking everyone out.
    for (const auto& who : r.allow_tenants) {
      auto t = directory.tenant(who);
      if (!t) t = directory.tenantByName(who);
      if (!t) {
        return fail(invalidArgument(fmt::format(
            "routes[{}].allow.tenants: \"{}\" names no tenant (create it first, or leave it out)",
            ri, who)));
      }
      route->allow_tenants.push_back(t->id);
    }
    for (const auto& who : r.allow_teams) {
      std::optional<identity::Team> team = directory.team(who);
      if (!team) {
        const size_t slash = who.find('/');
        if (slash != std::string::npos) {
          auto t = directory.tenantByName(who.substr(0, slash));
          if (!t) t = directory.tenant(who.substr(0, slash));
          if (t) team = directory.teamByName(t->id, who.substr(slash + 1));
        } else {
          int matches = 0;
          for (const auto& candidate : directory.teams()) {
            if (candidate.name == who) {
              team = candidate;
              ++matches;
            }
          }
          if (matches > 1) {
            return fail(invalidArgument(fmt::format(
                "routes[{}].allow.teams: \"{}\" is a team of {} tenants; write tenant/team", ri,
                who, matches)));
          }
        }
      }
      if (!team) {
        return fail(invalidArgument(fmt::format(
            "routes[{}].allow.teams: \"{}\" names no team (tenant/team, a team name or an id)", ri,
            who)));
      }
      route->allow_teams.push_back(team->id);
    }
    route->served_by = r.served_by;
    route->max_tokens = r.max_tokens;
    route->retries = r.retries;
    route->slo_ttft_p95 = r.slo_ttft_p95;
    route->slo_itl_p95 = r.slo_itl_p95;
    route->saturation_queue = r.saturation_queue;
    route->saturation_kv_cache = r.saturation_kv_cache;
    route->queue =
        std::make_shared<gateway::AdmissionQueue>(static_cast<size_t>(r.queue_max_waiting));
    route->queue_max_wait = r.queue_max_wait;
    for (const auto& t : r.targets) {
      auto target = std::make_unique<gateway::Target>();
      for (auto& p : providers) {
        if (p->name() == t.provider) target->provider = p.get();
      }
      target->model = t.model;
      target->weight = t.weight;
      target->price = prices.find(t.provider, t.model);
      route->targets.push_back(std::move(target));
    }
    routes.push_back(std::move(route));
  }
  // Budget alerts raised by model traffic: audited, and posted to the webhook when one is set.
  const auto on_alerts = [&services](const boost::asio::any_io_executor& executor,
                                     const std::vector<ledger::Alert>& alerts,
                                     const std::string& tenant_id) {
    api::postAlerts(services, executor, alerts, tenant_id);
    services.store.writeAsync(
        [&services, alerts, tenant_id](store::Tx& tx) {
          return api::auditAlerts(services, tx, alerts, tenant_id, "gateway");
        },
        [](Result<void> r) {
          if (!r) spdlog::error("gateway: a budget alert was not audited: {}", r.error().message);
        });
  };
  gateway::Gateway gateway(
      {clock, SystemRandom::instance(), ids, directory, wallets, meter, limiter, rate_limits,
       prices, http_clients, on_alerts, std::max<size_t>(1, workers.size() / 2), &metrics},
      std::move(providers), std::move(routes));
  // The ledger's state at every scrape: how much of each wallet is spent, what is held.
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
            .labels({api::walletScopeName(directory, w.spec.scope),
                     tenant ? tenant->name : std::string(), w.spec.id})
            .set(static_cast<double>(w.used_basis_points) / 10'000.0);
      }
    });
  }
  // Replicas sharing PostgreSQL: how often this one goes to the store, and its leases.
  if (shared_store) {
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
    metrics.addCollector([&, &wl = *leases, &rl = *rate_leases] {
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
  PURSER_TRY(gateway.addRoutes(router));
  // Provider keys replaced through the API are kept sealed (AES-256-GCM) and win over the
  // configuration's.
  const std::optional<std::string>& master_key = master_env;
  auto sealer = PURSER_TRY_VALUE(
      gateway::Sealer::open(master_key, data_dir->file("master.key"), SystemRandom::instance()));
  PURSER_TRY(store->migrate("gateway", gateway::ProviderKeyStore::migrations()));
  gateway::ProviderKeyStore provider_keys(*store, std::move(sealer), SystemRandom::instance(),
                                          clock);
  for (auto& [name, keys] : PURSER_TRY_VALUE(provider_keys.loadAll())) {
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
          if (auto r = reloadShared(services, gateway, provider_keys); !r) {
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
  // The fleet: the configured Kueue manifests, then what was applied and submitted since.
  api::FleetOptions fleet_setup =
      PURSER_TRY_VALUE(fleetSetup(config, *data_dir, installation, warnings));
  if (!warnings.empty()) {
    // Ready (nothing else is amiss), but degraded: said in every answer until it is fixed.
    readiness.addDegraded("fleet.local", [&warnings]() -> Result<void> {
      return fail(unavailable(fmt::format("{}", fmt::join(warnings, "; "))));
    });
  }
  // Models the fleet serves join the gateway's routes as targets (provider "fleet:NS/NAME/POD",
  // priced by a prices entry of provider "fleet" and their model, else at the route's dearest
  // configured target), only routes whose served_by names the workload's tenant or team.
  class GatewayRoutes final : public scheduler::ServedRoutes {
   public:
    GatewayRoutes(gateway::Gateway& g, const ledger::PriceBook& p, Observer& o,
                  const identity::Directory& d)
        : gateway_(g), prices_(p), observer_(o), directory_(d) {}
    Result<void> mayServe(const std::string& alias, const Owner& owner) const override {
      const gateway::Route* route = gateway_.route(alias);
      if (route == nullptr) {
        // No route has the name: the workload's tenant gets one of its own when it joins.
        if (!owner.tenant_id.empty()) return {};
        return fail(Error(ErrorCode::kNotFound,
                          fmt::format("the gateway has no route \"{}\" to serve", alias)));
      }
      const auto tenant = directory_.tenant(owner.tenant_id);
      const auto team = directory_.team(owner.team_id);
      for (const auto& who : route->served_by) {
        const auto slash = who.find('/');
        if (slash == std::string::npos) {
          if (who == owner.tenant_id || (tenant && who == tenant->name)) return {};
        } else if (team && tenant) {
          const std::string t = who.substr(0, slash), name = who.substr(slash + 1);
          if ((t == tenant->name || t == tenant->id) && (name == team->name || name == team->id)) {
            return {};
          }
        } else if (who == owner.team_id) {
          return {};
        }
      }
      return fail(
          Error(ErrorCode::kPermissionDenied,
                route->served_by.empty()
                    ? fmt::format("route \"{}\" is served by no workload (its served_by names no "
                                  "tenant or team); a platform admin may add yours",
                                  alias)
                    : fmt::format("route \"{}\" is served only by the workloads of {}", alias,
                                  fmt::join(route->served_by, ", "))));
    }
    Result<void> join(const std::string& alias, const std::string& id, const std::string& base_url,
                      const std::string& api, const std::string& model,
                      const std::string& metrics_url, const std::string& engine,
                      const Owner& owner) override {
      PURSER_TRY(mayServe(alias, owner));
      const gateway::Route* route = gateway_.route(alias);
      if (route == nullptr) {
        // A model no configured route names: a route of the tenant's own, which only its
        // members see and only its workloads serve (a platform admin shares it by configuring
        // a route of that name).
        auto own = std::make_unique<gateway::Route>();
        own->alias = alias;
        own->owned = true;
        own->allow_tenants = {owner.tenant_id};
        own->served_by = {owner.tenant_id};
        const config::RouteConfig defaults;
        own->max_tokens = defaults.max_tokens;
        own->retries = defaults.retries;
        own->saturation_queue = defaults.saturation_queue;
        own->saturation_kv_cache = defaults.saturation_kv_cache;
        own->queue = std::make_shared<gateway::AdmissionQueue>(
            static_cast<size_t>(defaults.queue_max_waiting));
        own->queue_max_wait = defaults.queue_max_wait;
        if (auto made = gateway_.addRoute(std::move(own))) {
          spdlog::info("fleet: route \"{}\" made for the model tenant {} serves (its own)", alias,
                       owner.tenant_id);
        }
        route = gateway_.route(alias);
        if (route == nullptr) return fail(unavailable("the route could not be made"));
        PURSER_TRY(mayServe(alias, owner));  // one made meanwhile by another tenant is theirs
      }
      // Never free because a replica says so: its own price, else the route's dearest.
      const ledger::TokenPrice* price = prices_.find("fleet", model);
      const auto weight = [](const ledger::TokenPrice* p) {
        return static_cast<__int128>(p->input.nanos()) + p->output.nanos();
      };
      for (const gateway::Target* t : gateway::configuredTargets(*route)) {
        if (prices_.find("fleet", model) != nullptr) break;
        if (t->price != nullptr && (price == nullptr || weight(t->price) > weight(price))) {
          price = t->price;
        }
      }
      if (price == nullptr) {
        return fail(Error(ErrorCode::kFailedPrecondition,
                          fmt::format("its tokens have no price: add a prices entry {{provider: "
                                      "fleet, model: {}}}, or price route \"{}\"'s targets",
                                      model, alias)));
      }
      route->served->join(
          id,
          std::make_unique<gateway::Provider>("fleet:" + id,
                                              api == "anthropic" ? gateway::ProviderKind::kAnthropic
                                                                 : gateway::ProviderKind::kOpenAi,
                                              base_url, std::vector<std::string>{},
                                              std::chrono::seconds(120), std::chrono::seconds(5)),
          model, price, owner.tenant_id);
      // Scraped like a configured provider's metrics_url, under the target's provider name.
      if (!metrics_url.empty()) observer_.watch("fleet:" + id, metrics_url, engine);
      return {};
    }
    void leave(const std::string& alias, const std::string& id) override {
      if (const gateway::Route* route = gateway_.route(alias)) route->served->leave(id);
      observer_.unwatch("fleet:" + id);
    }
    int64_t inFlight(const std::string& alias, const std::string& id) const override {
      const gateway::Route* route = gateway_.route(alias);
      return route == nullptr ? 0 : route->served->inFlight(id);
    }

   private:
    gateway::Gateway& gateway_;
    const ledger::PriceBook& prices_;
    Observer& observer_;
    const identity::Directory& directory_;
  };
  GatewayRoutes served_routes(gateway, prices, *observer, directory);
  fleet_setup.served = &served_routes;
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
        [&services,
         fleet_setup](FleetLeadership::Fence fence) -> Result<std::unique_ptr<api::Fleet>> {
          api::FleetOptions options = fleet_setup;
          options.service.fence = std::move(fence);
          return api::Fleet::open(services, std::move(options));
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
    fleet_api = PURSER_TRY_VALUE(api::Fleet::open(services, std::move(fleet_setup)));
    for (const auto& w : fleet_api->warnings()) spdlog::warn("fleet: {}", w);
    PURSER_TRY(fleet_api->addRoutes(router));
    fleet_api->addMetrics(metrics);
    current_fleet = [&fleet_api] { return fleet_api; };
  } else {
    spdlog::info("fleet: not run by this replica (fleet.enabled: false)");
  }
  // Live diagnosis: the engine over the series, the fleet's events and the audit log.
  {
    api::DiagnoseOptions diagnose_options;
    diagnose_options.fleet = [current_fleet]() -> std::shared_ptr<scheduler::FleetService> {
      auto f = current_fleet();
      if (!f) return nullptr;
      return std::shared_ptr<scheduler::FleetService>(f, &f->service());
    };
    for (const auto& p : config.providers) {
      diagnose_options.providers.push_back({p.name, !p.metrics_url.empty(), p.gpus});
    }
    if (config.diagnose.narrator) {
      diagnose_options.narrator_route = config.diagnose.narrator->route;
      diagnose_options.narrator_max_tokens = config.diagnose.narrator->max_tokens;
    }
    PURSER_TRY(api::addDiagnoseRoutes(router, services, std::move(diagnose_options)));
  }
  if (config.console.enabled) PURSER_TRY(addConsoleRoutes(router));

  server = std::make_unique<http::Server>(serverOptions(config), router, workers, metrics, clock);
  PURSER_TRY(server->listen());
  server->start();
  if (leadership) {
    // The other replicas forward the fleet's API here while this one leads.
    std::string address = config.fleet.advertise;
    if (address.empty()) {
      std::string host = config.host;
      if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") {
        char name[256] = {};
        host = ::gethostname(name, sizeof name - 1) == 0 ? name : "localhost";
      }
      if (host.find(':') != std::string::npos && !host.starts_with('[')) host = "[" + host + "]";
      address = fmt::format("http://{}:{}", host, server->port());
    }
    while (address.ends_with('/')) address.pop_back();
    leadership->setAddress(std::move(address));
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

  // Purser's own metrics join the series every observe.interval, for live diagnosis.
  observe::SelfScrape self_scrape(observer->mutableSeries(), metrics);
  boost::asio::steady_timer self_timer(workers.context(0));
  std::function<void(const boost::system::error_code&)> self_tick =
      [&](const boost::system::error_code& ec) {
        if (ec) return;
        guardedTurn("self-scrape", [&] {
          if (auto sampled = self_scrape.sample(unixMillis(clock.now())); !sampled) {
            spdlog::warn("observe: Purser's own metrics were not sampled: {}",
                         sampled.error().message);
          }
        });
        self_timer.expires_after(config.observe.interval);
        self_timer.async_wait(self_tick);
      };
  self_timer.expires_after(config.observe.interval);
  self_timer.async_wait(self_tick);

  // SIGHUP re-reads the configuration and applies the providers' keys without a restart (keys
  // set through the API keep precedence). A file with errors changes nothing.
  std::vector<config::RouteConfig> configured_routes = config.routes;
  boost::asio::signal_set hangups(workers.context(0), SIGHUP);
  std::function<void(const boost::system::error_code&, int)> on_hangup =
      [&](const boost::system::error_code& ec, int) {
        if (ec) return;
        hangups.async_wait(on_hangup);
        if (!reload) return;
        auto fresh = reload();
        if (!fresh) {
          spdlog::error("reload: the configuration was not applied: {}", fresh.error().toString());
          return;
        }
        // Route changes are audited, so that what changed, and when, is on the record for
        // operators and for diagnosis. The targets, weights and strategy of a route that exists
        // take effect at once; new and removed routes, and a route's other settings, at the
        // next start.
        auto changes = config::routeChanges(configured_routes, fresh->routes);
        std::vector<std::string> applied;
        for (const auto& c : changes) {
          if (c.action != "route.update") {
            spdlog::info("reload: route \"{}\": {} (takes effect at the next start)", c.route,
                         c.change);
            continue;
          }
          const config::RouteConfig* now = nullptr;
          const config::RouteConfig* before = nullptr;
          for (const auto& r : fresh->routes) {
            if (r.model == c.route) now = &r;
          }
          for (const auto& r : configured_routes) {
            if (r.model == c.route) before = &r;
          }
          if (now == nullptr || before == nullptr) continue;
          std::vector<gateway::TargetSpec> specs;
          for (const auto& t : now->targets) specs.push_back({t.provider, t.model, t.weight});
          auto done = gateway.reloadRoute(c.route, *gateway::parseStrategy(now->strategy), specs);
          if (!done) {
            spdlog::warn("reload: route \"{}\": {}; its targets stay as they were until a restart",
                         c.route, done.error().message);
            continue;
          }
          config::RouteConfig rest = *before;
          rest.targets = now->targets;
          rest.strategy = now->strategy;
          const bool all = config::routeChanges({rest}, {*now}).empty();
          spdlog::info("reload: route \"{}\": {} ({})", c.route, c.change,
                       all ? "in force now"
                           : "targets and strategy in force now; its other settings at the next "
                             "start");
          applied.push_back(c.route);
        }
        configured_routes = fresh->routes;
        if (!changes.empty()) {
          services.store.writeAsync(
              [&services, changes, applied](store::Tx& tx) -> Result<void> {
                for (const auto& c : changes) {
                  ledger::AuditEntry e;
                  e.actor = "system";
                  e.actor_role = "system";
                  e.action = c.action;
                  e.target = "route:" + c.route;
                  const bool live =
                      std::find(applied.begin(), applied.end(), c.route) != applied.end();
                  e.after = writeJson(nlohmann::json{{"change", c.change},
                                                     {"source", "configuration reload"},
                                                     {"applied", live ? "now" : "next start"}});
                  PURSER_TRY(services.audit.append(tx, e));
                }
                return {};
              },
              [](Result<void> r) {
                if (!r)
                  spdlog::error("reload: a route change was not audited: {}", r.error().message);
              });
        }
        size_t updated = 0;
        for (const auto& p : fresh->providers) {
          gateway::Provider* provider = gateway.provider(p.name);
          if (provider == nullptr) {
            spdlog::warn("reload: provider \"{}\" is new; it is used after a restart", p.name);
            continue;
          }
          provider->setConfiguredKeys(p.api_keys);
          if (provider->keysReplaced()) {
            spdlog::info("reload: provider \"{}\" keeps the keys set through the API", p.name);
          }
          ++updated;
        }
        spdlog::info(
            "reload: configuration re-read; keys of {} provider(s) updated, targets of {} "
            "route(s) in force (other changes take effect at the next start)",
            updated, applied.size());
      };
  hangups.async_wait(on_hangup);

  // Reservations whose lease ended are released every second (a crashed or vanished client
  // never holds budget for long).
  boost::asio::steady_timer lease_timer(workers.context(0));
  std::function<void(const boost::system::error_code&)> expire_leases =
      [&](const boost::system::error_code& ec) {
        if (ec) return;
        guardedTurn("ledger leases", [&] {
          for (const auto& id : meter.expireLeases()) {
            spdlog::warn("ledger: reservation {} expired unsettled; its hold was released", id);
          }
        });
        guardedTurn("denial summaries", [&] { api::auditClosedDenials(services); });
        lease_timer.expires_after(std::chrono::seconds(1));
        lease_timer.async_wait(expire_leases);
      };
  lease_timer.expires_after(std::chrono::seconds(1));
  lease_timer.async_wait(expire_leases);

  // The audit log's anchor follows its newest entry every few seconds, written off the I/O
  // workers (a file write and fsync).
  boost::asio::thread_pool housekeeping(1);
  MonoTime next_partition_check = clock.monotonic() + std::chrono::hours(1);  // housekeeping's
  boost::asio::steady_timer anchor_timer(workers.context(0));
  std::atomic<bool> anchoring{false};
  std::function<void(const boost::system::error_code&)> anchor_audit =
      [&](const boost::system::error_code& ec) {
        if (ec) return;
        if (!anchoring.exchange(true)) {
          boost::asio::post(housekeeping, [&] {
            guardedTurn("audit anchor", [&] {
              if (auto anchored = audit.anchor(*store); !anchored) {
                spdlog::error("audit: {}", anchored.error().message);
              }
            });
            // PostgreSQL: next month's partition of the usage events is made well before it
            // begins (every hour; the statement does nothing once it exists).
            if (shared_store && clock.monotonic() >= next_partition_check) {
              next_partition_check = clock.monotonic() + std::chrono::hours(1);
              guardedTurn("usage partitions", [&] {
                if (auto made = ledger::ensureUsagePartitions(*store, clock.now()); !made) {
                  next_partition_check = clock.monotonic() + std::chrono::minutes(1);
                  spdlog::warn("ledger: the usage events' partitions were not made: {}",
                               made.error().message);
                }
              });
            }
            anchoring = false;
          });
        }
        anchor_timer.expires_after(std::chrono::seconds(5));
        anchor_timer.async_wait(anchor_audit);
      };
  anchor_timer.expires_after(std::chrono::seconds(5));
  anchor_timer.async_wait(anchor_audit);

  // The fleet service meters and schedules on its own thread; its budget alerts are posted here.
  boost::asio::steady_timer fleet_timer(workers.context(0));
  std::function<void(const boost::system::error_code&)> fleet_tick =
      [&](const boost::system::error_code& ec) {
        if (ec) return;
        guardedTurn("fleet tick", [&] {
          if (auto f = current_fleet()) f->tick(workers.context(0).get_executor());
        });
        fleet_timer.expires_after(std::chrono::seconds(1));
        fleet_timer.async_wait(fleet_tick);
      };
  fleet_timer.expires_after(std::chrono::seconds(1));
  fleet_timer.async_wait(fleet_tick);

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
