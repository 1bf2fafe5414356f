// Single sign-on made from the configuration's `oidc:` (api/sign_in_api.h): the relying party,
// its client secret (from the file, when one is named), the role rules, the cookies' key.
#pragma once

#include <memory>

#include "api/sign_in_api.h"
#include "config/config.h"
#include "gateway/secrets.h"
#include "http/client.h"
#include "http/workers.h"
#include "sso/oidc_client.h"

namespace purser::server {

struct SignInSetup {
  std::unique_ptr<sso::OidcClient> client;
  std::shared_ptr<const api::SignInOptions> options;
};

// Nothing (both null) without `oidc:`. Errors: an issuer that is neither https:// nor
// http://127.0.0.1, a client secret file that cannot be read.
Result<SignInSetup> signInSetup(const config::Config& config,
                                http::WorkerLocal<http::HttpClient>& clients, const Clock& clock,
                                const gateway::Sealer& sealer);

}  // namespace purser::server
