// Live diagnosis end to end: `purser serve` in front of `purser sim llm` servers (and a `purser
// sim dcgm` exporter for the GPUs they run on). After a healthy stretch — the baseline the
// engine compares against — one fault is injected at run time (POST /sim/faults, POST /sim/gpus,
// a wallet spent, a queue filled, a route rewritten and reloaded) and `purser diagnose ... --json`
// is polled, with traffic in between, until its first finding names that fault. Each fault is
// its own test. Polling is bounded by rounds of work, never by time.
#include <gtest/gtest.h>
#include <signal.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

#include "common/json.h"
#include "fakes/eventually.h"
#include "fakes/kueue_manifest.h"
#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/serve.h"
#include "fakes/temp_dir.h"

namespace purser {
namespace {

using testing::Process;

constexpr const char* kAdminKey = "diagnose-test-admin-key-0123456789";

class DiagnoseTest : public ::testing::Test {
 protected:
  uint16_t sim(const std::vector<std::string>& extra = {"--ttft-ms", "0"}) {
    std::vector<std::string> argv = {PURSER_BINARY, "sim",      "llm", "--listen",
                                     "127.0.0.1:0", "--models", "m"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    sims.push_back(std::make_unique<Process>(argv));
    auto line = sims.back()->waitForStdout("listening on ");
    EXPECT_TRUE(line.has_value()) << sims.back()->err();
    return line ? testing::portFromListeningLine(*line) : 0;
  }

  // A DCGM exporter for node `host` with two GPUs.
  uint16_t dcgm(const std::string& host) {
    sims.push_back(std::make_unique<Process>(
        std::vector<std::string>{PURSER_BINARY, "sim", "dcgm", "--listen", "127.0.0.1:0",
                                 "--hostname", host, "--gpus", "2"}));
    auto line = sims.back()->waitForStdout("listening on ");
    EXPECT_TRUE(line.has_value()) << sims.back()->err();
    return line ? testing::portFromListeningLine(*line) : 0;
  }

  // Starts `purser serve` on `config` and seeds a member; false when either failed.
  bool serve(const std::string& config) {
    testing::Served served = testing::startServe(PURSER_BINARY, dir, config, kAdminKey);
    server = std::move(served.process);
    if (served.port == 0) {
      ADD_FAILURE() << server->err();
      return false;
    }
    port = served.port;
    member = testing::seedMember(port, kAdminKey);
    key = member.key;
    return !key.empty();
  }

  testing::RawResponse admin(const std::string& method, const std::string& path,
                             const std::string& body = "") {
    return testing::callJson(port, method, path,
                             {std::string("Authorization: Bearer ") + kAdminKey}, body);
  }

  // Callers sending `body` in a loop on their own threads until TearDown (or stopLoad).
  void startLoad(int callers, const std::string& body) {
    for (int i = 0; i < callers; ++i) {
      load.emplace_back([this, body] {
        while (!stop_load.load()) {
          testing::callJson(port, "POST", "/v1/chat/completions", {"Authorization: Bearer " + key},
                            body);
        }
      });
    }
  }
  void stopLoad() {
    stop_load = true;
    for (auto& t : load) t.join();
    load.clear();
    stop_load = false;
  }

  // A healthy stretch: `n` requests, paced so that the self-scrape sees them spread out.
  void baseline(int n) {
    for (int i = 0; i < n; ++i) {
      chat();
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
  }

  // Polls `purser diagnose ARGS` (with traffic from `between` before each ask) until the first
  // finding is `cause` on `kind`/`name`; that answer (a test failure when it never was).
  Json firstFinding(const std::vector<std::string>& args, const std::string& cause,
                    const std::string& kind, const std::string& name,
                    const std::function<void()>& between, int rounds = 40) {
    return firstFinding(args, cause, {{kind, name}}, between, rounds);
  }
  Json firstFinding(const std::vector<std::string>& args, const std::string& cause,
                    const std::vector<std::pair<std::string, std::string>>& subjects,
                    const std::function<void()>& between, int rounds = 40) {
    Json answer;
    for (int round = 0; round < rounds; ++round) {
      between();
      answer = diagnose(args);
      if (!answer.is_object() || !answer["findings"].is_array() || answer["findings"].empty()) {
        continue;
      }
      const Json& top = answer["findings"][0];
      const Json who = top.value("subject", Json::object());
      const std::pair<std::string, std::string> subject = {who.value("kind", ""),
                                                           who.value("name", "")};
      if (top.value("cause", "") == cause &&
          std::find(subjects.begin(), subjects.end(), subject) != subjects.end()) {
        EXPECT_GE(top["evidence"].size(), 1u);
        EXPECT_FALSE(top.value("explanation", "").empty());
        return answer;
      }
    }
    // PURSER_DIAGNOSE_CASES=DIR keeps the case the last answer came from, to replay with
    // `purser diagnose --case FILE`.
    if (const char* keep = std::getenv("PURSER_DIAGNOSE_CASES"); keep != nullptr && *keep) {
      std::vector<std::string> again = args;
      again.push_back("--save-case");
      again.push_back(std::string(keep) + "/" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".yaml");
      diagnose(again);
    }
    ADD_FAILURE() << "the first finding never became " << cause << " on " << subjects.front().first
                  << " " << subjects.front().second << "; last answer: " << writeJson(answer, 2)
                  << "\n"
                  << last_out;
    return answer;
  }

  void paced(int n, int sleep_ms) {
    for (int i = 0; i < n; ++i) {
      chat();
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    }
  }

  void TearDown() override {
    stopLoad();
    if (server) {
      server->signal(SIGTERM);
      EXPECT_EQ(server->wait(), 0) << server->err();
    }
  }

  int chat() {
    const std::string body =
        R"({"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":3})";
    return testing::callJson(port, "POST", "/v1/chat/completions", {"Authorization: Bearer " + key},
                             body)
        .status;
  }

  int64_t requestsServed() {
    auto r = testing::callJson(port, "GET", "/api/v1/routes",
                               {std::string("Authorization: Bearer ") + kAdminKey}, "");
    Json body = parseJsonOrDiscarded(r.body);
    if (!body.is_object() || !body["data"].is_array() || body["data"].empty()) return 0;
    return body["data"][0]["stats"].value("requests", int64_t{0});
  }

  // `purser diagnose ARGS --json` against the server, as the platform admin.
  Json diagnose(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {PURSER_BINARY, "diagnose"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--json");
    argv.push_back("--server");
    argv.push_back(fmt::format("http://127.0.0.1:{}", port));
    Process p(argv, {}, {std::string("PURSER_KEY=") + kAdminKey});
    const int code = p.wait();
    last_out = p.out() + p.err();
    if (code != 0) return nullptr;
    return parseJsonOrDiscarded(p.out());
  }

  testing::TempDir dir;
  std::vector<std::unique_ptr<Process>> sims;
  std::unique_ptr<Process> server;
  uint16_t port = 0;
  testing::Member member;
  std::string key;
  std::string last_out;
  std::vector<std::thread> load;
  std::atomic<bool> stop_load{false};
};

TEST_F(DiagnoseTest, AProviderThatStartsFailingIsNamedAsTheCauseOfTheRoutesErrors) {
  const uint16_t bad = sim();
  const uint16_t good = sim();
  ASSERT_NE(bad, 0);
  ASSERT_NE(good, 0);
  // Outside providers (no metrics_url): their failures are upstream errors.
  testing::Served served = testing::startServe(
      PURSER_BINARY, dir,
      fmt::format("providers:\n"
                  "  - {{name: vllm-b, kind: openai, base_url: http://127.0.0.1:{0}/v1}}\n"
                  "  - {{name: vllm-a, kind: openai, base_url: http://127.0.0.1:{1}/v1}}\n"
                  "routes:\n"
                  "  - model: chat\n"
                  "    targets: [{{provider: vllm-b, model: m}}, {{provider: vllm-a, model: m}}]\n"
                  "observe: {{interval: 200ms}}\n",
                  bad, good),
      kAdminKey);
  server = std::move(served.process);
  ASSERT_NE(served.port, 0) << server->err();
  port = served.port;
  key = testing::seedMember(port, kAdminKey).key;
  ASSERT_FALSE(key.empty());

  // A healthy stretch first: the baseline the engine compares against.
  for (int i = 0; i < 2000 && requestsServed() < 60; ++i) {
    chat();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  ASSERT_GE(requestsServed(), 60);

  // Then vllm-b answers most requests with 500s.
  auto faults = testing::callJson(bad, "POST", "/sim/faults", {}, R"({"fail_rate": 0.7})");
  ASSERT_EQ(faults.status, 200) << faults.body;

  Json answer;
  bool named = false;
  for (int round = 0; round < 300 && !named; ++round) {
    for (int i = 0; i < 20; ++i) {
      chat();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    answer = diagnose({"route", "chat", "--symptom", "errors"});
    if (!answer.is_object() || !answer["findings"].is_array() || answer["findings"].empty()) {
      continue;
    }
    const Json& top = answer["findings"][0];
    named = top.value("cause", "") == "upstream_errors" &&
            top["subject"].value("kind", "") == "provider" &&
            top["subject"].value("name", "") == "vllm-b";
  }
  ASSERT_TRUE(named) << "last answer: " << writeJson(answer, 2) << "\n" << last_out;
  EXPECT_EQ(answer["question"]["kind"], "route");
  EXPECT_EQ(answer["question"]["name"], "chat");
  const Json& top = answer["findings"][0];
  EXPECT_GE(top["evidence"].size(), 1u);
  EXPECT_FALSE(top.value("explanation", "").empty());

  // The readable form says the same.
  std::vector<std::string> argv = {
      PURSER_BINARY, "diagnose", "route",    "chat",
      "--symptom",   "errors",   "--server", fmt::format("http://127.0.0.1:{}", port)};
  Process text(argv, {}, {std::string("PURSER_KEY=") + kAdminKey});
  EXPECT_EQ(text.wait(), 0) << text.err();
  EXPECT_NE(text.out().find("Diagnosis of route chat"), std::string::npos) << text.out();
  EXPECT_NE(text.out().find("evidence:"), std::string::npos) << text.out();

  // The case it answered from, saved and replayed offline, gives the same first finding.
  const std::string saved = dir.file("live-case.yaml");
  Json again = diagnose({"route", "chat", "--symptom", "errors", "--save-case", saved});
  ASSERT_TRUE(again.is_object()) << last_out;
  EXPECT_NE(last_out.find("saved the case to"), std::string::npos) << last_out;
  Process replay({PURSER_BINARY, "diagnose", "--case", saved});
  ASSERT_EQ(replay.wait(), 0) << replay.err();
  Json replayed = parseJsonOrDiscarded(replay.out());
  ASSERT_TRUE(replayed.is_object() && replayed["findings"].is_array() &&
              !replayed["findings"].empty())
      << replay.out();
  EXPECT_EQ(replayed["findings"][0]["cause"], again["findings"][0]["cause"]);
  EXPECT_EQ(replayed["findings"][0]["subject"], again["findings"][0]["subject"]);
}

// Two observed model servers on GPUs 0 and 1 of node-a, whose DCGM exporter is scraped too.
std::string gpuConfig(uint16_t a, uint16_t b, uint16_t exporter) {
  return fmt::format(
      "providers:\n"
      "  - {{name: vllm-a, kind: openai, base_url: http://127.0.0.1:{0}/v1,\n"
      "      metrics_url: http://127.0.0.1:{0}/metrics, gpus: [node-a/0]}}\n"
      "  - {{name: vllm-b, kind: openai, base_url: http://127.0.0.1:{1}/v1,\n"
      "      metrics_url: http://127.0.0.1:{1}/metrics, gpus: [node-a/1]}}\n"
      "routes:\n"
      "  - model: chat\n"
      "    strategy: weighted\n"
      "    targets: [{{provider: vllm-a, model: m}}, {{provider: vllm-b, model: m}}]\n"
      "observe:\n"
      "  interval: 200ms\n"
      "  exporters: [{{name: node-a, url: http://127.0.0.1:{2}/metrics, interval: 200ms}}]\n",
      a, b, exporter);
}

TEST_F(DiagnoseTest, AProviderAnswering429IsNamedAsRateLimitingTheRoute) {
  // One target: with a fallback the gateway stops sending to a target after its first 429
  // (it is degraded while another is healthy), and too few 429s would make a signal.
  const uint16_t limited = sim();
  ASSERT_NE(limited, 0);
  ASSERT_TRUE(serve(fmt::format(
      "providers:\n  - {{name: api-b, kind: openai, base_url: http://127.0.0.1:{}/v1}}\n"
      "routes:\n  - {{model: chat, targets: [{{provider: api-b, model: m}}]}}\n"
      "observe: {{interval: 200ms}}\n",
      limited)));
  baseline(60);
  auto fault = testing::callJson(limited, "POST", "/sim/faults", {}, R"({"rate_limit_rate": 0.7})");
  ASSERT_EQ(fault.status, 200) << fault.body;
  firstFinding(
      {"route", "chat", "--symptom", "errors", "--since", "2m"}, "upstream_rate_limited",
      "provider", "api-b", [&] { paced(5, 20); }, 60);
}

TEST_F(DiagnoseTest, AnXidOnTheGpuAProviderRunsOnIsNamedAsAHardwareFault) {
  const uint16_t exporter = dcgm("node-a");
  const uint16_t a = sim();
  const uint16_t b = sim();
  ASSERT_TRUE(exporter != 0 && a != 0 && b != 0);
  ASSERT_EQ(testing::callJson(exporter, "POST", "/sim/gpus", {}, R"({"util": 60})").status, 200);
  ASSERT_TRUE(serve(gpuConfig(a, b, exporter)));
  baseline(60);
  // GPU 0 falls off the bus; the engine on it dies with it.
  auto xid = testing::callJson(exporter, "POST", "/sim/gpus", {}, R"({"gpu": 0, "xid": 79})");
  ASSERT_EQ(xid.status, 200) << xid.body;
  ASSERT_EQ(testing::callJson(a, "POST", "/sim/faults", {}, R"({"down": true})").status, 200);
  firstFinding({"route", "chat", "--symptom", "errors", "--since", "2m"}, "gpu_hardware_fault",
               "gpu", "node-a/0", [&] { paced(20, 20); });
}

TEST_F(DiagnoseTest, AGpuThrottlingForHeatIsNamedAsTheCauseOfASlowRoute) {
  const uint16_t exporter = dcgm("node-a");
  const uint16_t a = sim();
  const uint16_t b = sim();
  ASSERT_TRUE(exporter != 0 && a != 0 && b != 0);
  ASSERT_EQ(
      testing::callJson(exporter, "POST", "/sim/gpus", {}, R"({"util": 90, "temp": 62})").status,
      200);
  ASSERT_TRUE(serve(gpuConfig(a, b, exporter)));
  baseline(60);
  auto hot = testing::callJson(exporter, "POST", "/sim/gpus", {},
                               R"({"gpu": 0, "throttle": true, "temp": 91})");
  ASSERT_EQ(hot.status, 200) << hot.body;
  ASSERT_EQ(testing::callJson(a, "POST", "/sim/faults", {}, R"({"slow_factor": 3})").status, 200);
  firstFinding({"route", "chat", "--symptom", "slow", "--since", "2m"}, "gpu_thermal_throttle",
               "gpu", "node-a/0", [&] { paced(20, 20); });
}

TEST_F(DiagnoseTest, AHardWalletSpentToItsLimitIsNamedAsTheUsersBudgetExhausted) {
  const uint16_t up = sim();
  ASSERT_NE(up, 0);
  ASSERT_TRUE(serve(fmt::format(
      "providers:\n  - {{name: p, kind: openai, base_url: http://127.0.0.1:{}/v1}}\n"
      "routes:\n  - {{model: chat, targets: [{{provider: p, model: m}}]}}\n"
      "prices:\n  - {{provider: p, model: m, input_per_mtok: \"10\", output_per_mtok: \"100\"}}\n"
      "observe: {{interval: 200ms}}\n",
      up)));
  // About a thousandth a request: a hundred requests spend it.
  auto wallet =
      admin("POST", "/api/v1/wallets",
            writeJson(Json{{"scope", {{"kind", "user"}, {"id", member.user}}}, {"limit", "0.10"}}));
  ASSERT_EQ(wallet.status, 201) << wallet.body;
  const std::string body =
      R"({"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":10})";
  auto spend = [&] {
    for (int i = 0; i < 20; ++i) {
      testing::callJson(port, "POST", "/v1/chat/completions", {"Authorization: Bearer " + key},
                        body);
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
  };
  spend();
  spend();
  firstFinding({"user", "dana", "--symptom", "over_budget", "--since", "2m"}, "budget_exhausted",
               "user", "dana", spend);
}

TEST_F(DiagnoseTest, WorkloadsBeyondAQueuesNominalQuotaAreNamedAsItsQuotaExhausted) {
  testing::writeFile(dir.file("fleet.yaml"), testing::KueueQueue{}.yaml());
  const uint16_t up = sim();
  ASSERT_NE(up, 0);
  ASSERT_TRUE(serve(
      fmt::format("providers:\n  - {{name: p, kind: openai, base_url: http://127.0.0.1:{}/v1}}\n"
                  "routes:\n  - {{model: chat, targets: [{{provider: p, model: m}}]}}\n"
                  "fleet:\n  manifests: [fleet.yaml]\n"
                  "observe: {{interval: 200ms}}\n",
                  up)));
  baseline(40);  // the queue empty meanwhile
  auto submit = [&](const std::string& name, int gpus) {
    const Json w = {{"name", name},
                    {"queue", "research"},
                    {"pod_sets",
                     {{{"name", "main"},
                       {"requests", {{"cpu", "1"}, {"nvidia.com/gpu", std::to_string(gpus)}}},
                       {"command", {"sleep", "120"}}}}}};
    return testing::callJson(port, "POST", "/api/v1/workloads", {"Authorization: Bearer " + key},
                             writeJson(w));
  };
  std::vector<std::string> names = {"big", "late-1", "late-2"};
  auto big = submit("big", 8);
  ASSERT_LT(big.status, 300) << big.body;
  for (const char* late : {"late-1", "late-2"}) {
    auto r = submit(late, 4);
    EXPECT_LT(r.status, 300) << r.body;
  }
  firstFinding({"queue", "research", "--symptom", "pending", "--since", "2m"}, "quota_exhausted",
               "queue", "research", [&] { paced(10, 30); });
  for (const std::string& name : names) {
    testing::callJson(port, "DELETE", "/api/v1/workloads/ml/" + name,
                      {"Authorization: Bearer " + key});
  }
}

TEST_F(DiagnoseTest, ARouteChangeThatLeavesOnlyAFailingTargetIsNamedAsABadConfigChange) {
  const uint16_t good = sim();
  const uint16_t flaky = sim({"--ttft-ms", "0", "--fail-rate", "0.7"});
  ASSERT_TRUE(good != 0 && flaky != 0);
  const std::string providers = fmt::format(
      "providers:\n"
      "  - {{name: good, kind: openai, base_url: http://127.0.0.1:{}/v1}}\n"
      "  - {{name: flaky, kind: openai, base_url: http://127.0.0.1:{}/v1}}\n"
      "observe: {{interval: 200ms}}\n",
      good, flaky);
  // The flaky one is the fallback: while the good one answers, nobody meets it.
  ASSERT_TRUE(serve(providers +
                    "routes:\n  - model: chat\n"
                    "    targets: [{provider: good, model: m}, {provider: flaky, model: m}]\n"));
  baseline(60);
  // Someone drops the good target and reloads.
  testing::writeFile(dir.file("purser.yaml"),
                     "listen: 127.0.0.1:0\nthreads: 2\n" + providers +
                         "routes:\n  - model: chat\n    targets: [{provider: flaky, model: m}]\n");
  server->signal(SIGHUP);
  ASSERT_TRUE(testing::eventually(
      [&] {
        Json routes = parseJsonOrDiscarded(admin("GET", "/api/v1/routes").body);
        return routes.is_object() && routes["data"].is_array() && !routes["data"].empty() &&
               routes["data"][0]["targets"].is_array() && routes["data"][0]["targets"].size() == 1;
      },
      {.attempts = 500,
       .pause = std::chrono::milliseconds(20),
       .what = "the reloaded route with one target"}))
      << server->err();
  firstFinding({"route", "chat", "--symptom", "errors", "--since", "2m"}, "bad_config_change",
               "route", "chat", [&] { paced(20, 20); });
}

TEST_F(DiagnoseTest, ConcurrentLoadBeyondMaxNumSeqsIsNamedAsReplicaSaturation) {
  const uint16_t up = sim({"--ttft-ms", "20", "--tokens-per-s", "100", "--max-num-seqs", "2"});
  ASSERT_NE(up, 0);
  ASSERT_TRUE(
      serve(fmt::format("providers:\n"
                        "  - {{name: vllm-a, kind: openai, base_url: http://127.0.0.1:{0}/v1,\n"
                        "      metrics_url: http://127.0.0.1:{0}/metrics}}\n"
                        "routes:\n  - {{model: chat, targets: [{{provider: vllm-a, model: m}}]}}\n"
                        "observe: {{interval: 200ms}}\n",
                        up)));
  baseline(40);
  startLoad(10, R"({"model":"chat","messages":[{"role":"user","content":"hello"}],)"
                R"("max_tokens":40})");
  firstFinding({"route", "chat", "--symptom", "slow", "--since", "2m"}, "replica_saturation",
               {{"deployment", "vllm-a"}, {"route", "chat"}},
               [] { std::this_thread::sleep_for(std::chrono::milliseconds(500)); });
}

// Long answers in a small KV cache: the engine admits a request when its prompt fits, and as
// the running ones generate, their caches outgrow the blocks left, so it preempts the newest to
// recompute later - vLLM's way, and what the sim does.
TEST_F(DiagnoseTest, LongAnswersInASmallKvCacheAreNamedAsKvCacheExhaustion) {
  const uint16_t up = sim({"--ttft-ms", "20", "--tokens-per-s", "200", "--kv-cache-tokens", "1024",
                           "--max-num-seqs", "64", "--no-prefix-caching"});
  ASSERT_NE(up, 0);
  ASSERT_TRUE(
      serve(fmt::format("providers:\n"
                        "  - {{name: vllm-a, kind: openai, base_url: http://127.0.0.1:{0}/v1,\n"
                        "      metrics_url: http://127.0.0.1:{0}/metrics}}\n"
                        "routes:\n  - {{model: chat, targets: [{{provider: vllm-a, model: m}}]}}\n"
                        "observe: {{interval: 200ms}}\n",
                        up)));
  baseline(40);
  std::string prompt;
  for (int i = 0; i < 20; ++i) prompt += fmt::format("word{} ", i);
  startLoad(12, writeJson(Json{{"model", "chat"},
                               {"messages", {{{"role", "user"}, {"content", prompt}}}},
                               {"max_tokens", 300}}));
  firstFinding({"route", "chat", "--symptom", "slow", "--since", "2m"}, "kv_cache_exhaustion",
               "deployment", "vllm-a",
               [] { std::this_thread::sleep_for(std::chrono::milliseconds(500)); });
}

// With diagnose.narrator configured, the findings are summarised by the narrator route's model
// through Purser's own gateway, as the member who asked: their key, their wallet.
TEST_F(DiagnoseTest, TheNarratorSummarisesThroughTheGatewayMeteredToTheCaller) {
  const uint16_t up = sim();
  const uint16_t writer = sim();
  ASSERT_TRUE(up != 0 && writer != 0);
  ASSERT_TRUE(serve(fmt::format(
      "providers:\n"
      "  - {{name: p, kind: openai, base_url: http://127.0.0.1:{}/v1}}\n"
      "  - {{name: writer, kind: openai, base_url: http://127.0.0.1:{}/v1}}\n"
      "routes:\n"
      "  - {{model: chat, targets: [{{provider: p, model: m}}]}}\n"
      "  - {{model: narrator, targets: [{{provider: writer, model: m}}]}}\n"
      "prices:\n  - {{provider: writer, model: m, input_per_mtok: \"1\", output_per_mtok: \"2\"}}\n"
      "diagnose: {{narrator: {{route: narrator, max_tokens: 64}}}}\n"
      "observe: {{interval: 200ms}}\n",
      up, writer)));
  baseline(20);
  // As the member, not the admin.
  const auto ask = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {PURSER_BINARY, "diagnose",
                                     "route",       "chat",
                                     "--server",    fmt::format("http://127.0.0.1:{}", port)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Process p(argv, {}, {"PURSER_KEY=" + key});
    const int code = p.wait();
    last_out = p.out() + p.err();
    return code == 0 ? p.out() : std::string();
  };
  const Json answer = parseJsonOrDiscarded(ask({"--json"}));
  ASSERT_TRUE(answer.is_object()) << last_out;
  ASSERT_TRUE(answer["narration"].is_object()) << writeJson(answer, 2);
  EXPECT_EQ(answer["narration"]["route"], "narrator");
  EXPECT_FALSE(answer["narration"].value("text", "").empty()) << writeJson(answer["narration"]);
  ASSERT_FALSE(answer["findings"].empty());

  // Metered to the member who asked, on the narrator route.
  Json usage = parseJsonOrDiscarded(admin("GET", "/api/v1/usage?scope=user:" + member.user).body);
  int narrated = 0;
  for (const Json& e : usage.value("data", Json::array())) {
    if (e.value("route", "") != "narrator") continue;
    ++narrated;
    EXPECT_EQ(e.value("user", ""), member.user);
    EXPECT_NE(e.value("cost", "0"), "0") << writeJson(e);
  }
  EXPECT_EQ(narrated, 1) << writeJson(usage, 2);

  // --no-narrate asks the model nothing; the readable form shows the summary first.
  const Json quiet = parseJsonOrDiscarded(ask({"--json", "--no-narrate"}));
  ASSERT_TRUE(quiet.is_object()) << last_out;
  EXPECT_FALSE(quiet.contains("narration"));
  const std::string text = ask({});
  EXPECT_NE(text.find("In short (written by narrator"), std::string::npos) << last_out;
  usage = parseJsonOrDiscarded(admin("GET", "/api/v1/usage?scope=user:" + member.user).body);
  narrated = 0;
  for (const Json& e : usage.value("data", Json::array())) {
    narrated += e.value("route", "") == "narrator" ? 1 : 0;
  }
  EXPECT_EQ(narrated, 2) << "one for the JSON answer, one for the readable one, none for quiet";
}

}  // namespace
}  // namespace purser
