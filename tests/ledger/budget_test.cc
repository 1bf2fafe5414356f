// The one owner of the money path: holds take the rate limits and the budget together or not at
// all, settle or give themselves back, and never leave a phantom hold.
#include "ledger/budget.h"

#include <gtest/gtest.h>

#include <optional>
#include <span>

#include "fakes/temp_dir.h"
#include "ledger/ledger_store.h"
#include "store/sqlite_store.h"

namespace purser::ledger {
namespace {

class BudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open({.path = dir.file("b.db")}, clock);
    ASSERT_TRUE(s.has_value());
    store = std::move(*s);
    auto m = Meter::open(*store, book, clock, nullptr, {.dir = dir.file("journal")});
    ASSERT_TRUE(m.has_value());
    meter = std::move(*m);
    for (auto [id, scope, limit] : {std::tuple{"w-tenant", Scope{ScopeKind::kTenant, "t"}, 10},
                                    {"w-team", Scope{ScopeKind::kTeam, "team"}, 10},
                                    {"w-user", Scope{ScopeKind::kUser, "u"}, 2}}) {
      WalletSpec w;
      w.id = id;
      w.tenant_id = "t";
      w.scope = scope;
      w.limit = *Money::fromUnits(limit);
      ASSERT_TRUE(book.put(w).has_value());
    }
    payer.charged = {"t", "team", "u", "", {"k"}};
    payer.keys = {{"k", 100, 1000}};
  }
  void TearDown() override {
    meter->close();
    store->close();
  }

  HoldRequest request(const std::string& id, int64_t units, int64_t tokens = 100) {
    HoldRequest r;
    r.payer = payer;
    r.model = "chat";
    r.draft.id = id;
    r.draft.tenant_id = "t";
    r.amount = *Money::fromUnits(units);
    r.tokens = tokens;
    return r;
  }
  Money reserved(const std::string& wallet) { return book.status(wallet)->reserved; }
  Money spent(const std::string& wallet) { return book.status(wallet)->spent; }

  testing::TempDir dir;
  ManualClock clock;
  std::unique_ptr<store::SqliteStore> store;
  WalletBook book{clock};
  std::unique_ptr<Meter> meter;
  RateLimiter limiter{clock};
  RateLimitBook limits;
  Payer payer;
};

TEST_F(BudgetTest, AHoldReservesOnTheWholeChainAndSettlesOnce) {
  Budget b(book, *meter, limiter, limits);
  auto h = b.hold(request("e1", 1));
  ASSERT_TRUE(h.has_value()) << h.error().toString();
  EXPECT_EQ(h->wallets(), (std::vector<std::string>{"w-team", "w-tenant", "w-user"}));
  for (const char* w : {"w-tenant", "w-team", "w-user"})
    EXPECT_EQ(reserved(w), *Money::fromUnits(1));
  UsageEvent e;
  e.cost = Money::parse("0.40").value();
  e.tokens.output = 50;
  auto s = h->settle(e);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->charged, Money::parse("0.40").value());
  EXPECT_FALSE(h->active());
  EXPECT_FALSE(h->settle(e).has_value()) << "a hold settles once";
  for (const char* w : {"w-tenant", "w-team", "w-user"}) {
    EXPECT_EQ(reserved(w), Money::zero());
    EXPECT_EQ(spent(w), Money::parse("0.40").value());
  }
}

TEST_F(BudgetTest, ARefusalByAWalletGivesTheRateLimitsBackAndHoldsNothing) {
  Budget b(book, *meter, limiter, limits);
  payer.keys = {{"k", 1, 0}};  // one request per minute
  RateDecision rate;
  auto refused = b.hold(request("e1", 3), &rate);  // the user wallet has 2
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(rate.allowed);
  EXPECT_EQ(refused.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(refused.error().message.find("w-user"), std::string::npos);
  EXPECT_EQ(reserved("w-tenant"), Money::zero());
  // The request that did not run did not use the key's one request.
  auto ok = b.hold(request("e2", 1), &rate);
  ASSERT_TRUE(ok.has_value()) << ok.error().toString();
  auto limited = b.hold(request("e3", 1), &rate);
  ASSERT_FALSE(limited.has_value());
  EXPECT_FALSE(rate.allowed);
  EXPECT_EQ(rate.key, "key:k:rpm");
  EXPECT_FALSE(book.holds("e3")) << "refused by the rate limit before any budget was held";
}

TEST_F(BudgetTest, AHoldDroppedUnsettledGivesEverythingBack) {
  Budget b(book, *meter, limiter, limits);
  payer.keys = {{"k", 1, 0}};
  {
    auto h = b.hold(request("e1", 2));
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(reserved("w-user"), *Money::fromUnits(2));
    Hold moved = std::move(*h);
    EXPECT_FALSE(h->active());
    EXPECT_TRUE(moved.active());
  }  // dropped: an early return, an exception
  EXPECT_EQ(reserved("w-user"), Money::zero());
  EXPECT_EQ(book.outstanding(), 0u);
  EXPECT_TRUE(b.hold(request("e2", 2)).has_value()) << "the rate limit was given back too";
}

TEST_F(BudgetTest, SettlingReconcilesTheTokensPerMinuteWithWhatWasUsed) {
  Budget b(book, *meter, limiter, limits);
  payer.keys = {{"k", 0, 1000}};
  auto h = b.hold(request("e1", 1, /*tokens=*/900));
  ASSERT_TRUE(h.has_value());
  UsageEvent e;
  e.tokens.output = 100;  // 800 fewer than estimated
  ASSERT_TRUE(h->settle(e).has_value());
  auto second = b.hold(request("e2", 1, 800));  // kept: a dropped hold gives its limits back
  EXPECT_TRUE(second.has_value()) << "the unused estimate came back";
  RateDecision rate;
  EXPECT_FALSE(b.hold(request("e3", 1, 200), &rate).has_value());
  EXPECT_EQ(rate.key, "key:k:tpm");
}

TEST_F(BudgetTest, ConfiguredLimitsOnTheScopesCountToo) {
  Budget b(book, *meter, limiter, limits);
  limits.put({"l1", "t", {ScopeKind::kTeam, "team"}, "chat", 1, 0});
  auto buckets = b.rateBuckets(payer, "chat", 10);
  ASSERT_EQ(buckets.size(), 3u);  // the key's rpm and tpm, the team's rpm on chat
  EXPECT_EQ(buckets[0].key, "key:k:rpm");
  EXPECT_EQ(buckets[1].key, "key:k:tpm");
  EXPECT_TRUE(b.rateBuckets(payer, "other", 10).size() == 2u) << "the team's limit is on chat";
  auto first = b.hold(request("e1", 1));
  ASSERT_TRUE(first.has_value());
  RateDecision rate;
  EXPECT_FALSE(b.hold(request("e2", 1), &rate).has_value());
  EXPECT_EQ(rate.key, "limit:l1:rpm");
}

// Work charged after it runs (a workload's GPU time): its next stretch is held on the same chain
// and charged once it ran. No rate limit counts it, however tight; the hold is never settled, and
// the shortfall names the first hard wallet that cannot hold the next stretch.
TEST_F(BudgetTest, WorkChargedAfterItRunsIsHeldAheadAndChargedWithoutRateLimits) {
  Budget b(book, *meter, limiter, limits);
  limits.put({"l1", "t", {ScopeKind::kTeam, "team"}, "gpu-hours", 1, 1});  // 1 rpm, 1 tpm
  EXPECT_FALSE(b.shortfall(payer.charged, "gpu-hours", *Money::fromUnits(2)).has_value());
  auto short_of = b.shortfall(payer.charged, "gpu-hours", *Money::fromUnits(3));
  ASSERT_TRUE(short_of.has_value());
  EXPECT_EQ(short_of->spec.id, "w-user");
  {
    auto ahead = b.holdAhead(payer.charged, "gpu-hours", "gpu-1", *Money::fromUnits(2),
                             std::chrono::minutes(6));
    ASSERT_TRUE(ahead.has_value()) << ahead.error().toString();
    EXPECT_TRUE(ahead->ahead());
    EXPECT_EQ(reserved("w-user"), *Money::fromUnits(2));
    auto second = b.holdAhead(payer.charged, "gpu-hours", "gpu-2", *Money::fromUnits(1),
                              std::chrono::minutes(6));
    ASSERT_FALSE(second.has_value());
    EXPECT_EQ(second.error().code, ErrorCode::kResourceExhausted);
    EXPECT_EQ(reserved("w-team"), *Money::fromUnits(2)) << "all or nothing over the chain";
    UsageEvent e;
    e.cost = *Money::fromUnits(1);
    EXPECT_FALSE(ahead->settle(e).has_value()) << "what ran is charged, not settled";
    EXPECT_FALSE(ahead->active());
    EXPECT_EQ(reserved("w-user"), Money::zero());
    ASSERT_TRUE(b.holdAhead(payer.charged, "gpu-hours", "gpu-3", *Money::fromUnits(2),
                            std::chrono::minutes(6))
                    .has_value());
  }  // dropped: given back
  EXPECT_EQ(book.outstanding(), 0u);
  for (int i = 0; i < 3; ++i) {  // three charges in a minute under a limit of one request
    UsageEvent e;
    e.id = "gpu-charge-" + std::to_string(i);
    e.tenant_id = "t";
    e.model = "gpu-hours";
    e.cost = Money::parse("0.50").value();
    auto charged = b.charge(payer.charged, "gpu-hours", e);
    ASSERT_TRUE(charged.has_value()) << charged.error().toString();
    EXPECT_EQ(charged->charged, Money::parse("0.50").value());
  }
  EXPECT_EQ(spent("w-user"), Money::parse("1.50").value());
  // The hard user wallet has 0.50 left: a charge past it is recorded as overage, never spent.
  UsageEvent over;
  over.id = "gpu-charge-over";
  over.tenant_id = "t";
  over.cost = *Money::fromUnits(1);
  auto charged = b.charge(payer.charged, "gpu-hours", over);
  ASSERT_TRUE(charged.has_value());
  EXPECT_EQ(charged->overage, Money::parse("0.50").value());
  EXPECT_EQ(spent("w-user"), *Money::fromUnits(2));
}

// An HTTP worker never waits on a shared store: tryHold() takes nothing where the store must be
// asked first — a shared rate limit beyond the units held, or a budget lease to extend — and the
// hold() made afterwards (off the worker) waits for it and holds.
TEST_F(BudgetTest, ATryTakesNothingWhereTheStoreMustBeAskedAndAHoldWaitsForIt) {
  // Shared rate limits that always need the store.
  class AskTheStore final : public SharedRateLimits {
   public:
    RateDecision acquire(std::span<const BucketRequest>) override {
      ++acquired;
      return {};
    }
    std::optional<RateDecision> tryAcquire(std::span<const BucketRequest>) override {
      return std::nullopt;
    }
    void adjust(const BucketRequest&, int64_t) override { ++adjusted; }
    int acquired = 0, adjusted = 0;
  };
  {
    AskTheStore shared;
    RateLimiter shared_limiter(clock);
    shared_limiter.share(&shared);
    Budget b(book, *meter, shared_limiter, limits);
    EXPECT_FALSE(b.tryHold(request("e1", 1)).has_value());
    EXPECT_EQ(shared.acquired, 0);
    EXPECT_EQ(book.outstanding(), 0u) << "nothing held";
    auto held = b.hold(request("e1", 1));
    ASSERT_TRUE(held.has_value()) << held.error().toString();
    EXPECT_EQ(shared.acquired, 1);
    EXPECT_EQ(reserved("w-user"), *Money::fromUnits(1));
  }
  EXPECT_EQ(book.outstanding(), 0u);

  // A lease to extend: this replica's book holds none of the hard wallet yet.
  class Grants final : public LeaseSource {
   public:
    Grants(WalletBook& book, const Clock& clock) : book_(book), clock_(clock) {}
    Result<void> topUp(const std::vector<std::string>& wallet_ids, Money amount) override {
      ++top_ups;
      for (const auto& id : wallet_ids) {
        auto st = book_.leaseState(id);
        if (!st) continue;
        book_.setLease(id, windowMillis(st->window.start), st->granted.add(amount).value(),
                       clock_.monotonic() + std::chrono::hours(1), Money::zero(), Money::zero());
      }
      return {};
    }
    int top_ups = 0;

   private:
    WalletBook& book_;
    const Clock& clock_;
  };
  WalletBook leased(clock);
  leased.enableLeases();
  WalletSpec w;
  w.id = "w-leased";
  w.tenant_id = "t";
  w.scope = {ScopeKind::kUser, "u"};
  w.limit = *Money::fromUnits(5);
  ASSERT_TRUE(leased.put(w).has_value());
  auto m = Meter::open(*store, leased, clock, nullptr, {.dir = dir.file("leased-journal")});
  ASSERT_TRUE(m.has_value()) << m.error().toString();
  Grants grants(leased, clock);
  (*m)->setLeaseSource(&grants);
  payer.keys = {{"k", 1, 0}};  // one request a minute: a try that gives up must give it back
  Budget b(leased, **m, limiter, limits);
  HoldRequest r = request("e2", 2);
  r.options.fresh_id = true;
  EXPECT_FALSE(b.tryHold(r).has_value());
  EXPECT_EQ(grants.top_ups, 0);
  EXPECT_EQ(leased.outstanding(), 0u);
  RateDecision rate;
  auto held = b.hold(r, &rate);
  ASSERT_TRUE(held.has_value()) << held.error().toString() << " (" << rate.key << ")";
  EXPECT_EQ(grants.top_ups, 1);
  EXPECT_EQ(leased.status("w-leased")->reserved, *Money::fromUnits(2));
  held->release();
  (*m)->close();
}

// A run capped with x-purser-session-budget: its calls are held against the cap as well as the
// wallets, a call past it is refused before anything else is taken, later calls of the run are
// counted without repeating the cap, what a call did not spend goes back, and what the run spent
// before this process saw it (in the store) counts.
TEST_F(BudgetTest, ACappedRunStopsAtItsCap) {
  Budget b(book, *meter, limiter, limits);
  // Spent before the cap was first given: 0.30, settled and in the store.
  HoldRequest earlier = request("e0", 1);
  earlier.draft.session_id = "run-1";
  {
    auto h = b.hold(earlier);
    ASSERT_TRUE(h.has_value());
    UsageEvent e;
    e.cost = Money::parse("0.30").value();
    ASSERT_TRUE(h->settle(e).has_value());
  }
  EXPECT_FALSE(b.sessionCaps().tracked("t", "run-1"));
  HoldRequest capped = request("e1", 1);
  capped.draft.session_id = "run-1";
  capped.session_cap = Money::parse("1.50").value();
  // A try cannot read the store: it takes nothing, and the hold that may wait does.
  EXPECT_FALSE(b.tryHold(capped).has_value());
  EXPECT_EQ(reserved("w-user"), Money());
  auto first = b.hold(capped);
  ASSERT_TRUE(first.has_value()) << first.error().toString();
  EXPECT_TRUE(b.sessionCaps().tracked("t", "run-1"));
  // 0.30 spent + 1 held: another 1 would pass 1.50, whether or not the cap is repeated.
  HoldRequest again = request("e2", 1);
  again.draft.session_id = "run-1";
  auto refused = b.hold(again);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(refused.error().message.find("session \"run-1\" reached its cap of 1.50"),
            std::string::npos)
      << refused.error().message;
  EXPECT_EQ(reserved("w-user"), *Money::fromUnits(1)) << "the refused call took nothing";
  // The first call cost 0.20 of its 1: the run has spent 0.50, and a call of 1 fits.
  UsageEvent e;
  e.cost = Money::parse("0.20").value();
  ASSERT_TRUE(first->settle(e).has_value());
  auto fits = b.hold(again);
  ASSERT_TRUE(fits.has_value()) << fits.error().toString();
  fits->release();
  // Another tenant's run of the same name is another run.
  HoldRequest other = request("e3", 1);
  other.draft.tenant_id = "t2";
  other.draft.session_id = "run-1";
  other.payer.charged.tenant_id = "t2";
  EXPECT_TRUE(b.hold(other).has_value());
  // A lower cap given later is the run's.
  HoldRequest lowered = request("e4", 1);
  lowered.draft.session_id = "run-1";
  lowered.session_cap = Money::parse("1.00").value();
  EXPECT_FALSE(b.hold(lowered).has_value());
}

TEST(SessionCapsTest, TracksAtMostItsBoundForgettingIdleRunsFirst) {
  SessionCaps caps(2);
  caps.track("t", "a", Money());
  caps.track("t", "b", Money());
  auto held = caps.hold("t", "a", Money::parse("5").value(), Money::parse("1").value());
  ASSERT_TRUE(held.has_value());
  ASSERT_TRUE(caps.hold("t", "b", std::nullopt, Money()).has_value());  // b used last
  caps.track("t", "c", Money());
  EXPECT_EQ(caps.size(), 2u);
  EXPECT_TRUE(caps.tracked("t", "a")) << "a run with a call in flight is never forgotten";
  EXPECT_FALSE(caps.tracked("t", "b"));
  EXPECT_TRUE(caps.tracked("t", "c"));
  // Untracked runs hold nothing and are refused nothing.
  auto none = caps.hold("t", "zzz", std::nullopt, Money::parse("100").value());
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->isZero());
  caps.settle("t", "a", *held, Money::parse("4.5").value());
  auto past = caps.hold("t", "a", std::nullopt, Money::parse("0.6").value());
  ASSERT_FALSE(past.has_value());
  EXPECT_EQ(past.error().code, ErrorCode::kResourceExhausted);
}

}  // namespace
}  // namespace purser::ledger
