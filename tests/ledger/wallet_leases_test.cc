// Wallet leases: several replicas — each its own WalletBook, Meter (with its own journal) and
// WalletLeases, as separate `purser serve` processes have — spend one hard wallet in one store,
// and together never spend past its limit. Run against SQLite (one store shared in process) and
// PostgreSQL (a private server; each replica its own connections, as across processes).
#include "ledger/wallet_leases.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "backend_test.h"
#include "fakes/postgres.h"
#include "fakes/temp_dir.h"
#include "ledger/ledger_store.h"
#include "ledger/meter.h"
#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace purser::ledger {
namespace {

constexpr int64_t kCent = 10'000'000;  // nanos

class WalletLeasesTest : public BackendTest {
 protected:
  struct Replica {
    std::string name;
    std::string journal;
    store::Store* store = nullptr;
    std::unique_ptr<store::Store> own_store;  // PostgreSQL: each replica its own connections
    std::unique_ptr<WalletBook> book;
    std::unique_ptr<Meter> meter;
    std::unique_ptr<WalletLeases> leases;
  };

  void TearDown() override {
    for (auto& r : replicas) stop(*r);
    if (shared) shared->close();
  }

  // Starts (or restarts) replica `name` as `purser serve` does: replay, wallets, adopt.
  Replica& start(const std::string& name, WalletLeaseOptions options = {}) {
    auto r = std::make_unique<Replica>();
    r->name = name;
    r->journal = dir.file("journal-" + name);
    if (GetParam() == store::Dialect::kPostgres) {
      r->own_store = openStore();
      r->store = r->own_store.get();
    } else {
      r->store = shared.get();
    }
    r->book = std::make_unique<WalletBook>(clock);
    r->book->enableLeases();
    auto m = Meter::open(*r->store, *r->book, clock, nullptr, {.dir = r->journal}, name);
    EXPECT_TRUE(m.has_value()) << m.error().toString();
    r->meter = std::move(*m);
    auto specs = loadWallets(*r->store);
    EXPECT_TRUE(specs.has_value());
    for (auto& w : *specs) {
      Money spent;
      EXPECT_TRUE(r->store
                      ->read([&](store::Tx& tx) -> Result<void> {
                        spent = PURSER_TRY_VALUE(spentSince(tx, w.id, SystemTime::min()));
                        return {};
                      })
                      .has_value());
      EXPECT_TRUE(r->book->put(w, spent).has_value());
    }
    options.replica = name;
    r->leases = std::make_unique<WalletLeases>(*r->store, *r->book, clock, options);
    auto adopted = r->leases->adopt();
    EXPECT_TRUE(adopted.has_value()) << adopted.error().toString();
    r->meter->setLeaseSource(r->leases.get());
    replicas.push_back(std::move(r));
    return *replicas.back();
  }

  void stop(Replica& r) {
    if (!r.meter) return;
    r.meter->close();
    (void)r.leases->giveBackAll();
    r.leases.reset();
    r.meter.reset();
    if (r.own_store) r.own_store->close();
  }
  // As kill -9: nothing shipped or given back that was not already.
  void kill(Replica& r) {
    r.meter->abandon();
    r.leases.reset();
    r.meter.reset();
    if (r.own_store) r.own_store->close();
  }

  void addWallet(const std::string& id, int64_t limit_nanos) {
    WalletSpec w;
    w.id = id;
    w.tenant_id = "t";
    w.scope = {ScopeKind::kTenant, "t"};
    w.limit = Money::fromNanos(limit_nanos);
    ASSERT_TRUE(shared
                    ->write([&](store::Tx& tx) -> Result<void> {
                      return insertWallet(tx, w, "2026-12-01T00:00:00Z");
                    })
                    .has_value());
  }

  static UsageEvent draft(const std::string& id) {
    UsageEvent e;
    e.id = id;
    e.tenant_id = "t";
    e.route = "chat";
    return e;
  }

  // One request: hold `amount`, settle at `cost`. False when refused.
  static bool request(Replica& r, const std::string& id, int64_t amount, int64_t cost) {
    auto held = r.meter->reserve(draft(id), {"w"}, Money::fromNanos(amount),
                                 std::chrono::minutes(1), {.fresh_id = true});
    if (!held) return false;
    UsageEvent e = draft(id);
    e.cost = Money::fromNanos(cost);
    auto settled = r.meter->settle(e);
    EXPECT_TRUE(settled.has_value()) << settled.error().toString();
    return true;
  }

  // The store's account of wallet "w": spent, and leases (granted - used) still outstanding.
  struct Account {
    int64_t spent = 0;
    int64_t events = 0;
    int64_t overage = 0;
    int64_t leased = 0;
    int64_t over_used = 0;  // sum of used beyond granted (a lease charged past its grant)
  };
  Account account() {
    Account a;
    EXPECT_TRUE(shared
                    ->read([&](store::Tx& tx) -> Result<void> {
                      auto rows = PURSER_TRY_VALUE(
                          tx.query("SELECT (SELECT COALESCE(SUM(cost_nanos), 0) FROM wallet_spend),"
                                   " (SELECT COUNT(*) FROM usage_events),"
                                   " (SELECT COALESCE(SUM(overage_nanos), 0) FROM usage_events),"
                                   " (SELECT COALESCE(SUM(granted_nanos - used_nanos), 0) FROM"
                                   "  wallet_leases WHERE granted_nanos > used_nanos),"
                                   " (SELECT COALESCE(SUM(used_nanos - granted_nanos), 0) FROM"
                                   "  wallet_leases WHERE used_nanos > granted_nanos)"));
                      a = {rows[0].getInt(0), rows[0].getInt(1), rows[0].getInt(2),
                           rows[0].getInt(3), rows[0].getInt(4)};
                      return {};
                    })
                    .has_value());
    return a;
  }

  std::vector<std::unique_ptr<Replica>> replicas;
};

TEST_P(WalletLeasesTest, ReplicasTogetherNeverSpendPastAHardWalletAndAdmitWhatOneWould) {
  // $2.00 at $0.01 a request: one replica admits exactly 200.
  addWallet("w", 200 * kCent);
  WalletLeaseOptions options;
  options.wanted_every = Duration::zero();
  constexpr int kReplicas = 4;
  for (int i = 0; i < kReplicas; ++i) start("r" + std::to_string(i), options);
  std::atomic<int> admitted{0};
  // Each replica's lease loop, as `purser serve` runs it (every 50 ms there; here as often as it
  // can, so that the test does not wait).
  std::atomic<bool> done{false};
  std::vector<std::thread> loops;
  for (int i = 0; i < kReplicas; ++i) {
    loops.emplace_back([&, i] {
      while (!done) {
        (void)replicas[i]->leases->tick();
        std::this_thread::yield();
      }
    });
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kReplicas; ++i) {
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, i, t] {
        Replica& r = *replicas[i];
        int refused_in_a_row = 0;
        // Bounded by work: at most 400 tries per thread; a replica refused keeps trying while
        // the others give back what they do not need.
        for (int n = 0; n < 400 && refused_in_a_row < 60; ++n) {
          const std::string id = fmt::format("{}-{}-{}", r.name, t, n);
          if (request(r, id, kCent, kCent)) {
            ++admitted;
            refused_in_a_row = 0;
          } else {
            ++refused_in_a_row;
          }
          auto ticked = r.leases->tick();
          ASSERT_TRUE(ticked.has_value()) << ticked.error().toString();
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  done = true;
  for (auto& t : loops) t.join();
  for (auto& r : replicas) {
    ASSERT_TRUE(r->meter->catchUp().has_value());
    EXPECT_TRUE(r->book->status("w")->reserved.isZero()) << r->name;
  }
  const Account a = account();
  EXPECT_LE(a.spent, 200 * kCent);
  EXPECT_EQ(a.spent, int64_t{admitted} * kCent);
  EXPECT_EQ(a.events, admitted);
  EXPECT_EQ(a.overage, 0);
  EXPECT_EQ(a.over_used, 0);
  // At least 99% of what one replica admits.
  EXPECT_GE(admitted, 198) << "admitted " << admitted;
  // Every replica gives its free part back at shutdown: nothing stays leased.
  for (auto& r : replicas) stop(*r);
  EXPECT_EQ(account().leased, 0);
}

TEST_P(WalletLeasesTest, ChargesShipIntoTheLeaseTheyWereMadeUnder) {
  addWallet("w", 100 * kCent);
  Replica& a = start("a");
  ASSERT_TRUE(request(a, "e1", 10 * kCent, 7 * kCent));
  ASSERT_TRUE(a.meter->catchUp().has_value());
  const Account before = account();
  EXPECT_EQ(before.spent, 7 * kCent);
  // The lease's used part is the charge; its free part what the top-up granted beyond it.
  auto s = a.book->leaseState("w");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->charged.nanos(), 7 * kCent);
  EXPECT_EQ(before.leased, s->granted.nanos() - 7 * kCent);
  // Another replica sees only what is neither spent nor leased.
  Replica& b = start("b");
  ASSERT_FALSE(request(b, "e2", 100 * kCent, 0)) << "b was granted a's lease";
  ASSERT_TRUE(request(b, "e3", 93 * kCent - before.leased, 0));
}

// A reservation made where it may not wait on the store (an HTTP worker) never extends the lease
// itself: beyond what the replica holds it takes nothing and answers kAborted, and the same
// reservation made where it may wait extends the lease and is held.
TEST_P(WalletLeasesTest, AReservationThatMayNotWaitLeavesTheLeaseToOneThatMay) {
  addWallet("w", 100 * kCent);
  Replica& a = start("a");
  const uint64_t top_ups = a.leases->counters().top_ups;
  auto now = a.meter->reserve(draft("e1"), {"w"}, Money::fromNanos(30 * kCent),
                              std::chrono::minutes(1), {.fresh_id = true, .may_wait = false});
  ASSERT_FALSE(now.has_value());
  EXPECT_EQ(now.error().code, ErrorCode::kAborted);
  EXPECT_EQ(a.leases->counters().top_ups, top_ups) << "no round trip was made";
  EXPECT_EQ(a.book->outstanding(), 0u);
  auto waited = a.meter->reserve(draft("e1"), {"w"}, Money::fromNanos(30 * kCent),
                                 std::chrono::minutes(1), {.fresh_id = true});
  ASSERT_TRUE(waited.has_value()) << waited.error().toString();
  EXPECT_EQ(a.leases->counters().top_ups, top_ups + 1);
  // Within what the lease now holds (e1 settled at a third of its hold), no wait is needed.
  UsageEvent e = draft("e1");
  e.cost = Money::fromNanos(10 * kCent);
  ASSERT_TRUE(a.meter->settle(e).has_value());
  EXPECT_TRUE(a.meter
                  ->reserve(draft("e2"), {"w"}, Money::fromNanos(kCent), std::chrono::minutes(1),
                            {.fresh_id = true, .may_wait = false})
                  .has_value());
  // An id the store must be asked about is not asked where it may not wait.
  auto unknown = a.meter->reserve(draft("e3"), {"w"}, Money::fromNanos(kCent),
                                  std::chrono::minutes(1), {.may_wait = false});
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code, ErrorCode::kAborted);
}

TEST_P(WalletLeasesTest, AnIdleReplicaGivesItsFreePartBack) {
  addWallet("w", 100 * kCent);
  WalletLeaseOptions options;
  options.idle = std::chrono::seconds(2);
  Replica& a = start("a", options);
  ASSERT_TRUE(request(a, "e1", 30 * kCent, 10 * kCent));
  ASSERT_TRUE(a.meter->catchUp().has_value());
  ASSERT_TRUE(a.leases->tick().has_value());
  EXPECT_GT(account().leased, 0);
  clock.advance(std::chrono::seconds(3));
  ASSERT_TRUE(a.leases->tick().has_value());
  EXPECT_EQ(account().leased, 0);
  Replica& b = start("b");
  EXPECT_TRUE(request(b, "e2", 90 * kCent, 0));
}

TEST_P(WalletLeasesTest, ADeadReplicasFreePartComesBackAfterItsTtlAndNotBefore) {
  addWallet("w", 100 * kCent);
  WalletLeaseOptions options;
  options.ttl = std::chrono::seconds(30);
  Replica& a = start("a", options);
  // a takes the whole wallet (a request needs it), spends a tenth, and dies.
  ASSERT_TRUE(request(a, "e1", 100 * kCent, 10 * kCent));
  ASSERT_TRUE(a.meter->catchUp().has_value());
  kill(a);
  Replica& b = start("b", options);
  // a's free part is still leased to it: b may not have it yet.
  EXPECT_FALSE(request(b, "e2", 90 * kCent, 0));
  clock.advance(std::chrono::seconds(31));
  EXPECT_TRUE(request(b, "e3", 90 * kCent, 90 * kCent));
  ASSERT_TRUE(b.meter->catchUp().has_value());
  EXPECT_EQ(account().spent, 100 * kCent);
}

TEST_P(WalletLeasesTest, ALeaseNotRenewedInTimeAdmitsNothingNewButSettlesWhatItHolds) {
  addWallet("w", 100 * kCent);
  WalletLeaseOptions options;
  options.ttl = std::chrono::seconds(20);
  Replica& a = start("a", options);
  ASSERT_TRUE(request(a, "e1", 10 * kCent, 5 * kCent));
  auto held = a.meter->reserve(draft("e2"), {"w"}, Money::fromNanos(5 * kCent),
                               std::chrono::minutes(5), {.fresh_id = true});
  ASSERT_TRUE(held.has_value());
  // 3/4 of the ttl without a renewal: nothing new is admitted from the lease as it stands...
  clock.advance(std::chrono::seconds(16));
  EXPECT_FALSE(a.book->reserve({"e3", {"w"}, Money::fromNanos(kCent)}).has_value());
  // ...while what it holds still settles within it.
  UsageEvent e = draft("e2");
  e.cost = Money::fromNanos(5 * kCent);
  auto settled = a.meter->settle(e);
  ASSERT_TRUE(settled.has_value());
  EXPECT_EQ(settled->charged.nanos(), 5 * kCent);
  // A renewal (the next tick, or a top-up) makes it usable again.
  ASSERT_TRUE(a.leases->tick().has_value());
  EXPECT_TRUE(request(a, "e4", kCent, kCent));
}

TEST_P(WalletLeasesTest, ARestartedReplicaAdoptsItsLeaseAndRecoversOnlyItsOwnIntents) {
  addWallet("w", 100 * kCent);
  Replica& a = start("a");
  Replica& b = start("b");
  // Work in flight on both when a dies: a's intent is a's to recover, not b's.
  ASSERT_TRUE(a.meter
                  ->reserve(draft("a-cut"), {"w"}, Money::fromNanos(20 * kCent),
                            std::chrono::minutes(5), {.fresh_id = true})
                  .has_value());
  ASSERT_TRUE(a.meter->catchUp().has_value());
  kill(a);
  auto b_recovery = b.meter->recover();
  ASSERT_TRUE(b_recovery.has_value());
  EXPECT_EQ(b_recovery->charged, 0);
  Replica& again = start("a");
  auto recovery = again.meter->recover();
  ASSERT_TRUE(recovery.has_value()) << recovery.error().toString();
  EXPECT_EQ(recovery->charged, 1);
  ASSERT_TRUE(again.meter->catchUp().has_value());
  const Account acc = account();
  // Charged at the reserved worst case, within the lease it adopted: nothing over.
  EXPECT_EQ(acc.spent, 20 * kCent);
  EXPECT_EQ(acc.overage, 0);
  EXPECT_EQ(acc.over_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, WalletLeasesTest,
                         ::testing::Values(store::Dialect::kSqlite, store::Dialect::kPostgres),
                         backendName);

}  // namespace
}  // namespace purser::ledger
