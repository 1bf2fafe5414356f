// `purser serve` as a real process on loopback: what an operator and a load balancer see.
#include <gtest/gtest.h>
#include <signal.h>

#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/temp_dir.h"

namespace purser {
namespace {

using testing::Process;
using testing::RawClient;
using testing::TempDir;

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::writeFile(dir.file("purser.yaml"),
                       "listen: 127.0.0.1:0\n"
                       "threads: 2\n"
                       "http:\n"
                       "  drain_timeout: 30s\n");
  }

  std::unique_ptr<Process> start(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {PURSER_BINARY,           "serve",  "--config",
                                     dir.file("purser.yaml"), "--data", dir.file("var")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = std::make_unique<Process>(argv);
    auto line = p->waitForStdout("purser: listening on ");
    EXPECT_TRUE(line.has_value()) << "stderr: " << p->err();
    if (line) port = testing::portFromListeningLine(*line);
    return p;
  }

  std::optional<testing::RawResponse> get(const std::string& path) {
    RawClient c(port);
    if (!c.send("GET " + path + " HTTP/1.1\r\nHost: t\r\n\r\n")) return std::nullopt;
    return c.readResponse();
  }

  TempDir dir;
  uint16_t port = 0;
};

TEST_F(ServeTest, ServesHealthReadinessMetricsAndTheConsole) {
  auto p = start();
  auto health = get("/healthz");
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  auto ready = get("/readyz");
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(ready->status, 200);
  auto metrics = get("/metrics");
  ASSERT_TRUE(metrics.has_value());
  EXPECT_NE(metrics->body.find("purser_build_info{"), std::string::npos);
  EXPECT_NE(metrics->body.find(
                "purser_http_requests_total{route=\"/healthz\",method=\"GET\",code=\"2xx\"} 1"),
            std::string::npos)
      << metrics->body;
  auto console = get("/");
  ASSERT_TRUE(console.has_value());
  EXPECT_EQ(console->status, 200);
  EXPECT_EQ(console->header("content-type"), "text/html; charset=utf-8");
  EXPECT_NE(console->body.find("<title>Purser</title>"), std::string::npos);
  auto script = get("/app.js");
  ASSERT_TRUE(script.has_value());
  EXPECT_EQ(script->status, 200);
  // Revalidation with the ETag costs no body.
  RawClient c(port);
  ASSERT_TRUE(c.send("GET /app.js HTTP/1.1\r\nHost: t\r\nIf-None-Match: " + script->header("etag") +
                     "\r\n\r\n"));
  auto cached = c.readResponse();
  ASSERT_TRUE(cached.has_value());
  EXPECT_EQ(cached->status, 304);
  p->signal(SIGTERM);
  EXPECT_EQ(p->wait(), 0);
}

TEST_F(ServeTest, SigtermDrainsAnInFlightRequestBeforeExit) {
  auto p = start();
  RawClient inflight(port);
  // Half a request: the server is reading it when SIGTERM arrives.
  ASSERT_TRUE(
      inflight.send("POST /api/v1/info HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n01234"));
  // Make sure the server has the request in hand: a second connection gets an answer, so the
  // first one (accepted earlier on a two-worker server) is being read.
  ASSERT_TRUE(get("/healthz").has_value());
  p->signal(SIGTERM);
  ASSERT_TRUE(p->waitForStderr("draining").has_value()) << p->err();
  // New connections are refused while draining.
  RawClient late(port);
  EXPECT_FALSE(late.connected() && late.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n") &&
               late.readResponse().has_value());
  // The in-flight request completes and is answered, and the connection is then closed.
  ASSERT_TRUE(inflight.send("56789"));
  auto r = inflight.readResponse();
  ASSERT_TRUE(r.has_value()) << p->err();
  EXPECT_EQ(r->status, 405);  // POST is not allowed on /api/v1/info: a real answer all the same
  EXPECT_EQ(r->header("allow"), "GET");
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_TRUE(inflight.waitForClose());
  EXPECT_EQ(p->wait(), 0);
  EXPECT_NE(p->err().find("stopped"), std::string::npos);
}

TEST_F(ServeTest, ASecondSignalStopsAtOnce) {
  auto p = start();
  RawClient stuck(port);
  // A request whose body never completes would hold the drain for the whole drain timeout.
  ASSERT_TRUE(stuck.send("POST /api/v1/info HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n01"));
  ASSERT_TRUE(get("/healthz").has_value());
  p->signal(SIGTERM);
  ASSERT_TRUE(p->waitForStderr("draining").has_value()) << p->err();
  p->signal(SIGTERM);
  EXPECT_EQ(p->wait(), 1);
  EXPECT_NE(p->err().find("stopping now without waiting"), std::string::npos) << p->err();
  EXPECT_TRUE(stuck.waitForClose());
}

TEST_F(ServeTest, StatePersistsAcrossRestarts) {
  std::string first_id;
  {
    auto p = start();
    auto info = get("/api/v1/info");
    ASSERT_TRUE(info.has_value());
    const size_t at = info->body.find("\"installation_id\":\"");
    ASSERT_NE(at, std::string::npos);
    first_id = info->body.substr(at + 19, 26);
    p->signal(SIGINT);
    EXPECT_EQ(p->wait(), 0);
  }
  auto p = start();
  auto info = get("/api/v1/info");
  ASSERT_TRUE(info.has_value());
  EXPECT_NE(info->body.find(first_id), std::string::npos) << info->body;
  p->signal(SIGTERM);
  EXPECT_EQ(p->wait(), 0);
}

TEST_F(ServeTest, ASecondServerOnTheSameDataDirectoryIsRefused) {
  auto first = start();
  Process second(
      {PURSER_BINARY, "serve", "--config", dir.file("purser.yaml"), "--data", dir.file("var")});
  EXPECT_EQ(second.wait(), 1);
  EXPECT_NE(second.err().find("is in use by another purser process"), std::string::npos)
      << second.err();
  first->signal(SIGTERM);
  EXPECT_EQ(first->wait(), 0);
}

TEST(CliTest, BadInputGetsAClearMessageAndANonZeroExit) {
  TempDir dir;
  testing::writeFile(dir.file("bad.yaml"), "listen: 127.0.0.1:0\nhttp:\n  idle_timeout: soon\n");
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--bogus"}, 2, "The following argument was not expected: --bogus"},
      {{"serve", "--config", dir.file("bad.yaml"), "--frobnicate"}, 2, "--frobnicate"},
      {{"serve"}, 2, "--config is required"},
      {{"serve", "--config", dir.file("missing.yaml")}, 2, "File does not exist"},
      {{"serve", "--config", dir.file("bad.yaml")},
       2,
       dir.file("bad.yaml") + ":3:17: http.idle_timeout: expected a duration"},
      {{"serve", "--config", dir.file("bad.yaml"), "--listen", "nowhere"},
       2,
       "--listen: invalid listen address \"nowhere\""},
      {{"launch"}, 2, "unknown command \"launch\"; run purser --help"},
      {{}, 2, "a command is required"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {PURSER_BINARY};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    Process p(argv);
    const std::string name = c.args.empty() ? "(none)" : c.args[0];
    EXPECT_EQ(p.wait(), c.code) << name;
    EXPECT_NE(p.err().find(c.says), std::string::npos) << name << ": " << p.err();
  }
  // Nothing was created for the rejected configurations.
  EXPECT_FALSE(std::filesystem::exists(dir.file("var")));
}

TEST(CliTest, HelpAndVersion) {
  Process help({PURSER_BINARY, "--help"});
  EXPECT_EQ(help.wait(), 0);
  EXPECT_NE(help.out().find("serve"), std::string::npos);
  EXPECT_NE(help.out().find("version"), std::string::npos);
  Process serve_help({PURSER_BINARY, "serve", "--help"});
  EXPECT_EQ(serve_help.wait(), 0);
  EXPECT_NE(serve_help.out().find("--listen"), std::string::npos);
  Process version({PURSER_BINARY, "version"});
  EXPECT_EQ(version.wait(), 0);
  EXPECT_EQ(version.out().rfind("purser 0.1.0 (commit ", 0), 0u) << version.out();
}

}  // namespace
}  // namespace purser
