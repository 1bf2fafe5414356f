// The server's TLS: the certificate it presents, the protocol floor, ALPN, plain HTTP on the
// HTTPS port, re-reading the certificate (SIGHUP and changed files) with connections open, and
// mutual TLS. The clients are OpenSSL's own, configured by hand, so that each test can ask for
// exactly what a hostile or old client would.
#include "http/tls_server.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fakes/eventually.h"
#include "fakes/raw_client.h"
#include "fakes/temp_dir.h"
#include "fakes/test_server.h"
#include "fakes/tls_cert.h"
#include "http/client.h"

namespace purser::http {
namespace {

using purser::testing::eventually;
using purser::testing::TempDir;
using purser::testing::TestServer;
using purser::testing::TlsFiles;
using purser::testing::writeCa;
using purser::testing::writeSignedCert;

// What a raw client asks for.
struct ClientHello {
  int min_version = TLS1_2_VERSION;
  int max_version = TLS1_3_VERSION;
  std::string alpn;  // wire format: length-prefixed names
  std::optional<TlsFiles> certificate;
};

// One TLS connection made by hand (blocking), to send requests on and read what was agreed.
class RawTls {
 public:
  RawTls(uint16_t port, const ClientHello& hello) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    // Old protocols need the lowest security level even to be offered by this client.
    SSL_CTX_set_security_level(ctx_, 0);
    SSL_CTX_set_cipher_list(ctx_, "ALL:@SECLEVEL=0");
    SSL_CTX_set_min_proto_version(ctx_, hello.min_version);
    SSL_CTX_set_max_proto_version(ctx_, hello.max_version);
    if (!hello.alpn.empty()) {
      SSL_CTX_set_alpn_protos(ctx_, reinterpret_cast<const unsigned char*>(hello.alpn.data()),
                              static_cast<unsigned int>(hello.alpn.size()));
    }
    if (hello.certificate) {
      SSL_CTX_use_certificate_chain_file(ctx_, hello.certificate->cert_file.c_str());
      SSL_CTX_use_PrivateKey_file(ctx_, hello.certificate->key_file.c_str(), SSL_FILETYPE_PEM);
    }
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return;
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    SSL_set_tlsext_host_name(ssl_, "localhost");
    handshake_ok_ = SSL_connect(ssl_) == 1;
    if (!handshake_ok_) {
      char text[256];
      ERR_error_string_n(ERR_get_error(), text, sizeof text);
      error_ = text;
    }
    ERR_clear_error();
  }
  ~RawTls() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
    SSL_CTX_free(ctx_);
  }

  bool ok() const { return handshake_ok_; }
  const std::string& error() const { return error_; }
  int version() const { return SSL_version(ssl_); }
  std::string alpn() const {
    const unsigned char* p = nullptr;
    unsigned int n = 0;
    SSL_get0_alpn_selected(ssl_, &p, &n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  std::string cipher() const { return SSL_get_cipher_name(ssl_); }
  // The server certificate's serial number, to tell two certificates apart.
  long serverSerial() const {
    X509* cert = SSL_get0_peer_certificate(ssl_);
    return cert == nullptr ? -1 : ASN1_INTEGER_get(X509_get0_serialNumber(cert));
  }

  // A keep-alive GET; the response (head and body) as text, empty when the connection failed.
  std::string get(const std::string& path) {
    const std::string request = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
    if (SSL_write(ssl_, request.data(), static_cast<int>(request.size())) <= 0) return {};
    std::string response;
    char buffer[4096];
    while (true) {
      const int n = SSL_read(ssl_, buffer, sizeof buffer);
      if (n <= 0) return {};
      response.append(buffer, static_cast<size_t>(n));
      const size_t head_end = response.find("\r\n\r\n");
      if (head_end == std::string::npos) continue;
      const size_t at = response.find("Content-Length: ");
      if (at == std::string::npos || at > head_end) return response;
      const size_t length = std::stoul(response.substr(at + 16));
      if (response.size() >= head_end + 4 + length) return response;
    }
  }

 private:
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool handshake_ok_ = false;
  std::string error_;
};

long serialOf(const std::string& cert_file) {
  FILE* f = std::fopen(cert_file.c_str(), "r");
  X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  const long serial = ASN1_INTEGER_get(X509_get0_serialNumber(cert));
  X509_free(cert);
  return serial;
}

class TlsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ca = writeCa(dir.path(), "server");
    leaf = writeSignedCert(dir.path(), "leaf", ca, "localhost");
    // The certificate the server is configured with lives at fixed paths that tests replace.
    cert_path = dir.path() + "/serving.pem";
    key_path = dir.path() + "/serving-key.pem";
    std::filesystem::copy_file(leaf.cert_file, cert_path);
    std::filesystem::copy_file(leaf.key_file, key_path);
    ASSERT_TRUE(
        server.router
            .add(Method::kGet, "/who",
                 [](Request& r) { return Response::text(200, "subject=" + r.tls_client_subject); })
            .has_value());
  }

  void start(TlsOptions tls, std::chrono::nanoseconds watch = std::chrono::seconds(0)) {
    tls.cert_file = cert_path;
    tls.key_file = key_path;
    ServerOptions so;
    so.tls = tls;
    so.tls_watch_interval = watch;
    server.start(so);
  }

  // Replaces the serving files by renames, as cert-manager and a Kubernetes secret mount do.
  void replaceServing(const TlsFiles& with) {
    std::filesystem::copy_file(with.cert_file, cert_path + ".new");
    std::filesystem::copy_file(with.key_file, key_path + ".new");
    std::filesystem::rename(key_path + ".new", key_path);
    std::filesystem::rename(cert_path + ".new", cert_path);
  }

  TempDir dir;
  TlsFiles ca, leaf;
  std::string cert_path, key_path;
  TestServer server;
};

TEST_F(TlsServerTest, PresentsTheConfiguredCertificateOverTls12And13WithAeadCiphers) {
  start({});
  RawTls tls13(server.port(), {});
  ASSERT_TRUE(tls13.ok()) << tls13.error();
  EXPECT_EQ(tls13.version(), TLS1_3_VERSION);
  EXPECT_EQ(tls13.serverSerial(), serialOf(leaf.cert_file));
  EXPECT_NE(tls13.get("/who").find("200 OK"), std::string::npos);

  RawTls tls12(server.port(), {.max_version = TLS1_2_VERSION});
  ASSERT_TRUE(tls12.ok()) << tls12.error();
  EXPECT_EQ(tls12.version(), TLS1_2_VERSION);
  const std::string cipher = tls12.cipher();
  EXPECT_TRUE(cipher.find("GCM") != std::string::npos ||
              cipher.find("CHACHA20") != std::string::npos)
      << cipher;
  EXPECT_EQ(cipher.rfind("ECDHE-", 0), 0u) << cipher;

  // Verified by a client that trusts the CA, by name.
  asio::io_context ctx;
  HttpClient client(ctx, {.ca_file = ca.cert_file});
  auto ok = purser::testing::runCoroutine(
      ctx, client.request({.url = "https://localhost:" + std::to_string(server.port()) + "/who"}));
  ASSERT_TRUE(ok.has_value()) << ok.error().toString();
  EXPECT_EQ(ok->body, "subject=");  // no client certificate was asked for
}

TEST_F(TlsServerTest, OldProtocolsAreRefused) {
  start({});
  for (const int old : {TLS1_VERSION, TLS1_1_VERSION}) {
    RawTls tls(server.port(), {.min_version = old, .max_version = old});
    EXPECT_FALSE(tls.ok()) << "protocol " << std::hex << old << " was accepted";
  }
}

TEST_F(TlsServerTest, MinVersion13RefusesTls12) {
  start({.min_version = "1.3"});
  RawTls tls12(server.port(), {.max_version = TLS1_2_VERSION});
  EXPECT_FALSE(tls12.ok());
  RawTls tls13(server.port(), {});
  EXPECT_TRUE(tls13.ok()) << tls13.error();
}

TEST_F(TlsServerTest, AlpnAgreesOnHttp11AndLeavesH2OnlyClientsWithout) {
  start({});
  const std::string h2_and_h1 = std::string("\x02h2\x08http/1.1", 12);
  RawTls both(server.port(), {.alpn = h2_and_h1});
  ASSERT_TRUE(both.ok()) << both.error();
  EXPECT_EQ(both.alpn(), "http/1.1");
  RawTls h2_only(server.port(), {.alpn = std::string("\x02h2", 3)});
  ASSERT_TRUE(h2_only.ok()) << h2_only.error();
  EXPECT_EQ(h2_only.alpn(), "");
  EXPECT_NE(h2_only.get("/who").find("HTTP/1.1 200"), std::string::npos);
}

TEST_F(TlsServerTest, PlainHttpOnTheHttpsPortIsAnsweredWith400AndClosed) {
  start({});
  asio::io_context ctx;
  HttpClient plain(ctx, {.read_timeout = std::chrono::seconds(30)});
  auto r = purser::testing::runCoroutine(
      ctx, plain.request({.url = "http://127.0.0.1:" + std::to_string(server.port()) + "/who"}));
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("speaks HTTPS"), std::string::npos) << r->body;
}

TEST_F(TlsServerTest, ReloadServesTheNewCertificateToNewConnectionsAndKeepsOpenOnes) {
  start({});
  RawTls before(server.port(), {});
  ASSERT_TRUE(before.ok()) << before.error();
  EXPECT_EQ(before.serverSerial(), serialOf(leaf.cert_file));

  const TlsFiles renewed = writeSignedCert(dir.path(), "renewed", ca, "localhost");
  replaceServing(renewed);
  ASSERT_TRUE(server.server->reloadTls().has_value());
  EXPECT_EQ(server.server->tlsReloads(), 1u);

  RawTls after(server.port(), {});
  ASSERT_TRUE(after.ok()) << after.error();
  EXPECT_EQ(after.serverSerial(), serialOf(renewed.cert_file));
  // The connection opened before the reload still serves.
  EXPECT_NE(before.get("/who").find("200 OK"), std::string::npos);
}

TEST_F(TlsServerTest, ABadNewPairIsRefusedAndTheOldCertificateStays) {
  start({});
  // The renewed certificate with the old key: not a pair.
  const TlsFiles renewed = writeSignedCert(dir.path(), "renewed", ca, "localhost");
  std::filesystem::copy_file(renewed.cert_file, cert_path,
                             std::filesystem::copy_options::overwrite_existing);
  auto refused = server.server->reloadTls();
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("is not the key of the certificate"), std::string::npos)
      << refused.error().message;
  // Garbage in the key file: refused too.
  {
    FILE* f = std::fopen(key_path.c_str(), "w");
    std::fputs("-----BEGIN PRIVATE KEY-----\nnot base64 at all\n", f);
    std::fclose(f);
  }
  EXPECT_FALSE(server.server->reloadTls().has_value());
  EXPECT_EQ(server.server->tlsReloads(), 0u);
  RawTls still(server.port(), {});
  ASSERT_TRUE(still.ok()) << still.error();
  EXPECT_EQ(still.serverSerial(), serialOf(leaf.cert_file));
}

TEST_F(TlsServerTest, AChangedFileIsNoticedWithoutASignal) {
  start({}, std::chrono::milliseconds(20));
  const TlsFiles renewed = writeSignedCert(dir.path(), "renewed", ca, "localhost");
  replaceServing(renewed);
  ASSERT_TRUE(eventually([&] { return server.server->tlsReloads() >= 1; },
                         {.what = "the changed certificate is re-read"}));
  RawTls after(server.port(), {});
  ASSERT_TRUE(after.ok()) << after.error();
  EXPECT_EQ(after.serverSerial(), serialOf(renewed.cert_file));
}

TEST_F(TlsServerTest, NoRequestFailsWhileTheCertificateIsReloadedUnderLoad) {
  start({});
  const TlsFiles second = writeSignedCert(dir.path(), "second", ca, "localhost");
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&, t] {
      // Thread 0 keeps one connection for every request; the others open a new one each time.
      std::optional<RawTls> kept;
      if (t == 0) kept.emplace(server.port(), ClientHello{});
      while (!stop.load()) {
        std::string response;
        if (kept) {
          response = kept->get("/who");
        } else {
          RawTls fresh(server.port(), {});
          if (fresh.ok()) response = fresh.get("/who");
        }
        (response.find("200 OK") != std::string::npos ? ok : failed).fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    replaceServing(i % 2 == 0 ? second : leaf);
    ASSERT_TRUE(server.server->reloadTls().has_value());
    const int seen = ok.load();
    ASSERT_TRUE(eventually([&] { return ok.load() >= seen + 3; }, {.what = "requests go on"}));
  }
  stop = true;
  for (auto& c : clients) c.join();
  EXPECT_EQ(server.server->tlsReloads(), 20u);
  EXPECT_GT(ok.load(), 60);
  EXPECT_EQ(failed.load(), 0);
}

TEST_F(TlsServerTest, AHandshakeThatNeverComesOrIsGarbageIsCutOffAndTheServerGoesOn) {
  ServerOptions so;
  so.tls = TlsOptions{.cert_file = cert_path, .key_file = key_path};
  so.header_timeout = std::chrono::milliseconds(200);
  so.tls_watch_interval = std::chrono::seconds(0);
  server.start(so);
  // Connected, silent: closed once the header timeout (which bounds the handshake) passes.
  purser::testing::RawClient silent(server.port());
  ASSERT_TRUE(silent.connected());
  EXPECT_TRUE(silent.waitForClose());
  // Bytes that are neither TLS nor HTTP: closed.
  purser::testing::RawClient garbage(server.port());
  ASSERT_TRUE(garbage.connected());
  garbage.send(std::string("\x16\x03\x01\xff\xff", 5) + std::string(4096, '\xee'));
  EXPECT_TRUE(garbage.waitForClose());
  // A TLS record header announcing a huge handshake, then nothing: closed too.
  purser::testing::RawClient huge(server.port());
  huge.send(std::string("\x16\x03\x03\x7f\xff\x01\x00\xff\xff", 9));
  EXPECT_TRUE(huge.waitForClose());
  RawTls fine(server.port(), {});
  ASSERT_TRUE(fine.ok()) << fine.error();
  EXPECT_NE(fine.get("/who").find("200 OK"), std::string::npos);
  EXPECT_TRUE(eventually([&] { return server.server->connections() == 1; },
                         {.what = "only the good connection is left"}));
}

class MutualTlsTest : public TlsServerTest {
 protected:
  void SetUp() override {
    TlsServerTest::SetUp();
    clients_ca = writeCa(dir.path(), "clients");
    start({.client_ca_file = clients_ca.cert_file});
  }
  TlsFiles clients_ca;
};

TEST_F(MutualTlsTest, AClientCertificateSignedByTheClientCaIsRequiredAndItsSubjectIsRead) {
  const TlsFiles runner = writeSignedCert(dir.path(), "runner", clients_ca, "ci-runner", "Acme");
  RawTls with(server.port(), {.certificate = runner});
  ASSERT_TRUE(with.ok()) << with.error();
  const std::string response = with.get("/who");
  EXPECT_NE(response.find("subject=CN=ci-runner,O=Acme"), std::string::npos) << response;

  // Without a certificate: no connection (the server ends the handshake; TLS 1.3 clients learn
  // it at their first read).
  RawTls without(server.port(), {});
  EXPECT_TRUE(!without.ok() || without.get("/who").empty());

  // A certificate of another CA (here the server's own): refused the same way.
  const TlsFiles stranger = writeSignedCert(dir.path(), "stranger", ca, "ci-runner", "Acme");
  RawTls foreign(server.port(), {.certificate = stranger});
  EXPECT_TRUE(!foreign.ok() || foreign.get("/who").empty());

  // Purser's own client with a client certificate.
  asio::io_context ctx;
  ClientOptions o{.ca_file = ca.cert_file};
  o.client_cert_pem = [&] {
    std::ifstream in(runner.cert_file);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  o.client_key_pem = [&] {
    std::ifstream in(runner.key_file);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  HttpClient client(ctx, o);
  auto r = purser::testing::runCoroutine(
      ctx, client.request({.url = "https://localhost:" + std::to_string(server.port()) + "/who"}));
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  EXPECT_EQ(r->body, "subject=CN=ci-runner,O=Acme");
}

TEST(TlsServerContextTest, OpenNamesTheFileThatCannotBeUsed) {
  TempDir dir;
  const TlsFiles ca = writeCa(dir.path(), "ca");
  const TlsFiles leaf = writeSignedCert(dir.path(), "leaf", ca, "localhost");
  auto no_ca = TlsServerContext::open(
      {.cert_file = leaf.cert_file, .key_file = leaf.key_file, .client_ca_file = "/nonexistent"});
  ASSERT_FALSE(no_ca.has_value());
  EXPECT_NE(no_ca.error().message.find("cannot load the client CA \"/nonexistent\""),
            std::string::npos)
      << no_ca.error().message;
  auto swapped = TlsServerContext::open({.cert_file = leaf.cert_file, .key_file = ca.key_file});
  ASSERT_FALSE(swapped.has_value());
  EXPECT_NE(swapped.error().message.find("is not the key of the certificate"), std::string::npos);
  auto fine = TlsServerContext::open({.cert_file = leaf.cert_file, .key_file = leaf.key_file});
  ASSERT_TRUE(fine.has_value()) << fine.error().toString();
  EXPECT_FALSE((*fine)->filesChanged());
}

}  // namespace
}  // namespace purser::http
