// The meter's usage queries: the recent requests the console's route statistics are computed from,
// newest first, scoped to a tenant or a team, bounded.
#include <gtest/gtest.h>

#include "fakes/temp_dir.h"
#include "ledger/meter.h"
#include "store/sqlite_store.h"

namespace purser::ledger {
namespace {

// A meter over a fresh SQLite store, its clock at 2026-01-01.
class MeterQueriesTest : public ::testing::Test {
 protected:
  bool open() {
    auto s = store::SqliteStore::open({.path = dir.file("m.db")}, clock);
    if (!s) return (error = s.error().toString()), false;
    db = std::move(*s);
    auto m = Meter::open(*db, book, clock, nullptr, {.dir = dir.file("journal")});
    if (!m) return (error = m.error().toString()), false;
    owned = std::move(*m);
    return true;
  }

  testing::TempDir dir;
  ManualClock clock{SystemTime(std::chrono::milliseconds(1'767'225'600'000))};
  std::unique_ptr<store::SqliteStore> db;
  WalletBook book{clock};
  std::unique_ptr<Meter> owned;
  std::string error;
};

TEST_F(MeterQueriesTest, RecentRequestsAreNewestFirstScopedAndBounded) {
  ASSERT_TRUE(open()) << error;
  Meter& meter = *owned;
  struct Sent {
    const char* id;
    const char* tenant;
    const char* team;
    const char* route;
    int status;
  };
  const Sent sent[] = {{"e1", "t1", "a", "chat", 200},
                       {"e2", "t1", "b", "chat", 500},
                       {"e3", "t2", "c", "embed", 200},
                       {"e4", "t1", "a", "embed", 200}};
  for (const Sent& x : sent) {
    clock.advance(std::chrono::seconds(1));
    UsageEvent draft;
    draft.id = x.id;
    draft.tenant_id = x.tenant;
    draft.team_id = x.team;
    draft.route = x.route;
    draft.provider = "p";
    draft.model = "m";
    ASSERT_TRUE(
        meter.reserve(draft, {}, Money::fromNanos(100), std::chrono::minutes(1)).has_value());
    UsageEvent done = draft;
    done.at = clock.now();
    done.status = x.status;
    done.latency_ms = 7;
    done.tokens.input = 3;
    done.cost = Money::fromNanos(40);
    ASSERT_TRUE(meter.settle(done).has_value());
  }
  const int64_t from = unixMillis(clock.now()) - 60'000;
  auto all = meter.recentRequests({.from_ms = from});
  ASSERT_TRUE(all.has_value()) << all.error().toString();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].route, "embed") << "newest first";
  EXPECT_EQ((*all)[1].route, "embed");
  EXPECT_EQ((*all)[3].route, "chat");
  EXPECT_EQ((*all)[2].status, 500);
  EXPECT_EQ((*all)[0].cost.nanos(), 40);
  EXPECT_EQ((*all)[0].input_tokens, 3);

  auto tenant = meter.recentRequests({.from_ms = from, .tenant_id = "t1"});
  ASSERT_TRUE(tenant.has_value());
  EXPECT_EQ(tenant->size(), 3u) << "another tenant's request is not counted";
  auto team = meter.recentRequests({.from_ms = from, .tenant_id = "t1", .team_id = "a"});
  ASSERT_TRUE(team.has_value());
  EXPECT_EQ(team->size(), 2u);
  auto bounded = meter.recentRequests({.from_ms = from, .limit = 1});
  ASSERT_TRUE(bounded.has_value());
  ASSERT_EQ(bounded->size(), 1u);
  EXPECT_EQ((*bounded)[0].route, "embed");
  auto later = meter.recentRequests({.from_ms = unixMillis(clock.now()) + 1});
  ASSERT_TRUE(later.has_value());
  EXPECT_TRUE(later->empty());
  meter.close();
}

// One agent run's calls, found by its session over every tenant, oldest first; tool calls
// grouped by tool and by kind in spend reports.
TEST_F(MeterQueriesTest, ASessionsEventsAreFoundInOrderAndToolsGroupInSpend) {
  ASSERT_TRUE(open()) << error;
  Meter& meter = *owned;
  struct Sent {
    const char* id;
    const char* tenant;
    const char* session;
    const char* route;
    const char* provider;
    const char* model;
  };
  const Sent sent[] = {{"e1", "t1", "run-1", "chat", "sim", "small"},
                       {"e2", "t1", "run-1", "mcp", "mcp:demo", "demo.echo"},
                       {"e3", "t2", "run-1", "mcp", "mcp:demo", "demo.echo"},
                       {"e4", "t1", "run-2", "mcp", "mcp:search", "search.web"},
                       {"e5", "t1", "", "work", "fleet", "train"}};
  for (const Sent& x : sent) {
    clock.advance(std::chrono::seconds(1));
    UsageEvent draft;
    draft.id = x.id;
    draft.tenant_id = x.tenant;
    draft.session_id = x.session;
    draft.route = x.route;
    draft.provider = x.provider;
    draft.model = x.model;
    ASSERT_TRUE(
        meter.reserve(draft, {}, Money::fromNanos(100), std::chrono::minutes(1)).has_value());
    UsageEvent done = draft;
    done.at = clock.now();
    done.status = 200;
    done.cost = Money::fromNanos(10);
    ASSERT_TRUE(meter.settle(done).has_value());
  }
  auto run = meter.sessionEvents("run-1", 100);
  ASSERT_TRUE(run.has_value()) << run.error().toString();
  ASSERT_EQ(run->size(), 3u);  // both tenants': the reader keeps what its caller may see
  EXPECT_EQ((*run)[0].id, "e1");
  EXPECT_EQ((*run)[1].id, "e2");
  EXPECT_EQ(std::string(usageKind((*run)[0])), "model");
  EXPECT_EQ(std::string(usageKind((*run)[1])), "tool");
  auto bounded = meter.sessionEvents("run-1", 2);
  ASSERT_TRUE(bounded.has_value());
  EXPECT_EQ(bounded->size(), 2u);
  auto none = meter.sessionEvents("nobody's", 100);
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());

  UsageQuery t1;
  t1.scope_kind = ScopeKind::kTenant;
  t1.scope_id = "t1";
  auto by_tool = meter.spend(t1, "tool");
  ASSERT_TRUE(by_tool.has_value()) << by_tool.error().toString();
  ASSERT_EQ(by_tool->size(), 3u);  // "" (not tools), demo.echo, search.web
  EXPECT_EQ((*by_tool)[0].group, "");
  EXPECT_EQ((*by_tool)[0].requests, 2);
  EXPECT_EQ((*by_tool)[1].group, "demo.echo");
  EXPECT_EQ((*by_tool)[2].group, "search.web");
  auto by_kind = meter.spend(t1, "kind");
  ASSERT_TRUE(by_kind.has_value());
  ASSERT_EQ(by_kind->size(), 3u);
  EXPECT_EQ((*by_kind)[0].group, "gpu");
  EXPECT_EQ((*by_kind)[1].group, "model");
  EXPECT_EQ((*by_kind)[2].group, "tool");
  EXPECT_EQ((*by_kind)[2].requests, 2);
}

}  // namespace
}  // namespace purser::ledger
