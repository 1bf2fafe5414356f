// Single sign-on's doors (OpenID Connect; the configuration's `oidc:`):
//
//   GET  /auth/oidc/info              {enabled, signed_in, display_name?, login_url?}: whether the
//                                     console's sign-in page offers "Sign in with ..." and
//                                     whether this browser's cookie is a live session
//   GET  /auth/oidc/login?return_to=  starts the authorization-code flow with PKCE (S256), state
//                                     and nonce: a 302 to the provider, the pending sign-in in a
//                                     MACed cookie (sso/sign_in.h)
//   GET  /auth/oidc/callback          checks state, exchanges the code, verifies the ID token,
//                                     maps the person's groups to a role (the first matching
//                                     `roles` entry), creates or updates the user, and sets the
//                                     `purser_session` cookie; a page saying why otherwise
//   POST /auth/signout                ends the caller's session (cookie + CSRF token, or the
//                                     CLI's token) everywhere
//   POST /auth/oidc/device            the device authorization grant for `purser login --oidc`
//   POST /auth/oidc/device/token      {device_code}: one poll; 400 {"error":
//                                     "authorization_pending"} until the person answers, then
//                                     {token, expires_at, user}
//
// Audited: sign-in ("auth.sign_in"), refusals with why ("auth.sign_in_refused"), sign-out
// ("auth.sign_out"), users made at sign-in ("user.jit_create") and changed by one
// ("user.sign_in_update": team, role, tenant).
#pragma once

#include <utility>

#include <memory>
#include <string>
#include <vector>

#include "api/admin_api.h"
#include "common/clock.h"
#include "http/router.h"
#include "sso/oidc_client.h"
#include "sso/sign_in.h"

namespace purser::api {

struct SignInOptions {
  sso::OidcClient* client = nullptr;
  std::vector<sso::RoleRule> rules;
  // The key the pending sign-in's cookie is MACed with (derived from the master key).
  std::string cookie_key;
  // Cookies marked Secure: served over TLS, or behind a proxy that is (an https redirect_url).
  bool secure_cookies = false;
  Duration session_max_age = std::chrono::hours(24);
  Duration session_idle_timeout = std::chrono::hours(8);
  Duration cli_max_age = std::chrono::hours(12);
  std::string display_name;
};

// Without `options` (no `oidc:`), only /auth/oidc/info, answering {enabled: false}.
Result<void> addSignInRoutes(http::Router& router, const Services& s,
                             std::shared_ptr<const SignInOptions> options);

}  // namespace purser::api
