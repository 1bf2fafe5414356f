// Upstream: Purser as an MCP client of one configured server (`mcp.servers[]`), over Streamable
// HTTP. The session with the upstream is Purser's business, never the caller's: it is opened
// (initialize, then notifications/initialized) at the first need, its Mcp-Session-Id kept and
// sent, and opened again once when the upstream forgets it (404). The caller's Purser key never
// reaches the upstream; the server's own credential (a bearer key) and configured headers do.
//
// Thread-safety: every method may be called from any worker concurrently; the session and the
// tool list are guarded by a mutex, and each call uses its worker's HTTP client.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/json.h"
#include "common/result.h"
#include "http/client.h"
#include "http/workers.h"

namespace purser::mcp {

struct UpstreamOptions {
  std::string name;  // the server's name in Purser (validServerName)
  std::string url;   // its Streamable HTTP endpoint
  std::vector<std::pair<std::string, std::string>> headers;
  std::string bearer;  // the server's own credential, sent as Authorization: Bearer
  // When set, a header of this name carries who is calling (the caller's principal, never their
  // key), for an upstream that wants to know.
  std::string caller_header;
  // Tool call arguments and results go to Purser's log (they are never stored otherwise).
  bool log_bodies = false;
  std::chrono::milliseconds timeout{30'000};
  size_t max_result_bytes = 1 << 20;
  std::chrono::seconds tools_ttl{30};  // how long a fetched tool list is served before re-asking
  size_t max_nesting = 64;
  std::shared_ptr<const http::TlsProfile> tls;
};

// A tool call's outcome: the upstream's `result` (content, isError, ...) or its JSON-RPC error
// object; `failed` when the upstream could not answer at all (unreachable, timeout, too large,
// garbage), with why.
struct CallOutcome {
  Json result;  // set on success
  Json error;   // the upstream's JSON-RPC error object, when it answered one
};

class Upstream {
 public:
  Upstream(UpstreamOptions options, http::WorkerLocal<http::HttpClient>& clients,
           const Clock& clock);

  const UpstreamOptions& options() const { return options_; }

  // The server's credential set through the API (sealed in the store), winning over the
  // configuration's `bearer`; nullopt goes back to the configuration's.
  void setCredential(std::optional<std::string> bearer);
  // "api" when a credential set through the API is used, "config" when the configuration's,
  // "none" when the server is called without one.
  std::string credentialSource() const;

  // The server's tools as it lists them (every page), served from memory for `tools_ttl`.
  boost::asio::awaitable<Result<std::vector<Json>>> tools();

  // tools/call of `tool`. kUnavailable when the upstream failed to answer (the message says how:
  // unreachable, no answer within the timeout, larger than max_result_bytes, not JSON-RPC).
  // `caller` goes in the caller_header, when the server has one.
  boost::asio::awaitable<Result<CallOutcome>> call(std::string tool, Json arguments, Json meta,
                                                   std::string caller = {});

  // The server's prompts (prompts/list, every page; not kept).
  boost::asio::awaitable<Result<std::vector<Json>>> prompts();
  // One request passed through as it is (prompts/get): the upstream's result or its error.
  // `caller` as for call().
  boost::asio::awaitable<Result<CallOutcome>> forward(std::string method, Json params,
                                                      std::string caller = {});

  // Forgets the tool list (the next tools() asks again).
  void invalidate();

 private:
  // One JSON-RPC request in the current session (opening one when there is none; opening it
  // again once when the upstream answers 404 for the one it had).
  boost::asio::awaitable<Result<Json>> request(std::string method, Json params, size_t max_bytes,
                                               std::string caller = {});
  boost::asio::awaitable<Result<void>> open();
  // A list method paged to its end: the objects with a string "name" under `field`.
  boost::asio::awaitable<Result<std::vector<Json>>> listAll(std::string method, std::string field);
  // POSTs one message; the HTTP response.
  boost::asio::awaitable<Result<http::ClientResponse>> post(const Json& message,
                                                            const std::string& session,
                                                            const std::string& version,
                                                            size_t max_bytes,
                                                            const std::string& caller = {});

  const UpstreamOptions options_;
  http::WorkerLocal<http::HttpClient>& clients_;
  const Clock& clock_;
  mutable std::mutex mu_;
  std::optional<std::string> credential_;  // guarded by mu_: set through the API
  std::string session_;                    // guarded by mu_; "" when the upstream gave none
  std::string version_;                    // guarded by mu_; "" until initialized
  uint64_t generation_ = 0;                // guarded by mu_: sessions opened
  std::vector<Json> tools_;                // guarded by mu_
  MonoTime tools_fetched_{};               // guarded by mu_
  bool have_tools_ = false;                // guarded by mu_
  uint64_t next_id_ = 1;                   // guarded by mu_
};

}  // namespace purser::mcp
