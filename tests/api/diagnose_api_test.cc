// GET /api/v1/diagnose over HTTP on loopback: the question's validation, who may ask about what,
// and the wall between tenants in the answer.
#include "api/diagnose_api.h"

#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <mutex>
#include <vector>

#include "common/json.h"
#include "diagnose/case.h"
#include "diagnose/engine.h"
#include "diagnose_io/case_io.h"
#include "fakes/api_client.h"
#include "fakes/governance.h"
#include "fakes/raw_client.h"
#include "fakes/temp_dir.h"
#include "fakes/test_server.h"
#include "fakes/wallet_series.h"
#include "store/sqlite_store.h"

namespace purser::api {
namespace {

using nlohmann::json;
using testing::RawClient;

constexpr const char* kAdminKey = testing::kGovernanceAdminKey;

using Reply = testing::ApiReply;

class DiagnoseApiTest : public ::testing::Test, protected testing::Governance {
 protected:
  void SetUp() override {
    auto series_or = observe::SeriesStore::create();
    ASSERT_TRUE(series_or.has_value());
    series = std::move(*series_or);
    ASSERT_TRUE(openGovernance([this](Services& s) { s.series = series.get(); }));
    ASSERT_TRUE(addAdminRoutes(server.router, *services).has_value());
    DiagnoseOptions options;
    options.narrator_route = narrator;
    if (!narrator.empty()) {
      // The gateway's place on the router: records what the narrator is asked, as whom, and
      // answers as a chat model would.
      ASSERT_TRUE(
          server.router
              .addAsync(http::Method::kPost, "/v1/chat/completions",
                        [this](http::Request& req) -> boost::asio::awaitable<http::Response> {
                          std::lock_guard lock(asked_mu);
                          asked.push_back(
                              {std::string(req.headers.get("Authorization").value_or("")),
                               req.body});
                          co_return http::Response::json(200, narrator_answer);
                        })
              .has_value());
    }
    ASSERT_TRUE(addDiagnoseRoutes(server.router, *services, options).has_value());
    server.start();
  }

  Reply call(const std::string& method, const std::string& path, const std::string& key,
             const json& body = nullptr) {
    Reply r = testing::callApi(server.port(), method, path, key, body);
    EXPECT_NE(r.status, 0) << method << " " << path << ": no answer";
    return r;
  }

  std::string create(const std::string& path, const json& body) {
    Reply r = call("POST", path, kAdminKey, body);
    EXPECT_EQ(r.status, 201) << path << " -> " << r.text;
    return r.body.value("id", "");
  }

  std::string keyFor(const std::string& user_id) {
    Reply r = call("POST", "/api/v1/keys", kAdminKey,
                   {{"owner", {{"kind", "user"}, {"id", user_id}}}, {"name", "k-" + user_id}});
    EXPECT_EQ(r.status, 201) << r.text;
    return r.body.value("key", "");
  }

  // Two tenants: alpha (team aurora, its lead) and borealis (team zephyr, with a wallet).
  void twoTenants() {
    alpha = create("/api/v1/tenants", {{"name", "alpha"}});
    borealis = create("/api/v1/tenants", {{"name", "borealis"}});
    create("/api/v1/teams", {{"tenant", alpha}, {"name", "aurora"}});
    zephyr = create("/api/v1/teams", {{"tenant", borealis}, {"name", "zephyr"}});
    const std::string lead =
        create("/api/v1/users",
               {{"tenant", alpha}, {"team", "aurora"}, {"name", "lena"}, {"role", "team-lead"}});
    lead_key = keyFor(lead);
    create("/api/v1/users",
           {{"tenant", borealis}, {"team", "zephyr"}, {"name", "quentin"}, {"role", "member"}});
    Reply w = call("POST", "/api/v1/wallets", kAdminKey,
                   {{"scope", {{"kind", "team"}, {"id", zephyr}}}, {"limit", "10.00"}});
    ASSERT_EQ(w.status, 201) << w.text;
    zephyr_wallet = w.body.value("id", "");
  }

  // borealis' team zephyr spends its whole budget in the window, and its requests are refused.
  void zephyrRunsOutOfBudget() {
    testing::recordWalletRunningOut(*series, unixMillis(clock.now()), zephyr_wallet);
  }

  std::unique_ptr<observe::SeriesStore> series;
  testing::TestServer server;
  std::string alpha, borealis, zephyr, zephyr_wallet, lead_key;
  std::string narrator;  // set before SetUp: the narrator route
  std::string narrator_answer =
      R"({"id":"c1","object":"chat.completion","model":"summary","choices":[{"index":0,)"
      R"("message":{"role":"assistant","content":"A team is out of budget."},)"
      R"("finish_reason":"stop"}],"usage":{"prompt_tokens":90,"completion_tokens":7}})";
  std::mutex asked_mu;
  std::vector<std::pair<std::string, std::string>> asked;  // Authorization, body
};

class DiagnoseNarrationTest : public DiagnoseApiTest {
 protected:
  DiagnoseNarrationTest() { narrator = "summary"; }
  // What the narrator was asked last: the user message, as the model reads it.
  std::string lastPrompt() {
    std::lock_guard lock(asked_mu);
    if (asked.empty()) return "";
    const json body = parseJsonOrDiscarded(asked.back().second);
    return body["messages"][1].value("content", "");
  }
};

TEST_F(DiagnoseApiTest, EveryParameterIsCheckedWithAClearProblem) {
  struct Case {
    std::string query;
    std::string field;
  };
  for (const Case& c : std::vector<Case>{
           {"", "kind"},
           {"kind=pod&name=x", "kind"},
           {"kind=route", "name"},
           {"kind=route&name=chat&symptom=sad", "symptom"},
           {"kind=route&name=chat&since=soon", "since"},
           {"kind=route&name=chat&since=-5m", "since"},
           {"kind=route&name=chat&since=400h", "since"},
           {"kind=workload&name=train-7", "name"},
           {"kind=fleet&name=everything", "name"},
       }) {
    Reply r = call("GET", "/api/v1/diagnose?" + c.query, kAdminKey);
    EXPECT_EQ(r.status, 400) << c.query << " -> " << r.text;
    EXPECT_EQ(r.body.value("field", ""), c.field) << c.query << " -> " << r.text;
    EXPECT_FALSE(r.body.value("detail", "").empty()) << c.query;
  }
  EXPECT_EQ(call("GET", "/api/v1/diagnose?kind=fleet", "").status, 401);
  // Read-only: nothing but GET.
  EXPECT_NE(call("POST", "/api/v1/diagnose?kind=fleet", kAdminKey, json::object()).status, 200);
  EXPECT_NE(call("DELETE", "/api/v1/diagnose?kind=fleet", kAdminKey).status, 200);
}

TEST_F(DiagnoseApiTest, AnswersWithTheQuestionTheWindowAndFindings) {
  Reply r = call("GET", "/api/v1/diagnose?kind=fleet&since=10m", kAdminKey);
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["question"], (json{{"kind", "fleet"}, {"name", "*"}, {"symptom", "any"}}));
  const auto start = diagnose::parseTime(r.body["window"]["start"].get<std::string>());
  const auto end = diagnose::parseTime(r.body["window"]["end"].get<std::string>());
  ASSERT_TRUE(start && end);
  EXPECT_EQ(*end - *start, 600'000);
  ASSERT_TRUE(r.body["findings"].is_array());
  ASSERT_FALSE(r.body["findings"].empty());
  EXPECT_EQ(r.body["findings"][0]["cause"], "none");  // nothing is wrong in an empty store
}

TEST_F(DiagnoseApiTest, ATeamLeadAsksOnlyAboutWhatItMaySee) {
  twoTenants();
  EXPECT_EQ(call("GET", "/api/v1/diagnose?kind=team&name=aurora", lead_key).status, 200);
  EXPECT_EQ(call("GET", "/api/v1/diagnose?kind=team&name=zephyr", lead_key).status, 404);
  EXPECT_EQ(call("GET", "/api/v1/diagnose?kind=user&name=quentin", lead_key).status, 404);
  EXPECT_EQ(call("GET", "/api/v1/diagnose?kind=user&name=lena", lead_key).status, 200);
  EXPECT_EQ(call("GET", "/api/v1/diagnose?kind=route&name=chat", lead_key).status, 404);
  EXPECT_EQ(call("GET", "/api/v1/diagnose?kind=fleet", lead_key).status, 200);
  // The same answer for what exists elsewhere as for what does not exist at all.
  Reply other = call("GET", "/api/v1/diagnose?kind=team&name=zephyr", lead_key);
  Reply none = call("GET", "/api/v1/diagnose?kind=team&name=nobody", lead_key);
  EXPECT_EQ(other.body["title"], none.body["title"]);
  EXPECT_EQ(call("GET", "/api/v1/diagnose?kind=team&name=zephyr", kAdminKey).status, 200);
  EXPECT_EQ(call("GET", "/api/v1/diagnose?kind=user&name=quentin", kAdminKey).status, 200);
}

// The isolation rule: a team lead's diagnose never names another tenant's objects.
TEST_F(DiagnoseApiTest, ATeamLeadsAnswerNeverNamesAnotherTenantsObjects) {
  twoTenants();
  zephyrRunsOutOfBudget();
  // The platform admin sees the situation as it is: borealis' team is out of budget.
  Reply admin = call("GET", "/api/v1/diagnose?kind=fleet", kAdminKey);
  ASSERT_EQ(admin.status, 200) << admin.text;
  ASSERT_FALSE(admin.body["findings"].empty());
  const json& top = admin.body["findings"][0];
  EXPECT_EQ(top["cause"], "budget_exhausted") << admin.text;
  EXPECT_NE(admin.text.find("zephyr"), std::string::npos) << admin.text;

  Reply lead = call("GET", "/api/v1/diagnose?kind=fleet", lead_key);
  ASSERT_EQ(lead.status, 200) << lead.text;
  ASSERT_EQ(lead.body["findings"].size(), admin.body["findings"].size()) << lead.text;
  EXPECT_EQ(lead.body["findings"][0]["cause"], top["cause"]);
  for (const std::string& name : {std::string("zephyr"), std::string("borealis"),
                                  std::string("quentin"), zephyr, zephyr_wallet, borealis}) {
    EXPECT_EQ(lead.text.find(name), std::string::npos) << name << " in " << lead.text;
  }
  EXPECT_NE(lead.text.find("another tenant"), std::string::npos) << lead.text;
  // Redaction goes by structure, not by word: the other tenant naming its users after words of
  // the answer ("wallet", "requests", "limit") changes no word of the lead's.
  for (const char* word : {"wallet", "requests", "limit"}) {
    create("/api/v1/users", {{"tenant", borealis}, {"team", "zephyr"}, {"name", word}});
  }
  Reply worded = call("GET", "/api/v1/diagnose?kind=fleet", lead_key);
  ASSERT_EQ(worded.status, 200) << worded.text;
  const json& first = worded.body["findings"][0];
  EXPECT_EQ(
      first["explanation"].get<std::string>().rfind("The team wallet another tenant's team #1 "
                                                    "is spent",
                                                    0),
      0u)
      << worded.text;
  bool refused = false;
  for (const auto& e : first["evidence"]) {
    refused = refused || e.value("summary", "").starts_with("requests refused before any upstream");
  }
  EXPECT_TRUE(refused) << worded.text;
  EXPECT_EQ(worded.text.find("another tenant's user"), std::string::npos) << worded.text;
}

// format=case: what the engine would answer from, as an incident file that replays to the same
// findings; a platform admin's only, since it holds every tenant's series.
TEST_F(DiagnoseApiTest, ThePlatformAdminTakesTheCaseThatReplaysToTheSameAnswer) {
  twoTenants();
  zephyrRunsOutOfBudget();
  Reply text = call("GET", "/api/v1/diagnose?kind=fleet&format=case", kAdminKey);
  ASSERT_EQ(text.status, 200) << text.text;
  auto c = diagnose::parseCase(text.text, "live.yaml");
  ASSERT_TRUE(c.has_value()) << c.error().toString() << "\n" << text.text;
  EXPECT_EQ(c->question.kind, "fleet");
  EXPECT_EQ(c->question.name, "*");
  bool ratio = false;
  for (const auto& s : c->series) ratio = ratio || s.name == "purser_wallet_spent_ratio";
  EXPECT_TRUE(ratio) << text.text;
  Reply answer = call("GET", "/api/v1/diagnose?kind=fleet", kAdminKey);
  ASSERT_EQ(answer.status, 200);
  const diagnose::Diagnosis replayed = diagnose::diagnose(*c);
  ASSERT_FALSE(replayed.findings.empty());
  EXPECT_EQ(replayed.findings[0].cause, answer.body["findings"][0]["cause"]);
  EXPECT_EQ(replayed.findings[0].subject.name, answer.body["findings"][0]["subject"]["name"]);

  Reply lead = call("GET", "/api/v1/diagnose?kind=fleet&format=case", lead_key);
  EXPECT_EQ(lead.status, 403) << lead.text;
  EXPECT_EQ(lead.body.value("field", ""), "format");
  EXPECT_EQ(lead.text.find("zephyr"), std::string::npos);
  Reply bad = call("GET", "/api/v1/diagnose?kind=fleet&format=xml", kAdminKey);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body.value("field", ""), "format");
}

TEST_F(DiagnoseNarrationTest, TheNarratorIsAskedAsTheCallerWithOnlyWhatTheCallerMaySee) {
  twoTenants();
  zephyrRunsOutOfBudget();
  // The platform admin's answer names borealis' team, and so does what its narrator is asked.
  Reply admin = call("GET", "/api/v1/diagnose?kind=fleet", kAdminKey);
  ASSERT_EQ(admin.status, 200) << admin.text;
  EXPECT_EQ(admin.body["narration"]["route"], "summary");
  EXPECT_EQ(admin.body["narration"]["text"], "A team is out of budget.");
  std::string prompt = lastPrompt();
  EXPECT_NE(prompt.find("zephyr"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("budget_exhausted"), std::string::npos) << prompt;
  EXPECT_EQ(prompt.find("\"points\""), std::string::npos) << "charts are not sent";
  {
    std::lock_guard lock(asked_mu);
    EXPECT_EQ(asked.back().first, std::string("Bearer ") + kAdminKey) << "asked as the caller";
    const json body = parseJsonOrDiscarded(asked.back().second);
    EXPECT_EQ(body["model"], "summary");
    EXPECT_EQ(body["max_tokens"], 400);
  }

  // A team lead of alpha: the same findings, masked, and the narrator sees only that.
  Reply lead = call("GET", "/api/v1/diagnose?kind=fleet", lead_key);
  ASSERT_EQ(lead.status, 200) << lead.text;
  prompt = lastPrompt();
  ASSERT_FALSE(prompt.empty());
  for (const std::string& name : {std::string("zephyr"), std::string("borealis"),
                                  std::string("quentin"), zephyr, zephyr_wallet, borealis}) {
    EXPECT_EQ(prompt.find(name), std::string::npos) << name << " in " << prompt;
  }
  EXPECT_NE(prompt.find("another tenant"), std::string::npos) << prompt;
  {
    std::lock_guard lock(asked_mu);
    EXPECT_EQ(asked.back().first, "Bearer " + lead_key);
  }
  EXPECT_EQ(lead.body["findings"],
            call("GET", "/api/v1/diagnose?kind=fleet&narrate=false", lead_key).body["findings"])
      << "the findings are the same with or without narration";

  // narrate=false asks nothing.
  size_t before;
  {
    std::lock_guard lock(asked_mu);
    before = asked.size();
  }
  Reply quiet = call("GET", "/api/v1/diagnose?kind=fleet&narrate=false", lead_key);
  ASSERT_EQ(quiet.status, 200);
  EXPECT_FALSE(quiet.body.contains("narration"));
  {
    std::lock_guard lock(asked_mu);
    EXPECT_EQ(asked.size(), before);
  }
  EXPECT_EQ(call("GET", "/api/v1/diagnose?kind=fleet&narrate=maybe", lead_key).status, 400);
}

TEST_F(DiagnoseNarrationTest, ANarratorThatFailsLeavesTheFindingsAndSaysWhy) {
  narrator_answer = "not json at all";
  Reply r = call("GET", "/api/v1/diagnose?kind=fleet", kAdminKey);
  ASSERT_EQ(r.status, 200) << r.text;
  ASSERT_FALSE(r.body["findings"].empty());
  EXPECT_FALSE(r.body["narration"].contains("text"));
  EXPECT_NE(r.body["narration"].value("error", "").find("summary"), std::string::npos) << r.text;
}

TEST_F(DiagnoseApiTest, WithoutANarratorNarrateTrueIsAClearProblem) {
  Reply r = call("GET", "/api/v1/diagnose?kind=fleet&narrate=true", kAdminKey);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body.value("field", ""), "narrate");
  Reply plain = call("GET", "/api/v1/diagnose?kind=fleet", kAdminKey);
  ASSERT_EQ(plain.status, 200);
  EXPECT_FALSE(plain.body.contains("narration"));
}

}  // namespace
}  // namespace purser::api
