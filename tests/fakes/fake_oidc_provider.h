// A test double of an OpenID provider on loopback, a few routes that behave as a provider must:
// discovery, a JWK set (one RSA key), an authorization endpoint that signs in `next_person` at
// once, a token endpoint that checks the client's secret ("purser"/"s3cret"), the PKCE verifier,
// the registered redirect URI and that a code is used once, and userinfo. Its ID tokens are
// issued at 1,800,000,000 (2027-01-15) and valid for 10 minutes: a test's clock stands there.
// The end-to-end tests drive a certified provider (tests/e2e/oidc_provider.mjs).
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "fakes/jose.h"
#include "fakes/test_server.h"
#include "http/message.h"
#include "identity/id_token.h"

namespace purser::testing {

using nlohmann::json;

// The instant the provider's ID tokens are issued at (seconds since the epoch).
inline constexpr int64_t kOidcIssuedAt = 1'800'000'000;

// application/x-www-form-urlencoded (and a query string) into its fields.
inline std::map<std::string, std::string> parseForm(std::string_view body) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start < body.size()) {
    const size_t amp = std::min(body.find('&', start), body.size());
    const std::string_view pair = body.substr(start, amp - start);
    const size_t eq = pair.find('=');
    if (eq != std::string_view::npos) {
      out[*http::percentDecode(pair.substr(0, eq), true)] =
          *http::percentDecode(pair.substr(eq + 1), true);
    }
    start = amp + 1;
  }
  return out;
}

// A code the provider issued: what the token endpoint checks and what it vouches for.
struct Grant {
  std::string challenge;
  std::string nonce;
  nlohmann::json claims;  // beside iss, aud, exp, iat, nonce
};

class FakeOidcProvider {
 public:
  explicit FakeOidcProvider(std::string redirect_uri)
      : redirect_uri(std::move(redirect_uri)), key(rsaKey("k1")) {
    add(http::Method::kGet, "/.well-known/openid-configuration",
        [this](http::Request&) { return http::Response::json(200, discovery().dump()); });
    add(http::Method::kGet, "/jwks", [this](http::Request&) {
      ++jwks_fetches;
      std::lock_guard lock(mu);
      return http::Response::json(200, json{{"keys", {key.jwk}}}.dump());
    });
    add(http::Method::kPost, "/token", [this](http::Request& r) { return token(r); });
    // The browser's visit: the person in `next_person` has signed in and consented; a code for
    // them goes back to the redirect URI with the state (a redirect URI not registered is refused,
    // as a provider must).
    add(http::Method::kGet, "/auth", [this](http::Request& r) {
      std::lock_guard lock(mu);
      const auto q = parseForm(r.query());
      auto at = [&](const char* k) { return q.count(k) ? q.at(k) : std::string(); };
      if (at("redirect_uri") != this->redirect_uri || at("code_challenge_method") != "S256") {
        return http::Response::text(400, "bad authorization request");
      }
      const std::string code = "code-" + std::to_string(++codes);
      grants[code] = {at("code_challenge"), at("nonce"), next_person};
      http::Response out = http::Response::text(302, "");
      out.headers.set("Location", this->redirect_uri + "?code=" + code + "&state=" + at("state"));
      return out;
    });
    add(http::Method::kGet, "/userinfo", [this](http::Request& r) {
      std::lock_guard lock(mu);
      const auto auth = r.headers.get("authorization");
      auto it = auth ? userinfo.find(std::string(auth->substr(7))) : userinfo.end();
      if (it == userinfo.end()) return http::Response::json(401, R"({"error":"invalid_token"})");
      return http::Response::json(200, it->second.dump());
    });
    server.start();
    issuer = "http://127.0.0.1:" + std::to_string(server.port());
  }

  json discovery() const {
    return {{"issuer", issuer},
            {"authorization_endpoint", issuer + "/auth"},
            {"token_endpoint", issuer + "/token"},
            {"jwks_uri", issuer + "/jwks"},
            {"userinfo_endpoint", issuer + "/userinfo"},
            {"code_challenge_methods_supported", {"S256"}},
            {"token_endpoint_auth_methods_supported", {"client_secret_basic"}}};
  }

  http::Response token(http::Request& r) {
    const auto form = parseForm(r.body);
    const auto auth = r.headers.get("authorization");
    if (!auth || *auth != "Basic " + base64Encode("purser:s3cret")) {
      return http::Response::json(401, R"({"error":"invalid_client"})");
    }
    std::lock_guard lock(mu);
    auto it = grants.find(form.count("code") ? form.at("code") : "");
    if (it == grants.end() || form.at("grant_type") != "authorization_code" ||
        form.at("redirect_uri") != redirect_uri) {
      return http::Response::json(400, R"({"error":"invalid_grant"})");
    }
    if (identity::pkceChallenge(form.at("code_verifier")) != it->second.challenge) {
      return http::Response::json(
          400, R"({"error":"invalid_grant","error_description":"PKCE verification failed"})");
    }
    json claims = it->second.claims;
    claims["iss"] = issuer;
    claims["aud"] = "purser";
    claims["iat"] = kOidcIssuedAt;
    claims["exp"] = kOidcIssuedAt + 600;
    claims["nonce"] = it->second.nonce;
    const std::string access = "at-" + form.at("code");
    grants.erase(it);  // a code is used once
    return http::Response::json(
        200,
        json{{"id_token", signJwt(key, claims)}, {"access_token", access}, {"token_type", "Bearer"}}
            .dump());
  }

  template <typename F>
  void add(http::Method m, const char* path, F f) {
    ASSERT_TRUE(server.router.add(m, path, f).has_value());
  }

  TestServer server;
  std::string issuer;
  const std::string redirect_uri;  // the one registered for the client "purser"
  std::mutex mu;
  TestKey key;                           // guarded by mu
  json next_person;                      // whom /auth signs in; guarded by mu
  int codes = 0;                         // guarded by mu
  std::map<std::string, Grant> grants;   // guarded by mu
  std::map<std::string, json> userinfo;  // by access token; guarded by mu
  std::atomic<int> jwks_fetches{0};
};

}  // namespace purser::testing
