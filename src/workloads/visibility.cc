// Who may see which workloads: see visibility.h.
#include "workloads/visibility.h"

namespace purser::workloads {

using identity::Principal;
using identity::Role;

std::string bareName(const std::string& name) {
  const size_t slash = name.find('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

bool mayAccess(const Principal& who, const std::string& tenant_id, const std::string& team_id) {
  switch (who.role) {
    case Role::kPlatformAdmin:
      return true;
    case Role::kTenantAdmin:
      return who.tenant_id == tenant_id;
    default:
      return who.tenant_id == tenant_id && !who.team_id.empty() && who.team_id == team_id;
  }
}

Visibility visibilityOf(const Principal& who) {
  switch (who.role) {
    case Role::kPlatformAdmin:
      return {};
    case Role::kTenantAdmin:
      return {who.tenant_id, ""};
    default:
      // No team: nothing (an id no row has).
      return {who.tenant_id, who.team_id.empty() ? std::string("-") : who.team_id};
  }
}

std::set<std::string> visibleQueues(const identity::Directory& directory, const FleetService& svc,
                                    const Principal& who) {
  std::set<std::string> namespaces;
  for (const auto& team : directory.teams()) {
    if (team.tenant_id != who.tenant_id) continue;
    if (who.role == Role::kTenantAdmin || team.id == who.team_id) {
      namespaces.insert(svc.namespaceOf(team.tenant_id, team.name));
    }
  }
  std::set<std::string> out;
  for (const auto& lq : svc.manifests().local_queues) {
    if (namespaces.count(lq.namespace_) != 0) out.insert(lq.cluster_queue);
  }
  return out;
}

}  // namespace purser::workloads
