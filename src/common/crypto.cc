#include "common/crypto.h"

#include <utility>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/provider.h>
#include <openssl/rand.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "common/assert.h"

namespace purser::crypto {

namespace {

constexpr std::array<Primitive, 11> kPrimitives{{
    {"SHA2-256", "digest", "API key hashes, audit entry hashes"},
    {"HMAC", "mac", "the audit chain's MACs (HMAC-SHA-256 under the audit key)"},
    {"AES-256-GCM", "cipher", "sealed provider keys (the master key's encryption)"},
    {"CTR-DRBG", "rand", "API key secrets, master and audit keys, ids"},
    {"AES-128-GCM", "cipher", "TLS record protection"},
    {"SHA2-384", "digest", "TLS (the AES-256-GCM suites' hash)"},
    {"ECDH", "keyexch", "TLS key exchange (ECDHE)"},
    {"RSA", "signature", "TLS certificates (server, client, upstream)"},
    {"ECDSA", "signature", "TLS certificates (server, client, upstream)"},
    {"TLS1-PRF", "kdf", "TLS 1.2 key derivation"},
    {"HKDF", "kdf", "TLS 1.3 key derivation"},
}};

// The SHA-256 and HMAC implementations, fetched once (an implicit fetch by name on every call
// costs a lock and a lookup) under the default property query as it stands when first used.
EVP_MD* sha256Md() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA2-256", nullptr);
  PURSER_CHECK_MSG(md != nullptr, "no provider offers SHA-256");
  return md;
}

EVP_MAC* hmacMac() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  PURSER_CHECK_MSG(mac != nullptr, "no provider offers HMAC");
  return mac;
}

std::string hexOf(std::string_view raw) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (const char c : raw) {
    const auto b = static_cast<unsigned char>(c);
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

bool fetches(const Primitive& p, const char* properties) {
  bool ok = false;
  const std::string name(p.algorithm);
  if (p.kind == "digest") {
    EVP_MD* md = EVP_MD_fetch(nullptr, name.c_str(), properties);
    ok = md != nullptr;
    EVP_MD_free(md);
  } else if (p.kind == "cipher") {
    EVP_CIPHER* c = EVP_CIPHER_fetch(nullptr, name.c_str(), properties);
    ok = c != nullptr;
    EVP_CIPHER_free(c);
  } else if (p.kind == "mac") {
    EVP_MAC* m = EVP_MAC_fetch(nullptr, name.c_str(), properties);
    ok = m != nullptr;
    EVP_MAC_free(m);
  } else if (p.kind == "kdf") {
    EVP_KDF* k = EVP_KDF_fetch(nullptr, name.c_str(), properties);
    ok = k != nullptr;
    EVP_KDF_free(k);
  } else if (p.kind == "rand") {
    EVP_RAND* r = EVP_RAND_fetch(nullptr, name.c_str(), properties);
    ok = r != nullptr;
    EVP_RAND_free(r);
  } else if (p.kind == "signature") {
    EVP_SIGNATURE* s = EVP_SIGNATURE_fetch(nullptr, name.c_str(), properties);
    ok = s != nullptr;
    EVP_SIGNATURE_free(s);
  } else if (p.kind == "keyexch") {
    EVP_KEYEXCH* k = EVP_KEYEXCH_fetch(nullptr, name.c_str(), properties);
    ok = k != nullptr;
    EVP_KEYEXCH_free(k);
  }
  ERR_clear_error();
  return ok;
}

}  // namespace

std::string sha256(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  PURSER_CHECK(EVP_Digest(data.data(), data.size(), digest, &size, sha256Md(), nullptr) == 1);
  return std::string(reinterpret_cast<const char*>(digest), size);
}

std::string sha256Hex(std::string_view data) { return hexOf(sha256(data)); }

std::string hmacSha256(std::string_view key, std::string_view data) {
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>("SHA2-256"), 0),
      OSSL_PARAM_construct_end()};
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(hmacMac());
  PURSER_CHECK(ctx != nullptr);
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t size = 0;
  const bool ok =
      EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) ==
          1 &&
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1 &&
      EVP_MAC_final(ctx, out, &size, sizeof out) == 1;
  EVP_MAC_CTX_free(ctx);
  PURSER_CHECK_MSG(ok, "HMAC-SHA-256 failed");
  return std::string(reinterpret_cast<const char*>(out), size);
}

std::string hmacSha256Hex(std::string_view key, std::string_view data) {
  return hexOf(hmacSha256(key, data));
}

void randomBytes(std::span<uint8_t> out) {
  // RAND_bytes takes an int: large requests go in pieces.
  size_t done = 0;
  while (done < out.size()) {
    const size_t n = std::min<size_t>(out.size() - done, 1 << 20);
    PURSER_CHECK_MSG(RAND_bytes(out.data() + done, static_cast<int>(n)) == 1,
                     "the random generator failed");
    done += n;
  }
}

std::string takeOpensslError() {
  const unsigned long e = ERR_peek_last_error();
  std::string out;
  if (e != 0) {
    const char* reason = ERR_reason_error_string(e);
    out = reason != nullptr ? reason : fmt::format("OpenSSL error {:#x}", e);
  }
  ERR_clear_error();
  return out;
}

bool constantTimeEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::span<const Primitive> primitivesUsed() { return kPrimitives; }

Result<void> checkPrimitives(const char* properties) {
  std::string missing;
  for (const Primitive& p : kPrimitives) {
    if (fetches(p, properties)) continue;
    if (!missing.empty()) missing += ", ";
    missing += fmt::format("{} ({})", p.algorithm, p.kind);
  }
  if (!missing.empty()) {
    return fail(Error(ErrorCode::kFailedPrecondition,
                      fmt::format("no loaded OpenSSL provider offers {}{}", missing,
                                  properties != nullptr
                                      ? fmt::format(" under the property query \"{}\"", properties)
                                      : std::string())));
  }
  return {};
}

Result<void> enableFips() {
  // Fallbacks retained: a failed load must leave the default provider usable (the error is
  // reported and the process stops by its caller's choice); once fips=yes is the default
  // property query, only the FIPS provider's implementations are fetched anyway.
  OSSL_PROVIDER* fips = OSSL_PROVIDER_try_load(nullptr, "fips", 1);
  if (fips == nullptr) {
    const std::string why = takeOpensslError();
    return fail(
        Error(ErrorCode::kFailedPrecondition,
              fmt::format("crypto.fips: OpenSSL's FIPS provider cannot be loaded ({}). Install a "
                          "validated FIPS provider and its configuration (`openssl fipsinstall`; "
                          "SUSE and RHEL ship them with FIPS mode), or set crypto.fips: false; see "
                          "docs/operations.md \"FIPS\"",
                          why.empty() ? "not found in OpenSSL's module directory" : why)));
  }
  if (OSSL_PROVIDER_self_test(fips) != 1) {
    return fail(Error(
        ErrorCode::kFailedPrecondition,
        fmt::format("crypto.fips: the FIPS provider's self-test failed: {}", takeOpensslError())));
  }
  // Encoders and decoders (PEM keys and certificates) live in the base provider.
  if (OSSL_PROVIDER_try_load(nullptr, "base", 1) == nullptr) {
    return fail(Error(ErrorCode::kFailedPrecondition,
                      fmt::format("crypto.fips: OpenSSL's base provider cannot be loaded: {}",
                                  takeOpensslError())));
  }
  if (EVP_default_properties_enable_fips(nullptr, 1) != 1) {
    return fail(Error(ErrorCode::kFailedPrecondition,
                      fmt::format("crypto.fips: cannot set the default property query fips=yes: {}",
                                  takeOpensslError())));
  }
  return checkPrimitives(nullptr);
}

bool fipsEnabled() { return EVP_default_properties_is_fips_enabled(nullptr) == 1; }

}  // namespace purser::crypto
