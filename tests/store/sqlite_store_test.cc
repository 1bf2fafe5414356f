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
