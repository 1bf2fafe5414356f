#include "fakes/fake_upstream.h"

#include <cstring>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace purser::testing {

FakeUpstream::FakeUpstream(std::function<void(int fd)> behaviour)
    : behaviour_(std::move(behaviour)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::listen(listen_fd_, 64);
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      connections_.fetch_add(1);
      handlers_.emplace_back([this, fd] {
        behaviour_(fd);
        ::close(fd);
      });
    }
  });
}

FakeUpstream::~FakeUpstream() {
  stop_ = true;
  thread_.join();
  for (auto& t : handlers_) t.join();
  ::close(listen_fd_);
}

std::string FakeUpstream::readRequestHead(int fd) {
  std::string data;
  char c;
  while (data.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, &c, 1, 0);
    if (n <= 0) break;
    data.push_back(c);
  }
  return data;
}

std::string FakeUpstream::readRequest(int fd) {
  std::string head = readRequestHead(fd);
  size_t length = 0;
  for (const char* name : {"Content-Length: ", "content-length: "}) {
    const size_t at = head.find(name);
    if (at != std::string::npos) length = std::stoul(head.substr(at + std::strlen(name)));
  }
  std::string body(length, '\0');
  size_t got = 0;
  while (got < length) {
    const ssize_t n = ::recv(fd, body.data() + got, length - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  body.resize(got);
  return head + body;
}

void FakeUpstream::writeAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace purser::testing
