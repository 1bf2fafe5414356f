// How the fleet reads in JSON: workloads, their "why" in sentences, queues and nodes. Rendering
// only; the state comes from the fleet service (workloads/), read on its thread.
#pragma once

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "fleet/engine.h"
#include "identity/directory.h"
#include "identity/identity.h"
#include "workloads/fleet_service.h"
#include "workloads/visibility.h"

namespace purser::api {

// An amount in milli-units as a Kubernetes quantity: "2", "500m", "512Gi".
std::string quantityText(fleet::Amount milli);

// A workload as the API shows it (live ones with their place in the queue).
nlohmann::json workloadView(const workloads::FleetService& svc, const workloads::Record& r);

// The structured reasons of GET .../why in words.
nlohmann::json whySentences(const nlohmann::json& why);
// The engine's explanation of a workload (GET .../why before the caller's view is applied).
nlohmann::json explanationJson(const fleet::Explanation& e);

nlohmann::json queueView(const fleet::QueueStatus& q);

// The inventory and what is placed on it: each GPU's shares as "team/workload" with its tenant's
// name; another team's workloads show as shares without either.
nlohmann::json nodesView(const workloads::FleetService& svc, const identity::Directory& directory,
                         const identity::Principal& who);

// A live workload charged for GPU time, as the utilisation report shows it; gathered on the
// fleet's thread.
struct LiveGpuUse {
  std::string name;  // inside Purser
  std::string tenant_id, team_id, state;
  bool visible = false;          // the caller may name it
  nlohmann::json gpus;           // [{node, index, gpu_milli, utilisation}], its placement now
  int64_t unmetered_gpu_ms = 0;  // GPU time not yet charged (since its last metering)
  workloads::LiveUtilisation use;
};
std::vector<LiveGpuUse> liveGpuUse(const workloads::FleetService& svc,
                                   const identity::Principal& who, int64_t now_ms);

// GET /api/v1/fleet/utilisation: per workload, what was recorded with its charges since `from_ms`
// and what its GPUs did since its last metering; the caller's workloads by name, other teams'
// live ones (as on the node map) without.
nlohmann::json utilisationView(const std::vector<LiveGpuUse>& live,
                               const std::vector<workloads::UtilisationRow>& stored,
                               const identity::Directory& directory, const identity::Principal& who,
                               int64_t from_ms);

}  // namespace purser::api
