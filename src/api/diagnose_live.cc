#include "api/diagnose_live.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

namespace purser::api {

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

std::string walletScopeName(const identity::Directory& directory, const ledger::Scope& scope) {
  std::string name = scope.id;
  switch (scope.kind) {
    case ledger::ScopeKind::kTenant:
      if (auto t = directory.tenant(scope.id)) name = t->name;
      break;
    case ledger::ScopeKind::kTeam:
      if (auto t = directory.team(scope.id)) name = t->name;
      break;
    case ledger::ScopeKind::kUser:
      if (auto u = directory.user(scope.id)) name = u->name;
      break;
    case ledger::ScopeKind::kServiceAccount:
      if (auto a = directory.serviceAccount(scope.id)) name = a->name;
      break;
    case ledger::ScopeKind::kKey:
      // A key is named by its name only: never its secret, hash or lookup.
      for (const auto& k : directory.keys()) {
        if (k.id == scope.id) name = k.name;
      }
      break;
  }
  return fmt::format("{}:{}", ledger::scopeKindName(scope.kind), name);
}

namespace {

using Kind = CaseRedactor::Kind;

// The kind of object a label names, by its key; nullopt for labels outside tenancy.
std::optional<Kind> labelKind(const std::string& key) {
  static const std::map<std::string, Kind> kKinds = {
      {"tenant", Kind::kTenant},
      {"team", Kind::kTeam},
      {"namespace", Kind::kNamespace},
      {"exported_namespace", Kind::kNamespace},
      {"user", Kind::kUser},
      {"service_account", Kind::kServiceAccount},
      {"key", Kind::kKey},
      {"wallet", Kind::kWallet},
      {"workload", Kind::kWorkload},
      {"route", Kind::kRoute},
      {"model", Kind::kRoute},
      {"model_name", Kind::kRoute},
      {"provider", Kind::kProvider},
      {"deployment", Kind::kProvider},
      {"target", Kind::kProvider},
  };
  auto it = kKinds.find(key);
  if (it == kKinds.end()) return std::nullopt;
  return it->second;
}

const char* placeholderStem(Kind kind) {
  switch (kind) {
    case Kind::kTenant:
      return "another tenant";
    case Kind::kTeam:
      return "another tenant's team";
    case Kind::kNamespace:
      return "another tenant's namespace";
    case Kind::kUser:
      return "another tenant's user";
    case Kind::kServiceAccount:
      return "another tenant's service account";
    case Kind::kKey:
      return "another tenant's key";
    case Kind::kWallet:
      return "another tenant's wallet";
    case Kind::kWorkload:
      return "workload";
    case Kind::kRoute:
      return "another tenant's route";
    case Kind::kProvider:
      return "another tenant's model server";
  }
  return "another tenant's object";
}

}  // namespace

void CaseRedactor::allow(Kind kind, const std::string& name) {
  if (!name.empty()) allowed_.insert({kind, name});
}

void CaseRedactor::hide(Kind kind, const std::string& name) {
  if (!name.empty()) foreign_.insert({kind, name});
}

bool CaseRedactor::foreign(Kind kind, const std::string& name) const {
  return foreign_.contains({kind, name}) && !allowed_.contains({kind, name});
}

std::string CaseRedactor::placeholder(Kind kind, const std::string& name) {
  auto it = given_.find({kind, name});
  if (it != given_.end()) return it->second;
  const int n = ++next_[kind];
  std::string text;
  if (kind == Kind::kWorkload) {
    // NAMESPACE/NAME: its namespace as another tenant's, and a workload of it.
    const size_t slash = name.find('/');
    const std::string ns = slash == std::string::npos ? std::string() : name.substr(0, slash);
    text = (ns.empty() ? std::string("another tenant's namespace")
                       : placeholder(Kind::kNamespace, ns)) +
           fmt::format("/workload #{}", n);
  } else {
    text = fmt::format("{} #{}", placeholderStem(kind), n);
  }
  given_.emplace(std::make_pair(kind, name), text);
  return text;
}

std::optional<std::string> CaseRedactor::rename(Kind kind, const std::string& name) {
  if (!foreign(kind, name)) return std::nullopt;
  return placeholder(kind, name);
}

std::optional<std::string> CaseRedactor::renameScope(const std::string& scope, bool force) {
  static const std::map<std::string, Kind> kScopes = {{"tenant", Kind::kTenant},
                                                      {"team", Kind::kTeam},
                                                      {"user", Kind::kUser},
                                                      {"service_account", Kind::kServiceAccount},
                                                      {"key", Kind::kKey}};
  const size_t colon = scope.find(':');
  if (colon == std::string::npos) return std::nullopt;
  auto kind = kScopes.find(scope.substr(0, colon));
  if (kind == kScopes.end()) return std::nullopt;
  const std::string name = scope.substr(colon + 1);
  if (!force && !foreign(kind->second, name)) return std::nullopt;
  return scope.substr(0, colon + 1) + placeholder(kind->second, name);
}

void CaseRedactor::renameLabels(diagnose::Labels& labels) {
  // A series of another tenant (its `tenant` label says so) is theirs whole: every name in it
  // is renamed, even one the caller has an object of the same name of.
  bool whole = false;
  for (const auto& [k, v] : labels) whole = whole || (k == "tenant" && foreign(Kind::kTenant, v));
  for (auto& [k, v] : labels) {
    if (k == "scope") {
      if (auto r = renameScope(v, whole)) v = *r;
      continue;
    }
    const auto kind = labelKind(k);
    if (!kind || v.empty()) continue;
    // In their series, who they are is theirs (even a name the caller's objects share); routes
    // and model servers are renamed only when they are not the caller's to see.
    const bool identity = *kind != Kind::kRoute && *kind != Kind::kProvider;
    if (foreign(*kind, v) || (whole && identity)) v = placeholder(*kind, v);
  }
}

void CaseRedactor::apply(diagnose::Case& c) {
  // The inventory: its objects by their fields.
  for (auto& team : c.inventory.teams) {
    if (foreign(Kind::kTenant, team.tenant)) {
      team.name = placeholder(Kind::kTeam, team.name);
      team.tenant = placeholder(Kind::kTenant, team.tenant);
    }
  }
  for (auto& w : c.inventory.workloads) {
    if (!foreign(Kind::kWorkload, w.id())) continue;
    const std::string renamed = placeholder(Kind::kWorkload, w.id());
    const size_t slash = renamed.rfind('/');
    w.ns = renamed.substr(0, slash);
    w.name = renamed.substr(slash + 1);
  }
  for (auto& d : c.inventory.deployments) {
    if (auto r = rename(Kind::kProvider, d.name)) d.name = *r;
    if (auto r = rename(Kind::kProvider, d.provider)) d.provider = *r;
    if (auto r = rename(Kind::kRoute, d.route)) d.route = *r;
  }
  // Series: by their labels' keys.
  for (auto& series : c.series) renameLabels(series.labels);
  // Events: the object and the actor by the kinds they may be; an event of something foreign
  // keeps its time, kind and reason, and its message (free text) is not shown.
  const auto renameObject = [&](std::string& object, std::initializer_list<Kind> kinds) {
    if (object.empty()) return false;
    if (auto r = renameScope(object, false)) {
      object = *r;
      return true;
    }
    for (Kind k : kinds) {
      if (auto r = rename(k, object)) {
        object = *r;
        return true;
      }
    }
    // ROUTE/TARGET (a gateway event's object).
    const size_t slash = object.find('/');
    if (slash == std::string::npos) return false;
    auto route = rename(Kind::kRoute, object.substr(0, slash));
    auto target = rename(Kind::kProvider, object.substr(slash + 1));
    if (!route && !target) return false;
    object =
        route.value_or(object.substr(0, slash)) + "/" + target.value_or(object.substr(slash + 1));
    return true;
  };
  for (auto& e : c.events) {
    bool renamed = renameObject(
        e.object, {Kind::kWorkload, Kind::kProvider, Kind::kRoute, Kind::kTeam, Kind::kNamespace,
                   Kind::kUser, Kind::kServiceAccount, Kind::kKey, Kind::kTenant, Kind::kWallet});
    renamed =
        renameObject(e.actor, {Kind::kUser, Kind::kServiceAccount, Kind::kKey, Kind::kWorkload}) ||
        renamed;
    if (renamed) e.message.clear();
  }
  // Logs of another tenant's workload or model server are not theirs to read at all.
  std::erase_if(c.logs, [&](const diagnose::LogLine& l) {
    return foreign(Kind::kWorkload, l.source) || foreign(Kind::kProvider, l.source);
  });
}

}  // namespace purser::api
