#include "http/server.h"

#include <utility>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <array>
#include <atomic>
#include <unordered_set>

#include "common/duration.h"
#include "common/logging.h"
#include "http/request_parser.h"

namespace purser::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;
using boost::system::error_code;
// Connections use the worker's concrete executor type rather than the type-erased
// any_io_executor: every socket operation and timeout is cheaper.
using Executor = net::io_context::executor_type;
using TcpSocket = net::basic_stream_socket<tcp, Executor>;
using TcpStream = beast::basic_stream<tcp, Executor>;

Response problemResponse(int status, std::string_view detail, const Request* /*request*/) {
  Response r = Response::text(
      status,
      fmt::format(R"({{"type":"about:blank","title":"{}","status":{},"detail":"{}"}})",
                  statusReason(status), status, jsonEscape(detail)),
      "application/problem+json");
  return r;
}

namespace {

// What the server keeps per route: request counts by status class and latency.
struct RouteMetrics {
  std::array<Counter*, 5> by_class{};  // 1xx..5xx
  Histogram* latency = nullptr;
};

const char* const kClassNames[5] = {"1xx", "2xx", "3xx", "4xx", "5xx"};

// One live connection, as seen by shutdown. Touched only on its worker's thread.
struct Conn {
  bool idle = true;                   // waiting for the first byte of a request
  bool close_after_response = false;  // set when draining begins mid-request
  std::function<void()> close;        // closes the socket; pending operations end
};

bool isDisconnect(const error_code& ec) {
  return ec == net::error::eof || ec == beast::http::error::end_of_stream ||
         ec == net::error::connection_reset || ec == net::error::operation_aborted ||
         ec == net::error::broken_pipe || ec == net::error::bad_descriptor ||
         ec == net::ssl::error::stream_truncated || ec == net::error::not_connected;
}

bool isToken(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (c <= 32 || c >= 127 ||
        std::string_view("()<>@,;:\\\"/[]?={}").find(static_cast<char>(c)) !=
            std::string_view::npos) {
      return false;
    }
  }
  return true;
}

bool isFieldValue(std::string_view s) {
  for (unsigned char c : s) {
    if ((c < 32 && c != '\t') || c == 127) return false;
  }
  return true;
}

// How a response body is delimited.
struct Framing {
  enum Kind { kLength, kChunked, kNone } kind;  // kNone: no body (204, 1xx) or until close
  size_t length = 0;
};

// The status line and header block of a response. Framing headers (Content-Length,
// Transfer-Encoding, Connection) are the server's; a handler's own are dropped.
void appendHead(std::string& out, int status, const Headers& headers, int version, bool close,
                Framing framing) {
  out += version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += statusReason(status);
  out += "\r\nServer: purser\r\n";
  for (const auto& [name, value] : headers) {
    if (equalsIgnoreCase(name, "content-length") || equalsIgnoreCase(name, "transfer-encoding") ||
        equalsIgnoreCase(name, "connection")) {
      continue;
    }
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  if (framing.kind == Framing::kLength) {
    out += "Content-Length: ";
    out += std::to_string(framing.length);
    out += "\r\n";
  } else if (framing.kind == Framing::kChunked) {
    out += "Transfer-Encoding: chunked\r\n";
  }
  if (close) {
    out += "Connection: close\r\n";
  } else if (version == 10) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
}

}  // namespace

class Server::Impl {
 public:
  Impl(ServerOptions options, Router& router, Workers& workers, MetricsRegistry& metrics,
       const Clock& clock)
      : options_(std::move(options)),
        clock_(clock),
        router_(router),
        workers_(workers),
        acceptor_(workers.context(0)),
        drain_timer_(workers.context(0)),
        watch_timer_(workers.context(0)),
        registry_(std::make_shared<Registry>(workers.size())),
        connections_active_(
            metrics.gauge("purser_http_connections_active", "Client connections open now.")),
        connections_total_(
            metrics.counter("purser_http_connections_total", "Client connections accepted.")),
        rejected_(metrics.counterFamily(
            "purser_http_rejected_total",
            "Requests or connections refused by a server limit, by reason.", {"reason"})),
        rejected_max_connections_(rejected_.labels({"max_connections"})),
        rejected_header_(rejected_.labels({"header_too_large"})),
        rejected_body_(rejected_.labels({"body_too_large"})),
        rejected_timeout_(rejected_.labels({"timeout"})),
        rejected_malformed_(rejected_.labels({"malformed"})) {
    auto& requests = metrics.counterFamily("purser_http_requests_total",
                                           "HTTP requests served, by route and status class.",
                                           {"route", "method", "code"});
    auto& latency =
        metrics.histogramFamily("purser_http_request_duration_seconds",
                                "Time from a request's last byte to its response's last byte.",
                                {"route", "method"}, latencyBuckets());
    const auto make = [&](const std::string& route, std::string_view method) {
      auto m = std::make_shared<RouteMetrics>();
      for (int c = 0; c < 5; ++c) {
        m->by_class[static_cast<size_t>(c)] =
            &requests.labels({route, std::string(method), kClassNames[c]});
      }
      m->latency = &latency.labels({route, std::string(method)});
      return m;
    };
    for (Route* r : router_.routes()) r->server_data = make(r->pattern, methodName(r->method));
    unmatched_ = make("unmatched", "any");
  }

  Result<void> listen() {
    if (options_.tls) tls_ = PURSER_TRY_VALUE(TlsServerContext::open(*options_.tls));
    error_code ec;
    const auto address = net::ip::make_address(options_.host, ec);
    if (ec) {
      return fail(invalidArgument(
          fmt::format("listen address \"{}\" is not an IP address", options_.host)));
    }
    const tcp::endpoint endpoint(address, options_.port);
    const auto where = fmt::format("{}:{}", options_.host, options_.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return fail(unavailable(
          fmt::format("cannot listen on {}: {}{}", where, ec.message(),
                      ec == net::error::address_in_use
                          ? " (another process has it: choose another address with `listen:` in "
                            "the configuration or --listen HOST:PORT)"
                          : "")));
    }
    port_ = acceptor_.local_endpoint().port();
    return {};
  }

  uint16_t port() const { return port_; }
  std::string url() const {
    const bool v6 = options_.host.find(':') != std::string::npos;
    return fmt::format("{}://{}{}{}:{}", tls_ ? "https" : "http", v6 ? "[" : "", options_.host,
                       v6 ? "]" : "", port_);
  }

  Result<void> reloadTls() {
    if (!tls_) return {};
    auto reloaded = tls_->reload();
    if (!reloaded) {
      spdlog::error("http: the new TLS certificate is refused, the old one stays: {}",
                    reloaded.error().message);
      return reloaded;
    }
    spdlog::info("http: TLS certificate {} re-read; new connections get it",
                 tls_->options().cert_file);
    return {};
  }
  uint64_t tlsReloads() const { return tls_ ? tls_->reloads() : 0; }

  // Checks the certificate files every tls_watch_interval and re-reads them when one changed.
  void watchTls() {
    if (!tls_ || options_.tls_watch_interval <= std::chrono::nanoseconds::zero()) return;
    watch_timer_.expires_after(options_.tls_watch_interval);
    watch_timer_.async_wait([this](const error_code& ec) {
      if (ec || draining_.load()) return;
      if (tls_->filesChanged()) (void)reloadTls();
      watchTls();
    });
  }

  void start() {
    net::post(workers_.context(0), [this] { watchTls(); });
    net::co_spawn(workers_.context(0), acceptLoop(), [](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          spdlog::error("http: accept loop ended: {}", ex.what());
        }
      }
    });
  }

  void shutdown(std::function<void()> on_drained) {
    net::post(workers_.context(0), [this, on_drained = std::move(on_drained)]() mutable {
      if (draining_.exchange(true)) return;
      on_drained_ = std::move(on_drained);
      error_code ec;
      acceptor_.close(ec);
      watch_timer_.cancel();
      spdlog::info("http: draining {} connection(s), at most {}", connections(),
                   formatDuration(options_.drain_timeout));
      forEachConn([](Conn& c) {
        if (c.idle) {
          c.close();
        } else {
          c.close_after_response = true;
        }
      });
      drain_timer_.expires_after(options_.drain_timeout);
      drain_timer_.async_wait([this](const error_code& wait_ec) {
        if (wait_ec) return;
        if (connections() > 0) {
          spdlog::warn("http: drain timeout; closing {} connection(s)", connections());
        }
        forEachConn([](Conn& c) { c.close(); });
        // A handler that ignores its closed connection must not hold shutdown up for ever.
        finishDrain();
      });
      maybeDrained();
    });
  }

  bool draining() const { return draining_.load(); }
  size_t connections() const { return connections_.load(); }

 private:
  // Runs `f` on every live connection, each on its own worker's thread.
  void forEachConn(std::function<void(Conn&)> f) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      net::post(workers_.context(i), [this, i, f] {
        // Copy: closing a connection may remove it from the set while we iterate.
        auto& live = registry_->live[i];
        std::vector<Conn*> conns(live.begin(), live.end());
        for (Conn* c : conns) {
          if (live.contains(c)) f(*c);
        }
      });
    }
  }

  void maybeDrained() {
    if (!draining_.load() || connections_.load() != 0) return;
    finishDrain();
  }

  void finishDrain() {
    if (drained_.exchange(true)) return;
    net::post(workers_.context(0), [this] {
      drain_timer_.cancel();
      if (on_drained_) on_drained_();
    });
  }

  net::awaitable<void> acceptLoop() {
    for (;;) {
      net::io_context& ctx = workers_.next();
      error_code ec;
      TcpSocket socket =
          co_await acceptor_.async_accept(ctx, net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        if (ec == net::error::operation_aborted || !acceptor_.is_open()) co_return;
        // Out of file descriptors and the like: back off briefly instead of spinning.
        spdlog::warn("http: accept failed: {}", ec.message());
        net::steady_timer pause(co_await net::this_coro::executor, std::chrono::milliseconds(50));
        co_await pause.async_wait(net::redirect_error(net::use_awaitable, ec));
        continue;
      }
      if (draining_.load()) {
        socket.close(ec);
        continue;
      }
      if (connections_.load() >= options_.max_connections) {
        rejected_max_connections_.inc();
        socket.close(ec);
        continue;
      }
      connections_.fetch_add(1);
      connections_total_.inc();
      connections_active_.add(1);
      net::co_spawn(ctx, runConnection(std::move(socket)), [this](std::exception_ptr e) {
        if (e) {
          try {
            std::rethrow_exception(e);
          } catch (const std::exception& ex) {
            spdlog::error("http: connection ended with an exception: {}", ex.what());
          }
        }
        connections_active_.sub(1);
        connections_.fetch_sub(1);
        maybeDrained();
      });
    }
  }

  net::awaitable<void> runConnection(TcpSocket socket) {
    error_code ec;
    socket.set_option(tcp::no_delay(true), ec);
    const auto remote = socket.remote_endpoint(ec);
    std::string remote_address =
        ec ? std::string("unknown")
           : fmt::format("{}:{}", remote.address().to_string(), remote.port());
    if (tls_) {
      // The connection keeps the context it was accepted with through a reload.
      const std::shared_ptr<ssl::context> context = tls_->current();
      ssl::stream<TcpStream> stream(TcpStream(std::move(socket)), *context);
      beast::get_lowest_layer(stream).expires_after(options_.header_timeout);
      co_await stream.async_handshake(ssl::stream_base::server,
                                      net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        if (ec.category() == net::error::get_ssl_category() &&
            ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_HTTP_REQUEST) {
          // Plain HTTP on the HTTPS port: say so in HTTP rather than leave the client guessing.
          rejected_malformed_.inc();
          static const std::string kPlain = [] {
            const std::string_view body = "This port speaks HTTPS: send the request to https://.\n";
            return fmt::format(
                "HTTP/1.1 400 Bad Request\r\nServer: purser\r\nContent-Type: text/plain\r\n"
                "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                body.size(), body);
          }();
          auto& lowest = beast::get_lowest_layer(stream);
          lowest.expires_after(options_.write_timeout);
          co_await net::async_write(lowest, net::buffer(kPlain.data(), kPlain.size()),
                                    net::redirect_error(net::use_awaitable, ec));
          lowest.socket().shutdown(tcp::socket::shutdown_send, ec);
        }
        spdlog::debug("http: TLS handshake with {} failed: {}", remote_address, ec.message());
        co_return;
      }
      co_await serve(stream, remote_address, peerSubject(stream.native_handle()));
    } else {
      TcpStream stream(std::move(socket));
      co_await serve(stream, remote_address, std::string());
    }
  }

  // The live connections of each worker. Shared with every connection, because a connection's
  // coroutine can be destroyed after the server (when workers stop with a handler still
  // suspended, its frame is destroyed with the io_context).
  struct Registry {
    explicit Registry(size_t workers) : live(workers) {}
    std::vector<std::unordered_set<Conn*>> live;  // [worker]; touched only on that worker
  };

  // Registers a connection for shutdown for as long as it lives.
  template <typename Stream>
  struct Registration {
    Registration(std::shared_ptr<Registry> r, Stream& stream) : registry(std::move(r)) {
      index = static_cast<size_t>(std::max(0, Workers::currentIndex()));
      conn.close = [&stream] { beast::get_lowest_layer(stream).close(); };
      registry->live[index].insert(&conn);
    }
    ~Registration() { registry->live[index].erase(&conn); }
    std::shared_ptr<Registry> registry;
    size_t index;
    Conn conn;
  };

  template <typename Stream>
  class StreamWriter final : public BodyWriter {
   public:
    StreamWriter(Stream& stream, bool chunked, std::chrono::nanoseconds timeout)
        : stream_(stream), chunked_(chunked), timeout_(timeout) {}

    net::awaitable<Result<void>> write(std::string_view data) override {
      if (failed_) co_return fail(unavailable("the client connection is closed"));
      if (data.empty()) co_return Result<void>{};  // an empty chunk would end the body
      error_code ec;
      beast::get_lowest_layer(stream_).expires_after(timeout_);
      if (chunked_) {
        char size_line[24];
        const int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
        const std::array<net::const_buffer, 3> chunk{net::buffer(size_line, static_cast<size_t>(n)),
                                                     net::buffer(data.data(), data.size()),
                                                     net::buffer("\r\n", 2)};
        co_await net::async_write(stream_, chunk, net::redirect_error(net::use_awaitable, ec));
      } else {
        co_await net::async_write(stream_, net::buffer(data.data(), data.size()),
                                  net::redirect_error(net::use_awaitable, ec));
      }
      if (ec) {
        failed_ = true;
        co_return fail(unavailable(fmt::format("writing to the client failed: {}", ec.message())));
      }
      co_return Result<void>{};
    }
    bool failed() const { return failed_; }

   private:
    Stream& stream_;
    bool chunked_;
    std::chrono::nanoseconds timeout_;
    bool failed_ = false;
  };

  template <typename Stream>
  net::awaitable<void> serve(Stream& stream, const std::string& remote_address,
                             const std::string& tls_client_subject) {
    Registration<Stream> reg(registry_, stream);
    Conn& conn = reg.conn;
    auto& lowest = beast::get_lowest_layer(stream);
    // Holds at most one request's header (plus what arrived with it) ahead of the handler.
    beast::flat_buffer buffer(options_.max_header_bytes + 64 * 1024);
    std::string head;  // the response head, reused across the connection's requests
    size_t served = 0;
    error_code ec;

    for (;;) {
      conn.idle = true;
      if (draining_.load()) break;
      if (buffer.size() == 0) {
        lowest.expires_after(options_.idle_timeout);
        const size_t n = co_await stream.async_read_some(
            buffer.prepare(16 * 1024), net::redirect_error(net::use_awaitable, ec));
        if (ec) break;  // closed, idle timeout, or shutdown
        buffer.commit(n);
      }
      conn.idle = false;

      Request request;
      RequestParser parser(request);
      parser.header_limit(static_cast<std::uint32_t>(options_.max_header_bytes));
      parser.body_limit(options_.max_body_bytes);
      parser.bodyLimitHint(options_.max_body_bytes);
      lowest.expires_after(options_.header_timeout);
      co_await bhttp::async_read_header(stream, buffer, parser,
                                        net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
          rejected_header_.inc();
          co_await sendError(stream, 431,
                             fmt::format("request header exceeds the limit of {} bytes",
                                         options_.max_header_bytes));
          co_await lingeringClose(stream);
        } else if (ec == bhttp::error::body_limit) {
          co_await rejectBody(stream);
        } else if (ec == beast::error::timeout) {
          rejected_timeout_.inc();
          spdlog::debug("http: {} sent no complete header in time; closing", remote_address);
        } else if (!isDisconnect(ec)) {
          rejected_malformed_.inc();
          co_await sendError(stream, 400, fmt::format("malformed HTTP request: {}", ec.message()));
          co_await lingeringClose(stream);
        }
        break;
      }
      // Decided from Content-Length alone, before any of the body is read. (Boost 1.74's parser
      // can also drop its own body-limit error when body bytes arrive with the header.)
      if (parser.content_length() && *parser.content_length() > options_.max_body_bytes) {
        co_await rejectBody(stream);
        break;
      }
      if (!parser.is_done()) {
        const auto expect = request.headers.get("expect");
        if (expect && equalsIgnoreCase(*expect, "100-continue")) {
          static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          lowest.expires_after(options_.write_timeout);
          co_await net::async_write(stream, net::buffer(kContinue.data(), kContinue.size()),
                                    net::redirect_error(net::use_awaitable, ec));
          if (ec) break;
        }
        lowest.expires_after(options_.body_timeout);
        co_await bhttp::async_read(stream, buffer, parser,
                                   net::redirect_error(net::use_awaitable, ec));
        if (ec) {
          if (ec == bhttp::error::body_limit) {
            co_await rejectBody(stream);
          } else if (ec == beast::error::timeout) {
            rejected_timeout_.inc();
          } else if (!isDisconnect(ec)) {
            rejected_malformed_.inc();
            co_await sendError(stream, 400,
                               fmt::format("malformed HTTP request body: {}", ec.message()));
            co_await lingeringClose(stream);
          }
          break;
        }
      }
      lowest.expires_never();
      request.remote_address = remote_address;
      request.tls_client_subject = tls_client_subject;
      const bool client_keep_alive = parser.keep_alive();
      ++served;

      const MonoTime started = clock_.monotonic();
      auto [response, metrics] = co_await dispatch(request);
      const bool close = !client_keep_alive || response.close || draining_.load() ||
                         conn.close_after_response ||
                         (options_.max_requests_per_connection > 0 &&
                          served >= options_.max_requests_per_connection);
      const bool ok = co_await writeResponse(stream, request, response, close, head);
      const int cls = std::clamp(response.status / 100, 1, 5) - 1;
      metrics->by_class[static_cast<size_t>(cls)]->inc();
      metrics->latency->observe(
          std::chrono::duration<double>(clock_.monotonic() - started).count());
      if (!ok || close) break;
    }
    // Tell the client we are done sending, so it sees a clean end rather than a reset.
    if constexpr (std::is_same_v<Stream, TcpStream>) {
      lowest.socket().shutdown(tcp::socket::shutdown_send, ec);
    }
  }

  net::awaitable<std::pair<Response, RouteMetrics*>> dispatch(Request& request) {
    request.max_nesting = options_.max_nesting;
    // Bytes no handler should see: every path parameter and query value is valid UTF-8.
    if (auto problem = request.targetProblem()) {
      rejected_malformed_.inc();
      co_return std::pair{options_.render_error(400, *problem, &request), unmatched_.get()};
    }
    Router::Match match = router_.match(request);
    if (match.route == nullptr) {
      if (!match.allow.empty()) {
        Response r = options_.render_error(405,
                                           fmt::format("method {} is not allowed here; allowed: {}",
                                                       request.method_name, match.allow),
                                           &request);
        r.headers.set("Allow", match.allow);
        co_return std::pair{std::move(r), unmatched_.get()};
      }
      co_return std::pair{
          options_.render_error(404, fmt::format("no route for {}", request.path()), &request),
          unmatched_.get()};
    }
    auto* metrics = static_cast<RouteMetrics*>(match.route->server_data.get());
    if (metrics == nullptr) metrics = unmatched_.get();
    try {
      if (auto* sync = std::get_if<SyncHandler>(&match.route->handler)) {
        co_return std::pair{(*sync)(request), metrics};
      }
      co_return std::pair{co_await std::get<AsyncHandler>(match.route->handler)(request), metrics};
    } catch (const std::exception& e) {
      spdlog::error("http: handler for {} {} threw: {}", request.method_name, request.path(),
                    e.what());
    }
    co_return std::pair{options_.render_error(500, "internal error", &request), metrics};
  }

  // A response whose handler set header fields that cannot be sent safely is replaced by a
  // 500: a header value with CR or LF would let a handler's input split the response.
  Response checkedHeaders(Response response, const Request& request) {
    for (const auto& [name, value] : response.headers) {
      if (!isToken(name) || !isFieldValue(value)) {
        spdlog::error("http: handler for {} {} set an invalid header field \"{}\"",
                      request.method_name, request.path(), jsonEscape(name));
        return options_.render_error(500, "internal error", &request);
      }
    }
    return response;
  }

  template <typename Stream>
  net::awaitable<bool> writeResponse(Stream& stream, const Request& request, Response& response,
                                     bool close, std::string& head) {
    auto& lowest = beast::get_lowest_layer(stream);
    const int version = request.version == 10 ? 10 : 11;
    error_code ec;
    if (response.abort) co_return false;  // close without a word
    if (!response.headers.empty()) response = checkedHeaders(std::move(response), request);
    head.clear();
    if (response.stream && request.method != Method::kHead) {
      // HTTP/1.0 has no chunked encoding: the body ends when the connection does.
      const bool chunked = version == 11;
      appendHead(head, response.status, response.headers, version, close || !chunked,
                 {chunked ? Framing::kChunked : Framing::kNone});
      lowest.expires_after(options_.write_timeout);
      co_await net::async_write(stream, net::buffer(head),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return false;
      StreamWriter<Stream> writer(stream, chunked, options_.write_timeout);
      try {
        co_await response.stream(writer);
      } catch (const AbortStream&) {
        co_return false;  // on purpose: the connection closes with the body unfinished
      } catch (const std::exception& e) {
        spdlog::error("http: stream for {} threw: {}", request.path(), e.what());
        co_return false;  // the body is incomplete: closing tells the client so
      }
      if (writer.failed()) co_return false;
      if (chunked) {
        lowest.expires_after(options_.write_timeout);
        co_await net::async_write(stream, net::buffer("0\r\n\r\n", 5),
                                  net::redirect_error(net::use_awaitable, ec));
        if (ec) co_return false;
      }
      co_return chunked;
    }
    // 1xx, 204 and 304 carry no body (and 204/1xx no Content-Length).
    const bool bodiless = response.status < 200 || response.status == 204 || response.status == 304;
    const bool no_length = response.status < 200 || response.status == 204;
    appendHead(
        head, response.status, response.headers, version, close,
        no_length ? Framing{Framing::kNone} : Framing{Framing::kLength, response.body.size()});
    const bool send_body = request.method != Method::kHead && !bodiless && !response.body.empty();
    const std::array<net::const_buffer, 2> buffers{
        net::buffer(head), send_body ? net::buffer(response.body) : net::const_buffer()};
    lowest.expires_after(options_.write_timeout);
    co_await net::async_write(stream, buffers, net::redirect_error(net::use_awaitable, ec));
    if (ec == beast::error::timeout) rejected_timeout_.inc();  // a client that stopped reading
    co_return !ec;
  }

  template <typename Stream>
  net::awaitable<void> sendError(Stream& stream, int status, std::string detail) {
    Response r = options_.render_error(status, detail, nullptr);
    Request dummy;
    std::string head;
    co_await writeResponse(stream, dummy, r, /*close=*/true, head);
  }

  template <typename Stream>
  net::awaitable<void> rejectBody(Stream& stream) {
    rejected_body_.inc();
    co_await sendError(
        stream, 413,
        fmt::format("request body exceeds the limit of {} bytes", options_.max_body_bytes));
    co_await lingeringClose(stream);
  }

  // After an error response sent before the request was read in full: stop sending, then read
  // and discard for a short, bounded while so the client reads our response instead of a reset.
  template <typename Stream>
  net::awaitable<void> lingeringClose(Stream& stream) {
    auto& lowest = beast::get_lowest_layer(stream);
    error_code ec;
    if constexpr (std::is_same_v<Stream, TcpStream>) {
      lowest.socket().shutdown(tcp::socket::shutdown_send, ec);
    }
    static constexpr size_t kMaxDiscard = 256 * 1024;
    static constexpr auto kMaxLinger = std::chrono::seconds(2);
    std::array<char, 16 * 1024> sink;
    size_t discarded = 0;
    lowest.expires_after(kMaxLinger);
    while (discarded < kMaxDiscard) {
      const size_t n = co_await lowest.async_read_some(net::buffer(sink),
                                                       net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
      discarded += n;
    }
    lowest.close();
  }

  ServerOptions options_;
  const Clock& clock_;
  Router& router_;
  Workers& workers_;
  tcp::acceptor acceptor_;
  net::steady_timer drain_timer_;
  net::steady_timer watch_timer_;  // on context 0
  std::unique_ptr<TlsServerContext> tls_;
  uint16_t port_ = 0;
  std::atomic<bool> draining_{false};
  std::atomic<bool> drained_{false};
  std::atomic<size_t> connections_{0};
  std::function<void()> on_drained_;  // set once, on context 0
  std::shared_ptr<Registry> registry_;
  Gauge& connections_active_;
  Counter& connections_total_;
  Family<Counter>& rejected_;
  Counter& rejected_max_connections_;
  Counter& rejected_header_;
  Counter& rejected_body_;
  Counter& rejected_timeout_;
  Counter& rejected_malformed_;
  std::shared_ptr<RouteMetrics> unmatched_;
};

Server::Server(ServerOptions options, Router& router, Workers& workers, MetricsRegistry& metrics,
               const Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(options), router, workers, metrics, clock)) {}
Server::~Server() = default;
Result<void> Server::listen() { return impl_->listen(); }
uint16_t Server::port() const { return impl_->port(); }
std::string Server::url() const { return impl_->url(); }
void Server::start() { impl_->start(); }
void Server::shutdown(std::function<void()> on_drained) { impl_->shutdown(std::move(on_drained)); }
bool Server::draining() const { return impl_->draining(); }
size_t Server::connections() const { return impl_->connections(); }
Result<void> Server::reloadTls() { return impl_->reloadTls(); }
uint64_t Server::tlsReloads() const { return impl_->tlsReloads(); }

}  // namespace purser::http
