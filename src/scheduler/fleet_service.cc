#include "scheduler/fleet_service.h"

#include "scheduler/executor_slots.h"

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

namespace purser::scheduler {

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

constexpr const char* kGpu = "nvidia.com/gpu";
constexpr const char* kGpuModel = "gpu-hours";  // what GPU time is metered as in the ledger

bool requestsGpu(const Workload& w) {
  for (const auto& ps : w.pod_sets) {
    auto it = ps.requests.find(kGpu);
    if (it != ps.requests.end() && it->second > 0) return true;
  }
  return false;
}

// Queued in the engine: waiting for admission (held or not).
bool queued(const std::string& state) {
  return state == "pending" || state == "evicted" || state == "suspended";
}

template <typename T, typename Key>
void upsert(std::vector<T>& into, std::vector<T> from, Key key) {
  for (auto& x : from) {
    auto it = std::find_if(into.begin(), into.end(), [&](const T& y) { return key(y) == key(x); });
    if (it != into.end()) {
      *it = std::move(x);
    } else {
      into.push_back(std::move(x));
    }
  }
}

// Objects of `set` replace those of the same kind and name in `into`, or join them.
void merge(fleet::ManifestSet& into, fleet::ManifestSet set) {
  const auto byName = [](const auto& x) { return x.name; };
  upsert(into.flavors, std::move(set.flavors), byName);
  upsert(into.cohorts, std::move(set.cohorts), byName);
  upsert(into.cluster_queues, std::move(set.cluster_queues), byName);
  upsert(into.priority_classes, std::move(set.priority_classes), byName);
  upsert(into.local_queues, std::move(set.local_queues),
         [](const fleet::LocalQueue& q) { return q.namespace_ + "/" + q.name; });
  for (auto& [ns, labels] : set.namespaces) into.namespaces[ns] = std::move(labels);
}

// How a pod's end reads: "exited with code 3", "was killed by signal 9".
std::string endOf(const PodRun& p) {
  if (p.reason == "OOMKilled") {
    return fmt::format("was killed for going over its memory limit (OOMKilled, exit code {})",
                       p.exit_code.value_or(137));
  }
  if (p.signal) return fmt::format("was ended by signal {}", *p.signal);
  return fmt::format("exited with code {}", p.exit_code.value_or(-1));
}

}  // namespace

const std::vector<store::Migration>& fleetMigrations() { return kFleetMigrations; }

// --- Opening and closing ------------------------------------------------------------------------

FleetService::FleetService(Deps deps, Options options, Executors executors)
    : d_(std::move(deps)),
      options_(std::move(options)),
      executors_(std::move(executors)),
      configured_nodes_(options_.inventory) {}

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
    for (auto& s : stopping_) {
      if (s.signalled) continue;
      s.signalled = true;
      if (exec::Executor* e = executorNamed(s.executor)) {
        (void)e->stop(s.handle, options_.termination_grace);
      }
    }
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
    if (auto write = schedule()) enqueue(std::move(*write), nullptr);
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
      PURSER_TRY(d_.store.write(fenced([&](store::Tx& tx) -> Result<void> {
        for (const auto& [file, text] : changed) {
          PURSER_TRY(tx.exec(
              "INSERT INTO fleet_configured_manifests (file, text, seen_at) VALUES ($1, $2, $3)",
              {file, text, at}));
        }
        return {};
      })));
    }
  }
  if (!options_.inventory_from.empty()) {
    options_.inventory = gatherInventory();
    inventory_read_ms_ = nowMs();
  }
  Built built = PURSER_TRY_VALUE(rebuild(worldOf(base_)));
  engine_ = std::move(built.engine);
  placer_ = std::move(built.placer);
  adopt();
  auto write = schedule();
  if (write) PURSER_TRY(d_.store.write(fenced(std::move(*write))));
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
    w.namespaces[ns] = labelsOf(ns, team.tenant_id);
  }
  for (const auto& [name, r] : records_) {
    w.namespaces[r.spec.namespace_].emplace("kubernetes.io/metadata.name", r.spec.namespace_);
  }
  return w;
}

std::string FleetService::owningTenant(const std::string& name) const {
  if (auto given = base_.namespaces.find(name); given != base_.namespaces.end()) {
    if (auto t = given->second.find("purser.dev/tenant"); t != given->second.end()) {
      if (auto tenant = d_.directory.tenantByName(t->second)) return tenant->id;
    }
  }
  std::optional<identity::Team> first;
  for (const auto& team : d_.directory.teams()) {
    if (team.name != name) continue;
    if (!first || std::tie(team.created_at, team.id) < std::tie(first->created_at, first->id)) {
      first = team;
    }
  }
  return first ? first->tenant_id : std::string();
}

std::string FleetService::namespaceOf(const std::string& tenant_id, const std::string& name) const {
  if (tenant_id.empty() || name.find('@') != std::string::npos) return name;
  const std::string owner = owningTenant(name);
  return owner.empty() || owner == tenant_id ? name : name + "@" + tenant_id;
}

std::string FleetService::shown(std::string text) {
  constexpr size_t kIdLength = 26;  // a tenant id (common/id.h)
  size_t at = 0;
  while ((at = text.find('@', at)) != std::string::npos) {
    size_t end = at + 1;
    while (end < text.size() && std::isalnum(static_cast<unsigned char>(text[end]))) ++end;
    if (end - at - 1 == kIdLength) {
      text.erase(at, end - at);
    } else {
      at = end;
    }
  }
  return text;
}

// The labels of namespace `ns` of `tenant_id`'s team.
std::map<std::string, std::string> FleetService::labelsOf(const std::string& ns,
                                                          const std::string& tenant_id) const {
  std::map<std::string, std::string> labels = {{"kubernetes.io/metadata.name", ns}};
  if (auto tenant = d_.directory.tenant(tenant_id)) labels["purser.dev/tenant"] = tenant->name;
  // Labels from Namespace objects in the manifests win.
  auto given = base_.namespaces.find(ns);
  if (given != base_.namespaces.end()) {
    for (const auto& [k, v] : given->second) labels[k] = v;
  }
  return labels;
}

void FleetService::ensureNamespace(const std::string& ns, const std::string& tenant_id) {
  if (!engine_->hasNamespace(ns)) engine_->setNamespace(ns, labelsOf(ns, tenant_id));
}

// --- The inventory
// ---------------------------------------------------------------------------------

namespace {

// Everything placement reads of a node, to tell whether an inventory changed.
std::string inventoryKey(const std::vector<fleet::InventoryNode>& nodes) {
  std::string key;
  for (const auto& n : nodes) {
    key += fmt::format("{}|{}|{}|{}|{}|", n.name, n.cpu_milli, n.memory_mib, n.rack, n.block);
    for (const auto& [k, v] : n.labels) key += fmt::format("{}={};", k, v);
    for (const auto& t : n.taints) key += fmt::format("{}={}:{};", t.key, t.value, t.effect);
    for (const auto& g : n.gpus) {
      key += fmt::format("[{} {} {} {} {} {} {}]", g.index, g.uuid, g.model, g.memory_mib, g.numa,
                         g.nvlink_domain, g.mig_capable);
    }
    key += '\n';
  }
  return key;
}

}  // namespace

std::vector<fleet::InventoryNode> FleetService::gatherInventory() {
  std::vector<fleet::InventoryNode> out = configured_nodes_;
  std::set<std::string> names;
  for (const auto& n : out) names.insert(n.name);
  const auto warnOnce = [&](const std::string& what) {
    if (inventory_warned_.insert(what).second) spdlog::warn("fleet: inventory: {}", what);
  };
  for (const auto& name : options_.inventory_from) {
    exec::Executor* e = executorNamed(name);
    auto reported = e == nullptr ? std::nullopt : e->nodes();
    if (!reported) continue;
    if (!*reported) {
      warnOnce(fmt::format("{}: {}", name, reported->error().message));
      continue;
    }
    for (auto& n : **reported) {
      if (auto valid = fleet::validateInventory({n}); !valid) {
        warnOnce(fmt::format("{} node left out: {}", name, valid.error().message));
        continue;
      }
      if (!names.insert(n.name).second) {
        warnOnce(fmt::format("{} node \"{}\" left out: a node of that name is listed before it",
                             name, n.name));
        continue;
      }
      out.push_back(std::move(n));
    }
  }
  // Nodes that admitted work is placed on stay until it is gone.
  std::set<std::string> used;
  for (const auto& [name, r] : records_) {
    if (!holdsQuota(r.state) || !r.admission) continue;
    for (const auto& ps : r.admission->pod_sets) {
      for (const auto& p : ps.placements) used.insert(p.node);
    }
  }
  for (const auto& n : options_.inventory) {
    if (used.count(n.name) == 0 || names.count(n.name) != 0) continue;
    fleet::InventoryNode kept = n;
    const bool tainted = std::any_of(kept.taints.begin(), kept.taints.end(), [](const auto& t) {
      return t.key == "node.kubernetes.io/unreachable";
    });
    if (!tainted) kept.taints.push_back({"node.kubernetes.io/unreachable", "", "NoSchedule"});
    names.insert(kept.name);
    out.push_back(std::move(kept));
  }
  return out;
}

// Reads the engines' nodes again; a changed inventory gets a new engine holding every live
// workload where it is (if it cannot, the old inventory stays and the reason is logged).
void FleetService::refreshInventory() {
  inventory_read_ms_ = nowMs();
  std::vector<fleet::InventoryNode> fresh = gatherInventory();
  if (inventoryKey(fresh) == inventoryKey(options_.inventory)) return;
  std::vector<fleet::InventoryNode> old = std::move(options_.inventory);
  options_.inventory = std::move(fresh);
  auto built = rebuild(worldOf(base_));
  if (!built) {
    spdlog::warn("fleet: the new inventory was not taken: {}", built.error().message);
    options_.inventory = std::move(old);
    return;
  }
  spdlog::info("fleet: inventory now {} node(s)", options_.inventory.size());
  engine_ = std::move(built->engine);
  placer_ = std::move(built->placer);
  for (const auto& [name, r] : records_) dirty_.insert(name);
}

// A new engine over `world` holding every live workload: admitted ones keep their quota.
Result<void> FleetService::checkPriorityGrant(const Record& r) const {
  if (r.tenant_id.empty()) return {};
  const auto tenant = d_.directory.tenant(r.tenant_id);
  if (!tenant) return {};
  const identity::PriorityGrant& g = tenant->grant;
  int64_t value = r.spec.priority;
  std::string what = fmt::format("priority {}", r.spec.priority);
  if (!r.spec.priority_class.empty()) {
    const auto& classes = base_.priority_classes;
    auto c = std::find_if(classes.begin(), classes.end(),
                          [&](const auto& pc) { return pc.name == r.spec.priority_class; });
    if (c == classes.end()) return {};  // the engine refuses a class it does not know
    if (!g.classes.empty() &&
        std::find(g.classes.begin(), g.classes.end(), c->name) == g.classes.end()) {
      return fail(Error(ErrorCode::kPermissionDenied,
                        fmt::format("tenant {} may use the WorkloadPriorityClasses {} (its "
                                    "priority grant, which the platform admin sets), not {}",
                                    tenant->name, fmt::join(g.classes, ", "), c->name)));
    }
    value = c->value;
    what = fmt::format("WorkloadPriorityClass {} is {}", c->name, c->value);
  }
  if (value > g.max_workload_priority) {
    return fail(Error(ErrorCode::kPermissionDenied,
                      fmt::format("tenant {}'s workloads may have priorities up to {} (its "
                                  "priority grant, which the platform admin sets); {}",
                                  tenant->name, g.max_workload_priority, what)));
  }
  return {};
}

void FleetService::keepTerminating(const fleet::ManifestSet& before) {
  const auto hasQueue = [&](const std::string& name) {
    return std::any_of(base_.cluster_queues.begin(), base_.cluster_queues.end(),
                       [&](const auto& q) { return q.name == name; });
  };
  std::map<std::string, std::pair<int, int>> in;  // ClusterQueue -> admitted, pending
  for (const auto& [name, r] : records_) {
    const bool admitted = holdsQuota(r.state) && r.admission.has_value();
    if (!admitted && !queued(r.state)) continue;
    const std::string cq = admitted ? r.admission->cluster_queue : r.spec.cluster_queue;
    if (cq.empty() || hasQueue(cq)) continue;
    auto& [a, p] = in[cq];
    ++(admitted ? a : p);
    // Its LocalQueue too, where the files dropped it.
    const bool local = std::any_of(
        base_.local_queues.begin(), base_.local_queues.end(), [&](const fleet::LocalQueue& q) {
          return q.namespace_ == r.spec.namespace_ && q.name == r.spec.local_queue;
        });
    if (!local) {
      for (const auto& q : before.local_queues) {
        if (q.namespace_ == r.spec.namespace_ && q.name == r.spec.local_queue) {
          base_.local_queues.push_back(q);
        }
      }
    }
  }
  for (const auto& [cq, counts] : in) {
    auto old = std::find_if(before.cluster_queues.begin(), before.cluster_queues.end(),
                            [&](const auto& q) { return q.name == cq; });
    if (old == before.cluster_queues.end()) continue;  // never known: rebuild() says so
    fleet::ClusterQueue q = *old;
    q.stop_policy = fleet::StopPolicy::kHold;  // admits nothing new
    for (const auto& g : q.resource_groups) {
      for (const auto& f : g.flavors) {
        const bool known = std::any_of(base_.flavors.begin(), base_.flavors.end(),
                                       [&](const auto& x) { return x.name == f.flavor; });
        if (known) continue;
        for (const auto& x : before.flavors) {
          if (x.name == f.flavor) base_.flavors.push_back(x);
        }
      }
    }
    base_.cluster_queues.push_back(std::move(q));
    terminating_.insert(cq);
    const std::string warning = fmt::format(
        "ClusterQueue {} is no longer in the manifests, but {} workload(s) are admitted in it "
        "and {} wait in it: it is terminating — it admits nothing new, and it goes once none "
        "is left (pending ones wait until it is configured again or they are deleted)",
        cq, counts.first, counts.second);
    std::lock_guard lock(shared_mu_);
    warnings_.push_back(warning);
  }
}

std::vector<std::string> FleetService::warnings() const {
  std::lock_guard lock(shared_mu_);
  return warnings_;
}

void FleetService::endTerminated() {
  std::vector<std::string> gone;
  for (const std::string& cq : terminating_) {
    const bool used = std::any_of(records_.begin(), records_.end(), [&](const auto& kv) {
      const Record& r = kv.second;
      if (holdsQuota(r.state) && r.admission) return r.admission->cluster_queue == cq;
      return queued(r.state) && r.spec.cluster_queue == cq;
    });
    if (!used) gone.push_back(cq);
  }
  if (gone.empty()) return;
  fleet::ManifestSet next = base_;
  for (const std::string& cq : gone) {
    std::erase_if(next.cluster_queues, [&](const auto& q) { return q.name == cq; });
    std::erase_if(next.local_queues,
                  [&](const fleet::LocalQueue& q) { return q.cluster_queue == cq; });
  }
  auto fresh = rebuild(worldOf(next));
  if (!fresh) {
    spdlog::warn("fleet: terminating ClusterQueue(s) not removed yet: {}", fresh.error().message);
    return;
  }
  base_ = std::move(next);
  engine_ = std::move(fresh->engine);
  placer_ = std::move(fresh->placer);
  for (const std::string& cq : gone) {
    terminating_.erase(cq);
    spdlog::info("fleet: ClusterQueue {} has no workloads left and is removed", cq);
    std::lock_guard lock(shared_mu_);
    std::erase_if(warnings_, [&](const std::string& w) {
      return w.starts_with("ClusterQueue " + cq + " is no longer in the manifests");
    });
  }
  for (const auto& [name, r] : records_) dirty_.insert(name);
  if (auto write = schedule()) enqueue(std::move(*write), nullptr);
}

Result<FleetService::Built> FleetService::rebuild(fleet::World world) {
  fleet::EngineOptions eo;
  eo.mode = options_.mode;
  // Within a tenant, Kueue's rules; across tenants, only a priority the victim's tenant could
  // never give its own work (its grant's maximum) takes its place.
  eo.may_preempt = [this](const Workload& pre, const Workload& victim) {
    auto p = records_.find(pre.name);
    auto v = records_.find(victim.name);
    if (p == records_.end() || v == records_.end()) return true;
    if (p->second.tenant_id == v->second.tenant_id || v->second.tenant_id.empty()) return true;
    const auto tenant = d_.directory.tenant(v->second.tenant_id);
    const int64_t reach = tenant ? tenant->grant.max_workload_priority : 0;
    return pre.priority > reach;
  };
  // Each engine places on its own copy of the inventory, refilled from the admitted workloads
  // below, so a rebuild that fails leaves the running engine and its placements as they were.
  std::shared_ptr<fleet::Placer> placer;
  if (!options_.inventory.empty()) {
    placer =
        PURSER_TRY_VALUE(fleet::Placer::create(options_.inventory, options_.policy, options_.seed));
    eo.placement = fleet::placementHook(placer, world.flavors);
  }
  // An executor's room for pods is admitted against too (fleet.local.max_pods).
  if (!options_.executor_slots.empty()) {
    eo.placement = std::make_shared<ExecutorSlots>(eo.placement, options_.executor_slots,
                                                   options_.flavor_executors);
  }
  eo.fair_sharing = false;
  for (const auto& cq : world.cluster_queues) {
    if (cq.fair_weight_milli != 1000) eo.fair_sharing = true;
  }
  auto engine = PURSER_TRY_VALUE(fleet::Engine::create(std::move(world), eo));
  std::vector<const Record*> order;
  for (const auto& [name, r] : records_) order.push_back(&r);
  std::sort(order.begin(), order.end(),
            [](const Record* a, const Record* b) { return a->seq < b->seq; });
  for (const Record* r : order) {
    if (!holdsQuota(r->state)) continue;
    Workload w = r->spec;
    w.admission = r->admission;
    w.admitted_ms = r->admitted_ms;
    auto added = engine->addAdmitted(std::move(w));
    if (!added) {
      return fail(Error(ErrorCode::kFailedPrecondition,
                        fmt::format("admitted workload \"{}\" would lose its quota: {}",
                                    r->spec.name, added.error().message)));
    }
  }
  for (const Record* r : order) {
    if (!queued(r->state)) continue;
    auto added = engine->submit(r->spec);
    if (!added) {
      return fail(Error(ErrorCode::kFailedPrecondition,
                        fmt::format("pending workload \"{}\" would have no queue: {}", r->spec.name,
                                    added.error().message)));
    }
    if (!r->hold.empty()) (void)engine->hold(r->spec.name, "BudgetExhausted", r->hold);
  }
  return Built{std::move(engine), std::move(placer)};
}

// --- GPU time: holds and metering
// -------------------------------------------------------------------

int64_t FleetService::nowMs() const { return unixMillis(d_.clock.now()); }

ledger::Charged FleetService::chargedOf(const Record& r) const {
  ledger::Charged c;
  c.tenant_id = r.tenant_id;
  c.team_id = r.team_id;
  (r.owner_kind == "service_account" ? c.service_account_id : c.user_id) = r.owner_id;
  // A workload submitted with a derived key is charged to the keys above it too.
  return identity::payerOf(std::move(c), r.key_id, d_.directory).charged;
}

// Why `r` may not start GPU work now (a hard wallet in its chain has nothing left); empty if
// it may.
// How far ahead GPU time is held: two metering intervals and the tick's slack, so the hold
// taken at one metering covers everything up to the next.
std::chrono::milliseconds FleetService::lookahead() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(options_.metering_interval) * 2 +
         std::chrono::seconds(2);
}

// What `r`'s GPUs cost over the lookahead: at its admitted flavors' prices, or, while pending,
// at the dearest priced flavor its ClusterQueue offers GPUs in (zero when none is priced).
Money FleetService::lookaheadCost(const Record& r) const {
  Money total;
  const auto add = [&](const Money* price, Amount gpu_milli) {
    if (price == nullptr || gpu_milli <= 0) return;
    auto part = ledger::gpuCost(*price, gpu_milli, lookahead(), Rounding::kCeil);
    total = total.add(part.value_or(Money::max())).value_or(Money::max());
  };
  if (holdsQuota(r.state) && r.admission) {
    for (const auto& ps : r.admission->pod_sets) {
      auto use = ps.usage.find(kGpu);
      auto f = ps.flavors.find(kGpu);
      if (use != ps.usage.end() && f != ps.flavors.end())
        add(d_.prices.gpu(f->second), use->second);
    }
    return total;
  }
  Amount gpu_milli = 0;
  for (const auto& ps : r.spec.pod_sets) {
    auto g = ps.requests.find(kGpu);
    if (g != ps.requests.end()) gpu_milli += g->second * ps.count;
  }
  if (gpu_milli == 0) return total;
  auto st = engine_->status(r.spec.name);
  const std::string cq = st ? st->cluster_queue : std::string();
  const Money* dearest = nullptr;
  for (const auto& q : base_.cluster_queues) {
    if (q.name != cq) continue;
    for (const auto& group : q.resource_groups) {
      if (std::find(group.covered.begin(), group.covered.end(), kGpu) == group.covered.end()) {
        continue;
      }
      for (const auto& fq : group.flavors) {
        const Money* price = d_.prices.gpu(fq.flavor);
        if (price != nullptr && (dearest == nullptr || *dearest < *price)) dearest = price;
      }
    }
  }
  add(dearest, gpu_milli);
  return total;
}

// Why a GPU workload of `r`'s owner may not start (or go on): a hard wallet in its chain that
// cannot hold its next stretch of GPU time. Empty when it may.
std::string FleetService::budgetHold(const Record& r) const {
  if (r.tenant_id.empty() || !requestsGpu(r.spec)) return {};
  const Money need = lookaheadCost(r);
  for (const auto& id : d_.wallets.chain(chargedOf(r), kGpuModel)) {
    auto st = d_.wallets.status(id);
    if (!st || !st->spec.hard) continue;
    if (!st->remaining.isZero() && !(st->remaining < need)) continue;
    return fmt::format(
        "the GPU budget is used up: wallet {} ({} {}) has {} of {} left{}, and this workload's "
        "next {} s of GPU time cost {}; it waits until the wallet is raised or its period "
        "resets",
        id, ledger::scopeKindName(st->spec.scope.kind), st->spec.scope.id, st->remaining.toString(),
        st->spec.limit.toString(),
        st->spec.period == ledger::Period::kNone
            ? std::string()
            : fmt::format(" until {}", formatRfc3339(st->window.end)),
        lookahead().count() / 1000, need.toString());
  }
  return {};
}

// Holds `r`'s next stretch of GPU time on its wallet chain; false when a hard wallet cannot.
bool FleetService::holdGpu(Record& r) {
  releaseGpu(r);
  if (r.tenant_id.empty() || !requestsGpu(r.spec)) return true;
  const Money need = lookaheadCost(r);
  if (need.isZero()) return true;
  ledger::ReserveRequest q;
  q.event_id = fmt::format("gpu-hold:{}:{}", r.spec.name, ++hold_seq_);
  q.wallet_ids = d_.wallets.chain(chargedOf(r), kGpuModel);
  q.amount = need;
  q.lease = lookahead() * 3;
  auto held = d_.wallets.reserve(q);
  if (!held) {
    if (held.error().code == ErrorCode::kResourceExhausted) return false;
    spdlog::error("fleet: GPU time of {} not held: {}", r.spec.name, held.error().message);
    return true;  // not the budget's doing: metering still charges what runs
  }
  r.gpu_hold = q.event_id;
  return true;
}

void FleetService::releaseGpu(Record& r) {
  if (r.gpu_hold.empty()) return;
  (void)d_.wallets.release(r.gpu_hold);
  r.gpu_hold.clear();
}

// Sends an admitted workload whose GPU time can no longer be held back to its queue, held.
void FleetService::stopForBudget(const std::string& name) {
  auto it = records_.find(name);
  if (it == records_.end() || !holdsQuota(it->second.state)) return;
  Record& r = it->second;
  releaseGpu(r);
  std::string why = budgetHold(r);
  if (why.empty()) why = "the GPU budget cannot hold this workload's next stretch of GPU time";
  if (!engine_->stop(name, "BudgetExhausted", why)) return;
  (void)engine_->hold(name, "BudgetExhausted", why);
  r.hold = why;
}

// Charges `r`'s GPU time up to `now_ms`; the returned write records it.
std::optional<store::TxFn> FleetService::meter(Record& r, int64_t now_ms) {
  if (!holdsQuota(r.state) || !r.admission) return std::nullopt;
  releaseGpu(r);  // the elapsed stretch is charged below; the caller holds the next
  // A workload that runs pods is charged from the moment they run, not from its admission.
  if (runsHere(r) && r.state == "admitted") {
    r.metered_until_ms = std::max(r.metered_until_ms, now_ms);
    sampling_.erase(r.spec.name);
    return std::nullopt;
  }
  const int64_t elapsed = now_ms - r.metered_until_ms;
  if (elapsed <= 0) return std::nullopt;
  // Its GPUs' utilisation up to the end of the stretch, recorded with the charge below (and kept
  // for the next attempt when this one charges nothing).
  sample(r, now_ms, percentNow());
  Money cost;
  Amount gpu_milli = 0;
  std::string flavor;
  for (const auto& ps : r.admission->pod_sets) {
    auto use = ps.usage.find(kGpu);
    if (use == ps.usage.end() || use->second <= 0) continue;
    auto f = ps.flavors.find(kGpu);
    if (f == ps.flavors.end()) continue;
    gpu_milli += use->second;
    if (flavor.empty()) flavor = f->second;
    const Money* price = d_.prices.gpu(f->second);
    if (price == nullptr) continue;
    auto part = ledger::gpuCost(*price, use->second, std::chrono::milliseconds(elapsed),
                                Rounding::kHalfEven);
    if (!part) {
      // Left unmetered: the next attempt charges the whole stretch.
      spdlog::error("fleet: GPU time of {} not priced: {}", r.spec.name, part.error().message);
      return std::nullopt;
    }
    cost = cost.add(*part).value_or(Money::max());
  }
  if (gpu_milli == 0 || r.tenant_id.empty()) {
    r.metered_until_ms = now_ms;  // nothing to charge, or nobody to charge it to
    if (auto it = sampling_.find(r.spec.name); it != sampling_.end()) it->second.unmetered = {};
    return std::nullopt;
  }
  ledger::UsageEvent e;
  e.id = d_.ids.next();
  e.at = SystemTime(std::chrono::milliseconds(now_ms));
  e.tenant_id = r.tenant_id;
  e.team_id = r.team_id;
  if (r.owner_kind == "service_account") {
    e.service_account_id = r.owner_id;
  } else {
    e.user_id = r.owner_id;
  }
  e.key_id = r.key_id;
  e.session_id = shown(r.spec.name);
  e.route = flavor;
  e.provider = "fleet";
  e.model = kGpuModel;
  e.cost = cost;
  e.latency_ms = elapsed;
  e.status = 200;
  auto charged = d_.meter.charge(e, d_.wallets.chain(chargedOf(r), kGpuModel));
  if (!charged) {
    spdlog::error("fleet: GPU time of {} not charged: {}", r.spec.name, charged.error().message);
    return std::nullopt;
  }
  // What its GPUs did in the stretch, in GPU-milliseconds, beside the GPU-hours charged.
  fleet::GpuTime used;
  if (auto it = sampling_.find(r.spec.name); it != sampling_.end()) {
    used = std::exchange(it->second.unmetered, {});
  }
  const auto gpuMs = [](double milli_ms) -> int64_t {
    if (!std::isfinite(milli_ms) || milli_ms <= 0) return 0;
    return static_cast<int64_t>(std::llround(milli_ms / 1000.0));
  };
  const int64_t placed_ms = gpuMs(static_cast<double>(used.placed));
  const int64_t observed_ms =
      std::min<int64_t>(gpuMs(static_cast<double>(used.observed)), placed_ms);
  const int64_t busy_ms = std::min<int64_t>(gpuMs(used.busy), observed_ms);
  store::TxFn write =
      [charge = std::move(charged->write), event_id = e.id, workload = r.spec.name,
       tenant = r.tenant_id, team = r.team_id, flavor, from_ms = r.metered_until_ms, now_ms,
       gpu_ms = gpuMs(static_cast<double>(gpu_milli) * static_cast<double>(elapsed)), placed_ms,
       observed_ms, busy_ms](store::Tx& tx) -> Result<void> {
    PURSER_TRY(charge(tx));
    PURSER_TRY(tx.exec(
        "INSERT INTO gpu_utilisation (event_id, workload, tenant_id, team_id, flavor, from_ms, "
        "at_ms, gpu_ms, placed_gpu_ms, observed_gpu_ms, busy_gpu_ms) VALUES ($1, $2, $3, $4, $5, "
        "$6, $7, $8, $9, $10, $11) ON CONFLICT (event_id) DO NOTHING",
        {event_id, workload, tenant, team, flavor, from_ms, now_ms, gpu_ms, placed_ms, observed_ms,
         busy_ms}));
    return {};
  };
  r.metered_until_ms = now_ms;
  r.charged = r.charged.add(charged->charged).value_or(Money::max());
  if (charged->alerts.empty()) return write;
  {
    std::lock_guard lock(shared_mu_);
    alerts_.emplace_back(r.tenant_id, charged->alerts);
  }
  return [write = std::move(write), alerts = charged->alerts, tenant = r.tenant_id,
          audit = d_.audit_alerts](store::Tx& tx) -> Result<void> {
    PURSER_TRY(write(tx));
    return audit ? audit(tx, alerts, tenant) : Result<void>{};
  };
}

// --- GPU utilisation
// ----------------------------------------------------------------------------

// Charged for its GPUs now: as meter() charges it.
bool FleetService::charging(const Record& r) const {
  return holdsQuota(r.state) && r.admission && !(r.state == "admitted" && runsHere(r));
}

fleet::PercentOf FleetService::percentNow() const {
  if (d_.gpu_utilisation == nullptr) return nullptr;
  using Key = std::pair<std::string, int>;
  auto cache = std::make_shared<std::map<Key, std::optional<double>>>();
  const fleet::GpuUtilisation* source = d_.gpu_utilisation;
  return [cache, source](const std::string& node, int gpu) -> std::optional<double> {
    Key key(node, gpu);
    if (auto it = cache->find(key); it != cache->end()) return it->second;
    std::optional<double> percent;
    if (auto reading = source->reading(node, gpu)) {
      percent = fleet::usablePercent(reading->util_percent);
    }
    cache->emplace(std::move(key), percent);
    return percent;
  };
}

std::optional<fleet::GpuReading> FleetService::gpuReading(const std::string& node,
                                                          int gpu_index) const {
  if (d_.gpu_utilisation == nullptr) return std::nullopt;
  auto reading = d_.gpu_utilisation->reading(node, gpu_index);
  if (!reading) return std::nullopt;
  auto usable = fleet::usablePercent(reading->util_percent);
  if (!usable) return std::nullopt;
  reading->util_percent = *usable;
  return reading;
}

void FleetService::sample(const Record& r, int64_t until_ms, const fleet::PercentOf& percent) {
  Sampling& s = sampling_[r.spec.name];
  const int64_t from = std::max(s.sampled_ms, r.metered_until_ms);
  if (until_ms <= from || !r.admission) return;
  std::vector<fleet::PodPlacement> placed;
  for (const auto& ps : r.admission->pod_sets) {
    placed.insert(placed.end(), ps.placements.begin(), ps.placements.end());
  }
  // Each stretch is read at its end: a reading holds from the sample before it (a second, at the
  // service's pace) to this one.
  const fleet::GpuTime t = fleet::gpuTimeOf(placed, until_ms - from, percent);
  s.unmetered += t;
  s.recent.add(until_ms, t);
  s.sampled_ms = until_ms;
}

void FleetService::sampleUtilisation() {
  for (auto it = sampling_.begin(); it != sampling_.end();) {
    const Record* r = find(it->first);
    if (r == nullptr || !charging(*r)) {
      it = sampling_.erase(it);
    } else {
      ++it;
    }
  }
  const int64_t now = nowMs();
  const fleet::PercentOf percent = percentNow();
  for (const auto& [name, r] : records_) {
    if (charging(r)) sample(r, now, percent);
  }
}

std::optional<LiveUtilisation> FleetService::utilisationOf(const std::string& name) const {
  const Record* r = find(name);
  if (r == nullptr || !charging(*r)) return std::nullopt;
  LiveUtilisation out;
  if (auto it = sampling_.find(name); it != sampling_.end()) {
    out.unmetered = it->second.unmetered;
    out.recent = it->second.recent.over(nowMs());
  }
  out.idle = fleet::isIdle(out.recent);
  return out;
}

void FleetService::noteEvent(std::string kind, const std::string& workload,
                             std::string cluster_queue, std::string reason, std::string message,
                             std::string by) {
  const Record* r = find(workload);
  const Record* b = by.empty() ? nullptr : find(by);
  new_events_.push_back({formatRfc3339(d_.clock.now()), std::move(kind), workload,
                         std::move(cluster_queue), std::move(reason), std::move(message),
                         std::move(by), r ? r->tenant_id : "", r ? r->team_id : "",
                         b ? b->tenant_id : ""});
}

const Record* FleetService::find(const std::string& name) const {
  auto it = records_.find(name);
  return it == records_.end() ? nullptr : &it->second;
}

// --- Scheduling and persistence -----------------------------------------------------------------

// Applies budget holds, runs the engine to a stable state, starts what was admitted, and brings
// the records up to date; returns the write that records every change (nullopt when nothing
// changed).
std::optional<store::TxFn> FleetService::schedule() {
  const int64_t now = nowMs();
  for (auto& [name, r] : records_) {
    if (!queued(r.state)) continue;
    std::string hold = budgetHold(r);
    if (hold == r.hold) continue;
    if (hold.empty()) {
      (void)engine_->release(name);
      noteEvent("Released", name, "", "BudgetAvailable", "the GPU budget has room again", "");
      r.state = r.preemptions > 0 ? "evicted" : "pending";
    } else {
      (void)engine_->hold(name, "BudgetExhausted", hold);
      noteEvent("Held", name, "", "BudgetExhausted", hold, "");
      r.state = "suspended";
    }
    r.hold = std::move(hold);
    dirty_.insert(name);
  }
  engine_->setTime(now);
  // Admission takes a hold on the wallets for the GPU time ahead; a workload whose hold fails
  // (a hard wallet raced below it) goes back, held, and the engine runs again.
  for (int round = 0; round < 8; ++round) {
    engine_->runUntilStable();
    std::vector<std::string> stops;
    processEvents(now, stops);
    if (stops.empty()) break;
    for (const auto& name : stops) stopForBudget(name);
  }
  // What was admitted starts once the pods it displaced are gone. (A start that fails ends its
  // workload, which leaves records_: the names are taken first.)
  std::vector<std::string> starting;
  for (auto& [name, r] : records_) {
    const bool running = std::any_of(r.pods.begin(), r.pods.end(),
                                     [](const PodRun& p) { return p.phase == "running"; });
    if (r.state == "admitted" && runsHere(r) && !running && !blocked(r)) {
      auto backoff = start_backoff_.find(name);
      if (backoff != start_backoff_.end() && now < backoff->second.first) continue;
      starting.push_back(name);
    }
  }
  for (const auto& name : starting) {
    auto it = records_.find(name);
    if (it == records_.end()) continue;
    startPods(it->second, now);
    it = records_.find(name);
    if (it == records_.end() || it->second.state != "admitted") start_backoff_.erase(name);
  }
  publishQueues();
  return flush();
}

void FleetService::processEvents(int64_t now, std::vector<std::string>& stops) {
  for (const fleet::Event& e : engine_->takeEvents()) {
    auto it = records_.find(e.workload);
    if (it == records_.end()) continue;
    Record& r = it->second;
    switch (e.kind) {
      case fleet::Event::Kind::kAdmitted: {
        auto st = engine_->status(e.workload);
        r.state = "admitted";
        r.reason.clear();
        r.message.clear();
        r.admission = st ? st->admission : std::nullopt;
        r.admitted_ms = now;
        r.metered_until_ms = now;
        noteEvent("Admitted", e.workload, e.cluster_queue, "QuotaReserved", "", "");
        if (!holdGpu(r)) stops.push_back(e.workload);
        break;
      }
      case fleet::Event::Kind::kPreempted:
        noteEvent("Preempted", e.workload, e.cluster_queue, e.reason, e.message, e.by);
        break;
      case fleet::Event::Kind::kEvicted: {
        if (auto tx = meter(r, now)) metering_.push_back(std::move(*tx));
        sampling_.erase(e.workload);
        stopPods(r, e.reason);
        const bool budget = e.reason == "BudgetExhausted";
        r.state = budget ? "suspended" : "evicted";
        r.reason = e.reason;
        r.message = e.message;
        r.admission.reset();
        if (!budget) ++r.preemptions;
        if (auto st = engine_->status(e.workload); st && st->queued_ms) {
          r.spec.queued_ms = st->queued_ms;
        }
        noteEvent("Evicted", e.workload, e.cluster_queue, e.reason, e.message, e.by);
        break;
      }
      default:
        break;
    }
    dirty_.insert(e.workload);
  }
}

// The write for everything changed since the last one.
namespace {

// A workload's row as one write records it.
struct WorkloadRow {
  std::string name, state, tenant_id, team_id, record;
  int64_t seq, version;
};

WorkloadRow rowOf(Record& r) {
  ++r.version;
  return {r.spec.name, r.state, r.tenant_id, r.team_id, recordText(r), r.seq, r.version};
}

Result<void> writeRow(store::Tx& tx, const WorkloadRow& r, const std::string& at) {
  // A write retried after a failure must not undo a newer one that landed since.
  PURSER_TRY(
      tx.exec("INSERT INTO fleet_workloads (name, seq, version, state, tenant_id, team_id, record, "
              "updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO UPDATE "
              "SET seq = excluded.seq, version = excluded.version, state = excluded.state, "
              "tenant_id = excluded.tenant_id, team_id = excluded.team_id, record = "
              "excluded.record, updated_at = excluded.updated_at WHERE excluded.seq > "
              "fleet_workloads.seq OR (excluded.seq = fleet_workloads.seq AND excluded.version > "
              "fleet_workloads.version)",
              {r.name, r.seq, r.version, r.state, r.tenant_id, r.team_id, r.record, at}));
  return {};
}

}  // namespace

std::optional<store::TxFn> FleetService::flush() {
  if (dirty_.empty() && new_events_.empty() && metering_.empty() && ended_.empty()) {
    return std::nullopt;
  }
  std::vector<WorkloadRow> rows;
  const std::string at = formatRfc3339(d_.clock.now());
  for (const auto& name : dirty_) {
    auto it = records_.find(name);
    if (it != records_.end()) rows.push_back(rowOf(it->second));
  }
  for (auto& r : ended_) rows.push_back(rowOf(r));
  dirty_.clear();
  ended_.clear();
  return [rows = std::move(rows), events = std::move(new_events_), metering = std::move(metering_),
          at](store::Tx& tx) -> Result<void> {
    for (const auto& m : metering) PURSER_TRY(m(tx));
    for (const auto& r : rows) PURSER_TRY(writeRow(tx, r, at));
    for (const auto& e : events) {
      PURSER_TRY(tx.exec(
          "INSERT INTO fleet_events (at, kind, workload, cluster_queue, reason, message, "
          "by_workload, tenant_id, team_id, by_tenant_id) VALUES ($1, $2, $3, $4, $5, $6, $7, "
          "$8, $9, $10)",
          {e.at, e.kind, e.workload, e.cluster_queue, e.reason, e.message, e.by, e.tenant_id,
           e.team_id, e.by_tenant_id}));
    }
    return {};
  };
}

// Enqueues `fn` now (so writes land in the order they were made); `done`, when given, learns
// when it is durable.
store::TxFn FleetService::fenced(store::TxFn fn) const {
  if (!options_.fence) return fn;
  return [fence = options_.fence, fn = std::move(fn)](store::Tx& tx) -> Result<void> {
    PURSER_TRY(fence(tx));
    return fn(tx);
  };
}

void FleetService::enqueue(store::TxFn fn, Done done) {
  // The retry keeps the write as it was made: enqueue() puts it behind the fence again.
  auto retry = std::make_shared<store::TxFn>(fn);
  d_.store.writeAsync(fenced(std::move(fn)), [this, done = std::move(done), retry](Result<void> r) {
    if (!r) {
      // Kept to be written again at the next tick; a newer write of the same workload wins
      // over it (versions), and its usage events and charges go with it.
      spdlog::error("fleet: a state change was not recorded (retrying): {}", r.error().message);
      std::lock_guard lock(shared_mu_);
      retries_.push_back(std::move(*retry));
    }
    if (done) done(std::move(r));
  });
}

void FleetService::publishQueues() {
  auto queues = engine_->queues();
  std::lock_guard lock(shared_mu_);
  queues_ = std::move(queues);
}

QueueSnapshot FleetService::queueSnapshot() const {
  std::lock_guard lock(shared_mu_);
  return queues_;
}

std::vector<std::pair<std::string, std::vector<ledger::Alert>>> FleetService::takeAlerts() {
  std::lock_guard lock(shared_mu_);
  return std::exchange(alerts_, {});
}

// Every poll interval: the pods' ends; every second: retried writes, GPU time that is due and
// the holds ahead of it.
void FleetService::tick() {
  takeFound();
  pollPods();
  const int64_t now = nowMs();
  // The directory changed (a tenant's priority grant, say): what waits is looked at again.
  if (const uint64_t g = d_.directory.generation(); g != directory_generation_) {
    directory_generation_ = g;
    engine_->reconsider();
    if (auto write = schedule()) enqueue(std::move(*write), nullptr);
  }
  if (now - last_tick_ms_ >= 1000 || now < last_tick_ms_) {
    last_tick_ms_ = now;
    std::vector<store::TxFn> retries;
    {
      std::lock_guard lock(shared_mu_);
      retries.swap(retries_);
    }
    for (auto& fn : retries) enqueue(std::move(fn), nullptr);
    const int64_t interval =
        std::chrono::duration_cast<std::chrono::milliseconds>(options_.metering_interval).count();
    sampleUtilisation();
    std::vector<std::string> stops;
    for (auto& [name, r] : records_) {
      if (!holdsQuota(r.state) || now - r.metered_until_ms < interval) continue;
      if (auto tx = meter(r, now)) metering_.push_back(std::move(*tx));
      if (!holdGpu(r)) stops.push_back(name);
      dirty_.insert(name);
    }
    for (const auto& name : stops) stopForBudget(name);
    overtime(now);
    if (!terminating_.empty()) endTerminated();
    joinServed();
    if (!options_.inventory_from.empty() &&
        now - inventory_read_ms_ >=
            std::chrono::duration_cast<std::chrono::milliseconds>(options_.inventory_refresh)
                .count()) {
      refreshInventory();
    }
  }
  if (auto write = schedule()) enqueue(std::move(*write), nullptr);
}

// A run past its workload's maximum execution time is stopped, and the workload fails (as Kueue
// deactivates it: it is not queued again).
void FleetService::overtime(int64_t now) {
  std::vector<std::string> over;
  for (const auto& [name, r] : records_) {
    if ((r.state == "running" || r.state == "unknown") && r.spec.max_execution_seconds > 0 &&
        now - r.started_ms >= r.spec.max_execution_seconds * 1000) {
      over.push_back(name);
    }
  }
  for (const auto& name : over) {
    Record& r = records_.at(name);
    stopPods(r, "MaximumExecutionTimeExceeded");
    endRun(r, /*failed=*/true, "MaximumExecutionTimeExceeded",
           fmt::format("it ran past its maximum execution time of {} s, and was stopped",
                       r.spec.max_execution_seconds));
  }
}

// Does `r` run pods on its executor? A pod set with a command does anywhere; one with only an
// image, only on Kubernetes. A workload that runs nothing holds its quota until it is deleted.
bool FleetService::runsHere(const Record& r) const {
  const bool kubernetes = executorFor(r) == "kubernetes";
  for (const auto& ps : r.spec.pod_sets) {
    if (!ps.command.empty() || (kubernetes && !ps.image.empty())) return true;
  }
  return false;
}

std::string FleetService::replicaId(const Record& r, const PodRun& p) const {
  return fmt::format("{}/{}-{}", shown(r.spec.name), p.pod_set, p.index);
}

// Running replicas of served models that answer their health check join their route; a serving
// replica that fails it kMaxHealthFailures times in a row leaves it (no new request goes there)
// until it answers again.
void FleetService::joinServed() {
  constexpr int kMaxHealthFailures = 3;
  if (d_.served == nullptr) return;
  for (auto& [name, r] : records_) {
    if (!r.spec.serve || r.state != "running") continue;
    const fleet::ServeSpec& serve = *r.spec.serve;
    const std::string queue = r.admission ? r.admission->cluster_queue : "";
    for (auto& p : r.pods) {
      if (p.phase != "running") continue;
      exec::Executor* executor = executorNamed(p.executor);
      const auto host = executor ? executor->address(p.handle) : std::nullopt;
      if (!host) continue;  // not reachable (yet)
      const int port = static_cast<int>(serve.port + p.index);
      const bool healthy = exec::httpOk(*host, port, serve.health, std::chrono::milliseconds(300));
      if (p.serving) {
        p.health_failures = healthy ? 0 : p.health_failures + 1;
        if (p.health_failures < kMaxHealthFailures) continue;
        d_.served->leave(serve.route, replicaId(r, p));
        p.serving = false;
        p.health_failures = 0;
        noteEvent("NotServing", name, queue, "ReplicaUnhealthy",
                  fmt::format("pod {}-{} failed its health check {} times in a row and left "
                              "route {}",
                              p.pod_set, p.index, kMaxHealthFailures, serve.route),
                  "");
        dirty_.insert(name);
        continue;
      }
      if (!healthy) continue;
      const std::string where = host->find(':') != std::string::npos
                                    ? fmt::format("[{}]:{}", *host, port)  // IPv6
                                    : fmt::format("{}:{}", *host, port);
      const std::string base =
          fmt::format("http://{}{}", where, serve.api == "anthropic" ? "" : "/v1");
      const std::string metrics =
          serve.metrics.empty() ? "" : fmt::format("http://{}{}", where, serve.metrics);
      auto joined = d_.served->join(serve.route, replicaId(r, p), base, serve.api, serve.model,
                                    metrics, serve.engine, {r.tenant_id, r.team_id});
      if (!joined) {
        const std::string why =
            joined.error().code == ErrorCode::kNotFound ? "RouteMissing" : "NotAllowedToServe";
        if (r.reason != why) {
          r.reason = why;
          r.message = joined.error().message;
          noteEvent("NotServing", name, queue, r.reason, r.message, "");
          dirty_.insert(name);
        }
        continue;
      }
      p.serving = true;
      noteEvent(
          "Serving", name, queue, "ReplicaReady",
          fmt::format("pod {}-{} serves route {} at {}", p.pod_set, p.index, serve.route, where),
          "");
      dirty_.insert(name);
    }
  }
}

// --- Pods
// -----------------------------------------------------------------------------------------

std::map<std::string, std::string> FleetService::admissionEnv(const Record& r,
                                                              const std::string& pod_set,
                                                              int64_t index) const {
  std::map<std::string, std::string> env = {
      {"PURSER_WORKLOAD", shown(r.spec.name)},
      {"PURSER_NAMESPACE", shown(r.spec.namespace_)},
      {"PURSER_POD_SET", pod_set},
      {"PURSER_POD_INDEX", std::to_string(index)},
      // What an Indexed Job's pods read their index from.
      {"JOB_COMPLETION_INDEX", std::to_string(index)},
  };
  if (r.spec.serve) {
    env["PURSER_SERVE_PORT"] = std::to_string(r.spec.serve->port + index);
    env["PURSER_SERVE_MODEL"] = r.spec.serve->model;
  }
  if (!r.admission) return env;
  env["PURSER_CLUSTER_QUEUE"] = r.admission->cluster_queue;
  for (const auto& ps : r.admission->pod_sets) {
    if (ps.name != pod_set) continue;
    env["PURSER_POD_COUNT"] = std::to_string(ps.count);
    if (auto f = ps.flavors.find(kGpu); f != ps.flavors.end()) env["PURSER_GPU_FLAVOR"] = f->second;
    if (index < 0 || static_cast<size_t>(index) >= ps.placements.size()) break;
    const fleet::PodPlacement& p = ps.placements[static_cast<size_t>(index)];
    env["PURSER_NODE"] = p.node;
    const fleet::PodSet* spec = nullptr;
    for (const auto& s : r.spec.pod_sets) {
      if (s.name == pod_set) spec = &s;
    }
    if (placer_ && spec != nullptr && !p.gpus.empty()) {
      if (auto placed = placer_->environment(p, spec->requests)) {
        for (const auto& [k, v] : *placed) env[k] = v;
      }
    } else if (p.gpus.empty()) {
      // A pod placed without GPUs sees none (not the machine's).
      env["CUDA_VISIBLE_DEVICES"] = "";
    }
  }
  return env;
}

// Does `r` wait for the pods it displaced? Its placements share a GPU with a pod still stopping.
bool FleetService::blocked(const Record& r) const {
  if (stopping_.empty() || !r.admission) return false;
  for (const auto& ps : r.admission->pod_sets) {
    for (const auto& p : ps.placements) {
      for (const auto& s : stopping_) {
        if (!s.placement || s.placement->node != p.node) continue;
        for (int g : p.gpus) {
          if (std::find(s.placement->gpus.begin(), s.placement->gpus.end(), g) !=
              s.placement->gpus.end()) {
            return true;
          }
        }
      }
    }
  }
  return false;
}

Result<int64_t> FleetService::accountOf(const std::string& team_id) {
  if (auto it = accounts_.find(team_id); it != accounts_.end()) return it->second;
  int64_t uid = 0;
  const std::string at = formatRfc3339(d_.clock.now());
  const int64_t base = options_.account_uid_base, count = options_.account_uid_count;
  PURSER_TRY(d_.store.write(fenced([&](store::Tx& tx) -> Result<void> {
    // Another leader may have made it meanwhile; else the next uid in the range.
    auto have =
        PURSER_TRY_VALUE(tx.query("SELECT uid FROM fleet_accounts WHERE team_id = $1", {team_id}));
    if (!have.empty()) {
      uid = have[0].getInt(0);
      return {};
    }
    auto top = PURSER_TRY_VALUE(tx.query(
        "SELECT MAX(uid) FROM fleet_accounts WHERE uid >= $1 AND uid < $2", {base, base + count}));
    uid =
        !top.empty() && std::holds_alternative<int64_t>(top[0].at(0)) ? top[0].getInt(0) + 1 : base;
    if (uid >= base + count) {
      return fail(Error(ErrorCode::kResourceExhausted,
                        fmt::format("every account of fleet.local's {} (from uid {}) is some "
                                    "team's; raise fleet.local.uid_count",
                                    count, base)));
    }
    PURSER_TRY(tx.exec("INSERT INTO fleet_accounts (team_id, uid, created_at) VALUES ($1, $2, $3)",
                       {team_id, uid, at}));
    return {};
  })));
  accounts_[team_id] = uid;
  return uid;
}

void FleetService::startPods(Record& r, int64_t now) {
  dirty_.insert(r.spec.name);
  // A run written as launching by a leader that died is started again under the same keys.
  const bool resumed = r.launching;
  if (!resumed) ++r.runs;
  if (!resumed) {
    // The run is recorded (fenced, where replicas share the store) before any pod is asked to
    // start, so that whoever runs the fleet next — this process after a kill -9, or another
    // replica — knows it may have begun, and starts it again under the same keys, which takes
    // back the pods that did start instead of starting them twice.
    r.launching = true;
    r.started_ms = now;  // as launched: a run resumed after a kill is charged from here
    const std::string at = formatRfc3339(d_.clock.now());
    WorkloadRow row = rowOf(r);
    auto wrote = d_.store.write(
        fenced([&row, &at](store::Tx& tx) -> Result<void> { return writeRow(tx, row, at); }));
    if (!wrote) {
      r.launching = false;
      --r.runs;
      if (r.reason != "WaitingForStore") {
        r.reason = "WaitingForStore";
        r.message = "its start could not be recorded: " + wrote.error().message;
        spdlog::warn("fleet: {} not started yet: {}", r.spec.name, r.message);
      }
      return;
    }
  }
  r.pods.clear();
  const std::string queue = r.admission ? r.admission->cluster_queue : "";
  std::string failure;
  const std::string executor_name = executorFor(r);
  exec::Executor* executor = executorNamed(executor_name);
  if (executor == nullptr) {
    failure = fmt::format("this Purser has no executor \"{}\" to run pods on", executor_name);
  }
  if (executor != nullptr && executor_name == "kubernetes" && r.external.empty() &&
      !r.manifest.empty()) {
    // Submitted as a Job, JobSet or PyTorchJob: that object is created once, then released (and
    // suspended, and released again) like one a user applied.
    auto key = executor->create(r.manifest, shown(r.spec.namespace_));
    if (key) {
      r.external = executor_name + ":" + *key;
    } else {
      failure = fmt::format("its {} could not be created: {}", "object", key.error().message);
    }
  }
  for (const auto& ps : r.spec.pod_sets) {
    if (!failure.empty()) break;
    // A pod set with nothing to run here holds its quota only.
    if (ps.command.empty() && (executor_name != "kubernetes" || ps.image.empty())) continue;
    int64_t count = ps.count;
    if (r.admission) {
      for (const auto& a : r.admission->pod_sets) {
        if (a.name == ps.name) count = a.count;
      }
    }
    for (int64_t i = 0; i < count && failure.empty(); ++i) {
      exec::PodLaunch launch;
      launch.workload = shown(r.spec.name);
      launch.pod_set = ps.name;
      launch.index = i;
      launch.argv = ps.command;
      launch.working_dir = ps.working_dir;
      launch.env = ps.env;
      for (auto& [k, v] : admissionEnv(r, ps.name, i)) launch.env[k] = v;
      if (auto g = ps.requests.find(kGpu); g != ps.requests.end()) launch.gpus = g->second / 1000;
      if (auto c = ps.requests.find("cpu"); c != ps.requests.end()) launch.cpu_milli = c->second;
      if (auto m = ps.requests.find("memory"); m != ps.requests.end()) {
        launch.memory_bytes = m->second / 1000;
      }
      if (auto n = launch.env.find("PURSER_NODE"); n != launch.env.end()) launch.node = n->second;
      launch.image = ps.image;
      launch.queue = r.spec.local_queue;
      launch.time_limit_seconds = r.spec.max_execution_seconds;
      launch.key = fmt::format("{}-{}-{}", options_.installation, r.seq, r.runs);
      launch.team = r.spec.namespace_;
      if (auto l = ps.limits.find("memory"); l != ps.limits.end()) {
        launch.memory_limit_bytes = l->second / 1000;
      }
      if (auto l = ps.limits.find("cpu"); l != ps.limits.end()) launch.cpu_limit_milli = l->second;
      if (r.admission) {
        for (const auto& a : r.admission->pod_sets) {
          if (a.name == ps.name && static_cast<size_t>(i) < a.placements.size()) {
            launch.gpu_indices = a.placements[static_cast<size_t>(i)].gpus;
          }
        }
      }
      if (executor_name == "local") {
        auto uid = accountOf(r.team_id.empty() ? "namespace:" + r.spec.namespace_ : r.team_id);
        if (!uid) {
          failure = fmt::format("pod {}-{} has no account to run as: {}", ps.name, i,
                                uid.error().message);
          break;
        }
        launch.uid = *uid;
      }
      if (!r.external.empty()) launch.existing = r.external.substr(r.external.find(':') + 1);
      if (r.admission) {
        for (const auto& a : r.admission->pod_sets) {
          for (const auto& p : a.placements) launch.placement[a.name].push_back(p.node);
        }
      }
      auto handle = executor->start(launch);
      if (!handle && handle.error().code == ErrorCode::kResourceExhausted) {
        // The executor is full: what started is let go, and it waits for room (every poll).
        for (auto& p : r.pods) {
          (void)executor->stop(p.handle, Duration::zero());
          stopping_.push_back({r.spec.name, p.executor, p.handle, std::nullopt});
        }
        r.pods.clear();
        // The run keeps its number: its keys were claimed by the pods let go.
        r.launching = false;
        if (r.reason != "WaitingForExecutor") {
          r.reason = "WaitingForExecutor";
          r.message = handle.error().message;
          noteEvent("Waiting", r.spec.name, queue, r.reason, r.message, "");
        }
        // Tried again after a while, longer each time (1 s doubling to a minute), never at
        // every poll.
        auto& [next, delay] = start_backoff_[r.spec.name];
        delay = delay == 0 ? 1000 : std::min<int64_t>(delay * 2, 60'000);
        next = now + delay;
        return;
      }
      if (!handle) {
        failure = fmt::format("pod {}-{} could not start: {}", ps.name, i, handle.error().message);
        break;
      }
      PodRun pod;
      pod.pod_set = ps.name;
      pod.index = i;
      pod.handle = *handle;
      pod.executor = executor_name;
      pod.started_ms = now;
      if (auto st = executor->status(*handle)) pod.started_ms = unixMillis(st->started_at);
      if (auto id = executor->identity(*handle)) {
        pod.pid = id->first;
        pod.pid_start = id->second;
      }
      r.pods.push_back(std::move(pod));
    }
  }
  if (!failure.empty()) {
    for (auto& p : r.pods) (void)executor->stop(p.handle, Duration::zero());
    r.pods.clear();
    r.launching = false;
    r.started_ms = now;
    r.metered_until_ms = now;
    endRun(r, /*failed=*/true, "StartFailed", failure);
    return;
  }
  r.state = "running";
  r.launching = false;
  // Its GPU time counts from its launch (the first try's, for a run resumed after a kill: its
  // pods ran while no Purser watched them) or its pods' first start, whichever came first.
  if (!resumed || r.started_ms <= 0 || r.started_ms > now) r.started_ms = now;
  for (const auto& p : r.pods) r.started_ms = std::min(r.started_ms, p.started_ms);
  r.metered_until_ms = r.started_ms;
  noteEvent("Started", r.spec.name, queue, "PodsStarted",
            fmt::format("{} pod(s) started (run {})", r.pods.size(), r.runs), "");
}

// Stops `r`'s running pods; they stop in the background (holding their GPUs until gone) and
// show as "stopped".
void FleetService::stopPods(Record& r, const std::string& why) {
  for (const auto& p : r.pods) {
    if (p.phase != "running") continue;
    exec::Executor* executor = executorNamed(p.executor);
    if (executor == nullptr) continue;
    Stopping s{r.spec.name, p.executor, p.handle, std::nullopt};
    if (p.serving && d_.served && r.spec.serve) {
      // Out of the route first; signalled once what it serves now is done.
      s.route = r.spec.serve->route;
      s.replica = replicaId(r, p);
      s.signalled = false;
      s.drain_until_ms =
          nowMs() +
          std::chrono::duration_cast<std::chrono::milliseconds>(options_.termination_grace).count();
      d_.served->leave(s.route, s.replica);
      noteEvent("Draining", r.spec.name, r.admission ? r.admission->cluster_queue : "", why,
                fmt::format("pod {}-{} left route {}; stopped once its requests are done",
                            p.pod_set, p.index, s.route),
                "");
    } else if (auto stopped = executor->stop(p.handle, options_.termination_grace); !stopped) {
      spdlog::warn("fleet: pod {} of {} not stopped ({}): {}", p.handle, r.spec.name, why,
                   stopped.error().message);
    }
    if (r.admission) {
      for (const auto& a : r.admission->pod_sets) {
        if (a.name == p.pod_set && p.index >= 0 &&
            static_cast<size_t>(p.index) < a.placements.size()) {
          s.placement = a.placements[static_cast<size_t>(p.index)];
        }
      }
    }
    stopping_.push_back(std::move(s));
  }
  // The run's pods stay on the record (their logs with them) until the next run starts.
  for (auto& p : r.pods) {
    if (p.phase != "running") continue;
    p.phase = "stopped";
    p.serving = false;
    p.finished_ms = nowMs();
  }
}

void FleetService::pollPods() {
  // Pods stopping in the background: gone ones free their GPUs.
  for (auto it = stopping_.begin(); it != stopping_.end();) {
    exec::Executor* executor = executorNamed(it->executor);
    if (!it->signalled && executor) {
      if (d_.served->inFlight(it->route, it->replica) > 0 && nowMs() < it->drain_until_ms) {
        ++it;  // still serving what it had
        continue;
      }
      it->signalled = true;
      (void)executor->stop(it->handle, options_.termination_grace);
    }
    auto st = executor ? executor->status(it->handle) : Result<exec::PodStatus>(fail(Error()));
    if (!st && st.error().code == ErrorCode::kUnavailable) {
      ++it;  // not known yet: the engine cannot be asked
    } else if (!st || st->phase != exec::PodPhase::kRunning) {
      if (executor) executor->forget(it->handle);
      it = stopping_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<std::string> ended;
  for (auto& [name, r] : records_) {
    if (r.state != "running" && r.state != "unknown") continue;
    bool running = false, failed = false;
    std::optional<Error> lost;  // the executor could not be asked
    for (auto& p : r.pods) {
      if (p.phase == "running") {
        exec::Executor* executor = executorNamed(p.executor);
        auto st = executor ? executor->status(p.handle) : Result<exec::PodStatus>(fail(Error()));
        if (!st && st.error().code == ErrorCode::kUnavailable) {
          lost = st.error();
        } else if (!st) {
          // The executor does not know it (nor can it learn of it): ended, with no code.
          p.phase = "failed";
          p.finished_ms = nowMs();
          dirty_.insert(name);
        } else if (st->phase != exec::PodPhase::kRunning) {
          if (p.serving && d_.served && r.spec.serve) {
            d_.served->leave(r.spec.serve->route, replicaId(r, p));
            p.serving = false;
          }
          p.phase = st->phase == exec::PodPhase::kSucceeded ? "succeeded" : "failed";
          p.exit_code = st->exit_code;
          p.signal = st->signal;
          p.reason = st->reason;
          p.finished_ms = st->finished_at ? unixMillis(*st->finished_at) : nowMs();
          dirty_.insert(name);
        }
      }
      if (p.phase == "running") running = true;
      if (p.phase == "failed") failed = true;
    }
    // An engine that cannot be reached: the workload is unknown (its quota and its GPU time go
    // on) until it answers again; asked again at every poll.
    if (lost && r.state == "running") {
      r.state = "unknown";
      r.reason = "ExecutorUnreachable";
      r.message = lost->message;
      noteEvent("Unknown", name, r.admission ? r.admission->cluster_queue : "",
                "ExecutorUnreachable", lost->message, "");
      dirty_.insert(name);
    } else if (!lost && r.state == "unknown") {
      r.state = "running";
      r.reason.clear();
      r.message.clear();
      noteEvent("Running", name, r.admission ? r.admission->cluster_queue : "", "ExecutorReachable",
                "its executor answers again", "");
      dirty_.insert(name);
    }
    if (failed && running) {
      // One pod failed: the others are stopped (the workload has failed; none is retried).
      for (auto& p : r.pods) {
        exec::Executor* executor = executorNamed(p.executor);
        if (p.phase == "running" && executor) {
          (void)executor->stop(p.handle, options_.termination_grace);
        }
      }
    }
    if (!running && !lost) ended.push_back(name);
  }
  for (const auto& name : ended) {
    Record& r = records_.at(name);
    const PodRun* decisive = nullptr;
    for (const auto& p : r.pods) {
      if (p.phase == "failed" && (decisive == nullptr || p.finished_ms < decisive->finished_ms)) {
        decisive = &p;
      }
    }
    if (decisive != nullptr) {
      endRun(r, true, decisive->reason == "OOMKilled" ? "OOMKilled" : "PodFailed",
             fmt::format("pod {}-{} {}", decisive->pod_set, decisive->index, endOf(*decisive)));
    } else {
      endRun(r, false, "Completed", fmt::format("{} pod(s) exited with code 0", r.pods.size()));
    }
  }
}

// Ends `r` (running, or failing to start): GPU time charged to its pods' end, quota released,
// written as ended.
void FleetService::endRun(Record& r, bool failed, const std::string& reason,
                          const std::string& message) {
  int64_t end = r.started_ms;
  const PodRun* decisive = nullptr;
  for (const auto& p : r.pods) {
    end = std::max(end, p.finished_ms);
    if (p.phase == "failed" && (decisive == nullptr || p.finished_ms < decisive->finished_ms)) {
      decisive = &p;
    }
  }
  if (decisive == nullptr && !r.pods.empty()) decisive = &r.pods.back();
  if (auto tx = meter(r, std::max(end, r.metered_until_ms))) metering_.push_back(std::move(*tx));
  sampling_.erase(r.spec.name);
  releaseGpu(r);
  if (decisive != nullptr) {
    if (decisive->exit_code) {
      r.exit_code = decisive->exit_code;
    } else if (decisive->signal) {
      r.exit_code = 128 + *decisive->signal;  // as a shell reports a death by signal
    }
    exec::Executor* executor = executorNamed(decisive->executor);
    if (auto tail = executor ? executor->logTail(decisive->handle, options_.log_tail_bytes)
                             : Result<std::string>(fail(Error()))) {
      r.log_tail = std::move(*tail);
    }
  }
  const std::string queue = r.admission ? r.admission->cluster_queue : "";
  const std::string name = r.spec.name;
  (void)engine_->finish(name);
  r.state = failed ? "failed" : "succeeded";
  r.reason = reason;
  r.message = message;
  // Charged up to here (a metering may have passed the pods' end by the instant between a poll
  // and the metering that followed it).
  r.finished_ms = std::max({end, r.started_ms, r.metered_until_ms});
  noteEvent(failed ? "Failed" : "Succeeded", name, queue, reason, message, "");
  for (const auto& p : r.pods) {
    if (exec::Executor* e = executorNamed(p.executor); e && p.phase != "running")
      e->forget(p.handle);
  }
  just_ended_[name] = r;
  ended_.push_back(std::move(r));
  records_.erase(name);
  dirty_.erase(name);
}

// After a restart: the pods the store says were running are the executor's to find again; one
// it no longer knows has ended while Purser was away.
void FleetService::adopt() {
  for (auto& [name, r] : records_) {
    if (r.state != "running") continue;
    for (auto& p : r.pods) {
      if (p.phase != "running") continue;
      const exec::Adopted a{p.handle, p.pid, p.pid_start,
                            SystemTime(std::chrono::milliseconds(p.started_ms))};
      exec::Executor* executor = executorNamed(p.executor);
      if (executor == nullptr) {
        spdlog::warn("fleet: pod {} of {} ran on executor \"{}\", which is not configured now",
                     p.handle, name, p.executor);
        continue;
      }
      if (auto adopted = executor->adopt(a); !adopted) {
        spdlog::warn("fleet: pod {} of {} cannot be adopted: {}", p.handle, name,
                     adopted.error().message);
      }
    }
  }
}

// Work users handed an engine directly joins the queues, as Kueue's job integrations make a
// Workload of a Job: owned by the team its namespace names, in that team's tenant, paid for by
// both. Found again (after a restart, a relist), it is the same workload; gone from the engine
// before it ran, it ends (a running one ends as its engine reports).
void FleetService::takeFound() {
  for (const auto& [name, e] : executors_) {
    for (const auto& f : e->takeFound()) found(name, f);
  }
}

void FleetService::found(const std::string& executor, const exec::Found& f) {
  const std::string external = executor + ":" + f.key;
  for (auto& [name, r] : records_) {
    if (r.external != external) continue;
    if (f.manifest.empty() && r.state != "running" && r.state != "unknown") {
      (void)remove(name, executor, nullptr);
    }
    return;
  }
  if (f.manifest.empty()) return;
  const auto refuse = [&](const std::string& why) {
    if (found_warned_.insert(f.key + why).second) {
      spdlog::warn("fleet: {} {} is not queued: {}", executor, f.key, why);
    }
  };
  fleet::WorkloadBounds bounds = options_.bounds;
  bounds.min_pod_cpu_milli = 0;  // its engine places it, not the local executor's slots
  auto parsed = fleet::parseWorkload(f.manifest, executor + " " + f.key, 128, bounds);
  if (!parsed) return refuse(parsed.error().message);
  fleet::Workload w = std::move(parsed->workload);
  const std::string ns = w.namespace_;
  const std::string tenant_id = owningTenant(ns);
  auto team = tenant_id.empty() ? std::nullopt : d_.directory.teamByName(tenant_id, ns);
  if (!team) return refuse(fmt::format("namespace \"{}\" is no team's", ns));
  const std::string bare = w.name.substr(w.name.find('/') + 1);
  w.namespace_ = namespaceOf(tenant_id, ns);
  w.name = w.namespace_ + "/" + bare;
  if (records_.count(w.name) != 0) {
    // Kueue's way of naming a Job's workload, when the plain name is taken.
    const std::string uid = f.key.substr(f.key.rfind('/') + 1);
    w.name = fmt::format("{}/job-{}-{}", w.namespace_, bare, uid.substr(0, 5));
  }
  const int64_t now = nowMs();
  w.created_ms = now;
  w.queued_ms.reset();
  Record r;
  r.tenant_id = tenant_id;
  r.team_id = team->id;
  r.owner_kind = executor;
  r.submitted_ms = now;
  r.external = external;
  r.spec = std::move(w);
  // Applied to the cluster directly, it asks for no more priority than through Purser.
  if (auto granted = checkPriorityGrant(r); !granted) return refuse(granted.error().message);
  auto queued = submit(std::move(r), nullptr);
  if (!queued) return refuse(queued.error().message);
}

// --- What the API hands in ----------------------------------------------------------------------

Result<Record> FleetService::submit(Record r, Done done) {
  const std::string name = r.spec.name;
  just_ended_.clear();
  if (records_.count(name) != 0) {
    return fail(Error(ErrorCode::kAlreadyExists,
                      fmt::format("a workload named \"{}\" already exists", shown(name))));
  }
  ensureNamespace(r.spec.namespace_, r.tenant_id);
  // A served model joins only a route that says its tenant (or team) may serve it.
  // (A route that is not there yet is waited for: the replicas join once it is configured.)
  if (r.spec.serve && d_.served != nullptr) {
    auto may = d_.served->mayServe(r.spec.serve->route, {r.tenant_id, r.team_id});
    if (!may && may.error().code != ErrorCode::kNotFound) return fail(may.error());
  }
  // The engine checks the queue and the priority class; refused, nothing has changed.
  PURSER_TRY(engine_->submit(r.spec));
  r.seq = next_seq_++;
  records_[name] = std::move(r);
  dirty_.insert(name);
  noteEvent("Submitted", name, "", "", "", "");
  auto write = schedule();
  if (write) {
    enqueue(std::move(*write), std::move(done));
  } else if (done) {
    done({});
  }
  if (const Record* live = find(name)) return *live;
  // It ended at once (its pods could not start).
  return just_ended_.at(name);
}

Result<Record> FleetService::remove(std::string name, const std::string& by, Done done) {
  auto it = records_.find(name);
  if (it == records_.end()) return fail(Error(ErrorCode::kNotFound, "no such workload"));
  Record& r = it->second;
  const int64_t now = nowMs();
  if (auto tx = meter(r, now)) metering_.push_back(std::move(*tx));
  sampling_.erase(name);
  releaseGpu(r);
  stopPods(r, "Deleted");
  if (!r.external.empty()) {
    // Work found on an engine is deleted there too (or it would be found again).
    if (exec::Executor* e = executorNamed(executorFor(r))) {
      e->discard(r.external.substr(r.external.find(':') + 1));
    }
  }
  const std::string queue = r.admission ? r.admission->cluster_queue : "";
  (void)engine_->finish(name);
  r.state = "failed";
  r.reason = "Deleted";
  r.message = fmt::format("deleted by {}", by);
  r.finished_ms = now;
  noteEvent("Finished", name, queue, "Deleted", r.message, "");
  Record out = r;
  ended_.push_back(std::move(r));
  records_.erase(it);
  dirty_.erase(name);
  auto write = schedule();
  if (write) {
    enqueue(std::move(*write), std::move(done));
  } else if (done) {
    done({});
  }
  return out;
}

Result<void> FleetService::apply(fleet::ManifestSet set, const std::string& text,
                                 ledger::AuditEntry audit, Done done) {
  fleet::ManifestSet merged = base_;
  // A terminating queue applied again is configured again (as applied).
  std::set<std::string> again;
  for (const auto& q : set.cluster_queues) {
    if (terminating_.contains(q.name)) again.insert(q.name);
  }
  merge(merged, std::move(set));
  // Nothing changes unless the new objects hold every live workload where it is.
  Built fresh = PURSER_TRY_VALUE(rebuild(worldOf(merged)));
  base_ = std::move(merged);
  for (const std::string& cq : again) {
    terminating_.erase(cq);
    std::lock_guard lock(shared_mu_);
    std::erase_if(warnings_, [&](const std::string& w) {
      return w.starts_with("ClusterQueue " + cq + " is no longer in the manifests");
    });
  }
  engine_ = std::move(fresh.engine);
  placer_ = std::move(fresh.placer);
  for (const auto& [name, r] : records_) dirty_.insert(name);
  auto changes = schedule();
  const std::string at = formatRfc3339(d_.clock.now());
  const ledger::AuditLog& log = d_.audit;
  enqueue(
      [changes = std::move(changes), text, at, audit = std::move(audit),
       &log](store::Tx& tx) -> Result<void> {
        PURSER_TRY(tx.exec(
            "INSERT INTO fleet_manifests (applied_at, actor, file, text) VALUES ($1, $2, $3, $4)",
            {at, audit.actor, std::string("fleet apply"), text}));
        PURSER_TRY(log.append(tx, audit));
        if (changes) PURSER_TRY((*changes)(tx));
        return {};
      },
      std::move(done));
  return {};
}

// --- Reads from the store
// -------------------------------------------------------------------------

namespace {

// The SQL condition restricting rows to `v`, and its parameters.
std::string visibilitySql(const Visibility& v, std::vector<store::Value>& params) {
  std::string sql;
  if (!v.tenant_id.empty()) {
    params.emplace_back(v.tenant_id);
    sql += fmt::format(" AND tenant_id = ${}", params.size());
  }
  if (!v.team_id.empty()) {
    params.emplace_back(v.team_id);
    sql += fmt::format(" AND team_id = ${}", params.size());
  }
  return sql;
}

}  // namespace

Result<std::vector<Record>> FleetService::endedRecords(const Visibility& v, size_t limit) const {
  std::vector<store::Value> params;
  const std::string sql =
      "SELECT record FROM fleet_workloads WHERE state IN ('finished', 'succeeded', 'failed')" +
      visibilitySql(v, params) + fmt::format(" ORDER BY seq DESC LIMIT {}", limit);
  store::Rows rows;
  PURSER_TRY(d_.store.read([&](store::Tx& tx) -> Result<void> {
    rows = PURSER_TRY_VALUE(tx.query(sql, params));
    return {};
  }));
  std::vector<Record> out;
  for (const auto& row : rows) {
    if (auto r = recordFrom(row.getText(0))) out.push_back(std::move(*r));
  }
  return out;
}

Result<std::optional<Record>> FleetService::storedRecord(const std::string& name) const {
  store::Rows rows;
  PURSER_TRY(d_.store.read([&](store::Tx& tx) -> Result<void> {
    rows = PURSER_TRY_VALUE(tx.query("SELECT record FROM fleet_workloads WHERE name = $1", {name}));
    return {};
  }));
  if (rows.empty()) return std::optional<Record>();
  return std::optional<Record>(PURSER_TRY_VALUE(recordFrom(rows[0].getText(0))));
}

Result<std::vector<EventRow>> FleetService::events(
    const Visibility& v, const std::optional<std::string>& workload) const {
  std::vector<store::Value> params;
  std::string sql =
      "SELECT at, kind, workload, cluster_queue, reason, message, by_workload, tenant_id, "
      "team_id, by_tenant_id FROM fleet_events WHERE 1 = 1" +
      visibilitySql(v, params);
  if (workload) {
    params.emplace_back(*workload);
    sql += fmt::format(" AND workload = ${}", params.size());
  }
  store::Rows rows;
  PURSER_TRY(d_.store.read([&](store::Tx& tx) -> Result<void> {
    rows = PURSER_TRY_VALUE(tx.query(sql + " ORDER BY id DESC LIMIT 1000", params));
    return {};
  }));
  std::vector<EventRow> out;
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    const auto& row = *it;
    out.push_back({row.getText(0), row.getText(1), row.getText(2), row.getText(3), row.getText(4),
                   row.getText(5), row.getText(6), row.getText(7), row.getText(8), row.getText(9)});
  }
  return out;
}

Result<std::vector<UtilisationRow>> FleetService::utilisationSince(
    int64_t from_ms, const Visibility& v, const std::vector<std::string>& also) const {
  std::vector<store::Value> params = {from_ms};
  // The rows `v` shows (its conditions joined by AND), or those of the workloads in `also`.
  std::string shown = "1 = 1" + visibilitySql(v, params);
  std::string named;
  for (const auto& name : also) {
    params.emplace_back(name);
    named += fmt::format("{}${}", named.empty() ? "" : ", ", params.size());
  }
  const std::string sql =
      "SELECT workload, tenant_id, team_id, SUM(gpu_ms), SUM(placed_gpu_ms), "
      "SUM(observed_gpu_ms), SUM(busy_gpu_ms), MAX(at_ms) FROM gpu_utilisation WHERE at_ms >= $1 "
      "AND ((" +
      shown + ")" + (named.empty() ? std::string() : " OR workload IN (" + named + ")") +
      ") GROUP BY workload, tenant_id, team_id ORDER BY workload";
  store::Rows rows;
  PURSER_TRY(d_.store.read([&](store::Tx& tx) -> Result<void> {
    rows = PURSER_TRY_VALUE(tx.query(sql, params));
    return {};
  }));
  std::vector<UtilisationRow> out;
  for (const auto& row : rows) {
    out.push_back({row.getText(0), row.getText(1), row.getText(2), row.getInt(3), row.getInt(4),
                   row.getInt(5), row.getInt(6), row.getInt(7)});
  }
  return out;
}

Result<std::string> FleetService::logTail(const PodRun& pod, size_t max_bytes) const {
  exec::Executor* executor = executorNamed(pod.executor);
  if (executor == nullptr) {
    return fail(Error(ErrorCode::kNotFound,
                      fmt::format("executor \"{}\" is not configured here", pod.executor)));
  }
  return executor->logTail(pod.handle, max_bytes);
}

exec::Executor* FleetService::executorNamed(const std::string& name) const {
  auto it = executors_.find(name.empty() ? "local" : name);
  return it == executors_.end() ? nullptr : it->second.get();
}

// The executor of `r`'s admitted flavors (its GPU flavor's first): "local" unless configured.
std::string FleetService::executorFor(const Record& r) const {
  if (!r.external.empty()) return r.external.substr(0, r.external.find(':'));
  if (!r.admission) return "local";
  return executorOf(r.admission->pod_sets, options_.flavor_executors);
}

}  // namespace purser::scheduler
