// The fleet's part of the composition root: the fleet service's options and its executors (local
// processes behind the pod sandbox, Slurm, Kubernetes) from the configuration, checked against
// this machine (accounts, the data directory's walls, what isolation the kernel allows).
#pragma once

#include <string>
#include <vector>

#include "api/diagnose_api.h"
#include "api/fleet_api.h"
#include "common/result.h"
#include "config/config.h"
#include "server/data_dir.h"

namespace purser::server {

// Reads fleet.* of `config`: the cycle, placement, inventory and bounds, the configured manifests
// (read from their files), the local pods' directories and walls, Slurm's accounts and log
// directory, Kubernetes' credentials; `executors` of the result builds the executors when a fleet
// opens. What is allowed but weakens a wall (fleet.local.isolation: none) is appended to
// `warnings`. An unusable setting is an error naming it.
// Live diagnosis's options: the fleet current at each question, the providers (with whether they
// are scraped, and their GPUs), the narrator's route.
api::DiagnoseOptions liveDiagnosis(const config::Config& config, api::Fleet::Current current_fleet);

Result<api::FleetOptions> fleetSetup(const config::Config& config, const DataDir& data_dir,
                                     const std::string& installation,
                                     std::vector<std::string>& warnings);

}  // namespace purser::server
