// ID tokens: signed here with keys made for the test (RSA 2048 and ECDSA P-256, as identity
// providers sign), published as a JWK set, and checked the way the sign-in callback checks them —
// then attacked: another key, "none", HMAC with the public key as secret, tampered claims, wrong
// issuer, audience, nonce, expiry, and hostile bytes.
#include "identity/id_token.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/base64.h"
#include "common/crypto.h"
#include "fakes/jose.h"

namespace purser::identity {
namespace {

using nlohmann::json;

using testing::ecKey;
using testing::rsaKey;
using testing::TestKey;

std::string token(const TestKey& key, const json& claims, json header = nullptr) {
  return testing::signJwt(key, claims, std::move(header));
}

class IdTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rsa = rsaKey("rsa-1");
    ec = ecKey("ec-1");
    auto parsed = parseJwks(json{{"keys", {rsa.jwk, ec.jwk}}}.dump());
    ASSERT_TRUE(parsed.has_value()) << parsed.error().toString();
    keys = *parsed;
    expect = {.issuer = "http://127.0.0.1:4000",
              .client_id = "purser",
              .nonce = "n-0S6_WzA2Mj",
              .now = SystemTime(std::chrono::seconds(1'800'000'000))};
  }

  json claims() const {
    return {{"iss", "http://127.0.0.1:4000"},
            {"sub", "dana"},
            {"aud", "purser"},
            {"exp", 1'800'000'300},
            {"iat", 1'800'000'000},
            {"nonce", "n-0S6_WzA2Mj"},
            {"groups", {"ml-team", "everyone"}}};
  }

  // Why `t` is refused (empty when it is accepted).
  std::string refusal(const std::string& t) {
    auto r = verifyIdToken(t, keys, expect);
    return r ? std::string() : r.error().message;
  }

  TestKey rsa, ec;
  std::vector<Jwk> keys;
  IdTokenExpectations expect;
};

TEST_F(IdTokenTest, TokensSignedByTheProvidersKeysAreAccepted) {
  for (const TestKey* k : {&rsa, &ec}) {
    auto r = verifyIdToken(token(*k, claims()), keys, expect);
    ASSERT_TRUE(r.has_value()) << k->alg << ": " << r.error().message;
    EXPECT_EQ(r->subject, "dana");
    EXPECT_EQ(r->alg, k->alg);
    EXPECT_EQ(claimStrings(r->claims, "groups"), (std::vector<std::string>{"ml-team", "everyone"}));
  }
  // An audience list that holds the client, with it as the authorized party.
  json many = claims();
  many["aud"] = {"other", "purser"};
  many["azp"] = "purser";
  EXPECT_EQ(refusal(token(rsa, many)), "");
}

TEST_F(IdTokenTest, AnUnknownKeyIdIsNotFoundSoTheCallerRefreshesTheKeys) {
  const TestKey rotated = rsaKey("rsa-2");
  auto r = verifyIdToken(token(rotated, claims()), keys, expect);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  // The same key id signed by a key that is not the provider's: a bad signature.
  TestKey impostor = rsaKey("rsa-1");
  auto forged = verifyIdToken(token(impostor, claims()), keys, expect);
  ASSERT_FALSE(forged.has_value());
  EXPECT_EQ(forged.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(forged.error().message.find("signature does not verify"), std::string::npos);
}

TEST_F(IdTokenTest, NoneAndHmacAreNeverAccepted) {
  const std::string payload = base64UrlEncode(claims().dump());
  const std::string none = base64UrlEncode(json{{"alg", "none"}}.dump()) + "." + payload + ".";
  EXPECT_NE(refusal(none).find("algorithm \"none\" is not accepted"), std::string::npos)
      << refusal(none);
  // HS256 with the RSA key's public modulus as the secret: the classic confusion.
  const std::string hs_part =
      base64UrlEncode(json{{"alg", "HS256"}, {"kid", "rsa-1"}}.dump()) + "." + payload;
  const std::string secret = *base64UrlDecode(rsa.jwk["n"].get<std::string>());
  const std::string hs = hs_part + "." + base64UrlEncode(crypto::hmacSha256(secret, hs_part));
  EXPECT_NE(refusal(hs).find("algorithm \"HS256\" is not accepted"), std::string::npos);
  // An RSA-signed token that claims ES256 for the RSA key.
  json header = {{"alg", "ES256"}, {"kid", "rsa-1"}};
  EXPECT_FALSE(verifyIdToken(token(rsa, claims(), header), keys, expect).has_value());
}

TEST_F(IdTokenTest, TamperedClaimsBreakTheSignature) {
  const std::string t = token(rsa, claims());
  const size_t first = t.find('.');
  const size_t second = t.find('.', first + 1);
  json changed = claims();
  changed["sub"] = "admin";
  const std::string tampered =
      t.substr(0, first + 1) + base64UrlEncode(changed.dump()) + t.substr(second);
  EXPECT_NE(refusal(tampered).find("signature does not verify"), std::string::npos);
  // A flipped bit in the signature.
  std::string flipped = t;
  flipped[flipped.size() - 5] = flipped[flipped.size() - 5] == 'A' ? 'B' : 'A';
  EXPECT_NE(refusal(flipped), "");
}

TEST_F(IdTokenTest, EachClaimIsChecked) {
  const auto with = [&](const char* name, const json& value) {
    json c = claims();
    if (value.is_null()) {
      c.erase(name);
    } else {
      c[name] = value;
    }
    return refusal(token(ec, c));
  };
  EXPECT_NE(with("iss", "https://evil.example").find("issued by"), std::string::npos);
  EXPECT_NE(with("aud", "another-client").find("not meant for this client"), std::string::npos);
  EXPECT_NE(with("aud", nullptr).find("not meant for this client"), std::string::npos);
  EXPECT_NE(with("azp", "another-client").find("authorized party"), std::string::npos);
  EXPECT_NE(with("exp", 1'800'000'000 - 61).find("expired"), std::string::npos);
  EXPECT_EQ(with("exp", 1'800'000'000 - 30), "");  // within the leeway
  EXPECT_NE(with("exp", nullptr).find("no expiry"), std::string::npos);
  EXPECT_NE(with("exp", "tomorrow").find("no expiry"), std::string::npos);
  EXPECT_NE(with("iat", 1'800'000'000 + 600).find("in the future"), std::string::npos);
  EXPECT_NE(with("iat", 1'700'000'000).find("too long ago"), std::string::npos);
  EXPECT_NE(with("nbf", 1'800'000'600).find("not valid yet"), std::string::npos);
  EXPECT_NE(with("nonce", "replayed").find("nonce"), std::string::npos);
  EXPECT_NE(with("nonce", nullptr).find("nonce"), std::string::npos);
  EXPECT_NE(with("sub", nullptr).find("no subject"), std::string::npos);
  EXPECT_NE(with("sub", std::string(300, 's')).find("no subject"), std::string::npos);
}

TEST_F(IdTokenTest, HostileBytesAreRefusedClearly) {
  for (const std::string bad : {std::string(), std::string("a.b"), std::string("a.b.c.d"),
                                std::string("!!.??.**"), std::string("\xff\xfe.\x00.x", 7)}) {
    auto r = verifyIdToken(bad, keys, expect);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated) << r.error().message;
  }
  EXPECT_NE(refusal(std::string(kMaxTokenBytes + 1, 'a')).find("larger than"), std::string::npos);
  // A header nested deeper than a header ever is.
  json deep = "x";
  for (int i = 0; i < 20; ++i) deep = json::array({deep});
  const std::string part = base64UrlEncode(deep.dump());
  EXPECT_NE(refusal(part + "." + part + ".AAAA").find("not a JSON object"), std::string::npos);
}

TEST(JwksTest, OnlyUsableSigningKeysAreKept) {
  const TestKey rsa = rsaKey("r");
  json small = rsa.jwk;
  small["kid"] = "small";
  small["n"] = base64UrlEncode(std::string(128, '\xc1'));  // 1024 bits
  json enc = rsa.jwk;
  enc["use"] = "enc";
  const json set = {{"keys",
                     {small,
                      enc,
                      {{"kty", "oct"}, {"k", "c2VjcmV0"}},
                      {{"kty", "EC"}, {"crv", "P-521"}},
                      "not an object",
                      rsa.jwk}}};
  auto keys = parseJwks(set.dump());
  ASSERT_TRUE(keys.has_value()) << keys.error().toString();
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_EQ(keys->front().kid, "r");
  EXPECT_FALSE(parseJwks(R"({"keys":[{"kty":"oct","k":"c2VjcmV0"}]})").has_value());
  EXPECT_FALSE(parseJwks("[]").has_value());
  EXPECT_FALSE(parseJwks("not json").has_value());
}

TEST(JwksTest, AnEcPointOffTheCurveIsRefused) {
  const std::string x(32, '\x01'), y(32, '\x02');
  EXPECT_FALSE(crypto::PublicKey::ec("P-256", x, y).has_value());
  EXPECT_FALSE(crypto::PublicKey::ec("P-256", x, y.substr(1)).has_value());
  EXPECT_FALSE(
      crypto::PublicKey::rsa(std::string(256, '\xc3'), std::string("\x02", 1)).has_value());
}

TEST(PkceTest, TheS256ChallengeIsRfc7636s) {
  // RFC 7636 appendix B.
  EXPECT_EQ(pkceChallenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
  const std::string a = randomToken(), b = randomToken();
  EXPECT_EQ(a.size(), 43u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
            std::string::npos);
}

TEST(ClaimStringsTest, GroupsComeAsAListOrOneString) {
  EXPECT_EQ(claimStrings(json{{"groups", "admins"}}, "groups"),
            (std::vector<std::string>{"admins"}));
  EXPECT_EQ(claimStrings(json{{"groups", {"a", 1, nullptr, "", "b"}}}, "groups"),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(claimStrings(json{{"groups", {{"a", 1}}}}, "groups").empty());
  EXPECT_TRUE(claimStrings(json::object(), "groups").empty());
}

}  // namespace
}  // namespace purser::identity
