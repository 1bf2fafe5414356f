// The fleet's part of the composition root: the fleet service's options and its executors (local
// processes behind the pod sandbox, Slurm, Kubernetes) from the configuration, checked against
// this machine (accounts, the data directory's walls, what isolation the kernel allows).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/diagnose_api.h"
#include "api/fleet_api.h"
#include "common/result.h"
#include "config/config.h"
#include "ledger/audit.h"
#include "server/data_dir.h"
#include "store/store.h"
#include "workloads/fleet_service.h"

namespace purser::server {

// What a fleet is opened with (a replica that takes the lead later opens its own from the same).
struct FleetSetup {
  workloads::Options service;
  // Builds the executors the service runs pods with (local processes, Slurm, Kubernetes);
  // `nudge` wakes the service when a pod changes.
  std::function<Result<workloads::Executors>(const Clock& clock,
                                             const std::function<void()>& nudge)>
      executors;
  // Where served models' replicas join (the gateway's routes); none: they join nothing.
  workloads::ServedRoutes* served = nullptr;
  // How busy the GPUs are (the DCGM exporters); none: utilisation is unknown.
  const fleet::GpuUtilisation* gpu_utilisation = nullptr;
};

// Reads fleet.* of `config`: the cycle, placement, inventory and bounds, the configured manifests
// (read from their files), the local pods' directories and walls, Slurm's accounts and log
// directory, Kubernetes' credentials; `executors` of the result builds the executors when a fleet
// opens. What is allowed but weakens a wall (fleet.local.isolation: none) is appended to
// `warnings`. An unusable setting is an error naming it.
// Live diagnosis's options: the fleet current at each question, the providers (with whether they
// are scraped, and their GPUs), the narrator's route.
api::DiagnoseOptions liveDiagnosis(const config::Config& config, api::Fleet::Current current_fleet);

Result<FleetSetup> fleetSetup(const config::Config& config, const DataDir& data_dir,
                              const std::string& installation, std::vector<std::string>& warnings);

// Opens the fleet service — its migrations, the configured and applied manifests, the workloads
// in the store, its executors built — and its API over `services`. Budget alerts that charging
// GPU time raises are audited as the fleet's inside its writes. An invalid manifest is an error
// naming it.
Result<std::unique_ptr<api::Fleet>> openFleet(const api::Services& services, store::Store& store,
                                              ledger::AuditLog& audit, FleetSetup setup);

}  // namespace purser::server
