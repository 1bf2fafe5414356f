// Crypto: the one door to cryptographic primitives. Everything goes through OpenSSL 3's EVP
// interfaces (fetched algorithms, no deprecated low-level calls), with algorithms the FIPS
// provider offers, so that `crypto.fips` can hold the whole process to FIPS-approved
// implementations. docs/operations.md lists every use ("Cryptography").
//
// Thread-safety: every function may be called from any thread. enableFips() runs once, at the
// start, before any other thread uses OpenSSL.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace purser::crypto {

// SHA-256 of `data`: 32 raw bytes, or 64 lower-case hex digits.
std::string sha256(std::string_view data);
std::string sha256Hex(std::string_view data);
// HMAC-SHA-256 of `data` under `key`: 32 raw bytes, or 64 lower-case hex digits.
std::string hmacSha256(std::string_view key, std::string_view data);
std::string hmacSha256Hex(std::string_view key, std::string_view data);
// `out` filled from OpenSSL's DRBG (seeded by the kernel; in FIPS mode the approved one). A
// failure to produce randomness stops the process (PURSER_CHECK): nothing can go on without it.
void randomBytes(std::span<uint8_t> out);
// The reason OpenSSL gives for the last error on this thread ("key values mismatch"), or empty
// when there is none; the thread's error queue is cleared either way.
std::string takeOpensslError();

// Equality of two secrets in time that depends only on their length.
bool constantTimeEquals(std::string_view a, std::string_view b);

// A cryptographic primitive Purser uses: its OpenSSL algorithm name, the kind of EVP object it
// is fetched as ("digest", "mac", "cipher", "rand", "signature", "keyexch"), and what for.
struct Primitive {
  std::string_view algorithm;
  std::string_view kind;
  std::string_view used_for;
};
// Every primitive Purser's own code uses (TLS's suites are OpenSSL's, named in tls_server.cc).
std::span<const Primitive> primitivesUsed();

// Fetches every primitive of primitivesUsed() under the property query `properties` (null: the
// default one): an error naming each that no loaded provider offers so.
Result<void> checkPrimitives(const char* properties);

// `crypto.fips: true`: loads the FIPS provider (and the base provider, for reading keys and
// certificates), makes `fips=yes` the default property query and checks that every primitive
// fetches under it. An error saying why when the FIPS provider is not installed or not usable.
Result<void> enableFips();
// Whether the default property query asks for FIPS implementations.
bool fipsEnabled();

}  // namespace purser::crypto
