// ServedRoutes: where the replicas of models the fleet serves join — the gateway's routes, behind
// an interface the server wires (the fleet service never includes the gateway).
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace purser::workloads {

class ServedRoutes {
 public:
  virtual ~ServedRoutes() = default;
  // Who serves it: the tenant and team whose workload a replica is.
  struct Owner {
    std::string tenant_id, team_id;
  };
  // May a workload of `owner` serve route `alias` (its `served_by` names the tenant or the team)?
  // kNotFound when there is no such route, kPermissionDenied (saying who may) when it may not.
  virtual Result<void> mayServe(const std::string& alias, const Owner& owner) const = 0;
  // Makes replica `id` (at `base_url`, speaking `api`: openai or anthropic, answering to upstream
  // `model`) of `owner` a target of route `alias`; refused as mayServe() refuses, and when the
  // replica's tokens have no price. `metrics_url` ("" for none) is scraped for its load and
  // health, as `engine` writes them.
  virtual Result<void> join(const std::string& alias, const std::string& id,
                            const std::string& base_url, const std::string& api,
                            const std::string& model, const std::string& metrics_url,
                            const std::string& engine, const Owner& owner) = 0;
  // No new request goes to it.
  virtual void leave(const std::string& alias, const std::string& id) = 0;
  // Its requests still in flight.
  virtual int64_t inFlight(const std::string& alias, const std::string& id) const = 0;
};

}  // namespace purser::workloads
