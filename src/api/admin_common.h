// What the admin API's handler files share (private to src/api): the JSON views of the
// directory's things, the audit helpers every change goes through (deny, commitAudited), the
// lookups that answer for something outside the caller's tenant exactly as for something that
// does not exist (inReach, findTenant, scopeTarget), and the reading of scopes.
//
// Each resource has its own file: admin_identity.cc (tenants, teams, users, service accounts,
// whoami), admin_keys.cc, admin_wallets.cc (wallets and rate limits), admin_audit.cc,
// admin_metering.cc (reservations, budget alerts), admin_usage.cc (recorded usage, usage and
// spend), admin_providers.cc; admin_api.cc holds the route tables and bootstrap.
//
// Thread-safety: as admin_api.h; nothing here keeps state of its own.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "api/admin_api.h"
#include "api/problem.h"
#include "identity/policy.h"

// Inside a handler coroutine: evaluates a Result, answers with its problem if it failed, else
// binds its value to `var`.
#define API_TRY(var, expr)                                    \
  auto var##_result = (expr);                                 \
  if (!var##_result) co_return problem(var##_result.error()); \
  auto var = std::move(*var##_result)

namespace purser::api::admin {

using nlohmann::json;

// --- JSON views --------------------------------------------------------------------------------

json toJson(const identity::Tenant& t);
json toJson(const identity::Team& t);
json toJson(const identity::User& u);
json toJson(const identity::ServiceAccount& a);
json toJson(const identity::ApiKey& k);
// {"data": items}: every collection's answer.
json listOf(json items);

// --- Audit ---------------------------------------------------------------------------------------

using identity::auditEntry;

// Records a policy denial in the audit log (within the principal's share, DenialLog), then
// answers with it.
boost::asio::awaitable<http::Response> deny(const Services& s, const identity::Principal& who,
                                            const Error& why, std::string action,
                                            std::string target);

// Commits `changes` and `entries` in one transaction (ledger::Records), awaited without blocking
// the worker.
boost::asio::awaitable<Result<void>> record(const Services& s, std::vector<ledger::Change> changes,
                                            std::vector<ledger::AuditEntry> entries);
// Commits `change` and its audit entry in one transaction.
boost::asio::awaitable<Result<void>> commitAudited(const Services& s, ledger::Change change,
                                                   ledger::AuditEntry entry);

// --- Lookups within the caller's reach -------------------------------------------------------

Error notFound(std::string_view what, std::string_view id, std::string_view field);

// Whether `who` may learn that something of `tenant_id` exists: platform admins everywhere,
// everyone else in their own tenant only. Lookups answer for anything outside exactly as for
// something that does not exist (same status, same message, same work), so neither the answer
// nor its timing tells a tenant what another one has (docs/architecture.md rule 5).
bool inReach(const identity::Principal& who, const std::string& tenant_id);

// A tenant by id or by name, as `who` may see it.
Result<identity::Tenant> findTenant(const Services& s, const identity::Principal& who,
                                    const std::string& ref);
// A team of `tenant` by id or by name.
Result<identity::Team> findTeam(const Services& s, const std::string& tenant_id,
                                const std::string& ref);
// The tenant a caller means: the body's "tenant", or for a tenant-bound caller their own.
Result<identity::Tenant> tenantFor(const Services& s, const identity::Principal& who,
                                   const json& body);

// The current time as the store writes it (RFC 3339).
std::string now(const Services& s);

// --- Scopes ------------------------------------------------------------------------------------

// The tenant/team/owner of a wallet scope, for authorization; a scope outside `who`'s reach is
// not found. `for_write` makes tenant and team wallets a tenant-admin matter (a team lead cannot
// raise their own team's budget).
Result<identity::Target> scopeTarget(const Services& s, const identity::Principal& who,
                                     const ledger::Scope& scope, bool for_write);

// A scope as its caller named it: by id, or — tenants, teams, users and service accounts — by
// name, among what `who` may see (a team, user or service account in the caller's own tenant; a
// platform admin's team name must be one tenant's only). A name nobody has stays as it was, and
// the lookup after it answers "not found" as for an unknown id.
ledger::Scope resolveScope(const Services& s, const identity::Principal& who, ledger::Scope scope);

// The name of what a scope stands for ("" when it is gone).
std::string scopeName(const Services& s, ledger::ScopeKind kind, const std::string& id);

// The body's "scope": {"kind": ..., "id": ...}.
Result<ledger::Scope> parseScopeObject(const json& body);
// A query's "team:01j..."
Result<ledger::Scope> parseScopeParam(const std::string& text);

identity::Target keyTarget(const identity::ApiKey& k);

// --- Metering (admin_metering.cc), shared with recorded usage ----------------------------------

// An id a client chose for its reservation or event: printable, and safe in a URL path.
bool validClientId(std::string_view id);
// The optional "tokens" object of a settlement or a recorded event: {input, output, cached_input,
// cache_write, reasoning}.
Result<void> readTokens(const json& body, ledger::TokenCounts* tokens);
// What an event costs: "cost" as given, or its tokens at the model's price.
Result<Money> eventCost(const Services& s, const json& body, const ledger::UsageEvent& event);

}  // namespace purser::api::admin
