// A blocking TCP client for tests that need byte-level control of what a server receives:
// half-sent requests, stalls, pipelining, oversized headers. Every read has a generous safety
// timeout so a broken server fails the test instead of hanging it; tests never assert on time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace purser::testing {

struct RawResponse {
  int status = 0;
  // Lower-case names; a field sent more than once (Set-Cookie) has its values one per line.
  std::map<std::string, std::string> headers;
  std::string body;
  std::string header(const std::string& name) const;
};

// "METHOD PATH HTTP/1.1" with `headers` ("Name: value") and a JSON `body`, ready to send.
std::string jsonRequest(const std::string& method, const std::string& path,
                        const std::vector<std::string>& headers, const std::string& body);
// Sends jsonRequest(...) on a fresh connection to 127.0.0.1:`port` and reads the answer;
// status 0 when it could not be sent or no answer came.
RawResponse callJson(uint16_t port, const std::string& method, const std::string& path,
                     const std::vector<std::string>& headers = {}, const std::string& body = "");

class RawClient {
 public:
  explicit RawClient(uint16_t port, const char* host = "127.0.0.1");
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  // False when the peer closed or reset the connection.
  bool send(const std::string& data);
  // Reads one response (Content-Length or chunked body); nullopt on close, reset or timeout.
  // `head`: the response to a HEAD request, which has no body whatever its Content-Length.
  std::optional<RawResponse> readResponse(bool head = false);
  // Reads until the received bytes contain `needle` (not consumed); false on close or timeout.
  bool readUntil(const std::string& needle);
  // Reads until the peer closes; true if it closed (or reset) before the safety timeout.
  bool waitForClose();
  // Everything (not yet consumed) until the peer closes; nullopt when the safety timeout expired
  // first.
  std::optional<std::string> readUntilClose();
  void close();

 private:
  bool fill();  // reads more bytes into buffer_; false on close/error/timeout
  int fd_ = -1;
  std::string buffer_;
};

}  // namespace purser::testing
