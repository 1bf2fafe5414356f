// An in-process HTTP server on loopback (port 0) for tests: routes are added to `router` before
// start(); the destructor shuts the server down and joins its workers.
#pragma once

#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <future>
#include <memory>
#include <stdexcept>

#include "http/metrics.h"
#include "http/router.h"
#include "http/server.h"
#include "http/workers.h"

namespace purser::testing {

class TestServer {
 public:
  explicit TestServer(size_t threads = 2) : workers(threads) {}
  ~TestServer() { stop(); }

  void start(http::ServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    server = std::make_unique<http::Server>(std::move(options), router, workers, metrics);
    auto listening = server->listen();
    if (!listening) throw std::runtime_error(listening.error().toString());
    server->start();
    workers.start();
  }
  uint16_t port() const { return server->port(); }
  std::string url(const std::string& path) const { return server->url() + path; }

  // Graceful shutdown; returns once every connection has closed.
  void stop() {
    if (!server || stopped_) return;
    stopped_ = true;
    if (!server->draining()) {
      std::promise<void> drained;
      server->shutdown([&] { drained.set_value(); });
      drained.get_future().wait();
    }
    workers.stop();
    workers.join();
  }

  http::Workers workers;
  http::Router router;
  http::MetricsRegistry metrics;
  std::unique_ptr<http::Server> server;

 private:
  bool stopped_ = false;
};

// Runs a coroutine to completion on `ctx` in the calling thread (clients made for `ctx` may be
// used inside it).
template <typename T>
T runCoroutine(boost::asio::io_context& ctx, boost::asio::awaitable<T> coro) {
  auto future = boost::asio::co_spawn(ctx, std::move(coro), boost::asio::use_future);
  ctx.restart();
  ctx.run();
  return future.get();
}

}  // namespace purser::testing
