#include "ledger/audit.h"

#include <gtest/gtest.h>

#include <cstdio>

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

// Rewrites every entry from `from_seq` on consistently, as someone holding only the database
// can: new contents, hashes recomputed along the chain (the MACs cannot be).
void rewriteFrom(store::Store& store, int64_t from_seq) {
  ASSERT_TRUE(store
                  .write([&](store::Tx& tx) -> Result<void> {
                    auto rows = PURSER_TRY_VALUE(tx.query(
                        "SELECT seq, at, tenant_id, actor, actor_role, action, target, before, "
                        "after, prev_hash, hash FROM audit_log ORDER BY seq"));
                    std::string prev;
                    for (const auto& r : rows) {
                      AuditEntry e{r.getInt(0),  r.getText(1), r.getText(2), r.getText(3),
                                   r.getText(4), r.getText(5), r.getText(6), r.getText(7),
                                   r.getText(8), r.getText(9), r.getText(10)};
                      if (e.seq >= from_seq) {
                        if (e.seq == from_seq) e.after = R"({"name":"innocent"})";
                        e.prev_hash = prev;
                        e.hash = AuditLog::hashOf(e);
                        PURSER_TRY(tx.exec(
                            "UPDATE audit_log SET after = $2, prev_hash = $3, hash = $4 WHERE "
                            "seq = $1",
                            {e.seq, e.after, e.prev_hash, e.hash}));
                      }
                      prev = e.hash;
                    }
                    return {};
                  })
                  .has_value());
}

class SignedAuditTest : public AuditTest {
 protected:
  void SetUp() override {
    AuditTest::SetUp();  // five entries written before the log had a key
    ASSERT_TRUE(store->migrate("audit", AuditLog::migrations()).has_value());
    ASSERT_TRUE(signed_log.open(*store).has_value());
  }
  void appendSigned(const std::string& target) {
    ASSERT_TRUE(store->write([&](store::Tx& tx) -> Result<void> {
      PURSER_TRY(signed_log.append(tx, {.actor = "u1", .action = "key.revoke", .target = target}));
      return {};
    }));
  }
  SecretKey key = *secretKeyFromHex(std::string(64, 'a'), "key");
  AuditLog signed_log{clock, key, dir.file("audit.anchor")};
};

TEST_F(SignedAuditTest, TheFirstStartWithAKeySignsTheEntriesBeforeItOnce) {
  auto v = signed_log.verify(*store);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->ok) << v->problem;
  EXPECT_TRUE(v->signed_entries);
  EXPECT_EQ(v->entries, 6) << "five sealed, and the entry that says so";
  EXPECT_EQ(v->anchored_seq, 6);
  auto sealed = signed_log.list(*store, {.action = "audit.sealed"});
  ASSERT_EQ(sealed->size(), 1u);
  // A second start finds the anchor and seals nothing.
  AuditLog again{clock, key, dir.file("audit.anchor")};
  ASSERT_TRUE(again.open(*store).has_value());
  EXPECT_EQ(again.list(*store, {.action = "audit.sealed"})->size(), 1u);
}

TEST_F(SignedAuditTest, AConsistentRewriteVerifiesWithoutAKeyButNotWithOne) {
  // Found by a hostile tenant: with only a hash chain, rewriting every entry from one on
  // consistently passed `purser audit verify`.
  appendSigned("key:k1");
  ASSERT_TRUE(signed_log.anchor(*store).has_value());
  rewriteFrom(*store, 3);
  EXPECT_TRUE(log.verify(*store)->ok) << "a bare hash chain cannot tell";
  auto v = signed_log.verify(*store);
  ASSERT_FALSE(v->ok);
  EXPECT_EQ(v->first_bad_seq, 3);
  EXPECT_NE(v->problem.find("without the audit key"), std::string::npos) << v->problem;
}

TEST_F(SignedAuditTest, RemovingTheNewestEntriesIsFoundByTheAnchor) {
  appendSigned("key:k1");
  appendSigned("key:k2");
  ASSERT_TRUE(signed_log.anchor(*store).has_value());
  EXPECT_EQ(signed_log.verify(*store)->anchored_seq, 8);
  tamper("DELETE FROM audit_log WHERE seq >= 7");
  auto v = signed_log.verify(*store);
  ASSERT_FALSE(v->ok) << "the chain that is left is intact, but shorter than the anchor";
  EXPECT_EQ(v->first_bad_seq, 7);
  EXPECT_NE(v->problem.find("removed"), std::string::npos) << v->problem;
  auto moved = signed_log.anchor(*store);
  ASSERT_FALSE(moved.has_value()) << "the anchor never moves backwards";
  EXPECT_EQ(moved.error().code, ErrorCode::kDataLoss);
  EXPECT_EQ(signed_log.verify(*store)->anchored_seq, 8);
}

TEST_F(SignedAuditTest, AnAlteredAnchorIsFound) {
  appendSigned("key:k1");
  ASSERT_TRUE(signed_log.anchor(*store).has_value());
  tamper("DELETE FROM audit_log WHERE seq = 7");
  // Someone with the data directory but not the key moves the anchor back to match.
  std::string text = testing::readFile(dir.file("audit.anchor"));
  const size_t at = text.find("\"seq\":7");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 7, "\"seq\":6");
  testing::writeFile(dir.file("audit.anchor"), text);
  auto v = signed_log.verify(*store);
  ASSERT_FALSE(v->ok);
  EXPECT_NE(v->problem.find("altered"), std::string::npos) << v->problem;
}

TEST_F(SignedAuditTest, AStrippedLogIsNotSignedAgainWhenItsAnchorIsGone) {
  appendSigned("key:k1");
  // A rewrite that drops the signatures it cannot forge, and the anchor that would tell.
  rewriteFrom(*store, 3);
  tamper("UPDATE audit_log SET mac = '' WHERE seq >= 3");
  std::remove(dir.file("audit.anchor").c_str());
  AuditLog restarted{clock, key, dir.file("audit.anchor")};
  ASSERT_TRUE(restarted.open(*store).has_value()) << "the start goes on";
  auto v = restarted.verify(*store);
  ASSERT_FALSE(v->ok);
  EXPECT_NE(v->problem.find("missing"), std::string::npos) << v->problem;
}

}  // namespace
}  // namespace purser::ledger
