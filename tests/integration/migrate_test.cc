// `purser migrate`: a SQLite node with tenants, keys, a wallet and answered requests, stopped and
// copied into a private PostgreSQL (fakes/postgres.h); `purser serve` on PostgreSQL then knows
// the same key, shows the same spend and audit chain, and goes on. And the refusals, each
// changing nothing: a node still running, a journal not yet shipped, a target that holds data,
// a file that is not a SQLite store.
#include <gtest/gtest.h>
#include <signal.h>

#include <fmt/format.h>

#include <filesystem>
#include <sstream>

#include "common/json.h"
#include "fakes/postgres.h"
#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/serve.h"
#include "fakes/temp_dir.h"

namespace purser {
namespace {

using testing::Process;

constexpr const char* kAdminKey = "migrate-test-admin-key-0123456789";

// Runs `purser migrate` to its end.
struct Finished {
  int code = -1;
  std::string out, err;
};

Finished migrate(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {PURSER_BINARY, "migrate"};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p(argv);
  Finished r;
  r.code = p.wait();
  r.out = p.out();
  r.err = p.err();
  return r;
}

// The row of `table` in migrate's printed check: {ROWS, SUMS, OK}; empty when it is missing.
std::vector<std::string> checkRow(const std::string& out, const std::string& table) {
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string name, rows, sums, ok;
    if (words >> name >> rows >> sums >> ok && name == table) return {rows, sums, ok};
  }
  return {};
}

// What the public schema of `db` holds: its tables.
std::string publicTables(const testing::PostgresServer& pg) {
  return pg.query("purser",
                  "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'");
}

class MigrateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!pg.available()) GTEST_SKIP() << pg.why();
    ASSERT_TRUE(pg.createDatabase("purser"));
    sim = std::make_unique<Process>(std::vector<std::string>{
        PURSER_BINARY, "sim", "llm", "--listen", "127.0.0.1:0", "--models", "m", "--ttft-ms", "0"});
    auto line = sim->waitForStdout("listening on ");
    ASSERT_TRUE(line.has_value()) << sim->err();
    config = testing::chatRouteConfig(testing::portFromListeningLine(*line));
  }

  testing::RawResponse admin(uint16_t port, const std::string& method, const std::string& path,
                             const std::string& body = "") {
    return testing::callJson(port, method, path,
                             {std::string("Authorization: Bearer ") + kAdminKey}, body);
  }

  // The wallet's "spent", as the API shows it ("" when it is not listed).
  std::string spentOf(uint16_t port, const std::string& wallet_id) {
    auto r = admin(port, "GET", "/api/v1/wallets");
    EXPECT_EQ(r.status, 200) << r.body;
    for (const auto& w : parseJsonOrDiscarded(r.body).value("data", Json::array())) {
      if (w.value("id", "") == wallet_id) return w.value("spent", "");
    }
    return "";
  }

  testing::PostgresServer pg;
  std::unique_ptr<Process> sim;
  std::string config;
  testing::TempDir dir;
};

const std::string kChat =
    R"({"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":5})";

TEST_F(MigrateTest, ASqliteNodeCopiedIntoPostgresServesThereWithTheSameKeysSpendAndAudit) {
  testing::Served node = testing::startServe(PURSER_BINARY, dir, config, kAdminKey);
  ASSERT_NE(node.port, 0) << node.process->err();
  const testing::Member member = testing::seedMember(node.port, kAdminKey);
  ASSERT_FALSE(member.key.empty());
  auto wallet =
      admin(node.port, "POST", "/api/v1/wallets",
            writeJson(Json{{"scope", {{"kind", "user"}, {"id", member.user}}}, {"limit", "5.00"}}));
  ASSERT_EQ(wallet.status, 201) << wallet.body;
  const std::string wallet_id = parseJsonOrDiscarded(wallet.body).value("id", "");
  ASSERT_FALSE(wallet_id.empty());
  for (int i = 0; i < 4; ++i) {
    auto r = testing::callJson(node.port, "POST", "/v1/chat/completions",
                               {"Authorization: Bearer " + member.key}, kChat);
    ASSERT_EQ(r.status, 200) << r.body;
  }
  const std::string spent = spentOf(node.port, wallet_id);
  ASSERT_FALSE(spent.empty());
  ASSERT_NE(spent, "0.00");
  node.process->signal(SIGTERM);
  ASSERT_EQ(node.process->wait(), 0) << node.process->err();

  const Finished run = migrate({"--data", dir.file("var"), "--to", pg.url("purser")});
  ASSERT_EQ(run.code, 0) << run.out << run.err;
  EXPECT_EQ(run.out.find("MISMATCH"), std::string::npos) << run.out;
  // Every component's tables, each counted and summed on both sides.
  const auto events = checkRow(run.out, "usage_events");
  ASSERT_EQ(events.size(), 3u) << run.out;
  EXPECT_EQ(events[0], "4");
  EXPECT_NE(events[1], "0") << "the events' costs and tokens are summed";
  EXPECT_EQ(events[2], "ok");
  for (const char* table : {"tenants", "api_keys", "wallets", "wallet_spend", "audit_log",
                            "server_meta", "fleet_workloads"}) {
    const auto row = checkRow(run.out, table);
    ASSERT_EQ(row.size(), 3u) << table << "\n" << run.out;
    EXPECT_EQ(row[2], "ok") << table;
  }
  EXPECT_EQ(checkRow(run.out, "wallets")[0], "1");
  EXPECT_EQ(pg.query("purser", "SELECT COUNT(*) FROM usage_events"), "4");
  // Moved into their month's partition, as the partitioning migration moves existing events.
  EXPECT_EQ(pg.query("purser", "SELECT COUNT(*) FROM usage_events_default"), "0");

  // The same node on PostgreSQL (its data directory keeps its keys).
  testing::Served replica = testing::startServe(
      PURSER_BINARY, dir, config + fmt::format("store: {{postgres: \"{}\"}}\n", pg.url("purser")),
      kAdminKey);
  ASSERT_NE(replica.port, 0) << replica.process->err();
  EXPECT_EQ(spentOf(replica.port, wallet_id), spent);
  auto verdict = admin(replica.port, "GET", "/api/v1/audit/verify");
  ASSERT_EQ(verdict.status, 200) << verdict.body;
  EXPECT_TRUE(parseJsonOrDiscarded(verdict.body).value("ok", false)) << verdict.body;
  auto r = testing::callJson(replica.port, "POST", "/v1/chat/completions",
                             {"Authorization: Bearer " + member.key}, kChat);
  EXPECT_EQ(r.status, 200) << r.body << "the member's key is known on PostgreSQL";
  auto usage = admin(replica.port, "GET", "/api/v1/usage?scope=user:" + member.user);
  ASSERT_EQ(usage.status, 200) << usage.body;
  EXPECT_EQ(parseJsonOrDiscarded(usage.body).value("data", Json::array()).size(), 5u);
  // New rows go on after the copied ones (a new key, and its audit entry).
  auto key = admin(replica.port, "POST", "/api/v1/keys",
                   writeJson(Json{{"owner", {{"kind", "user"}, {"id", member.user}}},
                                  {"name", "after-migrate"}}));
  EXPECT_EQ(key.status, 201) << key.body;
  replica.process->signal(SIGTERM);
  EXPECT_EQ(replica.process->wait(), 0) << replica.process->err();

  // The target now holds data: another run (its target from the configuration's store:) refuses,
  // naming a table, and changes nothing.
  const Finished again = migrate({"--config", dir.file("purser.yaml"), "--data", dir.file("var")});
  EXPECT_EQ(again.code, 1);
  EXPECT_NE(again.err.find("already holds data in table"), std::string::npos) << again.err;
  EXPECT_EQ(pg.query("purser", "SELECT COUNT(*) FROM usage_events"), "5");
}

TEST_F(MigrateTest, RefusesWhileTheNodeRunsOrItsJournalHoldsRecordsAndChangesNothing) {
  testing::Served node = testing::startServe(PURSER_BINARY, dir, config, kAdminKey);
  ASSERT_NE(node.port, 0) << node.process->err();
  const Finished running = migrate({"--data", dir.file("var"), "--to", pg.url("purser")});
  EXPECT_NE(running.code, 0);
  EXPECT_NE(running.err.find("in use"), std::string::npos) << running.err;
  EXPECT_EQ(publicTables(pg), "0");
  node.process->signal(SIGTERM);
  ASSERT_EQ(node.process->wait(), 0) << node.process->err();

  // A segment the node did not ship (as a crash leaves one).
  const std::string segment = dir.file("var/journal/journal-00000000000000ff.log");
  std::filesystem::create_directories(dir.file("var/journal"));
  testing::writeFile(segment, "a record not yet in purser.db");
  const Finished journal = migrate({"--data", dir.file("var"), "--to", pg.url("purser")});
  EXPECT_NE(journal.code, 0);
  EXPECT_NE(journal.err.find("journal"), std::string::npos) << journal.err;
  EXPECT_EQ(publicTables(pg), "0");

  // Neither refusal left anything in the way.
  std::filesystem::remove(segment);
  const Finished copied = migrate({"--data", dir.file("var"), "--to", pg.url("purser")});
  EXPECT_EQ(copied.code, 0) << copied.out << copied.err;
  EXPECT_EQ(pg.query("purser", "SELECT COUNT(*) FROM server_meta"), "2");
  EXPECT_EQ(checkRow(copied.out, "server_meta").size(), 3u) << copied.out;
}

// Needs no PostgreSQL: the file is judged before anything is sent.
TEST(MigrateFileTest, AFileThatIsNotASqliteStoreIsAClearErrorAndNothingIsCopied) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.file("var"));
  testing::writeFile(dir.file("var/purser.db"), "PGDMP a PostgreSQL dump, not SQLite\n");
  const Finished run =
      migrate({"--data", dir.file("var"), "--to", "postgresql://unused@127.0.0.1/x"});
  EXPECT_EQ(run.code, 1);
  EXPECT_NE(run.err.find("is not a SQLite database"), std::string::npos) << run.err;
  EXPECT_TRUE(run.out.empty()) << run.out;
}

}  // namespace
}  // namespace purser
