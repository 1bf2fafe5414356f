#include "common/public_key.h"

#include <utility>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>

#include <fmt/format.h>

namespace purser::crypto {

namespace {

struct JwsAlgorithm {
  std::string_view name;
  std::string_view key_type;  // "RSA" or "EC"
  const char* digest;
  bool pss = false;
  size_t ec_size = 0;  // ECDSA: the curve's size in bytes
};

constexpr JwsAlgorithm kAlgorithms[] = {
    {"RS256", "RSA", "SHA2-256"},           {"RS384", "RSA", "SHA2-384"},
    {"PS256", "RSA", "SHA2-256", true},     {"PS384", "RSA", "SHA2-384", true},
    {"ES256", "EC", "SHA2-256", false, 32}, {"ES384", "EC", "SHA2-384", false, 48},
};

const JwsAlgorithm* findAlgorithm(std::string_view name) {
  for (const auto& a : kAlgorithms) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::shared_ptr<EVP_PKEY> owned(EVP_PKEY* key) { return {key, EVP_PKEY_free}; }

// Builds a public key of `type` from `params`, then has OpenSSL check it.
Result<std::shared_ptr<EVP_PKEY>> fromParams(const char* type, OSSL_PARAM_BLD* builder) {
  OSSL_PARAM* params = OSSL_PARAM_BLD_to_param(builder);
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr);
  EVP_PKEY* key = nullptr;
  const bool made = params != nullptr && ctx != nullptr && EVP_PKEY_fromdata_init(ctx) == 1 &&
                    EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params) == 1;
  OSSL_PARAM_free(params);
  EVP_PKEY_CTX_free(ctx);
  if (!made) {
    ERR_clear_error();
    return fail(invalidArgument(fmt::format("the {} key's parameters are not a key", type)));
  }
  auto out = owned(key);
  EVP_PKEY_CTX* check = EVP_PKEY_CTX_new_from_pkey(nullptr, key, nullptr);
  const bool valid = check != nullptr && EVP_PKEY_public_check(check) == 1;
  EVP_PKEY_CTX_free(check);
  ERR_clear_error();
  if (!valid) return fail(invalidArgument(fmt::format("the {} key is not valid", type)));
  return out;
}

// JWS carries ECDSA's r and s side by side; OpenSSL verifies the DER encoding.
std::string ecdsaDer(std::string_view raw) {
  const size_t half = raw.size() / 2;
  const auto* bytes = reinterpret_cast<const unsigned char*>(raw.data());
  ECDSA_SIG* sig = ECDSA_SIG_new();
  BIGNUM* r = BN_bin2bn(bytes, static_cast<int>(half), nullptr);
  BIGNUM* s = BN_bin2bn(bytes + half, static_cast<int>(half), nullptr);
  std::string out;
  if (sig != nullptr && r != nullptr && s != nullptr && ECDSA_SIG_set0(sig, r, s) == 1) {
    r = s = nullptr;  // owned by sig now
    unsigned char* der = nullptr;
    const int n = i2d_ECDSA_SIG(sig, &der);
    if (n > 0) out.assign(reinterpret_cast<const char*>(der), static_cast<size_t>(n));
    OPENSSL_free(der);
  }
  BN_free(r);
  BN_free(s);
  ECDSA_SIG_free(sig);
  return out;
}

}  // namespace

bool jwsAlgorithmSupported(std::string_view alg) { return findAlgorithm(alg) != nullptr; }

Result<PublicKey> PublicKey::rsa(std::string_view modulus, std::string_view exponent) {
  while (!modulus.empty() && modulus.front() == '\0') modulus.remove_prefix(1);
  while (!exponent.empty() && exponent.front() == '\0') exponent.remove_prefix(1);
  if (modulus.size() * 8 < 2048 || modulus.size() > 2048) {
    return fail(invalidArgument(
        fmt::format("an RSA key of {} bits; 2048 to 16384 bits are accepted", modulus.size() * 8)));
  }
  if (exponent.empty() || exponent.size() > 8 || (exponent.back() & 1) == 0 ||
      (exponent.size() == 1 && static_cast<unsigned char>(exponent[0]) < 3)) {
    return fail(invalidArgument("the RSA key's public exponent is not an odd number of 3 or more"));
  }
  BIGNUM* n = BN_bin2bn(reinterpret_cast<const unsigned char*>(modulus.data()),
                        static_cast<int>(modulus.size()), nullptr);
  BIGNUM* e = BN_bin2bn(reinterpret_cast<const unsigned char*>(exponent.data()),
                        static_cast<int>(exponent.size()), nullptr);
  OSSL_PARAM_BLD* builder = OSSL_PARAM_BLD_new();
  Result<std::shared_ptr<EVP_PKEY>> key = fail(invalidArgument("the RSA key cannot be built"));
  if (n != nullptr && e != nullptr && builder != nullptr &&
      OSSL_PARAM_BLD_push_BN(builder, OSSL_PKEY_PARAM_RSA_N, n) == 1 &&
      OSSL_PARAM_BLD_push_BN(builder, OSSL_PKEY_PARAM_RSA_E, e) == 1) {
    key = fromParams("RSA", builder);
  }
  OSSL_PARAM_BLD_free(builder);
  BN_free(n);
  BN_free(e);
  if (!key) return fail(key.error());
  return PublicKey(std::move(*key), "RSA", 0);
}

Result<PublicKey> PublicKey::ec(std::string_view curve, std::string_view x, std::string_view y) {
  size_t size = 0;
  if (curve == "P-256") size = 32;
  if (curve == "P-384") size = 48;
  if (size == 0) {
    return fail(invalidArgument(
        fmt::format("the EC curve \"{}\" is not accepted; P-256 and P-384 are", curve)));
  }
  if (x.size() != size || y.size() != size) {
    return fail(
        invalidArgument(fmt::format("a {} key's coordinates are {} bytes each; these are {} and {}",
                                    curve, size, x.size(), y.size())));
  }
  std::string point = "\x04";
  point.append(x);
  point.append(y);
  const std::string group(curve);
  OSSL_PARAM_BLD* builder = OSSL_PARAM_BLD_new();
  Result<std::shared_ptr<EVP_PKEY>> key = fail(invalidArgument("the EC key cannot be built"));
  if (builder != nullptr &&
      OSSL_PARAM_BLD_push_utf8_string(builder, OSSL_PKEY_PARAM_GROUP_NAME, group.c_str(), 0) == 1 &&
      OSSL_PARAM_BLD_push_octet_string(builder, OSSL_PKEY_PARAM_PUB_KEY, point.data(),
                                       point.size()) == 1) {
    key = fromParams("EC", builder);
  }
  OSSL_PARAM_BLD_free(builder);
  if (!key) return fail(key.error());
  return PublicKey(std::move(*key), "EC", size);
}

bool PublicKey::verify(std::string_view alg, std::string_view signed_part,
                       std::string_view signature) const {
  const JwsAlgorithm* a = findAlgorithm(alg);
  if (a == nullptr || a->key_type != type_ || !key_) return false;
  std::string der;
  if (a->key_type == "EC") {
    if (a->ec_size != ec_size_ || signature.size() != 2 * ec_size_) return false;
    der = ecdsaDer(signature);
    if (der.empty()) return false;
    signature = der;
  }
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_PKEY_CTX* pctx = nullptr;
  bool ok = ctx != nullptr && EVP_DigestVerifyInit_ex(ctx, &pctx, a->digest, nullptr, nullptr,
                                                      key_.get(), nullptr) == 1;
  if (ok && a->pss) {
    ok = EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
         EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) == 1;
  }
  ok = ok && EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(signature.data()),
                              signature.size(),
                              reinterpret_cast<const unsigned char*>(signed_part.data()),
                              signed_part.size()) == 1;
  EVP_MD_CTX_free(ctx);
  ERR_clear_error();
  return ok;
}

}  // namespace purser::crypto
