// The pieces of live diagnosis: series read from a filled store onto one grid, fleet, audit and
// gateway rows as the engine's events, and the redaction of other tenants' names.
#include "api/diagnose_live.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace purser::api {
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
TEST(CaseRedactorTest, RenamesForeignObjectsByKindAndNeverAWordOfText) {
  using K = CaseRedactor::Kind;
  CaseRedactor r;
  r.hide(K::kTenant, "borealis");
  r.allow(K::kTenant, "alpha");
  r.hide(K::kTeam, "zephyr");
  r.hide(K::kTeam, "ml");
  r.allow(K::kTeam, "ml");  // the caller's own team has the same name
  r.hide(K::kNamespace, "zephyr");
  r.hide(K::kWorkload, "zephyr/train-9");
  // Another tenant names its users after common words: nothing of the text changes.
  r.hide(K::kUser, "quota");
  r.hide(K::kUser, "shared");
  r.hide(K::kRoute, "secret-route");
  r.allow(K::kRoute, "chat");

  diagnose::Case c;
  c.inventory.teams = {{"zephyr", "borealis"}, {"ml", "alpha"}, {"ml", "borealis"}};
  c.inventory.workloads = {{"zephyr", "train-9", "shared", "node-1", {0, 1}},
                           {"ml", "mine", "shared", "node-1", {2}}};
  c.inventory.nodes = {{"quota", 8, "H100-80GB"}};  // a node named like a foreign user: a node
  c.series.push_back({"purser_wallet_spent_ratio",
                      {{"scope", "team:zephyr"}, {"tenant", "borealis"}, {"wallet", "w1"}},
                      {1},
                      {1.0}});
  // Their series is theirs whole: a team name the caller shares is renamed there too.
  c.series.push_back({"purser_team_requests", {{"team", "ml"}, {"tenant", "borealis"}}, {1}, {1}});
  c.series.push_back({"purser_team_requests", {{"team", "ml"}, {"tenant", "alpha"}}, {1}, {1}});
  c.series.push_back(
      {"kueue_pending_workloads", {{"cluster_queue", "shared"}, {"user", "quota"}}, {1}, {1}});
  c.events.push_back({1, "fleet", "Preempted", "", "zephyr/train-9", "ml/mine",
                      "quota shared: preempted by zephyr/train-9"});
  c.events.push_back({2, "fleet", "Pending", "QuotaReserved", "", "ml/mine",
                      "insufficient quota in the shared queue"});
  c.events.push_back({3, "gateway", "target.cooldown", "", "", "secret-route/vllm", "down"});
  c.logs.push_back({1, "zephyr/train-9", "their log line"});
  c.logs.push_back({1, "ml/mine", "my log line"});
  r.apply(c);

  EXPECT_EQ(c.inventory.teams[0].name, "another tenant's team #1");
  EXPECT_EQ(c.inventory.teams[0].tenant, "another tenant #1");
  EXPECT_EQ(c.inventory.teams[1].name, "ml");
  EXPECT_EQ(c.inventory.teams[1].tenant, "alpha");
  EXPECT_EQ(c.inventory.teams[2].name, "another tenant's team #2");
  EXPECT_EQ(c.inventory.workloads[0].id(), "another tenant's namespace #1/workload #1");
  EXPECT_EQ(c.inventory.workloads[0].queue, "shared") << "a shared queue is never renamed";
  EXPECT_EQ(c.inventory.workloads[1].id(), "ml/mine");
  EXPECT_EQ(c.inventory.nodes[0].name, "quota") << "nodes are nobody's: never renamed";
  EXPECT_EQ(c.series[0].label("scope"), "team:another tenant's team #1");
  EXPECT_EQ(c.series[0].label("tenant"), "another tenant #1");
  EXPECT_EQ(c.series[0].label("wallet"), "another tenant's wallet #1");
  EXPECT_EQ(c.series[1].label("team"), "another tenant's team #2");
  EXPECT_EQ(c.series[2].label("team"), "ml");
  EXPECT_EQ(c.series[3].label("cluster_queue"), "shared");
  EXPECT_EQ(c.series[3].label("user"), "another tenant's user #1");
  // The caller's own event keeps its text, words and all; the preemptor is renamed.
  EXPECT_EQ(c.events[0].object, "ml/mine");
  EXPECT_EQ(c.events[0].actor, "another tenant's namespace #1/workload #1");
  EXPECT_EQ(c.events[0].message, "") << "an event naming a foreign object shows no free text";
  EXPECT_EQ(c.events[1].message, "insufficient quota in the shared queue");
  EXPECT_EQ(c.events[2].object, "another tenant's route #1/vllm");
  EXPECT_EQ(c.events[2].message, "");
  ASSERT_EQ(c.logs.size(), 1u);
  EXPECT_EQ(c.logs[0].line, "my log line");
}

}  // namespace
}  // namespace purser::api
