#include "ledger/price.h"

#include <gtest/gtest.h>

namespace purser::ledger {
namespace {

Money m(const char* s) { return *Money::parse(s); }

TEST(PriceTest, TokenCostSumsEveryKindExactly) {
  const TokenPrice price{m("2.50"), m("10.00"), m("1.25"), m("3.125"), m("10.00")};
  const TokenCounts tokens{
      .input = 1200, .output = 350, .cached_input = 4000, .cache_write = 100, .reasoning = 50};
  // 1200*2.5 + 350*10 + 4000*1.25 + 100*3.125 + 50*10 = 12312.5 per million.
  EXPECT_EQ(tokenCost(price, tokens, Rounding::kHalfEven)->toString(), "0.0123125");
}

TEST(PriceTest, RoundsOnceAsAsked) {
  const TokenPrice price{.input = m("0.000000001")};  // one nano-unit per million tokens
  const TokenCounts one{.input = 1};
  EXPECT_EQ(tokenCost(price, one, Rounding::kCeil)->nanos(), 1);
  EXPECT_EQ(tokenCost(price, one, Rounding::kHalfEven)->nanos(), 0);
  const TokenCounts half{.input = 500'000};
  EXPECT_EQ(tokenCost(price, half, Rounding::kHalfEven)->nanos(), 0);  // 0.5 -> even
  const TokenCounts one_and_half{.input = 1'500'000};
  EXPECT_EQ(tokenCost(price, one_and_half, Rounding::kHalfEven)->nanos(), 2);
}

TEST(PriceTest, RejectsNegativesAndOverflow) {
  EXPECT_FALSE(tokenCost({.input = m("1")}, {.input = -1}, Rounding::kCeil).has_value());
  EXPECT_FALSE(tokenCost({.input = m("-1")}, {.input = 1}, Rounding::kCeil).has_value());
  auto huge = tokenCost({.output = Money::max()}, {.output = INT64_MAX}, Rounding::kCeil);
  ASSERT_FALSE(huge.has_value());
  EXPECT_EQ(huge.error().code, ErrorCode::kOutOfRange);
}

TEST(PriceTest, GpuCostIsPricePerGpuHourTimesShareTimesTime) {
  // Half a GPU for 90 minutes at 2.40 per GPU-hour = 1.80.
  EXPECT_EQ(gpuCost(m("2.40"), 500, std::chrono::minutes(90), Rounding::kHalfEven)->toString(),
            "1.80");
  // One second of a whole GPU at 3.60/h = 0.001.
  EXPECT_EQ(gpuCost(m("3.60"), 1000, std::chrono::seconds(1), Rounding::kHalfEven)->toString(),
            "0.001");
  EXPECT_FALSE(gpuCost(m("1"), -1, std::chrono::seconds(1), Rounding::kCeil).has_value());
}

}  // namespace
}  // namespace purser::ledger
