// Server: an HTTP/1.1 server (plain or TLS) on the Workers' threads.
//
// Each connection is one coroutine on one worker. Requests on a connection are served strictly
// in order, one at a time: a pipelining client gets its responses in order and can never make the
// server buffer more than one request's header limit ahead of the request being handled. Every
// socket operation has a deadline (idle, header, body, write), every message a size limit
// (431 for headers, 413 for bodies, decided from Content-Length before the body is read), and the
// number of connections is bounded. shutdown() stops accepting, closes idle connections, lets
// requests in flight finish within the drain timeout and then closes what is left.
//
// Thread-safety: construct, listen() and start() from one thread; shutdown() may be called from
// any thread. Handlers run on worker threads, concurrently with each other.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/result.h"
#include "http/message.h"
#include "http/metrics.h"
#include "http/router.h"
#include "http/tls_server.h"
#include "http/workers.h"

namespace purser::http {

// Renders an error the server produces itself (400, 404, 405, 413, 431, 500, 503). `request` is
// null when the request could not be parsed. The default writes RFC 7807 problem+json.
using ErrorRenderer =
    std::function<Response(int status, std::string_view detail, const Request* request)>;
Response problemResponse(int status, std::string_view detail, const Request* request);

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0 picks a free port; read it back with Server::port()
  size_t max_body_bytes = 16 * 1024 * 1024;
  size_t max_header_bytes = 32 * 1024;
  size_t max_nesting = 128;  // JSON and YAML bodies: the deepest nesting handlers accept
  size_t max_connections = 10'000;
  size_t max_requests_per_connection = 10'000;                         // 0: unlimited
  std::chrono::nanoseconds idle_timeout = std::chrono::seconds(60);    // between requests
  std::chrono::nanoseconds header_timeout = std::chrono::seconds(10);  // first byte to last header
  std::chrono::nanoseconds body_timeout = std::chrono::seconds(60);    // whole request body
  std::chrono::nanoseconds write_timeout = std::chrono::seconds(60);   // each write to the client
  std::chrono::nanoseconds drain_timeout = std::chrono::seconds(10);
  std::optional<TlsOptions> tls;  // HTTPS only: a plain HTTP request is answered 400 and closed
  // How often the certificate, key and client CA files are checked for a change (re-read when
  // one changed); zero: only when reloadTls() is called (SIGHUP).
  std::chrono::nanoseconds tls_watch_interval = std::chrono::seconds(10);
  ErrorRenderer render_error = problemResponse;
};

class Server {
 public:
  // `clock` times each request for the latency histogram; the socket deadlines are Asio's timers.
  Server(ServerOptions options, Router& router, Workers& workers, MetricsRegistry& metrics,
         const Clock& clock = SystemClock::instance());
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket (and loads the TLS certificate). A clear error when the address
  // is taken or the certificate cannot be read.
  Result<void> listen();
  uint16_t port() const;
  // "http://127.0.0.1:8080" (https when TLS is on).
  std::string url() const;

  // Starts accepting on the workers (they may be started before or after).
  void start();
  // Begins a graceful shutdown; `on_drained` runs (on a worker thread) once every connection has
  // closed. Safe to call from any thread, more than once (later calls are ignored).
  void shutdown(std::function<void()> on_drained);
  bool draining() const;
  size_t connections() const;

  // Re-reads the TLS certificate, key and client CA: connections accepted from now on get them,
  // open ones keep theirs. An error (and the old ones kept) when they cannot be used; nothing to
  // do without TLS. Safe from any thread.
  Result<void> reloadTls();
  // How many times the certificate was replaced (by reloadTls() or a changed file).
  uint64_t tlsReloads() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace purser::http
