// The Investigator on its own (no HTTP, no fleet, no gateway): two tenants in a directory, a wallet
// of one of them spent in the observer's series, and audit entries in a SQLite store. What a caller
// may ask about, the case it gathers (its window, question and evidence), and the wall between
// tenants in the answer.
#include "diagnose_live/investigator.h"

#include <utility>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <optional>

#include "common/random.h"
#include "diagnose/engine.h"
#include "fakes/temp_dir.h"
#include "fakes/wallet_series.h"
#include "store/sqlite_store.h"

namespace purser::diagnose_live {
namespace {

constexpr int64_t kNow = 1'800'000'000'000;  // Unix ms

class InvestigatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open({.path = dir.file("d.db")}, clock);
    ASSERT_TRUE(s.has_value()) << s.error().toString();
    store = std::move(*s);
    ASSERT_TRUE(store->migrate("audit", ledger::AuditLog::migrations()).has_value());
    ASSERT_TRUE(audit.open(*store).has_value());
    records = std::make_unique<ledger::Records>(*store, audit);
    auto series_or = observe::SeriesStore::create();
    ASSERT_TRUE(series_or.has_value());
    series = std::move(*series_or);

    directory.put(identity::Tenant{"t-a", "alpha", "", {}});
    directory.put(identity::Tenant{"t-b", "borealis", "", {}});
    directory.put(identity::Team{"tm-a", "t-a", "aurora", ""});
    directory.put(identity::Team{"tm-z", "t-b", "zephyr", ""});
    directory.put(identity::User{"u-lena", "t-a", "tm-a", "lena", "", identity::Role::kTeamLead});
    directory.put(identity::User{"u-q", "t-b", "tm-z", "quentin", "", identity::Role::kMember});
    ledger::WalletSpec w;
    w.id = "w-zephyr";
    w.tenant_id = "t-b";
    w.scope = {ledger::ScopeKind::kTeam, "tm-z"};
    w.limit = *Money::parse("10.00");
    ASSERT_TRUE(wallets.put(w).has_value());

    lead.id = "u-lena";
    lead.name = "lena";
    lead.tenant_id = "t-a";
    lead.team_id = "tm-a";
    lead.role = identity::Role::kTeamLead;
    admin.id = "u-admin";
    admin.role = identity::Role::kPlatformAdmin;
  }

  Investigator investigator() {
    return Investigator(
        Sources{clock, directory, wallets, *records, series.get(), nullptr, nullptr, {}, {}});
  }

  // borealis' team zephyr spends its whole budget in the window, and its requests are refused.
  void zephyrRunsOutOfBudget() { testing::recordWalletRunningOut(*series, kNow, "w-zephyr"); }

  Result<Gathered> gather(const identity::Principal& who, Question q) {
    boost::asio::io_context ctx;
    std::optional<Result<Gathered>> out;
    Investigator inv = investigator();
    boost::asio::co_spawn(
        ctx, [&]() -> boost::asio::awaitable<void> { out.emplace(co_await inv.gather(who, q)); },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);
        });
    ctx.run();
    if (!out) return fail(internalError("gather did not complete"));
    return std::move(*out);
  }

  testing::TempDir dir;
  ManualClock clock{SystemTime(std::chrono::milliseconds(kNow))};
  std::unique_ptr<store::SqliteStore> store;
  ledger::AuditLog audit{clock};
  std::unique_ptr<ledger::Records> records;
  std::unique_ptr<observe::SeriesStore> series;
  identity::Directory directory{clock};
  ledger::WalletBook wallets{clock};
  identity::Principal lead, admin;
};

TEST_F(InvestigatorTest, ACallerAsksOnlyAboutWhatItMaySeeAndElseIsToldNothingExists) {
  // The error a question gets; nullopt when it is answered.
  const auto refused = [&](const identity::Principal& who, const char* kind,
                           const char* name) -> std::optional<ErrorCode> {
    auto g = gather(who, {kind, name, "any", 600'000});
    if (g) return std::nullopt;
    return g.error().code;
  };
  EXPECT_EQ(refused(lead, "team", "aurora"), std::nullopt);
  EXPECT_EQ(refused(lead, "team", "zephyr"), ErrorCode::kNotFound);
  EXPECT_EQ(refused(lead, "user", "lena"), std::nullopt);
  EXPECT_EQ(refused(lead, "user", "quentin"), ErrorCode::kNotFound);
  EXPECT_EQ(refused(lead, "route", "chat"), ErrorCode::kNotFound);         // no gateway: no routes
  EXPECT_EQ(refused(lead, "workload", "ml/train"), ErrorCode::kNotFound);  // no fleet
  EXPECT_EQ(refused(admin, "team", "zephyr"), std::nullopt);
  EXPECT_EQ(refused(admin, "user", "quentin"), std::nullopt);
  // What exists elsewhere reads exactly as what does not exist at all.
  auto other = gather(lead, {"team", "zephyr", "any", 600'000});
  auto none = gather(lead, {"team", "nobody", "any", 600'000});
  ASSERT_FALSE(other.has_value());
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(other.error().message, "no team \"zephyr\" you may see");
  EXPECT_EQ(none.error().message, "no team \"nobody\" you may see");
  EXPECT_EQ(other.error().field, "name");
}

TEST_F(InvestigatorTest, TheCaseCoversTheWindowWithTheSeriesAndTheAuditEntriesInIt) {
  zephyrRunsOutOfBudget();
  ledger::AuditEntry change;
  change.actor = "u-admin";
  change.action = "route.update";
  change.target = "route:chat";
  change.after = R"({"change":"weights changed"})";
  ASSERT_TRUE(records->commitNow({}, {change}).has_value());
  auto g = gather(admin, {"fleet", "*", "any", 600'000});
  ASSERT_TRUE(g.has_value()) << g.error().toString();
  EXPECT_EQ(g->c.question.kind, "fleet");
  EXPECT_EQ(g->c.end, kNow);
  EXPECT_EQ(g->c.start, kNow - 600'000);
  EXPECT_EQ(g->c.series.size(), 3u);  // the wallet and the gateway's two
  bool audited = false;
  for (const auto& e : g->c.events) {
    audited = audited ||
              (e.kind == "route.update" && e.object == "chat" && e.message == "weights changed");
  }
  EXPECT_TRUE(audited) << "the route change is an event of the case";
  EXPECT_TRUE(g->redactor.empty()) << "a platform admin sees every name";
}

// The isolation rule, at the service: another tenant's objects are renamed in what the engine
// reads, so the answer a team lead gets never names them — and it is the same answer otherwise.
TEST_F(InvestigatorTest, ATeamLeadsAnswerNeverNamesAnotherTenantsObjects) {
  zephyrRunsOutOfBudget();
  const Question q{"fleet", "*", "any", 1'800'000};
  Investigator inv = investigator();
  auto for_admin = gather(admin, q);
  ASSERT_TRUE(for_admin.has_value());
  const std::string admin_text = writeJson(inv.answer(admin, q, std::move(*for_admin)));
  EXPECT_NE(admin_text.find("zephyr"), std::string::npos) << admin_text;
  EXPECT_NE(admin_text.find("budget_exhausted"), std::string::npos) << admin_text;

  auto for_lead = gather(lead, q);
  ASSERT_TRUE(for_lead.has_value());
  EXPECT_FALSE(for_lead->redactor.empty());
  const Json answer = inv.answer(lead, q, std::move(*for_lead));
  const std::string text = writeJson(answer);
  ASSERT_FALSE(answer["findings"].empty());
  EXPECT_EQ(answer["findings"][0]["cause"], "budget_exhausted") << text;
  for (const char* name : {"zephyr", "borealis", "quentin", "w-zephyr", "t-b", "tm-z"}) {
    EXPECT_EQ(text.find(name), std::string::npos) << name << " in " << text;
  }
  EXPECT_NE(text.find("another tenant"), std::string::npos) << text;
  EXPECT_EQ(answer["question"]["name"], "*");
}

}  // namespace
}  // namespace purser::diagnose_live
