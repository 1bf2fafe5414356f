// The fleet service: opening and closing, and the world it schedules in. See fleet_service_parts.h
// for its other files.
#include "workloads/fleet_service.h"

#include "workloads/executor_slots.h"
#include "workloads/fleet_service_parts.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "common/json.h"
#include "exec/command.h"
#include "identity/payer.h"
#include "ledger/price.h"

namespace purser::workloads {

namespace asio = boost::asio;
using fleet::Amount;
using fleet::Workload;

namespace {

const std::vector<store::Migration> kFleetMigrations = {
    {1, "fleet workloads, applied manifests and events",
     "CREATE TABLE fleet_workloads (name TEXT PRIMARY KEY, seq INTEGER NOT NULL,"
     " version INTEGER NOT NULL, state TEXT NOT NULL, tenant_id TEXT NOT NULL,"
     " team_id TEXT NOT NULL, record TEXT NOT NULL, updated_at TEXT NOT NULL);"
     "CREATE TABLE fleet_manifests (seq INTEGER PRIMARY KEY, applied_at TEXT NOT NULL,"
     " actor TEXT NOT NULL, file TEXT NOT NULL, text TEXT NOT NULL);"
     "CREATE TABLE fleet_events (id INTEGER PRIMARY KEY, at TEXT NOT NULL, kind TEXT NOT NULL,"
     " workload TEXT NOT NULL, cluster_queue TEXT NOT NULL, reason TEXT NOT NULL,"
     " message TEXT NOT NULL, by_workload TEXT NOT NULL, tenant_id TEXT NOT NULL,"
     " team_id TEXT NOT NULL, by_tenant_id TEXT NOT NULL);"
     "CREATE INDEX fleet_events_workload ON fleet_events (workload, id)"},
    // One row per GPU charge (keyed by its usage event), written in the charge's transaction.
    {2, "GPU utilisation recorded with GPU time",
     "CREATE TABLE gpu_utilisation (event_id TEXT PRIMARY KEY, workload TEXT NOT NULL,"
     " tenant_id TEXT NOT NULL, team_id TEXT NOT NULL, flavor TEXT NOT NULL,"
     " from_ms INTEGER NOT NULL, at_ms INTEGER NOT NULL, gpu_ms INTEGER NOT NULL,"
     " placed_gpu_ms INTEGER NOT NULL, observed_gpu_ms INTEGER NOT NULL,"
     " busy_gpu_ms INTEGER NOT NULL);"
     "CREATE INDEX gpu_utilisation_at ON gpu_utilisation (at_ms);"
     "CREATE INDEX gpu_utilisation_workload ON gpu_utilisation (workload, at_ms)"},
    // The account each team's local pods run as (uid = gid), made at its first pod.
    {3, "local pods' accounts",
     "CREATE TABLE fleet_accounts (team_id TEXT PRIMARY KEY, uid INTEGER NOT NULL UNIQUE,"
     " created_at TEXT NOT NULL)"},
    // Each configured manifest file's text as it was at a start (a row when it changed), so that
    // a queue removed from the files while workloads are admitted in it can be kept terminating.
    {4, "configured manifests as they were",
     "CREATE TABLE fleet_configured_manifests (seq INTEGER PRIMARY KEY, file TEXT NOT NULL,"
     " text TEXT NOT NULL, seen_at TEXT NOT NULL)"},
};

}  // namespace

const std::vector<store::Migration>& fleetMigrations() { return kFleetMigrations; }

// --- Opening and closing ------------------------------------------------------------------------

FleetService::FleetService(Deps deps, Options options, Executors executors)
    : d_(std::move(deps)),
      options_(std::move(options)),
      executors_(std::move(executors)),
      inventory_(options_.inventory, options_.inventory_from, options_.inventory_refresh),
      writes_(d_.store, d_.clock, options_.fence),
      gpu_({d_.clock, d_.ids, d_.directory, d_.budget, d_.prices, d_.audit_alerts,
            d_.gpu_utilisation},
           options_.metering_interval),
      tenancy_(d_.directory, base_),
      pods_({[this](const std::string& name) { return executorNamed(name); },
             [this](const std::string& team) { return accountOf(team); },
             [this](std::string kind, const std::string& workload, std::string queue,
                    std::string reason, std::string message) {
               noteEvent(std::move(kind), workload, std::move(queue), std::move(reason),
                         std::move(message), "");
             },
             d_.served},
            {options_.termination_grace, options_.log_tail_bytes, options_.installation,
             options_.flavor_executors}) {}

Result<std::unique_ptr<FleetService>> FleetService::open(Deps deps, Options options,
                                                         Executors executors) {
  for (const auto& [flavor, name] : options.flavor_executors) {
    if (executors.count(name) == 0) {
      return fail(invalidArgument(
          fmt::format("ResourceFlavor {} is to run on executor \"{}\", which is not configured",
                      flavor, name)));
    }
  }
  std::unique_ptr<FleetService> s(
      new FleetService(std::move(deps), std::move(options), std::move(executors)));
  PURSER_TRY(s->load());
  s->startThread();
  return s;
}

void FleetService::stop() {
  closing_ = true;
  if (!thread_.joinable()) return;
  asio::post(context_, [this] {
    // Pods still draining get their signal now: a drain cut short beats a pod left running that
    // no record will adopt after a restart (its workload has ended).
    pods_.signalAll();
    timer_.cancel();
    work_.reset();
    context_.stop();  // handlers still queued (calls, nudges) are dropped with it
  });
  thread_.join();
}

FleetService::~FleetService() {
  stop();
  executors_.clear();  // their threads end before the io_context they nudge goes
}

void FleetService::nudge() {
  if (closing_ || nudged_.exchange(true)) return;
  asio::post(context_, [this] {
    nudged_ = false;
    pollPods();
    if (auto write = schedule()) writes_.enqueue(std::move(*write), nullptr);
  });
}

void FleetService::startThread() {
  arm();
  thread_ = std::thread([this] {
    while (true) {
      try {
        context_.run();
        return;
      } catch (const std::exception& e) {
        // A bug in one turn must not stop the fleet: log it and go on.
        spdlog::error("fleet: a turn failed: {}", e.what());
      }
    }
  });
}

void FleetService::arm() {
  timer_.expires_after(options_.poll_interval);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    tick();
    arm();
  });
}

Result<void> FleetService::load() {
  PURSER_TRY(d_.store.migrate("fleet", kFleetMigrations));
  for (const auto& [file, text] : options_.manifests) {
    auto set = PURSER_TRY_VALUE(fleet::parseManifests(text, file));
    {
      std::lock_guard lock(shared_mu_);
      for (auto& w : set.warnings) warnings_.push_back(w);
    }
    merge(base_, std::move(set));
  }
  // What was applied through the API, in order, then the workloads.
  store::Rows manifests, records, configured;
  PURSER_TRY(d_.store.read([&](store::Tx& tx) -> Result<void> {
    manifests = PURSER_TRY_VALUE(tx.query("SELECT file, text FROM fleet_manifests ORDER BY seq"));
    configured = PURSER_TRY_VALUE(
        tx.query("SELECT file, text FROM fleet_configured_manifests ORDER BY seq"));
    records = PURSER_TRY_VALUE(
        tx.query("SELECT record FROM fleet_workloads WHERE state NOT IN ('finished', "
                 "'succeeded', 'failed') ORDER BY seq"));
    for (const auto& row : PURSER_TRY_VALUE(tx.query("SELECT team_id, uid FROM fleet_accounts"))) {
      accounts_[row.getText(0)] = row.getInt(1);
    }
    auto max_seq = PURSER_TRY_VALUE(tx.query("SELECT MAX(seq) FROM fleet_workloads"));
    if (!max_seq.empty() && std::holds_alternative<int64_t>(max_seq[0].at(0))) {
      next_seq_ = max_seq[0].getInt(0) + 1;
    }
    return {};
  }));
  for (const auto& row : manifests) {
    auto set = PURSER_TRY_VALUE(fleet::parseManifests(row.getText(1), row.getText(0)));
    merge(base_, std::move(set));
  }
  for (const auto& row : records) {
    Record r = PURSER_TRY_VALUE(recordFrom(row.getText(0)));
    records_[r.spec.name] = std::move(r);
  }
  // Queues the files no longer name but live workloads are in: kept, terminating, from what the
  // files said before (and what was applied since).
  {
    fleet::ManifestSet before;
    std::map<std::string, std::string> last_text;  // file -> its text at the last start
    for (const auto& row : configured) {
      if (auto set = fleet::parseManifests(row.getText(1), row.getText(0))) {
        merge(before, std::move(*set));
      }
      last_text[row.getText(0)] = row.getText(1);
    }
    for (const auto& row : manifests) {
      if (auto set = fleet::parseManifests(row.getText(1), row.getText(0))) {
        merge(before, std::move(*set));
      }
    }
    keepTerminating(before);
    // This start's files, where they changed.
    std::vector<std::pair<std::string, std::string>> changed;
    for (const auto& [file, text] : options_.manifests) {
      auto it = last_text.find(file);
      if (it == last_text.end() || it->second != text) changed.emplace_back(file, text);
    }
    if (!changed.empty()) {
      const std::string at = formatRfc3339(d_.clock.now());
      PURSER_TRY(writes_.writeNow([&](store::Tx& tx) -> Result<void> {
        for (const auto& [file, text] : changed) {
          PURSER_TRY(tx.exec(
              "INSERT INTO fleet_configured_manifests (file, text, seen_at) VALUES ($1, $2, $3)",
              {file, text, at}));
        }
        return {};
      }));
    }
  }
  if (inventory_.live()) options_.inventory = readInventory();
  Built built = PURSER_TRY_VALUE(rebuild(worldOf(base_)));
  engine_ = std::move(built.engine);
  placer_ = std::move(built.placer);
  pods_.adopt(records_);
  auto write = schedule();
  if (write) PURSER_TRY(writes_.writeNow(std::move(*write)));
  spdlog::info("fleet: {} ClusterQueue(s), {} workload(s) restored", base_.cluster_queues.size(),
               records_.size());
  return {};
}

// --- The world
// ------------------------------------------------------------------------------------

// The manifests' objects, with every team as a namespace labelled with its name and tenant.
fleet::World FleetService::worldOf(const fleet::ManifestSet& set) const {
  fleet::World w = fleet::toWorld(set);
  for (const auto& team : d_.directory.teams()) {
    const std::string ns = namespaceOf(team.tenant_id, team.name);
    w.namespaces[ns] = tenancy_.labelsOf(ns, team.tenant_id);
  }
  for (const auto& [name, r] : records_) {
    w.namespaces[r.spec.namespace_].emplace("kubernetes.io/metadata.name", r.spec.namespace_);
  }
  return w;
}

std::string FleetService::owningTenant(const std::string& name) const {
  return tenancy_.owningTenant(name);
}

std::string FleetService::namespaceOf(const std::string& tenant_id, const std::string& name) const {
  return tenancy_.namespaceOf(tenant_id, name);
}

std::string FleetService::shown(std::string text) { return shownText(std::move(text)); }

void FleetService::ensureNamespace(const std::string& ns, const std::string& tenant_id) {
  if (!engine_->hasNamespace(ns)) engine_->setNamespace(ns, tenancy_.labelsOf(ns, tenant_id));
}

}  // namespace purser::workloads
