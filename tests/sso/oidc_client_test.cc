// The relying party against a provider on loopback that behaves as an OpenID provider must:
// discovery, a JWK set, a token endpoint that checks the PKCE verifier, the redirect URI and the
// client's secret, and userinfo. The provider here is a test double of a few routes; the
// end-to-end test against a certified provider (panva's oidc-provider) drives the real thing.
#include "sso/oidc_client.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <atomic>
#include <map>
#include <mutex>

#include "common/base64.h"
#include "fakes/fake_oidc_provider.h"
#include "fakes/jose.h"
#include "fakes/test_server.h"
#include "http/message.h"

namespace purser::sso {
namespace {

using nlohmann::json;
using testing::FakeOidcProvider;
using testing::Grant;
using testing::parseForm;

class OidcClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clock.setNow(SystemTime(std::chrono::seconds(1'800'000'100)));
    clients = std::make_unique<http::WorkerLocal<http::HttpClient>>(
        workers, [](boost::asio::io_context& ctx) {
          return std::make_unique<http::HttpClient>(ctx, http::ClientOptions{});
        });
    workers.start();
    client = std::make_unique<OidcClient>(
        OidcOptions{.issuer = provider.issuer,
                    .client_id = "purser",
                    .client_secret = "s3cret",
                    .redirect_url = "https://purser.example/auth/oidc/callback",
                    .scopes = {"openid", "profile", "groups"}},
        *clients, clock);
  }
  void TearDown() override {
    workers.stop();
    workers.join();
  }

  template <typename T>
  T run(boost::asio::awaitable<T> coro) {
    return boost::asio::co_spawn(workers.context(0), std::move(coro), boost::asio::use_future)
        .get();
  }

  // start(), then the provider grants a code for `claims` as if the person signed in there.
  SignInStart begin(const std::string& code, json claims) {
    auto s = run(client->start());
    EXPECT_TRUE(s.has_value()) << s.error().toString();
    if (!s) return {};
    const std::string query = s->url.substr(s->url.find('?') + 1);
    const auto q = parseForm(query);
    EXPECT_EQ(q.at("response_type"), "code");
    EXPECT_EQ(q.at("client_id"), "purser");
    EXPECT_EQ(q.at("redirect_uri"), "https://purser.example/auth/oidc/callback");
    EXPECT_EQ(q.at("scope"), "openid profile groups");
    EXPECT_EQ(q.at("state"), s->state);
    EXPECT_EQ(q.at("nonce"), s->nonce);
    EXPECT_EQ(q.at("code_challenge_method"), "S256");
    EXPECT_EQ(q.at("code_challenge"), identity::pkceChallenge(s->verifier));
    std::lock_guard lock(provider.mu);
    provider.grants[code] = {q.at("code_challenge"), q.at("nonce"), std::move(claims)};
    return *s;
  }

  FakeOidcProvider provider{"https://purser.example/auth/oidc/callback"};
  ManualClock clock;
  http::Workers workers{1};
  std::unique_ptr<http::WorkerLocal<http::HttpClient>> clients;
  std::unique_ptr<OidcClient> client;
};

TEST_F(OidcClientTest, ACodeBecomesAVerifiedPersonWithGroups) {
  const SignInStart s = begin("c1", {{"sub", "u-17"},
                                     {"preferred_username", "dana"},
                                     {"email", "dana@example.com"},
                                     {"name", "Dana Scully"},
                                     {"groups", {"ml-team", "everyone"}}});
  EXPECT_EQ(s.url.rfind(provider.issuer + "/auth?", 0), 0u) << s.url;
  auto who = run(client->finish("c1", s.verifier, s.nonce));
  ASSERT_TRUE(who.has_value()) << who.error().toString();
  EXPECT_EQ(who->subject, "u-17");
  EXPECT_EQ(who->username, "dana");
  EXPECT_EQ(who->email, "dana@example.com");
  EXPECT_EQ(who->display_name, "Dana Scully");
  EXPECT_EQ(who->groups, (std::vector<std::string>{"ml-team", "everyone"}));
  // The code was used: a second exchange is refused by the provider.
  auto again = run(client->finish("c1", s.verifier, s.nonce));
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(again.error().message.find("invalid_grant"), std::string::npos);
}

TEST_F(OidcClientTest, AWrongVerifierOrNonceIsRefused) {
  const SignInStart s = begin("c2", {{"sub", "u-1"}});
  auto stolen = run(client->finish("c2", identity::randomToken(), s.nonce));
  ASSERT_FALSE(stolen.has_value());
  EXPECT_NE(stolen.error().message.find("PKCE verification failed"), std::string::npos)
      << stolen.error().message;

  const SignInStart t = begin("c3", {{"sub", "u-1"}});
  auto replayed = run(client->finish("c3", t.verifier, "another sign-in's nonce"));
  ASSERT_FALSE(replayed.has_value());
  EXPECT_EQ(replayed.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(replayed.error().message.find("nonce"), std::string::npos);
}

TEST_F(OidcClientTest, RotatedKeysAreFetchedAgainButNotOnEveryUnknownKeyId) {
  const SignInStart s = begin("c4", {{"sub", "u-1"}, {"groups", {"ml"}}});
  auto first = run(client->finish("c4", s.verifier, s.nonce));
  ASSERT_TRUE(first.has_value()) << first.error().toString();
  EXPECT_EQ(provider.jwks_fetches.load(), 1);
  {
    std::lock_guard lock(provider.mu);
    provider.key = testing::ecKey("k2");
  }
  clock.advance(std::chrono::seconds(11));
  const SignInStart t = begin("c5", {{"sub", "u-1"}, {"groups", {"ml"}}});
  auto rotated = run(client->finish("c5", t.verifier, t.nonce));
  ASSERT_TRUE(rotated.has_value()) << rotated.error().toString();
  EXPECT_EQ(provider.jwks_fetches.load(), 2);
  // Again within ten seconds, a key id nobody published: refused without another fetch.
  {
    std::lock_guard lock(provider.mu);
    provider.key = testing::ecKey("k3");
  }
  const SignInStart u = begin("c6", {{"sub", "u-1"}, {"groups", {"ml"}}});
  auto unknown = run(client->finish("c6", u.verifier, u.nonce));
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(provider.jwks_fetches.load(), 2);
}

TEST_F(OidcClientTest, GroupsMissingFromTheIdTokenAreReadFromUserinfoForTheSameSubject) {
  const SignInStart s = begin("c7", {{"sub", "u-9"}, {"email", "eve@example.com"}});
  {
    std::lock_guard lock(provider.mu);
    provider.userinfo["at-c7"] = {{"sub", "u-9"}, {"groups", {"platform"}}};
  }
  auto who = run(client->finish("c7", s.verifier, s.nonce));
  ASSERT_TRUE(who.has_value()) << who.error().toString();
  EXPECT_EQ(who->groups, std::vector<std::string>{"platform"});
  EXPECT_EQ(who->username, "eve@example.com");  // no preferred_username: the email

  const SignInStart t = begin("c8", {{"sub", "u-9"}});
  {
    std::lock_guard lock(provider.mu);
    provider.userinfo["at-c8"] = {{"sub", "someone-else"}, {"groups", {"platform"}}};
  }
  auto mixed = run(client->finish("c8", t.verifier, t.nonce));
  ASSERT_FALSE(mixed.has_value());
  EXPECT_NE(mixed.error().message.find("another subject"), std::string::npos);
}

TEST(OidcIssuerTest, OnlyHttpsOrThisMachinesLoopbackIsAccepted) {
  EXPECT_TRUE(checkIssuer("https://login.example.com").has_value());
  EXPECT_TRUE(checkIssuer("https://login.example.com/realms/acme").has_value());
  EXPECT_TRUE(checkIssuer("http://127.0.0.1:4000").has_value());
  for (const char* bad : {"http://localhost:4000", "http://10.0.0.1", "http://login.example.com",
                          "ftp://x", "not a url", "https://login.example.com/?x=1"}) {
    EXPECT_FALSE(checkIssuer(bad).has_value()) << bad;
  }
}

TEST(OidcDiscoveryTest, TheDocumentMustNameTheConfiguredIssuerAndSafeEndpoints) {
  const json good = {{"issuer", "https://id.example"},
                     {"authorization_endpoint", "https://id.example/auth"},
                     {"token_endpoint", "https://id.example/token"},
                     {"jwks_uri", "https://id.example/jwks"},
                     {"code_challenge_methods_supported", {"plain", "S256"}}};
  auto m = parseDiscovery(good.dump(), "https://id.example");
  ASSERT_TRUE(m.has_value()) << m.error().toString();
  EXPECT_TRUE(m->s256);
  EXPECT_EQ(m->userinfo_endpoint, "");

  auto other = parseDiscovery(good.dump(), "https://id.example/realms/acme");
  ASSERT_FALSE(other.has_value());
  EXPECT_NE(other.error().message.find("names itself"), std::string::npos);

  json plain = good;
  plain["token_endpoint"] = "http://id.example/token";
  EXPECT_FALSE(parseDiscovery(plain.dump(), "https://id.example").has_value());
  json missing = good;
  missing.erase("jwks_uri");
  EXPECT_FALSE(parseDiscovery(missing.dump(), "https://id.example").has_value());
  EXPECT_FALSE(parseDiscovery("[1,2]", "https://id.example").has_value());
  EXPECT_FALSE(parseDiscovery(std::string(100, '['), "https://id.example").has_value());
}

}  // namespace
}  // namespace purser::sso
