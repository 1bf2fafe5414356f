// Nothing acknowledged is lost: `purser serve` metering under load is killed with SIGKILL, then
// restarted on the same data; every usage event whose settlement was acknowledged is there,
// exactly once, and every reservation the API acknowledged is held again after the restart, so
// its client can still settle or release it (the work runs outside the server).
#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/money.h"
#include "fakes/api_client.h"
#include "fakes/eventually.h"
#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/temp_dir.h"

namespace purser {
namespace {

using nlohmann::json;
using testing::Process;
using testing::RawClient;

constexpr const char* kAdminKey = "crash-test-admin-key-0123456789";

using Reply = testing::ApiReply;

Reply call(uint16_t port, const std::string& method, const std::string& path,
           const std::string& key, const json& body = nullptr) {
  return testing::callApi(port, method, path, key, body);
}

class LedgerCrashTest : public ::testing::Test {
 protected:
  std::unique_ptr<Process> start() {
    testing::writeFile(dir.file("purser.yaml"), "listen: 127.0.0.1:0\nthreads: 2\n");
    auto p = std::make_unique<Process>(
        std::vector<std::string>{PURSER_BINARY, "serve", "--config", dir.file("purser.yaml"),
                                 "--data", dir.file("var")},
        "", std::vector<std::string>{std::string("PURSER_ADMIN_KEY=") + kAdminKey});
    auto line = p->waitForStdout("purser: listening on ");
    EXPECT_TRUE(line.has_value()) << p->err();
    port = line ? testing::portFromListeningLine(*line) : 0;
    return p;
  }

  testing::TempDir dir;
  uint16_t port = 0;
};

TEST_F(LedgerCrashTest, EveryAcknowledgedEventSurvivesKillMinus9) {
  auto p = start();
  const std::string tenant =
      call(port, "POST", "/api/v1/tenants", kAdminKey, {{"name", "acme"}}).body["id"];
  const std::string team =
      call(port, "POST", "/api/v1/teams", kAdminKey, {{"tenant", tenant}, {"name", "ml"}})
          .body["id"];
  const std::string bot = call(port, "POST", "/api/v1/service-accounts", kAdminKey,
                               {{"tenant", tenant}, {"team", team}, {"name", "bot"}})
                              .body["id"];
  const std::string key =
      call(port, "POST", "/api/v1/keys", kAdminKey,
           {{"owner", {{"kind", "service_account"}, {"id", bot}}}, {"name", "k"}})
          .body["key"];
  ASSERT_EQ(call(port, "POST", "/api/v1/wallets", kAdminKey,
                 {{"scope", {{"kind", "tenant"}, {"id", tenant}}}, {"limit", "1000000"}})
                .status,
            201);

  std::mutex mu;
  std::set<std::string> settled;    // settlement acknowledged
  std::set<std::string> abandoned;  // reservation acknowledged, never settled
  std::set<std::string> attempted;  // every id sent, whatever happened
  std::atomic<bool> stop{false};
  std::atomic<int> acknowledged{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        const std::string id = "ev-" + std::to_string(t) + "-" + std::to_string(i);
        {
          std::lock_guard lock(mu);
          attempted.insert(id);
        }
        Reply r = call(port, "POST", "/api/v1/reservations", key,
                       {{"id", id}, {"amount", "0.25"}, {"model", "m"}});
        if (r.status != 201) break;  // the server is gone
        if (i % 5 == 4) {
          std::lock_guard lock(mu);
          abandoned.insert(id);  // the client "crashes" before settling
          continue;
        }
        Reply s = call(port, "POST", "/api/v1/reservations/" + id + "/settle", key,
                       {{"cost", "0.10"}, {"tokens", {{"input", 10}, {"output", 5}}}});
        if (s.status != 200) break;
        std::lock_guard lock(mu);
        settled.insert(id);
        ++acknowledged;
      }
    });
  }
  ASSERT_TRUE(testing::eventually([&] { return acknowledged.load() >= 150; },
                                  {.attempts = 12000,
                                   .pause = std::chrono::milliseconds(5),
                                   .what = "150 acknowledged requests"}));
  p->signal(SIGKILL);  // mid-load: requests are in flight
  EXPECT_EQ(p->wait(), 128 + SIGKILL);
  stop = true;
  for (auto& c : clients) c.join();

  p = start();
  ASSERT_TRUE(p->waitForStderr("made through the API are held again").has_value()) << p->err();
  const auto events_now = [&] {
    Reply usage =
        call(port, "GET", "/api/v1/usage?scope=service_account:" + bot + "&limit=10000", kAdminKey);
    EXPECT_EQ(usage.status, 200);
    std::map<std::string, json> events;
    for (const auto& e : usage.body["data"]) {
      EXPECT_FALSE(events.contains(e["id"])) << "event " << e["id"] << " recorded twice";
      events[e["id"]] = e;
    }
    return events;
  };
  std::map<std::string, json> events = events_now();
  for (const auto& id : settled) {
    ASSERT_TRUE(events.contains(id)) << "acknowledged event " << id << " was lost";
    EXPECT_EQ(events[id]["cost"], "0.10") << id;
    EXPECT_EQ(events[id]["recovered"], false) << id;
  }
  for (const auto& [id, e] : events) {
    EXPECT_TRUE(attempted.contains(id)) << "unknown event " << id;
    EXPECT_EQ(e["cost"], "0.10") << "only settlements are charged: " << e.dump();
  }
  // What the crash cut off is still held, and its clients finish it: the abandoned ones settle
  // now, the ones whose settlement was in flight settle (or are told they already did).
  const Reply held = call(port, "GET", "/api/v1/wallets?scope=tenant:" + tenant, kAdminKey);
  const Money reserved = *Money::parse(held.body["data"][0]["reserved"].get<std::string>());
  EXPECT_GE(reserved, *Money::fromNanos(250'000'000).mul(static_cast<int64_t>(abandoned.size())))
      << "every abandoned reservation is held again: " << held.body.dump();
  size_t finished = 0;
  for (const auto& id : attempted) {
    if (settled.contains(id)) continue;
    Reply s = call(port, "POST", "/api/v1/reservations/" + id + "/settle", key,
                   {{"cost", "0.10"}, {"tokens", {{"input", 10}, {"output", 5}}}});
    if (abandoned.contains(id)) {
      EXPECT_EQ(s.status, 200) << id << " " << s.body.dump();
    } else {
      // In flight at the crash: its reservation may never have been made (404).
      EXPECT_TRUE(s.status == 200 || s.status == 404) << id << " " << s.body.dump();
    }
    finished += s.status == 200 ? 1 : 0;
  }
  events = events_now();
  for (const auto& id : abandoned) EXPECT_TRUE(events.contains(id)) << id;
  // The tenant wallet's balance agrees with the events, and nothing is held any more.
  Money total;
  for (const auto& [id, e] : events)
    total = *total.add(*Money::parse(e["cost"].get<std::string>()));
  Reply wallet = call(port, "GET", "/api/v1/wallets?scope=tenant:" + tenant, kAdminKey);
  EXPECT_EQ(wallet.body["data"][0]["spent"], total.toString());
  EXPECT_EQ(wallet.body["data"][0]["reserved"], "0.00");
  std::printf(
      "after kill -9: %zu acknowledged events kept, %zu reservations held again and settled "
      "after the restart, %zu events in all\n",
      settled.size(), finished, events.size());
  p->signal(SIGTERM);
  EXPECT_EQ(p->wait(), 0);
}

}  // namespace
}  // namespace purser
