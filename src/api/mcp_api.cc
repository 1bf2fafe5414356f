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
using http::Method;
using http::Request;
using http::Response;

// The session id's bound is the model API's (one rule for both).
using gateway::kMaxSessionBytes;

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
    const identity::Principal& who = *static_cast<const identity::Principal*>(caller.context);
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
                                      .options = {.fresh_id = true}};
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
  mcp::Caller caller;
  caller.principal = who->name;
  caller.tools = key->tools;
  caller.context = &*who;
  if (auto v = req.headers.get("x-purser-session")) caller.session = std::string(*v);
  if (caller.session.size() > kMaxSessionBytes || !isValidUtf8(caller.session) ||
      std::any_of(caller.session.begin(), caller.session.end(),
                  [](char ch) { return static_cast<unsigned char>(ch) < 0x20; })) {
    co_return rpcError(400, mcp::kInvalidRequest,
                       fmt::format("x-purser-session must be UTF-8 text without control "
                                   "characters, at most {} bytes",
                                   kMaxSessionBytes));
  }
  mcp::FrontReply reply = co_await route.front->handle(caller, req.headers, std::move(req.body));
  if (reply.status == 202) co_return Response::text(202, "");
  co_return Response::json(reply.status, std::move(reply.body));
}

}  // namespace

Result<void> addMcpRoutes(http::Router& router, const Services& services, McpOptions options) {
  auto route = std::make_shared<McpRoute>(McpRoute{services, nullptr, nullptr});
  route->meter = std::make_unique<BudgetMeter>(route->s, options.prices, options.servers);
  route->front = std::make_unique<mcp::Front>(options.servers, *route->meter, services.clock,
                                              mcp::FrontOptions{.version = options.version});
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
