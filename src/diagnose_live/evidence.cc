#include "diagnose_live/evidence.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "common/json.h"

namespace purser::diagnose_live {

namespace {

bool counterName(std::string_view name) {
  return name.ends_with("_total") || name.ends_with("_count") || name.ends_with("_sum") ||
         name.ends_with("_bucket");
}

std::string stripPrefix(const std::string& text, std::string_view prefix) {
  return text.starts_with(prefix) ? text.substr(prefix.size()) : text;
}

}  // namespace

std::vector<diagnose::Series> seriesInWindow(const observe::SeriesStore& store, int64_t from_ms,
                                             int64_t to_ms, const WindowLimits& limits) {
  struct Raw {
    observe::SeriesKey key;
    std::vector<observe::Point> points;
  };
  std::vector<Raw> raw;
  size_t samples = 0;
  int64_t oldest = to_ms;
  for (const std::string& name : store.names()) {
    for (observe::SeriesKey& key : store.select(name, {})) {
      if (raw.size() >= limits.max_series || samples >= limits.max_samples) break;
      const observe::Range r =
          store.range(key, from_ms, to_ms,
                      counterName(name) ? observe::RollupValue::kLast : observe::RollupValue::kAvg);
      std::vector<observe::Point> points;
      points.reserve(r.points.size());
      for (const observe::Point& p : r.points) {
        if (!std::isnan(p.value)) points.push_back(p);
      }
      if (points.empty()) continue;
      oldest = std::min(oldest, points.front().t_ms);
      samples += points.size();
      raw.push_back({std::move(key), std::move(points)});
    }
  }
  std::vector<diagnose::Series> out;
  if (raw.empty()) return out;
  const int64_t span = std::max<int64_t>(0, to_ms - oldest);
  const int64_t interval = std::max<int64_t>(1, store.limits().raw_interval_ms);
  const int64_t max_points = static_cast<int64_t>(std::max<size_t>(2, limits.max_points));
  int64_t step = std::max(interval, (span + max_points - 2) / (max_points - 1));
  step = std::max<int64_t>(step, 1);
  // Grid points oldest + k * step for k = 0.. while <= to_ms.
  out.reserve(raw.size());
  for (Raw& r : raw) {
    diagnose::Series s;
    s.name = r.key.name();
    s.labels = r.key.labels();
    size_t i = 0;
    const int64_t first_k = (r.points.front().t_ms - oldest + step - 1) / step;
    for (int64_t k = first_k; oldest + k * step <= to_ms && i < r.points.size(); ++k) {
      const int64_t g = oldest + k * step;
      std::optional<double> v;
      while (i < r.points.size() && r.points[i].t_ms <= g) {
        if (r.points[i].t_ms > g - step) v = r.points[i].value;
        ++i;
      }
      if (v) {
        s.t.push_back(g);
        s.v.push_back(*v);
      }
    }
    if (!s.t.empty()) out.push_back(std::move(s));
  }
  return out;
}

std::optional<diagnose::Event> fleetEvent(const workloads::EventRow& row) {
  auto t = diagnose::parseTime(row.at);
  if (!t) return std::nullopt;
  diagnose::Event e;
  e.time = *t;
  e.source = "fleet";
  e.kind = row.kind;
  e.reason = row.reason;
  e.actor = row.by;
  e.object = row.workload;
  e.message = row.message;
  if (row.kind == "Failed" || row.kind == "Succeeded") {
    e.kind = "Finished";
    e.reason = row.kind;
  } else if (row.kind == "Waiting") {
    e.kind = "Pending";
  } else if (row.kind == "Admitted" && e.reason.empty()) {
    e.reason = "QuotaReserved";
  }
  return e;
}

std::optional<diagnose::Event> auditEvent(
    const ledger::AuditEntry& a,
    const std::function<std::optional<std::pair<std::string, bool>>(const std::string&)>&
        wallet_scope,
    const std::function<std::string(const std::string&)>& actor_name) {
  auto t = diagnose::parseTime(a.at);
  if (!t) return std::nullopt;
  diagnose::Event e;
  e.time = *t;
  e.source = "audit";
  e.kind = a.action;
  e.actor = actor_name ? actor_name(a.actor) : a.actor;
  const auto after = parseJson(a.after.empty() ? "{}" : a.after);
  const bool after_object = after && after->is_object();
  if (a.action.starts_with("route.") || a.action.starts_with("deployment.") ||
      a.action.starts_with("provider.")) {
    const size_t colon = a.target.find(':');
    e.object = colon == std::string::npos ? a.target : a.target.substr(colon + 1);
    if (after_object && after->contains("change") && (*after)["change"].is_string()) {
      e.message = (*after)["change"].get<std::string>();
    } else {
      e.message = a.before.empty() ? a.after : a.before + " -> " + a.after;
    }
    return e;
  }
  if (a.action == "fleet.apply") {
    e.object = stripPrefix(a.target, "manifests:");
    e.message = "Kueue objects applied";
    return e;
  }
  if (a.action == "budget.alert") {
    const std::string wallet = stripPrefix(a.target, "wallet:");
    auto scope = wallet_scope ? wallet_scope(wallet) : std::nullopt;
    e.kind = "wallet.alert";
    e.object = scope ? scope->first : "wallet:" + wallet;
    int64_t threshold = 0;
    std::string spent, limit;
    if (after_object) {
      if (auto it = after->find("threshold"); it != after->end() && it->is_number()) {
        threshold = it->get<int64_t>();
      }
      if (auto it = after->find("spent"); it != after->end() && it->is_string()) {
        spent = it->get<std::string>();
      }
      if (auto it = after->find("limit"); it != after->end() && it->is_string()) {
        limit = it->get<std::string>();
      }
    }
    e.message = fmt::format("wallet {} at {}% of its limit", e.object, threshold);
    if (!spent.empty()) e.message += fmt::format(" ({} of {})", spent, limit);
    if (threshold >= 100 && scope && scope->second) e.message += "; hard limit reached";
    return e;
  }
  return std::nullopt;
}

diagnose::Event gatewayEvent(const gateway::GatewayEvent& g) {
  diagnose::Event e;
  e.time = g.time_ms;
  e.source = "gateway";
  e.kind = g.kind;
  e.object = g.object;
  e.message = g.message;
  return e;
}

}  // namespace purser::diagnose_live
