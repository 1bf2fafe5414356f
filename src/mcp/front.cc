#include "mcp/front.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "mcp/protocol.h"

namespace purser::mcp {

namespace {

FrontReply reply(int status, const Json& message) { return {status, writeJson(message)}; }

// The _meta key a tools/call may name its agent run with.
constexpr const char* kSessionMeta = "purser/session";
// How much of a call's arguments and of its answer go to the log (log_bodies).
constexpr size_t kMaxLoggedBody = 64 * 1024;

}  // namespace

Front::Front(std::vector<std::shared_ptr<Upstream>> servers, CallMeter& meter, const Clock& clock,
             FrontOptions options)
    : servers_(std::move(servers)), meter_(meter), clock_(clock), options_(std::move(options)) {}

std::shared_ptr<Upstream> Front::server(const std::string& name) const {
  for (const auto& s : servers_) {
    if (s->options().name == name) return s;
  }
  return nullptr;
}

boost::asio::awaitable<FrontReply> Front::handle(const Caller& caller, const http::Headers& headers,
                                                 std::string body) {
  if (body.size() > options_.max_body_bytes) {
    co_return reply(
        413, error(nullptr, kInvalidRequest,
                   fmt::format("the message is larger than {} bytes", options_.max_body_bytes)));
  }
  if (auto version = headers.get("mcp-protocol-version")) {
    const auto& versions = supportedVersions();
    if (std::find(versions.begin(), versions.end(), *version) == versions.end()) {
      co_return reply(
          400, error(nullptr, kInvalidRequest,
                     fmt::format("MCP-Protocol-Version {} is not one this server "
                                 "speaks ({})",
                                 toValidUtf8(version->substr(0, 32)), fmt::join(versions, ", "))));
    }
  }
  Parsed parsed = parseMessage(body, options_.max_nesting);
  if (!parsed.message) co_return reply(400, parsed.error);
  const Message& m = *parsed.message;
  // The newest revision's routing headers must say what the body says.
  if (auto method = headers.get("mcp-method"); method && *method != m.method) {
    co_return reply(400, error(m.id, kInvalidRequest,
                               "the Mcp-Method header does not match the message's method"));
  }
  if (auto name = headers.get("mcp-name")) {
    const Json& params = m.params;
    const std::string body_name =
        params.is_object() && params.contains("name") && params["name"].is_string()
            ? params["name"].get<std::string>()
        : params.is_object() && params.contains("uri") && params["uri"].is_string()
            ? params["uri"].get<std::string>()
            : std::string();
    if (*name != body_name) {
      co_return reply(400, error(m.id, kInvalidRequest,
                                 "the Mcp-Name header does not match the message's name"));
    }
  }
  if (m.kind != Message::Kind::kRequest) co_return FrontReply{202, ""};
  if (m.method == "initialize") {
    std::string requested;
    if (m.params.is_object() && m.params.contains("protocolVersion") &&
        m.params["protocolVersion"].is_string()) {
      requested = m.params["protocolVersion"].get<std::string>();
    }
    Json r = Json::object();
    r["protocolVersion"] = negotiateVersion(requested);
    r["capabilities"] = {{"tools", {{"listChanged", false}}},
                         {"prompts", {{"listChanged", false}}}};
    r["serverInfo"] = {{"name", "purser"}, {"version", options_.version}};
    r["instructions"] =
        "Tools of this organisation's MCP servers, named server.tool; only those your key may "
        "use are listed, and each call is metered to your wallets.";
    co_return reply(200, result(m.id, std::move(r)));
  }
  if (m.method == "ping") co_return reply(200, result(m.id, Json::object()));
  if (m.method == "tools/list") {
    Json listed = co_await listQualified(caller, m.id, Listing::kTools);
    co_return reply(200, listed);
  }
  if (m.method == "tools/call") {
    Json called = co_await callTool(caller, m.id, m.params);
    co_return reply(200, called);
  }
  if (m.method == "prompts/list") {
    Json listed = co_await listQualified(caller, m.id, Listing::kPrompts);
    co_return reply(200, listed);
  }
  if (m.method == "prompts/get") {
    Json got = co_await getPrompt(caller, m.id, m.params);
    co_return reply(200, got);
  }
  co_return reply(
      200, error(m.id, kMethodNotFound,
                 fmt::format("method {} is not served here", toValidUtf8(m.method.substr(0, 64)))));
}

boost::asio::awaitable<Json> Front::listQualified(const Caller& caller, const Json& id,
                                                  Listing listing) {
  const char* field = listing == Listing::kTools ? "tools" : "prompts";
  Json items = Json::array();
  for (const auto& s : servers_) {
    const std::string& name = s->options().name;
    // A server none of whose tools the caller may use is not even asked.
    bool any = false;
    for (const auto& p : caller.tools) {
      any = any || p == "*" || p.starts_with(name + "/");
    }
    if (!any) continue;
    Result<std::vector<Json>> listed = std::vector<Json>();
    if (listing == Listing::kTools) {
      listed = co_await s->tools();
    } else {
      listed = co_await s->prompts();
    }
    if (!listed) {
      // Many servers have no prompts at all (-32601): that is no news.
      if (listing == Listing::kTools) {
        spdlog::warn("mcp: {}'s tools are left out of a list: {}", name, listed.error().message);
      }
      continue;
    }
    for (const auto& t : *listed) {
      const std::string item = t["name"].get<std::string>();
      if (!allows(caller.tools, name, item)) continue;
      Json offered = t;
      offered["name"] = qualify(name, item);
      items.push_back(std::move(offered));
    }
  }
  Json listed = Json::object();
  listed[field] = std::move(items);
  co_return result(id, std::move(listed));
}

Front::Resolved Front::resolve(const Caller& caller, const Json& id, const Json& params,
                               std::string_view what) const {
  Resolved out;
  if (!params.is_object() || !params.contains("name") || !params["name"].is_string()) {
    out.refusal = error(id, kInvalidParams, fmt::format("params.name must name the {}", what));
    return out;
  }
  out.qualified = params["name"].get<std::string>();
  auto parts = split(out.qualified);
  out.upstream = parts ? server(parts->first) : nullptr;
  // Not there, or not this caller's: the same answer, so a key learns nothing of what it may
  // not use.
  if (!out.upstream || !allows(caller.tools, parts->first, parts->second)) {
    const std::string shown = toValidUtf8(out.qualified.substr(0, 200));
    out.upstream = nullptr;
    out.refusal = error(
        id, kToolDenied,
        fmt::format("no {} {} that this key may {}", what, shown, what == "tool" ? "call" : "use"),
        Json{{std::string(what), shown}});
    return out;
  }
  out.server = parts->first;
  out.name = parts->second;
  return out;
}

boost::asio::awaitable<Json> Front::callTool(const Caller& caller, const Json& id,
                                             const Json& params) {
  Resolved r = resolve(caller, id, params, "tool");
  if (!r.upstream) co_return std::move(r.refusal);
  const std::string& qualified = r.qualified;
  std::shared_ptr<Upstream> upstream = r.upstream;
  Json arguments = params.contains("arguments") ? params["arguments"] : Json(nullptr);
  if (!arguments.is_null() && !arguments.is_object()) {
    co_return error(id, kInvalidParams, "params.arguments must be an object");
  }
  Json meta = params.contains("_meta") ? params["_meta"] : Json(nullptr);
  // The agent run, from the request's header or else the call's _meta.
  Caller who = caller;
  if (who.session.empty() && meta.is_object() && meta.contains(kSessionMeta)) {
    const Json& named = meta[kSessionMeta];
    const bool fits = named.is_string() &&
                      named.get_ref<const std::string&>().size() <= options_.max_session_bytes;
    if (!fits || !isValidUtf8(named.get_ref<const std::string&>()) ||
        std::any_of(named.get_ref<const std::string&>().begin(),
                    named.get_ref<const std::string&>().end(),
                    [](char ch) { return static_cast<unsigned char>(ch) < 0x20; })) {
      co_return error(id, kInvalidParams,
                      fmt::format("_meta[\"{}\"] must be UTF-8 text without control characters, "
                                  "at most {} bytes",
                                  kSessionMeta, options_.max_session_bytes));
    }
    who.session = named.get<std::string>();
  }
  const bool log_bodies = upstream->options().log_bodies;
  std::string logged_arguments;
  if (log_bodies) logged_arguments = writeJson(arguments);
  auto held = co_await meter_.hold(who, r.server, r.name);
  if (!held) {
    co_return error(
        id, kRefused, held.error().message,
        Json{{"tool", qualified}, {"reason", std::string(errorCodeName(held.error().code))}});
  }
  std::unique_ptr<CallHold> hold = std::move(*held);
  const MonoTime started = clock_.monotonic();
  auto outcome =
      co_await upstream->call(r.name, std::move(arguments), std::move(meta), who.identity);
  CallEnd end;
  end.took = clock_.monotonic() - started;
  if (log_bodies) {
    // Only for servers whose configuration asks for it (mcp.servers[].log_bodies).
    std::string answered = !outcome                    ? "failed: " + outcome.error().message
                           : !outcome->error.is_null() ? writeJson(outcome->error)
                                                       : writeJson(outcome->result);
    if (answered.size() > kMaxLoggedBody) answered.resize(kMaxLoggedBody);
    if (logged_arguments.size() > kMaxLoggedBody) logged_arguments.resize(kMaxLoggedBody);
    spdlog::info("mcp: {} called {} (session \"{}\"): arguments {} answer {}", who.principal,
                 qualified, who.session, toValidUtf8(logged_arguments), toValidUtf8(answered));
  }
  if (!outcome) {
    hold->settle(end);
    co_return error(id, kUpstreamFailed, outcome.error().message, Json{{"tool", qualified}});
  }
  if (!outcome->error.is_null()) {
    hold->settle(end);
    // The upstream's own refusal (an unknown tool, bad arguments), passed on as it said it.
    Json e = {{"jsonrpc", "2.0"}, {"id", id}, {"error", outcome->error}};
    co_return e;
  }
  end.ok = !(outcome->result.contains("isError") && outcome->result["isError"] == true);
  hold->settle(end);
  co_return result(id, std::move(outcome->result));
}

boost::asio::awaitable<Json> Front::getPrompt(const Caller& caller, const Json& id,
                                              const Json& params) {
  Resolved r = resolve(caller, id, params, "prompt");
  if (!r.upstream) co_return std::move(r.refusal);
  const std::string& qualified = r.qualified;
  Json forwarded = params;
  forwarded["name"] = r.name;
  auto outcome = co_await r.upstream->forward("prompts/get", std::move(forwarded));
  if (!outcome) {
    co_return error(id, kUpstreamFailed, outcome.error().message, Json{{"prompt", qualified}});
  }
  if (!outcome->error.is_null()) {
    Json e = {{"jsonrpc", "2.0"}, {"id", id}, {"error", outcome->error}};
    co_return e;
  }
  co_return result(id, std::move(outcome->result));
}

}  // namespace purser::mcp
