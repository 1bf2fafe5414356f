// `purser serve` with its state in PostgreSQL (store: {postgres: ...}), against a private server
// the test starts: every component's schema is created there, the money path, the audit log and
// the fleet write to it, and all of it is there again after a restart.
#include <gtest/gtest.h>
#include <signal.h>

#include <fmt/format.h>

#include "common/json.h"
#include "fakes/postgres.h"
#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/serve.h"
#include "fakes/temp_dir.h"
#include "integration/fleet_harness.h"

namespace purser {
namespace {

using testing::Process;

constexpr const char* kAdminKey = "postgres-test-admin-key-0123456789";

TEST(ServePostgresTest, EveryComponentKeepsItsStateInPostgresAcrossARestart) {
  testing::PostgresServer pg;
  if (!pg.available()) GTEST_SKIP() << pg.why();
  ASSERT_TRUE(pg.createDatabase("purser"));
  testing::TempDir dir;
  testing::writeFile(dir.file("fleet.yaml"), testing::fleetManifests(64));
  Process sim(
      {PURSER_BINARY, "sim", "llm", "--listen", "127.0.0.1:0", "--models", "m", "--ttft-ms", "0"});
  auto line = sim.waitForStdout("listening on ");
  ASSERT_TRUE(line.has_value()) << sim.err();
  const uint16_t up = testing::portFromListeningLine(*line);
  const std::string config =
      fmt::format("store: {{postgres: \"{}\"}}\nfleet:\n  manifests: [fleet.yaml]\n",
                  pg.url("purser")) +
      testing::chatRouteConfig(up);

  testing::Served served = testing::startServe(PURSER_BINARY, dir, config, kAdminKey);
  ASSERT_NE(served.port, 0) << served.process->err();
  uint16_t port = served.port;
  const auto admin = [&](const std::string& method, const std::string& path,
                         const std::string& body = "") {
    return testing::callJson(port, method, path,
                             {std::string("Authorization: Bearer ") + kAdminKey}, body);
  };
  const testing::Member member = testing::seedMember(port, kAdminKey);
  ASSERT_FALSE(member.key.empty());
  auto wallet =
      admin("POST", "/api/v1/wallets",
            writeJson(Json{{"scope", {{"kind", "user"}, {"id", member.user}}}, {"limit", "5.00"}}));
  ASSERT_EQ(wallet.status, 201) << wallet.body;
  const std::string chat =
      R"({"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":5})";
  for (int i = 0; i < 5; ++i) {
    auto r = testing::callJson(port, "POST", "/v1/chat/completions",
                               {"Authorization: Bearer " + member.key}, chat);
    ASSERT_EQ(r.status, 200) << r.body << served.process->err();
  }
  const Json w = {{"name", "train-1"},
                  {"queue", "research"},
                  {"pod_sets",
                   {{{"name", "main"},
                     {"requests", {{"cpu", "1"}, {"nvidia.com/gpu", "2"}}},
                     {"command", {"sleep", "1"}}}}}};
  auto submitted = testing::callJson(port, "POST", "/api/v1/workloads",
                                     {"Authorization: Bearer " + member.key}, writeJson(w));
  ASSERT_LT(submitted.status, 300) << submitted.body;

  const auto list = [&](const std::string& path) -> Json {
    auto r = admin("GET", path);
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    Json body = parseJsonOrDiscarded(r.body);
    return body.is_object() && body.contains("data") ? body["data"] : Json::array();
  };
  const auto snapshot = [&] {
    Json out;
    out["usage"] = list("/api/v1/usage?scope=user:" + member.user);
    out["audit"] = list("/api/v1/audit").size();
    out["events"] = list("/api/v1/fleet/events").size();
    return out;
  };
  const Json before = snapshot();
  EXPECT_EQ(before["usage"].size(), 5u) << writeJson(before);
  EXPECT_GT(before["audit"].get<size_t>(), 0u);
  EXPECT_GT(before["events"].get<size_t>(), 0u);
  served.process->signal(SIGTERM);
  ASSERT_EQ(served.process->wait(), 0) << served.process->err();
  ASSERT_EQ(before["usage"].size(), 5u) << served.process->err();

  // Again, on a new data directory: everything is in PostgreSQL.
  testing::TempDir other;
  testing::writeFile(other.file("fleet.yaml"), testing::readFile(dir.file("fleet.yaml")));
  testing::Served again = testing::startServe(PURSER_BINARY, other, config, kAdminKey);
  ASSERT_NE(again.port, 0) << again.process->err();
  port = again.port;
  const Json after = snapshot();
  EXPECT_EQ(after["usage"], before["usage"]);
  EXPECT_GE(after["audit"].get<size_t>(), before["audit"].get<size_t>());
  EXPECT_GE(after["events"].get<size_t>(), before["events"].get<size_t>());
  auto r = testing::callJson(port, "POST", "/v1/chat/completions",
                             {"Authorization: Bearer " + member.key}, chat);
  EXPECT_EQ(r.status, 200) << r.body << "the member's key is still known";
  again.process->signal(SIGTERM);
  EXPECT_EQ(again.process->wait(), 0) << again.process->err();
}

}  // namespace
}  // namespace purser
