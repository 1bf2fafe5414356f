// A scripted upstream for client tests: a loopback listener whose connections are handed, one
// by one, to a behaviour on a background thread (answer then hang up, never answer, ...).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace purser::testing {

class FakeUpstream {
 public:
  // `behaviour` gets the connected socket; the fake closes it when the behaviour returns.
  explicit FakeUpstream(std::function<void(int fd)> behaviour);
  ~FakeUpstream();

  uint16_t port() const { return port_; }
  int connections() const { return connections_.load(); }

  // Helpers for behaviours.
  static std::string readRequestHead(int fd);  // up to and including the blank line
  // The head and then the body its Content-Length announces (what arrived of it).
  static std::string readRequest(int fd);
  static void writeAll(int fd, const std::string& data);

 private:
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::function<void(int)> behaviour_;
  std::thread thread_;
  std::vector<std::thread> handlers_;
};

}  // namespace purser::testing
