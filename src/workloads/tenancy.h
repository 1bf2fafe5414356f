// Tenancy: which tenant a namespace is, for the fleet service (fleet_service.h) — a part of it,
// testable without it.
//
// Namespaces are per tenant: two tenants' teams of one name are two namespaces, and neither
// learns of the other. The name belongs to one tenant — the one a `v1 Namespace` object of the
// manifests labels `purser.dev/tenant`, else the tenant whose team took the name first — and is
// that tenant's namespace as it is; another tenant's team of the name has the namespace
// "NAME@TENANT-ID" inside Purser, shown to that tenant as NAME (shownText, record.h).
//
// Reads the directory and the manifests' Namespace objects as they are at each call. Not
// thread-safe beyond what they are: the fleet service's thread uses it.
#pragma once

#include <map>
#include <string>

#include "fleet_io/manifest.h"
#include "identity/directory.h"

namespace purser::workloads {

class Tenancy {
 public:
  // `manifests` are the fleet's (configured, then applied); both must outlive this.
  Tenancy(const identity::Directory& directory, const fleet::ManifestSet& manifests)
      : directory_(directory), manifests_(manifests) {}

  // The tenant whose namespace `name` is ("" when no tenant has a team of the name).
  std::string owningTenant(const std::string& name) const;
  // The namespace, inside Purser, of `tenant_id`'s team `name`.
  std::string namespaceOf(const std::string& tenant_id, const std::string& name) const;
  // The labels of namespace `ns` of `tenant_id`'s team: its name, its tenant's name
  // (purser.dev/tenant), then what a Namespace object of the manifests says (which wins).
  std::map<std::string, std::string> labelsOf(const std::string& ns,
                                              const std::string& tenant_id) const;

 private:
  const identity::Directory& directory_;
  const fleet::ManifestSet& manifests_;
};

}  // namespace purser::workloads
