// Observation end to end: `purser serve` scraping `purser sim llm` processes' /metrics, judging
// each route target from them, and routing around a saturated or dead replica.
#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "fakes/eventually.h"
#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/serve.h"
#include "fakes/temp_dir.h"

namespace purser {
namespace {

using nlohmann::json;
using testing::Process;
using testing::RawClient;

constexpr const char* kAdminKey = "observe-test-admin-key-0123456789";

struct Reply {
  int status = 0;
  std::string body;
  json json_body() const { return json::parse(body, nullptr, false); }
};

Reply call(uint16_t port, const std::string& method, const std::string& path,
           const std::vector<std::string>& headers, const std::string& body = "") {
  const testing::RawResponse r = testing::callJson(port, method, path, headers, body);
  return {r.status, r.body};
}

class ObserveTest : public ::testing::Test {
 protected:
  // A simulated model server; its port.
  uint16_t sim(std::vector<std::string> flags) {
    std::vector<std::string> argv = {PURSER_BINARY, "sim", "llm", "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    sims.push_back(std::make_unique<Process>(argv));
    auto line = sims.back()->waitForStdout("listening on ");
    EXPECT_TRUE(line.has_value()) << sims.back()->err();
    return line ? testing::portFromListeningLine(*line) : 0;
  }

  void serve(const std::string& config) {
    testing::Served served = testing::startServe(PURSER_BINARY, dir, config, kAdminKey);
    server = std::move(served.process);
    ASSERT_NE(served.port, 0) << server->err();
    port = served.port;
    member = testing::seedMember(port, kAdminKey);
    key = member.key;
  }

  void TearDown() override {
    if (server) {
      server->signal(SIGTERM);
      EXPECT_EQ(server->wait(), 0) << server->err();
    }
  }

  // The route's targets by provider, as GET /api/v1/routes shows them.
  std::map<std::string, json> targets() {
    Reply r =
        call(port, "GET", "/api/v1/routes", {std::string("Authorization: Bearer ") + kAdminKey});
    std::map<std::string, json> out;
    const json body = r.json_body();
    if (!body.is_object()) return out;
    for (const auto& route : body["data"]) {
      for (const auto& t : route["targets"]) out[t["provider"]] = t;
    }
    return out;
  }

  // Waits (polling, with a generous bound) until `provider`'s target is in `state`; the target.
  json waitForState(const std::string& provider, const std::string& state) {
    json last;
    const std::string what = provider + " to become " + state;
    EXPECT_TRUE(testing::eventually(
        [&] {
          last = targets()[provider];
          return last.is_object() && last["state"] == state;
        },
        {.attempts = 600, .pause = std::chrono::milliseconds(50), .what = what.c_str()}))
        << "last: " << last.dump();
    return last;
  }

  Reply chat() {
    const json body = {{"model", "chat"},
                       {"messages", {{{"role", "user"}, {"content", "hello there"}}}},
                       {"max_tokens", 5}};
    return call(port, "POST", "/v1/chat/completions", {"Authorization: Bearer " + key},
                body.dump());
  }

  int64_t servedBy(const std::string& provider) {
    const json t = targets()[provider];
    return t.is_object() ? t["stats"]["requests"].get<int64_t>() : -1;
  }

  testing::TempDir dir;
  std::vector<std::unique_ptr<Process>> sims;
  std::unique_ptr<Process> server;
  uint16_t port = 0;
  testing::Member member;
  std::string key;
};

TEST_F(ObserveTest, ASaturatedOrDeadReplicaLeavesTheRotationAndReturnsWhenHealthy) {
  // `first` decodes slowly, one sequence at a time: a few requests make a queue there.
  const uint16_t first =
      sim({"--models", "m", "--ttft-ms", "0", "--tokens-per-s", "20", "--max-num-seqs", "1"});
  const uint16_t second = sim({"--models", "m", "--ttft-ms", "0", "--tokens-per-s", "0"});
  serve(
      fmt::format("providers:\n"
                  "  - {{name: first, kind: openai, base_url: http://127.0.0.1:{0}/v1,"
                  " metrics_url: http://127.0.0.1:{0}/metrics, engine: vllm}}\n"
                  "  - {{name: second, kind: openai, base_url: http://127.0.0.1:{1}/v1,"
                  " metrics_url: http://127.0.0.1:{1}/metrics}}\n"
                  "routes:\n"
                  "  - model: chat\n"
                  "    targets: [{{provider: first, model: m}}, {{provider: second, model: m}}]\n"
                  "    saturation: {{queue: 4}}\n"
                  "observe: {{interval: 100ms}}\n",
                  first, second));

  json healthy = waitForState("first", "healthy");
  EXPECT_EQ(healthy["queue"], 0);
  EXPECT_EQ(healthy["kv_cache_usage"], 0);
  EXPECT_FALSE(healthy["observed_at"].is_null());
  waitForState("second", "healthy");
  // Fallback order: the first target serves while it is healthy.
  ASSERT_EQ(chat().status, 200);
  EXPECT_EQ(servedBy("first"), 1);

  // Five long streams straight at `first`: one runs, four wait.
  std::vector<std::unique_ptr<RawClient>> load;
  const json longer = {{"model", "m"},
                       {"messages", {{{"role", "user"}, {"content", "a long one"}}}},
                       {"max_tokens", 2000},
                       {"ignore_eos", true},
                       {"stream", true}};
  for (int i = 0; i < 5; ++i) {
    load.push_back(std::make_unique<RawClient>(first));
    ASSERT_TRUE(
        load.back()->send(testing::jsonRequest("POST", "/v1/chat/completions", {}, longer.dump())));
  }
  json saturated = waitForState("first", "saturated");
  EXPECT_EQ(saturated["reason"], "4 requests waiting (saturated at 4)");
  EXPECT_EQ(saturated["queue"], 4);
  EXPECT_EQ(saturated["running"], 1);
  // Out of the rotation: the others serve every request, and none fails.
  for (int i = 0; i < 5; ++i) ASSERT_EQ(chat().status, 200);
  EXPECT_EQ(servedBy("first"), 1);
  EXPECT_EQ(servedBy("second"), 5);

  // Its queue cleared (the engine restarted), it returns to the rotation.
  Reply down = call(first, "POST", "/sim/faults", {}, R"({"down": true})");
  ASSERT_EQ(down.status, 200) << down.body;
  ASSERT_EQ(call(first, "POST", "/sim/faults", {}, R"({"down": false})").status, 200);
  waitForState("first", "healthy");
  ASSERT_EQ(chat().status, 200);
  EXPECT_EQ(servedBy("first"), 2);

  // Dead: its metrics stop answering; it is down, and requests still succeed elsewhere.
  load.clear();
  sims[0]->signal(SIGKILL);
  sims[0]->wait();
  json dead = waitForState("first", "down");
  EXPECT_EQ(dead["reason"], "its metrics did not answer the last 2 scrapes");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(chat().status, 200);
  EXPECT_EQ(servedBy("second"), 8);

  // Purser's own view, for a real Prometheus.
  Reply metrics = call(port, "GET", "/metrics", {});
  EXPECT_NE(metrics.body.find("purser_scrape_up{target=\"first\"} 0"), std::string::npos);
  EXPECT_NE(metrics.body.find("purser_scrape_up{target=\"second\"} 1"), std::string::npos);
  EXPECT_NE(metrics.body.find("purser_observe_memory_bytes "), std::string::npos);
}

// Every replica saturated: sheddable requests are refused at once, the others wait in Purser
// (critical first) holding no budget, and go on as the replica finishes what it has.
TEST_F(ObserveTest, ASaturatedRouteShedsSheddableRequestsAndQueuesTheRestByPriority) {
  // One sequence at a time, 20 tokens a second.
  const uint16_t busy =
      sim({"--models", "m", "--ttft-ms", "0", "--tokens-per-s", "20", "--max-num-seqs", "1"});
  serve(fmt::format(
      "providers:\n"
      "  - {{name: busy, kind: openai, base_url: http://127.0.0.1:{0}/v1,"
      " metrics_url: http://127.0.0.1:{0}/metrics, engine: vllm}}\n"
      "prices:\n"
      "  - {{provider: busy, model: m, input_per_mtok: \"100\", output_per_mtok: \"100\"}}\n"
      "routes:\n"
      "  - model: chat\n"
      "    targets: [{{provider: busy, model: m}}]\n"
      "    saturation: {{queue: 2}}\n"
      "    queue: {{max_wait: 60s}}\n"
      "observe: {{interval: 100ms}}\n",
      busy));
  const std::string admin = std::string("Authorization: Bearer ") + kAdminKey;
  ASSERT_EQ(call(port, "POST", "/api/v1/wallets", {admin},
                 json{{"scope", {{"kind", "user"}, {"id", member.user}}}, {"limit", "5.00"}}.dump())
                .status,
            201);
  Reply made = call(port, "POST", "/api/v1/keys", {admin},
                    json{{"owner", {{"kind", "user"}, {"id", member.user}}},
                         {"name", "urgent"},
                         {"priority", "critical"}}
                        .dump());
  ASSERT_EQ(made.status, 201) << made.body;
  const std::string critical_key = made.json_body()["key"];
  waitForState("busy", "healthy");

  // Three long streams straight at the replica: one runs, two wait there: saturated.
  std::vector<std::unique_ptr<RawClient>> load;
  const json longer = {{"model", "m"},
                       {"messages", {{{"role", "user"}, {"content", "a long one"}}}},
                       {"max_tokens", 40},
                       {"ignore_eos", true},
                       {"stream", true}};
  for (int i = 0; i < 3; ++i) {
    load.push_back(std::make_unique<RawClient>(busy));
    ASSERT_TRUE(
        load.back()->send(testing::jsonRequest("POST", "/v1/chat/completions", {}, longer.dump())));
  }
  waitForState("busy", "saturated");

  const json hello = {{"model", "chat"},
                      {"messages", {{{"role", "user"}, {"content", "hello there"}}}},
                      {"max_tokens", 5}};
  // Sheddable: refused at once, in each API's own words, with when to come back.
  testing::RawResponse shed = testing::callJson(
      port, "POST", "/v1/chat/completions",
      {"Authorization: Bearer " + key, "x-purser-priority: sheddable"}, hello.dump());
  EXPECT_EQ(shed.status, 503) << shed.body;
  EXPECT_EQ(json::parse(shed.body)["error"]["code"], "overloaded");
  EXPECT_EQ(shed.header("retry-after"), "1");
  const json message = {
      {"model", "chat"}, {"max_tokens", 5}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  Reply anthropic =
      call(port, "POST", "/v1/messages",
           {"x-api-key: " + key, "anthropic-version: 2023-06-01", "x-purser-priority: sheddable"},
           message.dump());
  EXPECT_EQ(anthropic.status, 529) << anthropic.body;
  EXPECT_EQ(anthropic.json_body()["error"]["type"], "overloaded_error");
  // A key cannot raise its own priority; a header that is not a priority is refused.
  EXPECT_EQ(call(port, "POST", "/v1/chat/completions",
                 {"Authorization: Bearer " + key, "x-purser-priority: critical"}, hello.dump())
                .status,
            403);
  EXPECT_EQ(call(port, "POST", "/v1/chat/completions",
                 {"Authorization: Bearer " + key, "x-purser-priority: urgent"}, hello.dump())
                .status,
            400);

  // A standard request and then a critical one wait in Purser; nothing is held for them.
  RawClient standard(port), critical(port);
  ASSERT_TRUE(standard.send(testing::jsonRequest("POST", "/v1/chat/completions",
                                                 {"Authorization: Bearer " + key}, hello.dump())));
  // (Not checked here: the metrics after the critical one's wait are.)
  testing::eventually(
      [&] {
        return call(port, "GET", "/metrics", {})
                   .body.find(
                       "purser_gateway_queue_waiting{route=\"chat\",priority=\"standard\"} 1") !=
               std::string::npos;
      },
      {.attempts = 600,
       .pause = std::chrono::milliseconds(20),
       .what = "the standard request waiting"});
  ASSERT_TRUE(critical.send(testing::jsonRequest(
      "POST", "/v1/chat/completions", {"Authorization: Bearer " + critical_key}, hello.dump())));
  std::string metrics;
  EXPECT_TRUE(testing::eventually(
      [&] {
        metrics = call(port, "GET", "/metrics", {}).body;
        return metrics.find(
                   "purser_gateway_queue_waiting{route=\"chat\",priority=\"critical\"} 1") !=
               std::string::npos;
      },
      {.attempts = 600,
       .pause = std::chrono::milliseconds(20),
       .what = "the critical request waiting"}));
  EXPECT_NE(metrics.find("purser_gateway_queue_waiting{route=\"chat\",priority=\"standard\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("purser_gateway_queue_waiting{route=\"chat\",priority=\"critical\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("purser_gateway_shed_total{route=\"chat\",priority=\"sheddable\",reason="
                         "\"saturated\"} 2"),
            std::string::npos);
  Reply wallet = call(port, "GET", "/api/v1/wallets?scope=user:" + member.user, {admin});
  ASSERT_EQ(wallet.status, 200) << wallet.body;
  EXPECT_EQ(wallet.json_body()["data"][0]["reserved"], "0.00") << "waiting holds no budget";
  EXPECT_EQ(wallet.json_body()["data"][0]["spent"], "0.00");

  // The replica finishes its streams; the critical request goes first, then the standard one.
  auto first = critical.readResponse();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->status, 200) << first->body;
  auto second = standard.readResponse();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->status, 200) << second->body;
  const json fin = call(port, "GET", "/api/v1/wallets?scope=user:" + member.user, {admin})
                       .json_body()["data"][0];
  EXPECT_EQ(fin["reserved"], "0.00");
  EXPECT_NE(fin["spent"], "0.00") << "both were charged once they ran";
  // The critical one was sent on first: it ran (one sequence at a time) and settled first.
  std::map<std::string, std::string> settled_at;  // key id -> when its request settled
  const json usage =
      call(port, "GET", "/api/v1/usage?scope=user:" + member.user, {admin}).json_body();
  for (const auto& e : usage["data"]) settled_at[e["key"]] = e["at"];
  const std::string critical_id = made.json_body()["id"];
  ASSERT_EQ(settled_at.size(), 2u);
  const std::string critical_at = settled_at[critical_id];
  settled_at.erase(critical_id);  // what is left is the standard key's
  EXPECT_LT(critical_at, settled_at.begin()->second);
}

// A provider without metrics (a hosted API) is judged by what Purser measures of it: its time to
// first token against the route's objective, once enough requests were measured.
TEST_F(ObserveTest, AnUnscrapedTargetIsDegradedByTheLatencyPurserMeasures) {
  const uint16_t slow = sim({"--models", "m", "--ttft-ms", "120", "--tokens-per-s", "0"});
  serve(fmt::format(
      "providers:\n"
      "  - {{name: hosted, kind: openai, base_url: http://127.0.0.1:{0}/v1}}\n"
      "routes:\n"
      "  - {{model: chat, targets: [{{provider: hosted, model: m}}], slo: {{ttft_p95: 50ms}}}}\n",
      slow));
  for (int i = 0; i < 19; ++i) ASSERT_EQ(chat().status, 200);
  json t = targets()["hosted"];
  EXPECT_EQ(t["state"], "healthy") << "19 requests are too few to judge a p95 by: " << t.dump();
  EXPECT_GE(t["measured_ttft_p95_ms"].get<double>(), 120.0);
  ASSERT_EQ(chat().status, 200);
  t = targets()["hosted"];
  EXPECT_EQ(t["state"], "degraded") << t.dump();
  EXPECT_NE(t["reason"].get<std::string>().find(
                "over its objective 50 ms, as Purser measured its last 20 requests"),
            std::string::npos)
      << t["reason"];
  EXPECT_TRUE(t["ttft_p95_ms"].is_null()) << "the server reports nothing";
}

// A port nothing listens on now: bound to port 0, then released for the process given it (the
// window in which another could take it is the price of a tool that cannot report its port).
uint16_t unusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// A real Prometheus scrapes Purser's /metrics and evaluates recording rules over what Purser
// judged of its targets.
TEST_F(ObserveTest, ARealPrometheusScrapesPurserAndRecordsRulesOverItsServiceLevels) {
  if (!std::filesystem::exists("/usr/bin/prometheus")) {
    GTEST_SKIP() << "prometheus is not installed (scripts/setup installs Debian's package)";
  }
  const uint16_t model = sim({"--models", "m", "--ttft-ms", "0", "--tokens-per-s", "0"});
  serve(fmt::format(
      "providers:\n"
      "  - {{name: gpu-a, kind: openai, base_url: http://127.0.0.1:{0}/v1,"
      " metrics_url: http://127.0.0.1:{0}/metrics}}\n"
      "routes:\n"
      "  - {{model: chat, targets: [{{provider: gpu-a, model: m}}], slo: {{ttft_p95: 2s}}}}\n"
      "observe: {{interval: 100ms}}\n",
      model));
  waitForState("gpu-a", "healthy");
  ASSERT_EQ(chat().status, 200);

  testing::writeFile(dir.file("rules.yml"),
                     "groups:\n"
                     "  - name: purser\n"
                     "    interval: 1s\n"
                     "    rules:\n"
                     "      - record: purser:targets_healthy:count\n"
                     "        expr: count(purser_target_state == 1) or vector(0)\n"
                     "      - record: purser:target_ttft_p95_seconds:max\n"
                     "        expr: max by (route) (purser_target_ttft_p95_seconds)\n");
  testing::writeFile(dir.file("prometheus.yml"),
                     fmt::format("global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n"
                                 "rule_files: [{}]\n"
                                 "scrape_configs:\n"
                                 "  - job_name: purser\n"
                                 "    static_configs: [{{targets: ['127.0.0.1:{}']}}]\n",
                                 dir.file("rules.yml"), port));
  Process check({"/usr/bin/promtool", "check", "config", dir.file("prometheus.yml")});
  ASSERT_EQ(check.wait(), 0) << check.out() << check.err();
  const uint16_t web = unusedPort();
  ASSERT_NE(web, 0);
  Process prometheus({"/usr/bin/prometheus", "--config.file=" + dir.file("prometheus.yml"),
                      "--storage.tsdb.path=" + dir.file("tsdb"),
                      fmt::format("--web.listen-address=127.0.0.1:{}", web)});
  // The recorded series, once Prometheus has scraped and evaluated (polled, bounded).
  auto query = [&](const std::string& expr) -> json {
    Reply r = call(web, "GET", "/api/v1/query?query=" + expr, {});
    const json body = r.json_body();
    if (!body.is_object() || body["status"] != "success") return nullptr;
    const json& result = body["data"]["result"];
    return result.empty() ? json(nullptr) : result[0];
  };
  json healthy;
  ASSERT_TRUE(testing::eventually(
      [&] {
        healthy = query("purser:targets_healthy:count");
        if (healthy.is_null() || healthy["value"][1] != "1") healthy = nullptr;
        return !healthy.is_null();
      },
      {.attempts = 600,
       .pause = std::chrono::milliseconds(100),
       .what = "Prometheus recording a healthy target"}))
      << prometheus.err();
  json up = query("up%7Bjob%3D%22purser%22%7D");
  ASSERT_FALSE(up.is_null());
  EXPECT_EQ(up["value"][1], "1");
  json ttft = query("purser:target_ttft_p95_seconds:max");
  ASSERT_FALSE(ttft.is_null());
  EXPECT_EQ(ttft["metric"]["route"], "chat");
  prometheus.signal(SIGTERM);
  prometheus.wait();
}

// A GPU's XID error, as its DCGM exporter reports it, takes the replicas on it out of the
// rotation until it is cleared.
TEST_F(ObserveTest, AReplicaWhoseGpuReportsAnXidLeavesTheRotation) {
  const uint16_t first = sim({"--models", "m", "--ttft-ms", "0", "--tokens-per-s", "0"});
  const uint16_t second = sim({"--models", "m", "--ttft-ms", "0", "--tokens-per-s", "0"});
  sims.push_back(std::make_unique<Process>(
      std::vector<std::string>{PURSER_BINARY, "sim", "dcgm", "--listen", "127.0.0.1:0",
                               "--hostname", "node-1", "--gpus", "2"}));
  auto line = sims.back()->waitForStdout("listening on ");
  ASSERT_TRUE(line.has_value()) << sims.back()->err();
  const uint16_t dcgm = testing::portFromListeningLine(*line);
  serve(fmt::format(
      "providers:\n"
      "  - {{name: first, kind: openai, base_url: http://127.0.0.1:{0}/v1, gpus: [node-1/1]}}\n"
      "  - {{name: second, kind: openai, base_url: http://127.0.0.1:{1}/v1,"
      " metrics_url: http://127.0.0.1:{1}/metrics, gpus: [node-1/0]}}\n"
      "routes:\n"
      "  - {{model: chat, targets: [{{provider: first, model: m}}, {{provider: second, model: "
      "m}}]}}\n"
      "observe:\n"
      "  interval: 100ms\n"
      "  exporters: [{{name: node-1, url: 'http://127.0.0.1:{2}/metrics', interval: 100ms}}]\n",
      first, second, dcgm));
  ASSERT_EQ(chat().status, 200);
  EXPECT_EQ(servedBy("first"), 1);
  waitForState("second", "healthy");

  ASSERT_EQ(call(dcgm, "POST", "/sim/gpus", {}, R"({"gpu": 1, "xid": 79})").status, 200);
  json down = waitForState("first", "down");
  EXPECT_EQ(down["reason"], "GPU 1 on node-1 reported XID 79");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(chat().status, 200);
  EXPECT_EQ(servedBy("first"), 1);
  EXPECT_EQ(servedBy("second"), 3);
  EXPECT_EQ(targets()["second"]["state"], "healthy") << "its GPU is another";

  ASSERT_EQ(call(dcgm, "POST", "/sim/gpus", {}, R"({"gpu": 1, "xid": 0})").status, 200);
  waitForState("first", "healthy");
  ASSERT_EQ(chat().status, 200);
  EXPECT_EQ(servedBy("first"), 2);
}

TEST_F(ObserveTest, ConfigurationMistakesAreRefusedWithTheirPlace) {
  testing::writeFile(
      dir.file("bad.yaml"),
      "listen: 127.0.0.1:0\n"
      "providers:\n"
      "  - {name: a, kind: openai, base_url: http://127.0.0.1:1/v1,"
      " metrics_url: ftp://x, engine: triton, gpus: [node-9/0, plain]}\n"
      "routes:\n"
      "  - {model: chat, targets: [{provider: a, model: m}],"
      " saturation: {kv_cache: 1.5}, slo: {ttft_p95: fast}}\n"
      "observe: {interval: 1ms, exporters: [{name: a, url: http://x:9400/metrics}]}\n");
  Process check(
      {PURSER_BINARY, "serve", "--config", dir.file("bad.yaml"), "--data", dir.file("var")});
  EXPECT_NE(check.wait(), 0);
  const std::string err = check.err();
  for (const char* expected :
       {"providers[0].metrics_url", "providers[0].engine", "routes[0].saturation.kv_cache",
        "routes[0].slo.ttft_p95", "observe.interval", "observe.exporters[0].name",
        "providers[0].gpus[0]: expected EXPORTER/GPU naming one of observe.exporters",
        "providers[0].gpus[1]"}) {
    EXPECT_NE(err.find(expected), std::string::npos) << expected << "\n" << err;
  }
}

}  // namespace
}  // namespace purser
