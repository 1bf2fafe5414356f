// TLS end to end: `purser serve` on HTTPS with mutual TLS, a client certificate mapped to a
// service account's key calling the model API without a bearer key, and providers on HTTPS —
// one trusted through its own CA, one whose certificate no trusted CA signed, one not verified
// at all (and saying so), one that requires Purser's client certificate. The upstreams are
// HTTPS servers on loopback in this process; Purser is its real binary.
#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "fakes/eventually.h"
#include "fakes/process.h"
#include "fakes/serve.h"
#include "fakes/temp_dir.h"
#include "fakes/test_server.h"
#include "fakes/tls_cert.h"
#include "http/client.h"

namespace purser {
namespace {

using nlohmann::json;
using testing::TlsFiles;

constexpr const char* kAdminKey = "tls-test-admin-key-0123456789abcdef";

std::string readText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// An OpenAI-compatible upstream over HTTPS that answers every chat completion the same way and
// says which client certificate it saw.
class HttpsUpstream {
 public:
  HttpsUpstream(const TlsFiles& cert, const std::string& client_ca = "") {
    (void)server.router.add(http::Method::kPost, "/v1/chat/completions", [](http::Request& r) {
      const json answer = {
          {"id", "chatcmpl-1"},
          {"object", "chat.completion"},
          {"created", 1},
          {"model", "m"},
          {"choices",
           {{{"index", 0},
             {"message", {{"role", "assistant"}, {"content", "peer=" + r.tls_client_subject}}},
             {"finish_reason", "stop"}}}},
          {"usage", {{"prompt_tokens", 3}, {"completion_tokens", 2}, {"total_tokens", 5}}}};
      return http::Response::json(200, answer.dump());
    });
    http::ServerOptions so;
    so.tls = http::TlsOptions{
        .cert_file = cert.cert_file, .key_file = cert.key_file, .client_ca_file = client_ca};
    server.start(so);
  }
  std::string baseUrl() const {
    return "https://localhost:" + std::to_string(server.port()) + "/v1";
  }
  testing::TestServer server;
};

struct Reply {
  int status = 0;
  std::string error;  // the transport's, when nothing came back
  json body;
  std::string text;
};

class TlsServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string d = dir.path();
    server_ca = testing::writeCa(d, "server");
    server_cert = testing::writeSignedCert(d, "purser", server_ca, "localhost");
    clients_ca = testing::writeCa(d, "clients");
    runner = testing::writeSignedCert(d, "runner", clients_ca, "ci-runner", "Acme", "");
    intruder = testing::writeSignedCert(d, "intruder", clients_ca, "intruder", "Acme", "");
    operator_cert = testing::writeSignedCert(d, "operator", clients_ca, "operator", "Acme", "");
    upstream_ca = testing::writeCa(d, "upstream");
    const TlsFiles upstream_cert = testing::writeSignedCert(d, "model", upstream_ca, "localhost");
    const TlsFiles stranger_ca = testing::writeCa(d, "stranger");
    const TlsFiles stranger_cert =
        testing::writeSignedCert(d, "stranger-model", stranger_ca, "localhost");
    const TlsFiles model_clients_ca = testing::writeCa(d, "model-clients");
    purser_client =
        testing::writeSignedCert(d, "purser-client", model_clients_ca, "purser", "Platform", "");
    verified = std::make_unique<HttpsUpstream>(upstream_cert);
    impostor = std::make_unique<HttpsUpstream>(stranger_cert);
    guarded = std::make_unique<HttpsUpstream>(upstream_cert, model_clients_ca.cert_file);
    std::filesystem::copy_file(server_cert.cert_file, d + "/serving.pem");
    std::filesystem::copy_file(server_cert.key_file, d + "/serving-key.pem");
    const std::string config = fmt::format(
        "tls:\n"
        "  cert: serving.pem\n"
        "  key: serving-key.pem\n"
        "  client_ca: {clients_ca}\n"
        "  watch_interval: 0s\n"
        "  clients:\n"
        "    - {{subject: \"CN=ci-runner,O=Acme\", service_account: acme/ci-bot}}\n"
        "providers:\n"
        "  - {{name: verified, kind: openai, base_url: {verified}, ca: {upstream_ca}}}\n"
        "  - {{name: impostor, kind: openai, base_url: {impostor}, ca: {upstream_ca}}}\n"
        "  - {{name: unverified, kind: openai, base_url: {impostor}, insecure_skip_verify: "
        "true}}\n"
        "  - {{name: guarded, kind: openai, base_url: {guarded}, ca: {upstream_ca}, "
        "client_cert: {client_cert}, client_key: {client_key}}}\n"
        "  - {{name: guarded-anonymous, kind: openai, base_url: {guarded}, ca: {upstream_ca}}}\n"
        "routes:\n"
        "  - {{model: verified, retries: 0, targets: [{{provider: verified, model: m}}]}}\n"
        "  - {{model: impostor, retries: 0, targets: [{{provider: impostor, model: m}}]}}\n"
        "  - {{model: unverified, retries: 0, targets: [{{provider: unverified, model: m}}]}}\n"
        "  - {{model: guarded, retries: 0, targets: [{{provider: guarded, model: m}}]}}\n"
        "  - {{model: guarded-anonymous, retries: 0, targets: [{{provider: guarded-anonymous, "
        "model: m}}]}}\n",
        fmt::arg("clients_ca", clients_ca.cert_file), fmt::arg("verified", verified->baseUrl()),
        fmt::arg("impostor", impostor->baseUrl()), fmt::arg("guarded", guarded->baseUrl()),
        fmt::arg("upstream_ca", upstream_ca.cert_file),
        fmt::arg("client_cert", purser_client.cert_file),
        fmt::arg("client_key", purser_client.key_file));
    testing::Served served = testing::startServe(PURSER_BINARY, dir, config, kAdminKey);
    process = std::move(served.process);
    ASSERT_NE(served.port, 0) << process->err();
    port = served.port;
  }

  void TearDown() override {
    if (process) {
      process->signal(SIGTERM);
      EXPECT_EQ(process->wait(), 0) << process->err();
    }
  }

  // One request over a fresh HTTPS connection that trusts the server's CA, with a client
  // certificate (or none) and a bearer key (or none).
  Reply call(const std::string& method, const std::string& path, const std::string& key,
             const std::optional<TlsFiles>& cert, const json& body = nullptr) {
    boost::asio::io_context ctx;
    http::ClientOptions o;
    o.ca_file = server_ca.cert_file;
    o.read_timeout = std::chrono::seconds(60);
    if (cert) {
      o.client_cert_pem = readText(cert->cert_file);
      o.client_key_pem = readText(cert->key_file);
    }
    http::HttpClient client(ctx, o);
    http::ClientRequest req;
    req.method = method == "POST" ? http::Method::kPost : http::Method::kGet;
    req.url = "https://localhost:" + std::to_string(port) + path;
    if (!key.empty()) req.headers.add("Authorization", "Bearer " + key);
    if (!body.is_null()) {
      req.headers.add("Content-Type", "application/json");
      req.body = body.dump();
    }
    auto r = testing::runCoroutine(ctx, client.request(std::move(req)));
    if (!r) return {0, r.error().message, nullptr, ""};
    return {r->status, "", json::parse(r->body, nullptr, false), r->body};
  }

  Reply admin(const std::string& method, const std::string& path, const json& body = nullptr) {
    return call(method, path, kAdminKey, operator_cert, body);
  }

  Reply chat(const std::string& model, const std::string& key,
             const std::optional<TlsFiles>& cert) {
    return call("POST", "/v1/chat/completions", key, cert,
                {{"model", model},
                 {"messages", {{{"role", "user"}, {"content", "hello"}}}},
                 {"max_tokens", 5}});
  }

  // Makes tenant acme, its team ci, the team's service account ci-bot and one key of it; returns
  // the account's id.
  std::string seedServiceAccount() {
    const Reply tenant = admin("POST", "/api/v1/tenants", {{"name", "acme"}});
    EXPECT_EQ(tenant.status, 201) << tenant.text << tenant.error;
    const Reply team =
        admin("POST", "/api/v1/teams", {{"tenant", tenant.body.value("id", "")}, {"name", "ci"}});
    EXPECT_EQ(team.status, 201) << team.text;
    const Reply account = admin("POST", "/api/v1/service-accounts",
                                {{"tenant", tenant.body.value("id", "")},
                                 {"team", team.body.value("id", "")},
                                 {"name", "ci-bot"}});
    EXPECT_EQ(account.status, 201) << account.text;
    const std::string id = account.body.value("id", "");
    const Reply key = admin("POST", "/api/v1/keys",
                            {{"owner", {{"kind", "service_account"}, {"id", id}}}, {"name", "ci"}});
    EXPECT_EQ(key.status, 201) << key.text;
    return id;
  }

  testing::TempDir dir;
  TlsFiles server_ca, server_cert, clients_ca, runner, intruder, operator_cert, upstream_ca,
      purser_client;
  std::unique_ptr<HttpsUpstream> verified, impostor, guarded;
  std::unique_ptr<testing::Process> process;
  uint16_t port = 0;
};

TEST_F(TlsServeTest, AMappedClientCertificateCallsTheModelApiAsItsServiceAccount) {
  const std::string account = seedServiceAccount();
  ASSERT_FALSE(account.empty());

  // No bearer key: the certificate stands for ci-bot's key.
  const Reply ok = chat("verified", "", runner);
  ASSERT_EQ(ok.status, 200) << ok.text << ok.error;
  EXPECT_EQ(ok.body["choices"][0]["message"]["content"], "peer=");
  ASSERT_TRUE(testing::eventually(
      [&] {
        const Reply usage = admin("GET", "/api/v1/usage?scope=service_account:" + account);
        return usage.status == 200 && usage.body["data"].size() == 1;
      },
      {.what = "the call is metered to the service account"}));

  // A key that is not valid never falls back to the certificate beside it: a member who holds a
  // mapped certificate cannot pass a made-up key off as ci-bot, nor the other way round.
  const Reply forged = chat("verified", "pk-not-a-real-key", runner);
  EXPECT_EQ(forged.status, 401) << forged.text;
  EXPECT_EQ(call("POST", "/api/v1/tenants", "pk-not-a-real-key", runner, {{"name", "evil"}}).status,
            401);

  // A certificate of the same CA that is not mapped: verified, but nobody; a key is needed.
  const Reply unmapped = chat("verified", "", intruder);
  EXPECT_EQ(unmapped.status, 401) << unmapped.text;
  EXPECT_NE(unmapped.text.find("is not mapped to a service account"), std::string::npos)
      << unmapped.text;
  const Reply api_unmapped = call("POST", "/api/v1/tenants", "", intruder, {{"name", "evil"}});
  EXPECT_EQ(api_unmapped.status, 401) << api_unmapped.text;

  // The admin API answers the mapped certificate as ci-bot: a service account may not create
  // tenants.
  const Reply as_bot = call("POST", "/api/v1/tenants", "", runner, {{"name", "evil"}});
  EXPECT_EQ(as_bot.status, 403) << as_bot.text;

  // Without a client certificate there is no connection at all.
  const Reply anonymous = call("GET", "/healthz", "", std::nullopt);
  EXPECT_EQ(anonymous.status, 0);
}

TEST_F(TlsServeTest, UpstreamsAreVerifiedAndAWrongCertificateIsRefused) {
  const std::string account = seedServiceAccount();
  // Trusted through the provider's CA file.
  EXPECT_EQ(chat("verified", "", runner).status, 200);
  // A certificate for the right name from a CA nobody trusts: the gateway never sends the
  // prompt, and the client is told the upstream failed.
  const Reply impostor_reply = chat("impostor", "", runner);
  EXPECT_EQ(impostor_reply.status, 502) << impostor_reply.text;
  // The same server with verification off answers, and the provider list says it is unverified.
  EXPECT_EQ(chat("unverified", "", runner).status, 200);
  // An upstream that requires a client certificate: Purser presents its own when configured.
  const Reply guarded_reply = chat("guarded", "", runner);
  ASSERT_EQ(guarded_reply.status, 200) << guarded_reply.text;
  EXPECT_EQ(guarded_reply.body["choices"][0]["message"]["content"], "peer=CN=purser,O=Platform");
  EXPECT_EQ(chat("guarded-anonymous", "", runner).status, 502);

  const Reply providers = admin("GET", "/api/v1/providers");
  ASSERT_EQ(providers.status, 200) << providers.text;
  std::map<std::string, json> by_name;
  for (const auto& p : providers.body["data"]) by_name[p["name"]] = p["tls"];
  EXPECT_EQ(by_name["unverified"]["insecure_skip_verify"], true);
  EXPECT_EQ(by_name["unverified"]["verify"], false);
  EXPECT_EQ(by_name["verified"]["insecure_skip_verify"], false);
  EXPECT_EQ(by_name["verified"]["ca"], "system+file");
  EXPECT_EQ(by_name["guarded"]["client_certificate"], true);
  // The start warned about the provider that is not verified, and only about it.
  const auto warning = process->waitForStderr("WITHOUT verifying its TLS certificate");
  ASSERT_TRUE(warning.has_value()) << process->err();
  EXPECT_NE(warning->find("providers: unverified ("), std::string::npos) << *warning;
  EXPECT_EQ(process->err().find("providers: verified ("), std::string::npos);
}

TEST_F(TlsServeTest, TheCliTrustsAPrivateCaAndPresentsItsClientCertificate) {
  ASSERT_FALSE(seedServiceAccount().empty());
  const auto cli = [&](std::vector<std::string> env) {
    env.push_back("PURSER_SERVER=https://localhost:" + std::to_string(port));
    testing::Process p({PURSER_BINARY, "tenants", "create", "cli-made"}, "", env);
    const int code = p.wait();
    return std::make_pair(code, p.out() + p.err());
  };
  const std::string key = std::string("PURSER_KEY=") + kAdminKey;
  const std::string ca = "PURSER_CA_FILE=" + server_ca.cert_file;
  const std::string cert = "PURSER_CLIENT_CERT=" + operator_cert.cert_file;
  const std::string cert_key = "PURSER_CLIENT_KEY=" + operator_cert.key_file;
  // Without the CA the server is not trusted; without a client certificate it lets no one in.
  const auto untrusted = cli({key, cert, cert_key});
  EXPECT_NE(untrusted.first, 0) << untrusted.second;
  EXPECT_NE(untrusted.second.find("TLS handshake"), std::string::npos) << untrusted.second;
  EXPECT_NE(cli({key, ca}).first, 0);
  const auto made = cli({key, ca, cert, cert_key});
  EXPECT_EQ(made.first, 0) << made.second;
  EXPECT_NE(made.second.find("cli-made"), std::string::npos) << made.second;
  // A mapped certificate is a credential of its own: no key needed to be refused as ci-bot (a
  // service account may not create tenants), rather than as nobody.
  const auto as_bot =
      cli({ca, "PURSER_CLIENT_CERT=" + runner.cert_file, "PURSER_CLIENT_KEY=" + runner.key_file});
  EXPECT_NE(as_bot.first, 0);
  EXPECT_EQ(as_bot.second.find("set PURSER_KEY"), std::string::npos) << as_bot.second;
  EXPECT_NE(as_bot.second.find("403"), std::string::npos) << as_bot.second;
}

TEST_F(TlsServeTest, SighupServesARenewedCertificateToNewConnections) {
  const auto statusOfAFreshConnection = [&] {
    // What /healthz answers on a new connection that trusts server_ca (0: no connection).
    boost::asio::io_context ctx;
    http::ClientOptions o;
    o.ca_file = server_ca.cert_file;
    o.client_cert_pem = readText(operator_cert.cert_file);
    o.client_key_pem = readText(operator_cert.key_file);
    http::HttpClient client(ctx, o);
    auto r = testing::runCoroutine(
        ctx, client.request({.url = "https://localhost:" + std::to_string(port) + "/healthz"}));
    return r.has_value() ? r->status : 0;
  };
  ASSERT_EQ(statusOfAFreshConnection(), 200);
  // A renewed certificate from another CA: once it is served, clients that trust only the old
  // CA can no longer connect, and those that trust the new one can.
  const TlsFiles next_ca = testing::writeCa(dir.path(), "next");
  const TlsFiles renewed = testing::writeSignedCert(dir.path(), "renewed", next_ca, "localhost");
  std::filesystem::copy_file(renewed.key_file, dir.path() + "/serving-key.pem.new");
  std::filesystem::copy_file(renewed.cert_file, dir.path() + "/serving.pem.new");
  std::filesystem::rename(dir.path() + "/serving-key.pem.new", dir.path() + "/serving-key.pem");
  std::filesystem::rename(dir.path() + "/serving.pem.new", dir.path() + "/serving.pem");
  EXPECT_EQ(statusOfAFreshConnection(), 200);  // not re-read yet: watch_interval is 0s
  process->signal(SIGHUP);
  ASSERT_TRUE(testing::eventually([&] { return statusOfAFreshConnection() == 0; },
                                  {.what = "the renewed certificate is served"}));
  server_ca = next_ca;
  EXPECT_EQ(statusOfAFreshConnection(), 200);
}

}  // namespace
}  // namespace purser
