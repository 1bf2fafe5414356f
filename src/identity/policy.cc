#include "identity/policy.h"

namespace purser::identity {

namespace {

bool teamScoped(Action a) {
  switch (a) {
    case Action::kReadTeam:
    case Action::kCreateUser:
    case Action::kReadUser:
    case Action::kCreateServiceAccount:
    case Action::kReadServiceAccount:
    case Action::kCreateKey:
    case Action::kManageKey:
    case Action::kReadKey:
    case Action::kWriteWallet:
    case Action::kReadWallet:
    case Action::kReadSpend:
      return true;
    default:
      return false;
  }
}

bool ownScoped(Action a) {
  switch (a) {
    case Action::kCreateKey:
    case Action::kManageKey:
    case Action::kReadKey:
    case Action::kReadWallet:
    case Action::kReadSpend:
    case Action::kReadUser:
      return true;
    default:
      return false;
  }
}

}  // namespace

Result<void> authorize(const Principal& who, Action action, const Target& target) {
  const Error denied(
      ErrorCode::kPermissionDenied,
      std::string("your role (") + std::string(roleName(who.role)) + ") does not allow this");
  if (who.role == Role::kPlatformAdmin) return {};
  // Everything below is confined to the principal's own tenant.
  if (target.tenant_id.empty()) {
    if (action == Action::kCreateTenant) return fail(denied);
    // Platform-wide reads are filtered to the caller's tenant by canSee().
    if (action == Action::kReadTenant || action == Action::kReadAudit) return {};
    return fail(denied);
  }
  if (target.tenant_id != who.tenant_id) {
    return fail(Error(ErrorCode::kNotFound, "not found"));
  }
  switch (who.role) {
    case Role::kTenantAdmin:
      return {};
    case Role::kTeamLead:
      if (action == Action::kReadTenant) return {};
      if (teamScoped(action) && !target.team_id.empty() && target.team_id == who.team_id) {
        return {};
      }
      if (ownScoped(action) && target.owner_id == who.id) return {};
      return fail(denied);
    case Role::kMember:
      if (action == Action::kReadTenant) return {};
      if (action == Action::kReadTeam && target.team_id == who.team_id && target.owner_id.empty()) {
        return {};
      }
      if (ownScoped(action) && target.owner_id == who.id) return {};
      return fail(denied);
    case Role::kServiceAccount:
    case Role::kPlatformAdmin:
      break;
  }
  return fail(denied);
}

bool canSee(const Principal& who, Action read_action, const Target& target) {
  if (who.role == Role::kPlatformAdmin) return true;
  if (target.tenant_id.empty()) return false;
  return authorize(who, read_action, target).has_value();
}

}  // namespace purser::identity
