// What a configuration reload changes in the model routes, in words an operator (and the
// diagnosis engine, reading the audit log) can follow: "targets: [a, b] -> [a]",
// "weights 50/50 -> 90/10", "strategy: fallback -> weighted".
//
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/config.h"

namespace purser::config {

struct RouteChange {
  std::string route;   // the alias
  std::string action;  // route.create, route.update, route.delete
  std::string change;  // "targets: [a, b] -> [a]; weights 50/50 -> 100"
};

// The routes that differ between two configurations, in `after`'s order (deleted ones last).
std::vector<RouteChange> routeChanges(const std::vector<RouteConfig>& before,
                                      const std::vector<RouteConfig>& after);

}  // namespace purser::config
