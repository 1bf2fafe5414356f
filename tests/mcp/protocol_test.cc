// The MCP wire: messages parsed from hostile bodies into requests, notifications and responses
// or the JSON-RPC error to answer; version negotiation; qualified tool names; allow-lists and
// their containment; answers read from JSON or server-sent events.
#include "mcp/protocol.h"

#include <gtest/gtest.h>

namespace purser::mcp {
namespace {

int codeOf(const Parsed& p) { return p.error["error"]["code"].get<int>(); }

TEST(McpProtocolTest, RequestsNotificationsAndResponsesAreTold) {
  Parsed r = parseMessage(R"({"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}})", 64);
  ASSERT_TRUE(r.message.has_value());
  EXPECT_EQ(r.message->kind, Message::Kind::kRequest);
  EXPECT_EQ(r.message->id, 7);
  EXPECT_EQ(r.message->method, "tools/list");
  Parsed n = parseMessage(R"({"jsonrpc":"2.0","method":"notifications/initialized"})", 64);
  ASSERT_TRUE(n.message.has_value());
  EXPECT_EQ(n.message->kind, Message::Kind::kNotification);
  EXPECT_TRUE(n.message->params.is_null());
  Parsed s = parseMessage(R"({"jsonrpc":"2.0","id":"a","result":{}})", 64);
  ASSERT_TRUE(s.message.has_value());
  EXPECT_EQ(s.message->kind, Message::Kind::kResponse);
  EXPECT_EQ(parseMessage(R"({"jsonrpc":"2.0","id":"x-1","method":"ping"})", 64).message->id, "x-1");
}

TEST(McpProtocolTest, BadMessagesGetTheErrorTheyDeserve) {
  EXPECT_EQ(codeOf(parseMessage("{not json", 64)), kParseError);
  EXPECT_EQ(codeOf(parseMessage("\"\xff\"", 64)), kParseError);
  EXPECT_EQ(codeOf(parseMessage(std::string(100, '[') + std::string(100, ']'), 64)), kParseError);
  EXPECT_EQ(codeOf(parseMessage(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])", 64)),
            kInvalidRequest);
  EXPECT_EQ(codeOf(parseMessage("42", 64)), kInvalidRequest);
  EXPECT_EQ(codeOf(parseMessage(R"({"id":1,"method":"ping"})", 64)), kInvalidRequest);
  EXPECT_EQ(codeOf(parseMessage(R"({"jsonrpc":"1.0","id":1,"method":"ping"})", 64)),
            kInvalidRequest);
  EXPECT_EQ(codeOf(parseMessage(R"({"jsonrpc":"2.0","id":{"a":1},"method":"ping"})", 64)),
            kInvalidRequest);
  EXPECT_EQ(codeOf(parseMessage(R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})", 64)),
            kInvalidRequest);
  EXPECT_EQ(codeOf(parseMessage(R"({"jsonrpc":"2.0","id":1})", 64)), kInvalidRequest);
  EXPECT_EQ(codeOf(parseMessage(R"({"jsonrpc":"2.0","id":1,"method":""})", 64)), kInvalidRequest);
  EXPECT_EQ(codeOf(parseMessage(R"({"jsonrpc":"2.0","id":1,"method":7})", 64)), kInvalidRequest);
  Parsed bad_params = parseMessage(R"({"jsonrpc":"2.0","id":3,"method":"ping","params":[1]})", 64);
  EXPECT_EQ(codeOf(bad_params), kInvalidParams);
  EXPECT_EQ(bad_params.error["id"], 3);  // the id is answered when it could be read
  EXPECT_EQ(bad_params.error["jsonrpc"], "2.0");
}

TEST(McpProtocolTest, VersionsAreNegotiatedAsTheSpecificationSays) {
  EXPECT_EQ(negotiateVersion("2025-06-18"), "2025-06-18");
  EXPECT_EQ(negotiateVersion("2025-11-25"), "2025-11-25");
  EXPECT_EQ(negotiateVersion("2024-01-01"), "2025-11-25");
  EXPECT_EQ(negotiateVersion(""), "2025-11-25");
}

TEST(McpProtocolTest, QualifiedNamesSplitAtTheFirstDot) {
  EXPECT_EQ(qualify("demo", "echo"), "demo.echo");
  EXPECT_EQ(split("demo.echo"), (std::pair<std::string, std::string>{"demo", "echo"}));
  // A tool whose own name has dots keeps them: server names never do.
  EXPECT_EQ(split("files.admin.tools.list"),
            (std::pair<std::string, std::string>{"files", "admin.tools.list"}));
  EXPECT_EQ(split("echo"), std::nullopt);
  EXPECT_EQ(split(".echo"), std::nullopt);
  EXPECT_EQ(split("demo."), std::nullopt);
  EXPECT_TRUE(validServerName("demo"));
  EXPECT_TRUE(validServerName("search-2"));
  for (const char* bad : {"", "Demo", "2fa", "de.mo", "de_mo", "de/mo", "d\xc3\xa9mo"}) {
    EXPECT_FALSE(validServerName(bad)) << bad;
  }
  EXPECT_FALSE(validServerName(std::string(64, 'a')));
}

TEST(McpProtocolTest, AllowListsAllowWhatTheyNameAndNothingElse) {
  const std::vector<std::string> list = {"demo/echo", "search/*"};
  EXPECT_TRUE(allows(list, "demo", "echo"));
  EXPECT_FALSE(allows(list, "demo", "secret"));
  EXPECT_FALSE(allows(list, "demo", "echo2"));
  EXPECT_TRUE(allows(list, "search", "web"));
  EXPECT_FALSE(allows(list, "searcher", "web"));
  EXPECT_FALSE(allows({}, "demo", "echo"));  // deny by default
  EXPECT_TRUE(allows({"*"}, "anything", "at-all"));
  for (const char* good : {"*", "demo/*", "demo/echo", "demo/admin.tools.list", "a-1/x_y"}) {
    EXPECT_TRUE(validToolPattern(good)) << good;
  }
  for (const char* bad : {"", "demo", "demo/", "/echo", "Demo/echo", "demo/ec ho", "demo/e*",
                          "demo/echo/x", "*/echo"}) {
    EXPECT_FALSE(validToolPattern(bad)) << bad;
  }
  EXPECT_FALSE(validToolPattern("demo/" + std::string(129, 'x')));
}

TEST(McpProtocolTest, AKeyMadeByAKeyStaysWithinItsTools) {
  const std::vector<std::string> parent = {"demo/echo", "search/*"};
  EXPECT_TRUE(within({"demo/echo"}, parent));
  EXPECT_TRUE(within({"search/web", "search/*"}, parent));
  EXPECT_TRUE(within({}, parent));
  EXPECT_FALSE(within({"demo/*"}, parent));
  EXPECT_FALSE(within({"demo/secret"}, parent));
  EXPECT_FALSE(within({"*"}, parent));
  EXPECT_TRUE(within({"*"}, {"*"}));
  EXPECT_TRUE(within({"demo/*", "x/y"}, {"*"}));
  EXPECT_FALSE(within({"demo/echo"}, {}));
}

TEST(McpProtocolTest, TheAnswerIsFoundInJsonOrInServerSentEvents) {
  auto plain =
      responseFrom("application/json", R"({"jsonrpc":"2.0","id":4,"result":{"a":1}})", Json(4), 64);
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ((*plain)["result"]["a"], 1);
  const std::string events =
      "id: 1\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\","
      "\"params\":{\"progress\":1}}\r\n\r\n"
      "event: message\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"id\":4,\"result\":{\"b\":2}}\n\n";
  auto streamed = responseFrom("text/event-stream; charset=utf-8", events, Json(4), 64);
  ASSERT_TRUE(streamed.has_value()) << streamed.error().message;
  EXPECT_EQ((*streamed)["result"]["b"], 2);
  // The last event needs no blank line after it.
  auto unterminated = responseFrom(
      "text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"id\":\"q\",\"error\":{\"code\":1}}",
      Json("q"), 64);
  ASSERT_TRUE(unterminated.has_value());
  EXPECT_EQ((*unterminated)["error"]["code"], 1);
  // Another id, garbage, nothing, a notification alone: no answer.
  EXPECT_FALSE(
      responseFrom("application/json", R"({"jsonrpc":"2.0","id":5,"result":{}})", Json(4), 64)
          .has_value());
  EXPECT_FALSE(responseFrom("application/json", "<html>oops</html>", Json(4), 64).has_value());
  EXPECT_FALSE(responseFrom("application/json", "", Json(4), 64).has_value());
  EXPECT_FALSE(responseFrom("text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n",
                            Json(4), 64)
                   .has_value());
  EXPECT_FALSE(responseFrom("text/event-stream", "data: [[[[[[[[[[\n\n", Json(4), 64).has_value());
}

}  // namespace
}  // namespace purser::mcp
