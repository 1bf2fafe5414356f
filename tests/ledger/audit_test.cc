#include "ledger/audit.h"

#include <gtest/gtest.h>

#include "fakes/temp_dir.h"
#include "store/sqlite_store.h"

namespace purser::ledger {
namespace {

class AuditTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open({.path = dir.file("audit.db")}, clock);
    ASSERT_TRUE(s.has_value());
    store = std::move(*s);
    ASSERT_TRUE(store->migrate("audit", AuditLog::migrations()).has_value());
    for (int i = 1; i <= 5; ++i) {
      ASSERT_TRUE(store->write([&](store::Tx& tx) -> Result<void> {
        AuditEntry e;
        e.tenant_id = i % 2 ? "t1" : "t2";
        e.actor = "u1";
        e.actor_role = "tenant-admin";
        e.action = "team.create";
        e.target = "team:" + std::to_string(i);
        e.after = R"({"name":"team )" + std::to_string(i) + "\"}";
        PURSER_TRY(log.append(tx, e));
        return {};
      }));
      clock.advance(std::chrono::seconds(1));
    }
  }

  void tamper(const std::string& sql) {
    ASSERT_TRUE(store->write([&](store::Tx& tx) -> Result<void> {
      PURSER_TRY(tx.exec(sql));
      return {};
    }));
  }

  testing::TempDir dir;
  ManualClock clock;
  std::unique_ptr<store::SqliteStore> store;
  AuditLog log{clock};
};

TEST_F(AuditTest, AnIntactChainVerifies) {
  auto v = log.verify(*store);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->ok) << v->problem;
  EXPECT_EQ(v->entries, 5);
  auto all = log.list(*store, {});
  ASSERT_TRUE(all.has_value());
  ASSERT_EQ(all->size(), 5u);
  EXPECT_EQ((*all)[0].prev_hash, "");
  EXPECT_EQ((*all)[1].prev_hash, (*all)[0].hash);
  auto t2 = log.list(*store, {.tenant_id = "t2"});
  EXPECT_EQ(t2->size(), 2u);
  auto window = log.list(*store, {.from = (*all)[1].at, .to = (*all)[3].at});
  EXPECT_EQ(window->size(), 2u);
}

TEST_F(AuditTest, AnEditedEntryIsNamed) {
  tamper("UPDATE audit_log SET after = '{\"name\":\"forged\"}' WHERE seq = 3");
  auto v = log.verify(*store);
  ASSERT_FALSE(v->ok);
  EXPECT_EQ(v->first_bad_seq, 3);
  EXPECT_NE(v->problem.find("edited"), std::string::npos);
}

TEST_F(AuditTest, ADeletedEntryIsNamed) {
  tamper("DELETE FROM audit_log WHERE seq = 2");
  auto v = log.verify(*store);
  ASSERT_FALSE(v->ok);
  EXPECT_EQ(v->first_bad_seq, 2);
  EXPECT_NE(v->problem.find("missing"), std::string::npos);
}

TEST_F(AuditTest, ADeletionHiddenByRenumberingIsStillFound) {
  tamper("DELETE FROM audit_log WHERE seq = 2");
  tamper("UPDATE audit_log SET seq = seq - 1 WHERE seq > 2");
  auto v = log.verify(*store);
  ASSERT_FALSE(v->ok);
  EXPECT_EQ(v->first_bad_seq, 2);
}

TEST_F(AuditTest, ReorderedEntriesAreNamed) {
  // Swap the contents of entries 2 and 4, keeping their positions.
  tamper("UPDATE audit_log SET seq = -2 WHERE seq = 2");
  tamper("UPDATE audit_log SET seq = 2 WHERE seq = 4");
  tamper("UPDATE audit_log SET seq = 4 WHERE seq = -2");
  auto v = log.verify(*store);
  ASSERT_FALSE(v->ok);
  EXPECT_EQ(v->first_bad_seq, 2);
}

TEST_F(AuditTest, AppendsContinueTheChainAfterReopening) {
  store->close();
  auto s = store::SqliteStore::open({.path = dir.file("audit.db")}, clock);
  ASSERT_TRUE(s.has_value());
  store = std::move(*s);
  ASSERT_TRUE(store->write([&](store::Tx& tx) -> Result<void> {
    auto e = PURSER_TRY_VALUE(log.append(tx, {.actor = "system", .action = "server.start"}));
    EXPECT_EQ(e.seq, 6);
    return {};
  }));
  EXPECT_TRUE(log.verify(*store)->ok);
}

}  // namespace
}  // namespace purser::ledger
