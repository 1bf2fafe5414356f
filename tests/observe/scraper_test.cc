#include "observe/scraper.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "fakes/test_server.h"
#include "http/client.h"
#include "sim/llm_sim.h"

namespace purser::observe {
namespace {

using http::Method;
using http::Request;
using http::Response;
using purser::testing::runCoroutine;

class ScraperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store = *SeriesStore::create();
    sim = std::make_unique<sim::LlmSim>(
        sim::LlmSimOptions{
            .models = {"m"}, .ttft = std::chrono::milliseconds(0), .tokens_per_s = 0},
        server.metrics);
    ASSERT_TRUE(sim->addRoutes(server.router));
    ASSERT_TRUE(server.router.add(Method::kGet, "/metrics", [this](Request&) {
      Response r;
      r.body = server.metrics.render();
      return r;
    }));
    ASSERT_TRUE(server.router.add(Method::kGet, "/broken", [](Request&) {
      Response r;
      r.status = 500;
      return r;
    }));
    ASSERT_TRUE(server.router.add(Method::kGet, "/garbage", [](Request&) {
      Response r;
      r.body = "vllm:num_requests_waiting 1\nvllm:num_requests_running{model_name=\"m\" 2\n";
      return r;
    }));
    server.start();
  }

  std::unique_ptr<Scraper> scraper(std::vector<ScrapeTarget> targets) {
    return std::make_unique<Scraper>(io, *store, metrics, SystemClock::instance(),
                                     std::move(targets),
                                     [this](const std::string& t) { scraped.push_back(t); });
  }

  testing::TestServer server;
  std::unique_ptr<sim::LlmSim> sim;
  std::unique_ptr<SeriesStore> store;
  http::MetricsRegistry metrics;
  boost::asio::io_context io;
  std::vector<std::string> scraped;
};

TEST_F(ScraperTest, KeepsTheEnginesFamiliesLabelledWithTheTarget) {
  // One answer first, so that the latency histograms have a series.
  http::HttpClient client(io, {});
  http::ClientRequest chat;
  chat.method = Method::kPost;
  chat.url = server.url("/v1/chat/completions");
  chat.body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
  auto answered = runCoroutine(io, client.request(std::move(chat)));
  ASSERT_TRUE(answered && answered->status == 200);

  auto s = scraper({{.name = "sim-a", .url = server.url("/metrics")}});
  runCoroutine(io, s->scrapeOnce(0));
  ASSERT_EQ(scraped, std::vector<std::string>{"sim-a"});
  auto status = s->status("sim-a");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->consecutive_failures, 0);
  EXPECT_GT(status->last_success_ms, 0);
  EXPECT_GT(status->samples, 10u);
  auto p = store->latest(
      SeriesKey("vllm:num_requests_running", {{"model_name", "m"}, {"target", "sim-a"}}));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->value, 0);
  EXPECT_FALSE(
      store->select("vllm:time_to_first_token_seconds_bucket", {{"target", "sim-a"}}).empty());
  // The server's own families are not the engine's: not kept.
  EXPECT_TRUE(store->select("vllm:request_success_total", {}).empty());
  EXPECT_TRUE(store->select("purser_http_requests_total", {}).empty());
  // And the scraper reports itself.
  const std::string own = metrics.render();
  EXPECT_NE(own.find("purser_scrape_up{target=\"sim-a\"} 1"), std::string::npos) << own;
  EXPECT_NE(own.find("purser_observe_series "), std::string::npos);
}

TEST_F(ScraperTest, AFailedScrapeWritesNothingAndSaysWhy) {
  auto s = scraper({{.name = "broken", .url = server.url("/broken")},
                    {.name = "garbage", .url = server.url("/garbage")},
                    {.name = "gone", .url = "http://127.0.0.1:1/metrics"}});
  for (size_t i = 0; i < 3; ++i) {
    runCoroutine(io, s->scrapeOnce(i));
    runCoroutine(io, s->scrapeOnce(i));
  }
  EXPECT_EQ(scraped.size(), 6u);
  EXPECT_EQ(store->seriesCount(), 0u) << "a scrape that fails half-way writes nothing";
  auto broken = *s->status("broken");
  EXPECT_EQ(broken.consecutive_failures, 2);
  EXPECT_EQ(broken.last_success_ms, 0);
  EXPECT_EQ(broken.last_error, "it answered HTTP 500");
  auto garbage = *s->status("garbage");
  EXPECT_EQ(garbage.consecutive_failures, 2);
  EXPECT_NE(garbage.last_error.find("line 2"), std::string::npos) << garbage.last_error;
  EXPECT_EQ(s->status("gone")->consecutive_failures, 2);
  EXPECT_FALSE(s->status("nobody"));
  EXPECT_NE(metrics.render().find("purser_scrape_up{target=\"gone\"} 0"), std::string::npos);
}

TEST_F(ScraperTest, LoopsScrapeOnTheirIntervalUntilStopped) {
  auto s = scraper(
      {{.name = "a", .url = server.url("/metrics"), .interval = std::chrono::milliseconds(5)},
       {.name = "b", .url = server.url("/broken"), .interval = std::chrono::milliseconds(5)}});
  s->start();
  // Run until each target was scraped three times, then stop: run() returns once every loop
  // has ended.
  while (std::count(scraped.begin(), scraped.end(), "a") < 3 ||
         std::count(scraped.begin(), scraped.end(), "b") < 3) {
    io.run_one();
  }
  s->stop();
  io.run();
  EXPECT_GE(s->status("a")->last_success_ms, 1);
  EXPECT_GE(s->status("b")->consecutive_failures, 3);
}

}  // namespace
}  // namespace purser::observe
