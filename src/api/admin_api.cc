// The admin and metering APIs' route tables and the first start's platform admin. The handlers
// live by resource in admin_*.cc (see admin_common.h).
#include "api/admin_api.h"

#include <utility>

#include "api/admin_common.h"
#include "api/admin_handlers.h"
#include "common/json.h"
#include "identity/identity_store.h"
#include "identity/keys.h"

namespace purser::api {

using http::Method;
using http::Request;
using identity::Principal;
using identity::Role;

Result<std::optional<std::string>> bootstrap(const Services& s,
                                             const std::optional<std::string>& admin_key) {
  if (s.directory.keyCount() > 0) return std::optional<std::string>();
  if (admin_key && admin_key->size() < 16) {
    return fail(invalidArgument(
        "PURSER_ADMIN_KEY must be at least 16 characters; unset it to have a key generated"));
  }
  identity::User user;
  user.id = s.ids.next();
  user.name = "admin";
  user.role = Role::kPlatformAdmin;
  user.created_at = admin::now(s);
  identity::ApiKey key;
  identity::NewKey secret =
      admin_key ? identity::externalKey(*admin_key) : identity::generateKey(s.ids, s.random);
  key.id = admin_key ? s.ids.next() : secret.id;
  key.lookup = secret.lookup;
  key.secret_hash = secret.secret_hash;
  key.owner_kind = identity::OwnerKind::kUser;
  key.owner_id = user.id;
  key.name = admin_key ? "bootstrap (PURSER_ADMIN_KEY)" : "bootstrap";
  key.created_at = user.created_at;
  Principal system;
  system.id = "system";
  system.role = Role::kPlatformAdmin;
  PURSER_TRY(s.records.commitNow(
      {ledger::change(identity::insertUser, user), ledger::change(identity::insertKey, key)},
      {identity::auditEntry(system, "bootstrap", "user:" + user.id, "",
                            writeJson(admin::toJson(user)), "")}));
  s.directory.put(user);
  s.directory.put(key);
  if (admin_key) return std::optional<std::string>();
  return std::optional<std::string>(secret.secret);
}

namespace {

// Registers `handler` for `m` `path` with its own copy of the services.
template <typename Handler>
Result<void> addRoute(http::Router& router, const std::shared_ptr<const Services>& s, Method m,
                      const char* path, Handler handler) {
  return router.addAsync(m, path, [s, handler](Request& req) { return handler(*s, req); });
}

}  // namespace

Result<void> addMeteringRoutes(http::Router& router, const Services& services) {
  auto s = std::make_shared<const Services>(services);
  const auto route = [&](Method m, const char* path, auto handler) {
    return addRoute(router, s, m, path, handler);
  };
  PURSER_TRY(route(Method::kPost, "/api/v1/reservations", admin::createReservation));
  PURSER_TRY(route(Method::kPost, "/api/v1/reservations/{id}/settle", admin::settleReservation));
  PURSER_TRY(route(Method::kDelete, "/api/v1/reservations/{id}", admin::releaseReservation));
  PURSER_TRY(route(Method::kGet, "/api/v1/usage", admin::listUsage));
  PURSER_TRY(route(Method::kPost, "/api/v1/usage", admin::recordUsage));
  PURSER_TRY(route(Method::kGet, "/api/v1/spend", admin::spend));
  PURSER_TRY(route(Method::kGet, "/api/v1/sessions/{id}", admin::showSession));
  PURSER_TRY(route(Method::kPost, "/api/v1/rate-limits", admin::createRateLimit));
  PURSER_TRY(route(Method::kGet, "/api/v1/rate-limits", admin::listRateLimits));
  return {};
}

Result<void> addAdminRoutes(http::Router& router, const Services& services) {
  auto s = std::make_shared<const Services>(services);
  const auto route = [&](Method m, const char* path, auto handler) {
    return addRoute(router, s, m, path, handler);
  };
  PURSER_TRY(route(Method::kPost, "/api/v1/tenants", admin::createTenant));
  PURSER_TRY(route(Method::kPut, "/api/v1/tenants/{tenant}/priority", admin::grantPriority));
  PURSER_TRY(route(Method::kPut, "/api/v1/tenants/{tenant}/tools", admin::grantTenantTools));
  PURSER_TRY(route(Method::kPost, "/api/v1/teams", admin::createTeam));
  PURSER_TRY(route(Method::kPut, "/api/v1/teams/{team}/tools", admin::grantTeamTools));
  PURSER_TRY(route(Method::kPost, "/api/v1/users", admin::createUser));
  PURSER_TRY(route(Method::kPost, "/api/v1/users/{id}/disable", admin::disableUser));
  PURSER_TRY(route(Method::kPost, "/api/v1/users/{id}/enable", admin::enableUser));
  PURSER_TRY(route(Method::kPost, "/api/v1/service-accounts", admin::createServiceAccount));
  PURSER_TRY(route(Method::kPost, "/api/v1/keys", admin::createKey));
  PURSER_TRY(route(Method::kDelete, "/api/v1/keys/{id}", admin::revokeKey));
  PURSER_TRY(route(Method::kPost, "/api/v1/keys/{id}/rotate", admin::rotateKey));
  PURSER_TRY(route(Method::kPost, "/api/v1/wallets", admin::createWallet));
  PURSER_TRY(route(Method::kGet, "/api/v1/wallets", admin::listWallets));
  PURSER_TRY(route(Method::kGet, "/api/v1/audit", admin::listAudit));
  PURSER_TRY(route(Method::kGet, "/api/v1/audit/verify", admin::verifyAudit));
  PURSER_TRY(route(Method::kGet, "/api/v1/whoami", admin::whoami));
  PURSER_TRY(route(Method::kGet, "/api/v1/providers", admin::listProviders));
  PURSER_TRY(route(Method::kPut, "/api/v1/providers/{name}/keys", admin::replaceProviderKeys));
  PURSER_TRY(route(Method::kDelete, "/api/v1/providers/{name}/keys", admin::restoreProviderKeys));
  PURSER_TRY(route(Method::kGet, "/api/v1/tenants", admin::listTenants));
  PURSER_TRY(route(Method::kGet, "/api/v1/teams", admin::listTeams));
  PURSER_TRY(route(Method::kGet, "/api/v1/users", admin::listUsers));
  PURSER_TRY(route(Method::kGet, "/api/v1/service-accounts", admin::listServiceAccounts));
  PURSER_TRY(route(Method::kGet, "/api/v1/keys", admin::listKeys));
  return {};
}

}  // namespace purser::api
