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
  // Where the provider sends the browser back: .../auth/oidc/callback. A caller may pass another
  // to start() and finish() (built from a request when the configuration gives only a path).
  std::string redirect_url;
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

// A device authorization begun (RFC 8628): what the person is shown, and what polling needs.
struct DeviceStart {
  std::string device_code;
  std::string user_code;
  std::string verification_uri;
  std::string verification_uri_complete;  // may be empty
  int64_t interval = 5;                   // seconds between polls
  int64_t expires_in = 600;
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
  boost::asio::awaitable<Result<SignInStart>> start(std::string redirect_url = "");

  // Exchanges `code` (with the `verifier` start() made) and verifies the ID token against
  // `nonce`. Errors: kUnauthenticated when the provider refuses the code or the ID token does
  // not hold (the message says which check failed); kUnavailable when the provider cannot be
  // reached or answers what is not OpenID Connect.
  boost::asio::awaitable<Result<SignedIn>> finish(std::string code, std::string verifier,
                                                  std::string nonce, std::string redirect_url = "");

  // The device authorization grant, for the CLI: kFailedPrecondition when the provider offers
  // none (no device_authorization_endpoint).
  boost::asio::awaitable<Result<DeviceStart>> startDevice();
  // One poll of the token endpoint: nullopt while the person has not yet answered
  // (authorization_pending, slow_down); kUnauthenticated when they refused or the code expired.
  boost::asio::awaitable<Result<std::optional<SignedIn>>> pollDevice(std::string device_code);

 private:
  // POSTs `fields` to `url` as this client (HTTP Basic, or in the body when the provider takes
  // only client_secret_post); the answer's JSON object and status.
  struct TokenAnswer {
    int status = 0;
    nlohmann::json body;
  };
  boost::asio::awaitable<Result<TokenAnswer>> postAsClient(
      const ProviderMetadata& m, std::string url,
      std::vector<std::pair<std::string, std::string>> fields);
  // The person a token answer's ID token vouches for (verified against `nonce`, or against no
  // nonce when `nonce` is empty), with the groups from userinfo when the ID token has none.
  boost::asio::awaitable<Result<SignedIn>> vouched(const ProviderMetadata& m,
                                                   const nlohmann::json& answer, std::string nonce);

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
