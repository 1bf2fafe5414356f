#include "ledger/wallet_book.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace purser::ledger {
namespace {

Money m(const char* s) { return *Money::parse(s); }

WalletSpec wallet(const std::string& id, const char* limit, bool hard = true) {
  WalletSpec w;
  w.id = id;
  w.tenant_id = "t1";
  w.scope = {ScopeKind::kTenant, "t1"};
  w.limit = m(limit);
  w.hard = hard;
  return w;
}

class WalletBookTest : public ::testing::Test {
 protected:
  ManualClock clock;
  WalletBook book{clock};
};

TEST_F(WalletBookTest, ReserveThenSettleChargesTheActualCostAndReleasesTheRest) {
  ASSERT_TRUE(book.put(wallet("w", "10.00")));
  ASSERT_TRUE(book.reserve({"e1", {"w"}, m("4.00")}));
  auto s = book.status("w");
  EXPECT_EQ(s->reserved, m("4.00"));
  EXPECT_EQ(s->remaining, m("6.00"));
  auto settled = book.settle("e1", m("1.50"));
  ASSERT_TRUE(settled.has_value());
  EXPECT_FALSE(settled->duplicate);
  s = book.status("w");
  EXPECT_EQ(s->spent, m("1.50"));
  EXPECT_EQ(s->reserved, m("0"));
  EXPECT_EQ(s->remaining, m("8.50"));
  EXPECT_EQ(s->used_basis_points, 1500);
}

TEST_F(WalletBookTest, SettlementIsIdempotentByEventId) {
  ASSERT_TRUE(book.put(wallet("w", "10.00")));
  ASSERT_TRUE(book.reserve({"e1", {"w"}, m("4.00")}));
  ASSERT_TRUE(book.settle("e1", m("2.00")));
  auto again = book.settle("e1", m("3.00"));
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(again->charged, m("2.00"));
  EXPECT_EQ(book.status("w")->spent, m("2.00"));
  auto reuse = book.reserve({"e1", {"w"}, m("1.00")});
  ASSERT_FALSE(reuse.has_value());
  EXPECT_EQ(reuse.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(book.settle("never", m("1")).error().code, ErrorCode::kNotFound);
}

TEST_F(WalletBookTest, AReservationIsAllOrNothingAcrossTheChain) {
  ASSERT_TRUE(book.put(wallet("tenant", "100.00")));
  ASSERT_TRUE(book.put(wallet("team", "10.00")));
  ASSERT_TRUE(book.put(wallet("user", "50.00")));
  ASSERT_TRUE(book.reserve({"a", {"tenant", "team", "user"}, m("8.00")}));
  auto refused = book.reserve({"b", {"tenant", "team", "user"}, m("3.00")});
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(refused.error().message.find("wallet team has 2.00 left of 10.00"), std::string::npos)
      << refused.error().message;
  // Nothing of the refused reservation stuck anywhere.
  EXPECT_EQ(book.status("tenant")->reserved, m("8.00"));
  EXPECT_EQ(book.status("user")->reserved, m("8.00"));
  EXPECT_EQ(book.reserve({"c", {"tenant", "nope"}, m("1")}).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(book.status("tenant")->reserved, m("8.00"));
}

TEST_F(WalletBookTest, SoftWalletsNeverBlockButStillAlert) {
  WalletSpec soft = wallet("soft", "1.00", /*hard=*/false);
  soft.alert_at = {50, 100};
  ASSERT_TRUE(book.put(soft));
  ASSERT_TRUE(book.reserve({"a", {"soft"}, m("5.00")}));
  auto s = book.settle("a", m("3.00"));
  ASSERT_TRUE(s.has_value());
  ASSERT_EQ(s->alerts.size(), 2u);
  EXPECT_EQ(s->alerts[0].threshold, 50);
  EXPECT_EQ(s->alerts[1].threshold, 100);
  EXPECT_EQ(book.status("soft")->used_basis_points, 30000);
}

TEST_F(WalletBookTest, EachThresholdFiresOncePerWindow) {
  WalletSpec w = wallet("w", "10.00");
  w.alert_at = {50, 80, 100};
  w.period = Period::kDaily;
  ASSERT_TRUE(book.put(w));
  std::vector<int> fired;
  const auto spend = [&](const std::string& id, const char* amount) {
    ASSERT_TRUE(book.reserve({id, {"w"}, m(amount)}));
    auto s = book.settle(id, m(amount));
    ASSERT_TRUE(s.has_value());
    for (const auto& a : s->alerts) fired.push_back(a.threshold);
  };
  spend("a", "4.99");
  EXPECT_TRUE(fired.empty());
  spend("b", "0.01");  // exactly 50 %
  EXPECT_EQ(fired, std::vector<int>{50});
  spend("c", "1.00");
  EXPECT_EQ(fired, std::vector<int>{50});
  spend("d", "4.00");  // 100 %: crosses 80 and 100 at once
  EXPECT_EQ(fired, (std::vector<int>{50, 80, 100}));
  EXPECT_FALSE(book.reserve({"e", {"w"}, m("0.01")}).has_value()) << "a hard wallet at its limit";
  // The next day spending starts again and the thresholds re-arm.
  clock.advance(std::chrono::hours(24));
  fired.clear();
  spend("f", "6.00");
  EXPECT_EQ(fired, std::vector<int>{50});
  EXPECT_EQ(book.status("w")->spent, m("6.00"));
}

TEST_F(WalletBookTest, HoldsCarryOverIntoANewWindow) {
  WalletSpec w = wallet("w", "10.00");
  w.period = Period::kDaily;
  ASSERT_TRUE(book.put(w));
  ASSERT_TRUE(book.reserve({"old", {"w"}, m("3.00")}));
  clock.advance(std::chrono::hours(24));
  auto s = book.status("w");
  EXPECT_EQ(s->spent, m("0"));
  EXPECT_EQ(s->reserved, m("3.00"));
  ASSERT_TRUE(book.settle("old", m("2.00")));
  EXPECT_EQ(book.status("w")->spent, m("2.00"));
  EXPECT_EQ(book.status("w")->reserved, m("0"));
}

TEST_F(WalletBookTest, AnAbandonedReservationIsReleasedWhenItsLeaseExpires) {
  ASSERT_TRUE(book.put(wallet("w", "10.00")));
  ASSERT_TRUE(book.reserve({"dropped", {"w"}, m("9.00"), std::chrono::seconds(30)}));
  ASSERT_TRUE(book.reserve({"alive", {"w"}, m("1.00"), std::chrono::minutes(5)}));
  EXPECT_FALSE(book.reserve({"blocked", {"w"}, m("1.00")}).has_value())
      << "the abandoned hold blocks others until it expires";
  clock.advance(std::chrono::seconds(29));
  EXPECT_TRUE(book.expireLeases().empty());
  clock.advance(std::chrono::seconds(1));
  EXPECT_EQ(book.expireLeases(), std::vector<std::string>{"dropped"});
  EXPECT_EQ(book.status("w")->reserved, m("1.00"));
  EXPECT_EQ(book.outstanding(), 1u);
  EXPECT_TRUE(book.reserve({"now-fits", {"w"}, m("8.00")}));
  // A settlement that arrives after its lease expired is still charged: usage is never lost.
  auto late = book.settle("dropped", m("0.50"));
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(book.status("w")->spent, m("0.50"));
}

TEST_F(WalletBookTest, NoChargeTakesAHardWalletPastItsLimit) {
  // Found by a hostile tenant: $250 settled on a $1.00 reservation, usage charged after a lease
  // expired, and recovered charges all went past hard limits.
  ASSERT_TRUE(book.put(wallet("w", "1.00")));
  ASSERT_TRUE(book.put(wallet("soft", "1.00", /*hard=*/false)));
  ASSERT_TRUE(book.reserve({"e1", {"w", "soft"}, m("1.00")}));
  auto s = book.settle("e1", m("250.00"));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->charged, m("1.00")) << "at most what was reserved";
  EXPECT_EQ(s->overage, m("249.00")) << "the rest is reported, not dropped";
  EXPECT_EQ(book.status("w")->spent, m("1.00"));
  EXPECT_EQ(book.status("soft")->spent, m("1.00")) << "one charged amount per event";
  // Usage known only afterwards fits the room that is left (none).
  auto c = book.charge("e2", {"w"}, m("0.50"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->charged, m("0"));
  EXPECT_EQ(c->overage, m("0.50"));
  EXPECT_EQ(book.status("w")->spent, m("1.00"));
  // A limit lowered under a hold: the settlement fits what the wallet has now.
  ASSERT_TRUE(book.put(wallet("w2", "10.00")));
  ASSERT_TRUE(book.reserve({"e3", {"w2"}, m("5.00")}));
  ASSERT_TRUE(book.put(wallet("w2", "2.00")));
  auto lowered = book.settle("e3", m("4.00"));
  ASSERT_TRUE(lowered.has_value());
  EXPECT_EQ(lowered->charged, m("2.00"));
  EXPECT_EQ(lowered->overage, m("2.00"));
  EXPECT_EQ(book.status("w2")->spent, m("2.00"));
  EXPECT_EQ(book.status("w2")->reserved, m("0"));
}

TEST_F(WalletBookTest, ALateSettlementFitsTheRoomLeftAfterItsLeaseEnded) {
  ASSERT_TRUE(book.put(wallet("w", "1.00")));
  ASSERT_TRUE(book.reserve({"late", {"w"}, m("1.00"), std::chrono::seconds(10)}));
  clock.advance(std::chrono::seconds(11));
  EXPECT_EQ(book.expireLeases(), std::vector<std::string>{"late"});
  ASSERT_TRUE(book.reserve({"other", {"w"}, m("0.80")}));
  ASSERT_TRUE(book.settle("other", m("0.80")));
  auto s = book.settle("late", m("1.20"));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->charged, m("0.20"));
  EXPECT_EQ(s->overage, m("1.00"));
  EXPECT_EQ(book.status("w")->spent, m("1.00"));
}

TEST_F(WalletBookTest, ReleaseDropsAHoldWithoutCharging) {
  ASSERT_TRUE(book.put(wallet("w", "10.00")));
  ASSERT_TRUE(book.reserve({"e", {"w"}, m("4.00")}));
  ASSERT_TRUE(book.release("e"));
  EXPECT_EQ(book.status("w")->reserved, m("0"));
  EXPECT_EQ(book.status("w")->spent, m("0"));
  EXPECT_EQ(book.release("e").error().code, ErrorCode::kNotFound);
}

TEST_F(WalletBookTest, ValidatesSpecs) {
  WalletSpec bad = wallet("w", "-5");
  EXPECT_EQ(book.put(bad).error().field, "limit");
  WalletSpec thresholds = wallet("w", "5");
  thresholds.alert_at = {80, 50};
  EXPECT_EQ(book.put(thresholds).error().field, "alert_at");
  thresholds.alert_at = {0};
  EXPECT_EQ(book.put(thresholds).error().field, "alert_at");
  EXPECT_FALSE(book.status("w").has_value()) << "nothing was added";
}

// Hundreds of concurrent reservations against one hard wallet: the total never exceeds the
// limit, and exactly as many are admitted as can fit.
TEST_F(WalletBookTest, ConcurrentReservationsNeverOverspendAndAdmitTheMaximum) {
  ASSERT_TRUE(book.put(wallet("w", "100.00")));
  ASSERT_TRUE(book.put(wallet("tenant", "1000.00")));
  constexpr int kThreads = 8;
  constexpr int kPerThread = 100;
  const Money each = m("0.37");  // 100 / 0.37 = 270.27...: 270 fit
  std::atomic<int> admitted{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string id = std::to_string(t) + "-" + std::to_string(i);
        if (book.reserve({id, {"tenant", "w"}, each})) {
          ++admitted;
        } else {
          ++refused;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(admitted.load(), 270);
  EXPECT_EQ(refused.load(), kThreads * kPerThread - 270);
  EXPECT_LE(book.status("w")->reserved, m("100.00"));

  // Settle them all concurrently at their full reservation, while more requests race in.
  threads.clear();
  std::atomic<int> late_admitted{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        (void)book.settle(std::to_string(t) + "-" + std::to_string(i), each);
        const std::string extra = "x" + std::to_string(t) + "-" + std::to_string(i);
        if (book.reserve({extra, {"tenant", "w"}, each})) {
          ++late_admitted;
          (void)book.settle(extra, each);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto s = book.status("w");
  EXPECT_EQ(late_admitted.load(), 0) << "the wallet was already as full as it can be";
  EXPECT_EQ(s->spent, m("99.90"));  // 270 x 0.37
  EXPECT_EQ(s->reserved, m("0"));
  EXPECT_LE(s->spent, s->spec.limit);
}

TEST_F(WalletBookTest, ConcurrentMixedCostsNeverOverspend) {
  ASSERT_TRUE(book.put(wallet("w", "50.00")));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 400; ++i) {
        const std::string id = std::to_string(t) + "-" + std::to_string(i);
        const Money worst = Money::fromNanos((1 + (i * 7 + t) % 13) * 100'000'000);  // 0.1..1.3
        if (book.reserve({id, {"w"}, worst})) {
          // The actual cost is at most the worst case.
          (void)book.settle(id, Money::fromNanos(worst.nanos() * ((i % 4) + 1) / 4));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(book.status("w")->spent, m("50.00"));
  EXPECT_EQ(book.status("w")->reserved, m("0"));
}

}  // namespace
}  // namespace purser::ledger

namespace purser::ledger {
namespace {

// A daily wallet in Berlin resets at Berlin midnight: 23:00 UTC in winter, 22:00 UTC in summer,
// and the day clocks spring forward is 23 hours long.
TEST(WalletPeriodTest, ADailyBerlinWalletResetsAtLocalMidnightAcrossDaylightSaving) {
  // 2026-03-28 22:30 UTC = 23:30 Berlin (UTC+1), the day before the change.
  ManualClock clock(SystemTime(std::chrono::sys_days(std::chrono::year(2026) / 3 / 28)) +
                    std::chrono::hours(22) + std::chrono::minutes(30));
  WalletBook book(clock);
  WalletSpec w = wallet("w", "10.00");
  w.period = Period::kDaily;
  w.zone = *TimeZone::find("Europe/Berlin");
  ASSERT_TRUE(book.put(w));
  const auto spend = [&](const std::string& id, const char* amount) {
    ASSERT_TRUE(book.reserve({id, {"w"}, m(amount)}));
    ASSERT_TRUE(book.settle(id, m(amount)));
  };
  spend("a", "9.00");
  clock.advance(std::chrono::minutes(29));  // 23:59 Berlin: still the 28th
  EXPECT_EQ(book.status("w")->spent, m("9.00"));
  EXPECT_FALSE(book.reserve({"b", {"w"}, m("2.00")}).has_value());
  clock.advance(std::chrono::minutes(1));  // 00:00 Berlin on the 29th = 23:00 UTC
  EXPECT_EQ(book.status("w")->spent, m("0"));
  EXPECT_EQ(formatRfc3339(book.status("w")->window.start), "2026-03-28T23:00:00.000Z");
  // The 29th has 23 hours: the next reset is at 22:00 UTC, not 23:00.
  EXPECT_EQ(formatRfc3339(book.status("w")->window.end), "2026-03-29T22:00:00.000Z");
  spend("c", "8.00");
  clock.advance(std::chrono::hours(22) + std::chrono::minutes(59));  // 21:59 UTC, 23:59 Berlin
  EXPECT_EQ(book.status("w")->spent, m("8.00"));
  clock.advance(std::chrono::minutes(1));  // 22:00 UTC = 00:00 Berlin summer time
  EXPECT_EQ(book.status("w")->spent, m("0"));
  EXPECT_EQ(formatRfc3339(book.status("w")->window.start), "2026-03-29T22:00:00.000Z");
}

// A monthly wallet in New York resets on the 1st at New York midnight.
TEST(WalletPeriodTest, AMonthlyNewYorkWalletResetsOnTheFirst) {
  ManualClock clock(SystemTime(std::chrono::sys_days(std::chrono::year(2026) / 4 / 1)) +
                    std::chrono::hours(3));  // 23:00 on March 31st in New York (UTC-4)
  WalletBook book(clock);
  WalletSpec w = wallet("w", "10.00");
  w.period = Period::kMonthly;
  w.zone = *TimeZone::find("America/New_York");
  ASSERT_TRUE(book.put(w));
  ASSERT_TRUE(book.reserve({"a", {"w"}, m("7.00")}));
  ASSERT_TRUE(book.settle("a", m("7.00")));
  clock.advance(std::chrono::minutes(59));
  EXPECT_EQ(book.status("w")->spent, m("7.00"));
  clock.advance(std::chrono::minutes(1));  // 04:00 UTC = April 1st 00:00 in New York
  EXPECT_EQ(book.status("w")->spent, m("0"));
  EXPECT_EQ(formatRfc3339(book.status("w")->window.end), "2026-05-01T04:00:00.000Z");
}

}  // namespace
}  // namespace purser::ledger
