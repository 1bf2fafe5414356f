#include "common/money.h"

#include <gtest/gtest.h>

#include <climits>

namespace purser {
namespace {

struct ParseCase {
  const char* text;
  int64_t nanos;
  const char* printed;
};

class MoneyParseTest : public ::testing::TestWithParam<ParseCase> {};

TEST_P(MoneyParseTest, ParsesExactlyAndPrintsCanonically) {
  const ParseCase& c = GetParam();
  auto m = Money::parse(c.text);
  ASSERT_TRUE(m.has_value()) << c.text << ": " << m.error().toString();
  EXPECT_EQ(m->nanos(), c.nanos) << c.text;
  EXPECT_EQ(m->toString(), c.printed) << c.text;
  // Printing and parsing again is the identity.
  auto again = Money::parse(m->toString());
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, *m);
}

INSTANTIATE_TEST_SUITE_P(
    Table, MoneyParseTest,
    ::testing::Values(
        ParseCase{"12.50", 12'500'000'000, "12.50"}, ParseCase{"12.5", 12'500'000'000, "12.50"},
        ParseCase{"3", 3'000'000'000, "3.00"}, ParseCase{"0", 0, "0.00"},
        ParseCase{"-0", 0, "0.00"}, ParseCase{"+7.25", 7'250'000'000, "7.25"},
        ParseCase{"0.000000001", 1, "0.000000001"}, ParseCase{"-0.000002", -2'000, "-0.000002"},
        ParseCase{"0.15", 150'000'000, "0.15"}, ParseCase{"2.123", 2'123'000'000, "2.123"},
        ParseCase{"00012.10", 12'100'000'000, "12.10"},
        ParseCase{"9223372036.854775807", INT64_MAX, "9223372036.854775807"},
        ParseCase{"-9223372036.854775808", INT64_MIN, "-9223372036.854775808"}));

struct BadCase {
  const char* text;
  ErrorCode code;
  const char* mentions;
};

class MoneyBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(MoneyBadTest, RejectsWithClearError) {
  const BadCase& c = GetParam();
  auto m = Money::parse(c.text);
  ASSERT_FALSE(m.has_value()) << c.text;
  EXPECT_EQ(m.error().code, c.code) << c.text;
  EXPECT_NE(m.error().message.find(c.mentions), std::string::npos)
      << c.text << " -> " << m.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Table, MoneyBadTest,
    ::testing::Values(BadCase{"", ErrorCode::kInvalidArgument, "empty"},
                      BadCase{"-", ErrorCode::kInvalidArgument, "digit"},
                      BadCase{".5", ErrorCode::kInvalidArgument, "digit before"},
                      BadCase{"5.", ErrorCode::kInvalidArgument, "digit after"},
                      BadCase{"1.0000000001", ErrorCode::kInvalidArgument, "9 decimal places"},
                      BadCase{"1e3", ErrorCode::kInvalidArgument, "unexpected character 'e'"},
                      BadCase{"12,50", ErrorCode::kInvalidArgument, "unexpected character ','"},
                      BadCase{" 1", ErrorCode::kInvalidArgument, "digit"},
                      BadCase{"1 ", ErrorCode::kInvalidArgument, "unexpected character ' '"},
                      BadCase{"1.2.3", ErrorCode::kInvalidArgument, "unexpected character '.'"},
                      BadCase{"$5", ErrorCode::kInvalidArgument, "digit"},
                      BadCase{"NaN", ErrorCode::kInvalidArgument, "digit"},
                      BadCase{"9223372036.854775808", ErrorCode::kOutOfRange, "out of range"},
                      BadCase{"-9223372036.854775809", ErrorCode::kOutOfRange, "out of range"},
                      BadCase{"99999999999999999999999", ErrorCode::kOutOfRange, "out of range"}));

TEST(MoneyTest, ComparesByValue) {
  EXPECT_LT(*Money::parse("1.99"), *Money::parse("2"));
  EXPECT_EQ(*Money::parse("2.0"), *Money::parse("2.000000000"));
  EXPECT_GT(*Money::parse("-1"), *Money::parse("-1.000000001"));
}

TEST(MoneyTest, CheckedArithmeticDetectsOverflow) {
  const Money one = *Money::parse("1");
  EXPECT_EQ(Money::max().add(Money::fromNanos(1)).error().code, ErrorCode::kOutOfRange);
  EXPECT_EQ(Money::fromNanos(INT64_MIN).sub(Money::fromNanos(1)).error().code,
            ErrorCode::kOutOfRange);
  EXPECT_EQ(Money::max().mul(2).error().code, ErrorCode::kOutOfRange);
  EXPECT_EQ(Money::fromNanos(INT64_MIN).negate().error().code, ErrorCode::kOutOfRange);
  EXPECT_EQ(Money::fromUnits(10'000'000'000).error().code, ErrorCode::kOutOfRange);
  EXPECT_EQ(one.add(one)->toString(), "2.00");
  EXPECT_EQ(one.sub(*Money::parse("2.5"))->toString(), "-1.50");
  EXPECT_EQ(Money::parse("0.1")->mul(3)->toString(), "0.30");  // exact, unlike 0.1 * 3 in binary
}

struct MulDivCase {
  const char* amount;
  int64_t num;
  int64_t den;
  Rounding rounding;
  const char* expected;
};

class MoneyMulDivTest : public ::testing::TestWithParam<MulDivCase> {};

TEST_P(MoneyMulDivTest, RoundsOnceAsAsked) {
  const MulDivCase& c = GetParam();
  auto r = Money::parse(c.amount)->mulDiv(c.num, c.den, c.rounding);
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  EXPECT_EQ(r->toString(), c.expected);
}

INSTANTIATE_TEST_SUITE_P(
    Table, MoneyMulDivTest,
    ::testing::Values(
        // 1234 tokens at 2.50 per million tokens.
        MulDivCase{"2.50", 1234, 1'000'000, Rounding::kCeil, "0.003085"},
        // 1 token at 0.15 per million: 0.00000015 exactly.
        MulDivCase{"0.15", 1, 1'000'000, Rounding::kCeil, "0.00000015"},
        // 1 token at 0.0000001 per million would be 1e-13: ceil reserves a whole nano-unit.
        MulDivCase{"0.0000001", 1, 1'000'000, Rounding::kCeil, "0.000000001"},
        MulDivCase{"0.0000001", 1, 1'000'000, Rounding::kFloor, "0.00"},
        MulDivCase{"1", 1, 3, Rounding::kHalfEven, "0.333333333"},
        MulDivCase{"0.000000005", 1, 2, Rounding::kHalfEven, "0.000000002"},
        MulDivCase{"0.000000007", 1, 2, Rounding::kHalfEven, "0.000000004"},
        MulDivCase{"-1", 1, 3, Rounding::kFloor, "-0.333333334"},
        MulDivCase{"-1", 1, 3, Rounding::kCeil, "-0.333333333"},
        // The intermediate product overflows 64 bits but not 128: still exact.
        MulDivCase{"9000000000", 1'000'000, 1'000'000, Rounding::kCeil, "9000000000.00"}));

TEST(MoneyTest, MulDivRejectsZeroDivisorAndOverflow) {
  EXPECT_EQ(Money::parse("1")->mulDiv(1, 0, Rounding::kCeil).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(Money::max().mulDiv(3, 2, Rounding::kCeil).error().code, ErrorCode::kOutOfRange);
}

}  // namespace
}  // namespace purser
