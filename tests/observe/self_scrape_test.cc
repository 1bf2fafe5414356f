#include "observe/self_scrape.h"

#include <gtest/gtest.h>

namespace purser::observe {
namespace {

TEST(SelfScrapeTest, KeepsTheDiagnosedFamiliesAndStartsNewCountersFromZero) {
  auto store = SeriesStore::create();
  ASSERT_TRUE(store.has_value());
  http::MetricsRegistry registry;
  auto& requests = registry.counterFamily("purser_gateway_requests_total", "requests",
                                          {"route", "target", "code"});
  auto& errors =
      registry.counterFamily("purser_gateway_upstream_errors_total", "errors", {"target", "kind"});
  registry.gauge("purser_unrelated", "not read by diagnosis").set(7);
  requests.labels({"chat", "a", "200"}).inc();
  SelfScrape self(**store, registry);
  ASSERT_TRUE(self.sample(1000).has_value());
  ASSERT_TRUE(self.sample(2000).has_value());
  errors.labels({"a", "5xx"}).inc();
  errors.labels({"a", "5xx"}).inc();
  ASSERT_TRUE(self.sample(3000).has_value());

  EXPECT_TRUE((*store)->select("purser_unrelated", {}).empty());
  EXPECT_EQ((*store)->names(), (std::vector<std::string>{"purser_gateway_requests_total",
                                                         "purser_gateway_upstream_errors_total"}));
  // Their own labels, no `target` added.
  const SeriesKey req("purser_gateway_requests_total",
                      {{"route", "chat"}, {"target", "a"}, {"code", "200"}});
  EXPECT_EQ((*store)->range(req, 0, 5000).points.size(), 3u);
  // The new counter was 0 at the earlier samples.
  const auto err = (*store)->range(
      SeriesKey("purser_gateway_upstream_errors_total", {{"target", "a"}, {"kind", "5xx"}}), 0,
      5000);
  ASSERT_EQ(err.points.size(), 3u);
  EXPECT_EQ(err.points[0].t_ms, 1000);
  EXPECT_EQ(err.points[0].value, 0);
  EXPECT_EQ(err.points[2].value, 2);
  // Time only goes forward.
  auto again = self.sample(3000);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, 0u);
}

}  // namespace
}  // namespace purser::observe
