// PostgresStore against a real PostgreSQL server the test starts itself (fakes/postgres.h): the
// same behaviours SqliteStore is held to, and what only a server brings — a server that goes
// away and comes back, and replicas migrating at once.
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

TEST_F(PostgresStoreTest, MigrationsApplyOnceAndInOrder) {
  auto s = open();
  ASSERT_TRUE(s);
  auto applied = s->migrate("widgets", kV1);
  ASSERT_TRUE(applied.has_value()) << applied.error().toString();
  EXPECT_EQ(*applied, 2);
  EXPECT_EQ(*s->migrate("widgets", kV1), 0);
  auto v2 = kV1;
  v2.push_back({3, "index sizes", "CREATE INDEX widgets_size ON widgets (size)"});
  EXPECT_EQ(*s->migrate("widgets", v2), 1);
  ASSERT_TRUE(s->write([](Tx& tx) -> Result<void> {
                 PURSER_TRY(tx.exec("INSERT INTO widgets (id, size, colour) VALUES ($1, $2, $3)",
                                    {std::string("a"), int64_t{3}, std::string("red")}));
                 return {};
               }).has_value());
  EXPECT_EQ(count(*s, "widgets"), 1);
  // A store opened later sees the same history.
  s->close();
  auto again = open();
  EXPECT_EQ(*again->migrate("widgets", v2), 0);
}

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

TEST_F(PostgresStoreTest, EditedOrUnknownMigrationsAreRefused) {
  auto s = open();
  ASSERT_TRUE(s->migrate("widgets", kV1).has_value());
  auto edited = kV1;
  edited[1].sql = "ALTER TABLE widgets ADD COLUMN color TEXT";
  auto e = s->migrate("widgets", edited);
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(e.error().message.find("was changed after it was applied"), std::string::npos);
  auto older = std::vector<Migration>{kV1[0]};
  auto o = s->migrate("widgets", older);
  ASSERT_FALSE(o.has_value());
  EXPECT_NE(o.error().message.find("written by a newer version"), std::string::npos);
}

TEST_F(PostgresStoreTest, AFailedMigrationLeavesNothingHalfWritten) {
  auto s = open();
  const std::vector<Migration> bad = {
      {1, "ok", "CREATE TABLE a (x BIGINT)"},
      {2, "half", "CREATE TABLE b (x BIGINT); CREATE TABLE a (y BIGINT)"},  // 2nd fails
  };
  auto r = s->migrate("t", bad);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("migration t version 2"), std::string::npos);
  int64_t tables = -1;
  ASSERT_TRUE(s->read([&](Tx& tx) -> Result<void> {
                 auto rows = PURSER_TRY_VALUE(
                     tx.query("SELECT COUNT(*) FROM pg_tables WHERE tablename = 'b'"));
                 tables = rows.at(0).getInt(0);
                 return {};
               }).has_value());
  EXPECT_EQ(tables, 0);
  std::vector<Migration> fixed = {bad[0], {2, "half", "CREATE TABLE b (x BIGINT)"}};
  EXPECT_EQ(*s->migrate("t", fixed), 1);
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

TEST_F(PostgresStoreTest, WritesRoundTripEveryValueType) {
  auto s = open();
  ASSERT_TRUE(
      s->migrate("t", {{1, "t", "CREATE TABLE t (i BIGINT, s TEXT, b BYTEA, n TEXT, k INTEGER)"}}));
  std::string bytes;
  for (int c = 0; c < 256; ++c) bytes.push_back(static_cast<char>(c));
  ASSERT_TRUE(s->write([&](Tx& tx) -> Result<void> {
                 PURSER_TRY(tx.exec("INSERT INTO t (s, i, b, n, k) VALUES ($2, $1, $3, $4, $5)",
                                    {int64_t{-9007199254740993}, std::string("héllo 'x' \"y\""),
                                     Blob{bytes}, std::monostate{}, int64_t{7}}));
                 return {};
               }).has_value());
  ASSERT_TRUE(s->read([&](Tx& tx) -> Result<void> {
                 auto rows = PURSER_TRY_VALUE(
                     tx.query("SELECT i, s, b, n, k, (SELECT SUM(i) FROM t), i > 0 FROM t"));
                 EXPECT_EQ(rows.size(), 1u);
                 const Row& r = rows.at(0);
                 EXPECT_EQ(r.getInt(0), -9007199254740993);
                 EXPECT_EQ(r.getText(1), "héllo 'x' \"y\"");
                 EXPECT_EQ(r.getBlob(2).bytes, bytes);
                 EXPECT_TRUE(r.isNull(3));
                 EXPECT_EQ(r.getInt(4), 7);
                 EXPECT_EQ(r.getInt(5), -9007199254740993) << "SUM() reads as an integer";
                 EXPECT_EQ(r.getInt(6), 0) << "a boolean reads as 0 or 1";
                 return {};
               }).has_value());
  auto nul = s->write([](Tx& tx) -> Result<void> {
    PURSER_TRY(tx.exec("INSERT INTO t (s) VALUES ($1)", {std::string("a\0b", 3)}));
    return {};
  });
  ASSERT_FALSE(nul.has_value());
  EXPECT_EQ(nul.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(PostgresStoreTest, AFailedWriteChangesNothing) {
  auto s = open();
  ASSERT_TRUE(s->migrate("widgets", kV1).has_value());
  auto r = s->write([](Tx& tx) -> Result<void> {
    PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ('a', 1)"));
    PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ('a', 2)"));  // duplicate key
    return {};
  });
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(count(*s, "widgets"), 0);

  auto thrown = s->write([](Tx& tx) -> Result<void> {
    (void)tx.exec("INSERT INTO widgets (id, size) VALUES ('b', 1)");
    throw std::runtime_error("bug in a writer");
  });
  ASSERT_FALSE(thrown.has_value());
  EXPECT_EQ(count(*s, "widgets"), 0);

  // A write that ignores a failed statement cannot commit what came before it.
  auto swallowed = s->write([](Tx& tx) -> Result<void> {
    PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ('c', 1)"));
    (void)tx.exec("INSERT INTO nowhere VALUES (1)");
    return {};
  });
  ASSERT_FALSE(swallowed.has_value());
  EXPECT_EQ(count(*s, "widgets"), 0);

  auto bad_sql = s->write([](Tx& tx) -> Result<void> {
    PURSER_TRY(tx.exec("INSERT INTO nowhere VALUES (1)"));
    return {};
  });
  ASSERT_FALSE(bad_sql.has_value());
  EXPECT_NE(bad_sql.error().message.find("\"nowhere\" does not exist"), std::string::npos)
      << bad_sql.error().message;
  // The store goes on.
  ASSERT_TRUE(s->write([](Tx& tx) -> Result<void> {
                 PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ('d', 1)"));
                 return {};
               }).has_value());
  EXPECT_EQ(count(*s, "widgets"), 1);
}

TEST_F(PostgresStoreTest, ReadsCannotWrite) {
  auto s = open();
  ASSERT_TRUE(s->migrate("widgets", kV1).has_value());
  auto r = s->read([](Tx& tx) -> Result<void> {
    PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ('a', 1)"));
    return {};
  });
  EXPECT_FALSE(r.has_value());
  EXPECT_EQ(count(*s, "widgets"), 0);
}

struct Gate {
  std::promise<void> entered;
  std::promise<void> open;
  std::shared_future<void> opened{open.get_future().share()};
  TxFn fn() {
    return [this](Tx&) -> Result<void> {
      entered.set_value();
      opened.wait();
      return {};
    };
  }
};

TEST_F(PostgresStoreTest, QueuedWritesShareOneCommitAndFailAlone) {
  auto s = open();
  ASSERT_TRUE(s->migrate("widgets", kV1).has_value());
  const uint64_t before = s->commitsForTest();
  Gate gate;
  s->writeAsync(gate.fn(), [](Result<void>) {});
  gate.entered.get_future().wait();
  std::vector<std::future<Result<void>>> results;
  for (int i = 0; i < 50; ++i) {
    auto p = std::make_shared<std::promise<Result<void>>>();
    results.push_back(p->get_future());
    s->writeAsync(
        [i](Tx& tx) -> Result<void> {
          PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ($1, $2)",
                             {std::to_string(i), int64_t{i}}));
          if (i == 25) return fail(invalidArgument("rejected"));
          // Job 30 breaks a constraint: only it is undone.
          if (i == 30) {
            PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ('0', 0)"));
          }
          return {};
        },
        [p](Result<void> r) { p->set_value(std::move(r)); });
  }
  gate.open.set_value();
  for (int i = 0; i < 50; ++i) {
    auto r = results[static_cast<size_t>(i)].get();
    EXPECT_EQ(r.has_value(), i != 25 && i != 30) << i;
  }
  EXPECT_EQ(count(*s, "widgets"), 48);
  EXPECT_EQ(s->commitsForTest() - before, 2u) << "the gate's batch, then one for all 50";
}

TEST_F(PostgresStoreTest, ConcurrentWritersAndReadersAllSucceed) {
  auto s = open({.max_readers = 3});
  ASSERT_TRUE(s->migrate("widgets", kV1).has_value());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        auto r = s->write([&](Tx& tx) -> Result<void> {
          PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ($1, $2)",
                             {std::to_string(t) + "-" + std::to_string(i), int64_t{i}}));
          return {};
        });
        if (!r) ++failures;
        if (count(*s, "widgets") < 0) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(count(*s, "widgets"), 200);
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
