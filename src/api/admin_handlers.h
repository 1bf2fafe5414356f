// The admin and metering API's handlers, by the file that holds them (private to src/api), for
// the route tables in admin_api.cc. Each authenticates its request, authorizes it with
// identity::authorize() and answers JSON or problem+json; none blocks its worker.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>

#include "api/admin_api.h"

namespace purser::api::admin {

// admin_identity.cc: tenants, teams, users, service accounts, whoami
boost::asio::awaitable<http::Response> createTenant(const Services& s, http::Request& req);
// PUT /api/v1/tenants/{tenant}/priority: what priority the tenant's work may ask for (platform
// admins only; audited).
boost::asio::awaitable<http::Response> grantPriority(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> createTeam(const Services& s, http::Request& req);
// PUT /api/v1/tenants/{tenant}/tools and /api/v1/teams/{team}/tools: the MCP tools granted to
// the keys that have none of their own.
boost::asio::awaitable<http::Response> grantTenantTools(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> grantTeamTools(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> createUser(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> createServiceAccount(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> listTenants(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> listTeams(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> listUsers(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> listServiceAccounts(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> whoami(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> disableUser(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> enableUser(const Services& s, http::Request& req);

// admin_keys.cc
boost::asio::awaitable<http::Response> createKey(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> revokeKey(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> rotateKey(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> listKeys(const Services& s, http::Request& req);

// admin_wallets.cc: wallets and rate limits
boost::asio::awaitable<http::Response> createWallet(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> listWallets(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> createRateLimit(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> listRateLimits(const Services& s, http::Request& req);

// admin_audit.cc
boost::asio::awaitable<http::Response> listAudit(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> verifyAudit(const Services& s, http::Request& req);

// admin_metering.cc: reservations
boost::asio::awaitable<http::Response> createReservation(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> settleReservation(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> releaseReservation(const Services& s, http::Request& req);

// admin_usage.cc: recorded usage, usage and spend
boost::asio::awaitable<http::Response> recordUsage(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> listUsage(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> spend(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> showSession(const Services& s, http::Request& req);

// admin_providers.cc
boost::asio::awaitable<http::Response> listProviders(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> replaceProviderKeys(const Services& s, http::Request& req);
boost::asio::awaitable<http::Response> restoreProviderKeys(const Services& s, http::Request& req);

}  // namespace purser::api::admin
