// Keys and signed JWTs made for tests, as an OpenID provider makes them: an RSA 2048 (RS256) or
// ECDSA P-256 (ES256) key pair with its public JWK, and a compact JWS of any claims and header.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

typedef struct evp_pkey_st EVP_PKEY;

namespace purser::testing {

struct TestKey {
  std::shared_ptr<EVP_PKEY> pkey;
  nlohmann::json jwk;  // the public key, with "kid" (and "alg" for RSA)
  std::string alg;     // "RS256" or "ES256"
};

TestKey rsaKey(const std::string& kid);
TestKey ecKey(const std::string& kid);

// header null: {"alg": key.alg, "kid": key's kid, "typ": "JWT"}. Signed with SHA-256 whatever
// the header says (a test may lie in it).
std::string signJwt(const TestKey& key, const nlohmann::json& claims,
                    nlohmann::json header = nullptr);

}  // namespace purser::testing
