// Purser as an MCP client of one upstream, against a server on loopback that keeps sessions as
// the Streamable HTTP transport says: the session opened at first need and sent back, opened
// again when the server forgets it, tool lists paged and cached, answers read from JSON or
// server-sent events, and an upstream that hangs, answers too much, or answers garbage cut off
// with a clear error.
#include "mcp/upstream.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>

#include <atomic>
#include <mutex>

#include "fakes/fake_mcp_server.h"
#include "fakes/test_server.h"

namespace purser::mcp {
namespace {

namespace asio = boost::asio;
using testing::FakeMcpServer;

class UpstreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clients =
        std::make_unique<http::WorkerLocal<http::HttpClient>>(workers, [](asio::io_context& ctx) {
          return std::make_unique<http::HttpClient>(ctx, http::ClientOptions{});
        });
    workers.start();
    UpstreamOptions o;
    o.name = "demo";
    o.url = fake.url;
    o.bearer = "upstream-secret";
    o.headers = {{"X-Team", "ml"}};
    o.timeout = std::chrono::seconds(3);
    o.max_result_bytes = 1 << 20;
    upstream = std::make_unique<Upstream>(o, *clients, clock);
  }
  void TearDown() override {
    workers.stop();
    workers.join();
  }

  template <typename T>
  T run(asio::awaitable<T> coro) {
    return asio::co_spawn(workers.context(0), std::move(coro), asio::use_future).get();
  }

  FakeMcpServer fake;
  ManualClock clock;
  http::Workers workers{1};
  std::unique_ptr<http::WorkerLocal<http::HttpClient>> clients;
  std::unique_ptr<Upstream> upstream;
};

TEST_F(UpstreamTest, TheSessionIsOpenedOnceAndTheToolsArePagedAndKept) {
  auto tools = run(upstream->tools());
  ASSERT_TRUE(tools.has_value()) << tools.error().toString();
  ASSERT_EQ(tools->size(), 3u);
  EXPECT_EQ((*tools)[0]["name"], "echo");
  EXPECT_EQ((*tools)[2]["name"], "slow");
  {
    std::lock_guard lock(fake.mu);
    EXPECT_EQ(fake.initializations, 1);
    EXPECT_EQ(fake.handshakes, 1);
    EXPECT_EQ(fake.seen_authorization, "Bearer upstream-secret");
    EXPECT_EQ(fake.seen_version, "2025-06-18");
  }
  EXPECT_EQ(fake.lists.load(), 2);
  ASSERT_TRUE(run(upstream->tools()).has_value());
  EXPECT_EQ(fake.lists.load(), 2);  // kept
  clock.advance(std::chrono::seconds(31));
  ASSERT_TRUE(run(upstream->tools()).has_value());
  EXPECT_EQ(fake.lists.load(), 4);  // asked again after the ttl
  auto echoed = run(upstream->call("echo", Json{{"text", "hi"}}, nullptr));
  ASSERT_TRUE(echoed.has_value()) << echoed.error().toString();
  EXPECT_EQ(echoed->result["content"][0]["text"], "hi");
  std::lock_guard lock(fake.mu);
  EXPECT_EQ(fake.initializations, 1);
}

TEST_F(UpstreamTest, AForgottenSessionIsOpenedAgainOnce) {
  ASSERT_TRUE(run(upstream->call("echo", Json{{"text", "a"}}, nullptr)).has_value());
  fake.forget();
  auto again = run(upstream->call("echo", Json{{"text", "b"}}, nullptr));
  ASSERT_TRUE(again.has_value()) << again.error().toString();
  EXPECT_EQ(again->result["content"][0]["text"], "b");
  std::lock_guard lock(fake.mu);
  EXPECT_EQ(fake.initializations, 2);
}

TEST_F(UpstreamTest, AnswersComeAsJsonOrEventsAndErrorsAsTheUpstreamSaidThem) {
  auto streamed = run(upstream->call("events", nullptr, nullptr));
  ASSERT_TRUE(streamed.has_value()) << streamed.error().toString();
  EXPECT_EQ(streamed->result["content"][0]["text"], "sse");
  auto unknown = run(upstream->call("nope", nullptr, nullptr));
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(unknown->error["code"], -32602);
}

TEST_F(UpstreamTest, HangingHugeAndGarbageAnswersAreClearErrors) {
  auto slow = run(upstream->call("slow", nullptr, nullptr));
  fake.release = true;
  ASSERT_FALSE(slow.has_value());
  EXPECT_EQ(slow.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(slow.error().message.find("MCP server demo"), std::string::npos);
  auto big = run(upstream->call("big", nullptr, nullptr));
  ASSERT_FALSE(big.has_value());
  EXPECT_EQ(big.error().code, ErrorCode::kUnavailable);
  auto garbage = run(upstream->call("garbage", nullptr, nullptr));
  ASSERT_FALSE(garbage.has_value());
  EXPECT_NE(garbage.error().message.find("not JSON"), std::string::npos);
  // And it goes on.
  EXPECT_TRUE(run(upstream->call("echo", Json{{"text", "still"}}, nullptr)).has_value());
}

TEST_F(UpstreamTest, AnUnreachableServerIsAClearError) {
  UpstreamOptions o = upstream->options();
  o.url = "http://127.0.0.1:1/mcp";
  Upstream nowhere(o, *clients, clock);
  auto tools = run(nowhere.tools());
  ASSERT_FALSE(tools.has_value());
  EXPECT_EQ(tools.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(tools.error().message.find("could not be reached"), std::string::npos);
}

// A credential set through the API wins over the configuration's until it is taken back; the
// caller's identity goes in the server's caller header, only in calls.
TEST_F(UpstreamTest, AnApiCredentialWinsAndTheCallerIsNamedInItsHeader) {
  UpstreamOptions o = upstream->options();
  o.caller_header = "X-Caller";
  Upstream u(o, *clients, clock);
  EXPECT_EQ(u.credentialSource(), "config");
  u.setCredential("set-through-the-api");
  EXPECT_EQ(u.credentialSource(), "api");
  ASSERT_TRUE(run(u.call("echo", Json{{"text", "a"}}, nullptr, "user dana")).has_value());
  {
    std::lock_guard lock(fake.mu);
    EXPECT_EQ(fake.seen_authorization, "Bearer set-through-the-api");
    EXPECT_EQ(fake.seen_caller, "user dana");
  }
  u.setCredential(std::nullopt);
  EXPECT_EQ(u.credentialSource(), "config");
  ASSERT_TRUE(run(u.call("echo", Json{{"text", "b"}}, nullptr)).has_value());
  {
    std::lock_guard lock(fake.mu);
    EXPECT_EQ(fake.seen_authorization, "Bearer upstream-secret");
    EXPECT_EQ(fake.seen_caller, "");
  }
  UpstreamOptions bare = o;
  bare.bearer.clear();
  EXPECT_EQ(Upstream(bare, *clients, clock).credentialSource(), "none");
}

}  // namespace
}  // namespace purser::mcp
