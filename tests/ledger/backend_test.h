// A test run on each store back-end: SQLite (one file in a temporary directory) and PostgreSQL
// (a private server started once for the suite, a fresh database per test; skipped, saying why,
// where PostgreSQL is not installed). `shared` has the ledger's schema; openStore() opens more
// connections to the same database (replicas that each have their own).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/clock.h"
#include "fakes/postgres.h"
#include "fakes/temp_dir.h"
#include "ledger/ledger_store.h"
#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace purser::ledger {

class BackendTest : public ::testing::TestWithParam<store::Dialect> {
 protected:
  static void TearDownTestSuite() {
    delete postgres;
    postgres = nullptr;
  }

  void SetUp() override {
    if (GetParam() == store::Dialect::kPostgres) {
      if (postgres == nullptr) postgres = new testing::PostgresServer();
      if (!postgres->available()) GTEST_SKIP() << postgres->why();
      db = "ledger" + std::to_string(++databases);
      ASSERT_TRUE(postgres->createDatabase(db));
    }
    shared = openStore();
    ASSERT_NE(shared, nullptr);
    ASSERT_TRUE(shared->migrate("ledger", ledgerMigrations()).has_value());
  }

  std::unique_ptr<store::Store> openStore() {
    if (GetParam() == store::Dialect::kPostgres) {
      auto s = store::PostgresStore::open({.url = postgres->url(db)}, clock);
      EXPECT_TRUE(s.has_value()) << s.error().toString();
      return s ? std::move(*s) : nullptr;
    }
    auto s = store::SqliteStore::open({.path = dir.file("purser.db")}, clock);
    EXPECT_TRUE(s.has_value()) << s.error().toString();
    return s ? std::move(*s) : nullptr;
  }

  static inline testing::PostgresServer* postgres = nullptr;
  static inline int databases = 0;
  std::string db;
  testing::TempDir dir;
  ManualClock clock;
  std::unique_ptr<store::Store> shared;
};

// Names the back-end in the test's name: .../Sqlite, .../Postgres.
inline std::string backendName(const ::testing::TestParamInfo<store::Dialect>& info) {
  return info.param == store::Dialect::kSqlite ? "Sqlite" : "Postgres";
}

}  // namespace purser::ledger
