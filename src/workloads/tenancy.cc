// Tenancy: see tenancy.h.
#include "workloads/tenancy.h"

#include <optional>
#include <tuple>

namespace purser::workloads {

std::string Tenancy::owningTenant(const std::string& name) const {
  if (auto given = manifests_.namespaces.find(name); given != manifests_.namespaces.end()) {
    if (auto t = given->second.find("purser.dev/tenant"); t != given->second.end()) {
      if (auto tenant = directory_.tenantByName(t->second)) return tenant->id;
    }
  }
  std::optional<identity::Team> first;
  for (const auto& team : directory_.teams()) {
    if (team.name != name) continue;
    if (!first || std::tie(team.created_at, team.id) < std::tie(first->created_at, first->id)) {
      first = team;
    }
  }
  return first ? first->tenant_id : std::string();
}

std::string Tenancy::namespaceOf(const std::string& tenant_id, const std::string& name) const {
  if (tenant_id.empty() || name.find('@') != std::string::npos) return name;
  const std::string owner = owningTenant(name);
  return owner.empty() || owner == tenant_id ? name : name + "@" + tenant_id;
}

std::map<std::string, std::string> Tenancy::labelsOf(const std::string& ns,
                                                     const std::string& tenant_id) const {
  std::map<std::string, std::string> labels = {{"kubernetes.io/metadata.name", ns}};
  if (auto tenant = directory_.tenant(tenant_id)) labels["purser.dev/tenant"] = tenant->name;
  if (auto given = manifests_.namespaces.find(ns); given != manifests_.namespaces.end()) {
    for (const auto& [k, v] : given->second) labels[k] = v;
  }
  return labels;
}

}  // namespace purser::workloads
