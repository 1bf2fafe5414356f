#include "http/client.h"

#include <utility>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <deque>
#include <limits>
#include <unordered_map>

#include "http/url.h"

namespace purser::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;
using boost::system::error_code;

namespace {

struct Connection {
  std::string key;
  std::shared_ptr<const TlsProfile> profile;
  std::unique_ptr<beast::tcp_stream> plain;
  std::unique_ptr<ssl::stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;
  MonoTime idle_since;
  bool reused = false;

  beast::tcp_stream& lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
};

bool isStaleConnectionError(const error_code& ec) {
  return ec == net::error::eof || ec == bhttp::error::end_of_stream ||
         ec == net::error::connection_reset || ec == net::error::broken_pipe ||
         ec == net::ssl::error::stream_truncated;
}

Error mapError(const error_code& ec, std::string_view what, const Url& url) {
  if (ec == beast::error::timeout) {
    return Error(ErrorCode::kDeadlineExceeded,
                 fmt::format("{} {} timed out", what, url.authority()));
  }
  if (ec == bhttp::error::body_limit) {
    return Error(ErrorCode::kResourceExhausted,
                 fmt::format("response from {} exceeds the size limit", url.authority()));
  }
  return unavailable(fmt::format("{} {} failed: {}", what, url.authority(), ec.message()));
}

void copyHeaders(const bhttp::fields& from, Headers& to) {
  for (const auto& f : from) {
    to.add(std::string(f.name_string().data(), f.name_string().size()),
           std::string(f.value().data(), f.value().size()));
  }
}

// Sets `ctx` up as `o` says: the protocols, whom to trust, the client certificate.
Result<void> configureTls(ssl::context& ctx, const ClientOptions& o) {
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                  ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  error_code ec;
  if (o.verify_tls) {
    if (o.system_trust) ctx.set_default_verify_paths(ec);
    if (!o.ca_file.empty()) {
      ctx.load_verify_file(o.ca_file, ec);
      if (ec) return fail(invalidArgument(fmt::format("the CA file {} cannot be read", o.ca_file)));
    }
    if (!o.ca_pem.empty()) {
      ctx.add_certificate_authority(net::buffer(o.ca_pem), ec);
      if (ec) return fail(invalidArgument("the CA is not PEM certificates"));
    }
    ctx.set_verify_mode(ssl::verify_peer);
  } else {
    ctx.set_verify_mode(ssl::verify_none);
  }
  if (!o.client_cert_pem.empty() || !o.client_key_pem.empty()) {
    error_code cert_ec, key_ec;
    ctx.use_certificate_chain(net::buffer(o.client_cert_pem), cert_ec);
    if (!cert_ec) ctx.use_private_key(net::buffer(o.client_key_pem), ssl::context::pem, key_ec);
    const bool ok = !cert_ec && !key_ec && SSL_CTX_check_private_key(ctx.native_handle()) == 1;
    ERR_clear_error();
    if (!ok) {
      return fail(invalidArgument("the client certificate and key are not a matching PEM pair"));
    }
  }
  return {};
}

}  // namespace

class TlsProfile {
 public:
  explicit TlsProfile(const ClientOptions& o)
      : context(ssl::context::tls_client), verify(o.verify_tls) {}
  mutable ssl::context context;  // only read once made: SSL_new takes a non-const handle
  const bool verify;
};

Result<std::shared_ptr<const TlsProfile>> makeTlsProfile(const ClientOptions& tls) {
  auto profile = std::make_shared<TlsProfile>(tls);
  PURSER_TRY(configureTls(profile->context, tls));
  return std::shared_ptr<const TlsProfile>(std::move(profile));
}

class HttpClient::Impl {
 public:
  Impl(net::io_context& context, ClientOptions options, const Clock& clock)
      : context_(context),
        clock_(clock),
        options_(std::move(options)),
        tls_(ssl::context::tls_client),
        tls_ready_(configureTls(tls_, options_)) {}

  Stats stats() const {
    Stats s = stats_;
    s.idle = 0;
    for (const auto& [_, q] : idle_) s.idle += q.size();
    return s;
  }

  net::awaitable<Result<ClientResponse>> request(ClientRequest req) {
    auto url = parseUrl(req.url);
    if (!url) co_return fail(url.error());
    ++stats_.requests;
    for (int attempt = 0;; ++attempt) {
      auto conn = co_await acquire(*url, req.tls);
      if (!conn) co_return fail(conn.error());
      bool response_started = false;
      bool reusable = false;
      auto result = co_await exchange(**conn, *url, req, response_started, reusable);
      if (result) {
        if (reusable) release(std::move(*conn));
        co_return result;
      }
      // A pooled connection the peer closed while idle: retry once on a fresh one, but only
      // when nothing of the response arrived (so the request cannot have been processed twice
      // from our side's point of view).
      if (attempt == 0 && (*conn)->reused && !response_started &&
          result.error().code == ErrorCode::kUnavailable) {
        ++stats_.retries;
        continue;
      }
      co_return result;
    }
  }

  net::awaitable<Result<std::unique_ptr<ClientStream>>> stream(ClientRequest req);

  // Returns a finished connection to the pool.
  void release(std::unique_ptr<Connection> conn) {
    auto& q = idle_[conn->key];
    if (q.size() >= options_.max_idle_per_host) return;  // closed by its destructor
    conn->idle_since = clock_.monotonic();
    conn->lowest().expires_never();
    q.push_back(std::move(conn));
  }

  net::awaitable<Result<std::unique_ptr<Connection>>> acquire(
      const Url& url, const std::shared_ptr<const TlsProfile>& profile) {
    std::string key = fmt::format("{}://{}", url.tls ? "https" : "http", url.authority());
    if (url.tls && profile != nullptr) {
      key += fmt::format("#{}", static_cast<const void*>(profile.get()));
    }
    auto it = idle_.find(key);
    const MonoTime now = clock_.monotonic();
    while (it != idle_.end() && !it->second.empty()) {
      // Most recently used first: it is the least likely to have been closed by the peer.
      std::unique_ptr<Connection> conn = std::move(it->second.back());
      it->second.pop_back();
      if (now - conn->idle_since > options_.idle_ttl || !conn->lowest().socket().is_open()) {
        continue;
      }
      conn->reused = true;
      ++stats_.connections_reused;
      co_return conn;
    }
    co_return co_await connect(url, std::move(key), profile);
  }

  net::awaitable<Result<std::unique_ptr<Connection>>> connect(
      const Url& url, std::string key, const std::shared_ptr<const TlsProfile>& profile) {
    auto conn = std::make_unique<Connection>();
    conn->key = std::move(key);
    // Held by the connection, so that a pooled one's key never names another profile.
    if (url.tls) conn->profile = profile;
    error_code ec;
    // Resolve (skipped for IP literals) under the connect deadline.
    std::vector<tcp::endpoint> endpoints;
    const auto address = net::ip::make_address(url.host, ec);
    if (!ec) {
      endpoints.emplace_back(address, url.port);
    } else {
      tcp::resolver resolver(context_);
      net::steady_timer timer(context_, options_.connect_timeout);
      bool timed_out = false;
      timer.async_wait([&](const error_code& e) {
        if (!e) {
          timed_out = true;
          resolver.cancel();
        }
      });
      auto results = co_await resolver.async_resolve(url.host, std::to_string(url.port),
                                                     net::redirect_error(net::use_awaitable, ec));
      timer.cancel();
      if (timed_out) {
        co_return fail(
            Error(ErrorCode::kDeadlineExceeded, fmt::format("resolving {} timed out", url.host)));
      }
      if (ec) {
        co_return fail(unavailable(fmt::format("cannot resolve {}: {}", url.host, ec.message())));
      }
      for (const auto& r : results) endpoints.push_back(r.endpoint());
    }
    beast::tcp_stream tcp_stream(context_);
    tcp_stream.expires_after(options_.connect_timeout);
    co_await tcp_stream.async_connect(endpoints, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return fail(mapError(ec, "connecting to", url));
    tcp_stream.socket().set_option(tcp::no_delay(true), ec);
    if (url.tls) {
      if (profile == nullptr && !tls_ready_) co_return fail(tls_ready_.error());
      conn->tls = std::make_unique<ssl::stream<beast::tcp_stream>>(
          std::move(tcp_stream), profile != nullptr ? profile->context : tls_);
      if (!SSL_set_tlsext_host_name(conn->tls->native_handle(), url.host.c_str())) {
        co_return fail(unavailable(fmt::format("cannot set TLS server name {}", url.host)));
      }
      if (profile != nullptr ? profile->verify : options_.verify_tls) {
        conn->tls->set_verify_callback(ssl::host_name_verification(url.host));
      }
      co_await conn->tls->async_handshake(ssl::stream_base::client,
                                          net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return fail(mapError(ec, "TLS handshake with", url));
    } else {
      conn->plain = std::make_unique<beast::tcp_stream>(std::move(tcp_stream));
    }
    ++stats_.connections_opened;
    co_return conn;
  }

  static bhttp::request<bhttp::string_body> buildRequest(const Url& url, ClientRequest& req,
                                                         const std::string& user_agent) {
    bhttp::request<bhttp::string_body> msg;
    msg.method_string(methodName(req.method));
    msg.target(url.target);
    msg.version(11);
    msg.set(bhttp::field::host, url.authority());
    msg.set(bhttp::field::user_agent, user_agent);
    for (const auto& [name, value] : req.headers) msg.set(name, value);
    msg.body() = req.body;
    msg.keep_alive(true);
    msg.prepare_payload();
    return msg;
  }

  template <typename F>
  static auto onStream(Connection& conn, F&& f) {
    return conn.tls ? f(*conn.tls) : f(*conn.plain);
  }

  net::awaitable<Result<ClientResponse>> exchange(Connection& conn, const Url& url,
                                                  ClientRequest& req, bool& response_started,
                                                  bool& reusable) {
    auto msg = buildRequest(url, req, options_.user_agent);
    error_code ec;
    conn.lowest().expires_after(options_.write_timeout);
    co_await onStream(conn, [&](auto& s) {
      return bhttp::async_write(s, msg, net::redirect_error(net::use_awaitable, ec));
    });
    if (ec) {
      co_return fail(isStaleConnectionError(ec)
                         ? unavailable(fmt::format("connection to {} was closed", url.authority()))
                         : mapError(ec, "sending to", url));
    }
    bhttp::response_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(options_.max_response_header_bytes));
    const size_t max_body = req.max_response_bytes.value_or(options_.max_response_bytes);
    parser.body_limit(max_body);
    if (req.method == Method::kHead) parser.skip(true);
    conn.lowest().expires_after(req.timeout.value_or(options_.read_timeout));
    // Header first: Boost 1.74's parser drops a body-limit error raised by the Content-Length
    // of a header when the body arrived in the same read, so the limit is checked here.
    co_await onStream(conn, [&](auto& s) {
      return bhttp::async_read_header(s, conn.buffer, parser,
                                      net::redirect_error(net::use_awaitable, ec));
    });
    if (!ec && parser.content_length() && *parser.content_length() > max_body) {
      ec = bhttp::error::body_limit;
    }
    if (!ec && !parser.is_done()) {
      co_await onStream(conn, [&](auto& s) {
        return bhttp::async_read(s, conn.buffer, parser,
                                 net::redirect_error(net::use_awaitable, ec));
      });
    }
    response_started = parser.got_some() || conn.buffer.size() > 0;
    if (ec) {
      if (isStaleConnectionError(ec) && !response_started) {
        co_return fail(unavailable(fmt::format("connection to {} was closed", url.authority())));
      }
      co_return fail(mapError(ec, "reading the response from", url));
    }
    ClientResponse out;
    auto res = parser.release();
    out.status = static_cast<int>(res.result_int());
    copyHeaders(res, out.headers);
    out.body = std::move(res.body());
    reusable = res.keep_alive() && conn.buffer.size() == 0;
    co_return out;
  }

  net::io_context& context_;
  const Clock& clock_;
  ClientOptions options_;
  ssl::context tls_;
  const Result<void> tls_ready_;  // what configureTls() said of options_
  std::unordered_map<std::string, std::deque<std::unique_ptr<Connection>>> idle_;
  Stats stats_;
};

namespace {

// Reads a response body piece by piece; returns the connection to the pool when the body ended
// cleanly and the server allows reuse.
class StreamImpl final : public ClientStream {
 public:
  StreamImpl(HttpClient::Impl& client, std::unique_ptr<Connection> conn, Url url,
             std::chrono::nanoseconds read_timeout)
      : client_(client),
        conn_(std::move(conn)),
        url_(std::move(url)),
        read_timeout_(read_timeout) {}

  // Reads the response header; `started` tells whether any of the response arrived.
  net::awaitable<error_code> readHeader(std::chrono::nanoseconds timeout, size_t header_limit,
                                        bool& started) {
    parser_.header_limit(static_cast<std::uint32_t>(header_limit));
    // A stream is consumed as it arrives, never held whole: no limit. (Not boost::none: Boost
    // 1.74's parser compares a Content-Length with the limit as optionals, and any length is
    // "greater" than none, so every body with a Content-Length would be refused.)
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
    error_code ec;
    conn_->lowest().expires_after(timeout);
    co_await HttpClient::Impl::onStream(*conn_, [&](auto& s) {
      return bhttp::async_read_header(s, conn_->buffer, parser_,
                                      net::redirect_error(net::use_awaitable, ec));
    });
    started = parser_.got_some() || conn_->buffer.size() > 0;
    if (ec) co_return ec;
    status_ = static_cast<int>(parser_.get().result_int());
    copyHeaders(parser_.get(), headers_);
    co_return ec;
  }

  int status() const override { return status_; }
  const Headers& headers() const override { return headers_; }

  void cancel() override {
    cancelled_ = true;
    if (conn_) {
      error_code ec;
      conn_->lowest().socket().cancel(ec);
      conn_->lowest().socket().close(ec);
    }
  }

  net::awaitable<Result<std::optional<std::string>>> next() override {
    if (conn_ == nullptr) co_return std::optional<std::string>();
    std::array<char, 16 * 1024> buf;
    for (;;) {
      if (parser_.is_done()) {
        finish();
        co_return std::optional<std::string>();
      }
      if (cancelled_) {
        conn_.reset();
        co_return fail(Error(ErrorCode::kCancelled, "the stream was cancelled"));
      }
      parser_.get().body().data = buf.data();
      parser_.get().body().size = buf.size();
      error_code ec;
      conn_->lowest().expires_after(read_timeout_);
      co_await HttpClient::Impl::onStream(*conn_, [&](auto& s) {
        return bhttp::async_read_some(s, conn_->buffer, parser_,
                                      net::redirect_error(net::use_awaitable, ec));
      });
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) {
        conn_.reset();
        if (cancelled_) co_return fail(Error(ErrorCode::kCancelled, "the stream was cancelled"));
        co_return fail(mapError(ec, "reading the response stream from", url_));
      }
      const size_t n = buf.size() - parser_.get().body().size;
      if (n > 0) co_return std::optional<std::string>(std::string(buf.data(), n));
    }
  }

 private:
  void finish() {
    if (conn_ && parser_.get().keep_alive() && conn_->buffer.size() == 0) {
      client_.release(std::move(conn_));
    }
    conn_.reset();
  }

  HttpClient::Impl& client_;
  std::unique_ptr<Connection> conn_;
  Url url_;
  std::chrono::nanoseconds read_timeout_;
  bhttp::response_parser<bhttp::buffer_body> parser_;
  int status_ = 0;
  Headers headers_;
  bool cancelled_ = false;
};

}  // namespace

net::awaitable<Result<std::unique_ptr<ClientStream>>> HttpClient::Impl::stream(ClientRequest req) {
  auto url = parseUrl(req.url);
  if (!url) co_return fail(url.error());
  ++stats_.requests;
  for (int attempt = 0;; ++attempt) {
    auto conn = co_await acquire(*url, req.tls);
    if (!conn) co_return fail(conn.error());
    const bool reused = (*conn)->reused;
    auto msg = buildRequest(*url, req, options_.user_agent);
    error_code ec;
    (*conn)->lowest().expires_after(options_.write_timeout);
    co_await onStream(**conn, [&](auto& s) {
      return bhttp::async_write(s, msg, net::redirect_error(net::use_awaitable, ec));
    });
    if (ec) {
      if (attempt == 0 && reused && isStaleConnectionError(ec)) {
        ++stats_.retries;
        continue;
      }
      co_return fail(mapError(ec, "sending to", *url));
    }
    // The request's timeout bounds the header and then every silence between pieces, so a
    // stream that stalls mid-way is cut off as soon as one that never starts.
    auto out = std::make_unique<StreamImpl>(
        *this, std::move(*conn), *url,
        req.idle_timeout.value_or(req.timeout.value_or(options_.read_timeout)));
    bool started = false;
    ec = co_await out->readHeader(req.timeout.value_or(options_.read_timeout),
                                  options_.max_response_header_bytes, started);
    if (ec) {
      if (attempt == 0 && reused && !started && isStaleConnectionError(ec)) {
        ++stats_.retries;
        continue;
      }
      co_return fail(mapError(ec, "reading the response from", *url));
    }
    co_return std::unique_ptr<ClientStream>(std::move(out));
  }
}

HttpClient::HttpClient(net::io_context& context, ClientOptions options, const Clock& clock)
    : impl_(std::make_unique<Impl>(context, std::move(options), clock)) {}
HttpClient::~HttpClient() = default;

net::awaitable<Result<ClientResponse>> HttpClient::request(ClientRequest request) {
  co_return co_await impl_->request(std::move(request));
}

net::awaitable<Result<std::unique_ptr<ClientStream>>> HttpClient::stream(ClientRequest request) {
  co_return co_await impl_->stream(std::move(request));
}

HttpClient::Stats HttpClient::stats() const { return impl_->stats(); }

Result<void> HttpClient::checkTls(const ClientOptions& options) {
  ssl::context ctx(ssl::context::tls_client);
  return configureTls(ctx, options);
}

}  // namespace purser::http
