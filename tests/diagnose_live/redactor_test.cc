// The wall between tenants in a live case: another tenant's objects renamed by kind, never a word
// of free text.
#include "diagnose_live/redactor.h"

#include <gtest/gtest.h>

namespace purser::diagnose_live {
namespace {

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
}  // namespace purser::diagnose_live
