#include "api/mcp_api.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "api/admin_common.h"
#include "common/json.h"
#include "gateway/api_shape.h"
#include "http/async.h"
#include "identity/payer.h"
#include "ledger/budget.h"
#include "mcp/protocol.h"

namespace purser::api {

namespace {

namespace asio = boost::asio;
using admin::auditEntry;
using admin::commitAudited;
using admin::deny;
using admin::listOf;
using http::Method;
using http::Request;
using http::Response;
using nlohmann::json;

// The session id's bound is the model API's (one rule for both).
using gateway::kMaxSessionBytes;

// Who calls, as the route authenticated them, for the meter (mcp::Caller::context).
struct CallerContext {
  identity::Principal who;
  std::optional<Money> session_cap;  // x-purser-session-budget
};

// A call held on the caller's wallets; settled with what it cost once it ran.
class BudgetHold final : public mcp::CallHold {
 public:
  BudgetHold(ledger::Hold hold, ledger::UsageEvent draft, ToolPrice price, Money held)
      : hold_(std::move(hold)), draft_(std::move(draft)), price_(price), held_(held) {}

  void settle(const mcp::CallEnd& end) override {
    ledger::UsageEvent e = draft_;
    e.latency_ms = std::chrono::duration_cast<std::chrono::milliseconds>(end.took).count();
    e.status = end.ok ? 200 : 502;
    // Per call, and per second of call time (rounded up to the millisecond), never more than
    // was held.
    Money cost = price_.per_call;
    if (price_.per_second.isPositive()) {
      auto timed =
          price_.per_second.mulDiv(std::max<int64_t>(e.latency_ms, 0), 1000, Rounding::kCeil);
      if (timed) cost = cost.add(*timed).value_or(held_);
    }
    e.cost = std::min(cost, held_);
    if (auto settled = hold_.settle(std::move(e)); !settled) {
      spdlog::error("mcp: a tool call's charge was not settled: {}", settled.error().message);
    }
  }

 private:
  ledger::Hold hold_;
  ledger::UsageEvent draft_;
  ToolPrice price_;
  Money held_;
};

class BudgetMeter final : public mcp::CallMeter {
 public:
  BudgetMeter(const Services& s, std::vector<ToolPrice> prices,
              std::vector<std::shared_ptr<mcp::Upstream>> servers)
      : s_(s), prices_(std::move(prices)), servers_(std::move(servers)) {}

  // The principal behind the call; set per request by the route (the Caller carries only what
  // the front needs).
  asio::awaitable<Result<std::unique_ptr<mcp::CallHold>>> hold(const mcp::Caller& caller,
                                                               const std::string& server,
                                                               const std::string& tool) override {
    const ToolPrice price = priceOf(server, tool);
    // The worst case: a call that runs to its server's timeout.
    Money worst = price.per_call;
    if (price.per_second.isPositive()) {
      const int64_t ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(timeoutOf(server)).count();
      auto timed = price.per_second.mulDiv(ms, 1000, Rounding::kCeil);
      if (!timed) co_return fail(timed.error());
      auto sum = worst.add(*timed);
      if (!sum) co_return fail(sum.error());
      worst = *sum;
    }
    const auto& context = *static_cast<const CallerContext*>(caller.context);
    const identity::Principal& who = context.who;
    ledger::UsageEvent draft;
    draft.id = s_.ids.next();
    draft.at = s_.clock.now();
    draft.tenant_id = who.tenant_id;
    draft.team_id = who.team_id;
    if (who.kind == identity::OwnerKind::kUser) {
      draft.user_id = who.id;
    } else {
      draft.service_account_id = who.id;
    }
    draft.key_id = who.key_id;
    draft.session_id = caller.session;
    draft.route = "mcp";
    draft.provider = "mcp:" + server;
    draft.model = mcp::qualify(server, tool);
    const ledger::HoldRequest request{.payer = identity::payerOf(who, s_.directory),
                                      .model = draft.model,
                                      .draft = draft,
                                      .amount = worst,
                                      .tokens = 0,
                                      .lease = std::chrono::minutes(15),
                                      .options = {.fresh_id = true},
                                      .session_cap = context.session_cap};
    ledger::RateDecision rate;
    std::optional<Result<ledger::Hold>> held = s_.budget->tryHold(request, &rate);
    if (!held) {
      held = co_await http::runBlocking(s_.readers, who.tenant_id,
                                        [&] { return s_.budget->hold(request, &rate); });
    }
    if (!*held) {
      if (!rate.allowed) {
        co_return fail(
            Error(ErrorCode::kResourceExhausted,
                  fmt::format("rate limit {} of {} per minute reached", rate.key, rate.limit)));
      }
      co_return fail(held->error());
    }
    co_return std::unique_ptr<mcp::CallHold>(
        std::make_unique<BudgetHold>(std::move(**held), std::move(draft), price, worst));
  }

 private:
  ToolPrice priceOf(const std::string& server, const std::string& tool) const {
    const ToolPrice* any = nullptr;
    for (const auto& p : prices_) {
      if (p.server != server) continue;
      if (p.tool == tool) return p;
      if (p.tool == "*") any = &p;
    }
    return any ? *any : ToolPrice{server, tool, Money(), Money()};
  }
  Duration timeoutOf(const std::string& server) const {
    for (const auto& u : servers_) {
      if (u->options().name == server) return u->options().timeout;
    }
    return std::chrono::seconds(30);
  }

  const Services& s_;
  const std::vector<ToolPrice> prices_;
  const std::vector<std::shared_ptr<mcp::Upstream>> servers_;
};

Response rpcError(int status, int code, const std::string& message) {
  Response r = Response::json(status, writeJson(mcp::error(nullptr, code, message)));
  if (status == 401) r.headers.set("WWW-Authenticate", "Bearer");
  return r;
}

struct McpRoute {
  Services s;
  std::unique_ptr<BudgetMeter> meter;
  std::unique_ptr<mcp::Front> front;
};

asio::awaitable<Response> handle(const McpRoute& route, Request& req) {
  const Services& s = route.s;
  auto who = authenticate(s, req);
  if (!who) co_return rpcError(401, -32001, who.error().message);
  if (who->key_id.empty()) {
    co_return rpcError(401, -32001,
                       "/mcp is called with an API key (Authorization: Bearer <key>); its tools "
                       "say what may be called");
  }
  const auto key = s.directory.key(who->key_id);
  if (!key) co_return rpcError(401, -32001, "invalid API key");
  CallerContext context{*who, std::nullopt};
  mcp::Caller caller;
  caller.principal = who->name;
  caller.tools = s.directory.toolsOf(*key);
  // For upstreams with a caller_header: an RFC 8941 dictionary of ids (names may be any text).
  caller.identity =
      fmt::format("kind={}, id=\"{}\", tenant=\"{}\", team=\"{}\"",
                  identity::ownerKindName(who->kind), who->id, who->tenant_id, who->team_id);
  caller.context = &context;
  if (auto v = req.headers.get("x-purser-session")) caller.session = std::string(*v);
  if (caller.session.size() > kMaxSessionBytes || !isValidUtf8(caller.session) ||
      std::any_of(caller.session.begin(), caller.session.end(),
                  [](char ch) { return static_cast<unsigned char>(ch) < 0x20; })) {
    co_return rpcError(400, mcp::kInvalidRequest,
                       fmt::format("x-purser-session must be UTF-8 text without control "
                                   "characters, at most {} bytes",
                                   kMaxSessionBytes));
  }
  if (auto v = req.headers.get("x-purser-session-budget")) {
    auto cap = gateway::sessionCap(*v, caller.session);
    if (!cap) co_return rpcError(400, mcp::kInvalidRequest, cap.error().message);
    context.session_cap = *cap;
  }
  mcp::FrontReply reply = co_await route.front->handle(caller, req.headers, std::move(req.body));
  if (reply.status == 202) co_return Response::text(202, "");
  co_return Response::json(reply.status, std::move(reply.body));
}

}  // namespace

json serverJson(const mcp::Upstream& u) {
  const mcp::UpstreamOptions& o = u.options();
  return {{"name", o.name},
          {"url", o.url},
          {"credential", u.credentialSource()},
          {"caller_header", o.caller_header.empty() ? json(nullptr) : json(o.caller_header)},
          {"log_bodies", o.log_bodies},
          {"timeout_ms", o.timeout.count()},
          {"max_result_bytes", o.max_result_bytes}};
}

std::shared_ptr<mcp::Upstream> findServer(const McpOptions& options, const std::string& name) {
  for (const auto& u : options.servers) {
    if (u->options().name == name) return u;
  }
  return nullptr;
}

// GET /api/v1/mcp/servers: the upstream servers and where their credential comes from, never
// the credential (platform admins).
asio::awaitable<Response> listServers(const Services& s, const McpOptions& options, Request& req) {
  API_TRY(who, authenticate(s, req));
  if (auto denied = identity::authorize(who, identity::Action::kCreateTenant, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), "mcp.servers.read", "mcp");
  }
  json items = json::array();
  for (const auto& u : options.servers) items.push_back(serverJson(*u));
  co_return jsonResponse(200, listOf(std::move(items)));
}

// PUT /api/v1/mcp/servers/{name}/credential {"api_key": "..."}: the server's credential, sealed
// in the store, winning over the configuration's; DELETE goes back to the configuration's.
asio::awaitable<Response> setCredential(const Services& s, const McpOptions& options,
                                        Request& req) {
  API_TRY(who, authenticate(s, req));
  const std::string name(req.param("name").value_or(""));
  const bool replace = req.method == Method::kPut;
  const std::string action = replace ? "mcp.credential.replace" : "mcp.credential.restore";
  if (auto denied = identity::authorize(who, identity::Action::kCreateTenant, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), action, "mcp:" + name);
  }
  auto server = findServer(options, name);
  if (!server || s.provider_keys == nullptr) {
    co_return problem(404, fmt::format("no MCP server \"{}\"", toValidUtf8(name.substr(0, 64))),
                      "name");
  }
  const std::string before = server->credentialSource();
  if (!replace) {
    if (before != "api") {
      co_return problem(409,
                        fmt::format("MCP server {} already uses its configured credential", name));
    }
    json was = json::object(), is = json::object();
    was["credential"] = before;
    is["credential"] = "config";
    ledger::AuditEntry entry =
        auditEntry(who, action, "mcp:" + name, writeJson(was), writeJson(is), std::string());
    ledger::Change change = s.provider_keys->removal(std::string(kStoredPrefix) + name);
    auto done = co_await commitAudited(s, std::move(change), std::move(entry));
    if (!done) co_return problem(done.error());
    server->setCredential(std::nullopt);
    co_return jsonResponse(200, serverJson(*server));
  }
  API_TRY(body, parseObject(req));
  API_TRY(key, optionalString(body, "api_key"));
  if (!key || key->empty() || key->size() > 8192 ||
      std::any_of(key->begin(), key->end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) == 0x7f;
      })) {
    co_return problem(400,
                      "\"api_key\" must be the server's credential: 1 to 8192 visible characters",
                      "api_key");
  }
  // The audit entry says that the credential changed, never what it is.
  std::vector<std::string> keys;
  keys.push_back(*key);
  json was = json::object(), is = json::object();
  was["credential"] = before;
  is["credential"] = "api";
  ledger::AuditEntry entry =
      auditEntry(who, action, "mcp:" + name, writeJson(was), writeJson(is), std::string());
  ledger::Change change =
      s.provider_keys->replacement(std::string(kStoredPrefix) + name, std::move(keys));
  auto done = co_await commitAudited(s, std::move(change), std::move(entry));
  if (!done) co_return problem(done.error());
  server->setCredential(*key);
  co_return jsonResponse(200, serverJson(*server));
}

Result<void> addMcpRoutes(http::Router& router, const Services& services, McpOptions options) {
  auto admin = std::make_shared<const McpOptions>(options);
  PURSER_TRY(router.addAsync(Method::kGet, "/api/v1/mcp/servers", [services, admin](Request& req) {
    return listServers(services, *admin, req);
  }));
  for (const Method m : {Method::kPut, Method::kDelete}) {
    PURSER_TRY(router.addAsync(
        m, "/api/v1/mcp/servers/{name}/credential",
        [services, admin](Request& req) { return setCredential(services, *admin, req); }));
  }
  if (options.servers.empty()) return {};
  auto route = std::make_shared<McpRoute>(McpRoute{services, nullptr, nullptr});
  route->meter = std::make_unique<BudgetMeter>(route->s, options.prices, options.servers);
  route->front = std::make_unique<mcp::Front>(
      options.servers, *route->meter, services.clock,
      mcp::FrontOptions{.version = options.version, .max_session_bytes = kMaxSessionBytes});
  PURSER_TRY(router.addAsync(Method::kPost, "/mcp",
                             [route](Request& req) { return handle(*route, req); }));
  for (const Method m : {Method::kGet, Method::kDelete}) {
    PURSER_TRY(router.add(m, "/mcp", [](Request&) {
      Response r = rpcError(405, mcp::kInvalidRequest,
                            "this MCP endpoint keeps no sessions and sends nothing unasked: POST "
                            "each message");
      r.headers.set("Allow", "POST");
      return r;
    }));
  }
  return {};
}

}  // namespace purser::api
