// Single sign-on's doors over HTTP on loopback, against a test double of an OpenID provider
// (tests/fakes/fake_oidc_provider.h) and a real SQLite store: the cookies' flags (Secure when
// served over TLS), where a sign-in returns, a user made once and followed at each sign-in (a
// name another user has, a move to another tenant revoking the keys of the one left), and every
// way a callback can be wrong. The Chromium test (tests/e2e/sso.test.mjs) drives a certified
// provider through a browser.
#include "api/sign_in_api.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "fakes/api_client.h"
#include "fakes/fake_oidc_provider.h"
#include "fakes/governance.h"
#include "fakes/raw_client.h"
#include "fakes/test_server.h"

namespace purser::api {
namespace {

using nlohmann::json;
using testing::RawResponse;

constexpr const char* kAdminKey = testing::kGovernanceAdminKey;
constexpr const char* kCallback = "https://purser.example/auth/oidc/callback";

// The value of the Set-Cookie for `name` among a response's ("name=value; flags" or "").
std::string setCookieOf(const RawResponse& r, const std::string& name) {
  std::string all = r.header("set-cookie");
  size_t start = 0;
  while (start <= all.size()) {
    const size_t end = std::min(all.find('\n', start), all.size());
    const std::string line = all.substr(start, end - start);
    if (line.starts_with(name + "=")) return line;
    start = end + 1;
  }
  return {};
}

std::string cookieValue(const std::string& set_cookie) {
  const size_t eq = set_cookie.find('='), semi = set_cookie.find(';');
  return set_cookie.substr(eq + 1, semi - eq - 1);
}

// The path and query of an absolute URL.
std::string pathOf(const std::string& url) {
  const size_t scheme = url.find("://");
  return url.substr(url.find('/', scheme + 3));
}

class SignInApiTest : public ::testing::Test, protected testing::Governance {
 protected:
  void SetUp() override {
    clock.setNow(SystemTime(std::chrono::seconds(testing::kOidcIssuedAt + 60)));
    ASSERT_TRUE(openGovernance());
    clients = std::make_unique<http::WorkerLocal<http::HttpClient>>(
        server.workers, [](boost::asio::io_context& ctx) {
          return std::make_unique<http::HttpClient>(ctx, http::ClientOptions{});
        });
    client = std::make_unique<sso::OidcClient>(
        sso::OidcOptions{.issuer = provider.issuer,
                         .client_id = "purser",
                         .client_secret = "s3cret",
                         .redirect_url = kCallback,
                         .scopes = {"openid", "profile", "groups"}},
        *clients, clock);
    auto o = std::make_shared<SignInOptions>();
    o->client = client.get();
    o->rules = {{"acme-ml", "acme", "ml", identity::Role::kMember},
                {"globex-ml", "globex", "research", identity::Role::kMember},
                {"ghosts", "nowhere", "", identity::Role::kTenantAdmin}};
    o->cookie_key = std::string(32, 'k');
    o->secure_cookies = true;  // as under TLS
    o->display_name = "Example";
    ASSERT_TRUE(addAdminRoutes(server.router, *services).has_value());
    ASSERT_TRUE(addSignInRoutes(server.router, *services, o).has_value());
    server.start();
    for (const auto& [tenant, team] : {std::pair{"acme", "ml"}, std::pair{"globex", "research"}}) {
      ASSERT_EQ(
          testing::callApi(server.port(), "POST", "/api/v1/tenants", kAdminKey, {{"name", tenant}})
              .status,
          201);
      ASSERT_EQ(testing::callApi(server.port(), "POST", "/api/v1/teams", kAdminKey,
                                 {{"tenant", tenant}, {"name", team}})
                    .status,
                201);
    }
  }

  void TearDown() override { server.stop(); }

  struct SignedIn {
    RawResponse login, callback;
    std::string session;  // the purser_session cookie's value, "" when none was set
  };

  // The browser's round trip: login, the provider (signing in `person`), the callback with the
  // pending cookie.
  SignedIn signIn(const json& person, const std::string& return_to = "") {
    SignedIn out;
    {
      std::lock_guard lock(provider.mu);
      provider.next_person = person;
    }
    out.login = testing::callJson(
        server.port(), "GET",
        "/auth/oidc/login" + (return_to.empty() ? "" : "?return_to=" + return_to));
    EXPECT_EQ(out.login.status, 302) << out.login.body;
    const RawResponse at_provider =
        testing::callJson(provider.server.port(), "GET", pathOf(out.login.header("location")));
    EXPECT_EQ(at_provider.status, 302) << at_provider.body;
    const std::string back = at_provider.header("location");
    EXPECT_TRUE(back.starts_with(kCallback)) << back;
    const std::string pending = cookieValue(setCookieOf(out.login, "purser_oidc"));
    out.callback =
        testing::callJson(server.port(), "GET", pathOf(back), {"Cookie: purser_oidc=" + pending});
    out.session = cookieValue(setCookieOf(out.callback, "purser_session"));
    return out;
  }

  testing::ApiReply whoami(const std::string& session) {
    return testing::callApi(server.port(), "GET", "/api/v1/whoami", "", nullptr,
                            {"Cookie: purser_session=" + session});
  }

  json users() { return testing::callApi(server.port(), "GET", "/api/v1/users", kAdminKey).body; }

  testing::FakeOidcProvider provider{kCallback};
  testing::TestServer server;
  std::unique_ptr<http::WorkerLocal<http::HttpClient>> clients;
  std::unique_ptr<sso::OidcClient> client;
};

TEST_F(SignInApiTest, TheCookiesAreSecureUnderTlsAndTheSignInReturnsWhereItBegan) {
  SignedIn s = signIn({{"sub", "p-1"}, {"preferred_username", "dana"}, {"groups", {"acme-ml"}}},
                      "%2F%23%2Fkeys");
  const std::string pending = setCookieOf(s.login, "purser_oidc");
  EXPECT_NE(pending.find("; Path=/auth/oidc; Max-Age=600; HttpOnly; Secure; SameSite=Lax"),
            std::string::npos)
      << pending;
  ASSERT_EQ(s.callback.status, 302) << s.callback.body;
  EXPECT_EQ(s.callback.header("location"), "/#/keys");
  const std::string session = setCookieOf(s.callback, "purser_session");
  EXPECT_EQ(session, "purser_session=" + s.session + "; Path=/; HttpOnly; Secure; SameSite=Lax");
  // The pending cookie is spent.
  EXPECT_NE(setCookieOf(s.callback, "purser_oidc").find("Max-Age=0"), std::string::npos);
  auto me = whoami(s.session);
  ASSERT_EQ(me.status, 200) << me.text;
  EXPECT_EQ(me.body["name"], "dana");
  EXPECT_EQ(me.body["role"], "member");
  EXPECT_EQ(me.body["tenant"]["name"], "acme");
  // A return somewhere else is not followed.
  SignedIn away = signIn({{"sub", "p-1"}, {"preferred_username", "dana"}, {"groups", {"acme-ml"}}},
                         "https%3A%2F%2Fevil.example%2F");
  EXPECT_EQ(away.callback.header("location"), "/");
  // Info: single sign-on is here, and a live cookie is signed in.
  auto info = testing::callApi(server.port(), "GET", "/auth/oidc/info", "", nullptr,
                               {"Cookie: purser_session=" + s.session});
  EXPECT_EQ(info.body["enabled"], true);
  EXPECT_EQ(info.body["signed_in"], true);
  EXPECT_EQ(info.body["display_name"], "Example");
  EXPECT_EQ(testing::callApi(server.port(), "GET", "/auth/oidc/info", "").body["signed_in"], false);
}

TEST_F(SignInApiTest, APersonIsOneUserLinkedBySubjectNeverByName) {
  // An admin made a "dana" before single sign-on; the person dana is another user.
  ASSERT_EQ(testing::callApi(server.port(), "POST", "/api/v1/users", kAdminKey,
                             {{"tenant", "acme"}, {"team", "ml"}, {"name", "dana"}})
                .status,
            201);
  const json person = {{"sub", "p-7"}, {"preferred_username", "dana"}, {"groups", {"acme-ml"}}};
  SignedIn first = signIn(person);
  ASSERT_EQ(first.callback.status, 302) << first.callback.body;
  const std::string name = whoami(first.session).body["name"];
  EXPECT_TRUE(name.starts_with("dana~")) << name;
  SignedIn second = signIn(person);
  EXPECT_EQ(whoami(second.session).body["name"], name);
  int danas = 0;
  const json all = users();
  for (const auto& u : all["data"]) danas += std::string(u["name"]).starts_with("dana");
  EXPECT_EQ(danas, 2);
  // Another person choosing the same username at the provider is a third user.
  SignedIn other =
      signIn({{"sub", "p-8"}, {"preferred_username", "dana"}, {"groups", {"acme-ml"}}});
  EXPECT_NE(whoami(other.session).body["id"], whoami(second.session).body["id"]);
}

TEST_F(SignInApiTest, AMoveToAnotherTenantRevokesTheKeysOfTheOneLeft) {
  SignedIn s = signIn({{"sub", "p-2"}, {"preferred_username", "eve"}, {"groups", {"acme-ml"}}});
  const std::string id = whoami(s.session).body["id"];
  auto key = testing::callApi(server.port(), "POST", "/api/v1/keys", kAdminKey,
                              {{"owner", {{"kind", "user"}, {"id", id}}}, {"name", "laptop"}});
  ASSERT_EQ(key.status, 201);
  const std::string secret = key.body["key"];
  EXPECT_EQ(testing::callApi(server.port(), "GET", "/api/v1/whoami", secret).status, 200);
  SignedIn moved =
      signIn({{"sub", "p-2"}, {"preferred_username", "eve"}, {"groups", {"globex-ml"}}});
  auto me = whoami(moved.session);
  EXPECT_EQ(me.body["id"], id);
  EXPECT_EQ(me.body["tenant"]["name"], "globex");
  EXPECT_EQ(me.body["team"]["name"], "research");
  auto refused = testing::callApi(server.port(), "GET", "/api/v1/whoami", secret);
  EXPECT_EQ(refused.status, 401);
  EXPECT_EQ(refused.body["detail"], "this API key was revoked");
  auto audit =
      testing::callApi(server.port(), "GET", "/api/v1/audit?action=user.sign_in_update", kAdminKey);
  ASSERT_EQ(audit.body["data"].size(), 1u);
  EXPECT_EQ(audit.body["data"][0]["after"]["keys_revoked"][0], key.body["id"]);
}

TEST_F(SignInApiTest, EveryWrongCallbackIsAPageSayingWhyAndNoSession) {
  const auto page = [](const RawResponse& r) { return r.status >= 400 ? r.body : "(no page)"; };
  // The provider said no.
  RawResponse denied =
      testing::callJson(server.port(), "GET",
                        "/auth/oidc/callback?error=access_denied&error_description=no%20thanks");
  EXPECT_EQ(denied.status, 401);
  EXPECT_NE(page(denied).find("access_denied: no thanks"), std::string::npos);
  EXPECT_EQ(denied.header("content-type"), "text/html; charset=utf-8");
  // No sign-in begun here; a cookie made up, or altered; the wrong state.
  EXPECT_EQ(testing::callJson(server.port(), "GET", "/auth/oidc/callback?code=c&state=s").status,
            400);
  RawResponse forged = testing::callJson(server.port(), "GET", "/auth/oidc/callback?code=c&state=s",
                                         {"Cookie: purser_oidc=eyJzIjoicyJ9.AAAA"});
  EXPECT_EQ(forged.status, 400);
  EXPECT_NE(page(forged).find("altered"), std::string::npos);
  RawResponse login = testing::callJson(server.port(), "GET", "/auth/oidc/login");
  const std::string pending = cookieValue(setCookieOf(login, "purser_oidc"));
  RawResponse wrong_state =
      testing::callJson(server.port(), "GET", "/auth/oidc/callback?code=c&state=not-it",
                        {"Cookie: purser_oidc=" + pending});
  EXPECT_EQ(wrong_state.status, 400);
  EXPECT_NE(page(wrong_state).find("state does not match"), std::string::npos);
  // Markup in what the provider says is shown as text.
  RawResponse markup = testing::callJson(
      server.port(), "GET", "/auth/oidc/callback?error=%3Cscript%3Ealert(1)%3C%2Fscript%3E");
  EXPECT_EQ(markup.body.find("<script>"), std::string::npos);
  EXPECT_NE(markup.body.find("&lt;script&gt;"), std::string::npos);
  // A person in no group; a group mapped to a tenant that does not exist.
  SignedIn nobody = signIn({{"sub", "p-3"}, {"preferred_username", "zed"}, {"groups", {"x"}}});
  EXPECT_EQ(nobody.callback.status, 403);
  EXPECT_NE(nobody.callback.body.find("zed is in no group that may use Purser"), std::string::npos);
  EXPECT_TRUE(nobody.session.empty());
  SignedIn ghost = signIn({{"sub", "p-4"}, {"preferred_username", "gus"}, {"groups", {"ghosts"}}});
  EXPECT_EQ(ghost.callback.status, 403);
  EXPECT_NE(ghost.callback.body.find("tenant &quot;nowhere&quot;, which does not exist"),
            std::string::npos);
  const json all = users();
  for (const auto& u : all["data"]) {
    EXPECT_NE(u["name"], "zed");
    EXPECT_NE(u["name"], "gus");
  }
  auto refusals = testing::callApi(server.port(), "GET",
                                   "/api/v1/audit?action=auth.sign_in_refused", kAdminKey);
  EXPECT_GE(refusals.body["data"].size(), 7u);
}

}  // namespace
}  // namespace purser::api
