// Shared rate limits: several replicas' limiters (each a RateLimiter sharing its buckets through
// its own RateLeases) admit together exactly what one limiter would, against SQLite (one store in
// process) and PostgreSQL (a private server; each replica its own connections).
#include "ledger/rate_leases.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "backend_test.h"
#include "fakes/postgres.h"
#include "fakes/temp_dir.h"
#include "ledger/ledger_store.h"
#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace purser::ledger {
namespace {

class RateLeasesTest : public BackendTest {
 protected:
  struct Replica {
    std::unique_ptr<store::Store> own_store;
    std::unique_ptr<RateLeases> leases;
    std::unique_ptr<RateLimiter> limiter;
  };

  void TearDown() override {
    for (auto& r : replicas) {
      if (r->own_store) r->own_store->close();
    }
    if (shared) shared->close();
  }

  Replica& start() {
    auto r = std::make_unique<Replica>();
    store::Store* s = shared.get();
    if (GetParam() == store::Dialect::kPostgres) {
      r->own_store = openStore();
      s = r->own_store.get();
    }
    r->leases = std::make_unique<RateLeases>(*s, clock);
    r->limiter = std::make_unique<RateLimiter>(clock);
    r->limiter->share(r->leases.get());
    replicas.push_back(std::move(r));
    return *replicas.back();
  }

  // Every replica's threads try `tries` times each; the number admitted.
  int burst(const BucketRequest& bucket, int tries) {
    std::atomic<int> admitted{0};
    std::vector<std::thread> threads;
    for (auto& r : replicas) {
      for (int t = 0; t < 2; ++t) {
        threads.emplace_back([&, limiter = r->limiter.get()] {
          for (int i = 0; i < tries; ++i) {
            if (limiter->acquire(bucket).allowed) ++admitted;
          }
        });
      }
    }
    for (auto& t : threads) t.join();
    return admitted;
  }

  std::vector<std::unique_ptr<Replica>> replicas;
};

TEST_P(RateLeasesTest, FourReplicasAdmitExactlyWhatOneLimiterWould) {
  for (int i = 0; i < 4; ++i) start();
  const BucketRequest rpm{"limit:l1:rpm", 100, 1};
  // A full bucket: exactly 100 at once, however the tries are spread.
  EXPECT_EQ(burst(rpm, 40), 100);
  // Half a minute refills exactly half.
  clock.advance(std::chrono::seconds(30));
  for (auto& r : replicas) ASSERT_TRUE(r->leases->tick().has_value());
  EXPECT_EQ(burst(rpm, 40), 50);
  // One limiter alone, the same steps: the same counts.
  RateLimiter alone(clock);
  int once = 0;
  for (int i = 0; i < 320; ++i) once += alone.acquire({"x", 100, 1}).allowed ? 1 : 0;
  EXPECT_EQ(once, 100);
}

TEST_P(RateLeasesTest, ABucketTheStoreRefusedIsRefusedLocallyUntilItCouldAdmit) {
  Replica& a = start();
  const BucketRequest rpm{"limit:l2:rpm", 6, 1};
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(a.limiter->acquire(rpm).allowed);
  const RateDecision refused = a.limiter->acquire(rpm);
  ASSERT_FALSE(refused.allowed);
  EXPECT_EQ(refused.key, "limit:l2:rpm");
  EXPECT_EQ(refused.retry_after, std::chrono::seconds(10));
  const uint64_t takes = a.leases->counters().takes;
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(a.limiter->acquire(rpm).allowed);
  EXPECT_EQ(a.leases->counters().takes, takes) << "a hammered, spent limit costs no round trips";
  clock.advance(std::chrono::seconds(10));
  EXPECT_TRUE(a.limiter->acquire(rpm).allowed);
  EXPECT_FALSE(a.limiter->acquire(rpm).allowed);
}

TEST_P(RateLeasesTest, BusyBucketsArePrefetchedAndIdleUnitsGoBack) {
  Replica& a = start();
  Replica& b = start();
  const BucketRequest rpm{"limit:l3:rpm", 60'000, 1};
  int admitted = 0;
  // A busy replica: its use over the ticks makes it take ahead of need.
  for (int i = 0; i < 2000; ++i) {
    admitted += a.limiter->acquire(rpm).allowed ? 1 : 0;
    if (i % 100 == 99) ASSERT_TRUE(a.leases->tick().has_value());
  }
  EXPECT_EQ(admitted, 2000);
  EXPECT_LT(a.leases->counters().takes, 2000u / 10) << "at most one round trip per 10 requests";
  // a goes idle holding units; they go back, and the two together still admit exactly the limit.
  clock.advance(std::chrono::milliseconds(1500));
  const int64_t refilled = 1500;  // 60,000 a minute is one a millisecond, and the bucket was not
                                  // full: 2,000 were taken
  ASSERT_TRUE(a.leases->tick().has_value());
  int more = 0;
  for (int i = 0; i < 70'000; ++i) {
    more += b.limiter->acquire(rpm).allowed ? 1 : 0;
    if (i % 100 == 99) ASSERT_TRUE(b.leases->tick().has_value());
  }
  EXPECT_EQ(admitted + more, 60'000 + refilled);
}

TEST_P(RateLeasesTest, TokensUsedBeyondTheEstimateAreOwedToTheSharedBucket) {
  Replica& a = start();
  Replica& b = start();
  const BucketRequest tpm{"limit:l4:tpm", 1000, 400};
  ASSERT_TRUE(a.limiter->acquire(tpm).allowed);
  // The request used 900 tokens, not 400: 500 more are owed, and pushed at the next tick.
  a.limiter->adjust(tpm, 500);
  ASSERT_TRUE(a.leases->tick().has_value());
  EXPECT_FALSE(b.limiter->acquire({"limit:l4:tpm", 1000, 200}).allowed);
  EXPECT_TRUE(b.limiter->acquire({"limit:l4:tpm", 1000, 100}).allowed);
}

// An HTTP worker never waits on the store: tryAcquire() answers from the units this replica holds
// and otherwise takes nothing (nullopt), leaving the round trip to acquire() off the worker.
TEST_P(RateLeasesTest, ATryServesFromHeldUnitsOnlyAndElseTakesNothing) {
  Replica& a = start();
  const BucketRequest rpm{"limit:l5:rpm", 6, 1};
  const uint64_t takes = a.leases->counters().takes;
  EXPECT_FALSE(a.limiter->tryAcquire({&rpm, 1}).has_value()) << "nothing held: the store is asked";
  EXPECT_EQ(a.leases->counters().takes, takes) << "and no round trip was made";
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(a.limiter->acquire(rpm).allowed) << i;
  EXPECT_FALSE(a.limiter->acquire(rpm).allowed) << "the try took nothing from the bucket";
  // A bucket the store refused is refused locally, without the store: a try answers that too.
  auto refused = a.limiter->tryAcquire({&rpm, 1});
  ASSERT_TRUE(refused.has_value());
  EXPECT_FALSE(refused->allowed);
  EXPECT_EQ(refused->key, "limit:l5:rpm");
  // Without a shared store, a try is an acquire.
  RateLimiter alone(clock);
  auto local = alone.tryAcquire({&rpm, 1});
  ASSERT_TRUE(local.has_value());
  EXPECT_TRUE(local->allowed);
}

INSTANTIATE_TEST_SUITE_P(Backends, RateLeasesTest,
                         ::testing::Values(store::Dialect::kSqlite, store::Dialect::kPostgres),
                         backendName);

}  // namespace
}  // namespace purser::ledger
