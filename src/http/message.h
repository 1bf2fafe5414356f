// HTTP messages as the rest of Purser sees them: plain structs with no Beast types, so handlers
// and their headers compile quickly and can be built in tests without a socket.
//
// A Response either carries its whole body, or a StreamProducer that writes the body piece by
// piece (chunked transfer encoding; used for server-sent events). Messages are values owned by
// one connection at a time; they are not shared between threads.
#pragma once

#include <utility>  // before Asio (Boost 1.74's awaitable.hpp needs it)

#include <boost/asio/awaitable.hpp>

#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace purser::http {

namespace asio = boost::asio;

enum class Method { kGet, kHead, kPost, kPut, kPatch, kDelete, kOptions, kOther };

std::string_view methodName(Method m);
Method parseMethod(std::string_view name);

// Header fields in arrival order. Names compare case-insensitively; values are kept as sent.
class Headers {
 public:
  using Field = std::pair<std::string, std::string>;

  void add(std::string name, std::string value);
  // Replaces every field of that name with one field.
  void set(std::string_view name, std::string value);
  void remove(std::string_view name);
  std::optional<std::string_view> get(std::string_view name) const;
  bool has(std::string_view name) const { return get(name).has_value(); }

  auto begin() const { return fields_.begin(); }
  auto end() const { return fields_.end(); }
  size_t size() const { return fields_.size(); }
  bool empty() const { return fields_.empty(); }

 private:
  std::vector<Field> fields_;
};

bool equalsIgnoreCase(std::string_view a, std::string_view b);

struct Request {
  Method method = Method::kGet;
  std::string method_name;  // as sent, e.g. "GET"; meaningful for Method::kOther
  std::string target;       // path and query as sent: "/v1/models?limit=5"
  int version = 11;         // 10 or 11
  Headers headers;
  std::string body;
  std::string remote_address;  // "127.0.0.1:53422"
  // Over mutual TLS: the client certificate's subject (RFC 2253, "CN=ci-runner,O=Acme"), which
  // the handshake verified against the client CA; empty otherwise. Never from a header.
  std::string tls_client_subject;
  // The deepest nesting a JSON or YAML body may have (http.max_nesting_depth); set by the server.
  size_t max_nesting = 128;

  // Filled in by the router: values of "{name}" and "*name" segments of the matched pattern.
  std::vector<std::pair<std::string, std::string>> params;

  std::string_view path() const;
  std::string_view query() const;  // without '?', empty when absent
  std::optional<std::string_view> param(std::string_view name) const;
  // The value of `name` in the query string, percent-decoded; nullopt when absent.
  std::optional<std::string> queryParam(std::string_view name) const;
  // Why the path or query cannot be served, or nullopt: a malformed percent-escape, or bytes
  // that decode to invalid UTF-8 or a NUL (the server answers such requests with 400).
  std::optional<std::string> targetProblem() const;
};

// Writes a streamed response body. Each write() is sent to the client before it returns (no
// buffering of the whole body); an error means the client went away or was too slow.
class BodyWriter {
 public:
  virtual ~BodyWriter() = default;
  virtual asio::awaitable<Result<void>> write(std::string_view data) = 0;
};

using StreamProducer = std::function<asio::awaitable<void>(BodyWriter&)>;

// Thrown by a StreamProducer to drop the connection mid-body on purpose (no terminating chunk,
// no error logged): the client sees the stream cut.
struct AbortStream : std::exception {
  const char* what() const noexcept override { return "stream aborted"; }
};

struct Response {
  int status = 200;
  Headers headers;
  std::string body;
  // When set, the body above is ignored and the producer writes it as it is made.
  StreamProducer stream;
  // Close the connection after this response even if the client would keep it open.
  bool close = false;
  // Close the connection without answering at all (a simulated vanishing server).
  bool abort = false;

  static Response text(int status, std::string body,
                       std::string content_type = "text/plain; charset=utf-8");
  static Response json(int status, std::string body);
};

// The reason phrase of a status code ("Payload Too Large"), or "Unknown".
std::string_view statusReason(int status);

// Decodes %XX escapes (and '+' as space when `plus_as_space`); nullopt on a malformed escape.
std::optional<std::string> percentDecode(std::string_view s, bool plus_as_space);

}  // namespace purser::http
