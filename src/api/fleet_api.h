// The fleet in `purser serve`: Kueue's objects from the configuration and from
// `purser fleet apply`, workloads submitted through the API, the admission engine driven by
// every change, state kept in the store, and GPU time metered into the owners' wallets.
//
//   POST   /api/v1/workloads                        a Workload: Kueue's shape or the short form,
//                                                   JSON, or YAML with Content-Type
//                                                   application/yaml
//   GET    /api/v1/workloads[?namespace=&state=]    the caller's (team, tenant, or all for admins)
//   GET    /api/v1/workloads/{namespace}/{name}
//   DELETE /api/v1/workloads/{namespace}/{name}     ends it: pods stopped, quota released, GPU
//                                                   time charged
//   GET    /api/v1/workloads/{namespace}/{name}/why why it is pending, in structured reasons
//   GET    /api/v1/workloads/{namespace}/{name}/logs[?pod=SET-INDEX&bytes=N]
//                                                   the end of a pod's output (text/plain)
//   GET    /api/v1/queues                           per ClusterQueue: quota, usage, borrowed, lent
//   GET    /api/v1/fleet/events[?workload=NS/NAME]  admissions, preemptions, evictions, holds
//   POST   /api/v1/fleet/manifests                  platform admins: a YAML stream of Kueue objects
//   GET    /api/v1/fleet/nodes                      the inventory: each node's GPUs, their
//                                                   utilisation and the shares placed on them
//   GET    /api/v1/fleet/utilisation[?since=24h]    per workload: GPU-hours allocated, observed
//                                                   and busy, efficiency, and whether it is
//                                                   allocated but idle
//
// With an inventory (fleet.nodes), a workload is admitted only once its pods are placed: the
// admission names each pod's node, GPUs and share, and GET of the workload adds the
// environment an executor sets (CUDA_VISIBLE_DEVICES, HAMi-core's limits). A workload with a
// command runs once admitted: pending → admitted → running → succeeded | failed (see
// workloads/record.h for every state).
//
// Teams are namespaces: a workload runs in its submitter's team (tenant and platform admins may
// name another), and its GPU time is charged to the submitter's wallet chain for the model
// "gpu-hours" (wallets without a model count it too) at the flavor's price per GPU-hour. GPU time
// is held on the chain before it runs (two metering intervals ahead) and charged as it is used; a
// GPU workload whose next stretch a hard wallet cannot hold waits (BudgetExhausted), and a running
// one is sent back to its queue, held, so a hard wallet is not overrun (short of a stall longer
// than a hold covers, or a restart: holds live in memory).
//
// Every change runs the engine to a stable state at once (drain mode by default), then writes the
// changed workloads and the events in one store write, in order; a submission is acknowledged
// only after its write is durable, so a restart finds every acknowledged workload, admitted ones
// with their quota.
//
// The workloads' life is the fleet service's (workloads/); this file parses, authorises and
// renders. Handlers hand the service their work and await it; they never block a worker.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/admin_api.h"
#include "common/result.h"
#include "http/metrics.h"
#include "http/router.h"
#include "workloads/fleet_service.h"

namespace purser::api {

class Fleet {
 public:
  // The API of `service`, which the composition root opened (server/fleet_setup.h: its
  // migrations, manifests, executors and workloads).
  Fleet(const Services& services, std::unique_ptr<workloads::FleetService> service);
  ~Fleet();
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  Result<void> addRoutes(http::Router& router);
  // Registers the fleet's gauges (pending and admitted workloads, quota used and nominal per
  // ClusterQueue, flavor and resource), refreshed at every scrape.
  void addMetrics(http::MetricsRegistry& metrics);

  // The fleet that `current` returns, which may change (replicas sharing a store: the one that
  // leads the fleet now). Each request is answered by the fleet current when it comes, or, when
  // there is none, by `otherwise` (forwarded to the replica that leads).
  using Current = std::function<std::shared_ptr<Fleet>()>;
  static Result<void> addRoutes(http::Router& router, const Services& services, Current current,
                                http::AsyncHandler otherwise);
  // The gauges of the fleet current at each scrape (none while there is none).
  static void addMetrics(http::MetricsRegistry& metrics, Current current);

  // Posts the budget alerts that charging GPU time raised (Services::alerts). Call every second
  // or so; the service meters and schedules on its own thread.
  void tick();

  // Stops the fleet service's thread (before the store closes). Pods keep running.
  void stop();

  // The service, for readers that gather from it on its thread (live diagnosis).
  workloads::FleetService& service() { return *service_; }

  // Warnings from the manifests read at start (unsupported fields), for the log.
  std::vector<std::string> warnings() const;

 private:
  const Services s_;
  std::unique_ptr<workloads::FleetService> service_;
};

}  // namespace purser::api
