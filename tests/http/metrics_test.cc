#include "http/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "http/url.h"

namespace purser::http {
namespace {

TEST(MetricsTest, RendersPrometheusTextExposition) {
  MetricsRegistry m;
  m.counter("purser_things_total", "Things seen.").inc(3);
  m.gauge("purser_level", "A level.").set(1.5);
  auto& family = m.counterFamily("purser_calls_total", "Calls by route.", {"route", "code"});
  family.labels({"/v1/x", "2xx"}).inc();
  family.labels({"/v1/\"q\"", "5xx"}).inc(2);
  auto& h = m.histogram("purser_latency_seconds", "Latency.", {0.1, 1});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5);
  EXPECT_EQ(m.render(),
            "# HELP purser_things_total Things seen.\n"
            "# TYPE purser_things_total counter\n"
            "purser_things_total 3\n"
            "# HELP purser_level A level.\n"
            "# TYPE purser_level gauge\n"
            "purser_level 1.5\n"
            "# HELP purser_calls_total Calls by route.\n"
            "# TYPE purser_calls_total counter\n"
            "purser_calls_total{route=\"/v1/\\\"q\\\"\",code=\"5xx\"} 2\n"
            "purser_calls_total{route=\"/v1/x\",code=\"2xx\"} 1\n"
            "# HELP purser_latency_seconds Latency.\n"
            "# TYPE purser_latency_seconds histogram\n"
            "purser_latency_seconds_bucket{le=\"0.1\"} 1\n"
            "purser_latency_seconds_bucket{le=\"1\"} 2\n"
            "purser_latency_seconds_bucket{le=\"+Inf\"} 3\n"
            "purser_latency_seconds_sum 5.55\n"
            "purser_latency_seconds_count 3\n");
}

TEST(MetricsTest, RegisteringTheSameNameTwiceReturnsTheSameMetric) {
  MetricsRegistry m;
  Counter& a = m.counter("purser_x_total", "x");
  Counter& b = m.counter("purser_x_total", "x");
  EXPECT_EQ(&a, &b);
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry m;
  Counter& c = m.counter("purser_n_total", "n");
  Histogram& h = m.histogram("purser_h", "h", {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10'000; ++i) {
        c.inc();
        h.observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40'000u);
  EXPECT_EQ(h.snapshot().count, 40'000u);
  EXPECT_EQ(h.snapshot().sum, 20'000);
}

TEST(UrlTest, ParsesSchemesHostsPortsAndTargets) {
  auto a = parseUrl("https://api.example.com/v1/chat?x=1");
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->tls);
  EXPECT_EQ(a->host, "api.example.com");
  EXPECT_EQ(a->port, 443);
  EXPECT_EQ(a->target, "/v1/chat?x=1");
  EXPECT_EQ(a->authority(), "api.example.com");
  auto b = parseUrl("http://[::1]:8000");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 8000);
  EXPECT_EQ(b->target, "/");
  EXPECT_EQ(b->authority(), "[::1]:8000");
  EXPECT_EQ(parseUrl("http://h?q=1")->target, "/?q=1");
  EXPECT_FALSE(parseUrl("http://h:0/").has_value());
  EXPECT_FALSE(parseUrl("http://[::1/").has_value());
}

}  // namespace
}  // namespace purser::http
