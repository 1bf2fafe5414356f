// The store suite: what every Store back-end is held to, run against SQLite (a file in a
// temporary directory) and PostgreSQL (a private server the suite starts, fakes/postgres.h).
// What only one back-end has is tested beside it: sqlite_store_test.cc, postgres_store_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <optional>
#include <thread>

#include "fakes/postgres.h"
#include "fakes/temp_dir.h"
#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace purser::store {
namespace {

struct Limits {
  size_t max_queue = 65536;
  size_t max_readers = 8;
};

class StoreSuite : public ::testing::TestWithParam<Dialect> {
 protected:
  static void TearDownTestSuite() {
    delete postgres;
    postgres = nullptr;
  }

  void SetUp() override {
    if (GetParam() == Dialect::kPostgres) {
      if (postgres == nullptr) postgres = new testing::PostgresServer();
      if (!postgres->available()) GTEST_SKIP() << postgres->why();
      db = "suite" + std::to_string(++databases);
      ASSERT_TRUE(postgres->createDatabase(db));
    }
  }

  std::unique_ptr<Store> open(Limits l = {}) {
    if (GetParam() == Dialect::kPostgres) {
      auto s = PostgresStore::open(
          {.url = postgres->url(db), .max_queue = l.max_queue, .max_readers = l.max_readers},
          clock);
      EXPECT_TRUE(s.has_value()) << s.error().toString();
      return s ? std::move(*s) : nullptr;
    }
    auto s = SqliteStore::open(
        {.path = dir.file("purser.db"), .max_queue = l.max_queue, .max_readers = l.max_readers},
        clock);
    EXPECT_TRUE(s.has_value()) << s.error().toString();
    return s ? std::move(*s) : nullptr;
  }

  static uint64_t commits(Store& s) {
    if (auto* p = dynamic_cast<PostgresStore*>(&s)) return p->commitsForTest();
    return dynamic_cast<SqliteStore&>(s).commitsForTest();
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

  bool tableExists(Store& s, const std::string& name) {
    const std::string sql = GetParam() == Dialect::kPostgres
                                ? "SELECT COUNT(*) FROM pg_tables WHERE tablename = $1"
                                : "SELECT COUNT(*) FROM sqlite_master WHERE name = $1";
    int64_t n = 0;
    EXPECT_TRUE(s.read([&](Tx& tx) -> Result<void> {
                   n = PURSER_TRY_VALUE(tx.query(sql, {name})).at(0).getInt(0);
                   return {};
                 }).has_value());
    return n > 0;
  }

  static inline testing::PostgresServer* postgres = nullptr;
  static inline int databases = 0;
  std::string db;
  testing::TempDir dir;
  ManualClock clock;
};

const std::vector<Migration> kV1 = {
    {1, "create widgets", "CREATE TABLE widgets (id TEXT PRIMARY KEY, size INTEGER NOT NULL)"},
    {2, "add colour", "ALTER TABLE widgets ADD COLUMN colour TEXT"},
};

TEST_P(StoreSuite, MigrationsApplyOnceAndInOrder) {
  auto s = open();
  auto first = s->migrate("widgets", kV1);
  ASSERT_TRUE(first.has_value()) << first.error().toString();
  EXPECT_EQ(*first, 2);
  auto again = s->migrate("widgets", kV1);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, 0) << "applied migrations are not applied again";

  // A later release adds a third migration: only it runs.
  auto v2 = kV1;
  v2.push_back({3, "index sizes", "CREATE INDEX widgets_size ON widgets (size)"});
  EXPECT_EQ(*s->migrate("widgets", v2), 1);

  // Migrations are recorded per component and survive reopening.
  s->close();
  s = open();
  EXPECT_EQ(*s->migrate("widgets", v2), 0);
  std::vector<int64_t> versions;
  ASSERT_TRUE(s->read([&](Tx& tx) -> Result<void> {
                 auto rows = PURSER_TRY_VALUE(tx.query(
                     "SELECT version FROM schema_migrations WHERE component = $1 ORDER BY version",
                     {std::string("widgets")}));
                 for (const auto& r : rows) versions.push_back(r.getInt(0));
                 return {};
               }).has_value());
  EXPECT_EQ(versions, (std::vector<int64_t>{1, 2, 3}));
  // The second migration really ran after the first: the column exists.
  EXPECT_TRUE(s->write([](Tx& tx) -> Result<void> {
                 PURSER_TRY(tx.exec("INSERT INTO widgets (id, size, colour) VALUES ($1, $2, $3)",
                                    {std::string("w"), int64_t{1}, std::string("red")}));
                 return {};
               }).has_value());
}

TEST_P(StoreSuite, EditedOrUnknownMigrationsAreRefused) {
  auto s = open();
  ASSERT_TRUE(s->migrate("widgets", kV1).has_value());
  auto edited = kV1;
  edited[1].sql = "ALTER TABLE widgets ADD COLUMN color TEXT";
  auto e = s->migrate("widgets", edited);
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(e.error().message.find("was changed after it was applied"), std::string::npos);

  // An older binary that knows only the first migration meets a newer store.
  auto older = std::vector<Migration>{kV1[0]};
  auto o = s->migrate("widgets", older);
  ASSERT_FALSE(o.has_value());
  EXPECT_NE(o.error().message.find("written by a newer version"), std::string::npos);

  auto gap = std::vector<Migration>{kV1[0], {3, "skip", "SELECT 1"}};
  EXPECT_FALSE(s->migrate("widgets", gap).has_value());
}

TEST_P(StoreSuite, AFailedMigrationLeavesNothingHalfWritten) {
  auto s = open();
  const std::vector<Migration> bad = {
      {1, "ok", "CREATE TABLE a (x INTEGER)"},
      {2, "half", "CREATE TABLE b (x INTEGER); CREATE TABLE a (y INTEGER)"},  // 2nd fails
  };
  auto r = s->migrate("broken", bad);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("migration broken version 2 (\"half\") failed"),
            std::string::npos)
      << r.error().message;
  EXPECT_EQ(count(*s, "a"), 0);  // migration 1 stays applied
  EXPECT_FALSE(tableExists(*s, "b")) << "the failed migration's first statement was rolled back";
  std::vector<Migration> fixed = {bad[0], {2, "half", "CREATE TABLE b (x INTEGER)"}};
  EXPECT_EQ(*s->migrate("broken", fixed), 1);
}

// One schema, written in SQLite's types, on both: 64-bit integers and bytes round-trip.
TEST_P(StoreSuite, WritesRoundTripEveryValueType) {
  auto s = open();
  ASSERT_TRUE(s->migrate("t", {{1, "t", "CREATE TABLE t (i INTEGER, s TEXT, b BLOB, n TEXT)"}}));
  std::string binary;
  for (int c = 0; c < 256; ++c) binary.push_back(static_cast<char>(c));
  ASSERT_TRUE(s->write([&](Tx& tx) -> Result<void> {
                 // Parameters bind by number, in any order of appearance.
                 PURSER_TRY(tx.exec("INSERT INTO t (s, i, b, n) VALUES ($2, $1, $3, $4)",
                                    {int64_t{-9'000'000'000'000}, std::string("héllo 'x' \"y\""),
                                     Blob{binary}, std::monostate{}}));
                 return {};
               }).has_value());
  ASSERT_TRUE(s->read([&](Tx& tx) -> Result<void> {
                 auto rows =
                     PURSER_TRY_VALUE(tx.query("SELECT i, s, b, n, (SELECT SUM(i) FROM t) FROM t"));
                 EXPECT_EQ(rows.size(), 1u);
                 EXPECT_EQ(rows[0].getInt(0), -9'000'000'000'000);
                 EXPECT_EQ(rows[0].getText(1), "héllo 'x' \"y\"");
                 EXPECT_EQ(rows[0].getBlob(2).bytes, binary);
                 EXPECT_TRUE(rows[0].isNull(3));
                 EXPECT_EQ(rows[0].getInt(4), -9'000'000'000'000) << "SUM() reads as an integer";
                 return {};
               }).has_value());
}

TEST_P(StoreSuite, AFailedWriteChangesNothing) {
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

  auto bad_sql = s->write([](Tx& tx) -> Result<void> {
    PURSER_TRY(tx.exec("INSERT INTO nowhere VALUES (1)"));
    return {};
  });
  ASSERT_FALSE(bad_sql.has_value());
  EXPECT_NE(bad_sql.error().message.find("nowhere"), std::string::npos) << bad_sql.error().message;
  // The store goes on.
  ASSERT_TRUE(s->write([](Tx& tx) -> Result<void> {
                 PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ('d', 1)"));
                 return {};
               }).has_value());
  EXPECT_EQ(count(*s, "widgets"), 1);
}

TEST_P(StoreSuite, ReadsCannotWrite) {
  auto s = open();
  ASSERT_TRUE(s->migrate("widgets", kV1).has_value());
  auto r = s->read([](Tx& tx) -> Result<void> {
    PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ('a', 1)"));
    return {};
  });
  EXPECT_FALSE(r.has_value());
  EXPECT_EQ(count(*s, "widgets"), 0);
}

// Holds the writer inside a write until released, so tests can queue work deterministically.
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

TEST_P(StoreSuite, QueuedWritesShareOneCommitAndFailAlone) {
  auto s = open();
  ASSERT_TRUE(s->migrate("widgets", kV1).has_value());
  const uint64_t before = commits(*s);
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
          // Job 25 refuses after writing, job 30 breaks a constraint: only they are undone.
          if (i == 25) return fail(invalidArgument("rejected"));
          if (i == 30) PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ('0', 0)"));
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
  EXPECT_EQ(commits(*s) - before, 2u) << "the gate's batch, then one for all 50";
}

TEST_P(StoreSuite, AFullQueueFailsFastAndAClosedStoreRefuses) {
  auto s = open({.max_queue = 1});
  Gate gate;
  s->writeAsync(gate.fn(), [](Result<void>) {});
  gate.entered.get_future().wait();  // the writer holds the gate job; the queue is empty
  std::promise<Result<void>> queued;
  s->writeAsync([](Tx&) -> Result<void> { return {}; },
                [&](Result<void> r) { queued.set_value(std::move(r)); });
  std::optional<Result<void>> refused;
  s->writeAsync([](Tx&) -> Result<void> { return {}; },
                [&](Result<void> r) { refused = std::move(r); });
  ASSERT_TRUE(refused.has_value()) << "refused at once, on the caller's thread";
  ASSERT_FALSE(refused->has_value());
  EXPECT_EQ(refused->error().code, ErrorCode::kResourceExhausted);
  gate.open.set_value();
  EXPECT_TRUE(queued.get_future().get().has_value());
  s->close();
  auto after = s->write([](Tx&) -> Result<void> { return {}; });
  ASSERT_FALSE(after.has_value());
  EXPECT_EQ(after.error().code, ErrorCode::kUnavailable);
}

TEST_P(StoreSuite, ConcurrentWritersAndReadersAllSucceed) {
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

INSTANTIATE_TEST_SUITE_P(Backends, StoreSuite,
                         ::testing::Values(Dialect::kSqlite, Dialect::kPostgres),
                         [](const ::testing::TestParamInfo<Dialect>& info) {
                           return info.param == Dialect::kSqlite ? "Sqlite" : "Postgres";
                         });

}  // namespace
}  // namespace purser::store
