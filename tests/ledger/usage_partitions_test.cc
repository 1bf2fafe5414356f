// Usage events on PostgreSQL are partitioned by month: events already there move into a
// partition per month, the next months' partitions are made ahead, and an event replayed still
// conflicts with itself (its id and time never change).
#include <gtest/gtest.h>

#include <string>

#include "common/clock.h"
#include "fakes/postgres.h"
#include "ledger/ledger_store.h"
#include "store/postgres_store.h"

namespace purser::ledger {
namespace {

// 2026-01-15, 2026-01-31 23:59:59.999 and 2026-03-01 00:00:00 UTC, in Unix milliseconds.
constexpr int64_t kJan15 = 1768435200000;
constexpr int64_t kJanEnd = 1769903999999;
constexpr int64_t kMar1 = 1772323200000;

std::string insertSql(const std::string& id, int64_t at_ms, const char* conflict) {
  return "INSERT INTO usage_events (id, at_ms, tenant_id, team_id, user_id, service_account_id,"
         " key_id, session_id, route, provider, model, input_tokens, output_tokens,"
         " cached_input_tokens, cache_write_tokens, reasoning_tokens, cost_nanos, latency_ms,"
         " ttft_ms, status, estimated, recovered) VALUES ('" +
         id + "', " + std::to_string(at_ms) +
         ", 't', '', 'u', '', 'k', '', 'chat', 'p', 'm', 1, 1, 0, 0, 0, 5, 1, 1, 200, 0, 0)" +
         conflict;
}

TEST(UsagePartitionsTest, EventsMoveIntoMonthlyPartitionsAndNewMonthsAreMadeAhead) {
  testing::PostgresServer pg;
  if (!pg.available()) GTEST_SKIP() << pg.why();
  ASSERT_TRUE(pg.createDatabase("parts"));
  ManualClock clock;
  auto opened = store::PostgresStore::open({.url = pg.url("parts")}, clock);
  ASSERT_TRUE(opened.has_value()) << opened.error().toString();
  auto& store = **opened;
  ASSERT_TRUE(store.migrate("ledger", ledgerMigrations()).has_value());
  // Events written before the partitioning.
  ASSERT_TRUE(store
                  .write([&](store::Tx& tx) -> Result<void> {
                    PURSER_TRY(tx.exec(insertSql("e1", kJan15, "")));
                    PURSER_TRY(tx.exec(insertSql("e2", kJanEnd, "")));
                    PURSER_TRY(tx.exec(insertSql("e3", kMar1, "")));
                    return {};
                  })
                  .has_value());
  auto migrated = store.migrate("usage_partitions", usagePartitionMigrations());
  ASSERT_TRUE(migrated.has_value()) << migrated.error().toString();

  EXPECT_EQ(pg.query("parts", "SELECT COUNT(*) FROM usage_events"), "3");
  EXPECT_EQ(
      pg.query("parts",
               "SELECT string_agg(p || '=' || n, ',' ORDER BY p) FROM (SELECT "
               "tableoid::regclass::text AS p, COUNT(*) AS n FROM usage_events GROUP BY 1) x"),
      "usage_events_202601=2,usage_events_202603=1");

  // The month of now and the next are made ahead; events of those months land in them.
  clock.setNow(SystemTime(std::chrono::milliseconds(kMar1)) + std::chrono::hours(24 * 40));
  ASSERT_TRUE(ensureUsagePartitions(store, clock.now()).has_value());
  ASSERT_TRUE(ensureUsagePartitions(store, clock.now()).has_value()) << "made once, then a no-op";
  EXPECT_EQ(pg.query("parts",
                     "SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class WHERE "
                     "relname LIKE 'usage\\_events\\_2026%' AND relkind = 'r'"),
            "usage_events_202601,usage_events_202603,usage_events_202604,usage_events_202605");

  // A replayed event conflicts with itself: recorded once.
  const std::string conflict =
      std::string(" ON CONFLICT ") + usageEventConflict(store::Dialect::kPostgres) + " DO NOTHING";
  const int64_t apr = kMar1 + int64_t{40} * 24 * 3600 * 1000;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(store
                    .write([&](store::Tx& tx) -> Result<void> {
                      PURSER_TRY(tx.exec(insertSql("e4", apr, conflict.c_str())));
                      return {};
                    })
                    .has_value());
  }
  EXPECT_EQ(pg.query("parts", "SELECT tableoid::regclass::text FROM usage_events WHERE id = 'e4'"),
            "usage_events_202604");
  EXPECT_EQ(pg.query("parts", "SELECT COUNT(*) FROM usage_events"), "4");
  // A time no month's partition covers still has a place.
  ASSERT_TRUE(store
                  .write([&](store::Tx& tx) -> Result<void> {
                    PURSER_TRY(tx.exec(insertSql("e5", 0, conflict.c_str())));
                    return {};
                  })
                  .has_value());
  EXPECT_EQ(pg.query("parts", "SELECT tableoid::regclass::text FROM usage_events WHERE id = 'e5'"),
            "usage_events_default");
  store.close();
}

}  // namespace
}  // namespace purser::ledger
