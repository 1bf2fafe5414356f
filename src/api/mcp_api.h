// The MCP gateway's door: POST /mcp (one JSON-RPC message per request; mcp/front.h answers it)
// for a caller authenticated by an API key, whose `tools` allow-list says what they see and
// call; each tool call priced (`mcp.prices`: per call, and per second of call time) and held on
// the caller's wallets and rate limits before it runs, settled after, and recorded as a usage
// event (model "server.tool", route "mcp", provider "mcp:server", the x-purser-session).
// GET /mcp answers 405: there is no server-initiated stream. DELETE /mcp answers 405: there is
// no session to end (the endpoint keeps none).
#pragma once

#include <utility>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/admin_api.h"
#include "common/money.h"
#include "http/router.h"
#include "mcp/front.h"

namespace purser::api {

// What a tool call costs: per call, and per second it ran.
struct ToolPrice {
  std::string server;
  std::string tool;  // "*": every tool of the server without a price of its own
  Money per_call;
  Money per_second;
};

struct McpOptions {
  std::vector<std::shared_ptr<mcp::Upstream>> servers;
  std::vector<ToolPrice> prices;
  std::string version = "1";
};

// A server's credential set through the API is kept sealed among the provider keys under this
// prefix and its server's name.
inline constexpr std::string_view kStoredPrefix = "mcp:";

// POST /mcp (when `options` has servers), and for platform admins GET /api/v1/mcp/servers and
// PUT/DELETE /api/v1/mcp/servers/{name}/credential.
Result<void> addMcpRoutes(http::Router& router, const Services& s, McpOptions options);

}  // namespace purser::api
