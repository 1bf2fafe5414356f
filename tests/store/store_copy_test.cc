// The copy `purser migrate` makes (store/store_copy.h): a SQLite store written through
// SqliteStore copied into a real PostgreSQL (fakes/postgres.h) with its ids, NULLs, bytes and
// sums intact and its sequences moved on; and refused, with nothing kept, for a file that is not
// a Purser store, a table PostgreSQL lacks, a value that does not fit, or a target holding data.
#include "store/store_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <limits>

#include "fakes/postgres.h"
#include "fakes/temp_dir.h"
#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace purser::store {
namespace {

using purser::testing::TempDir;

// "children" sorts before the table it refers to, so a copy in name order would break the key.
const std::vector<Migration> kSchema = {
    {1, "parents, children and big numbers",
     "CREATE TABLE parents (id TEXT PRIMARY KEY, name TEXT NOT NULL);"
     "CREATE TABLE children (id INTEGER PRIMARY KEY,"
     " parent_id TEXT NOT NULL REFERENCES parents(id), amount_nanos INTEGER NOT NULL,"
     " note TEXT, data BLOB);"
     "CREATE TABLE zeta (k TEXT PRIMARY KEY, big INTEGER NOT NULL)"},
};

constexpr int64_t kBig = std::numeric_limits<int64_t>::max();

class StoreCopyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server = new testing::PostgresServer(); }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
  }

  void SetUp() override {
    if (!server->available()) GTEST_SKIP() << server->why();
    db = "copy" + std::to_string(++databases);
    ASSERT_TRUE(server->createDatabase(db));
  }

  std::string sqlitePath() const { return dir.file("purser.db"); }

  // A SQLite store with the schema and `fill` written into it, closed again.
  void writeSqlite(const std::function<Result<void>(Tx&)>& fill) {
    auto s = SqliteStore::open({.path = sqlitePath()}, clock);
    ASSERT_TRUE(s.has_value()) << s.error().toString();
    auto migrated = (*s)->migrate("test", kSchema);
    ASSERT_TRUE(migrated.has_value()) << migrated.error().toString();
    auto written = (*s)->write(fill);
    ASSERT_TRUE(written.has_value()) << written.error().toString();
  }

  std::unique_ptr<PostgresStore> target() {
    auto s = PostgresStore::open({.url = server->url(db)}, clock);
    EXPECT_TRUE(s.has_value()) << s.error().toString();
    if (!s) return nullptr;
    auto migrated = (*s)->migrate("test", kSchema);
    EXPECT_TRUE(migrated.has_value()) << migrated.error().toString();
    return std::move(*s);
  }

  std::string pg(const std::string& sql) { return server->query(db, sql); }

  static testing::PostgresServer* server;
  static int databases;
  std::string db;
  TempDir dir;
  ManualClock clock;
};

testing::PostgresServer* StoreCopyTest::server = nullptr;
int StoreCopyTest::databases = 0;

Result<void> fillSample(Tx& tx) {
  for (const char* id : {"p1", "p2", "p3"}) {
    PURSER_TRY(tx.exec("INSERT INTO parents (id, name) VALUES ($1, $2)",
                       {std::string(id), std::string("name of ") + id}));
  }
  // Keys the store assigns (1..7), then one given far beyond them.
  for (int i = 0; i < 7; ++i) {
    PURSER_TRY(tx.exec(
        "INSERT INTO children (parent_id, amount_nanos, note, data) VALUES ($1, $2, $3, $4)",
        {std::string(i % 2 == 0 ? "p1" : "p2"), int64_t{1'000'000'007} * (i + 1),
         i % 3 == 0 ? Value{} : Value{std::string("it's \"quoted\" ") + std::to_string(i)},
         i == 4 ? Value{} : Value{Blob{std::string("\0\x01\xff", 3) + std::to_string(i)}}}));
  }
  PURSER_TRY(tx.exec("INSERT INTO children (id, parent_id, amount_nanos) VALUES (100, 'p3', -5)"));
  // Sums past what 64 bits hold.
  for (const char* k : {"a", "b", "c"}) {
    PURSER_TRY(tx.exec("INSERT INTO zeta (k, big) VALUES ($1, $2)", {std::string(k), kBig}));
  }
  return {};
}

TEST_F(StoreCopyTest, CopiesEveryTableWithItsIdsParentsFirstAndChecksCountsAndSums) {
  writeSqlite(fillSample);
  auto source = SqliteSource::open(sqlitePath());
  ASSERT_TRUE(source.has_value()) << source.error().toString();
  auto pg_store = target();
  ASSERT_NE(pg_store, nullptr);
  // Three rows to a statement: the tables take several, and a last one that is not full.
  auto report = copyStore(**source, *pg_store, {.batch_rows = 3});
  ASSERT_TRUE(report.has_value()) << report.error().toString();
  EXPECT_TRUE(report->committed);
  EXPECT_TRUE(report->ok());
  ASSERT_EQ(report->tables.size(), 3u);
  // By name (the copy itself went parents first, or the children's key would have failed).
  EXPECT_EQ(report->tables[0].table, "children");
  EXPECT_EQ(report->tables[1].table, "parents");
  EXPECT_EQ(report->tables[2].table, "zeta");
  EXPECT_EQ(report->tables[0].source_rows, 8);
  EXPECT_EQ(report->tables[0].target_rows, 8);
  EXPECT_EQ(report->tables[0].summed, (std::vector<std::string>{"id", "amount_nanos"}));
  EXPECT_TRUE(report->tables[1].summed.empty());
  EXPECT_EQ(report->tables[2].summed, (std::vector<std::string>{"big"}));

  EXPECT_EQ(pg("SELECT SUM(big)::text FROM zeta"), "27670116110564327421");
  EXPECT_EQ(pg("SELECT COUNT(*) FROM children WHERE note IS NULL"), "4");
  EXPECT_EQ(pg("SELECT id, amount_nanos FROM children WHERE parent_id = 'p3'"), "100|-5");
  EXPECT_EQ(pg("SELECT note FROM children WHERE id = 2"), "it's \"quoted\" 1");
  // The bytes as they were, NUL included; NULL stays NULL.
  Blob read_back;
  bool data_null = false;
  ASSERT_TRUE(pg_store
                  ->read([&](Tx& tx) -> Result<void> {
                    auto rows =
                        PURSER_TRY_VALUE(tx.query("SELECT data FROM children WHERE id = 3"));
                    read_back = rows.at(0).getBlob(0);
                    rows = PURSER_TRY_VALUE(tx.query("SELECT data FROM children WHERE id = 5"));
                    data_null = rows.at(0).isNull(0);
                    return {};
                  })
                  .has_value());
  EXPECT_EQ(read_back.bytes, std::string("\0\x01\xff", 3) + "2");
  EXPECT_TRUE(data_null);
  // The next key PostgreSQL assigns itself comes after the copied ones.
  int64_t next = 0;
  auto inserted = pg_store->write([&](Tx& tx) -> Result<void> {
    auto rows = PURSER_TRY_VALUE(
        tx.query("INSERT INTO children (parent_id, amount_nanos) VALUES ('p1', 1) RETURNING id"));
    next = rows.at(0).getInt(0);
    return {};
  });
  ASSERT_TRUE(inserted.has_value()) << inserted.error().toString();
  EXPECT_GT(next, 100);
}

TEST_F(StoreCopyTest, ACopyThatDoesNotCheckOutIsReportedAndNothingIsKept) {
  writeSqlite(fillSample);
  auto source = SqliteSource::open(sqlitePath());
  ASSERT_TRUE(source.has_value()) << source.error().toString();
  auto pg_store = target();
  ASSERT_NE(pg_store, nullptr);
  // Something in the target that changes what it is given: the sums cannot match.
  ASSERT_TRUE(
      pg_store
          ->write([](Tx& tx) -> Result<void> {
            PURSER_TRY(tx.exec(
                "CREATE FUNCTION double_amount() RETURNS trigger LANGUAGE plpgsql AS "
                "$fn$ BEGIN NEW.amount_nanos := NEW.amount_nanos * 2; RETURN NEW; END $fn$"));
            PURSER_TRY(
                tx.exec("CREATE TRIGGER children_double BEFORE INSERT ON children"
                        " FOR EACH ROW EXECUTE FUNCTION double_amount()"));
            return {};
          })
          .has_value());
  auto report = copyStore(**source, *pg_store);
  ASSERT_TRUE(report.has_value()) << report.error().toString();
  EXPECT_FALSE(report->committed);
  EXPECT_FALSE(report->ok());
  ASSERT_EQ(report->tables.size(), 3u);
  EXPECT_EQ(report->tables[0].table, "children");
  ASSERT_EQ(report->tables[0].mismatches.size(), 1u);
  EXPECT_NE(report->tables[0].mismatches[0].find("sum(amount_nanos)"), std::string::npos)
      << report->tables[0].mismatches[0];
  EXPECT_TRUE(report->tables[1].ok());
  EXPECT_EQ(pg("SELECT COUNT(*) FROM children"), "0");
  EXPECT_EQ(pg("SELECT COUNT(*) FROM parents"), "0");
}

TEST_F(StoreCopyTest, ATableThePostgresSchemaLacksIsRefusedAndNothingIsCopied) {
  writeSqlite([](Tx& tx) -> Result<void> {
    PURSER_TRY(fillSample(tx));
    PURSER_TRY(tx.exec("CREATE TABLE added_later (a TEXT)"));
    PURSER_TRY(tx.exec("INSERT INTO added_later (a) VALUES ('x')"));
    return {};
  });
  auto source = SqliteSource::open(sqlitePath());
  ASSERT_TRUE(source.has_value()) << source.error().toString();
  auto pg_store = target();
  ASSERT_NE(pg_store, nullptr);
  auto report = copyStore(**source, *pg_store);
  ASSERT_FALSE(report.has_value());
  EXPECT_EQ(report.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(report.error().message.find("added_later"), std::string::npos)
      << report.error().message;
  EXPECT_EQ(pg("SELECT COUNT(*) FROM parents"), "0");
}

TEST_F(StoreCopyTest, AValueThatDoesNotFitItsColumnIsRefusedWithItsPlaceAndNothingIsKept) {
  writeSqlite([](Tx& tx) -> Result<void> {
    PURSER_TRY(fillSample(tx));
    // SQLite keeps text in an INTEGER column when it does not look like a number.
    PURSER_TRY(
        tx.exec("INSERT INTO children (id, parent_id, amount_nanos) VALUES (200, 'p1', 'lots')"));
    return {};
  });
  auto source = SqliteSource::open(sqlitePath());
  ASSERT_TRUE(source.has_value()) << source.error().toString();
  auto pg_store = target();
  ASSERT_NE(pg_store, nullptr);
  auto report = copyStore(**source, *pg_store);
  ASSERT_FALSE(report.has_value());
  EXPECT_EQ(report.error().code, ErrorCode::kDataLoss);
  EXPECT_NE(report.error().message.find("children"), std::string::npos) << report.error().message;
  EXPECT_NE(report.error().message.find("amount_nanos"), std::string::npos)
      << report.error().message;
  EXPECT_NE(report.error().message.find("\"lots\""), std::string::npos) << report.error().message;
  // The parents were copied first, in the same transaction: rolled back with the rest.
  EXPECT_EQ(pg("SELECT COUNT(*) FROM parents"), "0");
}

TEST_F(StoreCopyTest, ATargetHoldingDataIsRefusedNamingTheTable) {
  writeSqlite(fillSample);
  auto source = SqliteSource::open(sqlitePath());
  ASSERT_TRUE(source.has_value()) << source.error().toString();
  auto pg_store = target();
  ASSERT_NE(pg_store, nullptr);
  ASSERT_TRUE(pg_store
                  ->write([](Tx& tx) -> Result<void> {
                    PURSER_TRY(tx.exec("INSERT INTO zeta (k, big) VALUES ('there', 1)"));
                    return {};
                  })
                  .has_value());
  auto tables = (*source)->tables();
  ASSERT_TRUE(tables.has_value());
  auto empty = checkTargetEmpty(*pg_store, *tables);
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(empty.error().message.find("zeta"), std::string::npos) << empty.error().message;
  // copyStore checks again inside its transaction.
  auto report = copyStore(**source, *pg_store);
  ASSERT_FALSE(report.has_value());
  EXPECT_NE(report.error().message.find("zeta"), std::string::npos) << report.error().message;
  EXPECT_EQ(pg("SELECT COUNT(*) FROM parents"), "0");
  EXPECT_EQ(pg("SELECT COUNT(*) FROM zeta"), "1");
}

// Needs no PostgreSQL: the source is judged before anything is sent.
TEST(SqliteSourceTest, AMissingForeignCorruptOrNonPurserFileIsAClearError) {
  TempDir dir;
  ManualClock clock;
  auto missing = SqliteSource::open(dir.file("none.db"));
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);

  testing::writeFile(dir.file("notes.db"), "these are my notes, not a database\n");
  auto foreign = SqliteSource::open(dir.file("notes.db"));
  ASSERT_FALSE(foreign.has_value());
  EXPECT_EQ(foreign.error().code, ErrorCode::kDataLoss);
  EXPECT_NE(foreign.error().message.find("not a SQLite database"), std::string::npos)
      << foreign.error().message;

  {
    auto s = SqliteStore::open({.path = dir.file("other.db")}, clock);
    ASSERT_TRUE(s.has_value());
    ASSERT_TRUE((*s)->write([](Tx& tx) -> Result<void> {
                      PURSER_TRY(tx.exec("DROP TABLE schema_migrations"));
                      PURSER_TRY(tx.exec("CREATE TABLE things (a TEXT)"));
                      return {};
                    })
                    .has_value());
  }
  auto other = SqliteSource::open(dir.file("other.db"));
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(other.error().message.find("not a Purser store"), std::string::npos)
      << other.error().message;

  {
    auto s = SqliteStore::open({.path = dir.file("good.db")}, clock);
    ASSERT_TRUE(s.has_value());
    ASSERT_TRUE((*s)->migrate("test", kSchema).has_value());
    ASSERT_TRUE((*s)->write(fillSample).has_value());
  }
  auto good = SqliteSource::open(dir.file("good.db"));
  ASSERT_TRUE(good.has_value()) << good.error().toString();
  auto recorded = (*good)->recordedMigrations();
  ASSERT_TRUE(recorded.has_value()) << recorded.error().toString();
  ASSERT_EQ(recorded->count("test"), 1u);
  EXPECT_EQ(recorded->at("test").size(), 1u);
  EXPECT_EQ((*good)->tables().value_or(std::vector<std::string>{}),
            (std::vector<std::string>{"children", "parents", "zeta"}));
  good->reset();

  // Everything after SQLite's 100-byte header overwritten: the schema itself is unreadable.
  std::string bytes = testing::readFile(dir.file("good.db"));
  ASSERT_GT(bytes.size(), 200u);
  for (size_t i = 100; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131) % 251);
  testing::writeFile(dir.file("good.db"), bytes);
  auto corrupt = SqliteSource::open(dir.file("good.db"));
  ASSERT_FALSE(corrupt.has_value());
  EXPECT_EQ(corrupt.error().code, ErrorCode::kDataLoss) << corrupt.error().toString();
}

}  // namespace
}  // namespace purser::store
