// A model served from the fleet: a workload that declares `serve` runs `purser sim llm` as its
// pod; once it answers its health check it becomes a target of the gateway's route, requests
// through the gateway reach it and are metered in the caller's wallets, and when it is preempted
// it leaves the route and drains before its process is signalled — a client sending traffic all
// along sees no failed request, since another target of the route exists.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "fakes/eventually.h"
#include "fakes/process.h"
#include "fakes/temp_dir.h"
#include "integration/fleet_harness.h"

namespace purser {
namespace {

using nlohmann::json;
using testing::Process;

constexpr const char* kAdminKey = "fleet-serve-test-admin-key-0123456789";

class FleetServeModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The route's configured target: another server of the same model.
    backup = std::make_unique<Process>(std::vector<std::string>{
        PURSER_BINARY, "sim", "llm", "--listen", "127.0.0.1:0", "--models", "sim-small"});
    auto line = backup->waitForStdout("listening on ");
    ASSERT_TRUE(line.has_value()) << backup->err();
    const std::string backup_url = line->substr(line->find("http"));
    testing::writeFile(dir.file("fleet.yaml"), testing::fleetManifests(64));
    testing::writeFile(
        dir.file("purser.yaml"),
        "listen: 127.0.0.1:0\nthreads: 1\n"
        "providers:\n  - {name: backup, kind: openai, base_url: " +
            backup_url +
            "/v1}\n"
            "routes:\n  - {model: chat, strategy: weighted, served_by: [acme], targets: "
            "[{provider: backup, model: sim-small}]}\n"
            "prices:\n"
            "  - {provider: backup, model: sim-small, input_per_mtok: \"1.00\", output_per_mtok: "
            "\"2.00\"}\n"
            "  - {provider: fleet, model: sim-small, input_per_mtok: \"1.00\", output_per_mtok: "
            "\"2.00\"}\n"
            "fleet:\n  manifests: [fleet.yaml]\n  termination_grace: 30s\n");
    std::string why;
    ASSERT_TRUE(server.start(&why)) << why;
    key = server.member();
    ASSERT_FALSE(key.empty());
  }
  void TearDown() override {
    server.call("DELETE", "/api/v1/workloads/ml/chat-server", key);
    server.stop();
    if (backup) {
      backup->signal(SIGTERM);
      backup->wait();
    }
  }

  int chat() {
    int status = 0;
    server.call("POST", "/v1/chat/completions", key,
                R"({"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":8})",
                "application/json", &status);
    return status;
  }
  // Providers that served the caller's requests, from the ledger.
  std::set<std::string> providers() {
    std::set<std::string> out;
    const json usage = server.call("GET", "/api/v1/usage?scope=tenant:acme&limit=1000", kAdminKey);
    for (const auto& e : usage.value("data", json::array())) out.insert(e.value("provider", ""));
    return out;
  }

  // Workload chat-server: a simulated model server (sim-small) on `port` with `gpus` GPUs, serving
  // route `route`.
  static json servingWorkload(const std::string& route, uint16_t port, int gpus) {
    return {{"name", "chat-server"},
            {"queue", "research"},
            {"serve",
             {{"route", route}, {"port", port}, {"model", "sim-small"}, {"health", "/healthz"}}},
            {"pod_sets",
             {{{"name", "replicas"},
               {"requests", {{"cpu", "1"}, {"nvidia.com/gpu", std::to_string(gpus)}}},
               {"command",
                {"/bin/sh", "-c",
                 std::string("exec ") + PURSER_BINARY +
                     " sim llm --listen 127.0.0.1:$PURSER_SERVE_PORT --models "
                     "$PURSER_SERVE_MODEL"}}}}}};
  }

  // The process of the replica listening on `port` (its command line names it), or 0.
  static int replicaPid(uint16_t port) {
    const std::string want = std::string("--listen") + '\0' + "127.0.0.1:" + std::to_string(port);
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      if (testing::readFile(entry.path().string() + "/cmdline").find(want) != std::string::npos) {
        return std::stoi(name);
      }
    }
    return 0;
  }

  testing::TempDir dir;
  testing::FleetServer server{dir, kAdminKey};
  std::unique_ptr<Process> backup;
  std::string key;
};

TEST_F(FleetServeModelTest, AServedModelJoinsItsRouteAndDrainsBeforeItIsPreempted) {
  const uint16_t port = testing::freePort();
  json w = servingWorkload("chat", port, 4);
  w["priority_class"] = "low";
  int status = 0;
  json submitted =
      server.call("POST", "/api/v1/workloads", key, w.dump(), "application/json", &status);
  ASSERT_EQ(status, 201) << submitted.dump();
  server.waitFor(key, "chat-server", "running");
  // It joins once it answers its health check.
  ASSERT_TRUE(server.waitForServing(key, "chat-server", true));

  // Requests through the gateway reach it (weighted between it and the backup), metered.
  const std::string replica = "fleet:ml/chat-server/replicas-0";
  for (int i = 0; i < 400 && providers().count(replica) == 0; ++i) ASSERT_EQ(chat(), 200);
  ASSERT_EQ(providers().count(replica), 1u) << "the replica served requests";
  // Its server's metrics are scraped as a configured provider's are: it is judged by them.
  json seen;
  EXPECT_TRUE(testing::eventually(
      [&] {
        const json routes = server.call("GET", "/api/v1/routes", kAdminKey);
        for (const auto& r : routes.value("data", json::array())) {
          for (const auto& t : r["targets"]) {
            if (t["provider"] == replica) seen = t;
          }
        }
        return seen.is_object() && !seen["observed_at"].is_null();
      },
      {.attempts = 400,
       .pause = std::chrono::milliseconds(50),
       .what = "the replica's metrics observed on its route"}))
      << seen.dump();
  EXPECT_EQ(seen["state"], "healthy") << seen.dump();
  EXPECT_TRUE(seen["kv_cache_usage"].is_number()) << seen.dump();

  // Traffic all along; an urgent workload needs all 8 GPUs and preempts the server.
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0}, failed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 2; ++c) {
    clients.emplace_back([&] {
      while (!stop) {
        const int s = chat();
        ++sent;
        if (s != 200) ++failed;
      }
    });
  }
  json urgent = {
      {"name", "urgent"},
      {"queue", "research"},
      {"priority_class", "urgent"},
      {"pod_sets", {{{"name", "main"}, {"requests", {{"cpu", "1"}, {"nvidia.com/gpu", "8"}}}}}}};
  server.call("POST", "/api/v1/workloads", key, urgent.dump());
  json evicted = server.waitFor(key, "chat-server", "evicted");
  server.waitFor(key, "urgent", "admitted");
  // The replica's process ends (its stop followed the drain): wait for its log to close, then a
  // little more traffic, all of which the backup serves.
  EXPECT_TRUE(testing::eventually(
      [&] {
        const json events = server.call("GET", "/api/v1/fleet/events?workload=ml/chat-server", key);
        for (const auto& e : events["data"]) {
          if (e["kind"] == "Draining") return true;
        }
        return false;
      },
      {.pause = std::chrono::milliseconds(20), .what = "the replica's drain"}));
  // Then its process was stopped: its port stops answering.
  EXPECT_TRUE(testing::eventually(
      [&] { return !testing::RawClient(port).connected(); },
      {.pause = std::chrono::milliseconds(20), .what = "the replica's server closing its port"}));
  const int before = sent.load();
  EXPECT_TRUE(testing::eventually([&] { return sent.load() >= before + 20; },
                                  {.attempts = 12000,
                                   .pause = std::chrono::milliseconds(5),
                                   .what = "20 more requests after the preemption"}));
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0) << "of " << sent.load() << " requests sent through the preemption";
  EXPECT_GT(sent.load(), 20);
  EXPECT_FALSE(evicted["pods"][0].value("serving", true));
}

// A model that no configured route names gets a route of its tenant's own: its members see and
// use it; another tenant finds no such model (404, as for one that does not exist).
TEST_F(FleetServeModelTest, AModelNoRouteNamesGetsARouteOnlyItsOwnTenantSees) {
  const json w = servingWorkload("acme-private", testing::freePort(), 1);
  int status = 0;
  json submitted =
      server.call("POST", "/api/v1/workloads", key, w.dump(), "application/json", &status);
  ASSERT_EQ(status, 201) << submitted.dump();
  ASSERT_TRUE(server.waitForServing(key, "chat-server", true));
  const std::string ask =
      R"({"model":"acme-private","messages":[{"role":"user","content":"hello"}],"max_tokens":8})";
  server.call("POST", "/v1/chat/completions", key, ask, "application/json", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(providers().count("fleet:ml/chat-server/replicas-0"), 1u);
  EXPECT_NE(server.call("GET", "/v1/models", key).dump().find("acme-private"), std::string::npos);
  // Another tenant's member.
  server.call("POST", "/api/v1/tenants", kAdminKey, R"({"name":"globex"})");
  server.call("POST", "/api/v1/teams", kAdminKey, R"({"name":"research","tenant":"globex"})");
  json bob = server.call("POST", "/api/v1/users", kAdminKey,
                         R"({"name":"bob","tenant":"globex","team":"research"})");
  const std::string bob_key =
      server
          .call("POST", "/api/v1/keys", kAdminKey,
                json{{"name", "laptop"}, {"owner", {{"kind", "user"}, {"id", bob["id"]}}}}.dump())
          .value("key", "");
  ASSERT_FALSE(bob_key.empty());
  json refused =
      server.call("POST", "/v1/chat/completions", bob_key, ask, "application/json", &status);
  EXPECT_EQ(status, 404) << refused.dump();
  EXPECT_EQ(refused["error"]["code"], "model_not_found") << refused.dump();
  EXPECT_EQ(server.call("GET", "/v1/models", bob_key).dump().find("acme-private"),
            std::string::npos);
  EXPECT_EQ(server.call("GET", "/api/v1/routes", bob_key).dump().find("acme-private"),
            std::string::npos);
}

TEST_F(FleetServeModelTest, AReplicaThatStopsAnsweringLeavesTheRouteAndRejoinsWhenItAnswers) {
  const uint16_t port = testing::freePort();
  server.call("POST", "/api/v1/workloads", key, servingWorkload("chat", port, 1).dump());
  const auto servingIs = [&](bool want) { return server.waitForServing(key, "chat-server", want); };
  ASSERT_TRUE(servingIs(true));
  // The replica hangs (stopped, its socket still accepting): its health checks time out.
  const int pid = replicaPid(port);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  EXPECT_TRUE(servingIs(false));
  json events;
  EXPECT_TRUE(testing::eventually(
      [&] {
        events = server.call("GET", "/api/v1/fleet/events?workload=ml/chat-server", key);
        for (const auto& e : events["data"]) {
          if (e["reason"] == "ReplicaUnhealthy") return true;
        }
        return false;
      },
      {.pause = std::chrono::milliseconds(20), .what = "a ReplicaUnhealthy event"}))
      << events.dump();
  // Still running (it is the route that stopped sending it requests); back once it answers.
  EXPECT_EQ(server.workload(key, "chat-server")["state"], "running");
  ASSERT_EQ(::kill(pid, SIGCONT), 0);
  EXPECT_TRUE(servingIs(true));
  EXPECT_EQ(chat(), 200);
  // Deleted, and Purser stopped at once, before the drain's end: the replica is still signalled
  // (its workload has ended, so no restart would adopt it).
  server.call("DELETE", "/api/v1/workloads/ml/chat-server", key);
  EXPECT_EQ(server.stop(), 0);
  EXPECT_TRUE(testing::eventually(
      [&] { return !testing::RawClient(port).connected(); },
      {.pause = std::chrono::milliseconds(20), .what = "the deleted replica closing its port"}));
}

}  // namespace
}  // namespace purser
