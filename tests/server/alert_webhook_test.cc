// The budget alerts' webhook over loopback: what it posts, from a worker or from any other
// thread, and that a webhook that fails or hangs up costs the caller nothing.
#include "server/alert_webhook.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <boost/asio/post.hpp>

#include <algorithm>
#include <future>
#include <mutex>

#include "fakes/eventually.h"
#include "fakes/fake_upstream.h"

namespace purser::server {
namespace {

using nlohmann::json;

ledger::Alert alert(const std::string& wallet, int threshold, const char* spent,
                    const char* limit) {
  ledger::Alert a;
  a.wallet_id = wallet;
  a.threshold = threshold;
  a.spent = *Money::parse(spent);
  a.limit = *Money::parse(limit);
  a.window.end = SystemTime::max();  // a wallet without a period
  return a;
}

class AlertWebhookTest : public ::testing::Test {
 protected:
  void SetUp() override { workers.start(); }
  void TearDown() override {
    workers.stop();
    workers.join();
  }

  std::vector<json> received() {
    std::lock_guard lock(mu);
    return bodies;
  }

  ManualClock clock{SystemTime(std::chrono::seconds(1'800'000'000))};
  http::Workers workers{2};
  http::WorkerLocal<http::HttpClient> clients{workers, [this](boost::asio::io_context& ctx) {
                                                return std::make_unique<http::HttpClient>(
                                                    ctx, http::ClientOptions{}, clock);
                                              }};
  std::mutex mu;
  std::vector<json> bodies;        // guarded by mu
  std::vector<std::string> paths;  // guarded by mu
  testing::FakeUpstream hook{[this](int fd) {
    const std::string request = testing::FakeUpstream::readRequest(fd);
    {
      std::lock_guard lock(mu);
      paths.push_back(request.substr(0, request.find("\r\n")));
      bodies.push_back(json::parse(request.substr(request.find("\r\n\r\n") + 4), nullptr, false));
    }
    testing::FakeUpstream::writeAll(fd, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
  }};
  const std::string url = "http://127.0.0.1:" + std::to_string(hook.port()) + "/alerts";
};

TEST_F(AlertWebhookTest, EachAlertIsPostedOnceAsJsonFromAnyThread) {
  AlertWebhook webhook(clock, url, workers, clients);
  // From a thread that is no worker (the fleet's, a timer's): sent from worker 0.
  webhook.post("acme", {alert("w-1", 50, "2.60", "5.00"), alert("w-2", 80, "8.00", "10.00")});
  ASSERT_TRUE(testing::eventually([&] { return received().size() == 2; }, {.what = "two posts"}));
  // From a worker (a request's handler): sent from that worker.
  std::promise<void> posted;
  boost::asio::post(workers.context(1), [&] {
    webhook.post("borealis", {alert("w-3", 100, "1.00", "1.00")});
    posted.set_value();
  });
  posted.get_future().wait();
  ASSERT_TRUE(testing::eventually([&] { return received().size() == 3; }, {.what = "a third"}));
  auto got = received();
  std::sort(got.begin(), got.end(),
            [](const json& a, const json& b) { return a["wallet"] < b["wallet"]; });
  EXPECT_EQ(got[0], (json{{"type", "budget.alert"},
                          {"wallet", "w-1"},
                          {"tenant", "acme"},
                          {"threshold", 50},
                          {"spent", "2.60"},
                          {"limit", "5.00"},
                          {"at", formatRfc3339(clock.now())}}));
  EXPECT_EQ(got[1]["wallet"], "w-2");
  EXPECT_EQ(got[1]["threshold"], 80);
  EXPECT_EQ(got[2]["tenant"], "borealis");
  EXPECT_FALSE(got[2].contains("window")) << "a wallet without a window says none";
  std::lock_guard lock(mu);
  for (const auto& p : paths) EXPECT_EQ(p, "POST /alerts HTTP/1.1");
}

TEST_F(AlertWebhookTest, AWindowedWalletSaysItsWindow) {
  ledger::Alert a = alert("w-1", 90, "9.00", "10.00");
  a.window.start = SystemTime(std::chrono::seconds(1'799'971'200));
  a.window.end = SystemTime(std::chrono::seconds(1'800'057'600));
  const json body = json::parse(AlertWebhook::body(a, "acme", clock.now()));
  EXPECT_EQ(body["window"],
            (json{{"start", formatRfc3339(a.window.start)}, {"end", formatRfc3339(a.window.end)}}));
}

TEST_F(AlertWebhookTest, WithoutAUrlNothingIsSent) {
  AlertWebhook webhook(clock, "", workers, clients);
  webhook.post("acme", {alert("w-1", 50, "2.60", "5.00")});
  // Something sent afterwards through a webhook with a URL arrives alone.
  AlertWebhook other(clock, url, workers, clients);
  other.post("acme", {alert("w-9", 75, "3.00", "4.00")});
  ASSERT_TRUE(testing::eventually([&] { return !received().empty(); }, {.what = "a post"}));
  const auto got = received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["wallet"], "w-9");
}

TEST_F(AlertWebhookTest, AWebhookThatIsDownCostsTheCallerNothing) {
  int closed_port = 0;
  {
    testing::FakeUpstream gone{[](int) {}};
    closed_port = gone.port();
  }
  AlertWebhook webhook(clock, "http://127.0.0.1:" + std::to_string(closed_port) + "/x", workers,
                       clients);
  webhook.post("acme", {alert("w-1", 50, "2.60", "5.00")});  // returns at once, logs the failure
  AlertWebhook working(clock, url, workers, clients);
  working.post("acme", {alert("w-2", 50, "2.60", "5.00")});
  ASSERT_TRUE(testing::eventually([&] { return received().size() == 1; }, {.what = "the next"}));
}

}  // namespace
}  // namespace purser::server
