// The MCP gateway made from the configuration's `mcp:` (api/mcp_api.h): an Upstream per server
// (its TLS settings made once), the tool prices.
#pragma once

#include "api/mcp_api.h"
#include "config/config.h"
#include "http/client.h"
#include "http/workers.h"

namespace purser::server {

// Empty servers when `mcp:` names none. Errors: a server's CA file that cannot be used. A server
// whose TLS is not verified is warned of at every start.
Result<api::McpOptions> mcpOptions(const config::Config& config,
                                   http::WorkerLocal<http::HttpClient>& clients,
                                   const Clock& clock);

}  // namespace purser::server
