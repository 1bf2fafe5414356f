// Policy: what a principal may do to what. One function answers every authorization question
// on the admin API, so the rules live in one table-tested place.
//
//   platform-admin  everything, in every tenant
//   tenant-admin    everything inside their tenant
//   team-lead       inside their team: users (as members), service accounts, keys, wallets of
//                   the team's users, service accounts and keys; read the team's spend
//   member          their own keys; read their own wallets and spend
//   service-account nothing on the admin API (its key is for the model API)
//
// A target in another tenant is reported as not found, never as forbidden: its existence is not
// the caller's business (docs/architecture.md rule 5).
#pragma once

#include <string>

#include "common/result.h"
#include "identity/identity.h"

namespace purser::identity {

enum class Action {
  kCreateTenant,
  kReadTenant,
  kCreateTeam,
  kReadTeam,
  kCreateUser,
  kCreateTenantAdmin,  // create a user with the tenant-admin or team-lead role
  kReadUser,
  kManageUser,  // disable or enable a user (their keys and sessions with them)
  kCreateServiceAccount,
  kReadServiceAccount,
  kCreateKey,  // for the owner in the target
  kManageKey,  // revoke, rotate
  kReadKey,
  kWriteWallet,
  kReadWallet,
  kReadSpend,
  kReadAudit,
  kVerifyAudit,
  kRecordUsage,  // record usage that ran elsewhere (platform admins)
};

// What an action is applied to: where it lives, and for per-person things, whose it is.
struct Target {
  std::string tenant_id;  // empty: platform-wide (tenants themselves)
  std::string team_id;    // empty: not within one team
  std::string owner_id;   // the user or service account it belongs to, if any
};

// kPermissionDenied (403) or kNotFound (404, other tenants) when not allowed.
Result<void> authorize(const Principal& who, Action action, const Target& target);

// True when `who` may see `target` at all (list filtering): the read variant of authorize().
bool canSee(const Principal& who, Action read_action, const Target& target);

}  // namespace purser::identity
