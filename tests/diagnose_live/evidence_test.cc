// The evidence of live diagnosis: series read from a filled store onto one grid, fleet, audit and
// gateway rows as the engine's events.
#include "diagnose_live/evidence.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace purser::diagnose_live {
namespace {

std::unique_ptr<observe::SeriesStore> store() {
  observe::SeriesLimits l;
  l.raw_interval_ms = 1000;
  auto s = observe::SeriesStore::create(l);
  EXPECT_TRUE(s.has_value());
  return std::move(*s);
}

TEST(SeriesInWindowTest, PutsSeriesScrapedAtDifferentMomentsOnOneGrid) {
  auto s = store();
  const observe::SeriesKey a("vllm:num_requests_waiting", {{"target", "a"}});
  const observe::SeriesKey b("purser_gateway_requests_total",
                             {{"route", "chat"}, {"target", "a"}, {"code", "200"}});
  const observe::SeriesKey old("vllm:kv_cache_usage_perc", {{"target", "gone"}});
  s->append(old, 1'000, 0.5);  // before the window: left out
  for (int i = 0; i < 10; ++i) {
    s->append(a, 100'000 + i * 1000, i);
    s->append(b, 100'300 + i * 1000, i * 10);
  }
  s->append(a, 110'000, std::numeric_limits<double>::quiet_NaN());  // a staleness marker
  auto series = seriesInWindow(*s, 50'000, 110'500);
  ASSERT_EQ(series.size(), 2u);
  const diagnose::Series& requests = series[0];  // names in order
  const diagnose::Series& waiting = series[1];
  EXPECT_EQ(requests.name, "purser_gateway_requests_total");
  EXPECT_EQ(waiting.name, "vllm:num_requests_waiting");
  EXPECT_EQ(requests.labels,
            (diagnose::Labels{{"code", "200"}, {"route", "chat"}, {"target", "a"}}));
  // The grid starts at the oldest sample in the window, one point a second.
  ASSERT_EQ(waiting.t.size(), 10u);
  EXPECT_EQ(waiting.t.front(), 100'000);
  EXPECT_EQ(waiting.v[3], 3);
  // The other series lands on the same grid points, a sample counted at the next point.
  ASSERT_EQ(requests.t.size(), 10u);
  EXPECT_EQ(requests.t.front(), 101'000);
  EXPECT_EQ(requests.v.front(), 0);
  EXPECT_EQ(requests.t.back(), 110'000);
  EXPECT_EQ(requests.v.back(), 90);
  for (double v : waiting.v) EXPECT_FALSE(std::isnan(v));
}

TEST(SeriesInWindowTest, WidensTheStepToKeepWithinTheBound) {
  auto s = store();
  const observe::SeriesKey a("purser_fleet_pending_workloads", {{"cluster_queue", "q"}});
  for (int i = 0; i <= 1000; ++i) s->append(a, 1'000'000 + i * 1000, i);
  auto series = seriesInWindow(*s, 0, 2'000'000, {.max_points = 101});
  ASSERT_EQ(series.size(), 1u);
  EXPECT_LE(series[0].t.size(), 101u);
  EXPECT_GE(series[0].t.size(), 100u);
  EXPECT_EQ(series[0].v.back(), 1000);  // the newest sample is the last point
}

TEST(LiveEventsTest, FleetRowsBecomeKueueEvents) {
  workloads::EventRow row{"2026-11-20T10:00:05Z",
                          "Failed",
                          "ml/train-7",
                          "q",
                          "PodFailed",
                          "exit 1",
                          "",
                          "t",
                          "team",
                          ""};
  auto e = fleetEvent(row);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->time, *diagnose::parseTime("2026-11-20T10:00:05Z"));
  EXPECT_EQ(e->source, "fleet");
  EXPECT_EQ(e->kind, "Finished");
  EXPECT_EQ(e->reason, "Failed");
  EXPECT_EQ(e->object, "ml/train-7");
  row.kind = "Waiting";
  EXPECT_EQ(fleetEvent(row)->kind, "Pending");
  row.kind = "Admitted";
  row.reason = "";
  EXPECT_EQ(fleetEvent(row)->reason, "QuotaReserved");
  row.at = "not a time";
  EXPECT_FALSE(fleetEvent(row).has_value());
}

TEST(LiveEventsTest, AuditEntriesBecomeChangesAndWalletAlerts) {
  ledger::AuditEntry route;
  route.at = "2026-11-20T10:01:00Z";
  route.actor = "u1";
  route.action = "route.update";
  route.target = "route:chat-default";
  route.after = R"({"change":"weights 50/50 -> 90/10"})";
  const auto names = [](const std::string& id) { return id == "u1" ? "alice" : id; };
  auto e = auditEvent(route, nullptr, names);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->source, "audit");
  EXPECT_EQ(e->kind, "route.update");
  EXPECT_EQ(e->object, "chat-default");
  EXPECT_EQ(e->actor, "alice");
  EXPECT_EQ(e->message, "weights 50/50 -> 90/10");

  ledger::AuditEntry alert;
  alert.at = "2026-11-20T10:02:00Z";
  alert.action = "budget.alert";
  alert.target = "wallet:w1";
  alert.after = R"({"threshold":100,"spent":"10.00","limit":"10.00"})";
  auto a = auditEvent(
      alert,
      [](const std::string& id) -> std::optional<std::pair<std::string, bool>> {
        if (id == "w1") return std::make_pair(std::string("team:ml"), true);
        return std::nullopt;
      },
      names);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->kind, "wallet.alert");
  EXPECT_EQ(a->object, "team:ml");
  EXPECT_NE(a->message.find("100%"), std::string::npos) << a->message;
  EXPECT_NE(a->message.find("hard"), std::string::npos) << a->message;

  ledger::AuditEntry other;
  other.at = "2026-11-20T10:02:00Z";
  other.action = "key.create";
  EXPECT_FALSE(auditEvent(other, nullptr, names).has_value());
}

TEST(LiveEventsTest, GatewayCooldownsKeepTheirObject) {
  auto e = gatewayEvent({1234, "target.cooldown", "chat/vllm-b", "cooling down"});
  EXPECT_EQ(e.time, 1234);
  EXPECT_EQ(e.source, "gateway");
  EXPECT_EQ(e.kind, "target.cooldown");
  EXPECT_EQ(e.object, "chat/vllm-b");
}

// Redaction by structure: names are renamed where their kind says they stand, never as words.
}  // namespace
}  // namespace purser::diagnose_live
