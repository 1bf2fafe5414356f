// SIGHUP: the configuration read again and what may change without a restart applied — the
// targets, weights and strategy of the routes that exist (audited as route changes, with whether
// they are in force now or at the next start) and the providers' configured keys (keys set
// through the API keep precedence). New and removed routes and providers, and a route's other
// settings, take effect at the next start.
#pragma once

#include <utility>
#include <vector>

#include "api/admin_api.h"
#include "config/config.h"
#include "gateway/gateway.h"

namespace purser::server {

class Reload {
 public:
  // `routes`: the routes as the configuration the server started with writes them.
  Reload(std::vector<config::RouteConfig> routes, gateway::Gateway& gateway,
         const api::Services& services)
      : configured_(std::move(routes)), gateway_(gateway), services_(services) {}

  // Applies `fresh`, the configuration as it reads now (already checked). On one worker only.
  void apply(const config::Config& fresh);

 private:
  std::vector<config::RouteConfig> configured_;  // on the worker that runs apply()
  gateway::Gateway& gateway_;
  const api::Services& services_;
};

}  // namespace purser::server
