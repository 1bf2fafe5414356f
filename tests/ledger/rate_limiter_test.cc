#include "ledger/rate_limiter.h"

#include <gtest/gtest.h>

namespace purser::ledger {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RateLimiterTest, AFullBucketAdmitsExactlyItsLimitThenRefills) {
  ManualClock clock;
  RateLimiter limiter(clock);
  const BucketRequest req{"key:k:rpm", 7, 1};
  for (int i = 0; i < 7; ++i) {
    auto d = limiter.acquire(req);
    ASSERT_TRUE(d.allowed) << i;
    EXPECT_EQ(d.remaining, 6 - i);
  }
  auto refused = limiter.acquire(req);
  ASSERT_FALSE(refused.allowed);
  EXPECT_EQ(refused.key, "key:k:rpm");
  // One unit comes back every 60/7 s = 8.571428572 s (rounded up to the nanosecond).
  EXPECT_EQ(refused.retry_after, Duration(8'571'428'572));
  clock.advance(Duration(8'571'428'571));
  EXPECT_FALSE(limiter.acquire(req).allowed);
  clock.advance(Duration(1));
  EXPECT_TRUE(limiter.acquire(req).allowed);
  // After a whole idle minute the bucket is full again, not fuller.
  clock.advance(seconds(600));
  int burst = 0;
  while (limiter.acquire(req).allowed) ++burst;
  EXPECT_EQ(burst, 7);
}

TEST(RateLimiterTest, SeveralBucketsAreAllOrNothing) {
  ManualClock clock;
  RateLimiter limiter(clock);
  const BucketRequest user{"user:u:rpm", 100, 1};
  const BucketRequest team{"team:t:rpm", 2, 1};
  const BucketRequest both[] = {user, team};
  EXPECT_TRUE(limiter.acquire(both).allowed);
  EXPECT_TRUE(limiter.acquire(both).allowed);
  auto refused = limiter.acquire(both);
  ASSERT_FALSE(refused.allowed);
  EXPECT_EQ(refused.key, "team:t:rpm");
  // The refused request took nothing from the user's bucket.
  EXPECT_EQ(limiter.acquire(user).remaining, 97);
}

TEST(RateLimiterTest, TokensAreReservedThenReconciled) {
  ManualClock clock;
  RateLimiter limiter(clock);
  const BucketRequest estimate{"key:k:tpm", 1000, 800};
  ASSERT_TRUE(limiter.acquire(estimate).allowed);
  EXPECT_FALSE(limiter.acquire({"key:k:tpm", 1000, 300}).allowed);
  limiter.adjust(estimate, -600);  // the request used 200 tokens, not 800
  auto d = limiter.acquire({"key:k:tpm", 1000, 300});
  ASSERT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 500);
  limiter.adjust(estimate, 700);  // a request that used more than estimated puts the bucket in debt
  auto debt = limiter.acquire({"key:k:tpm", 1000, 1});
  ASSERT_FALSE(debt.allowed);
  EXPECT_EQ(debt.retry_after, milliseconds(12'060));  // 201 tokens of debt at 1000/min
  limiter.adjust(estimate, -1'000'000);  // returning more than was taken only fills it up
  EXPECT_EQ(limiter.acquire({"key:k:tpm", 1000, 1}).remaining, 999);
}

TEST(RateLimiterTest, ACostAboveTheLimitIsNeverAdmitted) {
  ManualClock clock;
  RateLimiter limiter(clock);
  auto d = limiter.acquire({"key:k:tpm", 100, 101});
  ASSERT_FALSE(d.allowed);
  EXPECT_TRUE(d.never);
  EXPECT_TRUE(limiter.acquire({"key:k:tpm", 0, 1'000'000}).allowed) << "0 means unlimited";
}

TEST(RateLimiterTest, IdleBucketsAreForgotten) {
  ManualClock clock;
  RateLimiter limiter(clock);
  for (int i = 0; i < 5000; ++i) (void)limiter.acquire({"k" + std::to_string(i), 10, 1});
  clock.advance(seconds(61));
  for (int i = 0; i < 5000; ++i) (void)limiter.acquire({"fresh", 1'000'000, 1});
  EXPECT_LT(limiter.bucketsForTest(), 100u);
}

}  // namespace
}  // namespace purser::ledger
