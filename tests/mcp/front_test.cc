// The one MCP endpoint over two upstream servers that both have an `echo`: what a caller may use
// is all they see and all they can call (deny by default; a denied or unknown tool refused alike
// and never sent upstream), names stay the same when a server is added, every call is held
// before it runs and settled after (a refusal stops it), nothing is kept per caller, and an
// upstream that hangs, answers too much or garbage is an error for that call only.
#include "mcp/front.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <mutex>

#include "fakes/fake_mcp_server.h"
#include "mcp/protocol.h"

namespace purser::mcp {
namespace {

namespace asio = boost::asio;
using testing::FakeMcpServer;

// Records holds and settlements; refuses when told to.
class RecordingMeter final : public CallMeter {
 public:
  struct Held final : CallHold {
    Held(RecordingMeter& m, std::string what) : meter(m), what(std::move(what)) {}
    ~Held() override {
      if (!settled) {
        std::lock_guard lock(meter.mu);
        meter.released.push_back(what);
      }
    }
    void settle(const CallEnd& end) override {
      settled = true;
      std::lock_guard lock(meter.mu);
      meter.settled.push_back(what + (end.ok ? " ok" : " failed"));
    }
    RecordingMeter& meter;
    std::string what;
    bool settled = false;
  };

  asio::awaitable<Result<std::unique_ptr<CallHold>>> hold(const Caller& caller,
                                                          const std::string& server,
                                                          const std::string& tool) override {
    std::lock_guard lock(mu);
    if (refuse) {
      co_return fail(Error(ErrorCode::kResourceExhausted, "the wallet dana has no room"));
    }
    held.push_back(caller.principal + " " + server + "/" + tool);
    sessions.push_back(caller.session);
    co_return std::unique_ptr<CallHold>(std::make_unique<Held>(*this, server + "/" + tool));
  }

  std::mutex mu;
  bool refuse = false;                // guarded by mu
  std::vector<std::string> held;      // guarded by mu
  std::vector<std::string> sessions;  // guarded by mu: each hold's caller's session
  std::vector<std::string> settled;   // guarded by mu
  std::vector<std::string> released;  // guarded by mu
};

class FrontTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clients =
        std::make_unique<http::WorkerLocal<http::HttpClient>>(workers, [](asio::io_context& ctx) {
          return std::make_unique<http::HttpClient>(ctx, http::ClientOptions{});
        });
    workers.start();
    std::vector<std::shared_ptr<Upstream>> servers;
    for (const auto& [name, fake] : {std::pair{"demo", &demo}, std::pair{"search", &search}}) {
      UpstreamOptions o;
      o.name = name;
      o.url = fake->url;
      o.timeout = std::chrono::seconds(3);
      servers.push_back(std::make_shared<Upstream>(o, *clients, clock));
    }
    front = std::make_unique<Front>(servers, meter, clock);
  }
  void TearDown() override {
    demo.release = true;
    workers.stop();
    workers.join();
  }

  FrontReply post(const Caller& caller, const Json& message, http::Headers headers = {}) {
    return asio::co_spawn(workers.context(0), front->handle(caller, headers, writeJson(message)),
                          asio::use_future)
        .get();
  }
  Json rpc(const Caller& caller, const std::string& method, Json params = Json::object()) {
    FrontReply r =
        post(caller,
             {{"jsonrpc", "2.0"}, {"id", ++id}, {"method", method}, {"params", std::move(params)}});
    EXPECT_EQ(r.status, 200) << r.body;
    return parseJsonOrDiscarded(r.body);
  }
  std::vector<std::string> names(const Caller& caller) {
    std::vector<std::string> out;
    const Json listed = rpc(caller, "tools/list");
    for (const auto& t : listed["result"]["tools"]) out.push_back(t["name"]);
    return out;
  }

  FakeMcpServer demo, search;
  ManualClock clock;
  http::Workers workers{1};
  std::unique_ptr<http::WorkerLocal<http::HttpClient>> clients;
  RecordingMeter meter;
  std::unique_ptr<Front> front;
  int id = 0;
};

TEST_F(FrontTest, InitializeAndPingAnswerWithoutASession) {
  FrontReply init = post({}, {{"jsonrpc", "2.0"},
                              {"id", 1},
                              {"method", "initialize"},
                              {"params",
                               {{"protocolVersion", "2025-06-18"},
                                {"capabilities", Json::object()},
                                {"clientInfo", {{"name", "t"}, {"version", "1"}}}}}});
  ASSERT_EQ(init.status, 200);
  const Json j = parseJsonOrDiscarded(init.body);
  EXPECT_EQ(j["result"]["protocolVersion"], "2025-06-18");
  EXPECT_EQ(j["result"]["serverInfo"]["name"], "purser");
  EXPECT_TRUE(j["result"]["capabilities"].contains("tools"));
  EXPECT_EQ(post({}, {{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}).status, 202);
  EXPECT_EQ(rpc({}, "ping")["result"], Json::object());
  EXPECT_EQ(rpc({}, "resources/list")["error"]["code"], kMethodNotFound);
}

TEST_F(FrontTest, ACallerSeesAndCallsOnlyTheToolsTheyMayUse) {
  const Caller dana{"dana", {"demo/echo"}, ""};
  EXPECT_EQ(names(dana), std::vector<std::string>{"demo.echo"});
  const Caller lead{"leo", {"demo/*", "search/echo"}, ""};
  EXPECT_EQ(names(lead),
            (std::vector<std::string>{"demo.echo", "demo.big", "demo.slow", "search.echo"}));
  // Deny by default: no patterns, no tools, and the servers are not even asked.
  const int lists = demo.lists.load();
  EXPECT_TRUE(names(Caller{"nobody", {}, ""}).empty());
  EXPECT_EQ(demo.lists.load(), lists);

  Json echoed = rpc(dana, "tools/call", {{"name", "demo.echo"}, {"arguments", {{"text", "hi"}}}});
  EXPECT_EQ(echoed["result"]["content"][0]["text"], "hi");
  // A tool not allowed and one that does not exist get the same refusal; neither is sent.
  Json denied = rpc(dana, "tools/call", {{"name", "search.echo"}, {"arguments", Json::object()}});
  Json unknown = rpc(dana, "tools/call", {{"name", "nope.echo"}});
  EXPECT_EQ(denied["error"]["code"], kToolDenied);
  EXPECT_EQ(unknown["error"]["code"], kToolDenied);
  EXPECT_NE(denied["error"]["message"].get<std::string>().find("search.echo"), std::string::npos);
  EXPECT_EQ(rpc(dana, "tools/call", {{"name", "echo"}})["error"]["code"], kToolDenied);
  std::lock_guard lock(meter.mu);
  EXPECT_EQ(meter.held, std::vector<std::string>{"dana demo/echo"});
  EXPECT_EQ(meter.settled, std::vector<std::string>{"demo/echo ok"});
}

TEST_F(FrontTest, ARefusedHoldStopsTheCallAndEveryHoldIsSettled) {
  const Caller dana{"dana", {"demo/*"}, ""};
  {
    std::lock_guard lock(meter.mu);
    meter.refuse = true;
  }
  Json refused = rpc(dana, "tools/call", {{"name", "demo.echo"}, {"arguments", {{"text", "x"}}}});
  EXPECT_EQ(refused["error"]["code"], kRefused);
  EXPECT_EQ(refused["error"]["message"], "the wallet dana has no room");
  {
    std::lock_guard lock(meter.mu);
    meter.refuse = false;
  }
  // An upstream that fails: the call is settled as failed and the caller told which server.
  Json big = rpc(dana, "tools/call", {{"name", "demo.big"}});
  EXPECT_EQ(big["error"]["code"], kUpstreamFailed);
  EXPECT_NE(big["error"]["message"].get<std::string>().find("MCP server demo"), std::string::npos);
  Json garbage = rpc(dana, "tools/call", {{"name", "demo.garbage"}});
  EXPECT_EQ(garbage["error"]["code"], kUpstreamFailed);
  // The upstream's own error is passed on as it said it.
  EXPECT_EQ(rpc(dana, "tools/call", {{"name", "demo.nope"}})["error"]["code"], -32602);
  std::lock_guard lock(meter.mu);
  EXPECT_EQ(meter.settled, (std::vector<std::string>{"demo/big failed", "demo/garbage failed",
                                                     "demo/nope failed"}));
  EXPECT_TRUE(meter.released.empty());
}

TEST_F(FrontTest, HeadersThatDisagreeWithTheBodyAndUnknownVersionsAre400) {
  const Caller dana{"dana", {"demo/echo"}, ""};
  const Json call = {{"jsonrpc", "2.0"},
                     {"id", 9},
                     {"method", "tools/call"},
                     {"params", {{"name", "demo.echo"}, {"arguments", {{"text", "a"}}}}}};
  http::Headers agree;
  agree.add("Mcp-Method", "tools/call");
  agree.add("Mcp-Name", "demo.echo");
  agree.add("MCP-Protocol-Version", "2025-11-25");
  EXPECT_EQ(post(dana, call, agree).status, 200);
  http::Headers method;
  method.add("Mcp-Method", "tools/list");
  EXPECT_EQ(post(dana, call, method).status, 400);
  http::Headers name;
  name.add("Mcp-Name", "demo.secret");
  EXPECT_EQ(post(dana, call, name).status, 400);
  http::Headers version;
  version.add("MCP-Protocol-Version", "1999-01-01");
  EXPECT_EQ(post(dana, call, version).status, 400);
  FrontReply garbage =
      asio::co_spawn(workers.context(0), front->handle(dana, {}, "{\"jsonrpc\":"), asio::use_future)
          .get();
  EXPECT_EQ(garbage.status, 400);
  EXPECT_EQ(parseJsonOrDiscarded(garbage.body)["error"]["code"], kParseError);
  std::lock_guard lock(meter.mu);
  EXPECT_EQ(meter.held.size(), 1u);  // only the call whose headers agreed
}

TEST_F(FrontTest, AHangingUpstreamFailsItsOwnCallAndTheOtherServerGoesOn) {
  const Caller lead{"leo", {"demo/*", "search/*"}, ""};
  Json slow = rpc(lead, "tools/call", {{"name", "demo.slow"}});
  demo.release = true;
  EXPECT_EQ(slow["error"]["code"], kUpstreamFailed);
  Json other = rpc(lead, "tools/call", {{"name", "search.echo"}, {"arguments", {{"text", "on"}}}});
  EXPECT_EQ(other["result"]["content"][0]["text"], "on");
}

// A call names its agent run in the request's header (Caller::session) or else in its _meta;
// a _meta session that is no text, too long or has control characters is refused before any
// hold.
TEST_F(FrontTest, ACallsSessionComesFromTheHeaderOrItsMeta) {
  Caller caller{.principal = "dana", .tools = {"demo/echo"}};
  const auto call = [&](Json meta) {
    Json params = {{"name", "demo.echo"}, {"arguments", {{"text", "x"}}}};
    if (!meta.is_null()) params["_meta"] = std::move(meta);
    return rpc(caller, "tools/call", std::move(params));
  };
  EXPECT_TRUE(call(Json{{"purser/session", "run-7"}}).contains("result"));
  caller.session = "from-header";
  EXPECT_TRUE(call(Json{{"purser/session", "run-8"}}).contains("result"));
  caller.session.clear();
  EXPECT_TRUE(call(nullptr).contains("result"));
  for (const Json& bad : {Json{{"purser/session", 7}}, Json{{"purser/session", "a\nb"}},
                          Json{{"purser/session", std::string(300, 'r')}}}) {
    const Json refused = call(bad);
    ASSERT_TRUE(refused.contains("error")) << refused;
    EXPECT_EQ(refused["error"]["code"], kInvalidParams);
  }
  std::lock_guard lock(meter.mu);
  EXPECT_EQ(meter.sessions, (std::vector<std::string>{"run-7", "from-header", ""}));
}

// Prompts pass through with the tools' names and rules: listed as server.prompt for those the
// caller's patterns allow, fetched from their server, refused alike when denied or unknown; a
// resource is not served.
TEST_F(FrontTest, PromptsPassThroughUnderTheSameRules) {
  const Caller caller{.principal = "dana", .tools = {"demo/greet", "search/*"}};
  const Json listed = rpc(caller, "prompts/list");
  std::vector<std::string> names;
  for (const auto& p : listed["result"]["prompts"]) names.push_back(p["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"demo.greet", "search.greet", "search.private"}));
  const Json got =
      rpc(caller, "prompts/get", {{"name", "demo.greet"}, {"arguments", {{"who", "dana"}}}});
  ASSERT_TRUE(got.contains("result")) << got;
  EXPECT_EQ(got["result"]["messages"][0]["content"]["text"], "hello dana");
  for (const char* denied : {"demo.private", "nowhere.greet", "greet"}) {
    const Json refused = rpc(caller, "prompts/get", {{"name", denied}});
    ASSERT_TRUE(refused.contains("error")) << denied;
    EXPECT_EQ(refused["error"]["code"], kToolDenied) << denied;
  }
  const Json unknown = rpc(caller, "prompts/get", {{"name", "search.nope"}});
  ASSERT_TRUE(unknown.contains("error"));
  EXPECT_EQ(unknown["error"]["message"], "Unknown prompt");
  EXPECT_EQ(rpc(caller, "resources/list")["error"]["code"], kMethodNotFound);
  const Json nobody = rpc(Caller{.principal = "eve"}, "prompts/list");
  EXPECT_TRUE(nobody["result"]["prompts"].empty());
  std::lock_guard lock(meter.mu);
  EXPECT_TRUE(meter.held.empty()) << "prompts are not priced";
}

}  // namespace
}  // namespace purser::mcp
