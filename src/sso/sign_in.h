// What a browser's sign-in carries between /auth/oidc/login and /auth/oidc/callback, and how a
// person's groups become a role. Pure: no I/O.
//
// The pending sign-in (state, nonce, PKCE verifier, where to return) rides in a short-lived
// HttpOnly cookie, MACed (HMAC-SHA-256) with a key derived from the master key, so that any
// replica sharing that key can finish a sign-in another began, and nobody can forge or alter one.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "identity/identity.h"

namespace purser::sso {

inline constexpr std::string_view kPendingCookie = "purser_oidc";

struct PendingSignIn {
  std::string state;
  std::string nonce;
  std::string verifier;
  std::string return_to;     // a path of this server ("/..."), never another site
  std::string redirect_uri;  // the callback URL the authorization request named
  SystemTime expires_at;
};

// "payload.mac", both base64url.
std::string sealPending(const PendingSignIn& p, std::string_view key);
// kUnauthenticated when the cookie was altered, is not one, or has expired.
Result<PendingSignIn> openPending(std::string_view cookie, std::string_view key, SystemTime now);

// Where a sign-in may return: a path of this server ("/", "/#/spend"); anything else ("//evil",
// "https://...", backslashes, control characters) is "/".
std::string safeReturnPath(std::string_view wanted);

// One `oidc.roles` entry: people in `group` get `role` in the tenant and team named.
struct RoleRule {
  std::string group;
  std::string tenant;  // empty for platform admins
  std::string team;    // empty for tenant and platform admins
  identity::Role role = identity::Role::kMember;
};

// The first rule (in the configuration's order) whose group the person is in.
std::optional<size_t> firstMatchingRule(const std::vector<std::string>& groups,
                                        const std::vector<RoleRule>& rules);

// A user name made from what the provider says (username_claim, else e-mail, else subject):
// valid UTF-8 without control characters, at most 64 bytes, never empty ("user").
std::string userNameFrom(std::string_view wanted);

}  // namespace purser::sso
