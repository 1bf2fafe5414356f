// What only PostgresStore has, against a real PostgreSQL server the test starts itself
// (fakes/postgres.h): schemas widened from SQLite's types, replicas migrating at once, aborted
// transactions, a server that goes away and comes back. The behaviours every back-end shares
// are in store_suite_test.cc.
#include "store/postgres_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <set>
#include <thread>

#include "fakes/postgres.h"

namespace purser::store {
namespace {

TEST(PostgresSchemaSql, WidensIntegersAndBlobsOutsideQuotes) {
  EXPECT_EQ(postgresSchemaSql("CREATE TABLE t (a INTEGER NOT NULL, b blob, c TEXT DEFAULT "
                              "'INTEGER', \"BLOB\" INTEGER, integers TEXT, d Integer)"),
            "CREATE TABLE t (a BIGINT NOT NULL, b BYTEA, c TEXT DEFAULT 'INTEGER', \"BLOB\" "
            "BIGINT, integers TEXT, d BIGINT)");
  EXPECT_EQ(postgresSchemaSql("SELECT 'it''s INTEGER'"), "SELECT 'it''s INTEGER'");
  EXPECT_EQ(postgresSchemaSql("x 'unterminated INTEGER"), "x 'unterminated INTEGER");
}

class PostgresStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server = new testing::PostgresServer(); }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
  }

  void SetUp() override {
    if (!server->available()) GTEST_SKIP() << server->why();
    // A database of its own for each test.
    db = "t" + std::to_string(++databases);
    ASSERT_TRUE(server->createDatabase(db));
  }

  std::unique_ptr<PostgresStore> open(PostgresOptions o = {}) {
    o.url = server->url(db);
    auto s = PostgresStore::open(o, clock);
    EXPECT_TRUE(s.has_value()) << s.error().toString();
    return s ? std::move(*s) : nullptr;
  }

  int64_t count(Store& s, const std::string& table) {
    int64_t n = -1;
    auto r = s.read([&](Tx& tx) -> Result<void> {
      auto rows = PURSER_TRY_VALUE(tx.query("SELECT COUNT(*) FROM " + table));
      n = rows.at(0).getInt(0);
      return {};
    });
    EXPECT_TRUE(r.has_value()) << r.error().toString();
    return n;
  }

  static inline testing::PostgresServer* server = nullptr;
  static inline int databases = 0;
  std::string db;
  ManualClock clock;
};

const std::vector<Migration> kV1 = {
    {1, "create widgets", "CREATE TABLE widgets (id TEXT PRIMARY KEY, size BIGINT NOT NULL)"},
    {2, "add colour", "ALTER TABLE widgets ADD COLUMN colour TEXT"},
};

TEST_F(PostgresStoreTest, SchemasWrittenForSqliteHoldSixtyFourBitIntegersAndBytes) {
  auto s = open();
  ASSERT_TRUE(s->migrate("m", {{1, "m", "CREATE TABLE m (n INTEGER NOT NULL, b BLOB)"}}));
  ASSERT_TRUE(s->write([](Tx& tx) -> Result<void> {
                 PURSER_TRY(tx.exec("INSERT INTO m (n, b) VALUES ($1, $2)",
                                    {int64_t{1} << 40, Blob{std::string("\0\xff", 2)}}));
                 return {};
               }).has_value());
  ASSERT_TRUE(s->read([](Tx& tx) -> Result<void> {
                 auto rows = PURSER_TRY_VALUE(tx.query("SELECT n, b FROM m"));
                 EXPECT_EQ(rows.at(0).getInt(0), int64_t{1} << 40);
                 EXPECT_EQ(rows.at(0).getBlob(1).bytes, std::string("\0\xff", 2));
                 return {};
               }).has_value());
}

TEST_F(PostgresStoreTest, ReplicasMigratingAtOnceApplyEachMigrationOnce) {
  std::vector<std::unique_ptr<PostgresStore>> stores;
  for (int i = 0; i < 4; ++i) stores.push_back(open());
  std::vector<std::future<Result<int>>> runs;
  for (auto& s : stores) {
    runs.push_back(std::async(std::launch::async, [&s] { return s->migrate("widgets", kV1); }));
  }
  int total = 0;
  for (auto& r : runs) {
    auto n = r.get();
    ASSERT_TRUE(n.has_value()) << n.error().toString();
    total += *n;
  }
  EXPECT_EQ(total, 2) << "two migrations, each applied by exactly one replica";
}

// Unlike SQLite, PostgreSQL aborts a transaction at a failed statement: a write that ignores
// one cannot commit what it did before it, and says so.
TEST_F(PostgresStoreTest, AWriteThatIgnoresAFailedStatementCommitsNothing) {
  auto s = open();
  ASSERT_TRUE(s->migrate("widgets", kV1).has_value());
  auto swallowed = s->write([](Tx& tx) -> Result<void> {
    PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ('c', 1)"));
    (void)tx.exec("INSERT INTO nowhere VALUES (1)");
    return {};
  });
  ASSERT_FALSE(swallowed.has_value());
  EXPECT_NE(swallowed.error().message.find("failed and was ignored"), std::string::npos);
  EXPECT_EQ(count(*s, "widgets"), 0);
  // Text parameters cannot hold NUL bytes in PostgreSQL: refused before it is sent.
  auto nul = s->write([](Tx& tx) -> Result<void> {
    PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ($1, 1)", {std::string("a\0b", 3)}));
    return {};
  });
  ASSERT_FALSE(nul.has_value());
  EXPECT_EQ(nul.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(PostgresStoreTest, AnUnreachableServerIsAClearError) {
  auto s = PostgresStore::open({.url = "host=/nonexistent-dir port=5432 dbname=x",
                                .connect_timeout = std::chrono::seconds(1)},
                               clock);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(s.error().message.find("cannot connect to PostgreSQL"), std::string::npos);
  auto bad = PostgresStore::open({.url = "postgresql://[nonsense"}, clock);
  ASSERT_FALSE(bad.has_value());
}

// The server crashes (no checkpoint) and comes back: what was acknowledged is there, writes in
// between fail with kUnavailable, and the store reconnects by itself.
TEST_F(PostgresStoreTest, AServerThatCrashesAndReturnsLosesNothingAcknowledged) {
  auto s = open();
  ASSERT_TRUE(s->migrate("widgets", kV1).has_value());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(s->write([i](Tx& tx) -> Result<void> {
                   PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ($1, $2)",
                                      {std::to_string(i), int64_t{i}}));
                   return {};
                 }).has_value());
  }
  ASSERT_TRUE(server->stop(/*immediate=*/true));
  auto down = s->write([](Tx& tx) -> Result<void> {
    PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ('x', 1)"));
    return {};
  });
  ASSERT_FALSE(down.has_value());
  EXPECT_EQ(down.error().code, ErrorCode::kUnavailable) << down.error().toString();
  ASSERT_TRUE(server->start());
  Result<void> back = fail(internalError("not tried"));
  for (int attempt = 0; attempt < 3 && !back; ++attempt) {
    back = s->write([](Tx& tx) -> Result<void> {
      PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ('y', 1)"));
      return {};
    });
  }
  ASSERT_TRUE(back.has_value()) << back.error().toString();
  EXPECT_EQ(count(*s, "widgets"), 21);
}

}  // namespace
}  // namespace purser::store
