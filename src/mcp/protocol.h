// The Model Context Protocol's wire, as Purser's MCP gateway speaks it (pure: no I/O).
//
// JSON-RPC 2.0 messages over Streamable HTTP (revisions 2025-06-18 and 2025-11-25): one message
// per POST, answered with one JSON object (or read from an upstream's server-sent events).
// Tools of every upstream server are offered under one name each, `<server>.<tool>`: server
// names are lower-case letters, digits and '-', so the first '.' always splits them, and the
// name a tool has never changes when another server is added ('.' is allowed in MCP tool names;
// '/' is not). Allow-lists name tools as `server/tool`, `server/*` or `*`.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/result.h"

namespace purser::mcp {

// The protocol revisions this gateway speaks, newest first.
inline const std::vector<std::string>& supportedVersions() {
  static const std::vector<std::string> kVersions = {"2025-11-25", "2025-06-18", "2025-03-26"};
  return kVersions;
}
// The version to answer an initialize asking for `requested`: the same when supported, else the
// newest (the client decides whether it can go on).
std::string negotiateVersion(std::string_view requested);

// JSON-RPC error codes.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
// Implementation-defined (the -32000..-32099 range): a tool this key may not use, a wallet or
// rate limit that refuses the call, an upstream that failed.
inline constexpr int kToolDenied = -32003;
inline constexpr int kRefused = -32004;
inline constexpr int kUpstreamFailed = -32005;

// One JSON-RPC message from a client: a request (has an id), a notification (no id), or a
// response to something the gateway asked (result or error; the gateway asks nothing, so these
// are acknowledged and dropped).
struct Message {
  enum class Kind { kRequest, kNotification, kResponse };
  Kind kind = Kind::kRequest;
  Json id;  // string or integer; null for notifications
  std::string method;
  Json params;  // object, or null when absent
};

// A message parsed from a POST body, or the JSON-RPC error to answer (with the id when it could
// be read). Batches (arrays) are refused: revision 2025-06-18 removed them.
struct Parsed {
  std::optional<Message> message;
  Json error;  // a whole JSON-RPC error response when `message` is empty
};
Parsed parseMessage(std::string_view body, size_t max_nesting);

Json result(const Json& id, Json value);
Json error(const Json& id, int code, std::string_view message, Json data = nullptr);

// `server.tool` for a server's tool; the server and tool of a qualified name (nullopt when the
// name has no '.' or an empty part).
std::string qualify(std::string_view server, std::string_view tool);
std::optional<std::pair<std::string, std::string>> split(std::string_view qualified);

// A server name a configuration may use: 1 to 63 of [a-z0-9-], starting with a letter.
bool validServerName(std::string_view name);
// An allow-list entry: `*`, `server/*` or `server/tool` (tool: 1 to 128 of the characters MCP
// allows in tool names: letters, digits, '_', '-', '.').
bool validToolPattern(std::string_view pattern);
// Whether `patterns` allows the tool `tool` of `server`.
bool allows(const std::vector<std::string>& patterns, std::string_view server,
            std::string_view tool);
// Whether every tool `inner` allows, `outer` allows too (a key made by a key stays within it).
bool within(const std::vector<std::string>& inner, const std::vector<std::string>& outer);

// The JSON-RPC response with `id` in a body an upstream answered: a JSON object, or server-sent
// events whose `data:` lines carry messages (other messages, such as progress notifications, are
// skipped). kUnavailable when there is none or it is not JSON-RPC.
Result<Json> responseFrom(std::string_view content_type, std::string_view body, const Json& id,
                          size_t max_nesting);

}  // namespace purser::mcp
