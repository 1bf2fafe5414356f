// SIGHUP's reload: see reload.h.
#include "server/reload.h"

#include <algorithm>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/json.h"
#include "config/route_changes.h"
#include "ledger/audit.h"

namespace purser::server {

void Reload::apply(const config::Config& fresh) {
  // Route changes are audited, so that what changed, and when, is on the record for
  // operators and for diagnosis. The targets, weights and strategy of a route that exists
  // take effect at once; new and removed routes, and a route's other settings, at the
  // next start.
  auto changes = config::routeChanges(configured_, fresh.routes);
  std::vector<std::string> applied;
  for (const auto& c : changes) {
    if (c.action != "route.update") {
      spdlog::info("reload: route \"{}\": {} (takes effect at the next start)", c.route, c.change);
      continue;
    }
    const config::RouteConfig* now = nullptr;
    const config::RouteConfig* before = nullptr;
    for (const auto& r : fresh.routes) {
      if (r.model == c.route) now = &r;
    }
    for (const auto& r : configured_) {
      if (r.model == c.route) before = &r;
    }
    if (now == nullptr || before == nullptr) continue;
    std::vector<gateway::TargetSpec> specs;
    for (const auto& t : now->targets) specs.push_back({t.provider, t.model, t.weight});
    auto done = gateway_.reloadRoute(c.route, *gateway::parseStrategy(now->strategy), specs);
    if (!done) {
      spdlog::warn("reload: route \"{}\": {}; its targets stay as they were until a restart",
                   c.route, done.error().message);
      continue;
    }
    config::RouteConfig rest = *before;
    rest.targets = now->targets;
    rest.strategy = now->strategy;
    const bool all = config::routeChanges({rest}, {*now}).empty();
    spdlog::info("reload: route \"{}\": {} ({})", c.route, c.change,
                 all ? "in force now"
                     : "targets and strategy in force now; its other settings at the next "
                       "start");
    applied.push_back(c.route);
  }
  configured_ = fresh.routes;
  if (!changes.empty()) {
    std::vector<ledger::AuditEntry> entries;
    for (const auto& c : changes) {
      ledger::AuditEntry e;
      e.actor = "system";
      e.actor_role = "system";
      e.action = c.action;
      e.target = "route:" + c.route;
      const bool live = std::find(applied.begin(), applied.end(), c.route) != applied.end();
      e.after = writeJson(nlohmann::json{{"change", c.change},
                                         {"source", "configuration reload"},
                                         {"applied", live ? "now" : "next start"}});
      entries.push_back(std::move(e));
    }
    services_.records.commit({}, std::move(entries), [](Result<void> r) {
      if (!r) spdlog::error("reload: a route change was not audited: {}", r.error().message);
    });
  }
  size_t updated = 0;
  for (const auto& p : fresh.providers) {
    gateway::Provider* provider = gateway_.provider(p.name);
    if (provider == nullptr) {
      spdlog::warn("reload: provider \"{}\" is new; it is used after a restart", p.name);
      continue;
    }
    provider->setConfiguredKeys(p.api_keys);
    if (provider->keysReplaced()) {
      spdlog::info("reload: provider \"{}\" keeps the keys set through the API", p.name);
    }
    ++updated;
  }
  spdlog::info(
      "reload: configuration re-read; keys of {} provider(s) updated, targets of {} "
      "route(s) in force (other changes take effect at the next start)",
      updated, applied.size());
}

}  // namespace purser::server
