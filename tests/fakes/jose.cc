#include "fakes/jose.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>

#include "common/base64.h"

namespace purser::testing {

namespace {

using nlohmann::json;

std::string bnBytes(EVP_PKEY* key, const char* name) {
  BIGNUM* bn = nullptr;
  EVP_PKEY_get_bn_param(key, name, &bn);
  std::string out(static_cast<size_t>(BN_num_bytes(bn)), '\0');
  BN_bn2bin(bn, reinterpret_cast<unsigned char*>(out.data()));
  BN_free(bn);
  return out;
}

// Signs `signed_part` as JWS does with `key`.
std::string sign(const TestKey& key, const std::string& signed_part) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestSignInit_ex(ctx, nullptr, "SHA2-256", nullptr, nullptr, key.pkey.get(), nullptr);
  size_t n = 0;
  EVP_DigestSign(ctx, nullptr, &n, reinterpret_cast<const unsigned char*>(signed_part.data()),
                 signed_part.size());
  std::string sig(n, '\0');
  EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &n,
                 reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size());
  sig.resize(n);
  EVP_MD_CTX_free(ctx);
  if (key.alg == "ES256") {
    // DER to JWS's r || s.
    const auto* p = reinterpret_cast<const unsigned char*>(sig.data());
    ECDSA_SIG* s = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(sig.size()));
    std::string raw(64, '\0');
    BN_bn2binpad(ECDSA_SIG_get0_r(s), reinterpret_cast<unsigned char*>(raw.data()), 32);
    BN_bn2binpad(ECDSA_SIG_get0_s(s), reinterpret_cast<unsigned char*>(raw.data()) + 32, 32);
    ECDSA_SIG_free(s);
    return raw;
  }
  return sig;
}

}  // namespace

TestKey rsaKey(const std::string& kid) {
  TestKey k{std::shared_ptr<EVP_PKEY>(EVP_RSA_gen(2048), EVP_PKEY_free), nullptr, "RS256"};
  k.jwk = {{"kty", "RSA"},
           {"kid", kid},
           {"use", "sig"},
           {"alg", "RS256"},
           {"n", base64UrlEncode(bnBytes(k.pkey.get(), OSSL_PKEY_PARAM_RSA_N))},
           {"e", base64UrlEncode(bnBytes(k.pkey.get(), OSSL_PKEY_PARAM_RSA_E))}};
  return k;
}

TestKey ecKey(const std::string& kid) {
  TestKey k{std::shared_ptr<EVP_PKEY>(EVP_EC_gen("P-256"), EVP_PKEY_free), nullptr, "ES256"};
  unsigned char point[65];
  size_t n = 0;
  EVP_PKEY_get_octet_string_param(k.pkey.get(), OSSL_PKEY_PARAM_PUB_KEY, point, sizeof point, &n);
  const std::string p(reinterpret_cast<const char*>(point), n);
  k.jwk = {{"kty", "EC"},
           {"kid", kid},
           {"crv", "P-256"},
           {"x", base64UrlEncode(p.substr(1, 32))},
           {"y", base64UrlEncode(p.substr(33, 32))}};
  return k;
}

std::string signJwt(const TestKey& key, const json& claims, json header) {
  if (header.is_null()) header = {{"alg", key.alg}, {"kid", key.jwk["kid"]}, {"typ", "JWT"}};
  const std::string signed_part =
      base64UrlEncode(header.dump()) + "." + base64UrlEncode(claims.dump());
  return signed_part + "." + base64UrlEncode(sign(key, signed_part));
}

}  // namespace purser::testing
