#include "config/route_changes.h"

#include <gtest/gtest.h>

namespace purser::config {
namespace {

RouteConfig route(const std::string& model, std::vector<std::pair<std::string, int64_t>> targets) {
  RouteConfig r;
  r.model = model;
  for (auto& [p, w] : targets) r.targets.push_back({p, "", w});
  return r;
}

TEST(RouteChangesTest, DescribesTargetsWeightsAndStrategyInWords) {
  const auto before = std::vector<RouteConfig>{
      route("chat", {{"a", 50}, {"b", 50}}), route("embed", {{"e", 1}}), route("old", {{"o", 1}})};
  auto after = std::vector<RouteConfig>{route("chat", {{"a", 90}, {"b", 10}}),
                                        route("embed", {{"e", 1}}), route("new", {{"n", 1}})};
  after[1].strategy = "weighted";
  const auto changes = routeChanges(before, after);
  ASSERT_EQ(changes.size(), 4u);
  EXPECT_EQ(changes[0].route, "chat");
  EXPECT_EQ(changes[0].action, "route.update");
  EXPECT_EQ(changes[0].change, "weights 50/50 -> 90/10");
  EXPECT_EQ(changes[1].change, "strategy: fallback -> weighted");
  EXPECT_EQ(changes[2].action, "route.create");
  EXPECT_EQ(changes[3].action, "route.delete");
  EXPECT_EQ(changes[3].route, "old");

  const auto dropped =
      routeChanges({route("chat", {{"a", 1}, {"b", 1}})}, {route("chat", {{"a", 1}})});
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].change, "targets: [a, b] -> [a]; weights 1/1 -> 1");
  EXPECT_TRUE(routeChanges(before, before).empty());
}

}  // namespace
}  // namespace purser::config
