// HttpClient: a pooled keep-alive HTTP/1.1 client (HTTP and HTTPS) for upstream calls.
//
// Connections are kept per host and reused; a request on a reused connection that the peer had
// already closed is retried once on a fresh connection when nothing of the response arrived.
// Every step has a deadline: connect (DNS, TCP and TLS handshake together), write, and read (for
// request(): the whole response; for a stream: its header and each silence between pieces). HTTPS
// verifies the peer's certificate and host name against the system trust store (plus an optional CA
// file).
//
// Thread-safety: a client belongs to one io_context (one worker) and must only be used from
// coroutines running on it; give each worker its own (WorkerLocal<HttpClient>). A ClientStream
// must not outlive the client that made it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/result.h"
#include "http/message.h"

namespace boost::asio {
class io_context;
}

namespace purser::http {

struct ClientOptions {
  std::chrono::nanoseconds connect_timeout = std::chrono::seconds(10);
  std::chrono::nanoseconds write_timeout = std::chrono::seconds(30);
  std::chrono::nanoseconds read_timeout = std::chrono::seconds(120);
  size_t max_idle_per_host = 64;
  std::chrono::nanoseconds idle_ttl = std::chrono::seconds(60);
  size_t max_response_bytes = 64 * 1024 * 1024;  // request(): larger bodies are an error
  size_t max_response_header_bytes = 64 * 1024;
  bool verify_tls = true;
  std::string ca_file;  // extra PEM trust anchors, e.g. a private CA
  std::string ca_pem;   // the same given as PEM text (a kubeconfig's certificate-authority-data)
  // Whether the system's trust store counts besides ca_file and ca_pem (a Kubernetes API server
  // is trusted only by the CA its kubeconfig names).
  bool system_trust = true;
  // A client certificate (PEM, the chain after it) and its key, for servers that ask for one.
  std::string client_cert_pem, client_key_pem;
  std::string user_agent = "purser";
};

// TLS settings of their own for some upstreams (a provider's private CA, its client
// certificate, or no verification at all), made once from the TLS fields of a ClientOptions
// (verify_tls, ca_file, ca_pem, system_trust, client_cert_pem, client_key_pem) and shared by every
// worker's client. A request that names one is connected with it, and its connections are pooled
// apart from those made with other settings.
class TlsProfile;
// kInvalidArgument as HttpClient::checkTls() says.
Result<std::shared_ptr<const TlsProfile>> makeTlsProfile(const ClientOptions& tls);

struct ClientRequest {
  Method method = Method::kGet;
  std::string url;  // absolute: http://host:port/path
  Headers headers;
  std::string body;
  // Deadline for the response once the request is sent (default: read_timeout): for request()
  // the whole response; for stream() its header and then each silence between pieces.
  std::optional<std::chrono::nanoseconds> timeout;
  // For request(): the largest body accepted (default: ClientOptions::max_response_bytes).
  std::optional<size_t> max_response_bytes;
  // For stream(): each silence between pieces once the header came (default: timeout), for a
  // long watch whose header must come soon.
  std::optional<std::chrono::nanoseconds> idle_timeout;
  // HTTPS: the settings to connect with (null: the client's own options).
  std::shared_ptr<const TlsProfile> tls;
};

struct ClientResponse {
  int status = 0;
  Headers headers;
  std::string body;
};

// A response whose body is read piece by piece as it arrives (server-sent events).
class ClientStream {
 public:
  virtual ~ClientStream() = default;
  virtual int status() const = 0;
  virtual const Headers& headers() const = 0;
  // The next piece of the body; std::nullopt once the body is complete.
  virtual asio::awaitable<Result<std::optional<std::string>>> next() = 0;
  // Ends the stream: a next() waiting now ends with kCancelled, and the connection is closed.
  // On the client's thread, between its handlers (a blocking caller running the io_context).
  virtual void cancel() = 0;
};

class HttpClient {
 public:
  // `clock` dates the pooled connections (idle_ttl); the socket deadlines are Asio's timers.
  HttpClient(asio::io_context& context, ClientOptions options,
             const Clock& clock = SystemClock::instance());
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends the request and reads the whole response. Errors: kInvalidArgument (bad URL),
  // kUnavailable (cannot connect, TLS failure, connection lost), kDeadlineExceeded,
  // kResourceExhausted (response over the size limit).
  asio::awaitable<Result<ClientResponse>> request(ClientRequest request);
  // Sends the request and returns once the response header has arrived.
  asio::awaitable<Result<std::unique_ptr<ClientStream>>> stream(ClientRequest request);

  // kInvalidArgument naming what of `options`' TLS settings cannot be used (a CA file that
  // cannot be read, a CA that holds no certificate, a client key that is not its certificate's).
  // A client made with such options fails every HTTPS request with that error.
  static Result<void> checkTls(const ClientOptions& options);

  struct Stats {
    uint64_t requests = 0;
    uint64_t connections_opened = 0;
    uint64_t connections_reused = 0;
    uint64_t retries = 0;
    size_t idle = 0;
  };
  Stats stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace purser::http
