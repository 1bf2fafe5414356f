// The ledger's tables: wallet spend kept per wallet and minute, and the migration that built it
// from the charge rows of earlier versions.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "fakes/temp_dir.h"
#include "ledger/ledger_store.h"
#include "store/sqlite_store.h"

namespace purser::ledger {
namespace {

using namespace std::chrono_literals;

Money spent(store::Store& s, const std::string& wallet, SystemTime since) {
  Money out;
  EXPECT_TRUE(s.read([&](store::Tx& tx) -> Result<void> {
                 out = PURSER_TRY_VALUE(spentSince(tx, wallet, since));
                 return {};
               }).has_value());
  return out;
}

SystemTime at(int64_t ms) { return SystemTime(std::chrono::milliseconds(ms)); }

TEST(LedgerStoreTest, SpendIsSummedPerWalletAndMinuteAndReadFromAWindowsStart) {
  testing::TempDir dir;
  ManualClock clock;
  auto s = store::SqliteStore::open({.path = dir.file("l.db")}, clock);
  ASSERT_TRUE(s.has_value());
  ASSERT_TRUE((*s)->migrate("ledger", ledgerMigrations()).has_value());
  const int64_t day = 1'767'225'600'000;  // 2026-01-01T00:00:00Z
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) -> Result<void> {
                    SpendBatch batch;
                    batch.add("w", day - 1, 7);        // the last millisecond of the day before
                    batch.add("w", day, 100);          // the window's first minute
                    batch.add("w", day + 59'999, 20);  // the same minute
                    batch.add("w", day + 60'000, 3);
                    batch.add("other", day, 1000);
                    PURSER_TRY(batch.write(tx));
                    batch.add("w", day + 60'001, 4);  // adds to the stored minute
                    return batch.write(tx);
                  })
                  .has_value());
  EXPECT_EQ(spent(**s, "w", SystemTime::min()).nanos(), 134);
  EXPECT_EQ(spent(**s, "w", at(day)).nanos(), 127);
  EXPECT_EQ(spent(**s, "w", at(day + 60'000)).nanos(), 7);
  // A window that starts inside a minute counts that minute whole: more, never less.
  EXPECT_EQ(spent(**s, "w", at(day + 30'000)).nanos(), 127);
  EXPECT_EQ(spent(**s, "nobody", SystemTime::min()).nanos(), 0);
  EXPECT_EQ(spent(**s, "other", at(day)).nanos(), 1000);
}

TEST(LedgerStoreTest, TheChargeRowsOfVersionTwoBecomeWalletSpend) {
  testing::TempDir dir;
  ManualClock clock;
  auto s = store::SqliteStore::open({.path = dir.file("l.db")}, clock);
  ASSERT_TRUE(s.has_value());
  const std::vector<store::Migration> all = ledgerMigrations();
  ASSERT_GE(all.size(), 3u);
  ASSERT_TRUE((*s)->migrate("ledger", {all[0], all[1]}).has_value());
  const int64_t day = 1'767'225'600'000;
  ASSERT_TRUE(
      (*s)->write([&](store::Tx& tx) -> Result<void> {
            int n = 0;
            for (const auto& [wallet, ms, nanos] :
                 std::vector<std::tuple<std::string, int64_t, int64_t>>{{"w", day - 1, 7},
                                                                        {"w", day, 100},
                                                                        {"w", day + 59'999, 20},
                                                                        {"w", day + 60'000, 3},
                                                                        {"v", day, 5},
                                                                        {"v", -1, 9}}) {
              PURSER_TRY(
                  tx.exec("INSERT INTO usage_charges (event_id, wallet_id, at_ms, cost_nanos)"
                          " VALUES ($1, $2, $3, $4)",
                          {"e" + std::to_string(n++), wallet, ms, nanos}));
            }
            return {};
          })
          .has_value());
  auto migrated = (*s)->migrate("ledger", {all[0], all[1], all[2]});
  ASSERT_TRUE(migrated.has_value()) << migrated.error().toString();
  EXPECT_EQ(spent(**s, "w", SystemTime::min()).nanos(), 130);
  EXPECT_EQ(spent(**s, "w", at(day)).nanos(), 123);
  EXPECT_EQ(spent(**s, "w", at(day + 60'000)).nanos(), 3);
  EXPECT_EQ(spent(**s, "v", SystemTime::min()).nanos(), 14);
  EXPECT_EQ(spent(**s, "v", at(0)).nanos(), 5) << "before 1970 is the minute before, not minute 0";
}

// The one rebuild of the wallet book, for a start and for another replica's change.
TEST(LedgerStoreTest, TheWalletBookIsRebuiltFromTheStoreAtStartAndOnAChange) {
  testing::TempDir dir;
  const int64_t day = 1'767'225'600'000;  // 2026-01-01T00:00:00Z
  ManualClock clock(at(day + 3'600'000));
  auto s = store::SqliteStore::open({.path = dir.file("l.db")}, clock);
  ASSERT_TRUE(s.has_value());
  ASSERT_TRUE((*s)->migrate("ledger", ledgerMigrations()).has_value());
  WalletSpec daily{.id = "w",
                   .tenant_id = "t",
                   .scope = {ScopeKind::kTenant, "t"},
                   .limit = Money::fromNanos(1'000),
                   .period = Period::kDaily};
  WalletSpec other{.id = "v",
                   .tenant_id = "t",
                   .scope = {ScopeKind::kTeam, "a"},
                   .limit = Money::fromNanos(500)};
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) -> Result<void> {
                    PURSER_TRY(insertWallet(tx, daily, "now"));
                    PURSER_TRY(insertWallet(tx, other, "now"));
                    SpendBatch batch;
                    batch.add("w", day - 60'000, 400);  // yesterday: not this window's
                    batch.add("w", day + 60'000, 30);
                    batch.add("v", day - 60'000, 20);  // no period: all of it counts
                    return batch.write(tx);
                  })
                  .has_value());
  WalletBook book(clock);
  ASSERT_TRUE(loadWalletBook(**s, book, clock, /*keep_known=*/false).has_value());
  ASSERT_TRUE(book.status("w").has_value());
  EXPECT_EQ(book.status("w")->spent.nanos(), 30);
  EXPECT_EQ(book.status("v")->spent.nanos(), 20);

  // Another replica changed the wallets: "v" is gone, "w" has a new limit. What "w" spent and
  // holds here stays (it is this replica's own count), "v" leaves the book.
  ASSERT_TRUE(
      book.reserve({"hold-1", {"w"}, Money::fromNanos(5), std::chrono::seconds(60)}).has_value());
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) -> Result<void> {
                    PURSER_TRY(tx.exec("DELETE FROM wallets WHERE id = 'v'"));
                    PURSER_TRY(tx.exec("UPDATE wallets SET limit_nanos = 2000 WHERE id = 'w'"));
                    return {};
                  })
                  .has_value());
  ASSERT_TRUE(loadWalletBook(**s, book, clock, /*keep_known=*/true).has_value());
  EXPECT_FALSE(book.status("v").has_value());
  ASSERT_TRUE(book.status("w").has_value());
  EXPECT_EQ(book.status("w")->spec.limit.nanos(), 2'000);
  EXPECT_EQ(book.status("w")->spent.nanos(), 30);
  EXPECT_EQ(book.status("w")->reserved.nanos(), 5);
}

}  // namespace
}  // namespace purser::ledger
