// The gateway's stages in process: a Gateway built from its parts (directory, wallets, journal,
// rate limits, prices) with a ManualClock, driven through its router, against a scripted upstream
// on loopback. Each refusal stops at its stage (nothing held, nothing sent); a served request is
// held, forwarded as the client's bytes, settled from the upstream's usage and charged.
#include <gtest/gtest.h>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <future>
#include <mutex>

#include "common/clock.h"
#include "common/id.h"
#include "common/json.h"
#include "common/random.h"
#include "fakes/fake_upstream.h"
#include "fakes/temp_dir.h"
#include "gateway/gateway.h"
#include "http/client.h"
#include "http/metrics.h"
#include "http/router.h"
#include "http/workers.h"
#include "identity/directory.h"
#include "identity/keys.h"
#include "ledger/meter.h"
#include "ledger/price.h"
#include "ledger/rate_limiter.h"
#include "ledger/wallet_book.h"
#include "store/sqlite_store.h"

namespace purser::gateway {
namespace {

namespace asio = boost::asio;
using nlohmann::json;
using testing::FakeUpstream;

// What the scripted upstream answers: usage of 12 input and 3 output tokens.
constexpr const char* kAnswer =
    R"({"id":"c1","object":"chat.completion","model":"up-model","choices":[{"index":0,)"
    R"("message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],)"
    R"("usage":{"prompt_tokens":12,"completion_tokens":3}})";

// An upstream's own refusal, sized by its Content-Length.
constexpr const char* kRefusal =
    R"({"error":{"message":"this model's context length is 8192 tokens","type":)"
    R"("invalid_request_error","code":"context_length_exceeded"}})";

class GatewayStagesTest : public ::testing::Test {
 protected:
  GatewayStagesTest()
      : random_(7),
        ids_(clock_, random_),
        directory_(clock_),
        wallets_(clock_),
        workers_(1),
        clients_(workers_,
                 [](asio::io_context& ctx) {
                   return std::make_unique<http::HttpClient>(ctx, http::ClientOptions{});
                 }),
        prices_({{"up", "up-model", {*Money::parse("1"), *Money::parse("2")}}}, {}) {
    upstream_ = std::make_unique<FakeUpstream>([this](int fd) {
      const std::string req = FakeUpstream::readRequest(fd);
      {
        std::lock_guard lock(mu_);
        received_.push_back(req.substr(req.find("\r\n\r\n") + 4));
      }
      const bool refuse = refuse_;
      const std::string body = refuse ? kRefusal : kAnswer;
      FakeUpstream::writeAll(
          fd, std::string(refuse ? "HTTP/1.1 400 Bad Request" : "HTTP/1.1 200 OK") +
                  "\r\nContent-Type: application/json\r\n"
                  "Content-Length: " +
                  std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
    });
    auto store = store::SqliteStore::open({.path = dir_.file("ledger.db")}, clock_);
    EXPECT_TRUE(store.has_value());
    store_ = std::move(*store);
    auto meter = ledger::Meter::open(*store_, wallets_, clock_, nullptr, {.dir = dir_.file("j")});
    EXPECT_TRUE(meter.has_value()) << meter.error().toString();
    meter_ = std::move(*meter);

    identity::Snapshot people;
    people.tenants.push_back({"t1", "acme", "2026-01-01T00:00:00Z"});
    people.teams.push_back({"tm1", "t1", "ml", "2026-01-01T00:00:00Z"});
    people.users.push_back({"u1", "t1", "tm1", "dana", "", identity::Role::kMember, ""});
    const identity::NewKey k = identity::generateKey(ids_, random_);
    key_ = k.secret;
    identity::ApiKey key;
    key.id = k.id;
    key.lookup = k.lookup;
    key.secret_hash = k.secret_hash;
    key.owner_id = "u1";
    key.tenant_id = "t1";
    key.team_id = "tm1";
    key.models = {"chat"};
    people.keys.push_back(key);
    directory_.load(people);

    ledger::WalletSpec wallet;
    wallet.id = "w-user";
    wallet.tenant_id = "t1";
    wallet.scope = {ledger::ScopeKind::kUser, "u1"};
    wallet.limit = *Money::parse("1");
    EXPECT_TRUE(wallets_.put(wallet).has_value());

    std::vector<std::unique_ptr<Provider>> providers;
    providers.push_back(
        std::make_unique<Provider>("up", ProviderKind::kOpenAi,
                                   "http://127.0.0.1:" + std::to_string(upstream_->port()) + "/v1",
                                   std::vector<std::string>{"provider-secret"},
                                   std::chrono::seconds(10), std::chrono::seconds(5)));
    std::vector<std::unique_ptr<Route>> routes;
    for (const char* alias : {"chat", "other"}) {
      auto route = std::make_unique<Route>();
      route->alias = alias;
      route->max_tokens = 100;
      route->retries = 0;
      auto target = std::make_unique<Target>();
      target->provider = providers[0].get();
      target->model = "up-model";
      target->price = prices_.find("up", "up-model");
      route->targets.push_back(std::move(target));
      routes.push_back(std::move(route));
    }
    budget_ = std::make_unique<ledger::Budget>(wallets_, *meter_, limiter_, rate_limits_);
    gateway_ = std::make_unique<Gateway>(GatewayDeps{.clock = clock_,
                                                     .random = random_,
                                                     .ids = ids_,
                                                     .directory = directory_,
                                                     .budget = *budget_,
                                                     .prices = prices_,
                                                     .clients = clients_,
                                                     .metrics = &metrics_},
                                         std::move(providers), std::move(routes));
    EXPECT_TRUE(gateway_->addRoutes(router_).has_value());
    workers_.start();
  }

  ~GatewayStagesTest() override {
    gateway_.reset();
    workers_.stop();
    workers_.join();
    meter_->close();
    store_->close();
  }

  // Runs one request through the router on the worker, as the server would.
  http::Response post(const std::string& path, std::string body, bool with_key = true) {
    http::Request req;
    req.method = http::Method::kPost;
    req.target = path;
    if (with_key) req.headers.add("Authorization", "Bearer " + key_);
    req.body = std::move(body);
    auto match = router_.match(req);
    EXPECT_NE(match.route, nullptr);
    auto& handler = std::get<http::AsyncHandler>(match.route->handler);
    std::promise<http::Response> done;
    asio::co_spawn(
        workers_.context(0),
        [&]() -> asio::awaitable<void> { done.set_value(co_await handler(req)); }, asio::detached);
    return done.get_future().get();
  }

  static json parsed(const http::Response& r) { return parseJsonOrDiscarded(r.body); }

  std::vector<ledger::UsageEvent> events() {
    auto e = meter_->events({.scope_kind = ledger::ScopeKind::kUser, .scope_id = "u1"});
    EXPECT_TRUE(e.has_value());
    return e ? *e : std::vector<ledger::UsageEvent>{};
  }

  ledger::WalletStatus wallet() { return *wallets_.status("w-user"); }

  size_t receivedCount() {
    std::lock_guard lock(mu_);
    return received_.size();
  }

  ManualClock clock_;
  SeededRandom random_;
  IdGenerator ids_;
  ::purser::testing::TempDir dir_;
  identity::Directory directory_;
  ledger::WalletBook wallets_;
  ledger::RateLimiter limiter_{clock_};
  ledger::RateLimitBook rate_limits_;
  http::Workers workers_;
  http::WorkerLocal<http::HttpClient> clients_;
  ledger::PriceBook prices_;
  http::MetricsRegistry metrics_;
  http::Router router_;
  std::unique_ptr<store::SqliteStore> store_;
  std::unique_ptr<ledger::Meter> meter_;
  std::unique_ptr<ledger::Budget> budget_;
  std::unique_ptr<FakeUpstream> upstream_;
  std::unique_ptr<Gateway> gateway_;
  std::string key_;
  std::mutex mu_;
  std::vector<std::string> received_;  // request bodies the upstream got
  std::atomic<bool> refuse_{false};    // the upstream answers 400 with kRefusal
};

TEST_F(GatewayStagesTest, ARefusalStopsAtItsStageWithNothingHeldOrSent) {
  struct Case {
    std::string body;
    bool with_key;
    int status;
    std::string code_or_param;  // error.code, else error.param
  };
  const std::vector<Case> cases = {
      {R"({"model":"chat","messages":[]})", false, 401, "missing_api_key"},
      {R"({"model":"chat","messages":[)", true, 400, ""},
      {R"(["model"])", true, 400, ""},
      {R"({"messages":[]})", true, 400, "model"},
      {R"({"model":"chat"})", true, 400, "messages"},
      {R"({"model":"nope","messages":[]})", true, 404, "model_not_found"},
      {R"({"model":"other","messages":[]})", true, 403, "model_not_allowed"},
      {R"({"model":"chat","messages":[],"stream":"yes"})", true, 400, "stream"},
      {R"({"model":"chat","messages":[],"max_tokens":0})", true, 400, "max_tokens"},
      {R"({"model":"chat","messages":[],"model":"chat"})", true, 400, "model"},
  };
  for (const auto& c : cases) {
    http::Response r = post("/v1/chat/completions", c.body, c.with_key);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.body;
    const json error = parsed(r)["error"];
    ASSERT_TRUE(error.is_object()) << r.body;
    if (!c.code_or_param.empty()) {
      EXPECT_TRUE(error["code"] == c.code_or_param || error["param"] == c.code_or_param)
          << c.body << " -> " << r.body;
    }
    EXPECT_EQ(wallet().reserved, Money::zero()) << c.body;
  }
  EXPECT_EQ(receivedCount(), 0u);
  EXPECT_TRUE(events().empty());
}

TEST_F(GatewayStagesTest, AServedRequestIsHeldForwardedAsBytesSettledAndCharged) {
  const std::string body =
      R"({"messages":[{"role":"user","content":"hello"}], "model": "chat", "max_tokens": 5000})";
  http::Response r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(parsed(r)["model"], "chat") << "the upstream's model name is not shown";
  ASSERT_TRUE(r.headers.get("x-purser-overhead-us").has_value());
  // Time comes from the injected clock only: it did not move, so no time passed.
  EXPECT_EQ(*r.headers.get("x-purser-overhead-us"), "0");
  {
    std::lock_guard lock(mu_);
    ASSERT_EQ(received_.size(), 1u);
    EXPECT_EQ(received_[0],
              R"({"messages":[{"role":"user","content":"hello"}], "model": "up-model", )"
              R"("max_tokens": 100})");
  }
  const auto e = events();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].tokens.input, 12);
  EXPECT_EQ(e[0].tokens.output, 3);
  EXPECT_FALSE(e[0].estimated);
  EXPECT_EQ(e[0].route, "chat");
  EXPECT_EQ(e[0].model, "up-model");
  EXPECT_EQ(e[0].latency_ms, 0);
  // 12 input tokens at 1 per million and 3 output at 2 per million.
  EXPECT_EQ(e[0].cost, Money::fromNanos(12 * 1000 + 3 * 2000));
  EXPECT_EQ(wallet().spent, e[0].cost);
  EXPECT_EQ(wallet().reserved, Money::zero());
  const std::string text = metrics_.render();
  EXPECT_NE(text.find(R"(purser_gateway_requests_total{route="chat",target="up",code="200"} 1)"),
            std::string::npos)
      << text;
}

// A streamed request the upstream refuses with a plain JSON answer: the member reads the
// upstream's own words, and nothing is charged.
TEST_F(GatewayStagesTest, AStreamedRequestsRefusalReachesTheMemberInTheUpstreamsWords) {
  refuse_ = true;
  http::Response r = post("/v1/chat/completions",
                          R"({"messages":[{"role":"user","content":"hello"}], "model": "chat", )"
                          R"("stream": true})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(parsed(r)["error"]["message"], "this model's context length is 8192 tokens") << r.body;
  EXPECT_EQ(parsed(r)["error"]["code"], "context_length_exceeded") << r.body;
  EXPECT_EQ(receivedCount(), 1u);
  EXPECT_EQ(wallet().spent, Money::zero());
  EXPECT_EQ(wallet().reserved, Money::zero());
}

TEST_F(GatewayStagesTest, AWorstCaseBeyondTheWalletIsRefusedBeforeTheUpstream) {
  ledger::WalletSpec small = wallet().spec;
  small.limit = Money::fromNanos(1000);  // less than 100 output tokens at 2 per million
  ASSERT_TRUE(wallets_.put(small).has_value());
  http::Response r = post("/v1/chat/completions", R"({"model":"chat","messages":[]})");
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(parsed(r)["error"]["code"], "budget_exceeded") << r.body;
  EXPECT_EQ(receivedCount(), 0u);
  EXPECT_TRUE(events().empty());
  EXPECT_EQ(wallet().reserved, Money::zero());
}

TEST_F(GatewayStagesTest, AReloadPutsARoutesTargetsAndStrategyInForceAndKeepsTheirHealth) {
  const Route* chat = gateway_->route("chat");
  ASSERT_NE(chat, nullptr);
  Target* before = configuredTargets(*chat).at(0);
  before->health.consecutive_failures = 2;  // some history the reload must keep

  // The same target with a weight, and a second model of the same provider.
  ASSERT_TRUE(gateway_->reloadRoute("chat", Strategy::kWeighted,
                                    {{"up", "up-model", 3}, {"up", "up-other", 1}}));
  std::vector<Target*> now = configuredTargets(*chat);
  ASSERT_EQ(now.size(), 2u);
  EXPECT_EQ(now[0], before) << "a target that stays is the same target";
  EXPECT_EQ(now[0]->health.consecutive_failures.load(), 2);
  EXPECT_EQ(now[0]->weight.load(), 3);
  EXPECT_EQ(now[1]->model, "up-other");
  EXPECT_EQ(now[1]->price, nullptr) << "unpriced: the price book has no up/up-other";
  EXPECT_EQ(chat->strategy.load(), Strategy::kWeighted);
  EXPECT_EQ(allTargets(*chat).size(), 2u);

  // Dropping the first and bringing it back later gives the same target again.
  ASSERT_TRUE(gateway_->reloadRoute("chat", Strategy::kFallback, {{"up", "up-other", 1}}));
  ASSERT_EQ(configuredTargets(*chat).size(), 1u);
  Target* other = configuredTargets(*chat)[0];
  {
    // Requests follow at once: the one target left serves the upstream model up-other.
    http::Response r =
        post("/v1/chat/completions",
             R"({"messages":[{"role":"user","content":"hi"}],"model":"chat","max_tokens":5})");
    ASSERT_EQ(r.status, 200) << r.body;
    std::lock_guard lock(mu_);
    ASSERT_FALSE(received_.empty());
    EXPECT_NE(received_.back().find(R"("model":"up-other")"), std::string::npos)
        << received_.back();
  }
  ASSERT_TRUE(gateway_->reloadRoute("chat", Strategy::kFallback,
                                    {{"up", "up-model", 1}, {"up", "up-other", 1}}));
  EXPECT_EQ(configuredTargets(*chat)[0], before);
  EXPECT_EQ(configuredTargets(*chat)[1], other);

  // What cannot be applied changes nothing.
  auto unknown = gateway_->reloadRoute("chat", Strategy::kFallback, {{"new-provider", "m", 1}});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(unknown.error().message.find("new-provider"), std::string::npos);
  EXPECT_FALSE(gateway_->reloadRoute("chat", Strategy::kFallback, {}));
  auto missing = gateway_->reloadRoute("nope", Strategy::kFallback, {{"up", "up-model", 1}});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(configuredTargets(*chat).size(), 2u);
  EXPECT_EQ(chat->strategy.load(), Strategy::kFallback);
  // The other route was never touched.
  EXPECT_EQ(configuredTargets(*gateway_->route("other")).size(), 1u);
}

}  // namespace
}  // namespace purser::gateway
