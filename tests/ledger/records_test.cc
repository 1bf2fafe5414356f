// Records: a change and its audit entries commit together or not at all; the audit log reads
// back through it; budget alerts' entries; which usage events the store already has.
#include "ledger/records.h"

#include <gtest/gtest.h>

#include <future>
#include <set>
#include <vector>

#include "common/json.h"
#include "fakes/temp_dir.h"
#include "ledger/ledger_store.h"
#include "store/sqlite_store.h"

namespace purser::ledger {
namespace {

class RecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open({.path = dir.file("records.db")}, clock);
    ASSERT_TRUE(s.has_value()) << s.error().toString();
    store = std::move(*s);
    ASSERT_TRUE(migrateLedger(*store).has_value());
    records = std::make_unique<Records>(*store, audit);
  }

  AuditEntry entry(const std::string& action, const std::string& target) {
    AuditEntry e;
    e.actor = "u-1";
    e.actor_role = "tenant_admin";
    e.tenant_id = "t-1";
    e.action = action;
    e.target = target;
    return e;
  }

  WalletSpec wallet(const std::string& id) {
    WalletSpec w;
    w.id = id;
    w.scope = {ScopeKind::kTenant, "t-1"};
    w.tenant_id = "t-1";
    w.limit = *Money::parse("10.00");
    return w;
  }

  Result<void> commitAsync(std::vector<Change> changes, std::vector<AuditEntry> entries) {
    std::promise<Result<void>> done;
    records->commit(std::move(changes), std::move(entries),
                    [&done](Result<void> r) { done.set_value(std::move(r)); });
    return done.get_future().get();
  }

  size_t wallets() { return loadWallets(*store).value().size(); }
  std::vector<AuditEntry> logged() { return records->audit(AuditQuery{}).value(); }

  testing::TempDir dir;
  ManualClock clock;
  AuditLog audit{clock};
  std::unique_ptr<store::SqliteStore> store;
  std::unique_ptr<Records> records;
};

TEST_F(RecordsTest, AChangeAndItsEntriesAreCommittedTogether) {
  ASSERT_TRUE(
      commitAsync({change(insertWallet, wallet("w-1"), std::string("2026-01-01T00:00:00Z"))},
                  {entry("wallet.create", "wallet:w-1")})
          .has_value());
  EXPECT_EQ(wallets(), 1u);
  const auto entries = logged();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].action, "wallet.create");
  EXPECT_EQ(entries[0].target, "wallet:w-1");
  EXPECT_TRUE(records->verifyAudit().value().ok);
}

TEST_F(RecordsTest, AFailingChangeLeavesNeitherTheOtherChangesNorTheEntries) {
  const Change refused = [](store::Tx&) -> Result<void> {
    return fail(invalidArgument("refused"));
  };
  auto r = commitAsync(
      {change(insertWallet, wallet("w-1"), std::string("2026-01-01T00:00:00Z")), refused},
      {entry("wallet.create", "wallet:w-1")});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "refused");
  EXPECT_EQ(wallets(), 0u);
  EXPECT_TRUE(logged().empty());
  // The same with the waiting form, and the log's chain is still whole afterwards.
  EXPECT_FALSE(records->commitNow({refused}, {entry("x.y", "x:1")}).has_value());
  ASSERT_TRUE(records->commitNow({}, {entry("x.y", "x:2")}).has_value());
  EXPECT_EQ(logged().size(), 1u);
  EXPECT_TRUE(records->verifyAudit().value().ok);
}

TEST_F(RecordsTest, ChangesKeepTheirArgumentsByValue) {
  Change c;
  {
    WalletSpec w = wallet("w-kept");
    c = change(insertWallet, w, std::string("2026-01-01T00:00:00Z"));
    w.id = "w-changed-after";
  }
  ASSERT_TRUE(records->commitNow({c}, {}).has_value());
  const auto stored = loadWallets(*store).value();
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].id, "w-kept");
}

TEST_F(RecordsTest, AlertEntriesNameTheWalletAndWhatItSpent) {
  Alert a;
  a.wallet_id = "w-1";
  a.threshold = 80;
  a.spent = *Money::parse("8.00");
  a.limit = *Money::parse("10.00");
  const auto entries = alertEntries({a, a}, "t-1", "fleet", "system");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].action, "budget.alert");
  EXPECT_EQ(entries[0].target, "wallet:w-1");
  EXPECT_EQ(entries[0].tenant_id, "t-1");
  EXPECT_EQ(entries[0].actor, "fleet");
  EXPECT_EQ(entries[0].actor_role, "system");
  EXPECT_EQ(parseJson(entries[0].after).value(),
            (Json{{"threshold", 80}, {"spent", "8.00"}, {"limit", "10.00"}}));
  EXPECT_TRUE(alertEntries({}, "t-1", "fleet", "system").empty());
}

TEST_F(RecordsTest, RecordedEventsAreFoundAmongTheIdsAsked) {
  ASSERT_TRUE(store
                  ->write([](store::Tx& tx) -> Result<void> {
                    PURSER_TRY(tx.exec(
                        "INSERT INTO usage_events (id, at_ms, tenant_id, team_id, user_id,"
                        " service_account_id, key_id, session_id, route, provider, model,"
                        " input_tokens, output_tokens, cached_input_tokens, cache_write_tokens,"
                        " reasoning_tokens, cost_nanos, latency_ms, ttft_ms, status, estimated,"
                        " recovered) VALUES ($1, 0, 't-1', '', '', '', '', '', '', '', 'm',"
                        " 0, 0, 0, 0, 0, 0, 0, 0, 200, 0, 0)",
                        {std::string("ev-1")}));
                    return {};
                  })
                  .has_value());
  std::set<std::string> found;
  ASSERT_TRUE(records
                  ->commitNow({change(findRecordedEvents,
                                      std::vector<std::string>{"ev-0", "ev-1", "ev-2"}, &found)},
                              {})
                  .has_value());
  EXPECT_EQ(found, (std::set<std::string>{"ev-1"}));
}

}  // namespace
}  // namespace purser::ledger
