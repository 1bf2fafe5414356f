// The fleet service's inventory, over its part InventoryFeed (inventory_feed.h), and the engine
// rebuilt on it; priority grants; ClusterQueues kept terminating.
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

// --- The inventory
// ---------------------------------------------------------------------------------

std::vector<fleet::InventoryNode> FleetService::readInventory() {
  // The nodes admitted work is placed on: kept, tainted, when no one reports them any more.
  std::set<std::string> placed;
  for (const auto& [name, r] : records_) {
    if (!holdsQuota(r.state) || !r.admission) continue;
    for (const auto& ps : r.admission->pod_sets) {
      for (const auto& p : ps.placements) placed.insert(p.node);
    }
  }
  const NodesOf nodes_of =
      [this](const std::string& name) -> std::optional<Result<std::vector<fleet::InventoryNode>>> {
    exec::Executor* e = executorNamed(name);
    if (e == nullptr) return std::nullopt;
    return e->nodes();
  };
  return inventory_.read(nodes_of, placed, options_.inventory, nowMs());
}

// Reads the engines' nodes again; a changed inventory gets a new engine holding every live
// workload where it is (if it cannot, the old inventory stays and the reason is logged).
void FleetService::refreshInventory() {
  std::vector<fleet::InventoryNode> fresh = readInventory();
  if (InventoryFeed::same(fresh, options_.inventory)) return;
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
  for (const auto& [name, r] : records_) writes_.changed(name);
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
  for (const auto& [name, r] : records_) writes_.changed(name);
  if (auto write = schedule()) writes_.enqueue(std::move(*write), nullptr);
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

}  // namespace purser::workloads
