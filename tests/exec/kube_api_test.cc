// The Kubernetes API client over HTTPS as a kubeconfig configures it: the server verified
// against the kubeconfig's CA (base64 data), the client known by its certificate and key (one a
// file beside the kubeconfig, one inline), against a real TLS server on loopback that requires a
// client certificate.
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include <sys/socket.h>

#include "config/kubeconfig.h"
#include "exec/kube_api.h"
#include "fakes/fake_upstream.h"
#include "fakes/temp_dir.h"
#include "fakes/tls_cert.h"

namespace purser::exec {
namespace {

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

// An API server on loopback that speaks TLS and admits only clients whose certificate the
// client CA signed; it answers every request 200 with its request line.
class TlsApiServer {
 public:
  TlsApiServer(const testing::TlsFiles& server, const std::string& client_ca) {
    ctx_ = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate_file(ctx_, server.cert_file.c_str(), SSL_FILETYPE_PEM);
    SSL_CTX_use_PrivateKey_file(ctx_, server.key_file.c_str(), SSL_FILETYPE_PEM);
    SSL_CTX_load_verify_locations(ctx_, client_ca.c_str(), nullptr);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    upstream_ = std::make_unique<testing::FakeUpstream>([this](int fd) {
      SSL* ssl = SSL_new(ctx_);
      SSL_set_fd(ssl, fd);
      if (SSL_accept(ssl) == 1) {
        std::string request;
        char buf[4096];
        while (request.find("\r\n\r\n") == std::string::npos) {
          const int n = SSL_read(ssl, buf, sizeof buf);
          if (n <= 0) break;
          request.append(buf, static_cast<size_t>(n));
        }
        ++served_;
        const std::string body =
            "{\"kind\":\"APIVersions\",\"line\":\"" + request.substr(0, request.find('\r')) + "\"}";
        const std::string reply =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            "Content-Length: " +
            std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
        SSL_write(ssl, reply.data(), static_cast<int>(reply.size()));
        SSL_shutdown(ssl);
      } else {
        ++refused_;
      }
      SSL_free(ssl);
      ERR_clear_error();
    });
  }
  ~TlsApiServer() {
    upstream_.reset();
    SSL_CTX_free(ctx_);
  }
  uint16_t port() const { return upstream_->port(); }
  int served() const { return served_.load(); }
  int refused() const { return refused_.load(); }

 private:
  SSL_CTX* ctx_ = nullptr;
  std::atomic<int> served_{0}, refused_{0};
  std::unique_ptr<testing::FakeUpstream> upstream_;
};

class KubeApiTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir.file("server"));
    std::filesystem::create_directories(dir.file("client"));
    server_files = testing::writeSelfSignedCert(dir.file("server"), "IP:127.0.0.1");
    client_files = testing::writeSelfSignedCert(dir.file("client"), "DNS:purser");
    api = std::make_unique<TlsApiServer>(server_files, client_files.cert_file);
  }
  // A kubeconfig of two contexts: "lab" (the client certificate) and "anonymous" (none).
  std::string kubeconfig() {
    return "apiVersion: v1\nkind: Config\ncurrent-context: lab\nclusters:\n"
           "- name: lab-cluster\n  cluster:\n    server: https://127.0.0.1:" +
           std::to_string(api->port()) + "\n    certificate-authority-data: " +
           base64(testing::readFile(server_files.cert_file)) +
           "\ncontexts:\n- name: lab\n  context: {cluster: lab-cluster, user: purser, namespace: "
           "ml}\n- name: anonymous\n  context: {cluster: lab-cluster}\nusers:\n"
           "- name: purser\n  user:\n    client-certificate: client/cert.pem\n"
           "    client-key-data: " +
           base64(testing::readFile(client_files.key_file)) + "\n";
  }
  Result<KubeReply> get(const config::Kubeconfig& kc) {
    KubeApiOptions o;
    o.server = kc.server;
    o.ca_pem = kc.ca_pem;
    o.client_cert_pem = kc.client_cert_pem;
    o.client_key_pem = kc.client_key_pem;
    o.token = kc.token;
    auto client = KubeApi::create(o);
    if (!client) return fail(client.error());
    return (*client)->call("GET", "/api");
  }

  testing::TempDir dir;
  testing::TlsFiles server_files, client_files;
  std::unique_ptr<TlsApiServer> api;
};

TEST_F(KubeApiTlsTest, AKubeconfigsClientCertificateAndCaReachTheServer) {
  testing::writeFile(dir.file("kubeconfig"), kubeconfig());
  auto kc = config::readKubeconfig(dir.file("kubeconfig"), "");
  ASSERT_TRUE(kc) << kc.error().message;
  EXPECT_EQ(kc->context, "lab");
  EXPECT_EQ(kc->namespace_, "ml");
  EXPECT_EQ(kc->client_cert_pem, testing::readFile(client_files.cert_file));
  auto reply = get(*kc);
  ASSERT_TRUE(reply) << reply.error().message;
  EXPECT_EQ(reply->status, 200);
  EXPECT_NE(reply->body.find("GET /api HTTP/1.1"), std::string::npos) << reply->body;
  EXPECT_EQ(api->served(), 1);
}

TEST_F(KubeApiTlsTest, WithoutAClientCertificateOrWithAnotherCaTheConnectionFails) {
  testing::writeFile(dir.file("kubeconfig"), kubeconfig());
  auto anonymous = config::readKubeconfig(dir.file("kubeconfig"), "anonymous");
  ASSERT_TRUE(anonymous) << anonymous.error().message;
  auto refused = get(*anonymous);
  EXPECT_FALSE(refused && refused->status == 200);
  // A CA that did not sign the server's certificate: the client refuses the server.
  auto lab = config::readKubeconfig(dir.file("kubeconfig"), "lab");
  ASSERT_TRUE(lab);
  lab->ca_pem = testing::readFile(client_files.cert_file);
  auto unverified = get(*lab);
  ASSERT_FALSE(unverified);
  EXPECT_EQ(unverified.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(api->served(), 0);
  // A key that is not the certificate's is refused before any connection.
  lab = config::readKubeconfig(dir.file("kubeconfig"), "lab");
  lab->client_key_pem = testing::readFile(server_files.key_file);
  auto mismatched = get(*lab);
  ASSERT_FALSE(mismatched);
  EXPECT_EQ(mismatched.error().code, ErrorCode::kInvalidArgument);
}

// A watch over plain HTTP: a fake API server streams events in chunks (one split across two),
// then keeps the connection open and quiet, as a real one does between events.
class KubeWatchTest : public ::testing::Test {
 protected:
  static std::string chunk(const std::string& data) {
    char size[16];
    std::snprintf(size, sizeof size, "%zx", data.size());
    return std::string(size) + "\r\n" + data + "\r\n";
  }

  std::unique_ptr<KubeApi> client() {
    KubeApiOptions o;
    o.server = "http://127.0.0.1:" + std::to_string(server.port());
    o.token = "t0ken";
    auto api = KubeApi::create(o);
    EXPECT_TRUE(api.has_value()) << api.error().message;
    return api ? std::move(*api) : nullptr;
  }

  std::mutex mu;
  std::string request;  // guarded by mu
  testing::FakeUpstream server{[this](int fd) {
    const std::string head = testing::FakeUpstream::readRequestHead(fd);
    {
      std::lock_guard lock(mu);
      request = head;
    }
    if (head.find("/refused") != std::string::npos) {
      testing::FakeUpstream::writeAll(
          fd, "HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\n\r\nforbidden");
      return;
    }
    testing::FakeUpstream::writeAll(
        fd,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
            chunk("{\"type\":\"ADDED\"}\n{\"type\":\"MOD") + chunk("IFIED\"}\n") +
            chunk("{\"type\":\"DELETED\"}\n"));
    // Quiet until the client goes.
    char byte;
    while (::recv(fd, &byte, 1, 0) > 0) {
    }
  }};
};

TEST_F(KubeWatchTest, LinesArriveWholeAndStopEndsAQuietWatch) {
  auto api = client();
  ASSERT_NE(api, nullptr);
  std::vector<std::string> lines;
  std::atomic<bool> stop{false};
  auto reply = api->watch(
      "/api/v1/pods?watch=1",
      [&](const std::string& line) {
        lines.push_back(line);
        if (lines.size() == 3) stop = true;  // the watch is quiet from here on
        return true;
      },
      stop);
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(lines, (std::vector<std::string>{"{\"type\":\"ADDED\"}", "{\"type\":\"MODIFIED\"}",
                                             "{\"type\":\"DELETED\"}"}));
  std::lock_guard lock(mu);
  EXPECT_NE(request.find("GET /api/v1/pods?watch=1 HTTP/1.1"), std::string::npos) << request;
  EXPECT_NE(request.find("Authorization: Bearer t0ken"), std::string::npos) << request;
}

TEST_F(KubeWatchTest, TheCallerEndsTheWatchByAnsweringFalse) {
  auto api = client();
  ASSERT_NE(api, nullptr);
  int seen = 0;
  std::atomic<bool> stop{false};
  auto reply = api->watch(
      "/api/v1/pods?watch=1", [&](const std::string&) { return ++seen < 2; }, stop);
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(seen, 2);
}

TEST_F(KubeWatchTest, ARefusedWatchSaysItsStatusAndWhy) {
  auto api = client();
  ASSERT_NE(api, nullptr);
  std::atomic<bool> stop{false};
  auto reply = api->watch(
      "/refused?watch=1", [](const std::string&) { return true; }, stop);
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  EXPECT_EQ(reply->status, 403);
  EXPECT_EQ(reply->body, "forbidden");
}

TEST_F(KubeWatchTest, AServerThatIsNotThereIsUnavailableAndABadUrlIsRefused) {
  int closed_port = 0;
  {
    testing::FakeUpstream gone{[](int) {}};
    closed_port = gone.port();
  }
  KubeApiOptions o;
  o.server = "http://127.0.0.1:" + std::to_string(closed_port);
  auto api = KubeApi::create(o);
  ASSERT_TRUE(api.has_value());
  auto reply = (*api)->call("GET", "/api");
  ASSERT_FALSE(reply.has_value());
  EXPECT_EQ(reply.error().code, ErrorCode::kUnavailable);
  o.server = "ftp://127.0.0.1";
  EXPECT_FALSE(KubeApi::create(o).has_value());
  o.server = "https://127.0.0.1:6443/api";
  EXPECT_FALSE(KubeApi::create(o).has_value());
}

}  // namespace
}  // namespace purser::exec
