// Identity: who is asking. Tenants contain teams; teams contain users and service accounts
// (the identities of applications and agents); users and service accounts hold API keys.
//
// Roles are scoped: a tenant-admin acts within one tenant, a team-lead within one team, a member
// on their own things; only a platform-admin (who belongs to no tenant) sees across tenants.
// These are plain value types; Directory (directory.h) indexes them and IdentityStore
// (identity_store.h) persists them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace purser::identity {

enum class Role { kPlatformAdmin, kTenantAdmin, kTeamLead, kMember, kServiceAccount };

Result<Role> parseRole(std::string_view name);  // "platform-admin", "tenant-admin", ...
std::string_view roleName(Role role);

// How much a request matters when every replica of its route is saturated: waiting requests are
// served most important first, and sheddable ones are refused first. Compared by the underlying
// value: higher is more important.
enum class Priority : uint8_t { kSheddable = 0, kStandard = 1, kCritical = 2 };
Result<Priority> parsePriority(std::string_view name);  // "critical", "standard", "sheddable"
std::string_view priorityName(Priority priority);

// How much priority a tenant's work may ask for, as the platform admin granted it: priority is a
// governed resource, since a higher one may evict or starve another tenant's work.
struct PriorityGrant {
  // The highest priority its workloads may have (a WorkloadPriorityClass's value, or a bare
  // priority); another tenant's workload is preempted only by a priority this grant cannot reach.
  int32_t max_workload_priority = 0;
  // The WorkloadPriorityClasses it may name; empty: any whose value is within the maximum.
  std::vector<std::string> classes;
  // The highest gateway priority its keys may carry.
  Priority max_key_priority = Priority::kStandard;
};

struct Tenant {
  std::string id;
  std::string name;
  std::string created_at;
  PriorityGrant grant;
  // MCP tools granted to every key of the tenant that has none of its own and whose team grants
  // none ("server/tool", "server/*", "*"); empty: none.
  std::vector<std::string> tools;
};

struct Team {
  std::string id;
  std::string tenant_id;
  std::string name;
  std::string created_at;
  // MCP tools granted to every key of the team that has none of its own; empty: the tenant's.
  std::vector<std::string> tools;
};

struct User {
  std::string id;
  std::string tenant_id;  // empty for platform admins
  std::string team_id;    // empty for tenant admins and platform admins
  std::string name;
  std::string email;
  Role role = Role::kMember;
  std::string created_at;
  // A person who signs in through the identity provider (oidc): "ISSUER#SUBJECT", the one
  // thing that links each sign-in to this user. Empty for users an admin made.
  std::string subject;
  // RFC 3339; empty: active. A disabled user's keys are refused, their sessions are ended and
  // they cannot sign in.
  std::string disabled_at;
};

struct ServiceAccount {
  std::string id;
  std::string tenant_id;
  std::string team_id;
  std::string name;
  std::string created_at;
};

enum class OwnerKind { kUser, kServiceAccount };
Result<OwnerKind> parseOwnerKind(std::string_view name);  // "user", "service_account"
std::string_view ownerKindName(OwnerKind kind);

// An API key as stored: never the secret, only its hash.
struct ApiKey {
  std::string id;
  std::string lookup;  // the index a presented key is found by (see keys.h)
  OwnerKind owner_kind = OwnerKind::kUser;
  std::string owner_id;
  std::string tenant_id;
  std::string team_id;
  std::string name;
  std::string secret_hash;
  std::string previous_hash;         // after a rotation: the old secret's hash ...
  std::string previous_valid_until;  // ... valid until then (RFC 3339); empty if none
  std::vector<std::string> models;   // allow-list of models/routes; empty: all
  std::string expires_at;            // RFC 3339; empty: never
  int64_t rpm = 0;                   // requests per minute; 0: no own limit
  int64_t tpm = 0;                   // tokens per minute; 0: no own limit
  std::string revoked_at;            // RFC 3339; empty: active
  std::string created_at;
  // The key this one was made with by the same owner ("" for keys made for someone else, or by
  // an admin's own hand before derivation existed). A derived key is valid only while every key
  // above it is, and shares their wallets and rate limits (see docs/governance.md).
  std::string parent_key_id;
  // The most important priority requests made with it may ask for; the gateway's
  // x-purser-priority header may only lower it.
  Priority priority = Priority::kStandard;
  // The MCP tools it may call through /mcp: "server/tool", "server/*" or "*"; empty: none
  // (deny by default).
  std::vector<std::string> tools;
};

// How many keys may descend from one another (a key, its derived key, that key's, ...).
inline constexpr size_t kMaxKeyDepth = 8;

// Who is acting: the owner of the key that authenticated the request.
struct Principal {
  OwnerKind kind = OwnerKind::kUser;
  std::string id;
  std::string name;
  std::string tenant_id;  // empty: platform-wide
  std::string team_id;    // empty: not in a team
  Role role = Role::kMember;
  std::string key_id;
  // The sign-in session the request came with (see identity/sessions.h); empty with a key.
  std::string session_id;
  // The key and every key above it (see ApiKey::parent_key_id), nearest first.
  std::vector<std::string> key_chain;
};

}  // namespace purser::identity
