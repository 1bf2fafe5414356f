// The gateway's side of the fleet's served models: a replica the fleet runs joins its route as a
// target (provider "fleet:NS/NAME/POD", priced by a prices entry of provider "fleet" and its model,
// else at the route's dearest configured target), only on routes whose served_by names the
// workload's tenant or team; a model no configured route names gets a route of the tenant's own.
// Its metrics are scraped like a configured provider's.
#pragma once

#include <memory>

#include "gateway/gateway.h"
#include "identity/directory.h"
#include "ledger/price.h"
#include "server/observer.h"
#include "workloads/fleet_service.h"

namespace purser::server {

std::unique_ptr<workloads::ServedRoutes> gatewayServedRoutes(gateway::Gateway& gateway,
                                                             const ledger::PriceBook& prices,
                                                             Observer& observer,
                                                             const identity::Directory& directory);

}  // namespace purser::server
