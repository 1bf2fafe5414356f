// Who may see which workloads: the rules the fleet API and live diagnosis both scope by. A
// platform admin sees everything; a tenant admin their tenant's; anyone else their own team's.
//
// Thread-safety: pure functions; visibleQueues() reads the service's state, so it runs on the
// service's thread (FleetService::call).
#pragma once

#include <set>
#include <string>

#include "identity/directory.h"
#include "identity/identity.h"
#include "workloads/fleet_service.h"

namespace purser::workloads {

// The bare name of "namespace/name".
std::string bareName(const std::string& name);

// May `who` see (and delete) workloads owned by this tenant and team?
bool mayAccess(const identity::Principal& who, const std::string& tenant_id,
               const std::string& team_id);

// Which stored rows (ended workloads, events) `who` may read.
Visibility visibilityOf(const identity::Principal& who);

// The ClusterQueues `who` may see: those with a LocalQueue in a namespace of theirs (their
// tenant's teams for a tenant admin, their own team otherwise).
std::set<std::string> visibleQueues(const identity::Directory& directory, const FleetService& svc,
                                    const identity::Principal& who);

}  // namespace purser::workloads
