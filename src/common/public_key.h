// PublicKey: a key that verifies signatures, made from a JSON Web Key's parameters (RFC 7518
// section 6) — how an OpenID provider publishes the keys its ID tokens are signed with. Through
// OpenSSL's EVP interfaces like everything of common/crypto.h, and only with algorithms the FIPS
// provider offers: RS256, RS384, PS256, PS384 (RSA, 2048 bits or more), ES256 and ES384 (ECDSA
// on P-256 and P-384). "none", HMAC and anything else are refused by name.
//
// Thread-safety: a made key is immutable; verify() may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace purser::crypto {

// Whether `alg` is a JWS algorithm PublicKey verifies.
bool jwsAlgorithmSupported(std::string_view alg);

class PublicKey {
 public:
  // An RSA key from its modulus and public exponent (big-endian bytes, as base64url-decoded from
  // a JWK's "n" and "e"). kInvalidArgument for a modulus under 2048 bits or an even or tiny
  // exponent.
  static Result<PublicKey> rsa(std::string_view modulus, std::string_view exponent);
  // An EC key on `curve` ("P-256" or "P-384") from its point's coordinates (big-endian bytes of
  // the curve's size, a JWK's "x" and "y"). kInvalidArgument for another curve or a point that is
  // not on it.
  static Result<PublicKey> ec(std::string_view curve, std::string_view x, std::string_view y);

  // "RSA" or "EC".
  std::string_view type() const { return type_; }
  // Whether `signature` (as JWS carries it: RSA's bytes, or ECDSA's r and s of the curve's size
  // each) signs `signed_part` under the JWS algorithm `alg` with this key. False for an algorithm
  // of another key type or one not supported.
  bool verify(std::string_view alg, std::string_view signed_part, std::string_view signature) const;

 private:
  PublicKey(std::shared_ptr<EVP_PKEY> key, std::string type, size_t ec_size)
      : key_(std::move(key)), type_(std::move(type)), ec_size_(ec_size) {}
  std::shared_ptr<EVP_PKEY> key_;
  std::string type_;
  size_t ec_size_ = 0;  // EC: the size of each of r and s in bytes
};

}  // namespace purser::crypto
