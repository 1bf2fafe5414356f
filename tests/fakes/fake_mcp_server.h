// A test double of an MCP server over Streamable HTTP on loopback, keeping sessions as the
// transport says (Mcp-Session-Id given at initialize, 404 for one it does not know): two pages of
// tools, and tools that show each way an upstream can answer — `echo` (its text back), `events`
// (the answer as server-sent events after a progress notification), `big` (2 MiB of text),
// `garbage` (not JSON), `slow` (hangs until `release`), any other name (a JSON-RPC error); and
// two prompts, `greet` and `private`.
// `forget()` plays a restart.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <mutex>
#include <string>

#include "common/json.h"
#include "fakes/test_server.h"

namespace purser::testing {

class FakeMcpServer {
 public:
  FakeMcpServer() {
    EXPECT_TRUE(
        server.router
            .addAsync(http::Method::kPost, "/mcp", [this](http::Request& r) { return handle(r); })
            .has_value());
    server.start();
    url = server.url("/mcp");
  }

  boost::asio::awaitable<http::Response> handle(http::Request& r) {
    const Json m = parseJsonOrDiscarded(r.body);
    const std::string method = m.value("method", "");
    const Json id = m.contains("id") ? m["id"] : Json(nullptr);
    std::string session(r.headers.get("mcp-session-id").value_or(""));
    {
      std::lock_guard lock(mu);
      seen_authorization = std::string(r.headers.get("authorization").value_or(""));
      seen_version = std::string(r.headers.get("mcp-protocol-version").value_or(""));
      seen_caller = std::string(r.headers.get("x-caller").value_or(""));
      if (method == "initialize") {
        ++initializations;
        current = "s-" + std::to_string(initializations);
        http::Response out = http::Response::json(
            200, writeJson(Json{{"jsonrpc", "2.0"},
                                {"id", id},
                                {"result",
                                 {{"protocolVersion", "2025-06-18"},
                                  {"capabilities", {{"tools", Json::object()}}},
                                  {"serverInfo", {{"name", "fake"}, {"version", "1"}}}}}}));
        out.headers.set("Mcp-Session-Id", current);
        co_return out;
      }
      if (session != current) co_return http::Response::json(404, "{}");
      if (method == "notifications/initialized") {
        ++handshakes;
        co_return http::Response::text(202, "");
      }
    }
    const auto answer = [&](Json result) {
      return http::Response::json(
          200, writeJson(Json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}}));
    };
    if (method == "tools/list") {
      ++lists;
      const Json& params = m["params"];
      if (params.contains("cursor")) {
        co_return answer({{"tools", {{{"name", "slow"}, {"inputSchema", {{"type", "object"}}}}}}});
      }
      co_return answer({{"tools",
                         {{{"name", "echo"}, {"inputSchema", {{"type", "object"}}}},
                          {{"name", "big"}, {"inputSchema", {{"type", "object"}}}}}},
                        {"nextCursor", "page-2"}});
    }
    if (method == "tools/call") {
      const std::string tool = m["params"].value("name", "");
      if (tool == "echo") {
        co_return answer(
            {{"content",
              {{{"type", "text"}, {"text", m["params"]["arguments"].value("text", "")}}}}});
      }
      if (tool == "events") {
        http::Response out = http::Response::text(
            200,
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n"
            "event: message\ndata: " +
                writeJson(Json{{"jsonrpc", "2.0"},
                               {"id", id},
                               {"result", {{"content", {{{"type", "text"}, {"text", "sse"}}}}}}}) +
                "\n\n",
            "text/event-stream");
        co_return out;
      }
      if (tool == "big") {
        co_return answer({{"content", {{{"type", "text"}, {"text", std::string(2 << 20, 'x')}}}}});
      }
      if (tool == "garbage") co_return http::Response::json(200, "{\"jsonrpc\":\"2.0\",\"oops\"");
      if (tool == "slow") {
        // Hangs until the test lets it go (after Purser has given up on it).
        boost::asio::steady_timer t(co_await boost::asio::this_coro::executor);
        while (!release.load()) {
          t.expires_after(std::chrono::milliseconds(20));
          co_await t.async_wait(boost::asio::use_awaitable);
        }
        co_return answer({{"content", Json::array()}});
      }
      co_return http::Response::json(
          200, writeJson(Json{{"jsonrpc", "2.0"},
                              {"id", id},
                              {"error", {{"code", -32602}, {"message", "Unknown tool"}}}}));
    }
    if (method == "prompts/list") {
      co_return answer({{"prompts", {{{"name", "greet"}}, {{"name", "private"}}}}});
    }
    if (method == "prompts/get") {
      const std::string prompt = m["params"].value("name", "");
      if (prompt != "greet" && prompt != "private") {
        co_return http::Response::json(
            200, writeJson(Json{{"jsonrpc", "2.0"},
                                {"id", id},
                                {"error", {{"code", -32602}, {"message", "Unknown prompt"}}}}));
      }
      const std::string who = m["params"].contains("arguments")
                                  ? m["params"]["arguments"].value("who", "")
                                  : std::string();
      co_return answer(
          {{"messages",
            {{{"role", "user"}, {"content", {{"type", "text"}, {"text", "hello " + who}}}}}}});
    }
    co_return http::Response::json(404, "{}");
  }

  // A restart: the session it gave is forgotten.
  void forget() {
    std::lock_guard lock(mu);
    current = "gone";
  }

  testing::TestServer server;
  std::string url;
  std::mutex mu;
  std::string current;             // guarded by mu
  std::string seen_authorization;  // guarded by mu
  std::string seen_version;        // guarded by mu
  std::string seen_caller;         // guarded by mu: the X-Caller header
  int initializations = 0;         // guarded by mu
  int handshakes = 0;              // guarded by mu
  std::atomic<int> lists{0};
  std::atomic<bool> release{false};
};

}  // namespace purser::testing
