#include "diagnose_live/redactor.h"

#include <fmt/format.h>

#include <map>

namespace purser::diagnose_live {

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

}  // namespace purser::diagnose_live
