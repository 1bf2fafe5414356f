// Money: an exact amount of the deployment's currency, as a signed 64-bit count of nano-units
// (1e-9). No floating point ever touches it (docs/architecture.md rule 1). The range is about
// ±9.2 billion units; every operation that could leave it is checked and returns an error.
//
// Text form: a plain decimal with up to nine fractional digits, optionally signed ("12.50",
// "-0.000002", "3"). toString() prints the exact value with at least two decimals ("12.50",
// "0.000002", "3.00"). Money is a value type; it is trivially copyable and thread-compatible.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace purser {

// How to round a division that does not come out exact.
enum class Rounding {
  kFloor,     // towards negative infinity
  kCeil,      // towards positive infinity (reservations: never under-reserve)
  kHalfEven,  // to nearest, ties to even (banker's rounding)
};

class Money {
 public:
  static constexpr int64_t kNanosPerUnit = 1'000'000'000;
  static constexpr int kDecimals = 9;

  constexpr Money() = default;
  static constexpr Money fromNanos(int64_t nanos) { return Money(nanos); }
  static Result<Money> fromUnits(int64_t units);
  static Result<Money> parse(std::string_view text);
  static constexpr Money max() { return Money(INT64_MAX); }
  static constexpr Money zero() { return Money(0); }

  constexpr int64_t nanos() const { return nanos_; }
  constexpr bool isZero() const { return nanos_ == 0; }
  constexpr bool isNegative() const { return nanos_ < 0; }
  constexpr bool isPositive() const { return nanos_ > 0; }

  std::string toString() const;

  Result<Money> add(Money other) const;
  Result<Money> sub(Money other) const;
  Result<Money> mul(int64_t factor) const;
  Result<Money> negate() const;
  // this * num / den, computed exactly in 128 bits, rounded once. den must not be 0.
  // Cost of N tokens at a per-million price: price.mulDiv(N, 1'000'000, Rounding::kCeil).
  Result<Money> mulDiv(int64_t num, int64_t den, Rounding rounding) const;

  friend constexpr auto operator<=>(Money a, Money b) = default;
  friend constexpr bool operator==(Money a, Money b) = default;

 private:
  constexpr explicit Money(int64_t nanos) : nanos_(nanos) {}
  int64_t nanos_ = 0;
};

// Rounds num/den (den != 0) as asked; shared by Money and Quantity arithmetic.
__int128 divideRounded(__int128 num, __int128 den, Rounding rounding);

}  // namespace purser
