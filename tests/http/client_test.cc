#include "http/client.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>

#include "fakes/fake_upstream.h"
#include "fakes/temp_dir.h"
#include "fakes/test_server.h"
#include "fakes/tls_cert.h"

namespace purser::http {
namespace {

using purser::testing::FakeUpstream;
using purser::testing::runCoroutine;
using purser::testing::TestServer;

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(upstream.router
                    .add(Method::kPost, "/v1/echo",
                         [](Request& r) {
                           Response res = Response::text(200, r.body);
                           res.headers.add(
                               "X-Seen-Auth",
                               std::string(r.headers.get("authorization").value_or("")));
                           return res;
                         })
                    .has_value());
    ASSERT_TRUE(upstream.router
                    .add(Method::kGet, "/big",
                         [](Request&) { return Response::text(200, std::string(100'000, 'b')); })
                    .has_value());
    ASSERT_TRUE(upstream.router
                    .addAsync(Method::kGet, "/sse",
                              [](Request&) -> asio::awaitable<Response> {
                                Response r;
                                r.headers.add("Content-Type", "text/event-stream");
                                r.stream = [](BodyWriter& w) -> asio::awaitable<void> {
                                  for (int i = 0; i < 3; ++i) {
                                    co_await w.write("data: " + std::to_string(i) + "\n\n");
                                    asio::steady_timer t(co_await asio::this_coro::executor,
                                                         std::chrono::milliseconds(5));
                                    co_await t.async_wait(asio::use_awaitable);
                                  }
                                };
                                co_return r;
                              })
                    .has_value());
  }

  TestServer upstream;
  asio::io_context ctx;
};

TEST_F(ClientTest, ReusesKeepAliveConnections) {
  upstream.start();
  HttpClient client(ctx, {});
  for (int i = 0; i < 3; ++i) {
    ClientRequest req;
    req.method = Method::kPost;
    req.url = upstream.url("/v1/echo");
    req.headers.add("Authorization", "Bearer sk-test");
    req.body = "ping " + std::to_string(i);
    auto res = runCoroutine(ctx, client.request(std::move(req)));
    ASSERT_TRUE(res.has_value()) << res.error().toString();
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->body, "ping " + std::to_string(i));
    EXPECT_EQ(res->headers.get("x-seen-auth"), "Bearer sk-test");
  }
  EXPECT_EQ(client.stats().connections_opened, 1u);
  EXPECT_EQ(client.stats().connections_reused, 2u);
  EXPECT_EQ(client.stats().idle, 1u);
}

TEST_F(ClientTest, APooledConnectionIdleLongerThanItsTtlIsNotReused) {
  upstream.start();
  ManualClock clock;
  HttpClient client(ctx, {.idle_ttl = std::chrono::seconds(60)}, clock);
  const auto ping = [&] {
    ClientRequest req;
    req.method = Method::kPost;
    req.url = upstream.url("/v1/echo");
    req.body = "ping";
    auto res = runCoroutine(ctx, client.request(std::move(req)));
    ASSERT_TRUE(res.has_value()) << res.error().toString();
    EXPECT_EQ(res->status, 200);
  };
  ping();
  clock.advance(std::chrono::seconds(60));
  ping();  // idle exactly its ttl: still reused
  EXPECT_EQ(client.stats().connections_opened, 1u);
  clock.advance(std::chrono::seconds(61));
  ping();
  EXPECT_EQ(client.stats().connections_opened, 2u);
  EXPECT_EQ(client.stats().connections_reused, 1u);
}

TEST_F(ClientTest, StreamsTheBodyAsItArrives) {
  upstream.start();
  HttpClient client(ctx, {});
  auto pieces = runCoroutine(ctx, [&]() -> asio::awaitable<Result<std::vector<std::string>>> {
    ClientRequest req;
    req.url = upstream.url("/sse");
    auto stream = co_await client.stream(std::move(req));
    if (!stream) co_return fail(stream.error());
    EXPECT_EQ((*stream)->status(), 200);
    EXPECT_EQ((*stream)->headers().get("content-type"), "text/event-stream");
    std::vector<std::string> out;
    for (;;) {
      auto piece = co_await (*stream)->next();
      if (!piece) co_return fail(piece.error());
      if (!*piece) break;
      out.push_back(**piece);
    }
    co_return out;
  }());
  ASSERT_TRUE(pieces.has_value()) << pieces.error().toString();
  std::string joined;
  for (const auto& p : *pieces) joined += p;
  EXPECT_EQ(joined, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  EXPECT_GE(pieces->size(), 3u) << "events separated in time arrive as separate pieces";
  EXPECT_EQ(client.stats().idle, 1u) << "a finished stream returns its connection to the pool";
}

// An answer to a stream that is not a stream — an upstream's JSON error, sized by its
// Content-Length — reads through the same stream, whole.
TEST_F(ClientTest, AStreamedAnswerWithAContentLengthIsReadWhole) {
  FakeUpstream fake([](int fd) {
    FakeUpstream::readRequestHead(fd);
    FakeUpstream::writeAll(fd,
                           "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                           "Content-Length: 29\r\n\r\n{\"error\":\"slow down, please\"}");
  });
  HttpClient client(ctx, {});
  auto body = runCoroutine(ctx, [&]() -> asio::awaitable<Result<std::string>> {
    ClientRequest req;
    req.url = "http://127.0.0.1:" + std::to_string(fake.port()) + "/v1/chat/completions";
    auto stream = co_await client.stream(std::move(req));
    if (!stream) co_return fail(stream.error());
    EXPECT_EQ((*stream)->status(), 429);
    std::string out;
    for (;;) {
      auto piece = co_await (*stream)->next();
      if (!piece) co_return fail(piece.error());
      if (!*piece) break;
      out += **piece;
    }
    co_return out;
  }());
  ASSERT_TRUE(body.has_value()) << body.error().toString();
  EXPECT_EQ(*body, "{\"error\":\"slow down, please\"}");
}

TEST_F(ClientTest, RetriesOnceWhenAPooledConnectionWasClosedByThePeer) {
  // Answers one request per connection, claiming keep-alive, then hangs up.
  FakeUpstream fake([](int fd) {
    FakeUpstream::readRequestHead(fd);
    FakeUpstream::writeAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    ::shutdown(fd, SHUT_RDWR);
  });
  HttpClient client(ctx, {});
  const std::string url = "http://127.0.0.1:" + std::to_string(fake.port()) + "/";
  for (int i = 0; i < 3; ++i) {
    auto res = runCoroutine(ctx, client.request({.url = url}));
    ASSERT_TRUE(res.has_value()) << res.error().toString();
    EXPECT_EQ(res->body, "ok");
  }
  EXPECT_EQ(client.stats().retries, 2u);
  EXPECT_EQ(fake.connections(), 3);
}

TEST_F(ClientTest, ConnectionRefusedIsUnavailable) {
  HttpClient client(ctx, {});
  // A port that was just free: bind port 0, read it, close.
  uint16_t port;
  {
    FakeUpstream temp([](int) {});
    port = temp.port();
  }
  auto res = runCoroutine(ctx, client.request({.url = "http://127.0.0.1:" + std::to_string(port)}));
  ASSERT_FALSE(res.has_value());
  EXPECT_EQ(res.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(res.error().message.find("connecting to 127.0.0.1"), std::string::npos)
      << res.error().message;
}

TEST_F(ClientTest, SilentUpstreamHitsTheReadDeadline) {
  std::atomic<bool> done{false};
  FakeUpstream fake([&](int fd) {
    FakeUpstream::readRequestHead(fd);
    while (!done.load()) ::usleep(1000);  // never answers
  });
  ClientOptions o;
  o.read_timeout = std::chrono::milliseconds(100);
  HttpClient client(ctx, o);
  auto res = runCoroutine(
      ctx, client.request({.url = "http://127.0.0.1:" + std::to_string(fake.port()) + "/x"}));
  done = true;
  ASSERT_FALSE(res.has_value());
  EXPECT_EQ(res.error().code, ErrorCode::kDeadlineExceeded);
}

TEST_F(ClientTest, ResponseOverTheLimitIsRejected) {
  upstream.start();
  ClientOptions o;
  o.max_response_bytes = 10'000;
  HttpClient client(ctx, o);
  auto res = runCoroutine(ctx, client.request({.url = upstream.url("/big")}));
  ASSERT_FALSE(res.has_value());
  EXPECT_EQ(res.error().code, ErrorCode::kResourceExhausted);
}

TEST_F(ClientTest, BadUrlsAreInvalidArguments) {
  HttpClient client(ctx, {});
  for (const char* url :
       {"ftp://x/", "http://", "http://host:99999/", "localhost:80/x", "http://user:pw@host/"}) {
    auto res = runCoroutine(ctx, client.request({.url = url}));
    ASSERT_FALSE(res.has_value()) << url;
    EXPECT_EQ(res.error().code, ErrorCode::kInvalidArgument) << url;
  }
}

TEST(ClientTlsTest, VerifiesTheServerCertificate) {
  purser::testing::TempDir dir;
  const auto files = purser::testing::writeSelfSignedCert(dir.path());
  TestServer upstream;
  ASSERT_TRUE(
      upstream.router
          .add(Method::kGet, "/secure", [](Request&) { return Response::text(200, "tls ok"); })
          .has_value());
  ServerOptions so;
  so.tls = TlsOptions{files.cert_file, files.key_file};
  upstream.start(so);
  ASSERT_EQ(upstream.url("/secure").rfind("https://", 0), 0u);
  const std::string by_name = "https://localhost:" + std::to_string(upstream.port()) + "/secure";
  const std::string by_ip = "https://127.0.0.1:" + std::to_string(upstream.port()) + "/secure";
  asio::io_context ctx;

  // Trusted through the CA file: the request succeeds over TLS, and the connection is reused.
  HttpClient trusting(ctx, {.ca_file = files.cert_file});
  for (int i = 0; i < 2; ++i) {
    auto ok = runCoroutine(ctx, trusting.request({.url = by_name}));
    ASSERT_TRUE(ok.has_value()) << ok.error().toString();
    EXPECT_EQ(ok->body, "tls ok");
  }
  EXPECT_EQ(trusting.stats().connections_opened, 1u);

  // Not trusted: the handshake fails verification.
  HttpClient strict(ctx, {});
  auto bad = runCoroutine(ctx, strict.request({.url = by_name}));
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(bad.error().message.find("TLS handshake"), std::string::npos) << bad.error().message;

  // A certificate for "localhost" does not vouch for 127.0.0.1, even from a trusted issuer.
  auto wrong_name = runCoroutine(ctx, trusting.request({.url = by_ip}));
  ASSERT_FALSE(wrong_name.has_value());
  EXPECT_NE(wrong_name.error().message.find("TLS handshake"), std::string::npos)
      << wrong_name.error().message;

  // Plain HTTP to the TLS port is refused: a 400 that says so, never the resource.
  HttpClient plain(ctx, {.read_timeout = std::chrono::seconds(5)});
  auto mixed = runCoroutine(
      ctx,
      plain.request({.url = "http://127.0.0.1:" + std::to_string(upstream.port()) + "/secure"}));
  ASSERT_TRUE(mixed.has_value()) << mixed.error().toString();
  EXPECT_EQ(mixed->status, 400);
  EXPECT_EQ(mixed->body.find("tls ok"), std::string::npos);
}

TEST(ClientTlsTest, AProfileOfItsOwnTrustsAPrivateCaSkipsVerificationOrSendsACertificate) {
  purser::testing::TempDir dir;
  const auto ca = purser::testing::writeCa(dir.path(), "private");
  const auto leaf = purser::testing::writeSignedCert(dir.path(), "upstream", ca, "localhost");
  TestServer upstream;
  ASSERT_TRUE(
      upstream.router
          .add(Method::kGet, "/secure",
               [](Request& r) { return Response::text(200, "peer=" + r.tls_client_subject); })
          .has_value());
  ServerOptions so;
  so.tls = TlsOptions{leaf.cert_file, leaf.key_file};
  upstream.start(so);
  const std::string url = "https://localhost:" + std::to_string(upstream.port()) + "/secure";
  asio::io_context ctx;
  HttpClient client(ctx, {});  // its own options trust only the system store

  auto refused = runCoroutine(ctx, client.request({.url = url}));
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("TLS handshake"), std::string::npos);

  auto trusting = makeTlsProfile({.ca_file = ca.cert_file});
  ASSERT_TRUE(trusting.has_value()) << trusting.error().toString();
  auto ok = runCoroutine(ctx, client.request({.url = url, .tls = *trusting}));
  ASSERT_TRUE(ok.has_value()) << ok.error().toString();
  EXPECT_EQ(ok->body, "peer=");

  auto unverified = makeTlsProfile({.verify_tls = false});
  ASSERT_TRUE(unverified.has_value());
  auto skipped = runCoroutine(ctx, client.request({.url = url, .tls = *unverified}));
  ASSERT_TRUE(skipped.has_value()) << skipped.error().toString();

  // Connections of different profiles are pooled apart: the client's own still refuses.
  auto still_refused = runCoroutine(ctx, client.request({.url = url}));
  EXPECT_FALSE(still_refused.has_value());

  // A CA file that does not exist makes no profile.
  auto missing = makeTlsProfile({.ca_file = dir.path() + "/none.pem"});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kInvalidArgument);
}

TEST(ServerTlsTest, UnreadableCertificateIsAClearError) {
  TestServer ts;
  ServerOptions so;
  so.tls = TlsOptions{"/nonexistent/cert.pem", "/nonexistent/key.pem"};
  so.port = 0;
  Server server(so, ts.router, ts.workers, ts.metrics);
  auto r = server.listen();
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("cannot load TLS certificate \"/nonexistent/cert.pem\""),
            std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace purser::http
