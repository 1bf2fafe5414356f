// The model API's providers and routes as the configuration writes them, ready for the gateway:
// each route's allow lists resolved to tenant and team ids (a name that matches nothing fails the
// start instead of quietly locking everyone out), its targets priced, each provider's TLS set.
#pragma once

#include <memory>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "gateway/gateway.h"
#include "identity/directory.h"
#include "ledger/price.h"

namespace purser::server {

struct GatewayTables {
  std::vector<std::unique_ptr<gateway::Provider>> providers;
  std::vector<std::unique_ptr<gateway::Route>> routes;  // their targets point into `providers`
};

// How a provider's HTTPS is checked: its CA file and client certificate read into a TLS profile
// of its own (none when it uses the system's trust store), and a warning logged at every start
// for one that is not verified.
Result<gateway::ProviderTls> providerTls(const config::ProviderConfig& p);

Result<GatewayTables> gatewayTables(const config::Config& config,
                                    const identity::Directory& directory,
                                    const ledger::PriceBook& prices);

}  // namespace purser::server
