#include "store/sqlite_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <set>
#include <thread>

#include "fakes/temp_dir.h"

namespace purser::store {
namespace {

using purser::testing::TempDir;

class SqliteStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<SqliteStore> open(SqliteOptions o = {}) {
    o.path = dir.file("purser.db");
    auto s = SqliteStore::open(o, clock);
    EXPECT_TRUE(s.has_value()) << s.error().toString();
    return std::move(*s);
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

  TempDir dir;
  ManualClock clock;
};

const std::vector<Migration> kV1 = {
    {1, "create widgets", "CREATE TABLE widgets (id TEXT PRIMARY KEY, size INTEGER NOT NULL)"},
    {2, "add colour", "ALTER TABLE widgets ADD COLUMN colour TEXT"},
};

TEST_F(SqliteStoreTest, MigrationsApplyOnceAndInOrder) {
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

  // Migrations are recorded per component, in order, and survive reopening.
  s->close();
  s = open();
  EXPECT_EQ(*s->migrate("widgets", v2), 0);
  std::vector<int64_t> versions;
  ASSERT_TRUE(s->read([&](Tx& tx) -> Result<void> {
                 auto rows = PURSER_TRY_VALUE(tx.query(
                     "SELECT version FROM schema_migrations WHERE component = $1 ORDER BY rowid",
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

TEST_F(SqliteStoreTest, EditedOrUnknownMigrationsAreRefused) {
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

TEST_F(SqliteStoreTest, AFailedMigrationLeavesNothingHalfWritten) {
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
  int64_t tables_b = -1;
  ASSERT_TRUE(s->read([&](Tx& tx) -> Result<void> {
                 auto rows = PURSER_TRY_VALUE(
                     tx.query("SELECT COUNT(*) FROM sqlite_master WHERE name = 'b'"));
                 tables_b = rows[0].getInt(0);
                 return {};
               }).has_value());
  EXPECT_EQ(tables_b, 0) << "the failed migration's first statement was rolled back";
  std::vector<Migration> fixed = {bad[0], {2, "half", "CREATE TABLE b (x INTEGER)"}};
  EXPECT_EQ(*s->migrate("broken", fixed), 1);
}

TEST_F(SqliteStoreTest, WritesRoundTripEveryValueType) {
  auto s = open();
  ASSERT_TRUE(s->migrate("t", {{1, "t", "CREATE TABLE t (i INTEGER, s TEXT, b BLOB, n TEXT)"}}));
  const std::string binary("\0\x01\xff", 3);
  ASSERT_TRUE(s->write([&](Tx& tx) -> Result<void> {
                 // Parameters bind by number, in any order of appearance.
                 PURSER_TRY(tx.exec("INSERT INTO t (s, i, b, n) VALUES ($2, $1, $3, $4)",
                                    {int64_t{-9'000'000'000'000}, std::string("héllo"),
                                     Blob{binary}, std::monostate{}}));
                 return {};
               }).has_value());
  ASSERT_TRUE(s->read([&](Tx& tx) -> Result<void> {
                 auto rows = PURSER_TRY_VALUE(tx.query("SELECT i, s, b, n FROM t"));
                 EXPECT_EQ(rows.size(), 1u);
                 EXPECT_EQ(rows[0].getInt(0), -9'000'000'000'000);
                 EXPECT_EQ(rows[0].getText(1), "héllo");
                 EXPECT_EQ(rows[0].getBlob(2).bytes, binary);
                 EXPECT_TRUE(rows[0].isNull(3));
                 return {};
               }).has_value());
}

TEST_F(SqliteStoreTest, AFailedWriteChangesNothing) {
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
  EXPECT_NE(bad_sql.error().message.find("no such table: nowhere"), std::string::npos);
}

TEST_F(SqliteStoreTest, ReadsCannotWrite) {
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

TEST_F(SqliteStoreTest, QueuedWritesShareOneCommitAndFailAlone) {
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
          // Job 25 fails after writing: only its own row is undone.
          PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ($1, $2)",
                             {std::to_string(i), int64_t{i}}));
          if (i == 25) return fail(invalidArgument("rejected"));
          return {};
        },
        [p](Result<void> r) { p->set_value(std::move(r)); });
  }
  gate.open.set_value();
  for (int i = 0; i < 50; ++i) {
    auto r = results[static_cast<size_t>(i)].get();
    EXPECT_EQ(r.has_value(), i != 25) << i;
  }
  EXPECT_EQ(count(*s, "widgets"), 49);
  EXPECT_EQ(s->commitsForTest() - before, 2u) << "the gate's batch, then one for all 50";
}

TEST_F(SqliteStoreTest, AFullQueueFailsFastAndAClosedStoreRefuses) {
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

TEST_F(SqliteStoreTest, ConcurrentWritersAndReadersAllSucceed) {
  auto s = open();
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

TEST_F(SqliteStoreTest, UnopenableDatabaseIsAClearError) {
  auto s = SqliteStore::open({.path = dir.file("missing-dir/sub/purser.db")}, clock);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("cannot open database"), std::string::npos);
  testing::writeFile(dir.file("garbage.db"), std::string(8192, 'x'));
  auto g = SqliteStore::open({.path = dir.file("garbage.db")}, clock);
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().code, ErrorCode::kDataLoss) << g.error().toString();
}

// A child process writes rows and reports each one as soon as write() has returned; the parent
// kills it with SIGKILL mid-stream and checks that every acknowledged row is in the database.
TEST_F(SqliteStoreTest, AcknowledgedWritesSurviveKillMinus9) {
  {
    auto s = open();
    ASSERT_TRUE(s->migrate("widgets", kV1).has_value());
  }
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    auto s = SqliteStore::open({.path = dir.file("purser.db")}, clock);
    if (!s) ::_exit(2);
    for (int i = 0;; ++i) {
      auto r = (*s)->write([i](Tx& tx) -> Result<void> {
        PURSER_TRY(tx.exec("INSERT INTO widgets (id, size) VALUES ($1, $2)",
                           {std::to_string(i), int64_t{i}}));
        return {};
      });
      if (!r) ::_exit(3);
      if (::write(fds[1], &i, sizeof i) != sizeof i) ::_exit(4);  // the acknowledgement
    }
  }
  ::close(fds[1]);
  std::set<int> acknowledged;
  int i;
  while (acknowledged.size() < 300 && ::read(fds[0], &i, sizeof i) == sizeof i)
    acknowledged.insert(i);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(fds[0]);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child must have been killed, not have exited";
  ASSERT_EQ(acknowledged.size(), 300u);

  auto s = open();
  std::set<int> stored;
  ASSERT_TRUE(s->read([&](Tx& tx) -> Result<void> {
                 auto rows = PURSER_TRY_VALUE(tx.query("SELECT size FROM widgets"));
                 for (const auto& r : rows) stored.insert(static_cast<int>(r.getInt(0)));
                 return {};
               }).has_value());
  for (int a : acknowledged) EXPECT_TRUE(stored.contains(a)) << "acknowledged row " << a << " lost";
}

}  // namespace
}  // namespace purser::store
