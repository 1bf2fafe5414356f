#include "mcp/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace purser::mcp {

namespace {

bool toolChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
}

bool validId(const Json& id) {
  return id.is_string() || id.is_number_integer() || id.is_number_unsigned();
}

}  // namespace

std::string negotiateVersion(std::string_view requested) {
  const auto& versions = supportedVersions();
  if (std::find(versions.begin(), versions.end(), requested) != versions.end()) {
    return std::string(requested);
  }
  return versions.front();
}

Parsed parseMessage(std::string_view body, size_t max_nesting) {
  Parsed out;
  auto j = parseJson(body, max_nesting);
  if (!j) {
    out.error = error(nullptr, kParseError, "the body is not JSON: " + j.error().message);
    return out;
  }
  if (j->is_array()) {
    out.error = error(nullptr, kInvalidRequest,
                      "batches are not accepted (MCP 2025-06-18 removed them): send one message "
                      "per request");
    return out;
  }
  if (!j->is_object()) {
    out.error = error(nullptr, kInvalidRequest, "a JSON-RPC message is an object");
    return out;
  }
  const Json id = j->contains("id") ? (*j)["id"] : Json(nullptr);
  const bool has_id = j->contains("id");
  if (!j->contains("jsonrpc") || (*j)["jsonrpc"] != "2.0") {
    out.error = error(has_id && validId(id) ? id : Json(nullptr), kInvalidRequest,
                      "\"jsonrpc\" must be \"2.0\"");
    return out;
  }
  if (has_id && !validId(id)) {
    out.error = error(nullptr, kInvalidRequest, "\"id\" must be a string or an integer");
    return out;
  }
  Message m;
  if (!j->contains("method")) {
    if (has_id && (j->contains("result") || j->contains("error"))) {
      m.kind = Message::Kind::kResponse;
      m.id = id;
      out.message = std::move(m);
      return out;
    }
    out.error = error(has_id ? id : Json(nullptr), kInvalidRequest, "\"method\" is missing");
    return out;
  }
  if (!(*j)["method"].is_string() || (*j)["method"].get_ref<const std::string&>().empty() ||
      (*j)["method"].get_ref<const std::string&>().size() > 256) {
    out.error = error(has_id ? id : Json(nullptr), kInvalidRequest,
                      "\"method\" must be a string of 1 to 256 characters");
    return out;
  }
  m.method = (*j)["method"].get<std::string>();
  if (j->contains("params")) {
    if (!(*j)["params"].is_object()) {
      out.error =
          error(has_id ? id : Json(nullptr), kInvalidParams, "\"params\" must be an object");
      return out;
    }
    m.params = (*j)["params"];
  }
  m.kind = has_id ? Message::Kind::kRequest : Message::Kind::kNotification;
  m.id = id;
  out.message = std::move(m);
  return out;
}

Json result(const Json& id, Json value) {
  return Json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(value)}};
}

Json error(const Json& id, int code, std::string_view message, Json data) {
  Json e = {{"code", code}, {"message", toValidUtf8(message)}};
  if (!data.is_null()) e["data"] = std::move(data);
  return Json{{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(e)}};
}

std::string qualify(std::string_view server, std::string_view tool) {
  return fmt::format("{}.{}", server, tool);
}

std::optional<std::pair<std::string, std::string>> split(std::string_view qualified) {
  const size_t dot = qualified.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == qualified.size()) {
    return std::nullopt;
  }
  return std::pair{std::string(qualified.substr(0, dot)), std::string(qualified.substr(dot + 1))};
}

bool validServerName(std::string_view name) {
  if (name.empty() || name.size() > 63 || std::islower(static_cast<unsigned char>(name[0])) == 0) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) != 0 ||
           std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '-';
  });
}

bool validToolPattern(std::string_view pattern) {
  if (pattern == "*") return true;
  const size_t slash = pattern.find('/');
  if (slash == std::string_view::npos || !validServerName(pattern.substr(0, slash))) return false;
  const std::string_view tool = pattern.substr(slash + 1);
  if (tool == "*") return true;
  return !tool.empty() && tool.size() <= 128 && std::all_of(tool.begin(), tool.end(), toolChar);
}

bool allows(const std::vector<std::string>& patterns, std::string_view server,
            std::string_view tool) {
  for (const auto& p : patterns) {
    if (p == "*") return true;
    const size_t slash = p.find('/');
    if (slash == std::string::npos || std::string_view(p).substr(0, slash) != server) continue;
    const std::string_view t = std::string_view(p).substr(slash + 1);
    if (t == "*" || t == tool) return true;
  }
  return false;
}

bool within(const std::vector<std::string>& inner, const std::vector<std::string>& outer) {
  for (const auto& p : inner) {
    if (p == "*") {
      if (std::find(outer.begin(), outer.end(), "*") == outer.end()) return false;
      continue;
    }
    const size_t slash = p.find('/');
    if (slash == std::string::npos) return false;
    const std::string server = p.substr(0, slash), tool = p.substr(slash + 1);
    if (tool == "*") {
      const bool whole = std::any_of(outer.begin(), outer.end(), [&](const std::string& o) {
        return o == "*" || o == server + "/*";
      });
      if (!whole) return false;
    } else if (!allows(outer, server, tool)) {
      return false;
    }
  }
  return true;
}

Result<Json> responseFrom(std::string_view content_type, std::string_view body, const Json& id,
                          size_t max_nesting) {
  const auto matches = [&](const Json& m) {
    return m.is_object() && m.contains("id") && m["id"] == id &&
           (m.contains("result") || m.contains("error"));
  };
  if (content_type.starts_with("text/event-stream")) {
    // Events are separated by a blank line; each `data:` line adds a line to its data.
    std::string data;
    size_t start = 0;
    const auto flush = [&]() -> std::optional<Json> {
      if (data.empty()) return std::nullopt;
      Json m = parseJsonOrDiscarded(data, max_nesting);
      data.clear();
      if (matches(m)) return m;
      return std::nullopt;
    };
    while (start <= body.size()) {
      size_t end = body.find('\n', start);
      if (end == std::string_view::npos) end = body.size();
      std::string_view line = body.substr(start, end - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) {
        if (auto m = flush()) return std::move(*m);
      } else if (line.starts_with("data:")) {
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        if (!data.empty()) data += '\n';
        data.append(line);
      }
      start = end + 1;
    }
    if (auto m = flush()) return std::move(*m);
    return fail(unavailable("the MCP server's event stream ended without the answer"));
  }
  auto j = parseJson(body, max_nesting);
  if (!j)
    return fail(unavailable("the MCP server answered what is not JSON: " + j.error().message));
  if (!matches(*j)) {
    return fail(unavailable("the MCP server answered what is not a JSON-RPC response to it"));
  }
  return std::move(*j);
}

}  // namespace purser::mcp
