// Front: the one MCP endpoint callers see (`/mcp`), over the configured upstream servers. It
// answers one JSON-RPC message per POST with one JSON object and keeps nothing per caller
// between requests — no Mcp-Session-Id is given — so any replica serves any request and a client
// survives a replica's restart between two calls. Upstream sessions are Upstream's business.
//
//   initialize                 the negotiated version, tools capability, serverInfo "purser"
//   notifications/*            202, nothing else
//   ping                       {}
//   tools/list                 every upstream's tools the caller may use, named `server.tool`;
//                              an upstream that cannot answer is left out of the list (and said
//                              in the log), never fails the others
//   tools/call                 a tool the caller may not use (or that does not exist) is refused
//                              with -32003 naming it and never reaches an upstream; the call is
//                              held by the CallMeter (price, wallets, rate limits) before it runs
//                              and settled after, whatever the outcome
//   prompts/list, prompts/get  the same for prompts: named `server.prompt`, allowed by the same
//                              patterns as tools (a server's prompts come with `server/*`);
//                              not priced
//   resources/*                not served (-32601): a resource is named by its server's own URI,
//                              which cannot say which server it is on without rewriting it
//
// Who the caller is and what they may use comes from the caller of handle() (the gateway's
// authentication); what a call costs and whether it may run, from the CallMeter seam — so this
// folder knows nothing of keys or wallets.
//
// Thread-safety: handle() may run on any worker concurrently.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/json.h"
#include "common/result.h"
#include "http/message.h"
#include "mcp/upstream.h"

namespace purser::mcp {

// The caller of one request, as the gateway authenticated them.
struct Caller {
  std::string principal;           // for logs and errors
  std::vector<std::string> tools;  // allow-list patterns (protocol.h)
  // What an upstream with a caller_header is told of who calls (never a key).
  std::string identity;
  // The agent run this call belongs to ("" when none). When empty, a tools/call's
  // `_meta["purser/session"]` names it.
  std::string session;
  // The authenticating side's own record of the caller (the gateway's principal), passed through
  // to the CallMeter untouched.
  const void* context = nullptr;
};

// How a held call ended, to settle it.
struct CallEnd {
  bool ok = false;  // the upstream answered a result that is not isError
  Duration took{};
};

// A tool call held before it runs; dropped unsettled, it gives its hold back.
class CallHold {
 public:
  virtual ~CallHold() = default;
  virtual void settle(const CallEnd& end) = 0;
};

// The money and limits of tool calls (Purser's ledger behind it; a seam for tests).
class CallMeter {
 public:
  virtual ~CallMeter() = default;
  // A hold for one call of `server`'s `tool` by `caller`; an error (its message shown to the
  // caller) when a wallet or rate limit refuses it. May wait (a shared store), never blocking.
  virtual boost::asio::awaitable<Result<std::unique_ptr<CallHold>>> hold(
      const Caller& caller, const std::string& server, const std::string& tool) = 0;
};

struct FrontOptions {
  std::string version = "1";  // serverInfo.version
  size_t max_body_bytes = 1 << 20;
  size_t max_nesting = 64;
  size_t max_session_bytes = 256;  // a session named in _meta
};

// What to answer: an HTTP status and a JSON body (empty for 202).
struct FrontReply {
  int status = 200;
  std::string body;
};

class Front {
 public:
  Front(std::vector<std::shared_ptr<Upstream>> servers, CallMeter& meter, const Clock& clock,
        FrontOptions options = {});

  // One POST to /mcp with `body` and the request's `headers` (MCP-Protocol-Version, and the
  // Mcp-Method/Mcp-Name of the newest revision, which must agree with the body: 400 otherwise).
  boost::asio::awaitable<FrontReply> handle(const Caller& caller, const http::Headers& headers,
                                            std::string body);

 private:
  enum class Listing { kTools, kPrompts };
  // tools/list or prompts/list: every server's items the caller may use, named server.item.
  boost::asio::awaitable<Json> listQualified(const Caller& caller, const Json& id, Listing listing);
  // A qualified name (params.name) resolved to its server, or the refusal to answer with
  // (malformed; denied and unknown alike).
  struct Resolved {
    std::shared_ptr<Upstream> upstream;  // null: answer `refusal`
    Json refusal;
    std::string qualified, server, name;
  };
  Resolved resolve(const Caller& caller, const Json& id, const Json& params,
                   std::string_view what) const;
  boost::asio::awaitable<Json> callTool(const Caller& caller, const Json& id, const Json& params);
  boost::asio::awaitable<Json> getPrompt(const Caller& caller, const Json& id, const Json& params);
  std::shared_ptr<Upstream> server(const std::string& name) const;

  const std::vector<std::shared_ptr<Upstream>> servers_;
  CallMeter& meter_;
  const Clock& clock_;
  const FrontOptions options_;
};

}  // namespace purser::mcp
