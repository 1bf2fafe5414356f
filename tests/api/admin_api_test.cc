// The admin REST API over HTTP on loopback, with a real SQLite store.
#include "api/admin_api.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <nlohmann/json.hpp>

#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "fakes/api_client.h"
#include "fakes/fake_upstream.h"
#include "fakes/governance.h"
#include "fakes/raw_client.h"
#include "fakes/temp_dir.h"
#include "fakes/test_server.h"
#include "store/sqlite_store.h"

namespace purser::api {
namespace {

using nlohmann::json;
using testing::RawClient;

constexpr const char* kAdminKey = testing::kGovernanceAdminKey;

using Reply = testing::ApiReply;

// $2.50 in and $10.00 out per million tokens.
ledger::PriceBook testPrices() {
  return {{{"openai",
            "gpt-4o",
            {*Money::parse("2.50"), *Money::parse("10.00"), *Money::parse("1.25"), Money(),
             *Money::parse("10.00")}}},
          {}};
}

class AdminApiTest : public ::testing::Test, protected testing::Governance {
 protected:
  AdminApiTest() : Governance(testPrices()) {}

  void SetUp() override {
    ASSERT_TRUE(openGovernance());
    ASSERT_TRUE(addAdminRoutes(server.router, *services).has_value());
    ASSERT_TRUE(addMeteringRoutes(server.router, *services).has_value());
    server.start();
  }

  Reply call(const std::string& method, const std::string& path, const std::string& key,
             const json& body = nullptr) {
    return callAt(server.port(), method, path, key, body);
  }

  Reply callAt(uint16_t port, const std::string& method, const std::string& path,
               const std::string& key, const json& body = nullptr) {
    Reply out = testing::callApi(port, method, path, key, body);
    EXPECT_NE(out.status, 0) << method << " " << path << ": no answer";
    if (out.status >= 400) {
      EXPECT_EQ(out.header("content-type"), "application/problem+json") << path;
    }
    return out;
  }

  // Creates something as `key` and returns its id (failing the test on any other status).
  std::string create(const std::string& path, const std::string& key, const json& body) {
    Reply r = call("POST", path, key, body);
    EXPECT_EQ(r.status, 201) << path << " " << body.dump() << " -> " << r.body.dump();
    return r.body.value("id", "");
  }

  std::string keyFor(const std::string& kind, const std::string& id) {
    Reply r = call("POST", "/api/v1/keys", kAdminKey,
                   {{"owner", {{"kind", kind}, {"id", id}}}, {"name", "k-" + id}});
    EXPECT_EQ(r.status, 201) << r.body.dump();
    return r.body.value("key", "");
  }

  size_t count(const std::string& collection) {
    return call("GET", "/api/v1/" + collection, kAdminKey).body["data"].size();
  }

  testing::TestServer server;
};

TEST_F(AdminApiTest, RequestsWithoutAValidKeyAreRefused) {
  EXPECT_EQ(call("GET", "/api/v1/tenants", "").status, 401);
  Reply bad = call("GET", "/api/v1/tenants", "pk-01jb5k9w1g6v5r0q3c2m8x7t4e-wrongwrongwrong");
  EXPECT_EQ(bad.status, 401);
  EXPECT_EQ(bad.body["detail"], "invalid API key");
  EXPECT_EQ(call("GET", "/api/v1/tenants", kAdminKey).status, 200);
}

TEST_F(AdminApiTest, KeysAreShownOnceRotatedWithGraceAndRevoked) {
  const std::string tenant = create("/api/v1/tenants", kAdminKey, {{"name", "acme"}});
  const std::string team = create("/api/v1/teams", kAdminKey, {{"tenant", tenant}, {"name", "ml"}});
  const std::string user =
      create("/api/v1/users", kAdminKey, {{"tenant", "acme"}, {"team", "ml"}, {"name", "dana"}});
  Reply created = call("POST", "/api/v1/keys", kAdminKey,
                       {{"owner", {{"kind", "user"}, {"id", user}}},
                        {"name", "laptop"},
                        {"models", {"gpt-4o"}},
                        {"rpm", 60}});
  ASSERT_EQ(created.status, 201) << created.body.dump();
  const std::string secret = created.body["key"];
  const std::string id = created.body["id"];
  EXPECT_EQ(secret.rfind("pk-" + id + "-", 0), 0u);
  EXPECT_EQ(created.body["team"], team);
  // The secret is never shown again.
  Reply listed = call("GET", "/api/v1/keys", kAdminKey);
  for (const auto& k : listed.body["data"]) EXPECT_FALSE(k.contains("key"));
  EXPECT_EQ(call("GET", "/api/v1/keys", secret).status, 200);

  Reply rotated = call("POST", "/api/v1/keys/" + id + "/rotate", kAdminKey, {{"grace", "1h"}});
  ASSERT_EQ(rotated.status, 200) << rotated.body.dump();
  const std::string fresh = rotated.body["key"];
  EXPECT_NE(fresh, secret);
  EXPECT_EQ(call("GET", "/api/v1/keys", fresh).status, 200);
  EXPECT_EQ(call("GET", "/api/v1/keys", secret).status, 200) << "the old secret, within its grace";
  clock.advance(std::chrono::minutes(61));
  EXPECT_EQ(call("GET", "/api/v1/keys", secret).status, 401) << "the old secret, after its grace";

  EXPECT_EQ(call("DELETE", "/api/v1/keys/" + id, kAdminKey).status, 200);
  Reply revoked = call("GET", "/api/v1/keys", fresh);
  EXPECT_EQ(revoked.status, 401);
  EXPECT_EQ(revoked.body["detail"], "this API key was revoked");
  EXPECT_EQ(call("POST", "/api/v1/keys/" + id + "/rotate", kAdminKey).status, 409);
}

TEST_F(AdminApiTest, WalletsReportTheirStatus) {
  const std::string tenant = create("/api/v1/tenants", kAdminKey, {{"name", "acme"}});
  Reply w = call("POST", "/api/v1/wallets", kAdminKey,
                 {{"scope", {{"kind", "tenant"}, {"id", tenant}}},
                  {"limit", "100.00"},
                  {"period", "monthly"},
                  {"timezone", "Europe/Berlin"},
                  {"alert_at", {80, 100}}});
  ASSERT_EQ(w.status, 201) << w.body.dump();
  EXPECT_EQ(w.body["limit"], "100.00");
  EXPECT_EQ(w.body["spent"], "0.00");
  EXPECT_EQ(w.body["reserved"], "0.00");
  EXPECT_EQ(w.body["remaining"], "100.00");
  EXPECT_EQ(w.body["percent_used"], "0.00");
  EXPECT_EQ(w.body["window"]["start"], "2025-12-31T23:00:00.000Z");  // Jan 1st in Berlin
  Reply listed = call("GET", "/api/v1/wallets?scope=tenant:" + tenant, kAdminKey);
  ASSERT_EQ(listed.status, 200);
  ASSERT_EQ(listed.body["data"].size(), 1u);
  EXPECT_EQ(listed.body["data"][0]["id"], w.body["id"]);
  EXPECT_EQ(call("POST", "/api/v1/wallets", kAdminKey,
                 {{"scope", {{"kind", "tenant"}, {"id", tenant}}}, {"limit", "5"}})
                .status,
            409)
      << "one wallet per scope and model";
  EXPECT_EQ(
      call("POST", "/api/v1/wallets", kAdminKey,
           {{"scope", {{"kind", "tenant"}, {"id", tenant}}}, {"limit", "5"}, {"model", "gpt-4o"}})
          .status,
      201);
}

struct BadCase {
  std::string path;
  json body;
  int status;
  std::string field;
};

TEST_F(AdminApiTest, BadInputNamesTheFieldAndChangesNothing) {
  const std::string tenant = create("/api/v1/tenants", kAdminKey, {{"name", "acme"}});
  create("/api/v1/teams", kAdminKey, {{"tenant", tenant}, {"name", "ml"}});
  const json scope = {{"kind", "tenant"}, {"id", tenant}};
  const std::vector<BadCase> cases = {
      {"/api/v1/wallets", {{"scope", scope}, {"limit", "1.2.3"}}, 400, "limit"},
      {"/api/v1/wallets", {{"scope", scope}, {"limit", "-5"}}, 400, "limit"},
      {"/api/v1/wallets", {{"scope", scope}, {"limit", "1.0000000001"}}, 400, "limit"},
      {"/api/v1/wallets", {{"scope", scope}, {"limit", 100}}, 400, "limit"},
      {"/api/v1/wallets",
       {{"scope", scope}, {"limit", "10"}, {"period", "fortnightly"}},
       400,
       "period"},
      {"/api/v1/wallets",
       {{"scope", scope}, {"limit", "10"}, {"timezone", "Mars/Base"}},
       400,
       "timezone"},
      {"/api/v1/wallets",
       {{"scope", scope}, {"limit", "10"}, {"alert_at", {90, 50}}},
       400,
       "alert_at"},
      {"/api/v1/wallets",
       {{"scope", {{"kind", "team"}, {"id", "nope"}}}, {"limit", "10"}},
       404,
       "scope.id"},
      {"/api/v1/wallets",
       {{"scope", {{"kind", "galaxy"}, {"id", "x"}}}, {"limit", "10"}},
       400,
       "scope.kind"},
      {"/api/v1/tenants", {{"name", "acme"}}, 409, "name"},
      {"/api/v1/tenants", {{"name", ""}}, 400, "name"},
      {"/api/v1/tenants", {{"nom", "x"}}, 400, "name"},
      {"/api/v1/teams", {{"tenant", "nope"}, {"name", "x"}}, 404, "tenant"},
      {"/api/v1/teams", {{"tenant", tenant}, {"name", "ml"}}, 409, "name"},
      {"/api/v1/users", {{"tenant", tenant}, {"team", "nope"}, {"name", "x"}}, 404, "team"},
      {"/api/v1/users",
       {{"tenant", tenant}, {"team", "ml"}, {"name", "x"}, {"role", "boss"}},
       400,
       "role"},
      {"/api/v1/users",
       {{"tenant", tenant}, {"team", "ml"}, {"name", "x"}, {"email", "nope"}},
       400,
       "email"},
      {"/api/v1/keys",
       {{"owner", {{"kind", "user"}, {"id", "nope"}}}, {"name", "k"}},
       404,
       "owner.id"},
      {"/api/v1/keys",
       {{"owner", {{"kind", "robot"}, {"id", "x"}}}, {"name", "k"}},
       400,
       "owner.kind"},
      {"/api/v1/keys", {{"name", "k"}, {"priority", "urgent"}}, 400, "priority"},
      {"/api/v1/keys", {{"name", "k"}, {"priority", 2}}, 400, "priority"},
  };
  const auto before_wallets = count("wallets");
  const auto before_teams = count("teams");
  const auto before_users = count("users");
  const auto before_tenants = count("tenants");
  for (const auto& c : cases) {
    Reply r = call("POST", c.path, kAdminKey, c.body);
    EXPECT_EQ(r.status, c.status) << c.path << " " << c.body.dump() << " -> " << r.body.dump();
    EXPECT_EQ(r.body.value("field", ""), c.field) << c.body.dump() << " -> " << r.body.dump();
    EXPECT_FALSE(r.body.value("detail", "").empty());
  }
  Reply not_json = call("POST", "/api/v1/tenants", kAdminKey, nullptr);
  EXPECT_EQ(not_json.status, 400);
  EXPECT_EQ(call("DELETE", "/api/v1/keys/nope", kAdminKey).status, 404);
  EXPECT_EQ(call("GET", "/api/v1/wallets?scope=planet:x", kAdminKey).status, 400);
  EXPECT_EQ(call("GET", "/api/v1/audit?from=yesterday", kAdminKey).status, 400);
  EXPECT_EQ(count("wallets"), before_wallets);
  EXPECT_EQ(count("teams"), before_teams);
  EXPECT_EQ(count("users"), before_users);
  EXPECT_EQ(count("tenants"), before_tenants);
}

TEST_F(AdminApiTest, EveryChangeAndDenialIsAuditedAndTheChainVerifies) {
  const std::string tenant = create("/api/v1/tenants", kAdminKey, {{"name", "acme"}});
  create("/api/v1/teams", kAdminKey, {{"tenant", tenant}, {"name", "ml"}});
  const std::string admin = create("/api/v1/users", kAdminKey,
                                   {{"tenant", tenant}, {"name", "ada"}, {"role", "tenant-admin"}});
  const std::string admin_key = keyFor("user", admin);
  EXPECT_EQ(call("POST", "/api/v1/tenants", admin_key, {{"name", "other"}}).status, 403);
  Reply log = call("GET", "/api/v1/audit", kAdminKey);
  ASSERT_EQ(log.status, 200);
  std::vector<std::string> actions;
  for (const auto& e : log.body["data"]) actions.push_back(e["action"]);
  EXPECT_EQ(actions, (std::vector<std::string>{"bootstrap", "tenant.create", "team.create",
                                               "user.create", "key.create", "policy.deny"}));
  // The tenant admin sees their tenant's entries only (and may not verify the whole chain).
  Reply theirs = call("GET", "/api/v1/audit", admin_key);
  ASSERT_EQ(theirs.status, 200);
  for (const auto& e : theirs.body["data"]) EXPECT_EQ(e["tenant"], tenant);
  EXPECT_EQ(call("GET", "/api/v1/audit/verify", admin_key).status, 403);
  Reply verdict = call("GET", "/api/v1/audit/verify", kAdminKey);
  ASSERT_EQ(verdict.status, 200);
  EXPECT_EQ(verdict.body["ok"], true);
  EXPECT_EQ(verdict.body["entries"], 7);  // the six above and the denied verification
}

TEST_F(AdminApiTest, TheAuditLogPagesByEntryNumberAndNamesWhoAndWhat) {
  const std::string tenant = create("/api/v1/tenants", kAdminKey, {{"name", "acme"}});
  const std::string team = create("/api/v1/teams", kAdminKey, {{"tenant", tenant}, {"name", "ml"}});
  const std::string ada = create("/api/v1/users", kAdminKey,
                                 {{"tenant", tenant}, {"name", "ada"}, {"role", "tenant-admin"}});
  const std::string ada_key = keyFor("user", ada);
  const std::string wallet = create("/api/v1/wallets", ada_key,
                                    {{"scope", {{"kind", "team"}, {"id", team}}}, {"limit", "5"}});
  // Seven entries: bootstrap, tenant, team, user, key, wallet... and three more teams.
  for (const char* name : {"a", "b", "c"}) {
    create("/api/v1/teams", kAdminKey, {{"tenant", tenant}, {"name", name}});
  }
  std::vector<int64_t> seen;
  std::string before;
  for (int page = 0; page < 10; ++page) {
    Reply r = call("GET", "/api/v1/audit?order=desc&limit=3" + before, kAdminKey);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    for (const auto& e : r.body["data"]) seen.push_back(e["seq"]);
    if (!r.body["more"].get<bool>()) break;
    before = "&before=" + std::to_string(seen.back());
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{9, 8, 7, 6, 5, 4, 3, 2, 1}));
  Reply newer = call("GET", "/api/v1/audit?order=asc&limit=2&after=7", kAdminKey);
  ASSERT_EQ(newer.body["data"].size(), 2u);
  EXPECT_EQ(newer.body["data"][0]["seq"], 8);
  EXPECT_EQ(newer.body["more"], false);
  EXPECT_EQ(call("GET", "/api/v1/audit?before=0", kAdminKey).body["field"], "before");
  EXPECT_EQ(call("GET", "/api/v1/audit?after=x", kAdminKey).body["field"], "after");
  // Who did it and what it was done to, by name.
  Reply made = call("GET", "/api/v1/audit?action=wallet.create", kAdminKey);
  ASSERT_EQ(made.body["data"].size(), 1u);
  const json& e = made.body["data"][0];
  EXPECT_EQ(e["actor"], ada);
  EXPECT_EQ(e["actor_name"], "ada");
  EXPECT_EQ(e["target"], "wallet:" + wallet);
  EXPECT_EQ(e["target_name"], "team ml's wallet");
  Reply tenant_made = call("GET", "/api/v1/audit?action=tenant.create", kAdminKey);
  EXPECT_EQ(tenant_made.body["data"][0]["target_name"], "acme");
  EXPECT_EQ(call("GET", "/api/v1/audit?action=bootstrap", kAdminKey).body["data"][0]["actor_name"],
            nullptr);
}

// Roles x actions x tenants: allowed ones succeed, the rest get 403 (same tenant) or 404 (another
// tenant), and a denied request changes nothing.
TEST_F(AdminApiTest, RolesActionsAndTenantsMatrix) {
  const std::string a = create("/api/v1/tenants", kAdminKey, {{"name", "a"}});
  const std::string b = create("/api/v1/tenants", kAdminKey, {{"name", "b"}});
  const std::string a1 = create("/api/v1/teams", kAdminKey, {{"tenant", a}, {"name", "a1"}});
  const std::string a2 = create("/api/v1/teams", kAdminKey, {{"tenant", a}, {"name", "a2"}});
  create("/api/v1/teams", kAdminKey, {{"tenant", b}, {"name", "b1"}});
  const auto user = [&](const std::string& tenant, const std::string& team, const std::string& name,
                        const std::string& role) {
    json body = {{"tenant", tenant}, {"name", name}, {"role", role}};
    if (!team.empty()) body["team"] = team;
    return create("/api/v1/users", kAdminKey, body);
  };
  const std::string ta_a = user(a, "", "ta-a", "tenant-admin");
  const std::string tl_a1 = user(a, a1, "tl-a1", "team-lead");
  const std::string m_a1 = user(a, a1, "m-a1", "member");
  const std::string m_a2 = user(a, a2, "m-a2", "member");
  const std::string ta_b = user(b, "", "ta-b", "tenant-admin");
  const std::string sa_a1 = create("/api/v1/service-accounts", kAdminKey,
                                   {{"tenant", a}, {"team", a1}, {"name", "bot-a1"}});
  std::map<std::string, std::string> keys = {
      {"platform", kAdminKey},
      {"tenant-admin A", keyFor("user", ta_a)},
      {"team-lead A1", keyFor("user", tl_a1)},
      {"member A1", keyFor("user", m_a1)},
      {"member A2", keyFor("user", m_a2)},
      {"tenant-admin B", keyFor("user", ta_b)},
      {"service-account A1", keyFor("service_account", sa_a1)}};
  // The key the matrix revokes: one of member A1's.
  Reply target_key = call("POST", "/api/v1/keys", kAdminKey,
                          {{"owner", {{"kind", "user"}, {"id", m_a1}}}, {"name", "spare"}});
  const std::string spare = target_key.body["id"];

  struct Case {
    std::string what;
    std::string method;
    std::string path;
    std::function<json(const std::string&)> body;  // given a unique suffix
    std::map<std::string, int> expected;           // role -> status
  };
  const auto all = [](int platform, int ta_a, int tl, int m1, int m2, int ta_b, int sa) {
    return std::map<std::string, int>{{"platform", platform},    {"tenant-admin A", ta_a},
                                      {"team-lead A1", tl},      {"member A1", m1},
                                      {"member A2", m2},         {"tenant-admin B", ta_b},
                                      {"service-account A1", sa}};
  };
  const std::vector<Case> cases = {
      {"create a tenant", "POST", "/api/v1/tenants",
       [](const std::string& u) {
         return json{{"name", "t-" + u}};
       },
       all(201, 403, 403, 403, 403, 403, 403)},
      {"create a team in A", "POST", "/api/v1/teams",
       [&](const std::string& u) {
         return json{{"tenant", a}, {"name", "team-" + u}};
       },
       all(201, 201, 403, 403, 403, 404, 403)},
      {"create a member in A1", "POST", "/api/v1/users",
       [&](const std::string& u) {
         return json{{"tenant", a}, {"team", a1}, {"name", "user-" + u}};
       },
       all(201, 201, 201, 403, 403, 404, 403)},
      {"create a tenant admin in A", "POST", "/api/v1/users",
       [&](const std::string& u) {
         return json{{"tenant", a}, {"name", "admin-" + u}, {"role", "tenant-admin"}};
       },
       all(201, 201, 403, 403, 403, 404, 403)},
      {"create a service account in A1", "POST", "/api/v1/service-accounts",
       [&](const std::string& u) {
         return json{{"tenant", a}, {"team", a1}, {"name", "sa-" + u}};
       },
       all(201, 201, 201, 403, 403, 404, 403)},
      {"create a key for member A1", "POST", "/api/v1/keys",
       [&](const std::string& u) {
         return json{{"owner", {{"kind", "user"}, {"id", m_a1}}}, {"name", "key-" + u}};
       },
       all(201, 201, 201, 201, 403, 404, 403)},
      {"set team A1's wallet", "POST", "/api/v1/wallets",
       [&](const std::string& u) {
         return json{{"scope", {{"kind", "team"}, {"id", a1}}}, {"limit", "10"}, {"model", u}};
       },
       all(201, 201, 403, 403, 403, 404, 403)},
      {"set member A1's wallet", "POST", "/api/v1/wallets",
       [&](const std::string& u) {
         return json{{"scope", {{"kind", "user"}, {"id", m_a1}}}, {"limit", "10"}, {"model", u}};
       },
       all(201, 201, 201, 403, 403, 404, 403)},
      {"read member A1's wallets", "GET", "/api/v1/wallets?scope=user:" + m_a1,
       [](const std::string&) { return json(nullptr); }, all(200, 200, 200, 200, 403, 404, 403)},
      {"read the audit log", "GET", "/api/v1/audit",
       [](const std::string&) { return json(nullptr); }, all(200, 200, 403, 403, 403, 200, 403)},
      {"verify the audit chain", "GET", "/api/v1/audit/verify",
       [](const std::string&) { return json(nullptr); }, all(200, 403, 403, 403, 403, 403, 403)},
  };
  int n = 0;
  for (const auto& c : cases) {
    for (const auto& [role, expected] : c.expected) {
      const std::string suffix = std::to_string(++n);
      const size_t tenants = count("tenants"), teams = count("teams"), users = count("users"),
                   accounts = count("service-accounts"), nkeys = count("keys"),
                   nwallets = count("wallets");
      Reply r = call(c.method, c.path, keys.at(role), c.body(suffix));
      EXPECT_EQ(r.status, expected) << role << " / " << c.what << ": " << r.body.dump();
      if (r.status >= 400) {
        EXPECT_EQ(count("tenants"), tenants) << role << " / " << c.what;
        EXPECT_EQ(count("teams"), teams) << role << " / " << c.what;
        EXPECT_EQ(count("users"), users) << role << " / " << c.what;
        EXPECT_EQ(count("service-accounts"), accounts) << role << " / " << c.what;
        EXPECT_EQ(count("keys"), nkeys) << role << " / " << c.what;
        EXPECT_EQ(count("wallets"), nwallets) << role << " / " << c.what;
      }
    }
  }
  // Revoking member A1's key: the member, their lead, their tenant admin and the platform may.
  for (const auto& [role, expected] : all(200, 200, 200, 200, 403, 404, 403)) {
    if (expected != 200) {
      EXPECT_EQ(call("DELETE", "/api/v1/keys/" + spare, keys.at(role)).status, expected) << role;
    }
  }
  EXPECT_EQ(call("DELETE", "/api/v1/keys/" + spare, keys.at("member A1")).status, 200);
  // Lists show only what the caller may see: tenant B's admin sees nothing of tenant A.
  for (const char* collection :
       {"tenants", "teams", "users", "service-accounts", "keys", "wallets"}) {
    Reply r = call("GET", std::string("/api/v1/") + collection, keys.at("tenant-admin B"));
    ASSERT_EQ(r.status, 200);
    for (const auto& item : r.body["data"]) {
      const std::string tenant = item.contains("tenant") ? item["tenant"] : item["id"];
      EXPECT_EQ(tenant, b) << collection << ": " << item.dump();
    }
  }
  // A member sees their own keys only.
  const Reply own = call("GET", "/api/v1/keys", keys.at("member A1"));
  ASSERT_FALSE(own.body["data"].empty());
  for (const auto& k : own.body["data"]) EXPECT_EQ(k["owner"]["id"], m_a1);
}

// A tenant "acme" with team "ml", member "dana" and service account "bot", each with a key.
class MeteringTest : public AdminApiTest {
 protected:
  void SetUp() override {
    AdminApiTest::SetUp();
    tenant = create("/api/v1/tenants", kAdminKey, {{"name", "acme"}});
    team = create("/api/v1/teams", kAdminKey, {{"tenant", tenant}, {"name", "ml"}});
    dana =
        create("/api/v1/users", kAdminKey, {{"tenant", tenant}, {"team", team}, {"name", "dana"}});
    bot = create("/api/v1/service-accounts", kAdminKey,
                 {{"tenant", tenant}, {"team", team}, {"name", "bot"}});
    dana_key = keyFor("user", dana);
    bot_key = keyFor("service_account", bot);
  }

  std::string wallet(const json& scope, const char* limit, json extra = json::object()) {
    json body = {{"scope", scope}, {"limit", limit}};
    body.update(extra);
    return create("/api/v1/wallets", kAdminKey, body);
  }

  Reply reserve(const std::string& key, const char* amount, json extra = json::object()) {
    json body = {{"amount", amount}, {"model", "gpt-4o"}};
    body.update(extra);
    return call("POST", "/api/v1/reservations", key, body);
  }

  Reply settle(const std::string& key, const std::string& id, const char* cost,
               json extra = json::object()) {
    json body = {{"cost", cost}, {"tokens", {{"input", 100}, {"output", 20}}}};
    body.update(extra);
    return call("POST", "/api/v1/reservations/" + id + "/settle", key, body);
  }

  json walletStatus(const std::string& scope) {
    Reply r = call("GET", "/api/v1/wallets?scope=" + scope, kAdminKey);
    EXPECT_EQ(r.status, 200);
    return r.body["data"].empty() ? json() : r.body["data"][0];
  }

  std::string tenant, team, dana, bot, dana_key, bot_key;
};

TEST_F(MeteringTest, ReserveThenSettleChargesEveryWalletInTheChain) {
  wallet({{"kind", "tenant"}, {"id", tenant}}, "100.00");
  wallet({{"kind", "team"}, {"id", team}}, "10.00");
  wallet({{"kind", "user"}, {"id", dana}}, "5.00", {{"alert_at", {50}}});
  wallet({{"kind", "user"}, {"id", dana}}, "1.00", {{"model", "other-model"}});  // not in chain
  Reply r = reserve(dana_key, "3.00", {{"session_id", "s-1"}, {"tokens", 500}});
  ASSERT_EQ(r.status, 201) << r.body.dump();
  EXPECT_EQ(r.body["wallets"].size(), 3u);
  const std::string id = r.body["id"];
  EXPECT_EQ(walletStatus("user:" + dana)["reserved"], "3.00");

  Reply s = settle(dana_key, id, "2.60");
  ASSERT_EQ(s.status, 200) << s.body.dump();
  EXPECT_EQ(s.body["charged"], "2.60");
  EXPECT_EQ(s.body["overage"], "0.00");
  EXPECT_EQ(s.body["alerts"].size(), 1u);  // dana's 50 % threshold
  // ... also posted (the webhook's own delivery: tests/server/alert_webhook_test.cc).
  {
    const auto posted = alerts.posted();
    ASSERT_EQ(posted.size(), 1u);
    EXPECT_EQ(posted[0].tenant_id, tenant);
    EXPECT_EQ(posted[0].alert.threshold, 50);
    EXPECT_EQ(posted[0].alert.spent.toString(), "2.60");
    EXPECT_EQ(posted[0].alert.limit.toString(), "5.00");
  }
  EXPECT_EQ(walletStatus("user:" + dana)["spent"], "2.60");
  EXPECT_EQ(walletStatus("user:" + dana)["reserved"], "0.00");
  EXPECT_EQ(walletStatus("team:" + team)["spent"], "2.60");
  EXPECT_EQ(walletStatus("tenant:" + tenant)["percent_used"], "2.60");

  // Settling again changes nothing.
  Reply again = settle(dana_key, id, "9.99");
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(again.body["duplicate"], true);
  EXPECT_EQ(walletStatus("user:" + dana)["spent"], "2.60");

  Reply usage = call("GET", "/api/v1/usage?scope=team:" + team, kAdminKey);
  ASSERT_EQ(usage.status, 200);
  ASSERT_EQ(usage.body["data"].size(), 1u);
  const json& e = usage.body["data"][0];
  EXPECT_EQ(e["id"], id);
  EXPECT_EQ(e["user"], dana);
  EXPECT_EQ(e["session_id"], "s-1");
  EXPECT_EQ(e["cost"], "2.60");
  EXPECT_EQ(e["tokens"]["input"], 100);
  EXPECT_EQ(e["recovered"], false);
}

TEST_F(MeteringTest, WithoutAmountsReservationsAndSettlementsArePricedFromTheList) {
  Reply r = call("POST", "/api/v1/reservations", dana_key,
                 {{"model", "gpt-4o"}, {"input_tokens", 1000}, {"max_tokens", 500}});
  ASSERT_EQ(r.status, 201) << r.body.dump();
  // 1000 x 2.50 + 500 x 10.00 per million = 0.0075 worst case.
  EXPECT_EQ(r.body["amount"], "0.0075");
  Reply s = call("POST", "/api/v1/reservations/" + r.body["id"].get<std::string>() + "/settle",
                 dana_key, {{"tokens", {{"input", 800}, {"cached_input", 200}, {"output", 120}}}});
  ASSERT_EQ(s.status, 200) << s.body.dump();
  // 800 x 2.50 + 200 x 1.25 + 120 x 10.00 per million = 0.00345.
  EXPECT_EQ(s.body["charged"], "0.00345");
  Reply unpriced = call("POST", "/api/v1/reservations", dana_key,
                        {{"model", "mystery"}, {"input_tokens", 1}, {"max_tokens", 1}});
  EXPECT_EQ(unpriced.status, 400);
  EXPECT_EQ(unpriced.body["field"], "amount");
  Reply vague = call("POST", "/api/v1/reservations", dana_key, {{"model", "gpt-4o"}});
  EXPECT_EQ(vague.status, 400);
}

TEST_F(MeteringTest, SpendGroupsByUserModelAndDay) {
  for (const auto& [key, model, cost] :
       std::vector<std::tuple<std::string, std::string, const char*>>{
           {dana_key, "gpt-4o", "1.10"},
           {dana_key, "claude", "0.40"},
           {bot_key, "gpt-4o", "2.00"}}) {
    Reply r = reserve(key, "5", {{"model", model}});
    ASSERT_EQ(r.status, 201);
    ASSERT_EQ(settle(key, r.body["id"], cost).status, 200);
  }
  Reply by_user = call("GET", "/api/v1/spend?scope=tenant:" + tenant + "&group_by=user", kAdminKey);
  ASSERT_EQ(by_user.status, 200) << by_user.body.dump();
  EXPECT_EQ(by_user.body["total"], "3.50");
  std::map<std::string, std::string> costs;
  for (const auto& row : by_user.body["data"]) costs[row["group"]] = row["cost"];
  EXPECT_EQ(costs[dana], "1.50");
  EXPECT_EQ(costs[bot], "2.00");
  Reply by_model = call("GET", "/api/v1/spend?scope=team:" + team + "&group_by=model", kAdminKey);
  ASSERT_EQ(by_model.body["data"].size(), 2u);
  EXPECT_EQ(by_model.body["data"][1]["group"], "gpt-4o");
  EXPECT_EQ(by_model.body["data"][1]["cost"], "3.10");
  EXPECT_EQ(by_model.body["data"][1]["requests"], 2);
  Reply by_day = call("GET", "/api/v1/spend?scope=user:" + dana + "&group_by=day", kAdminKey);
  ASSERT_EQ(by_day.body["data"].size(), 1u);
  EXPECT_EQ(by_day.body["data"][0]["group"], "2026-01-01");
  Reply by_hour = call("GET", "/api/v1/spend?scope=user:" + dana + "&group_by=hour", kAdminKey);
  ASSERT_EQ(by_hour.body["data"].size(), 1u);
  EXPECT_EQ(by_hour.body["data"][0]["group"], "2026-01-01T00:00");
  EXPECT_EQ(by_hour.body["data"][0]["cost"], "1.50");
  // A member sees their own spend, not their colleague's.
  EXPECT_EQ(call("GET", "/api/v1/spend?scope=user:" + dana, dana_key).status, 200);
  EXPECT_EQ(call("GET", "/api/v1/spend?scope=service_account:" + bot, dana_key).status, 403);
  EXPECT_EQ(call("GET", "/api/v1/spend?scope=user:" + dana + "&group_by=planet", kAdminKey).status,
            400);
}

TEST_F(MeteringTest, AHardBudgetRefusesWhatWouldExceedItAndAuditsTheDenial) {
  wallet({{"kind", "service_account"}, {"id", bot}}, "1.00");
  ASSERT_EQ(reserve(bot_key, "0.60").status, 201);
  Reply refused = reserve(bot_key, "0.50");
  EXPECT_EQ(refused.status, 429);
  EXPECT_NE(refused.body["detail"].get<std::string>().find("budget exceeded"), std::string::npos)
      << refused.body.dump();
  Reply log = call("GET", "/api/v1/audit", kAdminKey);
  EXPECT_EQ(log.body["data"].back()["action"], "policy.deny");
  EXPECT_EQ(log.body["data"].back()["after"]["action"], "budget.deny");
}

TEST_F(MeteringTest, KeyRateLimitsAndModelAllowListsAreEnforced) {
  Reply limited = call("POST", "/api/v1/keys", kAdminKey,
                       {{"owner", {{"kind", "service_account"}, {"id", bot}}},
                        {"name", "ci"},
                        {"rpm", 2},
                        {"models", {"gpt-4o"}}});
  ASSERT_EQ(limited.status, 201);
  const std::string key = limited.body["key"];
  EXPECT_EQ(reserve(key, "0.01").status, 201);
  EXPECT_EQ(reserve(key, "0.01").status, 201);
  RawClient c(server.port());
  const std::string body = json{{"amount", "0.01"}, {"model", "gpt-4o"}}.dump();
  ASSERT_TRUE(c.send("POST /api/v1/reservations HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " +
                     key + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
                     body));
  auto third = c.readResponse();
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->status, 429);
  EXPECT_EQ(third->header("retry-after"), "30");
  clock.advance(std::chrono::seconds(30));
  EXPECT_EQ(reserve(key, "0.01").status, 201);
  Reply wrong_model = reserve(key, "0.01", {{"model", "claude"}});
  EXPECT_EQ(wrong_model.status, 403);
  EXPECT_EQ(wrong_model.body["field"], "model");
}

TEST_F(MeteringTest, AKeyMakesKeysOnlyWithinItsOwnLimitsAndTheyLiveAndDieWithIt) {
  // Found by a hostile tenant: a member key restricted to one model, rpm 1, a 10-minute expiry
  // and its own tiny wallet created a key with none of those limits, which kept working after
  // the parent key was revoked.
  const std::string expires = formatRfc3339(clock.now() + std::chrono::minutes(10));
  Reply parent = call("POST", "/api/v1/keys", kAdminKey,
                      {{"owner", {{"kind", "user"}, {"id", dana}}},
                       {"name", "restricted"},
                       {"models", {"gpt-4o"}},
                       {"rpm", 1},
                       {"expires_at", expires}});
  ASSERT_EQ(parent.status, 201) << parent.body.dump();
  const std::string parent_key = parent.body["key"];
  const std::string parent_id = parent.body["id"];
  wallet({{"kind", "key"}, {"id", parent_id}}, "0.10");
  const json owner = {{"kind", "user"}, {"id", dana}};
  // Anything beyond the key's own limits is refused, field by field.
  for (const json& extra :
       {json{{"models", {"gpt-4o", "claude"}}}, json{{"rpm", 1000}},
        json{{"expires_at", formatRfc3339(clock.now() + std::chrono::hours(1))}}}) {
    json body = {{"owner", owner}, {"name", "escape"}};
    body.update(extra);
    Reply refused = call("POST", "/api/v1/keys", parent_key, body);
    EXPECT_EQ(refused.status, 403) << extra.dump() << " " << refused.body.dump();
    EXPECT_EQ(refused.body["field"], extra.begin().key());
  }
  // What the request leaves open, the derived key inherits.
  Reply child = call("POST", "/api/v1/keys", parent_key, {{"owner", owner}, {"name", "child"}});
  ASSERT_EQ(child.status, 201) << child.body.dump();
  EXPECT_EQ(child.body["models"], json({"gpt-4o"}));
  EXPECT_EQ(child.body["rpm"], 1);
  EXPECT_EQ(child.body["expires_at"], expires);
  EXPECT_EQ(child.body["derived_from"], parent_id);
  const std::string child_key = child.body["key"];
  // Its usage is charged to the parent key's wallet, and counts in the parent key's rpm.
  Reply held = reserve(child_key, "0.08");
  ASSERT_EQ(held.status, 201) << held.body.dump();
  EXPECT_EQ(walletStatus("key:" + parent_id)["reserved"], "0.08");
  EXPECT_EQ(reserve(parent_key, "0.01").status, 429) << "the parent's rpm of 1 is used up";
  clock.advance(std::chrono::seconds(61));
  EXPECT_EQ(reserve(child_key, "0.05").status, 429) << "the parent key's wallet has 0.02 left";
  // Revoking the parent revokes what it made.
  Reply revoked = call("DELETE", "/api/v1/keys/" + parent_id, kAdminKey);
  ASSERT_EQ(revoked.status, 200);
  EXPECT_EQ(revoked.body["revoked_with_it"], json({child.body["id"]}));
  EXPECT_EQ(call("GET", "/api/v1/whoami", child_key).status, 401);
}

TEST_F(MeteringTest, AKeyGivesPrioritiesUpToItsOwnAndAdminsGiveAny) {
  const json owner = {{"kind", "user"}, {"id", dana}};
  const std::string ada = create("/api/v1/users", kAdminKey,
                                 {{"tenant", tenant}, {"name", "ada"}, {"role", "tenant-admin"}});
  const std::string ada_key = keyFor("user", ada);
  // Left open, a key is standard.
  Reply plain = call("POST", "/api/v1/keys", dana_key, {{"owner", owner}, {"name", "plain"}});
  ASSERT_EQ(plain.status, 201) << plain.body.dump();
  EXPECT_EQ(plain.body["priority"], "standard");
  // A tenant admin gives any priority its tenant's grant reaches: critical only once the
  // platform admin granted it.
  Reply ungranted = call("POST", "/api/v1/keys", ada_key,
                         {{"owner", owner}, {"name", "pager"}, {"priority", "critical"}});
  EXPECT_EQ(ungranted.status, 403) << ungranted.body.dump();
  EXPECT_EQ(ungranted.body["field"], "priority");
  ASSERT_EQ(call("PUT", "/api/v1/tenants/" + tenant + "/priority", kAdminKey,
                 {{"max_key_priority", "critical"}})
                .status,
            200);
  EXPECT_EQ(call("PUT", "/api/v1/tenants/" + tenant + "/priority", ada_key,
                 {{"max_key_priority", "critical"}})
                .status,
            403)
      << "a tenant admin does not grant its own tenant";
  Reply critical = call("POST", "/api/v1/keys", ada_key,
                        {{"owner", owner}, {"name", "pager"}, {"priority", "critical"}});
  ASSERT_EQ(critical.status, 201) << critical.body.dump();
  EXPECT_EQ(critical.body["priority"], "critical");
  // A member's standard key cannot make a critical one.
  Reply refused = call("POST", "/api/v1/keys", dana_key,
                       {{"owner", owner}, {"name", "escape"}, {"priority", "critical"}});
  EXPECT_EQ(refused.status, 403) << refused.body.dump();
  EXPECT_EQ(refused.body["field"], "priority");
  EXPECT_EQ(refused.body["detail"],
            "a key can only make keys within its own limits: priority critical is above this "
            "key's standard");
  // Lower is always allowed, and a sheddable key makes sheddable keys.
  Reply low = call("POST", "/api/v1/keys", dana_key,
                   {{"owner", owner}, {"name", "batch"}, {"priority", "sheddable"}});
  ASSERT_EQ(low.status, 201) << low.body.dump();
  EXPECT_EQ(low.body["priority"], "sheddable");
  const std::string low_key = low.body["key"];
  Reply inherited = call("POST", "/api/v1/keys", low_key, {{"owner", owner}, {"name", "batch-2"}});
  ASSERT_EQ(inherited.status, 201) << inherited.body.dump();
  EXPECT_EQ(inherited.body["priority"], "sheddable");
  Reply raised = call("POST", "/api/v1/keys", low_key,
                      {{"owner", owner}, {"name", "batch-3"}, {"priority", "standard"}});
  EXPECT_EQ(raised.status, 403) << raised.body.dump();
  EXPECT_EQ(raised.body["field"], "priority");
  // The critical key can make critical keys of its own; the list shows each key's priority.
  const std::string critical_key = critical.body["key"];
  Reply again = call("POST", "/api/v1/keys", critical_key,
                     {{"owner", owner}, {"name", "pager-2"}, {"priority", "critical"}});
  ASSERT_EQ(again.status, 201) << again.body.dump();
  EXPECT_EQ(again.body["priority"], "critical");
  std::map<std::string, std::string> listed;
  const Reply keys = call("GET", "/api/v1/keys", kAdminKey);
  for (const auto& k : keys.body["data"]) {
    listed[k["id"].get<std::string>()] = k["priority"].get<std::string>();
  }
  EXPECT_EQ(listed[critical.body["id"].get<std::string>()], "critical");
  EXPECT_EQ(listed[low.body["id"].get<std::string>()], "sheddable");
  EXPECT_EQ(listed[plain.body["id"].get<std::string>()], "standard");
}

TEST_F(MeteringTest, AlertThresholdsOutOfRangeAreRefusedNotWrapped) {
  // Found by a hostile tenant: alert_at [4294967346] silently became [50].
  for (const json& bad :
       {json{4294967346LL}, json{0}, json{1001}, json{18446744073709551615ULL}, json{2.5}}) {
    Reply r =
        call("POST", "/api/v1/wallets", kAdminKey,
             {{"scope", {{"kind", "user"}, {"id", dana}}}, {"limit", "1.00"}, {"alert_at", bad}});
    EXPECT_EQ(r.status, 400) << bad.dump() << " " << r.body.dump();
    EXPECT_EQ(r.body["field"], "alert_at");
  }
  EXPECT_TRUE(walletStatus("user:" + dana).is_null()) << "nothing was created";
}

TEST_F(MeteringTest, TeamAndModelRateLimitsApplyToEveryoneInScope) {
  // The team may make 3 requests a minute in all; dana's gpt-4o use is capped at 1000 tokens.
  ASSERT_EQ(call("POST", "/api/v1/rate-limits", kAdminKey,
                 {{"scope", {{"kind", "team"}, {"id", team}}}, {"rpm", 3}})
                .status,
            201);
  ASSERT_EQ(call("POST", "/api/v1/rate-limits", kAdminKey,
                 {{"scope", {{"kind", "user"}, {"id", dana}}}, {"model", "gpt-4o"}, {"tpm", 1000}})
                .status,
            201);
  EXPECT_EQ(reserve(dana_key, "0.01", {{"tokens", 900}}).status, 201);
  Reply tokens = reserve(dana_key, "0.01", {{"tokens", 200}});
  EXPECT_EQ(tokens.status, 429) << "dana's 1000 tokens a minute for gpt-4o";
  EXPECT_EQ(reserve(dana_key, "0.01", {{"tokens", 200}, {"model", "claude"}}).status, 201)
      << "the token cap is for gpt-4o only";
  EXPECT_EQ(reserve(bot_key, "0.01").status, 201);
  Reply team_full = reserve(bot_key, "0.01");
  EXPECT_EQ(team_full.status, 429) << "the team's 3 requests a minute are used up";
  EXPECT_NE(team_full.body["detail"].get<std::string>().find(":rpm"), std::string::npos);
  Reply listed = call("GET", "/api/v1/rate-limits?scope=team:" + team, kAdminKey);
  ASSERT_EQ(listed.body["data"].size(), 1u);
  EXPECT_EQ(listed.body["data"][0]["rpm"], 3);
  EXPECT_EQ(call("POST", "/api/v1/rate-limits", kAdminKey,
                 {{"scope", {{"kind", "team"}, {"id", team}}}, {"rpm", 5}})
                .status,
            409);
  EXPECT_EQ(call("POST", "/api/v1/rate-limits", kAdminKey,
                 {{"scope", {{"kind", "team"}, {"id", team}}}, {"model", "x"}})
                .status,
            400);
  EXPECT_EQ(call("POST", "/api/v1/rate-limits", dana_key,
                 {{"scope", {{"kind", "user"}, {"id", dana}}}, {"rpm", 1000}})
                .status,
            403)
      << "a member cannot lift their own limits";
}

TEST_F(MeteringTest, AnAbandonedReservationIsReleasedWhenItsLeaseExpires) {
  wallet({{"kind", "user"}, {"id", dana}}, "1.00");
  Reply r = reserve(dana_key, "0.90", {{"lease", "30s"}});
  ASSERT_EQ(r.status, 201);
  EXPECT_EQ(reserve(dana_key, "0.20").status, 429) << "held by the abandoned reservation";
  clock.advance(std::chrono::seconds(31));
  EXPECT_EQ(wallets.expireLeases().size(), 1u);  // what purser serve does every second
  EXPECT_EQ(walletStatus("user:" + dana)["reserved"], "0.00");
  EXPECT_EQ(reserve(dana_key, "0.20").status, 201);
}

TEST_F(MeteringTest, OnlyTheOwnerOrTheirAdminsMaySettleOrRelease) {
  Reply r = reserve(dana_key, "0.10");
  ASSERT_EQ(r.status, 201);
  const std::string id = r.body["id"];
  EXPECT_EQ(settle(bot_key, id, "0.10").status, 403);
  EXPECT_EQ(call("DELETE", "/api/v1/reservations/" + id, bot_key).status, 403);
  EXPECT_EQ(call("DELETE", "/api/v1/reservations/" + id, dana_key).status, 200);
  EXPECT_EQ(settle(dana_key, id, "0.10").status, 404);
}

// A new process over the same store and journal: the old one is killed (its journal left as it
// was), and the new one starts with fresh memory.
std::unique_ptr<ledger::Meter> reopened(ledger::Meter& old, store::Store& store,
                                        ledger::WalletBook& book, ManualClock& clock,
                                        ledger::AuditLog& audit, const std::string& journal) {
  old.abandon();
  auto m = ledger::Meter::open(store, book, clock, &audit, {.dir = journal});
  EXPECT_TRUE(m.has_value()) << m.error().toString();
  return m ? std::move(*m) : nullptr;
}

struct Restarted {
  Restarted(ManualClock& clock, Random& random, IdGenerator& ids, store::Store& store,
            ledger::AuditLog& audit, const ledger::PriceBook& prices, ledger::Meter& old,
            const std::string& journal)
      : book(clock),
        meter_owner(reopened(old, store, book, clock, audit, journal)),
        meter(*meter_owner),
        directory(clock),
        limiter(clock),
        records(store, audit),
        services{clock, random, ids, records, directory, book, meter, limiter, rate_limits, prices},
        store_(store),
        clock_(clock) {}
  // Loads what the store has, as a start does.
  Result<void> load() {
    return testing::loadGovernance(store_, clock_, directory, book, rate_limits);
  }
  ledger::WalletBook book;
  std::unique_ptr<ledger::Meter> meter_owner;
  ledger::Meter& meter;
  identity::Directory directory;
  ledger::RateLimiter limiter;
  ledger::RateLimitBook rate_limits;
  ledger::Records records;
  Services services;
  store::Store& store_;
  const Clock& clock_;
};

TEST_F(MeteringTest, ApiReservationsOutliveARestartUntilTheirLeaseEnds) {
  wallet({{"kind", "user"}, {"id", dana}}, "10.00");
  Reply r = reserve(dana_key, "3.25", {{"session_id", "lost"}, {"lease", "10m"}});
  ASSERT_EQ(r.status, 201);
  const std::string id = r.body["id"];
  Restarted after(clock, random, ids, *store, audit, prices, *meter, dir.file("journal"));
  ASSERT_TRUE(after.load().has_value());
  auto recovered = after.meter.recover();
  ASSERT_TRUE(recovered.has_value()) << recovered.error().toString();
  // Its client works on: the hold is taken again, nothing is charged.
  EXPECT_EQ(recovered->restored, 1);
  EXPECT_EQ(recovered->charged, 0);
  ASSERT_EQ(recovered->reservations.size(), 1u);
  EXPECT_EQ(recovered->reservations[0].draft.id, id);
  EXPECT_EQ(recovered->reservations[0].draft.session_id, "lost");
  const auto chain = after.book.chain({.user_id = dana}, "");
  ASSERT_EQ(chain.size(), 1u);
  EXPECT_EQ(after.book.status(chain[0])->reserved.toString(), "3.25");
  EXPECT_EQ(after.book.status(chain[0])->spent.toString(), "0.00");
  // Settled after the restart: charged once, the intent gone.
  auto settled = after.book.settle(id, Money::parse("1.00").value());
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(after.book.status(chain[0])->reserved.toString(), "0.00");
}

TEST_F(MeteringTest, EachApiKeepsItsOwnReservationsUntilTheyAreRestored) {
  wallet({{"kind", "user"}, {"id", dana}}, "10.00");
  Reply r = reserve(dana_key, "2.00", {{"lease", "10m"}});
  ASSERT_EQ(r.status, 201);
  const std::string id = r.body["id"];
  Restarted after(clock, random, ids, *store, audit, prices, *meter, dir.file("journal"));
  ASSERT_TRUE(after.load().has_value());
  auto recovered = after.meter.recover();
  ASSERT_TRUE(recovered.has_value()) << recovered.error().toString();
  ASSERT_EQ(recovered->reservations.size(), 1u);
  testing::TestServer second;
  ASSERT_TRUE(addMeteringRoutes(second.router, after.services).has_value());
  second.start();
  const json cost = {{"cost", "1.50"}};
  const std::string path = "/api/v1/reservations/" + id + "/settle";
  // A second API in the same process knows nothing of the first one's reservations...
  EXPECT_EQ(callAt(second.port(), "POST", path, dana_key, cost).status, 404);
  // ...until the ledger's recovered ones are handed to it.
  after.services.reservations->restore(recovered->reservations);
  Reply settled = callAt(second.port(), "POST", path, dana_key, cost);
  EXPECT_EQ(settled.status, 200) << settled.body.dump();
  EXPECT_EQ(settled.body["charged"], "1.50");
  const auto chain = after.book.chain({.user_id = dana}, "");
  ASSERT_EQ(chain.size(), 1u);
  EXPECT_EQ(after.book.status(chain[0])->spent.toString(), "1.50");
  EXPECT_EQ(after.book.status(chain[0])->reserved.toString(), "0.00");
}

TEST_F(MeteringTest, ApiReservationsWhoseLeaseEndedWhileDownAreDroppedNotCharged) {
  // Found by a hostile tenant: expired leases were kept on disk and charged at the next start,
  // even after a graceful stop ($2.00 charged on a $1.00 wallet).
  wallet({{"kind", "user"}, {"id", dana}}, "1.00");
  ASSERT_EQ(reserve(dana_key, "1.00", {{"lease", "30s"}}).status, 201);
  clock.advance(std::chrono::seconds(31));
  EXPECT_EQ(meter->expireLeases().size(), 1u);  // what purser serve does every second
  ASSERT_EQ(reserve(dana_key, "1.00", {{"lease", "30s"}}).status, 201);
  clock.advance(std::chrono::seconds(31));  // this one ends while the server is down
  Restarted after(clock, random, ids, *store, audit, prices, *meter, dir.file("journal"));
  ASSERT_TRUE(after.load().has_value());
  auto recovered = after.meter.recover();
  ASSERT_TRUE(recovered.has_value());
  EXPECT_EQ(recovered->dropped, 1);
  EXPECT_EQ(recovered->charged, 0);
  const auto chain = after.book.chain({.user_id = dana}, "");
  EXPECT_EQ(after.book.status(chain[0])->spent.toString(), "0.00");
  EXPECT_EQ(after.book.status(chain[0])->reserved.toString(), "0.00");
}

TEST_F(MeteringTest, InProcessWorkCutOffByARestartIsChargedAtItsWorstCaseWithinTheLimit) {
  const std::string w = wallet({{"kind", "user"}, {"id", dana}}, "10.00");
  // The gateway's own reservations (in-process work) die with the process.
  ledger::UsageEvent draft;
  draft.id = "cut-off";
  draft.tenant_id = tenant;
  draft.user_id = dana;
  draft.session_id = "lost";
  ASSERT_TRUE(meter->reserve(draft, {w}, Money::parse("3.25").value(), std::chrono::minutes(15))
                  .has_value());
  Restarted after(clock, random, ids, *store, audit, prices, *meter, dir.file("journal"));
  ASSERT_TRUE(after.load().has_value());
  auto recovered = after.meter.recover();
  ASSERT_TRUE(recovered.has_value()) << recovered.error().toString();
  EXPECT_EQ(recovered->charged, 1);
  auto events = after.meter.events({.scope_kind = ledger::ScopeKind::kUser, .scope_id = dana});
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].id, "cut-off");
  EXPECT_EQ((*events)[0].cost.toString(), "3.25");
  EXPECT_TRUE((*events)[0].recovered);
  EXPECT_TRUE((*events)[0].estimated);
  EXPECT_EQ((*events)[0].session_id, "lost");
  EXPECT_EQ(after.book.status(w)->spent.toString(), "3.25");
  EXPECT_EQ(after.meter.recover()->charged, 0) << "recovered once";
}

TEST_F(MeteringTest, SettlingAboveTheReservationChargesTheHoldAndRecordsTheOverage) {
  // Found by a hostile tenant: $250 settled on a $1.00 reservation was charged to a $1.00 hard
  // wallet.
  wallet({{"kind", "user"}, {"id", dana}}, "1.00");
  Reply r = reserve(dana_key, "1.00");
  ASSERT_EQ(r.status, 201);
  Reply s = settle(dana_key, r.body["id"], "250.00");
  ASSERT_EQ(s.status, 200) << s.body.dump();
  EXPECT_EQ(s.body["charged"], "1.00");
  EXPECT_EQ(s.body["overage"], "249.00");
  EXPECT_EQ(walletStatus("user:" + dana)["spent"], "1.00");
  Reply usage = call("GET", "/api/v1/usage?scope=user:" + dana, kAdminKey);
  ASSERT_EQ(usage.body["data"].size(), 1u);
  EXPECT_EQ(usage.body["data"][0]["cost"], "1.00");
  EXPECT_EQ(usage.body["data"][0]["overage"], "249.00");
  Reply spent = call("GET", "/api/v1/spend?scope=user:" + dana + "&group_by=user", kAdminKey);
  EXPECT_EQ(spent.body["overage"], "249.00");
  Reply audited = call("GET", "/api/v1/audit?action=usage.overage", kAdminKey);
  ASSERT_EQ(audited.body["data"].size(), 1u);
  EXPECT_EQ(audited.body["data"][0]["after"]["overage"], "249.00");
}

TEST_F(MeteringTest, ASettlementAfterTheLeaseEndedFitsWhatTheWalletHasLeft) {
  // Found by a hostile tenant: settling after the lease expired charged $1.20 on a $1.00 wallet.
  wallet({{"kind", "user"}, {"id", dana}}, "1.00");
  Reply first = reserve(dana_key, "1.00", {{"lease", "30s"}});
  ASSERT_EQ(first.status, 201);
  clock.advance(std::chrono::seconds(31));
  EXPECT_EQ(meter->expireLeases().size(), 1u);
  Reply second = reserve(dana_key, "0.80");
  ASSERT_EQ(second.status, 201);
  ASSERT_EQ(settle(dana_key, second.body["id"], "0.80").status, 200);
  Reply late = settle(dana_key, first.body["id"], "0.40");
  ASSERT_EQ(late.status, 200) << late.body.dump();
  EXPECT_EQ(late.body["charged"], "0.20");
  EXPECT_EQ(late.body["overage"], "0.20");
  EXPECT_EQ(walletStatus("user:" + dana)["spent"], "1.00");
}

TEST_F(MeteringTest, AnIdThatAlreadyHasAUsageEventIsRefusedEvenAfterARestart) {
  // Found by a hostile tenant: after a restart a reservation reusing a settled event's id was
  // accepted, and every later start failed on the usage_events primary key.
  Reply r = reserve(dana_key, "0.10", {{"id", "mine-1"}});
  ASSERT_EQ(r.status, 201);
  ASSERT_EQ(settle(dana_key, "mine-1", "0.10").status, 200);
  Restarted after(clock, random, ids, *store, audit, prices, *meter, dir.file("journal"));
  ASSERT_TRUE(after.load().has_value());
  ledger::UsageEvent draft;
  draft.id = "mine-1";
  draft.tenant_id = tenant;
  auto refused = after.meter.reserve(draft, {}, Money::parse("0.10").value(),
                                     std::chrono::minutes(1), {.external = true});
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(after.book.outstanding(), 0u) << "the hold is given back";
  auto recovered = after.meter.recover();
  ASSERT_TRUE(recovered.has_value()) << "the next start starts";
  EXPECT_EQ(recovered->quarantined, 0);
  // Through the API too, and ids are checked for shape.
  EXPECT_EQ(reserve(dana_key, "0.10", {{"id", "mine-1"}}).status, 409);
  EXPECT_EQ(reserve(dana_key, "0.10", {{"id", "bad id/\u00ff"}}).status, 400);
}

TEST_F(MeteringTest, AnIntentThatCannotBeResolvedIsSetAsideAndTheStartGoesOn) {
  Reply r = reserve(dana_key, "0.10", {{"id", "dup-1"}});
  ASSERT_EQ(r.status, 201);
  ASSERT_EQ(settle(dana_key, "dup-1", "0.10").status, 200);
  meter->close();  // a clean stop: the journal is all in the store, nothing left to replay
  // What the old bug left behind: an intent whose id already has a usage event, and one that
  // cannot be read.
  ASSERT_TRUE(store
                  ->write([](store::Tx& tx) -> Result<void> {
                    PURSER_TRY(tx.exec(
                        "INSERT INTO usage_intents (event_id, at_ms, amount_nanos, wallets, "
                        "event) VALUES ('dup-1', 0, 100, '[]', '{}')"));
                    PURSER_TRY(tx.exec(
                        "INSERT INTO usage_intents (event_id, at_ms, amount_nanos, wallets, "
                        "event) VALUES ('junk', 0, 100, 'not json', '{')"));
                    return {};
                  })
                  .has_value());
  Restarted after(clock, random, ids, *store, audit, prices, *meter, dir.file("journal"));
  ASSERT_TRUE(after.load().has_value());
  auto recovered = after.meter.recover();
  ASSERT_TRUE(recovered.has_value()) << recovered.error().toString();
  EXPECT_EQ(recovered->quarantined, 2);
  int64_t left = -1, set_aside = -1;
  ASSERT_TRUE(
      store
          ->read([&](store::Tx& tx) -> Result<void> {
            left = PURSER_TRY_VALUE(tx.query("SELECT COUNT(*) FROM usage_intents"))[0].getInt(0);
            set_aside =
                PURSER_TRY_VALUE(tx.query("SELECT COUNT(*) FROM ledger_quarantine"))[0].getInt(0);
            return {};
          })
          .has_value());
  EXPECT_EQ(left, 0);
  EXPECT_EQ(set_aside, 2);
  EXPECT_EQ(after.meter.recover()->quarantined, 0) << "set aside once";
}

TEST_F(MeteringTest, UsageThatRanElsewhereIsRecordedOnceAndChargesOnlyTheWindowItRanIn) {
  clock.setNow(parseRfc3339("2026-01-15T12:00:00Z").value());
  wallet({{"kind", "user"}, {"id", dana}}, "10.00", {{"period", "monthly"}});
  wallet({{"kind", "team"}, {"id", team}}, "100.00");  // no period: every event is in its window
  auto event = [&](const std::string& id, const std::string& at, const char* cost) {
    return json{{"id", id},
                {"at", at},
                {"owner", {{"kind", "user"}, {"id", "dana"}}},  // a name, as people give it
                {"model", "gpt-4o"},
                {"cost", cost},
                {"tokens", {{"input", 100}, {"output", 20}}}};
  };
  const json events = {event("old-1", "2025-12-20T09:00:00Z", "3.00"),
                       event("new-1", "2026-01-10T09:00:00Z", "2.00"),
                       event("new-2", "2026-01-15T11:00:00Z", "1.50")};
  auto usageCount = [&] {
    return call("GET", "/api/v1/usage?scope=user:" + dana, kAdminKey).body["data"].size();
  };

  // Only platform admins record usage; a bad event anywhere refuses the whole request, naming it.
  EXPECT_EQ(call("POST", "/api/v1/usage", dana_key, {{"events", events}}).status, 403);
  json bad = events;
  bad[1]["at"] = "2026-02-01T00:00:00Z";
  Reply future = call("POST", "/api/v1/usage", kAdminKey, {{"events", bad}});
  EXPECT_EQ(future.status, 400);
  EXPECT_EQ(future.body["field"], "events[1].at");
  bad = events;
  bad[2]["cost"] = "-1";
  EXPECT_EQ(call("POST", "/api/v1/usage", kAdminKey, {{"events", bad}}).body["field"],
            "events[2].cost");
  bad = events;
  bad[0]["owner"]["id"] = "nobody";
  Reply unknown = call("POST", "/api/v1/usage", kAdminKey, {{"events", bad}});
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.body["field"], "events[0].owner.id");
  bad = events;
  bad[0]["key"] = call("POST", "/api/v1/keys", kAdminKey,
                       {{"owner", {{"kind", "service_account"}, {"id", bot}}}, {"name", "other"}})
                      .body["id"];
  EXPECT_EQ(call("POST", "/api/v1/usage", kAdminKey, {{"events", bad}}).body["field"],
            "events[0].key");
  bad = events;
  bad[2]["id"] = "new-1";
  EXPECT_EQ(call("POST", "/api/v1/usage", kAdminKey, {{"events", bad}}).body["field"],
            "events[2].id");
  bad = events;
  bad[1]["tokens"]["output"] = "many";
  EXPECT_EQ(call("POST", "/api/v1/usage", kAdminKey, {{"events", bad}}).body["field"],
            "events[1].tokens.output");
  json many = json::array();
  for (int i = 0; i < 1001; ++i)
    many.push_back(event("e-" + std::to_string(i), "2026-01-02T00:00:00Z", "0.01"));
  Reply too_many = call("POST", "/api/v1/usage", kAdminKey, {{"events", many}});
  EXPECT_EQ(too_many.status, 400);
  EXPECT_EQ(too_many.body["field"], "events");
  EXPECT_EQ(call("POST", "/api/v1/usage", kAdminKey, {{"events", json::array()}}).status, 400);
  EXPECT_EQ(usageCount(), 0u) << "nothing refused was recorded";
  EXPECT_EQ(walletStatus("team:" + team)["spent"], "0.00");

  Reply r = call("POST", "/api/v1/usage", kAdminKey, {{"events", events}});
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["recorded"], 3);
  EXPECT_TRUE(r.body["already_recorded"].empty());
  EXPECT_EQ(r.body["charged"], "6.50");
  // December's event is history: in the reports and the team's open-ended wallet, not in Dana's
  // January budget.
  EXPECT_EQ(walletStatus("user:" + dana)["spent"], "3.50");
  EXPECT_EQ(walletStatus("team:" + team)["spent"], "6.50");
  Reply by_day = call("GET",
                      "/api/v1/spend?scope=user:" + dana +
                          "&group_by=day&from=2025-12-01T00:00:00Z&to=2026-01-16T00:00:00Z",
                      kAdminKey);
  ASSERT_EQ(by_day.status, 200) << by_day.body.dump();
  std::map<std::string, std::string> days;
  for (const auto& row : by_day.body["data"]) days[row["group"]] = row["cost"];
  EXPECT_EQ(days, (std::map<std::string, std::string>{
                      {"2025-12-20", "3.00"}, {"2026-01-10", "2.00"}, {"2026-01-15", "1.50"}}));

  // A retry records nothing twice.
  Reply again = call("POST", "/api/v1/usage", kAdminKey, {{"events", events}});
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(again.body["recorded"], 0);
  EXPECT_EQ(again.body["already_recorded"], json({"new-1", "new-2", "old-1"}));
  EXPECT_EQ(walletStatus("user:" + dana)["spent"], "3.50");
  EXPECT_EQ(usageCount(), 3u);
  // Recorded ids are taken, and an outstanding reservation's id cannot be recorded over.
  EXPECT_EQ(reserve(dana_key, "0.10", {{"id", "new-1"}}).status, 409);
  ASSERT_EQ(reserve(dana_key, "0.10", {{"id", "open-1"}}).status, 201);
  Reply open = call("POST", "/api/v1/usage", kAdminKey,
                    {{"events", {event("open-1", "2026-01-15T11:30:00Z", "0.10")}}});
  EXPECT_EQ(open.status, 409);
  EXPECT_EQ(open.body["field"], "events[0].id");
  // The change is audited in the tenant's log.
  Reply audited = call("GET", "/api/v1/audit?action=usage.record", kAdminKey);
  ASSERT_EQ(audited.status, 200);
  ASSERT_EQ(audited.body["data"].size(), 1u) << audited.body.dump();

  // What was charged is what a restart finds.
  Restarted after(clock, random, ids, *store, audit, prices, *meter, dir.file("journal"));
  ASSERT_TRUE(after.load().has_value());
  const auto chain = after.book.chain({.user_id = dana}, "");
  ASSERT_EQ(chain.size(), 1u);
  EXPECT_EQ(after.book.status(chain[0])->spent.toString(), "3.50");
}

// A person signed in through the identity provider: the session cookie reads every API, a change
// made with it needs the CSRF token (403 without), the CLI's bearer token needs none, and
// disabling the user ends the session and refuses their keys.
TEST_F(AdminApiTest, SignInSessionsReadWithTheCookieAndChangeOnlyWithTheCsrfToken) {
  create("/api/v1/tenants", kAdminKey, {{"name", "acme"}});
  create("/api/v1/teams", kAdminKey, {{"tenant", "acme"}, {"name", "ml"}});
  const std::string dana =
      create("/api/v1/users", kAdminKey, {{"tenant", "acme"}, {"team", "ml"}, {"name", "dana"}});
  const std::string olivia =
      create("/api/v1/users", kAdminKey,
             {{"tenant", "acme"}, {"name", "olivia"}, {"role", "tenant-admin"}});
  const std::string dana_key = keyFor("user", dana);
  const std::string olivia_key = keyFor("user", olivia);
  identity::NewSession browser =
      identity::newSession("s-browser", dana, identity::SessionKind::kConsole, clock.now(),
                           std::chrono::hours(24), std::chrono::hours(8));
  identity::NewSession cli =
      identity::newSession("s-cli", dana, identity::SessionKind::kCli, clock.now(),
                           std::chrono::hours(1), std::chrono::hours(1));
  ASSERT_TRUE(store->write([&](store::Tx& tx) -> Result<void> {
    PURSER_TRY(identity::insertSession(tx, browser.session));
    return identity::insertSession(tx, cli.session);
  }));
  ASSERT_EQ(identity::loadSessions(*store, clock.now())->size(), 2u);
  session_book.put(browser.session);
  session_book.put(cli.session);
  const std::string cookie = "Cookie: theme=dark; purser_session=" + browser.token;
  const auto withCookie = [&](const std::string& method, const std::string& path, const json& body,
                              std::vector<std::string> headers) {
    headers.push_back(cookie);
    return testing::callApi(server.port(), method, path, "", body, headers);
  };

  Reply me = withCookie("GET", "/api/v1/whoami", nullptr, {});
  ASSERT_EQ(me.status, 200) << me.text;
  EXPECT_EQ(me.body["name"], "dana");
  EXPECT_EQ(me.body["tenant"]["name"], "acme");
  EXPECT_TRUE(me.body["key_id"].is_null());
  EXPECT_EQ(me.body["session"]["kind"], "console");
  const std::string csrf = me.body["session"]["csrf_token"];
  EXPECT_EQ(csrf, browser.session.csrf_token);

  const json key_body = {{"owner", {{"kind", "user"}, {"id", dana}}}, {"name", "from-console"}};
  Reply no_token = withCookie("POST", "/api/v1/keys", key_body, {});
  EXPECT_EQ(no_token.status, 403) << no_token.text;
  EXPECT_NE(no_token.body.value("detail", "").find("X-Purser-CSRF"), std::string::npos);
  EXPECT_EQ(withCookie("POST", "/api/v1/keys", key_body, {"X-Purser-CSRF: " + csrf + "x"}).status,
            403);
  // The other session's token is not this one's.
  EXPECT_EQ(
      withCookie("POST", "/api/v1/keys", key_body, {"X-Purser-CSRF: " + cli.session.csrf_token})
          .status,
      403);
  EXPECT_EQ(withCookie("POST", "/api/v1/keys", key_body, {"X-Purser-CSRF: " + csrf}).status, 201);
  EXPECT_EQ(withCookie("DELETE", "/api/v1/keys/nope", nullptr, {}).status, 403);

  // The CLI's token is a bearer: no CSRF token, and a made-up one is refused like a bad key.
  Reply by_cli = call("POST", "/api/v1/keys", cli.token,
                      {{"owner", {{"kind", "user"}, {"id", dana}}}, {"name", "from-cli"}});
  EXPECT_EQ(by_cli.status, 201) << by_cli.text;
  EXPECT_EQ(call("GET", "/api/v1/whoami", cli.token).body["session"]["kind"], "cli");
  EXPECT_EQ(call("GET", "/api/v1/whoami", "pss_" + std::string(43, 'A')).status, 401);
  // A bearer key wins over the cookie (and needs no CSRF token).
  EXPECT_EQ(
      withCookie("POST", "/api/v1/keys", key_body, {"Authorization: Bearer " + olivia_key}).status,
      201);

  // Only admins disable; nobody disables themselves.
  EXPECT_EQ(call("POST", "/api/v1/users/" + olivia + "/disable", dana_key, json::object()).status,
            403);
  EXPECT_EQ(call("POST", "/api/v1/users/" + olivia + "/disable", olivia_key, json::object()).status,
            400);
  Reply disabled = call("POST", "/api/v1/users/" + dana + "/disable", olivia_key, json::object());
  ASSERT_EQ(disabled.status, 200) << disabled.text;
  EXPECT_FALSE(disabled.body["disabled_at"].is_null());
  EXPECT_EQ(session_book.size(), 0u);
  EXPECT_EQ(withCookie("GET", "/api/v1/whoami", nullptr, {}).status, 401);
  EXPECT_EQ(call("GET", "/api/v1/whoami", cli.token).status, 401);
  Reply by_key = call("GET", "/api/v1/whoami", dana_key);
  EXPECT_EQ(by_key.status, 401);
  EXPECT_EQ(by_key.body["detail"], "the user this API key belongs to is disabled");
  // Enabled again: keys work; the sessions stay ended.
  EXPECT_EQ(call("POST", "/api/v1/users/" + dana + "/enable", olivia_key, json::object()).status,
            200);
  EXPECT_EQ(call("GET", "/api/v1/whoami", dana_key).status, 200);
  EXPECT_EQ(withCookie("GET", "/api/v1/whoami", nullptr, {}).status, 401);
  // The store agrees: the disabled user reads back disabled, the sessions ended.
  auto live = identity::loadSessions(*store, clock.now());
  ASSERT_TRUE(live.has_value());
  EXPECT_TRUE(live->empty());
  Reply audit = call("GET", "/api/v1/audit?action=user.", kAdminKey);
  std::vector<std::string> actions;
  for (const auto& e : audit.body["data"]) actions.push_back(e["action"]);
  EXPECT_NE(std::find(actions.begin(), actions.end(), "user.disable"), actions.end());
  EXPECT_NE(std::find(actions.begin(), actions.end(), "user.enable"), actions.end());
}

// A member's key cannot give itself MCP tools: a key it derives stays within its own tools, and
// a pattern that is not one is refused.
TEST_F(AdminApiTest, AKeyCannotGiveItselfToolsItDoesNotHave) {
  create("/api/v1/tenants", kAdminKey, {{"name", "acme"}});
  create("/api/v1/teams", kAdminKey, {{"tenant", "acme"}, {"name", "ml"}});
  const std::string dana =
      create("/api/v1/users", kAdminKey, {{"tenant", "acme"}, {"team", "ml"}, {"name", "dana"}});
  Reply granted = call(
      "POST", "/api/v1/keys", kAdminKey,
      {{"owner", {{"kind", "user"}, {"id", dana}}}, {"name", "agent"}, {"tools", {"demo/echo"}}});
  ASSERT_EQ(granted.status, 201) << granted.text;
  const std::string key = granted.body["key"];
  EXPECT_EQ(call("POST", "/api/v1/keys", key, {{"name", "all"}, {"tools", {"*"}}}).status, 403);
  EXPECT_EQ(call("POST", "/api/v1/keys", key, {{"name", "more"}, {"tools", {"demo/*"}}}).status,
            403);
  EXPECT_EQ(call("POST", "/api/v1/keys", key, {{"name", "other"}, {"tools", {"secret/x"}}}).status,
            403);
  Reply same = call("POST", "/api/v1/keys", key, {{"name", "same"}, {"tools", {"demo/echo"}}});
  EXPECT_EQ(same.status, 201) << same.text;
  EXPECT_EQ(same.body["tools"], json::array({"demo/echo"}));
  Reply bad = call(
      "POST", "/api/v1/keys", kAdminKey,
      {{"owner", {{"kind", "user"}, {"id", dana}}}, {"name", "bad"}, {"tools", {"demo/ec ho"}}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body["field"], "tools");
}

// Grants: a tenant's for platform admins, a team's for its tenant's admins; a key without
// tools of its own takes them, and a key derived from one with its own list can never fall
// back to a wider grant.
TEST_F(AdminApiTest, TeamsAndTenantsAreGrantedToolsByThoseWhoMay) {
  const std::string acme = create("/api/v1/tenants", kAdminKey, {{"name", "acme"}});
  const std::string ml = create("/api/v1/teams", kAdminKey, {{"tenant", "acme"}, {"name", "ml"}});
  const std::string boss = create("/api/v1/users", kAdminKey,
                                  {{"tenant", "acme"}, {"name", "boss"}, {"role", "tenant-admin"}});
  const std::string dana =
      create("/api/v1/users", kAdminKey, {{"tenant", "acme"}, {"team", "ml"}, {"name", "dana"}});
  const std::string boss_key = call("POST", "/api/v1/keys", kAdminKey,
                                    {{"owner", {{"kind", "user"}, {"id", boss}}}, {"name", "b"}})
                                   .body["key"];
  const std::string dana_key = call("POST", "/api/v1/keys", kAdminKey,
                                    {{"owner", {{"kind", "user"}, {"id", dana}}}, {"name", "d"}})
                                   .body["key"];
  // A tenant's grant is the platform's to give.
  EXPECT_EQ(call("PUT", "/api/v1/tenants/acme/tools", boss_key, {{"tools", {"*"}}}).status, 403);
  Reply tenant = call("PUT", "/api/v1/tenants/acme/tools", kAdminKey, {{"tools", {"search/*"}}});
  ASSERT_EQ(tenant.status, 200) << tenant.text;
  EXPECT_EQ(tenant.body["tools"], json::array({"search/*"}));
  // A team's is its tenant admin's; a member cannot grant themselves anything.
  EXPECT_EQ(call("PUT", "/api/v1/teams/" + ml + "/tools", dana_key, {{"tools", {"*"}}}).status,
            403);
  Reply team = call("PUT", "/api/v1/teams/ml/tools", boss_key, {{"tools", {"demo/*"}}});
  ASSERT_EQ(team.status, 200) << team.text;
  EXPECT_EQ(team.body["tools"], json::array({"demo/*"}));
  EXPECT_EQ(call("PUT", "/api/v1/teams/ml/tools", boss_key, {{"tools", "demo/*"}}).status, 400);
  EXPECT_EQ(call("PUT", "/api/v1/teams/ml/tools", boss_key, json::object()).body["field"], "tools");
  EXPECT_EQ(call("PUT", "/api/v1/teams/nope/tools", boss_key, {{"tools", json::array()}}).status,
            404);
  // Another tenant's admin finds no such team.
  create("/api/v1/tenants", kAdminKey, {{"name", "globex"}});
  const std::string eve = create("/api/v1/users", kAdminKey,
                                 {{"tenant", "globex"}, {"name", "eve"}, {"role", "tenant-admin"}});
  const std::string eve_key = call("POST", "/api/v1/keys", kAdminKey,
                                   {{"owner", {{"kind", "user"}, {"id", eve}}}, {"name", "e"}})
                                  .body["key"];
  EXPECT_EQ(call("PUT", "/api/v1/teams/" + ml + "/tools", eve_key, {{"tools", {"*"}}}).status, 404);
  // Dana's key has none of its own: it may derive within the team's grant, not beyond.
  EXPECT_EQ(
      call("POST", "/api/v1/keys", dana_key, {{"name", "x"}, {"tools", {"demo/echo"}}}).status,
      201);
  EXPECT_EQ(
      call("POST", "/api/v1/keys", dana_key, {{"name", "y"}, {"tools", {"search/web"}}}).status,
      403);
  // A key with its own narrow list derives a key without tools: it carries the parent's list.
  const std::string narrow = call("POST", "/api/v1/keys", kAdminKey,
                                  {{"owner", {{"kind", "user"}, {"id", dana}}},
                                   {"name", "narrow"},
                                   {"tools", {"demo/echo"}}})
                                 .body["key"];
  Reply child = call("POST", "/api/v1/keys", narrow, {{"name", "child"}});
  ASSERT_EQ(child.status, 201) << child.text;
  EXPECT_EQ(child.body["tools"], json::array({"demo/echo"}));
  (void)acme;
}

}  // namespace
}  // namespace purser::api
