// Live diagnosis end to end: `purser serve` in front of two `purser sim llm` servers; one of them
// starts failing at run time (POST /sim/faults), and `purser diagnose route ... --symptom errors`
// names that provider's upstream errors from Purser's own self-scraped series and events.
#include <gtest/gtest.h>
#include <signal.h>

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "common/json.h"
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
  uint16_t sim() {
    sims.push_back(std::make_unique<Process>(
        std::vector<std::string>{PURSER_BINARY, "sim", "llm", "--listen", "127.0.0.1:0", "--models",
                                 "m", "--ttft-ms", "0"}));
    auto line = sims.back()->waitForStdout("listening on ");
    EXPECT_TRUE(line.has_value()) << sims.back()->err();
    return line ? testing::portFromListeningLine(*line) : 0;
  }

  void TearDown() override {
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
  std::string key;
  std::string last_out;
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
}

}  // namespace
}  // namespace purser
