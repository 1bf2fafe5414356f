// The pending sign-in's cookie (sealed, tamper-evident, short-lived), where a sign-in may
// return, which `roles` entry a person matches, and the user names made of what a provider says.
#include "sso/sign_in.h"

#include <gtest/gtest.h>

#include "common/base64.h"
#include "common/json.h"

namespace purser::sso {
namespace {

using identity::Role;

PendingSignIn pending(SystemTime expires) {
  return {"state-1", "nonce-1", "verifier-1", "/#/spend", "http://127.0.0.1:9/auth/oidc/callback",
          expires};
}

TEST(SignInTest, APendingSignInOpensOnlyAsSealedWithItsKeyAndInTime) {
  ManualClock clock;
  const std::string key(32, 'k');
  const std::string cookie = sealPending(pending(clock.now() + std::chrono::minutes(10)), key);
  auto opened = openPending(cookie, key, clock.now());
  ASSERT_TRUE(opened.has_value()) << opened.error().message;
  EXPECT_EQ(opened->state, "state-1");
  EXPECT_EQ(opened->nonce, "nonce-1");
  EXPECT_EQ(opened->verifier, "verifier-1");
  EXPECT_EQ(opened->return_to, "/#/spend");
  EXPECT_EQ(opened->redirect_uri, "http://127.0.0.1:9/auth/oidc/callback");
  // Another key (another master key), a changed payload, a cut MAC, junk: all refused.
  EXPECT_FALSE(openPending(cookie, std::string(32, 'x'), clock.now()).has_value());
  const size_t dot = cookie.find('.');
  std::string payload = *base64UrlDecode(cookie.substr(0, dot));
  payload.replace(payload.find("state-1"), 7, "state-2");
  EXPECT_FALSE(
      openPending(base64UrlEncode(payload) + cookie.substr(dot), key, clock.now()).has_value());
  EXPECT_FALSE(openPending(cookie.substr(0, cookie.size() - 2), key, clock.now()).has_value());
  for (const char* junk : {"", ".", "abc", "a.b", "....", "\xff\xfe.\x01"}) {
    EXPECT_FALSE(openPending(junk, key, clock.now()).has_value()) << junk;
  }
  EXPECT_FALSE(openPending(std::string(5000, 'a') + ".b", key, clock.now()).has_value());
  clock.advance(std::chrono::minutes(10));
  auto late = openPending(cookie, key, clock.now());
  ASSERT_FALSE(late.has_value());
  EXPECT_EQ(late.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(late.error().message.find("too long"), std::string::npos);
}

TEST(SignInTest, ASignInReturnsOnlyToAPathOfThisServer) {
  EXPECT_EQ(safeReturnPath("/"), "/");
  EXPECT_EQ(safeReturnPath("/#/keys"), "/#/keys");
  EXPECT_EQ(safeReturnPath("/console?x=1"), "/console?x=1");
  for (const char* bad :
       {"", "https://evil.example", "//evil.example/", "/\\evil.example", "javascript:alert(1)",
        "/a\\b", "/a b", "/a\r\nSet-Cookie: x=y", "evil.example"}) {
    EXPECT_EQ(safeReturnPath(bad), "/") << bad;
  }
  EXPECT_EQ(safeReturnPath("/" + std::string(600, 'a')), "/");
}

TEST(SignInTest, TheFirstMatchingRuleWinsInTheConfigurationsOrder) {
  const std::vector<RoleRule> rules = {{"ops", "", "", Role::kPlatformAdmin},
                                       {"leads", "acme", "ml", Role::kTeamLead},
                                       {"ml", "acme", "ml", Role::kMember}};
  EXPECT_EQ(firstMatchingRule({"ml", "leads"}, rules), 1u);
  EXPECT_EQ(firstMatchingRule({"ml"}, rules), 2u);
  EXPECT_EQ(firstMatchingRule({"ml", "ops"}, rules), 0u);
  EXPECT_EQ(firstMatchingRule({"ML", "Ops", "contractors"}, rules), std::nullopt);
  EXPECT_EQ(firstMatchingRule({}, rules), std::nullopt);
}

TEST(SignInTest, UserNamesAreValidTextOfBoundedLength) {
  EXPECT_EQ(userNameFrom("dana"), "dana");
  EXPECT_EQ(userNameFrom("  dana@example.com "), "dana@example.com");
  EXPECT_EQ(userNameFrom("da\nna\x01"), "dana");
  EXPECT_EQ(userNameFrom(""), "user");
  EXPECT_EQ(userNameFrom("\x01\x02"), "user");
  EXPECT_EQ(userNameFrom(std::string(100, 'x')).size(), 64u);
  // Multi-byte characters are never cut in half.
  const std::string long_name = std::string(63, 'x') + "\xc3\xa9";
  EXPECT_EQ(userNameFrom(long_name), std::string(63, 'x'));
  EXPECT_EQ(userNameFrom("Jos\xc3\xa9"), "Jos\xc3\xa9");
  const std::string fixed = userNameFrom("bad\xff");  // invalid UTF-8 made valid
  EXPECT_TRUE(fixed.starts_with("bad"));
  EXPECT_EQ(toValidUtf8(fixed), fixed);
}

}  // namespace
}  // namespace purser::sso
