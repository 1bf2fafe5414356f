#include "common/crypto.h"

#include <gtest/gtest.h>
#include <openssl/provider.h>

#include <set>
#include <string>
#include <vector>

namespace purser::crypto {
namespace {

TEST(CryptoTest, Sha256MatchesTheStandardsVectors) {
  // FIPS 180-4 examples.
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256("abc").size(), 32u);
}

TEST(CryptoTest, HmacSha256MatchesRfc4231) {
  // RFC 4231 test cases 1 and 2.
  EXPECT_EQ(hmacSha256Hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(CryptoTest, RandomBytesAreFreshEachTime) {
  std::set<std::string> seen;
  for (int i = 0; i < 64; ++i) {
    std::vector<uint8_t> bytes(32);
    randomBytes(bytes);
    seen.emplace(bytes.begin(), bytes.end());
  }
  EXPECT_EQ(seen.size(), 64u);
  std::vector<uint8_t> none;
  randomBytes(none);  // nothing asked, nothing done
}

TEST(CryptoTest, ConstantTimeEqualsComparesWholeValues) {
  EXPECT_TRUE(constantTimeEquals("secret", "secret"));
  EXPECT_FALSE(constantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(constantTimeEquals("secret", "secret2"));
  EXPECT_TRUE(constantTimeEquals("", ""));
}

// The algorithms OpenSSL 3's FIPS provider implements, as its manual lists them
// (OSSL_PROVIDER-FIPS(7), "Operations and Algorithms"), by the names Purser fetches. TLS's own
// use of them is OpenSSL's.
const std::set<std::pair<std::string, std::string>>& fipsProviderOffers() {
  static const std::set<std::pair<std::string, std::string>> offers = {
      {"digest", "SHA1"},        {"digest", "SHA2-224"},    {"digest", "SHA2-256"},
      {"digest", "SHA2-384"},    {"digest", "SHA2-512"},    {"digest", "SHA3-256"},
      {"cipher", "AES-128-GCM"}, {"cipher", "AES-192-GCM"}, {"cipher", "AES-256-GCM"},
      {"cipher", "AES-256-CBC"}, {"cipher", "AES-256-CTR"}, {"mac", "HMAC"},
      {"mac", "CMAC"},           {"mac", "GMAC"},           {"mac", "KMAC-256"},
      {"kdf", "HKDF"},           {"kdf", "TLS1-PRF"},       {"kdf", "TLS13-KDF"},
      {"kdf", "PBKDF2"},         {"keyexch", "DH"},         {"keyexch", "ECDH"},
      {"signature", "RSA"},      {"signature", "ECDSA"},    {"rand", "CTR-DRBG"},
      {"rand", "HASH-DRBG"},     {"rand", "HMAC-DRBG"},
  };
  return offers;
}

TEST(CryptoTest, EveryPrimitivePurserUsesIsOneTheFipsProviderOffers) {
  ASSERT_FALSE(primitivesUsed().empty());
  for (const Primitive& p : primitivesUsed()) {
    EXPECT_TRUE(fipsProviderOffers().contains({std::string(p.kind), std::string(p.algorithm)}))
        << p.algorithm << " (" << p.kind << ") for " << p.used_for
        << " is not an algorithm of the FIPS provider";
    EXPECT_FALSE(p.used_for.empty());
  }
}

TEST(CryptoTest, EveryPrimitiveFetchesFromTheLoadedProviders) {
  auto fetched = checkPrimitives(nullptr);
  EXPECT_TRUE(fetched.has_value()) << fetched.error().toString();
}

TEST(CryptoTest, ThePropertyQueryDecidesWhichImplementationsCount) {
  // The default provider's implementations are not FIPS's: asked for fips=yes, none fetches
  // unless a FIPS provider is installed (then all must).
  auto fips = checkPrimitives("fips=yes");
  if (OSSL_PROVIDER_available(nullptr, "fips") == 1) {
    EXPECT_TRUE(fips.has_value()) << fips.error().toString();
  } else {
    ASSERT_FALSE(fips.has_value());
    EXPECT_NE(fips.error().message.find("SHA2-256 (digest)"), std::string::npos)
        << fips.error().message;
    EXPECT_NE(fips.error().message.find("under the property query \"fips=yes\""),
              std::string::npos);
  }
  // A query no implementation meets names every primitive.
  auto nothing = checkPrimitives("provider=nowhere");
  ASSERT_FALSE(nothing.has_value());
  for (const Primitive& p : primitivesUsed()) {
    EXPECT_NE(nothing.error().message.find(std::string(p.algorithm)), std::string::npos)
        << p.algorithm;
  }
}

TEST(CryptoTest, WithoutAFipsProviderFipsModeRefusesAndChangesNothing) {
  // Where a FIPS provider is installed this test would switch the whole process to it.
  OSSL_PROVIDER* probe = OSSL_PROVIDER_try_load(nullptr, "fips", 1);
  if (probe != nullptr) {
    OSSL_PROVIDER_unload(probe);
    GTEST_SKIP() << "this machine has OpenSSL's FIPS provider; the refusal cannot be shown here";
  }
  auto enabled = enableFips();
  ASSERT_FALSE(enabled.has_value());
  EXPECT_EQ(enabled.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(enabled.error().message.find("crypto.fips: OpenSSL's FIPS provider cannot be loaded"),
            std::string::npos)
      << enabled.error().message;
  EXPECT_NE(enabled.error().message.find("docs/operations.md"), std::string::npos);
  EXPECT_FALSE(fipsEnabled());
  // Everything still works as before.
  EXPECT_EQ(sha256Hex("abc").substr(0, 8), "ba7816bf");
}

}  // namespace
}  // namespace purser::crypto
