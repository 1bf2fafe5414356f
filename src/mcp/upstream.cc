#include "mcp/upstream.h"

#include <fmt/format.h>

#include "mcp/protocol.h"

namespace purser::mcp {

namespace {

Error failed(const std::string& server, std::string why) {
  return Error(ErrorCode::kUnavailable, fmt::format("MCP server {} {}", server, std::move(why)));
}

}  // namespace

Upstream::Upstream(UpstreamOptions options, http::WorkerLocal<http::HttpClient>& clients,
                   const Clock& clock)
    : options_(std::move(options)), clients_(clients), clock_(clock) {}

void Upstream::setCredential(std::optional<std::string> bearer) {
  std::lock_guard lock(mu_);
  credential_ = std::move(bearer);
}

std::string Upstream::credentialSource() const {
  std::lock_guard lock(mu_);
  if (credential_) return "api";
  return options_.bearer.empty() ? "none" : "config";
}

void Upstream::invalidate() {
  std::lock_guard lock(mu_);
  have_tools_ = false;
}

boost::asio::awaitable<Result<http::ClientResponse>> Upstream::post(const Json& message,
                                                                    const std::string& session,
                                                                    const std::string& version,
                                                                    size_t max_bytes,
                                                                    const std::string& caller) {
  std::string bearer;
  {
    std::lock_guard lock(mu_);
    bearer = credential_.value_or(options_.bearer);
  }
  http::ClientRequest req;
  req.method = http::Method::kPost;
  req.url = options_.url;
  for (const auto& [name, value] : options_.headers) req.headers.add(name, value);
  req.headers.set("Content-Type", "application/json");
  req.headers.set("Accept", "application/json, text/event-stream");
  if (!bearer.empty()) req.headers.set("Authorization", "Bearer " + bearer);
  if (!options_.caller_header.empty() && !caller.empty()) {
    req.headers.set(options_.caller_header, caller);
  }
  if (!session.empty()) req.headers.set("Mcp-Session-Id", session);
  if (!version.empty()) req.headers.set("MCP-Protocol-Version", version);
  req.body = writeJson(message);
  req.timeout = options_.timeout;
  req.max_response_bytes = max_bytes;
  req.tls = options_.tls;
  auto r = co_await clients_.current().request(std::move(req));
  if (!r) {
    const bool too_large = r.error().code == ErrorCode::kResourceExhausted ||
                           r.error().message.find("large") != std::string::npos;
    co_return fail(
        failed(options_.name,
               too_large ? fmt::format("answered more than {} bytes", max_bytes)
                         : "could not be reached or did not answer in time: " + r.error().message));
  }
  co_return std::move(*r);
}

boost::asio::awaitable<Result<void>> Upstream::open() {
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
  }
  Json params = {{"protocolVersion", supportedVersions().front()},
                 {"capabilities", Json::object()},
                 {"clientInfo", {{"name", "purser"}, {"version", "1"}}}};
  Json message = {
      {"jsonrpc", "2.0"}, {"id", id}, {"method", "initialize"}, {"params", std::move(params)}};
  auto r = co_await post(message, "", "", 64 * 1024);
  if (!r) co_return fail(r.error());
  if (r->status != 200) {
    co_return fail(failed(options_.name, fmt::format("refused initialize ({})", r->status)));
  }
  auto answer = responseFrom(r->headers.get("content-type").value_or(""), r->body, Json(id),
                             options_.max_nesting);
  if (!answer) co_return fail(failed(options_.name, answer.error().message));
  const Json& res = (*answer).contains("result") ? (*answer)["result"] : Json(nullptr);
  if (!res.is_object() || !res.contains("protocolVersion") || !res["protocolVersion"].is_string()) {
    co_return fail(failed(options_.name, "answered initialize without a protocol version"));
  }
  const std::string version = res["protocolVersion"].get<std::string>();
  const auto& versions = supportedVersions();
  if (std::find(versions.begin(), versions.end(), version) == versions.end()) {
    co_return fail(failed(options_.name, "speaks a protocol version Purser does not: " +
                                             toValidUtf8(version.substr(0, 32))));
  }
  std::string session(r->headers.get("mcp-session-id").value_or(""));
  if (session.size() > 256) co_return fail(failed(options_.name, "gave an oversized session id"));
  // The client's side of the handshake; an upstream that refuses it is still used.
  Json initialized = {{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}};
  (void)co_await post(initialized, session, version, 64 * 1024);
  std::lock_guard lock(mu_);
  session_ = std::move(session);
  version_ = version;
  ++generation_;
  co_return Result<void>();
}

boost::asio::awaitable<Result<Json>> Upstream::request(std::string method, Json params,
                                                       size_t max_bytes, std::string caller) {
  bool reopened = false;
  for (int opens = 0; opens < 3;) {
    std::string session, version;
    uint64_t id = 0, generation = 0;
    {
      std::lock_guard lock(mu_);
      session = session_;
      version = version_;
      generation = generation_;
      id = next_id_++;
    }
    if (version.empty()) {
      auto opened = co_await open();
      if (!opened) co_return fail(opened.error());
      ++opens;
      continue;
    }
    Json message = {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}};
    auto r = co_await post(message, session, version, max_bytes, caller);
    if (!r) co_return fail(r.error());
    if (r->status == 404 && !reopened) {
      reopened = true;
      // The upstream forgot the session (a restart): open a new one, once.
      std::lock_guard lock(mu_);
      if (generation_ == generation) version_.clear();
      continue;
    }
    if (r->status != 200) {
      co_return fail(failed(options_.name, fmt::format("answered HTTP {}", r->status)));
    }
    auto answer = responseFrom(r->headers.get("content-type").value_or(""), r->body, Json(id),
                               options_.max_nesting);
    if (!answer) co_return fail(failed(options_.name, answer.error().message));
    co_return std::move(*answer);
  }
  co_return fail(failed(options_.name, "forgot the session again right after it was opened"));
}

boost::asio::awaitable<Result<std::vector<Json>>> Upstream::listAll(std::string method,
                                                                    std::string field) {
  std::vector<Json> all;
  Json cursor = nullptr;
  for (int page = 0; page < 100; ++page) {
    Json params = Json::object();
    if (!cursor.is_null()) params["cursor"] = cursor;
    auto answer = co_await request(method, std::move(params), options_.max_result_bytes);
    if (!answer) co_return fail(answer.error());
    const Json& res = answer->contains("result") ? (*answer)["result"] : Json(nullptr);
    if (!res.is_object() || !res.contains(field) || !res[field].is_array()) {
      co_return fail(
          failed(options_.name, fmt::format("answered {} without a list of {}", method, field)));
    }
    for (const auto& t : res[field]) {
      if (t.is_object() && t.contains("name") && t["name"].is_string() && all.size() < 10'000) {
        all.push_back(t);
      }
    }
    if (!res.contains("nextCursor") || !res["nextCursor"].is_string()) break;
    cursor = res["nextCursor"];
  }
  co_return all;
}

boost::asio::awaitable<Result<std::vector<Json>>> Upstream::tools() {
  {
    std::lock_guard lock(mu_);
    if (have_tools_ && clock_.monotonic() - tools_fetched_ < options_.tools_ttl) co_return tools_;
  }
  auto all = co_await listAll("tools/list", "tools");
  if (!all) co_return fail(all.error());
  std::lock_guard lock(mu_);
  tools_ = *all;
  tools_fetched_ = clock_.monotonic();
  have_tools_ = true;
  co_return std::move(*all);
}

boost::asio::awaitable<Result<std::vector<Json>>> Upstream::prompts() {
  co_return co_await listAll("prompts/list", "prompts");
}

boost::asio::awaitable<Result<CallOutcome>> Upstream::forward(std::string method, Json params,
                                                              std::string caller) {
  auto answer =
      co_await request(method, std::move(params), options_.max_result_bytes, std::move(caller));
  if (!answer) co_return fail(answer.error());
  CallOutcome out;
  if (answer->contains("error")) {
    out.error = (*answer)["error"];
  } else {
    out.result = (*answer)["result"];
    if (!out.result.is_object()) {
      co_return fail(failed(options_.name,
                            fmt::format("answered {} with a result that is no object", method)));
    }
  }
  co_return out;
}

boost::asio::awaitable<Result<CallOutcome>> Upstream::call(std::string tool, Json arguments,
                                                           Json meta, std::string caller) {
  Json params = {{"name", std::move(tool)}};
  if (!arguments.is_null()) params["arguments"] = std::move(arguments);
  if (!meta.is_null()) params["_meta"] = std::move(meta);
  co_return co_await forward("tools/call", std::move(params), std::move(caller));
}

}  // namespace purser::mcp
