#include "common/money.h"

#include <fmt/format.h>

#include "common/assert.h"

namespace purser {

__int128 divideRounded(__int128 num, __int128 den, Rounding rounding) {
  PURSER_CHECK(den != 0);
  if (den < 0) {
    num = -num;
    den = -den;
  }
  __int128 q = num / den;  // truncates towards zero
  const __int128 r = num % den;
  if (r == 0) return q;
  switch (rounding) {
    case Rounding::kFloor:
      if (num < 0) --q;
      break;
    case Rounding::kCeil:
      if (num > 0) ++q;
      break;
    case Rounding::kHalfEven: {
      const __int128 twice = (r < 0 ? -r : r) * 2;
      const bool up = twice > den || (twice == den && (q % 2) != 0);
      if (up) q += (num < 0) ? -1 : 1;
      break;
    }
  }
  return q;
}

namespace {

Error overflow(std::string_view op) {
  return outOfRange(fmt::format("money {} overflows (the limit is ±9223372036.854775807)", op));
}

Result<Money> fromWide(__int128 v, std::string_view op) {
  if (v > INT64_MAX || v < INT64_MIN) return fail(overflow(op));
  return Money::fromNanos(static_cast<int64_t>(v));
}

}  // namespace

Result<Money> Money::fromUnits(int64_t units) {
  return fromWide(static_cast<__int128>(units) * kNanosPerUnit, "conversion");
}

Result<Money> Money::parse(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return fail(invalidArgument(
        fmt::format("invalid amount \"{}\": {}; write a plain decimal like \"12.50\"", text, why)));
  };
  if (text.empty()) return bad("it is empty");
  size_t i = 0;
  bool negative = false;
  if (text[0] == '-' || text[0] == '+') {
    negative = text[0] == '-';
    ++i;
  }
  __int128 magnitude = 0;
  int int_digits = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    magnitude = magnitude * 10 + (text[i] - '0');
    ++int_digits;
    if (magnitude > static_cast<__int128>(INT64_MAX)) {
      return fail(outOfRange(
          fmt::format("amount \"{}\" is out of range (the limit is ±9223372036.854775807)", text)));
    }
  }
  if (int_digits == 0) return bad("expected a digit before the decimal point");
  magnitude *= kNanosPerUnit;
  if (i < text.size() && text[i] == '.') {
    ++i;
    int frac_digits = 0;
    __int128 scale = kNanosPerUnit / 10;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      if (++frac_digits > kDecimals) {
        return bad("more than 9 decimal places (money is exact to 0.000000001)");
      }
      magnitude += (text[i] - '0') * scale;
      scale /= 10;
    }
    if (frac_digits == 0) return bad("expected a digit after the decimal point");
  }
  if (i != text.size()) {
    return bad(fmt::format("unexpected character '{}' at position {}", text[i], i + 1));
  }
  const __int128 v = negative ? -magnitude : magnitude;
  if (v > INT64_MAX || v < INT64_MIN) {
    return fail(outOfRange(
        fmt::format("amount \"{}\" is out of range (the limit is ±9223372036.854775807)", text)));
  }
  return Money(static_cast<int64_t>(v));
}

std::string Money::toString() const {
  // Work in unsigned 128 bits so INT64_MIN prints correctly.
  const bool negative = nanos_ < 0;
  const unsigned __int128 mag = negative
                                    ? static_cast<unsigned __int128>(-static_cast<__int128>(nanos_))
                                    : static_cast<unsigned __int128>(nanos_);
  const auto units = static_cast<uint64_t>(mag / kNanosPerUnit);
  auto frac = static_cast<uint64_t>(mag % kNanosPerUnit);
  std::string digits = fmt::format("{:09}", frac);
  while (digits.size() > 2 && digits.back() == '0') digits.pop_back();
  return fmt::format("{}{}.{}", negative ? "-" : "", units, digits);
}

Result<Money> Money::add(Money other) const {
  int64_t out;
  if (__builtin_add_overflow(nanos_, other.nanos_, &out)) return fail(overflow("addition"));
  return Money(out);
}

Result<Money> Money::sub(Money other) const {
  int64_t out;
  if (__builtin_sub_overflow(nanos_, other.nanos_, &out)) return fail(overflow("subtraction"));
  return Money(out);
}

Result<Money> Money::mul(int64_t factor) const {
  int64_t out;
  if (__builtin_mul_overflow(nanos_, factor, &out)) return fail(overflow("multiplication"));
  return Money(out);
}

Result<Money> Money::negate() const {
  if (nanos_ == INT64_MIN) return fail(overflow("negation"));
  return Money(-nanos_);
}

Result<Money> Money::mulDiv(int64_t num, int64_t den, Rounding rounding) const {
  if (den == 0) return fail(invalidArgument("money division by zero"));
  // |nanos * num| < 2^126: always fits in 128 bits.
  const __int128 product = static_cast<__int128>(nanos_) * num;
  return fromWide(divideRounded(product, den, rounding), "multiplication");
}

}  // namespace purser
