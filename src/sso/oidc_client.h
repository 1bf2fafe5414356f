// OidcClient: Purser as an OpenID Connect relying party — the authorization-code flow with PKCE
// (OpenID Connect Core 1.0 section 3.1, RFC 7636 S256), against a provider found by discovery
// (OpenID Connect Discovery 1.0). It fetches and keeps the provider's metadata and JWK set (the
// keys refreshed when an ID token names a key id they do not have, at most once every
// `jwks_min_refresh`, so a flood of forged key ids cannot make Purser hammer the provider),
// builds the URL a browser is sent to, exchanges a returned code for tokens and verifies the ID
// token (identity/id_token.h), reading the groups from userinfo when the ID token has none.
//
// Where the state, nonce and verifier are kept between start() and finish() is the caller's
// (the sign-in's cookie); this class keeps nothing per sign-in.
//
// Thread-safety: start() and finish() may run on any worker concurrently; the cached metadata
// and keys are guarded by a mutex, and each call uses its worker's HTTP client.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/result.h"
#include "http/client.h"
#include "http/workers.h"
#include "identity/id_token.h"

namespace purser::sso {

// An issuer Purser will use: https://, or http:// on the loopback address 127.0.0.1 alone (a
// provider run by a test on this machine). kInvalidArgument saying why otherwise.
Result<void> checkIssuer(std::string_view issuer);

struct OidcOptions {
  std::string issuer;
  std::string client_id;
  std::string client_secret;
  std::string redirect_url;  // where the provider sends the browser back: .../auth/oidc/callback
  std::vector<std::string> scopes = {"openid", "profile", "email"};
  std::string groups_claim = "groups";
  std::string username_claim = "preferred_username";  // else "email"
  std::chrono::seconds jwks_min_refresh{10};
  std::chrono::seconds leeway{60};  // clock skew allowed on the ID token's times
  size_t max_response_bytes = 1024 * 1024;
};

// What discovery says (only what Purser uses).
struct ProviderMetadata {
  std::string issuer;
  std::string authorization_endpoint;
  std::string token_endpoint;
  std::string jwks_uri;
  std::string userinfo_endpoint;                // may be empty
  std::string end_session_endpoint;             // may be empty
  std::string device_authorization_endpoint;    // may be empty
  std::vector<std::string> token_auth_methods;  // token_endpoint_auth_methods_supported
  bool s256 = false;                            // code_challenge_methods_supported has S256
};

// Parses a discovery document; its "issuer" must be exactly `expected_issuer` (Discovery section
// 4.3: an issuer that differs is an attack or a mistake) and every endpoint an https:// URL (or
// http://127.0.0.1 for a test provider).
Result<ProviderMetadata> parseDiscovery(std::string_view document,
                                        std::string_view expected_issuer);

// A sign-in begun: where to send the browser, and what finish() will need back.
struct SignInStart {
  std::string url;
  std::string state;
  std::string nonce;
  std::string verifier;
};

// A person the provider vouched for.
struct SignedIn {
  std::string subject;       // "sub": the provider's stable id of the person
  std::string username;      // username_claim, else "email", else the subject
  std::string email;         // may be empty
  std::string display_name;  // "name", may be empty
  std::vector<std::string> groups;
  nlohmann::json claims;  // the ID token's
};

class OidcClient {
 public:
  OidcClient(OidcOptions options, http::WorkerLocal<http::HttpClient>& clients, const Clock& clock);

  const OidcOptions& options() const { return options_; }
  // The issuer's name for people ("Sign in with <name>"): its host.
  std::string displayName() const;

  // The provider's metadata: discovered at the first call and kept; a failed discovery is tried
  // again at the next call.
  boost::asio::awaitable<Result<ProviderMetadata>> metadata();

  // A fresh state, nonce and PKCE verifier, and the authorization URL carrying them.
  boost::asio::awaitable<Result<SignInStart>> start();

  // Exchanges `code` (with the `verifier` start() made) and verifies the ID token against
  // `nonce`. Errors: kUnauthenticated when the provider refuses the code or the ID token does
  // not hold (the message says which check failed); kUnavailable when the provider cannot be
  // reached or answers what is not OpenID Connect.
  boost::asio::awaitable<Result<SignedIn>> finish(std::string code, std::string verifier,
                                                  std::string nonce);

 private:
  boost::asio::awaitable<Result<std::vector<identity::Jwk>>> keys(bool refresh);
  // The body of a 200 answer to a GET (with `bearer` when not empty), bounded.
  boost::asio::awaitable<Result<std::string>> get(std::string url, std::string bearer);

  const OidcOptions options_;
  http::WorkerLocal<http::HttpClient>& clients_;
  const Clock& clock_;
  std::mutex mu_;
  std::optional<ProviderMetadata> metadata_;  // guarded by mu_
  std::vector<identity::Jwk> keys_;           // guarded by mu_
  MonoTime keys_fetched_{};                   // guarded by mu_
};

}  // namespace purser::sso
