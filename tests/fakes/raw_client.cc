#include "fakes/raw_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace purser::testing {
namespace {
constexpr int kSafetyTimeoutSeconds = 20;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
}  // namespace

std::string RawResponse::header(const std::string& name) const {
  auto it = headers.find(lower(name));
  return it == headers.end() ? std::string() : it->second;
}

RawClient::RawClient(uint16_t port, const char* host) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{kSafetyTimeoutSeconds, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, host, &addr.sin_addr);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) close();
}

RawClient::~RawClient() { close(); }

void RawClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool RawClient::send(const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool RawClient::fill() {
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffer_.append(buf, static_cast<size_t>(n));
    return true;
  }
}

bool RawClient::readUntil(const std::string& needle) {
  while (buffer_.find(needle) == std::string::npos) {
    if (!fill()) return false;
  }
  return true;
}

std::optional<RawResponse> RawClient::readResponse(bool is_head) {
  size_t header_end;
  while ((header_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    if (!fill()) return std::nullopt;
  }
  RawResponse r;
  const std::string head = buffer_.substr(0, header_end);
  buffer_.erase(0, header_end + 4);
  size_t line_end = head.find("\r\n");
  const std::string status_line = head.substr(0, line_end);
  if (status_line.size() < 12) return std::nullopt;
  r.status = std::stoi(status_line.substr(9, 3));
  while (line_end != std::string::npos) {
    const size_t start = line_end + 2;
    line_end = head.find("\r\n", start);
    const std::string line =
        head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    // A field sent more than once (Set-Cookie) keeps every value, one per line.
    std::string& field = r.headers[lower(line.substr(0, colon))];
    field = field.empty() ? value : field + "\n" + value;
  }
  if (r.status == 100) return readResponse(is_head);
  if (is_head) return r;
  if (lower(r.header("transfer-encoding")) == "chunked") {
    for (;;) {
      size_t eol;
      while ((eol = buffer_.find("\r\n")) == std::string::npos) {
        if (!fill()) return std::nullopt;
      }
      const size_t size = std::stoul(buffer_.substr(0, eol), nullptr, 16);
      while (buffer_.size() < eol + 2 + size + 2) {
        if (!fill()) return std::nullopt;
      }
      r.body += buffer_.substr(eol + 2, size);
      buffer_.erase(0, eol + 2 + size + 2);
      if (size == 0) break;
    }
    return r;
  }
  const std::string length = r.header("content-length");
  const size_t want = length.empty() ? 0 : std::stoul(length);
  while (buffer_.size() < want) {
    if (!fill()) return std::nullopt;
  }
  r.body = buffer_.substr(0, want);
  buffer_.erase(0, want);
  return r;
}

bool RawClient::waitForClose() {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == ECONNRESET;  // EAGAIN here means the safety timeout expired
    }
  }
}

std::optional<std::string> RawClient::readUntilClose() {
  std::string all = std::move(buffer_);
  buffer_.clear();
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n == 0) return all;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ECONNRESET) return all;
      return std::nullopt;  // the safety timeout expired
    }
    all.append(buf, static_cast<size_t>(n));
  }
}

std::string jsonRequest(const std::string& method, const std::string& path,
                        const std::vector<std::string>& headers, const std::string& body) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: t\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  return req + "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

RawResponse callJson(uint16_t port, const std::string& method, const std::string& path,
                     const std::vector<std::string>& headers, const std::string& body) {
  RawClient c(port);
  if (!c.connected() || !c.send(jsonRequest(method, path, headers, body))) return {};
  auto r = c.readResponse();
  return r ? *r : RawResponse{};
}

}  // namespace purser::testing
