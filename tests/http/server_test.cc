#include "http/server.h"

#include <gtest/gtest.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <atomic>
#include <thread>

#include "fakes/eventually.h"
#include "fakes/raw_client.h"
#include "fakes/test_server.h"

namespace purser::http {
namespace {

using purser::testing::RawClient;
using purser::testing::TestServer;

// Waits (on the worker) until `flag` is set; the test controls when a handler may finish.
asio::awaitable<void> waitFor(const std::atomic<bool>& flag) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!flag.load()) {
    timer.expires_after(std::chrono::milliseconds(2));
    co_await timer.async_wait(asio::use_awaitable);
  }
}

void spinUntil(const std::function<bool()>& cond) {
  ASSERT_TRUE(testing::eventually(cond, {.attempts = 20'000,
                                         .pause = std::chrono::milliseconds(1),
                                         .what = "the awaited condition"}));
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ts.router
                    .add(Method::kGet, "/hello",
                         [](Request& r) { return Response::text(200, "hello " + r.target); })
                    .has_value());
    ASSERT_TRUE(
        ts.router
            .add(Method::kPost, "/echo", [](Request& r) { return Response::text(200, r.body); })
            .has_value());
    ASSERT_TRUE(
        ts.router
            .add(Method::kGet, "/items/{id}",
                 [](Request& r) { return Response::text(200, std::string(*r.param("id"))); })
            .has_value());
    ASSERT_TRUE(ts.router
                    .add(Method::kGet, "/boom",
                         [](Request&) -> Response { throw std::runtime_error("handler bug"); })
                    .has_value());
  }

  ServerOptions small() {
    ServerOptions o;
    o.max_body_bytes = 1024;
    o.max_header_bytes = 2048;
    o.header_timeout = std::chrono::milliseconds(300);
    o.body_timeout = std::chrono::milliseconds(300);
    return o;
  }

  TestServer ts;
};

TEST_F(ServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send("GET /hello?n=" + std::to_string(i) + " HTTP/1.1\r\nHost: t\r\n\r\n"));
    auto r = c.readResponse();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "hello /hello?n=" + std::to_string(i));
    EXPECT_NE(r->header("connection"), "close");
  }
  ts.stop();
  EXPECT_NE(ts.metrics.render().find("purser_http_connections_total 1\n"), std::string::npos);
  EXPECT_NE(ts.metrics.render().find(
                R"(purser_http_requests_total{route="/hello",method="GET",code="2xx"} 3)"),
            std::string::npos);
}

TEST_F(ServerTest, PipelinedRequestsAreAnsweredInOrder) {
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(
      c.send("GET /items/1 HTTP/1.1\r\nHost: t\r\n\r\n"
             "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nabcde"
             "GET /items/3 HTTP/1.1\r\nHost: t\r\n\r\n"));
  for (const char* expected : {"1", "abcde", "3"}) {
    auto r = c.readResponse();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, expected);
  }
}

TEST_F(ServerTest, ConnectionCloseIsHonoured) {
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  auto r = c.readResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_TRUE(c.waitForClose());
}

TEST_F(ServerTest, OversizedBodyGets413BeforeTheBodyIsSent) {
  ts.start(small());
  RawClient c(ts.port());
  // Announce 10 MiB and send none of it: the answer must come from the header alone.
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10485760\r\n\r\n"));
  auto r = c.readResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(r->header("content-type"), "application/problem+json");
  EXPECT_NE(r->body.find("exceeds the limit of 1024 bytes"), std::string::npos);
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_TRUE(c.waitForClose());
}

TEST_F(ServerTest, OversizedChunkedBodyGets413) {
  ts.start(small());
  RawClient c(ts.port());
  const std::string chunk(800, 'x');
  ASSERT_TRUE(
      c.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
             "320\r\n" +
             chunk + "\r\n320\r\n" + chunk + "\r\n"));
  auto r = c.readResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 413);
}

TEST_F(ServerTest, BodyWithinTheLimitIsAccepted) {
  ts.start(small());
  RawClient c(ts.port());
  const std::string body(1024, 'y');
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1024\r\n\r\n" + body));
  auto r = c.readResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, body);
}

TEST_F(ServerTest, ExpectContinueGets100ThenTheResponse) {
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(
      c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n"
             "Expect: 100-continue\r\n\r\n"));
  // The interim 100 arrives before any of the body has been sent: the server checked the
  // header and invites the body.
  ASSERT_TRUE(c.readUntil("HTTP/1.1 100 Continue\r\n\r\n"));
  ASSERT_TRUE(c.send("abc"));
  auto r = c.readResponse();  // skips the interim response, then reads the final one
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "abc");
}

TEST_F(ServerTest, OversizedHeaderGets431) {
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(
      c.send("GET /hello HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(4096, 'a') + "\r\n\r\n"));
  auto r = c.readResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 431);
  EXPECT_TRUE(c.waitForClose());
}

TEST_F(ServerTest, ClientThatStallsMidRequestIsDisconnected) {
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("GET /hello HTTP/1.1\r\nHost: t\r\n"));  // no blank line: never finishes
  EXPECT_TRUE(c.waitForClose());
  ts.stop();
  EXPECT_NE(ts.metrics.render().find(R"(purser_http_rejected_total{reason="timeout"} 1)"),
            std::string::npos);
}

TEST_F(ServerTest, ClientThatStallsMidBodyIsDisconnected) {
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nhalf"));
  EXPECT_TRUE(c.waitForClose());
}

TEST_F(ServerTest, ClientThatStopsReadingIsDisconnectedAtTheWriteDeadline) {
  ASSERT_TRUE(ts.router
                  .add(Method::kGet, "/huge",
                       [](Request&) { return Response::text(200, std::string(64 << 20, 'h')); })
                  .has_value());
  ServerOptions o = small();
  o.write_timeout = std::chrono::milliseconds(200);
  ts.start(o);
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("GET /huge HTTP/1.1\r\nHost: t\r\n\r\n"));
  // The client reads nothing; 64 MiB cannot fit in the socket buffers, so the write stalls
  // until the deadline cuts the connection.
  spinUntil([&] { return ts.server->connections() == 1; });
  spinUntil([&] { return ts.server->connections() == 0; });
  ts.stop();
  EXPECT_NE(ts.metrics.render().find(R"(purser_http_rejected_total{reason="timeout"} 1)"),
            std::string::npos);
}

TEST_F(ServerTest, IdleKeepAliveConnectionIsClosedAfterTheIdleTimeout) {
  ServerOptions o = small();
  o.idle_timeout = std::chrono::milliseconds(200);
  ts.start(o);
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(c.readResponse().has_value());
  EXPECT_TRUE(c.waitForClose());
}

TEST_F(ServerTest, MalformedRequestGets400) {
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("THIS IS NOT HTTP\r\n\r\n"));
  auto r = c.readResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("malformed HTTP request"), std::string::npos);
}

TEST_F(ServerTest, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(
      c.send("GET /nope HTTP/1.1\r\nHost: t\r\n\r\nDELETE /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto a = c.readResponse();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->status, 404);
  auto b = c.readResponse();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->status, 405);
  EXPECT_EQ(b->header("allow"), "GET");
}

TEST_F(ServerTest, HeadUsesTheGetHandlerWithoutABody) {
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(
      c.send("HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\nGET /items/7 HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto head = c.readResponse(/*head=*/true);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->header("content-length"), "12");  // "hello /hello"
  // No body bytes were sent: the next response parses cleanly.
  auto next = c.readResponse();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->body, "7");
}

TEST_F(ServerTest, HandlerExceptionBecomes500AndTheServerLivesOn) {
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("GET /boom HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto r = c.readResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 500);
  ASSERT_TRUE(c.send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto ok = c.readResponse();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200);
}

TEST_F(ServerTest, AHandlerCannotSplitTheResponseWithItsHeaders) {
  ASSERT_TRUE(ts.router
                  .add(Method::kGet, "/inject",
                       [](Request&) {
                         Response res = Response::text(200, "x");
                         // e.g. a value echoed from the request without checking it
                         res.headers.add("X-Echo", "a\r\nSet-Cookie: stolen=1");
                         return res;
                       })
                  .has_value());
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("GET /inject HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto r = c.readResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(r->header("set-cookie"), "");
  EXPECT_EQ(r->header("x-echo"), "");
}

TEST_F(ServerTest, Http10ClientsGetKeepAliveOnlyWhenTheyAskForIt) {
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  auto r = c.readResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->header("connection"), "keep-alive");
  ASSERT_TRUE(c.send("GET /hello HTTP/1.0\r\n\r\n"));
  auto last = c.readResponse();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->body, "hello /hello");
  EXPECT_TRUE(c.waitForClose());
}

TEST_F(ServerTest, NoContentResponsesCarryNoBodyOrLength) {
  ASSERT_TRUE(ts.router
                  .add(Method::kDelete, "/items/{id}",
                       [](Request&) { return Response::text(204, "ignored"); })
                  .has_value());
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(c.send(
      "DELETE /items/1 HTTP/1.1\r\nHost: t\r\n\r\nGET /items/2 HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto r = c.readResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->header("content-length"), "");
  auto next = c.readResponse();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->body, "2");
}

TEST_F(ServerTest, ConnectionsOverTheLimitAreRefused) {
  ServerOptions o = small();
  o.max_connections = 1;
  ts.start(o);
  RawClient first(ts.port());
  ASSERT_TRUE(first.send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(first.readResponse().has_value());  // the first connection is now counted
  RawClient second(ts.port());
  EXPECT_TRUE(second.waitForClose());
  ASSERT_TRUE(first.send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_TRUE(first.readResponse().has_value());
}

TEST_F(ServerTest, StreamedResponseIsSentPieceByPiece) {
  std::atomic<bool> release{false};
  ASSERT_TRUE(ts.router
                  .addAsync(Method::kGet, "/events",
                            [&](Request&) -> asio::awaitable<Response> {
                              Response r;
                              r.headers.add("Content-Type", "text/event-stream");
                              r.stream = [&](BodyWriter& w) -> asio::awaitable<void> {
                                co_await w.write("data: one\n\n");
                                co_await waitFor(release);
                                co_await w.write("data: two\n\n");
                              };
                              co_return r;
                            })
                  .has_value());
  ts.start(small());
  RawClient c(ts.port());
  ASSERT_TRUE(c.send("GET /events HTTP/1.1\r\nHost: t\r\n\r\n"));
  // The first event arrives while the handler is still held before the second: the response is
  // relayed as it is written, never buffered whole.
  ASSERT_TRUE(c.readUntil("data: one\n\n"));
  EXPECT_FALSE(release.load());
  release = true;
  auto r = c.readResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->header("transfer-encoding"), "chunked");
  EXPECT_EQ(r->header("content-type"), "text/event-stream");
  EXPECT_EQ(r->body, "data: one\n\ndata: two\n\n");
}

TEST_F(ServerTest, ShutdownDrainsAnInFlightRequestAndRefusesNewOnes) {
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  ASSERT_TRUE(ts.router
                  .addAsync(Method::kGet, "/slow",
                            [&](Request&) -> asio::awaitable<Response> {
                              started = true;
                              co_await waitFor(release);
                              co_return Response::text(200, "finished");
                            })
                  .has_value());
  ts.start(small());
  RawClient busy(ts.port());
  RawClient idle(ts.port());
  ASSERT_TRUE(idle.send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(idle.readResponse().has_value());
  ASSERT_TRUE(busy.send("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n"));
  spinUntil([&] { return started.load(); });

  std::atomic<bool> drained{false};
  ts.server->shutdown([&] { drained = true; });
  spinUntil([&] { return ts.server->draining(); });
  EXPECT_TRUE(idle.waitForClose()) << "idle keep-alive connections close at once";
  RawClient late(ts.port());
  EXPECT_FALSE(late.connected() && late.send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n") &&
               late.readResponse().has_value())
      << "no new request is served once draining";
  EXPECT_FALSE(drained.load()) << "the in-flight request is still running";

  release = true;
  auto r = busy.readResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "finished");
  EXPECT_EQ(r->header("connection"), "close");
  spinUntil([&] { return drained.load(); });
}

TEST_F(ServerTest, DrainTimeoutClosesRequestsThatDoNotFinish) {
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  ASSERT_TRUE(ts.router
                  .addAsync(Method::kGet, "/stuck",
                            [&](Request&) -> asio::awaitable<Response> {
                              started = true;
                              co_await waitFor(release);
                              co_return Response::text(200, "too late");
                            })
                  .has_value());
  ServerOptions o = small();
  o.drain_timeout = std::chrono::milliseconds(100);
  ts.start(o);
  RawClient stuck(ts.port());
  ASSERT_TRUE(stuck.send("GET /stuck HTTP/1.1\r\nHost: t\r\n\r\n"));
  RawClient half(ts.port());
  ASSERT_TRUE(half.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhalf"));
  spinUntil([&] { return started.load(); });
  std::atomic<bool> drained{false};
  ts.server->shutdown([&] { drained = true; });
  // Neither request can finish; the drain deadline closes both connections and shutdown ends.
  EXPECT_TRUE(stuck.waitForClose());
  EXPECT_TRUE(half.waitForClose());
  spinUntil([&] { return drained.load(); });
  release = true;
}

}  // namespace
}  // namespace purser::http
