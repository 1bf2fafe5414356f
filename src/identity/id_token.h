// ID tokens of OpenID Connect: an identity provider's signed statement of who signed in (a JWS in
// compact form, RFC 7515, carrying JWT claims, RFC 7519), checked as OpenID Connect Core 1.0
// section 3.1.3.7 says — signature by a key of the provider's JWK set, issuer, audience,
// authorized party, expiry, issue time, not-before and nonce — and the PKCE pieces of the
// authorization-code flow (RFC 7636, S256). Pure functions: the clock's reading, the keys and
// what is expected are handed in; fetching the JWK set is the caller's (its cache refreshed on an
// unknown key id, kNotFound here).
//
// Every input is hostile: a token is bounded (kMaxTokenBytes), its JSON parsed through
// common/json with a shallow nesting limit, and each claim's type checked before use.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/public_key.h"
#include "common/result.h"

namespace purser::identity {

inline constexpr size_t kMaxTokenBytes = 64 * 1024;
inline constexpr size_t kMaxJwks = 64;

// One key of a provider's JWK set, usable for signatures.
struct Jwk {
  std::string kid;  // may be empty when the set has one key
  std::string alg;  // may be empty: any algorithm of its type
  crypto::PublicKey key;
};

// The signing keys of a JWK set document ({"keys": [...]}). Keys that are not for signatures
// ("use": "enc"), of another type (oct, OKP) or malformed are left out; an error only when the
// document is not a JWK set or holds no usable key.
Result<std::vector<Jwk>> parseJwks(std::string_view document);

struct IdTokenExpectations {
  std::string issuer;     // exactly the "iss" claim
  std::string client_id;  // in "aud"; "azp" must be it when present
  std::string nonce;      // exactly the "nonce" claim
  // A flow without a nonce (the device authorization grant): the token must then carry none,
  // so one minted for a browser's sign-in cannot be replayed here.
  bool without_nonce = false;
  SystemTime now;
  std::chrono::seconds leeway{60};          // clock skew allowed on exp, nbf and iat
  std::chrono::seconds max_age{24 * 3600};  // an "iat" older than this is refused
};

struct IdToken {
  nlohmann::json claims;  // the whole payload, an object
  std::string subject;    // "sub"
  std::string kid, alg;   // from the header
};

// The token's claims when everything holds. Errors: kNotFound when no key of `keys` has the
// token's "kid" (refresh the JWK set and try once more); kUnauthenticated naming what failed
// otherwise (malformed, an algorithm not accepted — "none" and HMAC never are — a bad signature,
// another issuer or audience, expired, not yet valid, a nonce that differs).
Result<IdToken> verifyIdToken(std::string_view token, const std::vector<Jwk>& keys,
                              const IdTokenExpectations& expect);

// The "groups" of a person as a claim carries them: an array of strings, or one string (some
// providers send a single group so). Anything else is no groups. At most 1,000, each at most 256
// bytes; longer ones are left out.
std::vector<std::string> claimStrings(const nlohmann::json& claims, const std::string& name);

// PKCE: the S256 challenge of a code verifier (base64url of its SHA-256, no padding).
std::string pkceChallenge(std::string_view verifier);
// A fresh random value for a code verifier, state or nonce: 32 random bytes, base64url (43
// characters).
std::string randomToken();

}  // namespace purser::identity
