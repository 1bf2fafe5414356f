#include "server/sign_in_setup.h"

#include <fmt/format.h>

#include "common/small_file.h"
#include "identity/identity.h"

namespace purser::server {

Result<SignInSetup> signInSetup(const config::Config& config,
                                http::WorkerLocal<http::HttpClient>& clients, const Clock& clock,
                                const gateway::Sealer& sealer) {
  SignInSetup out;
  if (!config.oidc) return out;
  const config::OidcConfig& c = *config.oidc;
  if (auto ok = sso::checkIssuer(c.issuer); !ok) {
    return fail(invalidArgument("oidc.issuer: " + ok.error().message));
  }
  sso::OidcOptions o;
  o.issuer = c.issuer;
  o.client_id = c.client_id;
  o.client_secret = c.client_secret;
  if (!c.client_secret_file.empty()) {
    o.client_secret =
        PURSER_TRY_VALUE(readSmallFile(c.client_secret_file, "oidc.client_secret_file", 4096));
    while (!o.client_secret.empty() &&
           (o.client_secret.back() == '\n' || o.client_secret.back() == '\r')) {
      o.client_secret.pop_back();
    }
    if (o.client_secret.empty()) {
      return fail(invalidArgument(
          fmt::format("oidc.client_secret_file: {} is empty", c.client_secret_file)));
    }
  }
  o.redirect_url = c.redirect_url;
  o.scopes = c.scopes;
  o.groups_claim = c.groups_claim;
  o.username_claim = c.username_claim;
  out.client = std::make_unique<sso::OidcClient>(std::move(o), clients, clock);
  auto options = std::make_shared<api::SignInOptions>();
  options->client = out.client.get();
  for (const auto& r : c.roles) {
    sso::RoleRule rule;
    rule.group = r.group;
    rule.tenant = r.tenant;
    rule.team = r.team;
    // The configuration's names (team_lead) are the API's (team-lead) with underscores.
    std::string name = r.role;
    std::replace(name.begin(), name.end(), '_', '-');
    rule.role = PURSER_TRY_VALUE(identity::parseRole(name));
    options->rules.push_back(std::move(rule));
  }
  options->cookie_key = sealer.derive("oidc sign-in cookie");
  options->secure_cookies = config.tls.has_value() || c.redirect_url.starts_with("https://");
  options->session_max_age = c.session_max_age;
  options->session_idle_timeout = c.session_idle_timeout;
  options->cli_max_age = c.cli_token_max_age;
  options->display_name = c.display_name.empty() ? out.client->displayName() : c.display_name;
  out.options = std::move(options);
  return out;
}

}  // namespace purser::server
