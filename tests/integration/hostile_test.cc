// A hostile tenant against a real `purser serve`: invalid UTF-8 and deep nesting in every
// position of every endpoint (the endpoints are read from the server's own route table, so a new
// endpoint is covered the day it is added), and hostile upstreams behind the gateway. Nothing may
// answer 5xx for the client's own bytes, crash the server, or change anything.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "common/json.h"
#include "common/money.h"
#include "fakes/eventually.h"
#include "fakes/fake_upstream.h"
#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/temp_dir.h"

namespace purser {
namespace {

using nlohmann::json;
using testing::FakeUpstream;
using testing::Process;
using testing::RawClient;

constexpr const char* kAdminKey = "hostile-test-admin-key-0123456789";

// The purser under test: this build's, or PURSER_TEST_BINARY (to show a regression test fails
// against an older build).
std::string binary() {
  const char* other = std::getenv("PURSER_TEST_BINARY");
  return other != nullptr && *other != '\0' ? other : PURSER_BINARY;
}

struct Reply {
  int status = 0;
  std::string content_type;
  std::string body;
  json parsed() const { return json::parse(body, nullptr, false); }
};

Reply send(uint16_t port, const std::string& raw) {
  RawClient c(port);
  if (!c.connected() || !c.send(raw)) return {};
  auto r = c.readResponse();
  if (!r) return {};
  return {r->status, r->header("content-type"), r->body};
}

std::string request(const std::string& method, const std::string& target,
                    const std::vector<std::string>& headers, const std::string& body,
                    const std::string& content_type = "application/json") {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: t\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT") {
    req += "Content-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n";
  }
  return req + "\r\n" + body;
}

class HostileTest : public ::testing::Test {
 protected:
  void serve(const std::string& extra_config) {
    testing::writeFile(
        dir.file("purser.yaml"),
        fmt::format("listen: 127.0.0.1:0\nthreads: 2\n"
                    "fleet:\n  manifests: [{}/examples/fleet.yaml]\n  metering_interval: 1s\n"
                    "gpu_prices:\n  - {{flavor: h100, per_gpu_hour: \"2.00\"}}\n{}",
                    PURSER_SOURCE_DIR, extra_config));
    server = std::make_unique<Process>(
        std::vector<std::string>{binary(), "serve", "--config", dir.file("purser.yaml"), "--data",
                                 dir.file("var")},
        "", std::vector<std::string>{std::string("PURSER_ADMIN_KEY=") + kAdminKey});
    auto line = server->waitForStdout("purser: listening on ");
    ASSERT_TRUE(line.has_value()) << server->err();
    port = testing::portFromListeningLine(*line);
    tenant = admin("/api/v1/tenants", {{"name", "acme"}})["id"];
    team = admin("/api/v1/teams", {{"tenant", tenant}, {"name", "ml"}})["id"];
    user = admin("/api/v1/users", {{"tenant", tenant}, {"team", team}, {"name", "dana"}})["id"];
    key =
        admin("/api/v1/keys", {{"owner", {{"kind", "user"}, {"id", user}}}, {"name", "k"}})["key"];
  }

  json admin(const std::string& path, const json& body) {
    Reply r = call("POST", path, kAdminKey, body.dump());
    EXPECT_EQ(r.status, 201) << path << ": " << r.body;
    return r.parsed();
  }

  Reply call(const std::string& method, const std::string& target, const std::string& as,
             const std::string& body = "", const std::vector<std::string>& extra = {},
             const std::string& content_type = "application/json") {
    std::vector<std::string> headers = {"Authorization: Bearer " + as};
    headers.insert(headers.end(), extra.begin(), extra.end());
    return send(port, request(method, target, headers, body, content_type));
  }

  bool alive() { return call("GET", "/healthz", "").status == 200; }

  void TearDown() override {
    if (server) {
      server->signal(SIGTERM);
      EXPECT_EQ(server->wait(), 0) << server->err();
    }
  }

  // Every (method, pattern) the server routes, from its own metrics.
  std::vector<std::pair<std::string, std::string>> routes() {
    Reply m = call("GET", "/metrics", "");
    EXPECT_EQ(m.status, 200);
    std::set<std::pair<std::string, std::string>> out;
    std::regex line(R"re(purser_http_requests_total\{route="([^"]*)",method="([A-Z]+)")re");
    for (std::sregex_iterator it(m.body.begin(), m.body.end(), line), end; it != end; ++it) {
      if ((*it)[1] != "unmatched") out.emplace((*it)[2], (*it)[1]);
    }
    return {out.begin(), out.end()};
  }

  testing::TempDir dir;
  std::unique_ptr<Process> server;
  uint16_t port = 0;
  std::string tenant, team, user, key;
};

// A concrete path for a route pattern, with `value` in every parameter.
std::string fill(const std::string& pattern, const std::string& value) {
  std::string out;
  size_t i = 0;
  while (i < pattern.size()) {
    if (pattern[i] == '{') {
      out += value;
      i = pattern.find('}', i) + 1;
    } else if (pattern[i] == '*') {
      out += value;
      i = pattern.find('/', i);
      if (i == std::string::npos) break;
    } else {
      out += pattern[i++];
    }
  }
  return out;
}

// A body with every string field an endpoint reads, as JSON (or YAML for the fleet's).
struct BodyTemplate {
  std::string content_type = "application/json";
  std::string text;  // with "@@" where a hostile string goes
};

BodyTemplate bodyFor(const std::string& pattern) {
  if (pattern == "/api/v1/workloads") {
    return {"application/yaml",
            "name: w1\nqueue: research\nnamespace: ml\npod_sets:\n  - name: main\n    requests: "
            "{cpu: \"1\"}\n    node_selector: {zone: \"@@\"}\n"};
  }
  if (pattern == "/api/v1/fleet/manifests") {
    return {"application/yaml",
            "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: f1\n"
            "spec:\n  nodeLabels: {zone: \"@@\"}\n"};
  }
  if (pattern.starts_with("/v1/messages")) {
    return {
        "application/json",
        R"({"model":"@@","system":"@@","max_tokens":5,"messages":[{"role":"user","content":"@@"}],"metadata":{"session_id":"@@"}})"};
  }
  if (pattern.starts_with("/v1/")) {
    return {
        "application/json",
        R"({"model":"@@","prompt":"@@","input":"@@","messages":[{"role":"user","content":"@@"}],"metadata":{"session_id":"@@"}})"};
  }
  return {
      "application/json",
      R"({"name":"@@","tenant":"@@","team":"@@","email":"@@","role":"@@","id":"@@","model":"@@","provider":"@@","route":"@@","session_id":"@@","amount":"@@","cost":"@@","limit":"@@","period":"@@","timezone":"@@","lease":"@@","grace":"@@","expires_at":"@@","models":["@@"],"api_keys":["@@"],"owner":{"kind":"@@","id":"@@"},"scope":{"kind":"@@","id":"@@"}})"};
}

std::string replaceAll(std::string text, const std::string& what, const std::string& with) {
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + with.size())) {
    text.replace(at, what.size(), with);
  }
  return text;
}

// The checks every answer to hostile bytes must pass: never a 5xx, and JSON that is JSON.
void expectSane(const Reply& r, const std::string& what, int& tried, int& bad) {
  ++tried;
  const bool json_body = r.content_type.find("json") != std::string::npos;
  std::string why;
  if (r.status == 0) why = "no answer";
  if (r.status >= 500) why = "answered " + std::to_string(r.status);
  if (json_body && !isValidUtf8(r.body)) why = "invalid UTF-8 in the JSON answer";
  if (json_body && json::parse(r.body, nullptr, false).is_discarded())
    why = "a JSON answer that is not JSON";
  if (!why.empty()) {
    ++bad;
    ADD_FAILURE() << what << ": " << why << ": " << r.body.substr(0, 300);
  }
}

TEST_F(HostileTest, InvalidUtf8InEveryPositionOfEveryEndpointIsRefusedOrEscaped) {
  // Found by a hostile tenant: "x-purser-session: \xff" killed the server (SIGABRT); invalid
  // UTF-8 in paths, query parameters and gateway strings answered 500.
  serve("");
  const auto table = routes();
  ASSERT_GT(table.size(), 30u) << "the route table was not read";
  const std::string bad_raw =
      "a\xff\xfe"
      "b\xc3";                                    // raw bytes
  const std::string bad_escaped = "a%FF%FEb%C3";  // percent-encoded
  const std::vector<std::string> headers = {"x-purser-session", "x-api-key",  "anthropic-version",
                                            "anthropic-beta",   "user-agent", "x-request-id",
                                            "if-none-match",    "accept",     "origin"};
  const std::vector<std::string> query_names = {"scope", "namespace", "state",    "workload",
                                                "from",  "to",        "limit",    "action",
                                                "actor", "order",     "group_by", "q"};
  int tried = 0, bad = 0;
  std::set<std::string> positions;
  for (const auto& [method, pattern] : table) {
    const std::string where = method + " " + pattern;
    const BodyTemplate tpl = bodyFor(pattern);
    const std::string good_body =
        method == "POST" || method == "PUT" ? replaceAll(tpl.text, "@@", "ok") : "";
    const std::string path = fill(pattern, "x1");
    // Every path parameter, percent-encoded and raw.
    if (pattern.find_first_of("{*") != std::string::npos) {
      for (const auto& v : {bad_escaped, bad_raw}) {
        expectSane(call(method, fill(pattern, v), key, good_body, {}, tpl.content_type),
                   where + " path", tried, bad);
        positions.insert("path");
      }
    }
    // Every query parameter.
    for (const auto& q : query_names) {
      expectSane(
          call(method, path + "?" + q + "=" + bad_escaped, key, good_body, {}, tpl.content_type),
          where + " ?" + q, tried, bad);
      positions.insert("query " + q);
    }
    // Every header, and the key itself.
    for (const auto& h : headers) {
      expectSane(call(method, path, key, good_body, {h + ": " + bad_raw}, tpl.content_type),
                 where + " header " + h, tried, bad);
      positions.insert("header " + h);
    }
    expectSane(call(method, path, bad_raw, good_body, {}, tpl.content_type),
               where + " authorization", tried, bad);
    positions.insert("header authorization");
    // Every string field of the body: raw bytes, and a lone surrogate escape.
    if (method == "POST" || method == "PUT") {
      for (const auto& v : {bad_raw, std::string("\\udc00")}) {
        const std::string body = replaceAll(tpl.text, "@@", v);
        expectSane(call(method, path, key, body, {}, tpl.content_type), where + " body", tried,
                   bad);
        expectSane(call(method, path, kAdminKey, body, {}, tpl.content_type),
                   where + " body (admin)", tried, bad);
      }
      positions.insert("body strings");
    }
  }
  EXPECT_TRUE(alive()) << "the server must survive all of it";
  EXPECT_EQ(bad, 0);
  std::printf(
      "invalid UTF-8: %zu endpoints x %zu positions: %d requests, %d answered 5xx or "
      "broken JSON, server alive\n",
      table.size(), positions.size(), tried, bad);
  // Hostile bytes changed nothing: no tenant came of them, and nothing stored holds them.
  EXPECT_EQ(call("GET", "/api/v1/tenants", kAdminKey).parsed()["data"].size(), 1u);
  for (const char* list : {"/api/v1/workloads", "/api/v1/keys", "/api/v1/teams", "/api/v1/users",
                           "/api/v1/wallets", "/api/v1/audit"}) {
    const std::string body = call("GET", list, kAdminKey).body;
    EXPECT_EQ(body.find("\xef\xbf\xbd"), std::string::npos) << list << ": " << body.substr(0, 500);
  }
}

TEST_F(HostileTest, ASessionHeaderOfInvalidUtf8IsRefusedAndTheServerLives) {
  // Found by a hostile tenant: "x-purser-session: \xff" on a gateway request killed the server.
  serve("");
  const std::string body =
      R"({"model":"none","messages":[{"role":"user","content":"hi"}],"max_tokens":5})";
  for (const std::string session : {std::string("\xff"), std::string("a\xc3"),
                                    std::string(300, 's'), std::string("tab\there")}) {
    Reply r = call("POST", "/v1/chat/completions", key, body, {"x-purser-session: " + session});
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.parsed()["error"]["param"], "session_id") << r.body;
  }
  EXPECT_TRUE(alive());
}

TEST_F(HostileTest, DeepNestingIsRefusedOnEveryEndpointThatReadsABody) {
  // Found by a hostile tenant: a 100 KB gateway body nested 50,000 deep crashed the server
  // (stack overflow).
  serve("http:\n  max_nesting_depth: 64\n");
  const auto table = routes();
  const int depth = 50'000;
  const std::string deep_json = std::string(depth, '[') + "1" + std::string(depth, ']');
  const std::string deep_object = [&] {
    std::string s;
    for (int i = 0; i < depth; ++i) s += "{\"a\":";
    s += "1";
    s += std::string(depth, '}');
    return s;
  }();
  const std::string deep_yaml = "name: " + std::string(depth, '[') + std::string(depth, ']');
  const std::string at_limit = std::string(64, '[') + std::string(64, ']');
  int tried = 0, bad = 0, endpoints = 0;
  for (const auto& [method, pattern] : table) {
    if (method != "POST" && method != "PUT") continue;
    ++endpoints;
    const std::string path = fill(pattern, "x1");
    for (const auto& [body, type] : std::vector<std::pair<std::string, std::string>>{
             {deep_json, "application/json"},
             {deep_object, "application/json"},
             {"{\"model\":" + deep_object + "}", "application/json"},
             {deep_yaml, "application/yaml"},
             {at_limit, "application/json"}}) {
      Reply r = call(method, path, key, body, {}, type);
      expectSane(r, method + " " + pattern, tried, bad);
      if (body != at_limit && r.status != 401 && r.status != 403 && r.status != 404) {
        EXPECT_EQ(r.status, 400) << method << " " << pattern << ": " << r.body.substr(0, 200);
      }
    }
  }
  EXPECT_TRUE(alive());
  EXPECT_EQ(bad, 0);
  // The model API says so in its own error shape.
  Reply r = call("POST", "/v1/chat/completions", key, "{\"messages\":" + deep_json + "}");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.parsed()["error"]["type"], "invalid_request_error") << r.body;
  EXPECT_NE(r.parsed()["error"]["message"].get<std::string>().find("nested deeper"),
            std::string::npos);
  std::printf(
      "deep nesting: %d endpoints x 5 bodies: %d requests, %d answered 5xx, server "
      "alive\n",
      endpoints, tried, bad);
}

TEST_F(HostileTest, AWorkloadWithInvalidUtf8ChangesNothingAndTheFleetGoesOn) {
  // Found by a hostile tenant: one workload with invalid UTF-8 in node_selector made every
  // tenant's submits and deletes answer 500 until a restart, half-applied a delete, and stopped
  // the fleet's once-a-second tick (GPU metering).
  serve("");
  const std::string good =
      "name: w{}\nqueue: research\npod_sets:\n  - name: main\n    requests: {{cpu: \"1\"}}\n";
  Reply hostile = call("POST", "/api/v1/workloads", key,
                       "name: evil\nqueue: research\npod_sets:\n  - name: main\n    requests: "
                       "{cpu: \"1\"}\n    node_selector: {zone: \"\xff\"}\n",
                       {}, "application/yaml");
  EXPECT_EQ(hostile.status, 400) << hostile.body;
  EXPECT_NE(hostile.body.find("UTF-8"), std::string::npos) << hostile.body;
  // Everything goes on: another submit, a delete, and it stays deleted across a read.
  Reply ok = call("POST", "/api/v1/workloads", key, fmt::format(fmt::runtime(good), 1), {},
                  "application/yaml");
  ASSERT_EQ(ok.status, 201) << ok.body;
  EXPECT_EQ(call("DELETE", "/api/v1/workloads/ml/w1", key).status, 200);
  EXPECT_EQ(call("GET", "/api/v1/workloads/ml/w1", key).parsed()["reason"], "Deleted");
  EXPECT_EQ(call("POST", "/api/v1/workloads", key, fmt::format(fmt::runtime(good), 2), {},
                 "application/yaml")
                .status,
            201);
  // The once-a-second tick still meters GPU time (the configured interval is 1 s).
  Reply gpu = call("POST", "/api/v1/workloads", key,
                   "name: gpu\nqueue: research\npod_sets:\n  - name: main\n    requests: "
                   "{cpu: \"1\", nvidia.com/gpu: 1}\n",
                   {}, "application/yaml");
  ASSERT_EQ(gpu.status, 201) << gpu.body;
  EXPECT_TRUE(testing::eventually(
      [&] {
        return call("GET", "/api/v1/workloads/ml/gpu", key).parsed().value("gpu_charged", "0.00") !=
               "0.00";
      },
      {.attempts = 300, .pause = std::chrono::milliseconds(100), .what = "GPU time metered"}));
  EXPECT_TRUE(alive());
}

TEST_F(HostileTest, NamespacesArePerTenant) {
  // Found by a hostile tenant: tenant B creating a team named like tenant A's made A's fleet
  // submissions answer 409, and told B the name existed.
  serve("");
  const std::string other = admin("/api/v1/tenants", {{"name", "globex"}})["id"];
  const std::string other_team = admin("/api/v1/teams", {{"tenant", other}, {"name", "ml"}})["id"];
  const std::string eve =
      admin("/api/v1/users", {{"tenant", other}, {"team", other_team}, {"name", "eve"}})["id"];
  const std::string eve_key =
      admin("/api/v1/keys", {{"owner", {{"kind", "user"}, {"id", eve}}}, {"name", "k"}})["key"];
  const std::string w =
      "name: train\nqueue: research\npod_sets:\n  - name: main\n    requests: {cpu: \"1\"}\n";
  Reply mine = call("POST", "/api/v1/workloads", key, w, {}, "application/yaml");
  ASSERT_EQ(mine.status, 201) << "the first team of the name keeps its namespace: " << mine.body;
  EXPECT_EQ(mine.parsed()["name"], "ml/train");
  // The other tenant's "ml" is another namespace: the same workload name does not collide, and
  // nothing it is told names the first tenant.
  Reply theirs = call("POST", "/api/v1/workloads", eve_key, w, {}, "application/yaml");
  EXPECT_NE(theirs.status, 409) << theirs.body;
  EXPECT_NE(theirs.status, 500) << theirs.body;
  EXPECT_EQ(theirs.body.find(tenant), std::string::npos) << theirs.body;
  EXPECT_EQ(theirs.body.find("ambiguous"), std::string::npos) << theirs.body;
  EXPECT_EQ(theirs.body.find('@'), std::string::npos) << theirs.body;
  EXPECT_EQ(call("GET", "/api/v1/workloads/ml/train", eve_key).status, 404);
  EXPECT_EQ(call("GET", "/api/v1/workloads/ml/train", key).status, 200);
  // The first tenant still submits.
  EXPECT_EQ(call("POST", "/api/v1/workloads", key,
                 "name: again\nqueue: research\npod_sets:\n  - name: main\n    requests: "
                 "{cpu: \"1\"}\n",
                 {}, "application/yaml")
                .status,
            201);
}

TEST_F(HostileTest, OtherTenantsIdsAnswerExactlyAsIdsThatDoNotExist) {
  // Found by a hostile tenant: another tenant's ids answered 404 with a different message (and
  // measurably slower) than ids that do not exist.
  serve("");
  const std::string other = admin("/api/v1/tenants", {{"name", "globex"}})["id"];
  const std::string other_team = admin("/api/v1/teams", {{"tenant", other}, {"name", "ops"}})["id"];
  const std::string eve =
      admin("/api/v1/users", {{"tenant", other}, {"team", other_team}, {"name", "eve"}})["id"];
  const json eve_key =
      admin("/api/v1/keys", {{"owner", {{"kind", "user"}, {"id", eve}}}, {"name", "k"}});
  const std::string tenant_admin =
      admin("/api/v1/users", {{"tenant", tenant}, {"name", "ta"}, {"role", "tenant-admin"}})["id"];
  const std::string ta_key = admin(
      "/api/v1/keys", {{"owner", {{"kind", "user"}, {"id", tenant_admin}}}, {"name", "k"}})["key"];
  const std::string missing = "01jzzzzzzzzzzzzzzzzzzzzzzz";
  // Each probe, once with another tenant's id and once with an id nobody has: same answer.
  const auto same = [&](const std::string& method, const std::string& pattern,
                        const std::string& theirs, const std::string& body_tpl = "") {
    const auto probe = [&](const std::string& id) {
      Reply r = call(method, replaceAll(pattern, "ID", id), ta_key, replaceAll(body_tpl, "ID", id));
      return std::pair{r.status, replaceAll(r.body, id, "ID")};
    };
    const auto a = probe(theirs), b = probe(missing);
    EXPECT_EQ(a.first, b.first) << method << " " << pattern;
    EXPECT_EQ(a.second, b.second) << method << " " << pattern;
    EXPECT_EQ(a.first, 404) << method << " " << pattern << ": " << a.second;
  };
  same("DELETE", "/api/v1/keys/ID", eve_key["id"]);
  same("POST", "/api/v1/keys/ID/rotate", eve_key["id"]);
  same("POST", "/api/v1/keys", eve, R"({"name":"x","owner":{"kind":"user","id":"ID"}})");
  same("POST", "/api/v1/wallets", other_team,
       R"({"scope":{"kind":"team","id":"ID"},"limit":"1.00"})");
  same("POST", "/api/v1/wallets", eve, R"({"scope":{"kind":"user","id":"ID"},"limit":"1.00"})");
  same("GET", "/api/v1/wallets?scope=team:ID", other_team);
  same("GET", "/api/v1/spend?scope=tenant:ID", other);
  same("GET", "/api/v1/usage?scope=user:ID", eve);
  same("POST", "/api/v1/teams", other, R"({"name":"x","tenant":"ID"})");
  same("POST", "/api/v1/rate-limits", other_team, R"({"scope":{"kind":"team","id":"ID"},"rpm":5})");
}

TEST_F(HostileTest, DeniedRequestsCannotFloodTheAuditLog) {
  // Found by a hostile tenant: a member could write ~1,300 audit entries a second through
  // denied requests.
  serve("");
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(call("POST", "/api/v1/tenants", key, R"({"name":"mine"})").status, 403);
  }
  const json audit =
      call("GET", "/api/v1/audit?actor=" + user + "&action=policy.", kAdminKey).parsed();
  ASSERT_TRUE(audit["data"].is_array()) << audit.dump();
  EXPECT_EQ(audit["data"].size(), 10u) << "the first ten of the minute, the rest summarised";
}

// --- Hostile upstreams -------------------------------------------------------------------------

class HostileUpstreamTest : public HostileTest {
 protected:
  // An upstream whose every answer is `answer(request)`; `pause` holds the connection after it.
  void upstream(std::function<std::string(const std::string&)> answer,
                const std::string& provider_extra = "", const std::string& wallet = "") {
    const bool stall = provider_extra.find("timeout") != std::string::npos;
    fake = std::make_unique<FakeUpstream>([answer, stall](int fd) {
      const std::string req = FakeUpstream::readRequest(fd);
      FakeUpstream::writeAll(fd, answer(req));
      if (stall) stallAfterAnswer(fd);
    });
    serve(fmt::format(
        "providers:\n  - {{name: up, kind: openai, base_url: http://127.0.0.1:{}/v1{}}}\n"
        "routes:\n  - {{model: chat, retries: 0, max_tokens: 100, targets: [{{provider: up, "
        "model: m}}]}}\n"
        "prices:\n  - {{provider: up, model: m, input_per_mtok: \"1000\", output_per_mtok: "
        "\"1000\"}}\n",
        fake->port(), provider_extra));
    if (!wallet.empty()) {
      admin("/api/v1/wallets", {{"scope", {{"kind", "user"}, {"id", user}}}, {"limit", wallet}});
    }
  }

  Reply chat() {
    json body = {{"model", "chat"},
                 {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                 {"max_tokens", 10}};
    return call("POST", "/v1/chat/completions", key, body.dump());
  }

  // A streamed chat read to its end, cut or not: the raw bytes (nullopt when the server never
  // ended it before the client's safety timeout).
  std::optional<std::string> streamedChat() {
    json body = {{"model", "chat"},
                 {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                 {"max_tokens", 10},
                 {"stream", true}};
    RawClient c(port);
    if (!c.send(request("POST", "/v1/chat/completions", {"Authorization: Bearer " + key},
                        body.dump()))) {
      return std::nullopt;
    }
    return c.readUntilClose();
  }

  std::vector<json> usage() {
    const json all = call("GET", "/api/v1/usage?scope=user:" + user, kAdminKey).parsed();
    std::vector<json> out;
    for (const auto& e : all["data"]) out.push_back(e);
    return out;
  }

  // Holds a connection open, silent, until the peer hangs up (bounded, so a broken gateway
  // fails the test rather than hanging it).
  static void stallAfterAnswer(int fd) {
    for (int i = 0; i < 600; ++i) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        char c;
        if (::recv(fd, &c, 1, 0) <= 0) return;
      }
    }
  }

  static std::string ok(const std::string& body, const std::string& type = "application/json") {
    return fmt::format(
        "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: "
        "close\r\n\r\n{}",
        type, body.size(), body);
  }

  std::unique_ptr<FakeUpstream> fake;
};

TEST_F(HostileUpstreamTest, UnbelievableUsageIsEstimatedAndFlaggedNeverRecordedAsZero) {
  // Found by a hostile tenant: negative, non-numeric, null or overflowing token counts were
  // recorded as $0 and not flagged.
  std::atomic<int> n{0};
  const std::vector<std::string> usages = {
      R"({"prompt_tokens":-5,"completion_tokens":3})",
      R"({"prompt_tokens":"many","completion_tokens":3})",
      R"({"prompt_tokens":4,"completion_tokens":1e30})",
      R"({"prompt_tokens":18446744073709551615,"completion_tokens":1})",
      R"({"prompt_tokens":4,"completion_tokens":2.5})"};
  upstream([&](const std::string&) {
    const std::string u = usages[static_cast<size_t>(n++) % usages.size()];
    return ok(
        R"({"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":)" +
        u + "}");
  });
  for (size_t i = 0; i < usages.size(); ++i) EXPECT_EQ(chat().status, 200);
  const auto events = usage();
  ASSERT_EQ(events.size(), usages.size());
  for (const auto& e : events) {
    EXPECT_TRUE(e["estimated"].get<bool>()) << e.dump();
    EXPECT_NE(e["cost"], "0.00") << e.dump();
    EXPECT_GE(e["tokens"]["input"].get<int64_t>(), 0);
  }
}

TEST_F(HostileUpstreamTest, ANonJsonAnswerIsA502InTheApisShapeAndIsMetered) {
  // Found by a hostile tenant: an upstream 200 with a non-JSON body reached the client as 200.
  upstream([](const std::string&) { return ok("<html>oops</html>", "text/html"); });
  Reply r = chat();
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(r.parsed()["error"]["type"], "server_error") << r.body;
  const auto events = usage();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0]["estimated"].get<bool>());
}

TEST_F(HostileUpstreamTest, ReportedUsageIsChargedNoMoreThanWasReserved) {
  // Found by a hostile tenant: upstream-reported usage was charged uncapped ($25 on a $10
  // wallet from one request).
  upstream(
      [](const std::string&) {
        return ok(
            R"({"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":25000,"completion_tokens":1}})");
      },
      "", "10.00");
  Reply r = chat();
  EXPECT_EQ(r.status, 200) << r.body;
  const auto events = usage();
  ASSERT_EQ(events.size(), 1u);
  const json wallet =
      call("GET", "/api/v1/wallets?scope=user:" + user, kAdminKey).parsed()["data"][0];
  EXPECT_LE(*Money::parse(wallet["spent"].get<std::string>()), *Money::parse("10.00"));
  ASSERT_TRUE(events[0].contains("overage")) << events[0].dump();
  EXPECT_NE(events[0]["overage"], "0.00") << events[0].dump();
  EXPECT_EQ(*Money::parse(events[0]["cost"].get<std::string>())
                 .value()
                 .add(*Money::parse(events[0]["overage"].get<std::string>())),
            *Money::parse("25.001"))
      << "what was not charged is recorded, not dropped: " << events[0].dump();
}

TEST_F(HostileUpstreamTest, AnOversizedAnswerIsA502AndIsMeteredAtTheHeldWorstCase) {
  upstream([](const std::string&) { return ok("{\"pad\":\"" + std::string(8000, 'x') + "\"}"); },
           ", max_response_bytes: 4Ki");
  Reply r = chat();
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_NE(r.parsed()["error"]["message"].get<std::string>().find("exceeded 4096 bytes"),
            std::string::npos)
      << r.body;
  const auto events = usage();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0]["estimated"].get<bool>());
  EXPECT_EQ(events[0]["status"], 502);
  EXPECT_EQ(fake->connections(), 1) << "the work was done: not retried";
}

TEST_F(HostileUpstreamTest, AnOversizedStreamEventCutsTheStreamAndIsMetered) {
  // Found by a hostile tenant: one 64 MiB stream event held a worker for ~28 s.
  upstream(
      [](const std::string&) {
        const std::string huge = "data: {\"choices\":[{\"delta\":{\"content\":\"" +
                                 std::string(3 << 20, 'x') + "\"}}]}\n\n";
        return std::string(
                   "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: "
                   "close\r\n\r\n") +
               huge;
      },
      ", max_event_bytes: 1Mi");
  auto got = streamedChat();
  ASSERT_TRUE(got.has_value()) << "the stream must end";
  EXPECT_NE(got->find("200 OK"), std::string::npos);
  EXPECT_EQ(got->find(std::string(1000, 'x')), std::string::npos)
      << "the oversized event is not relayed";
  const auto events = usage();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0]["estimated"].get<bool>());
  EXPECT_EQ(events[0]["status"], 502);
  EXPECT_TRUE(alive());
}

TEST_F(HostileUpstreamTest, AStreamThatStallsIsCutOffAtTheProvidersTimeout) {
  // Found by a hostile tenant: a stream that stalled after its first event waited the fixed
  // 120 s read timeout, not the provider's.
  upstream(
      [](const std::string&) {
        return std::string(
                   "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: "
                   "close\r\n\r\n") +
               "data: {\"choices\":[{\"delta\":{\"content\":\"hel\"}}]}\n\n";
      },
      ", timeout: 300ms");
  // The upstream then says nothing more and keeps the connection open until the gateway hangs
  // up (see stallAfterAnswer below).
  auto got = streamedChat();
  ASSERT_TRUE(got.has_value()) << "the stall must be cut off long before 120 s";
  EXPECT_NE(got->find("hel"), std::string::npos);
  EXPECT_NE(got->find("lost mid-stream"), std::string::npos) << *got;
  const auto events = usage();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0]["estimated"].get<bool>());
}

TEST_F(HostileUpstreamTest, TheUpstreamGetsTheClientsBytesWithOnlyTheGovernedValuesChanged) {
  // The body is forwarded as the client wrote it (key order, spacing, escapes, fields Purser does
  // not know); only the model, the output cap and a stream's usage option are spliced in.
  std::mutex mu;
  std::vector<std::string> bodies;
  upstream([&](const std::string& req) {
    {
      std::lock_guard lock(mu);
      bodies.push_back(req.substr(req.find("\r\n\r\n") + 4));
    }
    if (req.find("\"stream\": true") != std::string::npos) {
      return std::string(
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
          "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
          "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n"
          "data: [DONE]\n\n");
    }
    return ok(
        R"({"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}})");
  });
  const std::string plain =
      "{ \"zeta\" : [1, 2.50, {\"k\":\"\\u00e9\\n\"}],\n  \"messages\":[{\"role\":\"user\","
      "\"content\":\"caf\xC3\xA9 \\ud83d\\ude00\"}], \"model\" :\t\"chat\", \"max_tokens\": 500 }";
  Reply r = call("POST", "/v1/chat/completions", key, plain);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.parsed()["model"], "chat") << "the upstream's name stays hidden";
  // No cap given: the route's (100) is added in chat's current field.
  const std::string uncapped = R"({"model":"chat","messages":[{"role":"user","content":"hi"}]})";
  ASSERT_EQ(call("POST", "/v1/chat/completions", key, uncapped).status, 200);
  const std::string streamed =
      R"({"stream": true, "model":"chat","messages":[],"stream_options":{"include_usage":false}})";
  Reply s = call("POST", "/v1/chat/completions", key, streamed);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.body.find("usage"), std::string::npos) << "the client did not ask for usage";
  std::lock_guard lock(mu);
  ASSERT_EQ(bodies.size(), 3u);
  EXPECT_EQ(bodies[0],
            "{ \"zeta\" : [1, 2.50, {\"k\":\"\\u00e9\\n\"}],\n  \"messages\":[{\"role\":\"user\","
            "\"content\":\"caf\xC3\xA9 \\ud83d\\ude00\"}], \"model\" :\t\"m\", \"max_tokens\": 100 "
            "}");
  EXPECT_EQ(
      bodies[1],
      R"({"max_completion_tokens":100,"model":"m","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(bodies[2], R"({"max_completion_tokens":100,"stream": true, "model":"m","messages":[],)"
                       R"("stream_options":{"include_usage":true}})");
  const auto events = usage();
  ASSERT_EQ(events.size(), 3u);
  for (const auto& e : events) EXPECT_FALSE(e["estimated"].get<bool>()) << e.dump();
}

TEST_F(HostileUpstreamTest, AGovernedFieldGivenTwiceIsRefusedAndNothingIsCharged) {
  // With a key given twice, Purser and the upstream could read different values (one parser
  // keeps the first, another the last): the model routed and charged might not be the one run.
  upstream([](const std::string&) { return ok(R"({"choices":[]})"); });
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model":"chat","messages":[],"model":"other"})", "model"},
           {R"({"model":"chat","messages":[],"mo\u0064el":"other"})", "model"},
           {R"({"model":"chat","messages":[],"max_tokens":1,"max_tokens":100000})", "max_tokens"},
           {R"({"model":"chat","messages":[],"stream":false,"stream":true})", "stream"}}) {
    Reply r = call("POST", "/v1/chat/completions", key, body);
    EXPECT_EQ(r.status, 400) << body << " -> " << r.body;
    EXPECT_EQ(r.parsed()["error"]["param"], param) << r.body;
    EXPECT_NE(r.parsed()["error"]["message"].get<std::string>().find("more than once"),
              std::string::npos)
        << r.body;
  }
  EXPECT_EQ(fake->connections(), 0);
  EXPECT_TRUE(usage().empty());
}

}  // namespace
}  // namespace purser
