#include "identity/identity.h"

#include <fmt/format.h>

namespace purser::identity {

Result<Role> parseRole(std::string_view name) {
  if (name == "platform-admin") return Role::kPlatformAdmin;
  if (name == "tenant-admin") return Role::kTenantAdmin;
  if (name == "team-lead") return Role::kTeamLead;
  if (name == "member") return Role::kMember;
  if (name == "service-account") return Role::kServiceAccount;
  return fail(invalidArgument(fmt::format(
      "unknown role \"{}\"; expected platform-admin, tenant-admin, team-lead or member", name)));
}

std::string_view roleName(Role role) {
  switch (role) {
    case Role::kPlatformAdmin:
      return "platform-admin";
    case Role::kTenantAdmin:
      return "tenant-admin";
    case Role::kTeamLead:
      return "team-lead";
    case Role::kMember:
      return "member";
    case Role::kServiceAccount:
      return "service-account";
  }
  return "member";
}

Result<OwnerKind> parseOwnerKind(std::string_view name) {
  if (name == "user") return OwnerKind::kUser;
  if (name == "service_account") return OwnerKind::kServiceAccount;
  return fail(invalidArgument(
      fmt::format("unknown owner kind \"{}\"; expected user or service_account", name)));
}

std::string_view ownerKindName(OwnerKind kind) {
  return kind == OwnerKind::kUser ? "user" : "service_account";
}

Result<Priority> parsePriority(std::string_view name) {
  if (name == "critical") return Priority::kCritical;
  if (name == "standard") return Priority::kStandard;
  if (name == "sheddable") return Priority::kSheddable;
  return fail(invalidArgument(
      fmt::format("unknown priority \"{}\"; expected critical, standard or sheddable", name)));
}

std::string_view priorityName(Priority priority) {
  switch (priority) {
    case Priority::kCritical:
      return "critical";
    case Priority::kStandard:
      return "standard";
    case Priority::kSheddable:
      return "sheddable";
  }
  return "standard";
}

}  // namespace purser::identity
