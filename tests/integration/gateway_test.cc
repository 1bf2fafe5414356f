// The model API end to end: `purser serve` in front of `purser sim llm` processes on loopback.
#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <sys/stat.h>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "common/money.h"
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

constexpr const char* kAdminKey = "gateway-test-admin-key-0123456789";

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;
  json json_body() const { return json::parse(body, nullptr, false); }
};

std::string request(const std::string& method, const std::string& path,
                    const std::vector<std::string>& headers, const std::string& body) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: t\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  return req + "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

Reply call(uint16_t port, const std::string& method, const std::string& path,
           const std::vector<std::string>& headers, const std::string& body = "") {
  RawClient c(port);
  if (!c.connected() || !c.send(request(method, path, headers, body))) return {};
  auto r = c.readResponse();
  if (!r) return {};
  return {r->status, r->headers, r->body};
}

class GatewayTest : public ::testing::Test {
 protected:
  // Starts a simulated model server; returns its base URL.
  std::string sim(std::vector<std::string> flags) {
    std::vector<std::string> argv = {PURSER_BINARY, "sim", "llm", "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    sims.push_back(std::make_unique<Process>(argv));
    auto line = sims.back()->waitForStdout("listening on ");
    EXPECT_TRUE(line.has_value()) << sims.back()->err();
    return line ? line->substr(line->find("http")) : "";
  }

  void serve(const std::string& config) {
    testing::Served served = testing::startServe(PURSER_BINARY, dir, config, kAdminKey);
    server = std::move(served.process);
    ASSERT_NE(served.port, 0) << server->err();
    port = served.port;
    const testing::Member m = testing::seedMember(port, kAdminKey);
    tenant = m.tenant;
    team = m.team;
    user = m.user;
    key = m.key;
  }

  void TearDown() override {
    if (server) {
      server->signal(SIGTERM);
      EXPECT_EQ(server->wait(), 0) << server->err();
    }
  }

  Reply chat(const json& body, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> headers = {"Authorization: Bearer " + key};
    headers.insert(headers.end(), extra.begin(), extra.end());
    return call(port, "POST", "/v1/chat/completions", headers, body.dump());
  }

  std::vector<json> usage() {
    Reply r = call(port, "GET", "/api/v1/usage?scope=user:" + user,
                   {std::string("Authorization: Bearer ") + kAdminKey});
    const json all = r.json_body();
    std::vector<json> out;
    if (all.is_object()) {
      for (const auto& e : all["data"]) out.push_back(e);
    }
    return out;
  }

  json walletOf(const std::string& scope) {
    Reply r = call(port, "GET", "/api/v1/wallets?scope=" + scope,
                   {std::string("Authorization: Bearer ") + kAdminKey});
    const json all = r.json_body();
    return all["data"][0];
  }

  testing::TempDir dir;
  std::vector<std::unique_ptr<Process>> sims;
  std::unique_ptr<Process> server;
  uint16_t port = 0;
  std::string tenant, team, user, key;
};

const json kHello = {{"model", "chat"},
                     {"messages", {{{"role", "user"}, {"content", "hello there"}}}},
                     {"max_tokens", 5}};

std::string twoTargets(const std::string& first_url, const std::string& second_url,
                       const std::string& first_extra = "") {
  return fmt::format(
      "providers:\n"
      "  - {{name: first, kind: openai, base_url: {}/v1{}}}\n"
      "  - {{name: second, kind: openai, base_url: {}/v1}}\n"
      "routes:\n"
      "  - {{model: chat, retries: 0, targets: [{{provider: first, model: m1}}, {{provider: "
      "second, "
      "model: m2}}]}}\n"
      "prices:\n"
      "  - {{provider: second, model: m2, input_per_mtok: \"1\", output_per_mtok: \"2\"}}\n",
      first_url, first_extra, second_url);
}

TEST_F(GatewayTest, FallsBackWhenTheFirstUpstreamAnswers500) {
  serve(twoTargets(sim({"--fail-rate", "1", "--ttft-ms", "0"}), sim({"--ttft-ms", "0"})));
  Reply r = chat(kHello);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json_body()["model"], "chat") << "the alias, never the upstream's name";
  EXPECT_FALSE(r.headers["x-purser-overhead-us"].empty());
  const auto events = usage();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["provider"], "second");
  EXPECT_EQ(events[0]["model"], "m2");
  EXPECT_EQ(events[0]["estimated"], false);
  EXPECT_EQ(events[0]["tokens"]["output"], 5);
}

TEST_F(GatewayTest, FallsBackWhenTheFirstUpstreamRefusesConnections) {
  serve(twoTargets("http://127.0.0.1:1", sim({"--ttft-ms", "0"})));
  Reply r = chat(kHello);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(usage().at(0)["model"], "m2");
}

TEST_F(GatewayTest, FallsBackWhenTheFirstUpstreamTimesOut) {
  const std::string slow = sim({"--ttft-ms", "30000"});
  serve(twoTargets(slow, sim({"--ttft-ms", "0"}), ", timeout: 300ms"));
  Reply r = chat(kHello);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(usage().at(0)["model"], "m2");
}

TEST_F(GatewayTest, WhenEveryTargetFailsTheClientGets502AndNothingIsCharged) {
  serve(twoTargets(sim({"--fail-rate", "1", "--ttft-ms", "0"}),
                   sim({"--fail-rate", "1", "--ttft-ms", "0"})));
  Reply r = chat(kHello);
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(r.json_body()["error"]["type"], "server_error");
  EXPECT_TRUE(usage().empty());
}

TEST_F(GatewayTest, MetricsCountRequestsTokensCostAndUpstreamErrorsByRouteAndTarget) {
  // The first target always fails (500), the second answers: one request, one upstream error.
  serve(twoTargets(sim({"--fail-rate", "1", "--ttft-ms", "0"}), sim({"--ttft-ms", "0"})));
  ASSERT_EQ(
      call(port, "POST", "/api/v1/wallets", {std::string("Authorization: Bearer ") + kAdminKey},
           json{{"scope", {{"kind", "user"}, {"id", user}}}, {"limit", "1.00"}}.dump())
          .status,
      201);
  ASSERT_EQ(chat(kHello).status, 200);
  json unknown = kHello;
  unknown["model"] = "nope";
  ASSERT_EQ(chat(unknown).status, 404);
  const std::string m = call(port, "GET", "/metrics", {}).body;
  for (const std::string line :
       {"purser_gateway_requests_total{route=\"chat\",target=\"second\",code=\"200\"} 1",
        "purser_gateway_requests_total{route=\"\",target=\"\",code=\"404\"} 1",
        "purser_gateway_upstream_errors_total{target=\"first\",kind=\"5xx\"} 1",
        "purser_gateway_tokens_total{route=\"chat\",target=\"second\",kind=\"output\"} 5",
        "purser_gateway_ttft_seconds_count{route=\"chat\",target=\"second\"} 1",
        "purser_gateway_upstream_latency_seconds_count{route=\"chat\",target=\"first\"} 1",
        "purser_wallet_spent_ratio{scope=\"user:dana\",tenant=\"acme\"",
        "purser_ledger_reservations_outstanding 0"}) {
    EXPECT_NE(m.find(line), std::string::npos) << line << "\n" << m;
  }
  EXPECT_NE(m.find("purser_gateway_cost_nanos_total{route=\"chat\",target=\"second\"}"),
            std::string::npos);
}

TEST_F(GatewayTest, ACutMidStreamEndsWithAnErrorEventAndAnEstimatedUsageEvent) {
  const std::string cut = sim({"--cut-rate", "1", "--ttft-ms", "0"});
  serve(fmt::format(
      "providers:\n  - {{name: p, kind: openai, base_url: {}/v1}}\n"
      "routes:\n  - {{model: chat, targets: [{{provider: p, model: m}}]}}\n"
      "prices:\n  - {{provider: p, model: m, input_per_mtok: \"1\", output_per_mtok: \"1\"}}\n",
      cut));
  json body = kHello;
  body["stream"] = true;
  body["max_tokens"] = 20;
  RawClient c(port);
  ASSERT_TRUE(c.send(
      request("POST", "/v1/chat/completions", {"Authorization: Bearer " + key}, body.dump())));
  // The relay is chunked; read until the connection ends.
  EXPECT_TRUE(c.readUntil("upstream_disconnected"));
  EXPECT_TRUE(c.waitForClose());
  const auto events = usage();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["estimated"], true);
  EXPECT_NE(events[0]["cost"], "0.00") << "a cut stream is never recorded as zero";
}

// One alias may be served by both kinds of provider: a chat request falls back from a failing
// OpenAI-kind upstream to an Anthropic-kind one (and the reverse for /v1/messages), translated
// both ways, streamed or not, and metered from the upstream's own usage.
TEST_F(GatewayTest, FallbackCrossesApiKindsWithTranslation) {
  const std::string broken_openai = sim({"--fail-rate", "1", "--ttft-ms", "0"});
  const std::string anthropic = sim({"--ttft-ms", "0", "--api-keys", "sk-ant"});
  const std::string openai = sim({"--ttft-ms", "0", "--api-keys", "sk-oai"});
  serve(fmt::format(
      "providers:\n"
      "  - {{name: broken, kind: openai, base_url: {}/v1}}\n"
      "  - {{name: claude, kind: anthropic, base_url: {}, api_keys: [sk-ant]}}\n"
      "  - {{name: gpt, kind: openai, base_url: {}/v1, api_keys: [sk-oai]}}\n"
      "routes:\n"
      "  - {{model: chat, retries: 0, targets: [{{provider: broken, model: m1}}, "
      "{{provider: claude, model: c1}}]}}\n"
      "  - {{model: claude-alias, targets: [{{provider: gpt, model: g1}}]}}\n"
      "  - {{model: via-claude, targets: [{{provider: claude, model: c1}}]}}\n"
      "prices:\n"
      "  - {{provider: claude, model: c1, input_per_mtok: \"1\", output_per_mtok: \"2\"}}\n"
      "  - {{provider: gpt, model: g1, input_per_mtok: \"1\", output_per_mtok: \"2\"}}\n",
      broken_openai, anthropic, openai));
  ASSERT_EQ(
      call(port, "POST", "/api/v1/wallets", {std::string("Authorization: Bearer ") + kAdminKey},
           json{{"scope", {{"kind", "user"}, {"id", user}}}, {"limit", "100"}}.dump())
          .status,
      201);

  // Chat, whole: an OpenAI chat.completion made from the Anthropic answer.
  json body = {{"model", "chat"},
               {"messages",
                {{{"role", "system"}, {"content", "be brief"}},
                 {{"role", "user"}, {"content", "hello there"}}}},
               {"max_tokens", 6}};
  Reply whole = chat(body);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json completion = whole.json_body();
  EXPECT_EQ(completion["object"], "chat.completion");
  EXPECT_EQ(completion["choices"][0]["message"]["role"], "assistant");
  EXPECT_FALSE(completion["choices"][0]["message"]["content"].get<std::string>().empty());
  EXPECT_EQ(completion["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(completion["usage"]["completion_tokens"], 6);
  EXPECT_GT(completion["usage"]["prompt_tokens"].get<int64_t>(), 0);

  // Chat, streamed, with the usage chunk asked for.
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  Reply streamed = chat(body);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_NE(streamed.body.find("\"chat.completion.chunk\""), std::string::npos);
  EXPECT_NE(streamed.body.find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_NE(streamed.body.find("\"completion_tokens\":6"), std::string::npos);
  EXPECT_EQ(streamed.body.find("message_start"), std::string::npos) << "no Anthropic events leak";
  EXPECT_EQ(streamed.body.rfind("data: [DONE]\n\n"), streamed.body.size() - 14);

  // Messages, whole and streamed, served by an OpenAI-kind upstream.
  const json msg = {{"model", "claude-alias"},
                    {"max_tokens", 4},
                    {"system", "be brief"},
                    {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  const std::vector<std::string> anthropic_headers = {"x-api-key: " + key,
                                                      "anthropic-version: 2023-06-01"};
  Reply message = call(port, "POST", "/v1/messages", anthropic_headers, msg.dump());
  ASSERT_EQ(message.status, 200) << message.body;
  const json answer = message.json_body();
  EXPECT_EQ(answer["type"], "message");
  EXPECT_EQ(answer["role"], "assistant");
  EXPECT_EQ(answer["content"][0]["type"], "text");
  EXPECT_EQ(answer["stop_reason"], "max_tokens");
  EXPECT_EQ(answer["usage"]["output_tokens"], 4);
  json stream_msg = msg;
  stream_msg["stream"] = true;
  Reply message_stream = call(port, "POST", "/v1/messages", anthropic_headers, stream_msg.dump());
  ASSERT_EQ(message_stream.status, 200) << message_stream.body;
  for (const char* event :
       {"event: message_start", "event: content_block_start", "event: content_block_delta",
        "event: content_block_stop", "event: message_delta", "event: message_stop"}) {
    EXPECT_NE(message_stream.body.find(event), std::string::npos) << event;
  }
  EXPECT_EQ(message_stream.body.find("[DONE]"), std::string::npos) << "no OpenAI events leak";
  EXPECT_NE(message_stream.body.find("\"stop_reason\":\"max_tokens\""), std::string::npos);

  // A request that cannot be translated is the client's error, and nothing is charged or held;
  // so is one the upstream refuses after translation (here: nothing left to send).
  const json odd = {{"model", "via-claude"},
                    {"max_tokens", 4},
                    {"messages", {{{"role", "wizard"}, {"content", "hi"}}}}};
  Reply untranslatable = chat(odd);
  EXPECT_EQ(untranslatable.status, 400) << untranslatable.body;
  EXPECT_EQ(untranslatable.json_body()["error"]["type"], "invalid_request_error");
  EXPECT_NE(untranslatable.body.find("wizard"), std::string::npos) << untranslatable.body;
  const json empty_text = {
      {"model", "via-claude"},
      {"max_tokens", 4},
      {"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", ""}}}}}}}};
  Reply refused = chat(empty_text);
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_TRUE(refused.json_body()["error"].contains("param")) << "in the client's (OpenAI) shape";
  EXPECT_EQ(walletOf("user:" + user)["reserved"], "0.00") << "nothing is held";

  // Every answer was metered from the upstream's own counts, by the provider that served it.
  const auto events = usage();
  ASSERT_EQ(events.size(), 4u);
  for (const auto& e : events) {
    EXPECT_EQ(e["estimated"], false) << e.dump();
    EXPECT_NE(e["provider"], "broken") << e.dump();
  }
}

TEST_F(GatewayTest, ErrorsHaveTheShapesTheSdksExpect) {
  const std::string up = sim({"--ttft-ms", "0"});
  serve(
      fmt::format("http: {{max_body_bytes: 4Ki}}\n"
                  "providers:\n  - {{name: p, kind: openai, base_url: {}/v1}}\n"
                  "routes:\n  - {{model: chat, targets: [{{provider: p, model: m}}]}}\n"
                  "  - {{model: other, targets: [{{provider: p, model: m}}]}}\n"
                  "  - {{model: capped, max_tokens: 3, targets: [{{provider: p, model: m}}]}}\n",
                  up));
  EXPECT_EQ(call(port, "POST", "/v1/chat/completions", {}, kHello.dump()).status, 401);
  Reply wrong = call(port, "POST", "/v1/chat/completions", {"Authorization: Bearer nope-nope-nope"},
                     kHello.dump());
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(wrong.json_body()["error"]["code"], "invalid_api_key");
  json unknown = kHello;
  unknown["model"] = "gpt-99";
  Reply nf = chat(unknown);
  EXPECT_EQ(nf.status, 404);
  EXPECT_EQ(nf.json_body()["error"]["code"], "model_not_found");
  Reply malformed = call(port, "POST", "/v1/chat/completions", {"Authorization: Bearer " + key},
                         "{\"model\": chat}");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_NE(malformed.json_body()["error"]["message"].get<std::string>().find("at byte"),
            std::string::npos);
  Reply no_messages = chat({{"model", "chat"}});
  EXPECT_EQ(no_messages.status, 400);
  EXPECT_EQ(no_messages.json_body()["error"]["param"], "messages");
  json not_bool = kHello;
  not_bool["stream"] = "yes";
  Reply bad_stream = chat(not_bool);
  EXPECT_EQ(bad_stream.status, 400);
  EXPECT_EQ(bad_stream.json_body()["error"]["param"], "stream");
  json negative = kHello;
  negative["max_tokens"] = -1;
  Reply bad_max = chat(negative);
  EXPECT_EQ(bad_max.status, 400);
  EXPECT_EQ(bad_max.json_body()["error"]["param"], "max_tokens");
  json huge = kHello;
  huge["messages"][0]["content"] = std::string(8000, 'x');
  EXPECT_EQ(chat(huge).status, 413);
  // A key limited to one model may not use another.
  Reply limited =
      call(port, "POST", "/api/v1/keys", {std::string("Authorization: Bearer ") + kAdminKey},
           json{{"owner", {{"kind", "user"}, {"id", user}}},
                {"name", "only-chat"},
                {"models", {"chat"}},
                {"rpm", 1}}
               .dump());
  const std::string only_chat = limited.json_body()["key"];
  json other = kHello;
  other["model"] = "other";
  Reply forbidden = call(port, "POST", "/v1/chat/completions",
                         {"Authorization: Bearer " + only_chat}, other.dump());
  EXPECT_EQ(forbidden.status, 403);
  Reply models = call(port, "GET", "/v1/models", {"Authorization: Bearer " + only_chat});
  ASSERT_EQ(models.json_body()["data"].size(), 1u) << "only what the key may use";
  EXPECT_EQ(models.json_body()["data"][0]["id"], "chat");
  // rpm 1: the second request is rate limited, with OpenAI's headers.
  EXPECT_EQ(call(port, "POST", "/v1/chat/completions", {"Authorization: Bearer " + only_chat},
                 kHello.dump())
                .status,
            200);
  Reply limited_reply = call(port, "POST", "/v1/chat/completions",
                             {"Authorization: Bearer " + only_chat}, kHello.dump());
  EXPECT_EQ(limited_reply.status, 429);
  EXPECT_EQ(limited_reply.json_body()["error"]["code"], "rate_limit_exceeded");
  EXPECT_EQ(limited_reply.headers["x-ratelimit-limit-requests"], "1");
  EXPECT_EQ(limited_reply.headers["x-ratelimit-remaining-requests"], "0");
  EXPECT_FALSE(limited_reply.headers["retry-after"].empty());
  // Nothing was charged for any refused request.
  EXPECT_EQ(usage().size(), 1u);
  // A route's max_tokens caps what a request may ask for, and fills it in when it asks nothing.
  json wants_more = kHello;
  wants_more["model"] = "capped";
  wants_more["max_tokens"] = 50;
  Reply capped = chat(wants_more);
  ASSERT_EQ(capped.status, 200) << capped.body;
  EXPECT_EQ(capped.json_body()["usage"]["completion_tokens"], 3);
  wants_more.erase("max_tokens");
  Reply unset = chat(wants_more);
  ASSERT_EQ(unset.status, 200) << unset.body;
  EXPECT_EQ(unset.json_body()["usage"]["completion_tokens"], 3);
}

// What a client reads when its key is refused: an unknown key says no more than that; a key that
// was valid says why it no longer is.
TEST_F(GatewayTest, RefusedKeysAreExplainedOnlyWhenTheyWereValid) {
  const std::string up = sim({"--ttft-ms", "0"});
  serve(
      fmt::format("providers:\n  - {{name: p, kind: openai, base_url: {}/v1}}\n"
                  "routes:\n  - {{model: chat, targets: [{{provider: p, model: m}}]}}\n",
                  up));
  const auto refused = [&](const std::string& path, const std::vector<std::string>& headers) {
    const bool models = path == "/v1/models";
    Reply r = call(port, models ? "GET" : "POST", path, headers, models ? "" : kHello.dump());
    EXPECT_EQ(r.status, 401) << path << ": " << r.body;
    return r.json_body()["error"]["message"];
  };
  EXPECT_EQ(refused("/v1/chat/completions", {}),
            "You didn't provide an API key. Send it as \"Authorization: Bearer KEY\".");
  EXPECT_EQ(refused("/v1/models", {}), "You didn't provide an API key.");
  for (const char* path : {"/v1/chat/completions", "/v1/models"}) {
    EXPECT_EQ(refused(path, {"Authorization: Bearer nope-nope-nope"}),
              "Incorrect API key provided.");
  }
  const std::string key_id = key.substr(3, 26);  // pk-<id>-<secret>
  Reply revoked = call(port, "DELETE", "/api/v1/keys/" + key_id,
                       {std::string("Authorization: Bearer ") + kAdminKey});
  ASSERT_EQ(revoked.status, 200) << revoked.body;
  EXPECT_EQ(refused("/v1/chat/completions", {"Authorization: Bearer " + key}),
            "Your API key is not valid: this API key was revoked.");
  EXPECT_EQ(refused("/v1/models", {"Authorization: Bearer " + key}), "Incorrect API key provided.");
}

TEST_F(GatewayTest, KeysRotateAndProviderKeysAreReplacedWithoutRestartOrFailure) {
  const std::string up = sim({"--ttft-ms", "0", "--api-keys", "sk-old,sk-new"});
  const std::string config = fmt::format(
      "providers:\n  - {{name: p, kind: openai, base_url: {}/v1, api_keys: [sk-old]}}\n"
      "routes:\n  - {{model: chat, targets: [{{provider: p, model: m}}]}}\n",
      up);
  serve(config);
  const std::vector<std::string> as_admin = {std::string("Authorization: Bearer ") + kAdminKey};
  std::mutex mu;
  std::string current = key;
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::thread traffic([&] {
    while (!stop) {
      std::string k;
      {
        std::lock_guard lock(mu);
        k = current;
      }
      Reply r =
          call(port, "POST", "/v1/chat/completions", {"Authorization: Bearer " + k}, kHello.dump());
      (r.status == 200 ? ok : failed)++;
    }
  });
  // Waits for `n` answered requests; not checked here (the counts are, at the end).
  const auto until = [&](int n) {
    testing::eventually([&] { return ok.load() >= n; }, {.attempts = 20'000,
                                                         .pause = std::chrono::milliseconds(1),
                                                         .what = "the requests answered"});
  };
  until(20);
  // The provider key is replaced through the API while requests run.
  Reply replaced = call(port, "PUT", "/api/v1/providers/p/keys", as_admin,
                        json{{"api_keys", {"sk-new"}}}.dump());
  ASSERT_EQ(replaced.status, 200) << replaced.body;
  until(40);
  // The client's key is rotated; the client moves to the new secret a little later.
  const std::string key_id = [&] {
    const json keys = call(port, "GET", "/api/v1/keys", as_admin).json_body();
    for (const auto& k : keys["data"]) {
      if (k["name"] == "k") return k["id"].get<std::string>();
    }
    return std::string();
  }();
  Reply rotated = call(port, "POST", "/api/v1/keys/" + key_id + "/rotate", as_admin, "{}");
  ASSERT_EQ(rotated.status, 200);
  until(60);
  {
    std::lock_guard lock(mu);
    current = rotated.json_body()["key"];
  }
  until(80);
  stop = true;
  traffic.join();
  EXPECT_EQ(failed.load(), 0) << "no request failed across both changes";
  EXPECT_GE(ok.load(), 80);
  // The listing never shows keys.
  Reply providers = call(port, "GET", "/api/v1/providers", as_admin);
  EXPECT_EQ(providers.json_body()["data"][0]["keys"], 1);
  EXPECT_EQ(providers.body.find("sk-"), std::string::npos);
  // A key the upstream refuses takes effect at once, and survives a restart (sealed in the store).
  ASSERT_EQ(
      call(port, "PUT", "/api/v1/providers/p/keys", as_admin, json{{"api_keys", {"sk-bad"}}}.dump())
          .status,
      200);
  Reply refused = call(port, "POST", "/v1/chat/completions", {"Authorization: Bearer " + current},
                       kHello.dump());
  EXPECT_EQ(refused.status, 502) << refused.body;
  server->signal(SIGTERM);
  ASSERT_EQ(server->wait(), 0);
  server = std::make_unique<Process>(std::vector<std::string>{
      PURSER_BINARY, "serve", "--config", dir.file("purser.yaml"), "--data", dir.file("var")});
  auto line = server->waitForStdout("purser: listening on ");
  ASSERT_TRUE(line.has_value()) << server->err();
  port = testing::portFromListeningLine(*line);
  EXPECT_EQ(call(port, "POST", "/v1/chat/completions", {"Authorization: Bearer " + current},
                 kHello.dump())
                .status,
            502)
      << "the stored key wins over the configuration's";
  ASSERT_EQ(
      call(port, "PUT", "/api/v1/providers/p/keys", as_admin, json{{"api_keys", {"sk-new"}}}.dump())
          .status,
      200);
  EXPECT_EQ(call(port, "POST", "/v1/chat/completions", {"Authorization: Bearer " + current},
                 kHello.dump())
                .status,
            200);
  EXPECT_EQ(
      call(port, "PUT", "/api/v1/providers/nope/keys", as_admin, json{{"api_keys", {"x"}}}.dump())
          .status,
      404);
  EXPECT_EQ(call(port, "GET", "/api/v1/providers", {"Authorization: Bearer " + current}).status,
            403);
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("var/master.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// Provider keys follow the configuration file on SIGHUP; keys set through the API win until
// they are dropped again; a broken file changes nothing.
TEST_F(GatewayTest, ProviderKeysFollowTheConfigurationOnSighup) {
  const std::string up = sim({"--ttft-ms", "0", "--api-keys", "sk-current"});
  const auto config = [&](const std::string& key_list) {
    return fmt::format(
        "providers:\n  - {{name: p, kind: openai, base_url: {}/v1, api_keys: [{}]}}\n"
        "routes:\n  - {{model: chat, retries: 0, targets: [{{provider: p, model: m}}]}}\n",
        up, key_list);
  };
  serve(config("sk-stale"));
  const std::vector<std::string> as_admin = {std::string("Authorization: Bearer ") + kAdminKey};
  EXPECT_EQ(chat(kHello).status, 502) << "the upstream refuses the stale key";

  testing::writeFile(dir.file("purser.yaml"),
                     "listen: 127.0.0.1:0\nthreads: 2\n" + config("sk-current"));
  server->signal(SIGHUP);
  ASSERT_TRUE(server->waitForStderr("keys of 1 provider(s) updated")) << server->err();
  EXPECT_EQ(chat(kHello).status, 200);

  // A file with an error is reported and changes nothing.
  testing::writeFile(dir.file("purser.yaml"), "listen: 127.0.0.1:0\nproviders: 7\n");
  server->signal(SIGHUP);
  ASSERT_TRUE(server->waitForStderr("the configuration was not applied")) << server->err();
  EXPECT_EQ(chat(kHello).status, 200);

  // Keys set through the API take precedence over the file until they are dropped.
  ASSERT_EQ(call(port, "PUT", "/api/v1/providers/p/keys", as_admin,
                 json{{"api_keys", {"sk-wrong"}}}.dump())
                .status,
            200);
  EXPECT_EQ(chat(kHello).status, 502);
  Reply listed = call(port, "GET", "/api/v1/providers", as_admin);
  EXPECT_EQ(listed.json_body()["data"][0]["keys_source"], "api");
  Reply restored = call(port, "DELETE", "/api/v1/providers/p/keys", as_admin);
  ASSERT_EQ(restored.status, 200) << restored.body;
  EXPECT_EQ(restored.json_body()["keys_source"], "config");
  EXPECT_EQ(chat(kHello).status, 200);
  EXPECT_EQ(call(port, "DELETE", "/api/v1/providers/p/keys", as_admin).status, 409);
  EXPECT_EQ(call(port, "DELETE", "/api/v1/providers/nope/keys", as_admin).status, 404);

  // Dropped keys stay dropped across a restart: the file's keys are used.
  server->signal(SIGTERM);
  ASSERT_EQ(server->wait(), 0) << server->err();
  testing::writeFile(dir.file("purser.yaml"),
                     "listen: 127.0.0.1:0\nthreads: 2\n" + config("sk-current"));
  server = std::make_unique<Process>(std::vector<std::string>{
      PURSER_BINARY, "serve", "--config", dir.file("purser.yaml"), "--data", dir.file("var")});
  auto line = server->waitForStdout("purser: listening on ");
  ASSERT_TRUE(line.has_value()) << server->err();
  port = testing::portFromListeningLine(*line);
  EXPECT_EQ(chat(kHello).status, 200);
  const json audit = call(port, "GET", "/api/v1/audit", as_admin).json_body();
  EXPECT_NE(audit.dump().find("provider.keys.restore"), std::string::npos);
  EXPECT_EQ(audit.dump().find("sk-"), std::string::npos) << "keys never reach the audit log";
}

// 200 streaming requests at once against a budget that fits only some of them: every one either
// runs or gets 429 budget_exceeded, and the wallet never goes over its limit.
TEST_F(GatewayTest, BudgetExhaustionUnder200ConcurrentStreamsNeverOverspends) {
  const std::string up = sim({"--ttft-ms", "200", "--tokens-per-s", "200"});
  serve(
      fmt::format("providers:\n  - {{name: p, kind: openai, base_url: {}/v1}}\n"
                  "routes:\n  - {{model: chat, targets: [{{provider: p, model: m}}]}}\n"
                  "prices:\n  - {{provider: p, model: m, input_per_mtok: \"100\", output_per_mtok: "
                  "\"1000\"}}\n",
                  up));
  ASSERT_EQ(
      call(port, "POST", "/api/v1/wallets", {std::string("Authorization: Bearer ") + kAdminKey},
           json{{"scope", {{"kind", "user"}, {"id", user}}},
                {"limit", "0.50"},
                {"alert_at", {25, 50}}}
               .dump())
          .status,
      201);
  json body = kHello;
  body["stream"] = true;
  body["max_tokens"] = 10;  // worst case about 0.014 each (the whole body's size counts as input)
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 200; ++i) {
    clients.push_back(std::make_unique<RawClient>(port));
    ASSERT_TRUE(clients.back()->send(
        request("POST", "/v1/chat/completions", {"Authorization: Bearer " + key}, body.dump())));
  }
  int ok = 0, refused = 0;
  for (auto& c : clients) {
    auto r = c->readResponse();
    ASSERT_TRUE(r.has_value());
    if (r->status == 200) {
      ++ok;
      EXPECT_NE(r->body.find("[DONE]"), std::string::npos);
    } else {
      ++refused;
      EXPECT_EQ(r->status, 429);
      EXPECT_EQ(json::parse(r->body)["error"]["code"], "budget_exceeded") << r->body;
      EXPECT_EQ(r->header("x-should-retry"), "false");
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(refused, 0);
  EXPECT_EQ(ok + refused, 200);
  const json w = walletOf("user:" + user);
  EXPECT_LE(*Money::parse(w["spent"].get<std::string>()), *Money::parse("0.50")) << w.dump();
  EXPECT_EQ(w["reserved"], "0.00") << "no reservation is left behind";
  EXPECT_EQ(static_cast<int>(usage().size()), ok);
  // The thresholds crossed by the traffic (25 % and 50 %) are in the audit log.
  const Reply audit =
      call(port, "GET", "/api/v1/audit", {std::string("Authorization: Bearer ") + kAdminKey});
  ASSERT_EQ(audit.status, 200);
  int alerts = 0;
  const json entries = json::parse(audit.body)["data"];
  for (const auto& entry : entries) {
    alerts += entry["action"] == "budget.alert" ? 1 : 0;
  }
  EXPECT_GE(alerts, 2) << audit.body;
  std::printf("200 concurrent streams: %d ran, %d refused; spent %s of 0.50\n", ok, refused,
              w["spent"].get<std::string>().c_str());
}

}  // namespace
}  // namespace purser
