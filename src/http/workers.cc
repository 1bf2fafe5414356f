#include "http/workers.h"

#include <spdlog/spdlog.h>

#include <exception>

namespace purser::http {
namespace {
thread_local int t_worker_index = -1;
}  // namespace

Workers::Workers(size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 0; i < threads; ++i) {
    // Concurrency hint 1: each context is run by exactly one thread.
    contexts_.push_back(std::make_unique<boost::asio::io_context>(1));
  }
}

Workers::~Workers() {
  stop();
  join();
}

boost::asio::io_context& Workers::next() {
  return *contexts_[next_.fetch_add(1, std::memory_order_relaxed) % contexts_.size()];
}

int Workers::currentIndex() { return t_worker_index; }

void Workers::start() {
  for (auto& ctx : contexts_) guards_.push_back(boost::asio::make_work_guard(*ctx));
  for (size_t i = 0; i < contexts_.size(); ++i) {
    threads_.emplace_back([this, i] {
      t_worker_index = static_cast<int>(i);
      for (;;) {
        try {
          contexts_[i]->run();
          break;
        } catch (const std::exception& e) {
          // A handler escaped its coroutine's guard; log and keep the worker alive.
          spdlog::error("worker {}: unhandled exception: {}", i, e.what());
        }
      }
      t_worker_index = -1;
    });
  }
}

void Workers::stop() {
  for (auto& g : guards_) g.reset();
  for (auto& ctx : contexts_) ctx->stop();
}

void Workers::join() {
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace purser::http
