// The gateway's side of the fleet's served models: see served_routes.h.
#include "server/served_routes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "config/config.h"
#include "gateway/admission.h"

namespace purser::server {

namespace {

class GatewayRoutes final : public workloads::ServedRoutes {
 public:
  GatewayRoutes(gateway::Gateway& g, const ledger::PriceBook& p, Observer& o,
                const identity::Directory& d)
      : gateway_(g), prices_(p), observer_(o), directory_(d) {}
  Result<void> mayServe(const std::string& alias, const Owner& owner) const override {
    const gateway::Route* route = gateway_.route(alias);
    if (route == nullptr) {
      // No route has the name: the workload's tenant gets one of its own when it joins.
      if (!owner.tenant_id.empty()) return {};
      return fail(Error(ErrorCode::kNotFound,
                        fmt::format("the gateway has no route \"{}\" to serve", alias)));
    }
    const auto tenant = directory_.tenant(owner.tenant_id);
    const auto team = directory_.team(owner.team_id);
    for (const auto& who : route->served_by) {
      const auto slash = who.find('/');
      if (slash == std::string::npos) {
        if (who == owner.tenant_id || (tenant && who == tenant->name)) return {};
      } else if (team && tenant) {
        const std::string t = who.substr(0, slash), name = who.substr(slash + 1);
        if ((t == tenant->name || t == tenant->id) && (name == team->name || name == team->id)) {
          return {};
        }
      } else if (who == owner.team_id) {
        return {};
      }
    }
    return fail(
        Error(ErrorCode::kPermissionDenied,
              route->served_by.empty()
                  ? fmt::format("route \"{}\" is served by no workload (its served_by names no "
                                "tenant or team); a platform admin may add yours",
                                alias)
                  : fmt::format("route \"{}\" is served only by the workloads of {}", alias,
                                fmt::join(route->served_by, ", "))));
  }
  Result<void> join(const std::string& alias, const std::string& id, const std::string& base_url,
                    const std::string& api, const std::string& model,
                    const std::string& metrics_url, const std::string& engine,
                    const Owner& owner) override {
    PURSER_TRY(mayServe(alias, owner));
    const gateway::Route* route = gateway_.route(alias);
    if (route == nullptr) {
      // A model no configured route names: a route of the tenant's own, which only its
      // members see and only its workloads serve (a platform admin shares it by configuring
      // a route of that name).
      auto own = std::make_unique<gateway::Route>();
      own->alias = alias;
      own->owned = true;
      own->allow_tenants = {owner.tenant_id};
      own->served_by = {owner.tenant_id};
      const config::RouteConfig defaults;
      own->max_tokens = defaults.max_tokens;
      own->retries = defaults.retries;
      own->saturation_queue = defaults.saturation_queue;
      own->saturation_kv_cache = defaults.saturation_kv_cache;
      own->queue = std::make_shared<gateway::AdmissionQueue>(
          static_cast<size_t>(defaults.queue_max_waiting));
      own->queue_max_wait = defaults.queue_max_wait;
      if (auto made = gateway_.addRoute(std::move(own))) {
        spdlog::info("fleet: route \"{}\" made for the model tenant {} serves (its own)", alias,
                     owner.tenant_id);
      }
      route = gateway_.route(alias);
      if (route == nullptr) return fail(unavailable("the route could not be made"));
      PURSER_TRY(mayServe(alias, owner));  // one made meanwhile by another tenant is theirs
    }
    // Never free because a replica says so: its own price, else the route's dearest.
    const ledger::TokenPrice* price = prices_.find("fleet", model);
    const auto weight = [](const ledger::TokenPrice* p) {
      return static_cast<__int128>(p->input.nanos()) + p->output.nanos();
    };
    for (const gateway::Target* t : gateway::configuredTargets(*route)) {
      if (prices_.find("fleet", model) != nullptr) break;
      if (t->price != nullptr && (price == nullptr || weight(t->price) > weight(price))) {
        price = t->price;
      }
    }
    if (price == nullptr) {
      return fail(Error(ErrorCode::kFailedPrecondition,
                        fmt::format("its tokens have no price: add a prices entry {{provider: "
                                    "fleet, model: {}}}, or price route \"{}\"'s targets",
                                    model, alias)));
    }
    route->served->join(
        id,
        std::make_unique<gateway::Provider>(
            "fleet:" + id,
            api == "anthropic" ? gateway::ProviderKind::kAnthropic : gateway::ProviderKind::kOpenAi,
            base_url, std::vector<std::string>{}, std::chrono::seconds(120),
            std::chrono::seconds(5)),
        model, price, owner.tenant_id);
    // Scraped like a configured provider's metrics_url, under the target's provider name.
    if (!metrics_url.empty()) observer_.watch("fleet:" + id, metrics_url, engine);
    return {};
  }
  void leave(const std::string& alias, const std::string& id) override {
    if (const gateway::Route* route = gateway_.route(alias)) route->served->leave(id);
    observer_.unwatch("fleet:" + id);
  }
  int64_t inFlight(const std::string& alias, const std::string& id) const override {
    const gateway::Route* route = gateway_.route(alias);
    return route == nullptr ? 0 : route->served->inFlight(id);
  }

 private:
  gateway::Gateway& gateway_;
  const ledger::PriceBook& prices_;
  Observer& observer_;
  const identity::Directory& directory_;
};

}  // namespace

std::unique_ptr<workloads::ServedRoutes> gatewayServedRoutes(gateway::Gateway& gateway,
                                                             const ledger::PriceBook& prices,
                                                             Observer& observer,
                                                             const identity::Directory& directory) {
  return std::make_unique<GatewayRoutes>(gateway, prices, observer, directory);
}

}  // namespace purser::server
