#include "exec/kube_api.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

namespace purser::exec {

namespace {

Error down(const std::string& what) {
  return Error(ErrorCode::kUnavailable, "the Kubernetes API cannot be reached: " + what);
}

// The certificates of a PEM bundle (the caller frees them); none when it holds none.
std::vector<X509*> pemCertificates(const std::string& pem) {
  std::vector<X509*> out;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) out.push_back(cert);
  BIO_free(bio);
  ERR_clear_error();  // the end of the bundle reads as an error
  return out;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

struct KubeApi::Conn {
  int fd = -1;
  SSL* ssl = nullptr;
  std::string buf;  // read, not yet consumed
  ~Conn() {
    if (ssl) {
      SSL_shutdown(ssl);
      SSL_free(ssl);
    }
    if (fd >= 0) ::close(fd);
  }
  // Waits up to `ms` for something to read; false on timeout.
  bool readable(int ms) {
    if (ssl && SSL_pending(ssl) > 0) return true;
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, ms) > 0;
  }
  // Reads more into buf; false at the end or on an error.
  bool fill() {
    char chunk[16384];
    ssize_t n;
    if (ssl) {
      n = SSL_read(ssl, chunk, sizeof chunk);
    } else {
      do {
        n = ::recv(fd, chunk, sizeof chunk, 0);
      } while (n < 0 && errno == EINTR);
    }
    if (n <= 0) return false;
    buf.append(chunk, static_cast<size_t>(n));
    return true;
  }
  bool writeAll(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n;
      if (ssl) {
        n = SSL_write(ssl, data.data() + done, static_cast<int>(data.size() - done));
      } else {
        n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
      }
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
};

KubeApi::KubeApi(KubeApiOptions options) : options_(std::move(options)) {}

KubeApi::~KubeApi() {
  if (ssl_ctx_) SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
}

Result<std::unique_ptr<KubeApi>> KubeApi::create(KubeApiOptions options) {
  std::unique_ptr<KubeApi> api(new KubeApi(std::move(options)));
  std::string rest;
  if (api->options_.server.rfind("https://", 0) == 0) {
    api->tls_ = true;
    rest = api->options_.server.substr(8);
  } else if (api->options_.server.rfind("http://", 0) == 0) {
    rest = api->options_.server.substr(7);
  } else {
    return fail(invalidArgument("the Kubernetes server must be an https:// or http:// URL"));
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  api->host_ = colon == std::string::npos ? rest : rest.substr(0, colon);
  api->port_ = colon == std::string::npos ? (api->tls_ ? "443" : "80") : rest.substr(colon + 1);
  if (api->host_.empty() || rest.find('/') != std::string::npos) {
    return fail(invalidArgument("the Kubernetes server must be scheme://host[:port]"));
  }
  if (api->tls_) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == nullptr) return fail(unavailable("TLS is not available"));
    api->ssl_ctx_ = ctx;
    if (api->options_.insecure) {
      SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    } else {
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
      if (!api->options_.ca_file.empty()) {
        if (SSL_CTX_load_verify_locations(ctx, api->options_.ca_file.c_str(), nullptr) != 1) {
          return fail(invalidArgument(
              fmt::format("cannot read the Kubernetes CA file {}", api->options_.ca_file)));
        }
      } else if (!api->options_.ca_pem.empty()) {
        auto certs = pemCertificates(api->options_.ca_pem);
        if (certs.empty())
          return fail(invalidArgument("the Kubernetes CA is not PEM certificates"));
        X509_STORE* store = SSL_CTX_get_cert_store(ctx);
        for (X509* cert : certs) {
          X509_STORE_add_cert(store, cert);
          X509_free(cert);
        }
      } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        return fail(unavailable("the system's CA certificates cannot be read"));
      }
    }
    if (!api->options_.client_cert_pem.empty()) {
      auto certs = pemCertificates(api->options_.client_cert_pem);
      BIO* bio = BIO_new_mem_buf(api->options_.client_key_pem.data(),
                                 static_cast<int>(api->options_.client_key_pem.size()));
      EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
      BIO_free(bio);
      bool ok = !certs.empty() && key != nullptr && SSL_CTX_use_certificate(ctx, certs[0]) == 1 &&
                SSL_CTX_use_PrivateKey(ctx, key) == 1 && SSL_CTX_check_private_key(ctx) == 1;
      // The rest of the chain, for servers that want it.
      for (size_t i = 1; ok && i < certs.size(); ++i) {
        ok = SSL_CTX_add_extra_chain_cert(ctx, certs[i]) == 1;
        if (ok) certs[i] = nullptr;  // owned by the context now
      }
      for (X509* cert : certs) X509_free(cert);
      EVP_PKEY_free(key);
      if (!ok) {
        return fail(invalidArgument(
            "the Kubernetes client certificate and key are not a matching PEM pair"));
      }
    }
  }
  return api;
}

Result<std::unique_ptr<KubeApi::Conn>> KubeApi::connect() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = ::getaddrinfo(host_.c_str(), port_.c_str(), &hints, &found); e != 0) {
    return fail(down(fmt::format("{}: {}", host_, gai_strerror(e))));
  }
  auto conn = std::make_unique<Conn>();
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && conn->fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    timeval tv{static_cast<time_t>(
                   std::chrono::duration_cast<std::chrono::seconds>(options_.timeout).count()),
               0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      conn->fd = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (conn->fd < 0) return fail(down(fmt::format("{}:{}: {}", host_, port_, why)));
  if (tls_) {
    conn->ssl = SSL_new(static_cast<SSL_CTX*>(ssl_ctx_));
    SSL_set_fd(conn->ssl, conn->fd);
    SSL_set_tlsext_host_name(conn->ssl, host_.c_str());
    if (!options_.insecure) SSL_set1_host(conn->ssl, host_.c_str());
    if (SSL_connect(conn->ssl) != 1) {
      char err[256];
      ERR_error_string_n(ERR_get_error(), err, sizeof err);
      return fail(down(fmt::format("TLS with {}: {}", host_, err)));
    }
  }
  return conn;
}

namespace {

struct Head {
  int status = 0;
  bool chunked = false;
  std::optional<size_t> length;
};

// Reads the response head from `c` (waiting up to `ms` for each piece).
template <typename C>
Result<Head> readHead(C& c, int ms) {
  size_t end;
  while ((end = c.buf.find("\r\n\r\n")) == std::string::npos) {
    if (c.buf.size() > 64 * 1024) return fail(down("a response head past 64 KiB"));
    if (!c.readable(ms) || !c.fill()) return fail(down("no answer"));
  }
  Head h;
  const std::string head = c.buf.substr(0, end);
  c.buf.erase(0, end + 4);
  if (head.size() < 12 || head.compare(0, 5, "HTTP/") != 0) return fail(down("not HTTP"));
  h.status = std::atoi(head.c_str() + 9);
  size_t at = head.find("\r\n");
  while (at != std::string::npos) {
    const size_t next = head.find("\r\n", at + 2);
    const std::string line =
        head.substr(at + 2, next == std::string::npos ? std::string::npos : next - at - 2);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      const std::string name = lower(line.substr(0, colon));
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      if (name == "transfer-encoding" && lower(value).find("chunked") != std::string::npos) {
        h.chunked = true;
      }
      if (name == "content-length") h.length = std::strtoull(value.c_str(), nullptr, 10);
    }
    at = next;
  }
  return h;
}

}  // namespace

Result<KubeReply> KubeApi::call(const std::string& method, const std::string& path,
                                const std::string& body, const std::string& content_type) {
  auto conn = PURSER_TRY_VALUE(connect());
  std::string req = fmt::format(
      "{} {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\n"
      "Connection: close\r\nUser-Agent: purser\r\n",
      method, path, host_);
  if (!options_.token.empty()) req += "Authorization: Bearer " + options_.token + "\r\n";
  if (!body.empty() || method == "POST" || method == "PATCH" || method == "PUT") {
    req += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\n", content_type, body.size());
  }
  if (!conn->writeAll(req + "\r\n" + body)) return fail(down("the request could not be sent"));
  const int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout).count());
  Head h = PURSER_TRY_VALUE(readHead(*conn, ms));
  KubeReply reply{h.status, {}};
  constexpr size_t kMax = 64 * 1024 * 1024;
  if (h.chunked) {
    while (true) {
      size_t eol;
      while ((eol = conn->buf.find("\r\n")) == std::string::npos) {
        if (!conn->readable(ms) || !conn->fill()) return fail(down("the answer was cut"));
      }
      const size_t size = std::strtoull(conn->buf.c_str(), nullptr, 16);
      conn->buf.erase(0, eol + 2);
      if (size == 0) break;
      while (conn->buf.size() < size + 2) {
        if (!conn->readable(ms) || !conn->fill()) return fail(down("the answer was cut"));
      }
      reply.body.append(conn->buf, 0, size);
      conn->buf.erase(0, size + 2);
      if (reply.body.size() > kMax) return fail(down("an answer past 64 MiB"));
    }
  } else {
    while (!h.length || conn->buf.size() < *h.length) {
      if (conn->buf.size() > kMax) return fail(down("an answer past 64 MiB"));
      if (!conn->readable(ms) || !conn->fill()) break;
    }
    reply.body = h.length ? conn->buf.substr(0, *h.length) : conn->buf;
  }
  return reply;
}

Result<KubeReply> KubeApi::watch(const std::string& path,
                                 const std::function<bool(const std::string&)>& on_line,
                                 const std::atomic<bool>& stop) {
  auto conn = PURSER_TRY_VALUE(connect());
  std::string req = fmt::format(
      "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: purser\r\n", path,
      host_);
  if (!options_.token.empty()) req += "Authorization: Bearer " + options_.token + "\r\n";
  if (!conn->writeAll(req + "\r\n")) return fail(down("the watch could not be sent"));
  const int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout).count());
  Head h = PURSER_TRY_VALUE(readHead(*conn, ms));
  if (h.status != 200) {
    KubeReply reply{h.status, conn->buf};
    return reply;
  }
  // The body, chunked (or until the end), split into lines.
  std::string data, line;
  size_t chunk_left = 0;
  bool in_chunk = false;
  bool ended = false;  // the server's last chunk came
  while (!stop) {
    // Decode what is buffered.
    while (true) {
      if (!h.chunked) {
        data += conn->buf;
        conn->buf.clear();
        break;
      }
      if (in_chunk) {
        const size_t take = std::min(chunk_left, conn->buf.size());
        data.append(conn->buf, 0, take);
        conn->buf.erase(0, take);
        chunk_left -= take;
        if (chunk_left > 0) break;
        if (conn->buf.size() < 2) break;
        conn->buf.erase(0, 2);
        in_chunk = false;
        continue;
      }
      const size_t eol = conn->buf.find("\r\n");
      if (eol == std::string::npos) break;
      chunk_left = std::strtoull(conn->buf.c_str(), nullptr, 16);
      conn->buf.erase(0, eol + 2);
      if (chunk_left == 0) {
        ended = true;  // the server ended the watch (after the lines below)
        break;
      }
      in_chunk = true;
    }
    size_t nl;
    while ((nl = data.find('\n')) != std::string::npos) {
      line = data.substr(0, nl);
      data.erase(0, nl + 1);
      if (!line.empty() && !on_line(line)) return KubeReply{200, {}};
    }
    if (ended) return KubeReply{200, {}};
    if (data.size() > 16 * 1024 * 1024) return fail(down("a watch event past 16 MiB"));
    if (!conn->readable(1000)) continue;  // quiet: check `stop` and wait on
    if (!conn->fill()) return KubeReply{200, {}};
  }
  return KubeReply{200, {}};
}

}  // namespace purser::exec
