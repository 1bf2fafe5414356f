// Who pays: a principal's scopes and its key chain's rate limits, read from the directory.
#include "identity/payer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/clock.h"
#include "identity/directory.h"

namespace purser::identity {
namespace {

ApiKey key(std::string id, std::string owner_id, std::string parent, int64_t rpm, int64_t tpm) {
  ApiKey k;
  k.id = std::move(id);
  k.lookup = k.id;
  k.owner_id = std::move(owner_id);
  k.parent_key_id = std::move(parent);
  k.rpm = rpm;
  k.tpm = tpm;
  return k;
}

std::vector<std::string> keyIds(const ledger::Payer& p) {
  std::vector<std::string> out;
  for (const auto& k : p.keys) out.push_back(k.key_id);
  return out;
}

class PayerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Snapshot s;
    s.keys = {key("root", "dana", "", 60, 0), key("child", "dana", "root", 0, 1000),
              key("grandchild", "dana", "child", 10, 100)};
    directory.load(std::move(s));
  }
  ManualClock clock;
  Directory directory{clock};
};

TEST_F(PayerTest, APrincipalPaysWithItsScopesAndEveryKeyAboveItsOwn) {
  Principal who;
  who.kind = OwnerKind::kUser;
  who.id = "dana";
  who.tenant_id = "acme";
  who.team_id = "ml";
  who.key_id = "grandchild";
  const ledger::Payer p = payerOf(who, directory);
  EXPECT_EQ(p.charged.tenant_id, "acme");
  EXPECT_EQ(p.charged.team_id, "ml");
  EXPECT_EQ(p.charged.user_id, "dana");
  EXPECT_TRUE(p.charged.service_account_id.empty());
  EXPECT_EQ(p.charged.key_chain, (std::vector<std::string>{"grandchild", "child", "root"}));
  ASSERT_EQ(p.keys.size(), 3u);
  EXPECT_EQ(keyIds(p), (std::vector<std::string>{"grandchild", "child", "root"}));
  EXPECT_EQ(p.keys[0].rpm, 10);
  EXPECT_EQ(p.keys[0].tpm, 100);
  EXPECT_EQ(p.keys[1].rpm, 0);
  EXPECT_EQ(p.keys[1].tpm, 1000);
  EXPECT_EQ(p.keys[2].rpm, 60);
  EXPECT_EQ(p.keys[2].tpm, 0);
}

TEST_F(PayerTest, AServiceAccountPaysAsItself) {
  Principal who;
  who.kind = OwnerKind::kServiceAccount;
  who.id = "bot";
  who.tenant_id = "acme";
  who.key_id = "root";
  const ledger::Payer p = payerOf(who, directory);
  EXPECT_TRUE(p.charged.user_id.empty());
  EXPECT_EQ(p.charged.service_account_id, "bot");
  EXPECT_EQ(p.charged.key_chain, std::vector<std::string>{"root"});
}

TEST_F(PayerTest, RecordedWorkReadsTheChainNowAndReplacesTheOneItCarried) {
  ledger::Charged charged{"acme", "ml", "dana", "", {"stale", "chain"}};
  const ledger::Payer p = payerOf(charged, "child", directory);
  EXPECT_EQ(p.charged.tenant_id, "acme");
  EXPECT_EQ(p.charged.user_id, "dana");
  EXPECT_EQ(p.charged.key_chain, (std::vector<std::string>{"child", "root"}));
  EXPECT_EQ(keyIds(p), (std::vector<std::string>{"child", "root"}));
}

TEST_F(PayerTest, AKeySinceDeletedStillPaysAsItselfWithoutLimits) {
  const ledger::Payer p = payerOf(ledger::Charged{"acme", "ml", "dana", "", {}}, "gone", directory);
  EXPECT_EQ(p.charged.key_chain, std::vector<std::string>{"gone"});
  EXPECT_TRUE(p.keys.empty());
}

TEST_F(PayerTest, WorkWithoutAKeyHasNoChain) {
  const ledger::Payer p = payerOf(ledger::Charged{"acme", "ml", "dana", "", {"x"}}, "", directory);
  EXPECT_TRUE(p.charged.key_chain.empty());
  EXPECT_TRUE(p.keys.empty());
}

}  // namespace
}  // namespace purser::identity
