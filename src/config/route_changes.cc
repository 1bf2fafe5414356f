#include "config/route_changes.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace purser::config {

namespace {

std::string targetName(const TargetConfig& t) {
  return t.model.empty() ? t.provider : t.provider + "/" + t.model;
}

std::string targetList(const RouteConfig& r) {
  std::vector<std::string> names;
  for (const auto& t : r.targets) names.push_back(targetName(t));
  return fmt::format("[{}]", fmt::join(names, ", "));
}

std::string weights(const RouteConfig& r) {
  std::vector<std::string> w;
  for (const auto& t : r.targets) w.push_back(std::to_string(t.weight));
  return fmt::format("{}", fmt::join(w, "/"));
}

std::string list(const std::vector<std::string>& v) {
  return v.empty() ? "all" : fmt::format("[{}]", fmt::join(v, ", "));
}

std::string millis(Duration d) {
  return fmt::format("{}ms", std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

std::string describe(const RouteConfig& a, const RouteConfig& b) {
  std::vector<std::string> parts;
  if (targetList(a) != targetList(b)) {
    parts.push_back(fmt::format("targets: {} -> {}", targetList(a), targetList(b)));
  }
  if (weights(a) != weights(b)) {
    parts.push_back(fmt::format("weights {} -> {}", weights(a), weights(b)));
  }
  if (a.strategy != b.strategy) {
    parts.push_back(fmt::format("strategy: {} -> {}", a.strategy, b.strategy));
  }
  if (a.retries != b.retries)
    parts.push_back(fmt::format("retries {} -> {}", a.retries, b.retries));
  if (a.max_tokens != b.max_tokens) {
    parts.push_back(fmt::format("max_tokens {} -> {}", a.max_tokens, b.max_tokens));
  }
  if (a.allow_tenants != b.allow_tenants) {
    parts.push_back(
        fmt::format("allow_tenants {} -> {}", list(a.allow_tenants), list(b.allow_tenants)));
  }
  if (a.allow_teams != b.allow_teams) {
    parts.push_back(fmt::format("allow_teams {} -> {}", list(a.allow_teams), list(b.allow_teams)));
  }
  if (a.served_by != b.served_by) {
    parts.push_back(fmt::format("served_by {} -> {}", list(a.served_by), list(b.served_by)));
  }
  if (a.slo_ttft_p95 != b.slo_ttft_p95) {
    parts.push_back(
        fmt::format("slo ttft_p95 {} -> {}", millis(a.slo_ttft_p95), millis(b.slo_ttft_p95)));
  }
  if (a.slo_itl_p95 != b.slo_itl_p95) {
    parts.push_back(
        fmt::format("slo itl_p95 {} -> {}", millis(a.slo_itl_p95), millis(b.slo_itl_p95)));
  }
  if (a.saturation_queue != b.saturation_queue) {
    parts.push_back(
        fmt::format("saturation queue {} -> {}", a.saturation_queue, b.saturation_queue));
  }
  if (a.saturation_kv_cache != b.saturation_kv_cache) {
    parts.push_back(
        fmt::format("saturation kv_cache {} -> {}", a.saturation_kv_cache, b.saturation_kv_cache));
  }
  if (a.queue_max_wait != b.queue_max_wait) {
    parts.push_back(
        fmt::format("queue max_wait {} -> {}", millis(a.queue_max_wait), millis(b.queue_max_wait)));
  }
  if (a.queue_max_waiting != b.queue_max_waiting) {
    parts.push_back(
        fmt::format("queue max_waiting {} -> {}", a.queue_max_waiting, b.queue_max_waiting));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

const RouteConfig* find(const std::vector<RouteConfig>& routes, const std::string& model) {
  auto it = std::find_if(routes.begin(), routes.end(),
                         [&](const RouteConfig& r) { return r.model == model; });
  return it == routes.end() ? nullptr : &*it;
}

}  // namespace

std::vector<RouteChange> routeChanges(const std::vector<RouteConfig>& before,
                                      const std::vector<RouteConfig>& after) {
  std::vector<RouteChange> out;
  for (const RouteConfig& b : after) {
    const RouteConfig* a = find(before, b.model);
    if (a == nullptr) {
      out.push_back({b.model, "route.create", fmt::format("targets: [] -> {}", targetList(b))});
      continue;
    }
    std::string change = describe(*a, b);
    if (!change.empty()) out.push_back({b.model, "route.update", std::move(change)});
  }
  for (const RouteConfig& a : before) {
    if (find(after, a.model) == nullptr) {
      out.push_back({a.model, "route.delete", fmt::format("targets: {} -> []", targetList(a))});
    }
  }
  return out;
}

}  // namespace purser::config
