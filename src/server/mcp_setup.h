// The MCP gateway made from the configuration's `mcp:` (api/mcp_api.h): an Upstream per server
// (its TLS settings made once), the tool prices.
#pragma once

#include <utility>

#include <memory>
#include <string>
#include <vector>

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

// Gives each server the credential stored for it through the API (api::kStoredPrefix + name
// among the stored provider keys), and the configuration's back to those with none stored.
void applyMcpCredentials(
    const std::vector<std::pair<std::string, std::vector<std::string>>>& stored,
    const std::vector<std::shared_ptr<mcp::Upstream>>& servers);

}  // namespace purser::server
