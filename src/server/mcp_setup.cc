#include "server/mcp_setup.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace purser::server {

Result<api::McpOptions> mcpOptions(const config::Config& config,
                                   http::WorkerLocal<http::HttpClient>& clients,
                                   const Clock& clock) {
  api::McpOptions out;
  for (const auto& s : config.mcp.servers) {
    mcp::UpstreamOptions o;
    o.name = s.name;
    o.url = s.url;
    o.headers = s.headers;
    o.bearer = s.api_key;
    o.caller_header = s.caller_header;
    o.log_bodies = s.log_bodies;
    o.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(s.timeout);
    o.max_result_bytes = s.max_result_bytes;
    if (!s.ca_file.empty() || s.insecure_skip_verify) {
      http::ClientOptions tls;
      tls.ca_file = s.ca_file;
      tls.verify_tls = !s.insecure_skip_verify;
      auto profile = http::makeTlsProfile(tls);
      if (!profile) {
        return fail(
            invalidArgument(fmt::format("mcp.servers {}: {}", s.name, profile.error().message)));
      }
      o.tls = *profile;
    }
    if (s.insecure_skip_verify) {
      const std::string line = fmt::format(
          "mcp server {} is called without verifying its TLS certificate "
          "(insecure_skip_verify): anyone on the path can read and change its tool calls",
          s.name);
      spdlog::warn("mcp: {}", line);
    }
    out.servers.push_back(std::make_shared<mcp::Upstream>(std::move(o), clients, clock));
  }
  for (const auto& p : config.mcp.prices) {
    out.prices.push_back({p.server, p.tool, p.per_call, p.per_second});
  }
  return out;
}

void applyMcpCredentials(
    const std::vector<std::pair<std::string, std::vector<std::string>>>& stored,
    const std::vector<std::shared_ptr<mcp::Upstream>>& servers) {
  for (const auto& server : servers) {
    const std::string name = std::string(api::kStoredPrefix) + server->options().name;
    std::optional<std::string> credential;
    for (const auto& [stored_name, keys] : stored) {
      if (stored_name == name && !keys.empty()) credential = keys.front();
    }
    server->setCredential(std::move(credential));
  }
}

}  // namespace purser::server
