// The model API's providers and routes from the configuration: see gateway_tables.h.
#include "server/gateway_tables.h"

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include "common/small_file.h"
#include "gateway/admission.h"

namespace purser::server {

Result<gateway::ProviderTls> providerTls(const config::ProviderConfig& p) {
  gateway::ProviderTls out;
  out.ca_file = p.ca_file;
  out.client_certificate = !p.client_cert_file.empty();
  out.insecure_skip_verify = p.insecure_skip_verify;
  if (p.insecure_skip_verify) {
    spdlog::warn(
        "providers: {} ({}) is reached WITHOUT verifying its TLS certificate "
        "(insecure_skip_verify: true): anyone on the path can read its prompts and keys",
        p.name, p.base_url);
  }
  if (p.ca_file.empty() && p.client_cert_file.empty() && !p.insecure_skip_verify) return out;
  http::ClientOptions tls;
  tls.verify_tls = !p.insecure_skip_verify;
  tls.ca_file = p.ca_file;
  if (!p.client_cert_file.empty()) {
    tls.client_cert_pem =
        PURSER_TRY_VALUE(readSmallFile(p.client_cert_file, "the client certificate"));
    tls.client_key_pem = PURSER_TRY_VALUE(readSmallFile(p.client_key_file, "the client key"));
  }
  out.profile = PURSER_TRY_VALUE(http::makeTlsProfile(tls));
  return out;
}

Result<GatewayTables> gatewayTables(const config::Config& config,
                                    const identity::Directory& directory,
                                    const ledger::PriceBook& prices) {
  GatewayTables out;
  auto& providers = out.providers;
  auto& routes = out.routes;
  for (size_t pi = 0; pi < config.providers.size(); ++pi) {
    const auto& p = config.providers[pi];
    auto provider = std::make_unique<gateway::Provider>(
        p.name,
        p.kind == "anthropic" ? gateway::ProviderKind::kAnthropic : gateway::ProviderKind::kOpenAi,
        p.base_url, p.api_keys, p.timeout, p.connect_timeout,
        gateway::ProviderLimits{p.max_response_bytes, p.max_event_bytes});
    auto tls = providerTls(p);
    if (!tls) return fail(tls.error().withField(fmt::format("providers[{}]", pi)));
    provider->setTls(std::move(*tls));
    providers.push_back(std::move(provider));
  }
  for (size_t ri = 0; ri < config.routes.size(); ++ri) {
    const auto& r = config.routes[ri];
    auto route = std::make_unique<gateway::Route>();
    route->alias = r.model;
    route->strategy = *gateway::parseStrategy(r.strategy);  // validated with the configuration
    // allow: names (as the documentation writes them) or ids; a name that matches nothing fails
    // the start instead of quietly locking everyone out.
    for (const auto& who : r.allow_tenants) {
      auto t = directory.tenant(who);
      if (!t) t = directory.tenantByName(who);
      if (!t) {
        return fail(invalidArgument(fmt::format(
            "routes[{}].allow.tenants: \"{}\" names no tenant (create it first, or leave it out)",
            ri, who)));
      }
      route->allow_tenants.push_back(t->id);
    }
    for (const auto& who : r.allow_teams) {
      std::optional<identity::Team> team = directory.team(who);
      if (!team) {
        const size_t slash = who.find('/');
        if (slash != std::string::npos) {
          auto t = directory.tenantByName(who.substr(0, slash));
          if (!t) t = directory.tenant(who.substr(0, slash));
          if (t) team = directory.teamByName(t->id, who.substr(slash + 1));
        } else {
          int matches = 0;
          for (const auto& candidate : directory.teams()) {
            if (candidate.name == who) {
              team = candidate;
              ++matches;
            }
          }
          if (matches > 1) {
            return fail(invalidArgument(fmt::format(
                "routes[{}].allow.teams: \"{}\" is a team of {} tenants; write tenant/team", ri,
                who, matches)));
          }
        }
      }
      if (!team) {
        return fail(invalidArgument(fmt::format(
            "routes[{}].allow.teams: \"{}\" names no team (tenant/team, a team name or an id)", ri,
            who)));
      }
      route->allow_teams.push_back(team->id);
    }
    route->served_by = r.served_by;
    route->max_tokens = r.max_tokens;
    route->retries = r.retries;
    route->slo_ttft_p95 = r.slo_ttft_p95;
    route->slo_itl_p95 = r.slo_itl_p95;
    route->saturation_queue = r.saturation_queue;
    route->saturation_kv_cache = r.saturation_kv_cache;
    route->queue =
        std::make_shared<gateway::AdmissionQueue>(static_cast<size_t>(r.queue_max_waiting));
    route->queue_max_wait = r.queue_max_wait;
    for (const auto& t : r.targets) {
      auto target = std::make_unique<gateway::Target>();
      for (auto& p : providers) {
        if (p->name() == t.provider) target->provider = p.get();
      }
      target->model = t.model;
      target->weight = t.weight;
      target->price = prices.find(t.provider, t.model);
      route->targets.push_back(std::move(target));
    }
    routes.push_back(std::move(route));
  }
  return out;
}

}  // namespace purser::server
