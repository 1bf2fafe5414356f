// The governance CLI against a real `purser serve`: it mirrors the API, prints tables or JSON,
// and reports the server's problems with a non-zero exit.
#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/temp_dir.h"

namespace purser {
namespace {

using testing::Process;

constexpr const char* kAdminKey = "cli-test-admin-key-0123456789";

class CliGovernanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::writeFile(dir.file("purser.yaml"), "listen: 127.0.0.1:0\nthreads: 1\n");
    server = std::make_unique<Process>(
        std::vector<std::string>{PURSER_BINARY, "serve", "--config", dir.file("purser.yaml"),
                                 "--data", dir.file("var")},
        "", std::vector<std::string>{std::string("PURSER_ADMIN_KEY=") + kAdminKey});
    auto line = server->waitForStdout("purser: listening on ");
    ASSERT_TRUE(line.has_value()) << server->err();
    url = line->substr(line->find("http"));
  }
  void TearDown() override {
    server->signal(SIGTERM);
    EXPECT_EQ(server->wait(), 0);
  }

  // Runs `purser ARGS` as the admin (or with `key`); returns exit code, stdout, stderr.
  struct Run {
    int code;
    std::string out, err;
  };
  Run cli(std::vector<std::string> args, const std::string& key = kAdminKey) {
    std::vector<std::string> argv = {PURSER_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = {"PURSER_SERVER=" + url};
    if (!key.empty()) env.push_back("PURSER_KEY=" + key);
    Process p(argv, "", env);
    const int code = p.wait();
    return {code, p.out(), p.err()};
  }

  testing::TempDir dir;
  std::unique_ptr<Process> server;
  std::string url;
};

TEST_F(CliGovernanceTest, MirrorsTheApi) {
  Run t = cli({"tenants", "create", "acme"});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("acme"), std::string::npos);
  ASSERT_EQ(cli({"teams", "create", "ml", "--tenant", "acme"}).code, 0);
  Run u = cli({"users", "create", "dana", "--tenant", "acme", "--team", "ml", "--output", "json"});
  ASSERT_EQ(u.code, 0) << u.err;
  const std::string dana = nlohmann::json::parse(u.out)["id"];
  Run k = cli({"keys", "create", "--name", "laptop", "--owner", "user:" + dana, "--rpm", "60",
               "--priority", "critical"});
  ASSERT_EQ(k.code, 0) << k.err;
  EXPECT_NE(k.out.find("key (shown once; store it now): pk-"), std::string::npos) << k.out;
  EXPECT_NE(k.out.find("critical"), std::string::npos) << k.out;
  EXPECT_NE(cli({"keys", "create", "--name", "x", "--priority", "urgent"}).code, 0)
      << "not a priority";
  Run w = cli({"wallets", "create", "--scope", "user:" + dana, "--limit", "25.00", "--period",
               "monthly", "--timezone", "Europe/Berlin", "--alert-at", "80,100"});
  ASSERT_EQ(w.code, 0) << w.err;
  Run list = cli({"wallets", "list", "--scope", "user:" + dana});
  ASSERT_EQ(list.code, 0);
  EXPECT_NE(list.out.find("REMAINING"), std::string::npos);
  EXPECT_NE(list.out.find("25.00"), std::string::npos) << list.out;
  Run json_list = cli({"tenants", "list", "-o", "json"});
  ASSERT_EQ(json_list.code, 0);
  EXPECT_EQ(nlohmann::json::parse(json_list.out)["data"][0]["name"], "acme");
  Run spend = cli({"spend", "--scope", "user:" + dana, "--group-by", "model"});
  ASSERT_EQ(spend.code, 0) << spend.err;
  EXPECT_NE(spend.out.find("total: 0.00"), std::string::npos) << spend.out;
  Run audit = cli({"audit", "list"});
  ASSERT_EQ(audit.code, 0);
  EXPECT_NE(audit.out.find("wallet.create"), std::string::npos) << audit.out;
  // Newest first, one action, with names beside the ids.
  Run made = cli({"audit", "list", "--action", "wallet.", "--newest-first", "--limit", "1"});
  ASSERT_EQ(made.code, 0) << made.err;
  EXPECT_NE(made.out.find("user dana's wallet"), std::string::npos) << made.out;
  EXPECT_EQ(made.out.find("user.create"), std::string::npos) << made.out;
  Run verify = cli({"audit", "verify"});
  EXPECT_EQ(verify.code, 0) << verify.err;
  EXPECT_NE(verify.out.find("true"), std::string::npos);
}

TEST_F(CliGovernanceTest, RecordsUsageFromAFileInBatchesAndAgainSafely) {
  ASSERT_EQ(cli({"tenants", "create", "acme"}).code, 0);
  ASSERT_EQ(cli({"teams", "create", "ml", "--tenant", "acme"}).code, 0);
  ASSERT_EQ(cli({"users", "create", "dana", "--tenant", "acme", "--team", "ml"}).code, 0);
  // 1,500 events as JSON Lines: more than one request takes.
  std::string lines;
  for (int i = 0; i < 1500; ++i) {
    lines += nlohmann::json{{"id", "old-" + std::to_string(i)},
                            {"at", "2026-01-01T00:00:00Z"},
                            {"owner", {{"kind", "user"}, {"id", "dana"}}},
                            {"model", "gpt-4o"},
                            {"cost", "0.01"}}
                 .dump() +
             "\n";
  }
  const std::string path = dir.file("history.jsonl");
  testing::writeFile(path, lines);
  Run first = cli({"usage", "record", "-f", path});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.out.find("recorded 1500 events (0 already recorded), charged 15.00"),
            std::string::npos)
      << first.out;
  Run again = cli({"usage", "record", "-f", path});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("recorded 0 events (1500 already recorded)"), std::string::npos)
      << again.out;
  testing::writeFile(path, "{\"events\": [{\"id\": \"x\"}]}");
  Run bad = cli({"usage", "record", "-f", path});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("events 1 to 1 were not recorded"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("events[0].at"), std::string::npos) << bad.err;
}

// An agent run's calls and totals (purser session), spend per tool, and tool grants; `purser
// tools` says so plainly when the server offers no MCP tools.
TEST_F(CliGovernanceTest, ShowsARunAndGrantsTools) {
  ASSERT_EQ(cli({"tenants", "create", "acme"}).code, 0);
  ASSERT_EQ(cli({"teams", "create", "ml", "--tenant", "acme"}).code, 0);
  ASSERT_EQ(cli({"users", "create", "dana", "--tenant", "acme", "--team", "ml"}).code, 0);
  const auto event = [](const char* id, const char* at, const char* model, const char* route,
                        const char* provider, const char* cost, int status) {
    return nlohmann::json{{"id", id},
                          {"at", at},
                          {"owner", {{"kind", "user"}, {"id", "dana"}}},
                          {"model", model},
                          {"route", route},
                          {"provider", provider},
                          {"session_id", "run-7"},
                          {"cost", cost},
                          {"status", status}}
        .dump();
  };
  const std::string path = dir.file("run.jsonl");
  testing::writeFile(
      path, event("e1", "2026-01-01T00:00:00Z", "chat", "chat", "sim", "0.10", 200) + "\n" +
                event("e2", "2026-01-01T00:00:01Z", "demo.echo", "mcp", "mcp:demo", "0.25", 502) +
                "\n");
  Run recorded = cli({"usage", "record", "-f", path});
  ASSERT_EQ(recorded.code, 0) << recorded.err;
  Run run = cli({"session", "run-7"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("2 calls (1 model, 1 tool, 1 failed), cost 0.35"), std::string::npos)
      << run.out;
  EXPECT_LT(run.out.find("chat"), run.out.find("demo.echo")) << "oldest first";
  Run json_run = cli({"session", "run-7", "-o", "json"});
  ASSERT_EQ(json_run.code, 0);
  EXPECT_EQ(nlohmann::json::parse(json_run.out)["data"][1]["server"], "demo");
  Run missing = cli({"session", "no-such-run"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("session not found"), std::string::npos) << missing.err;
  Run by_tool = cli({"spend", "--scope", "tenant:acme", "--group-by", "tool"});
  ASSERT_EQ(by_tool.code, 0) << by_tool.err;
  EXPECT_NE(by_tool.out.find("demo.echo"), std::string::npos) << by_tool.out;
  Run grant = cli({"tools", "grant", "--tenant", "acme", "--tools", "demo/*,search/web"});
  ASSERT_EQ(grant.code, 0) << grant.err;
  EXPECT_NE(grant.out.find("demo/*"), std::string::npos) << grant.out;
  Run team = cli({"tools", "grant", "--team", "ml", "--tenant", "acme", "--tools", "demo/echo"});
  ASSERT_EQ(team.code, 0) << team.err;
  EXPECT_EQ(cli({"tools", "grant", "--tools", "demo/echo"}).code, 2) << "whom to grant";
  Run bad = cli({"tools", "grant", "--tenant", "acme", "--tools", "demo.echo"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("is not a tool pattern"), std::string::npos) << bad.err;
  Run none = cli({"tools"});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("offers no MCP tools"), std::string::npos) << none.err;
}

TEST_F(CliGovernanceTest, ReportsProblemsAndMissingKeys) {
  Run dup = cli({"tenants", "create", "acme"});
  ASSERT_EQ(dup.code, 0);
  Run again = cli({"tenants", "create", "acme"});
  EXPECT_EQ(again.code, 1);
  EXPECT_NE(again.err.find("409 Conflict: a tenant named \"acme\" already exists (field: name)"),
            std::string::npos)
      << again.err;
  Run bad_money = cli({"wallets", "create", "--scope", "tenant:acme", "--limit", "1.2.3"});
  EXPECT_EQ(bad_money.code, 1);
  Run no_key = cli({"tenants", "list"}, "");
  EXPECT_EQ(no_key.code, 2);
  EXPECT_NE(no_key.err.find("set PURSER_KEY"), std::string::npos);
  Run wrong_key = cli({"tenants", "list"}, "not-a-real-key-000000");
  EXPECT_EQ(wrong_key.code, 1);
  EXPECT_NE(wrong_key.err.find("401"), std::string::npos);
  Run bad_output = cli({"tenants", "list", "--output", "yaml"});
  EXPECT_EQ(bad_output.code, 2);
  Run unreachable = cli({"tenants", "list", "--server", "http://127.0.0.1:1"});
  EXPECT_EQ(unreachable.code, 1);
  EXPECT_NE(unreachable.err.find("cannot reach http://127.0.0.1:1"), std::string::npos)
      << unreachable.err;
}

TEST_F(CliGovernanceTest, SpeaksNamesListsByDefaultAndShowsMoneyToTheCent) {
  ASSERT_EQ(cli({"tenants", "create", "acme"}).code, 0);
  ASSERT_EQ(cli({"teams", "create", "ml", "--tenant", "acme"}).code, 0);
  ASSERT_EQ(cli({"users", "create", "dana", "--tenant", "acme", "--team", "ml"}).code, 0);
  // A bare group lists.
  Run tenants = cli({"tenants"});
  ASSERT_EQ(tenants.code, 0) << tenants.err;
  EXPECT_NE(tenants.out.find("acme"), std::string::npos) << tenants.out;
  // Names where ids were asked: scopes and owners.
  ASSERT_EQ(cli({"wallets", "create", "--scope", "user:dana", "--limit", "10.00"}).code, 0);
  Run k = cli({"keys", "create", "--name", "k", "--owner", "user:dana", "-o", "json"});
  ASSERT_EQ(k.code, 0) << k.err;
  const std::string key = nlohmann::json::parse(k.out)["key"];
  // Spend that is not a whole number of cents.
  const uint16_t port = testing::portFromListeningLine("listening on " + url);
  for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
           {"/api/v1/reservations", R"({"id":"r1","amount":"0.50"})"},
           {"/api/v1/reservations/r1/settle", R"({"cost":"0.123456"})"}}) {
    testing::RawClient c(port);
    ASSERT_TRUE(c.send("POST " + path + " HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + key +
                       "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
    auto r = c.readResponse();
    ASSERT_TRUE(r.has_value());
    ASSERT_LT(r->status, 300) << r->body;
  }
  Run spend = cli({"spend", "--scope", "tenant:acme", "--group-by", "user"});
  ASSERT_EQ(spend.code, 0) << spend.err;
  EXPECT_NE(spend.out.find("dana"), std::string::npos) << "names beside ids: " << spend.out;
  EXPECT_NE(spend.out.find("0.12 "), std::string::npos) << spend.out;
  EXPECT_EQ(spend.out.find("0.123456"), std::string::npos) << "to the cent: " << spend.out;
  EXPECT_NE(spend.out.find("total: 0.12"), std::string::npos) << spend.out;
  Run exact = cli({"spend", "--scope", "user:dana", "--group-by", "user", "--exact"});
  EXPECT_NE(exact.out.find("0.123456"), std::string::npos) << exact.out;
  Run wallets = cli({"wallets"});
  EXPECT_NE(wallets.out.find("dana"), std::string::npos) << wallets.out;
  EXPECT_NE(wallets.out.find("9.88"), std::string::npos) << wallets.out;
  // Another tenant's names are not names here.
  ASSERT_EQ(cli({"tenants", "create", "globex"}).code, 0);
  Run unknown = cli({"spend", "--scope", "user:nobody"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.err.find("404"), std::string::npos) << unknown.err;
}

}  // namespace
}  // namespace purser
