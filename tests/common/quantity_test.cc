#include "common/quantity.h"

#include <gtest/gtest.h>

namespace purser {
namespace {

constexpr __int128 kNano = 1'000'000'000;

struct ParseCase {
  const char* text;
  __int128 nanos;
  const char* canonical;
};

class QuantityParseTest : public ::testing::TestWithParam<ParseCase> {};

TEST_P(QuantityParseTest, ParsesExactlyAndCanonicalises) {
  const ParseCase& c = GetParam();
  auto q = Quantity::parse(c.text);
  ASSERT_TRUE(q.has_value()) << c.text << ": " << q.error().toString();
  EXPECT_TRUE(q->nanos() == c.nanos) << c.text;
  EXPECT_EQ(q->toString(), c.canonical) << c.text;
  auto again = Quantity::parse(q->toString());
  ASSERT_TRUE(again.has_value()) << q->toString();
  EXPECT_EQ(*again, *q);
  EXPECT_EQ(again->toString(), c.canonical);
}

INSTANTIATE_TEST_SUITE_P(
    Table, QuantityParseTest,
    ::testing::Values(
        ParseCase{"500m", kNano / 2, "500m"}, ParseCase{"0.5", kNano / 2, "500m"},
        ParseCase{"1.5", 3 * kNano / 2, "1500m"}, ParseCase{"10000m", 10 * kNano, "10"},
        ParseCase{"10", 10 * kNano, "10"},
        ParseCase{"2Gi", (static_cast<__int128>(2) << 30) * kNano, "2Gi"},
        ParseCase{"1.5Gi", (static_cast<__int128>(1536) << 20) * kNano, "1536Mi"},
        ParseCase{"1024Mi", (static_cast<__int128>(1) << 30) * kNano, "1Gi"},
        ParseCase{"1Ki", 1024 * kNano, "1Ki"}, ParseCase{"0.5Ki", 512 * kNano, "512"},
        ParseCase{"1e3", 1000 * kNano, "1e3"}, ParseCase{"1E3", 1000 * kNano, "1e3"},
        ParseCase{"1.5e3", 1500 * kNano, "1500"}, ParseCase{"5e-1", kNano / 2, "500e-3"},
        ParseCase{"1e+2", 100 * kNano, "100"}, ParseCase{"1k", 1000 * kNano, "1k"},
        ParseCase{"1500", 1500 * kNano, "1500"}, ParseCase{"2M", 2'000'000 * kNano, "2M"},
        ParseCase{"1E", static_cast<__int128>(1'000'000'000'000'000'000) * kNano, "1E"},
        ParseCase{"16Ei", (static_cast<__int128>(16) << 60) * kNano, "16Ei"},
        ParseCase{"100n", 100, "100n"}, ParseCase{"1u", 1000, "1u"},
        ParseCase{"0.1n", 1, "1n"},  // finer than 1n rounds up, as Kubernetes does
        ParseCase{"-2", -2 * kNano, "-2"}, ParseCase{"+3", 3 * kNano, "3"},
        ParseCase{".5", kNano / 2, "500m"}, ParseCase{"5.", 5 * kNano, "5"}, ParseCase{"0", 0, "0"},
        ParseCase{"0Gi", 0, "0"}, ParseCase{"007", 7 * kNano, "7"}));

struct BadCase {
  const char* text;
  ErrorCode code;
  const char* mentions;
};

class QuantityBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(QuantityBadTest, RejectsWithClearError) {
  const BadCase& c = GetParam();
  auto q = Quantity::parse(c.text);
  ASSERT_FALSE(q.has_value()) << c.text;
  EXPECT_EQ(q.error().code, c.code) << c.text;
  EXPECT_NE(q.error().message.find(c.mentions), std::string::npos)
      << c.text << " -> " << q.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Table, QuantityBadTest,
    ::testing::Values(
        BadCase{"", ErrorCode::kInvalidArgument, "empty"},
        BadCase{"Gi", ErrorCode::kInvalidArgument, "expected a digit"},
        BadCase{"2GB", ErrorCode::kInvalidArgument, "unknown suffix \"GB\""},
        BadCase{"2gi", ErrorCode::kInvalidArgument, "unknown suffix \"gi\""},
        BadCase{"1..5", ErrorCode::kInvalidArgument, "more than one decimal point"},
        BadCase{"1e", ErrorCode::kInvalidArgument, "unknown suffix"},
        BadCase{"1e+", ErrorCode::kInvalidArgument, "digits after the exponent"},
        BadCase{"1e1.5", ErrorCode::kInvalidArgument, "whole number"},
        BadCase{" 1", ErrorCode::kInvalidArgument, "expected a digit"},
        BadCase{"1 Gi", ErrorCode::kInvalidArgument, "unknown suffix"},
        BadCase{"1e99", ErrorCode::kOutOfRange, "out of range"},
        BadCase{"100000000000000000000000000000000000000", ErrorCode::kOutOfRange, "out of range"},
        BadCase{"1000000000000000Ei", ErrorCode::kOutOfRange, "out of range"},
        // Found by fuzzing: the scaling overflowed 128 bits before the range check.
        BadCase{"2E32", ErrorCode::kOutOfRange, "out of range"},
        BadCase{"200000000000000000000000000007", ErrorCode::kOutOfRange, "out of range"},
        BadCase{"223372372036.8E", ErrorCode::kOutOfRange, "out of range"}));

TEST(QuantityTest, ComparesValuesAcrossNotations) {
  EXPECT_EQ(*Quantity::parse("10000m"), *Quantity::parse("10"));
  EXPECT_EQ(*Quantity::parse("1Ki"), *Quantity::parse("1024"));
  EXPECT_EQ(*Quantity::parse("1e3"), *Quantity::parse("1k"));
  EXPECT_LT(*Quantity::parse("999m"), *Quantity::parse("1"));
  EXPECT_GT(*Quantity::parse("1Gi"), *Quantity::parse("1G"));  // 2^30 > 10^9
  EXPECT_LT(*Quantity::parse("-1"), *Quantity::parse("0"));
}

TEST(QuantityTest, ArithmeticIsExactAndKeepsTheLeftNotation) {
  auto sum = Quantity::parse("1.5Gi")->add(*Quantity::parse("512Mi"));
  ASSERT_TRUE(sum.has_value());
  EXPECT_EQ(sum->toString(), "2Gi");
  auto diff = Quantity::parse("1")->sub(*Quantity::parse("1m"));
  EXPECT_EQ(diff->toString(), "999m");
  // 0.1 + 0.2 is exactly 0.3.
  EXPECT_EQ(*Quantity::parse("0.1")->add(*Quantity::parse("0.2")), *Quantity::parse("0.3"));
  EXPECT_EQ(Quantity::parse("250m")->mul(4)->toString(), "1");
}

TEST(QuantityTest, ArithmeticDetectsOverflow) {
  auto big = Quantity::parse("64Ei");
  ASSERT_TRUE(big.has_value());
  auto product = big->mul(INT64_MAX);
  ASSERT_FALSE(product.has_value());
  EXPECT_EQ(product.error().code, ErrorCode::kOutOfRange);
  auto huge = Quantity::fromNanos(static_cast<__int128>(1) << 125);
  EXPECT_FALSE(huge.add(huge).has_value());
  EXPECT_FALSE(Quantity::fromNanos(-huge.nanos()).sub(huge).has_value());
}

TEST(QuantityTest, ValueAndMilliValueRoundUpLikeKubernetes) {
  EXPECT_EQ(*Quantity::parse("1500m")->value(), 2);
  EXPECT_EQ(*Quantity::parse("2")->value(), 2);
  EXPECT_EQ(*Quantity::parse("-1500m")->value(), -2);
  EXPECT_EQ(*Quantity::parse("1.5")->milliValue(), 1500);
  EXPECT_EQ(*Quantity::parse("1n")->milliValue(), 1);
  EXPECT_EQ(*Quantity::parse("2Gi")->value(), int64_t{2} << 30);
  EXPECT_FALSE(Quantity::parse("16Ei")->value().has_value());  // 2^64 does not fit
  EXPECT_TRUE(Quantity::parse("3")->isInteger());
  EXPECT_FALSE(Quantity::parse("3500m")->isInteger());
}

}  // namespace
}  // namespace purser
