#include "common/quantity.h"

#include <fmt/format.h>

#include <array>

#include "common/money.h"

namespace purser {
namespace {

constexpr __int128 kNano = 1'000'000'000;
// |nanos| stays below 2^126 so that sums of two quantities never overflow before the check.
constexpr __int128 kLimit = static_cast<__int128>(1) << 126;

constexpr __int128 pow10(int n) {
  __int128 v = 1;
  while (n-- > 0) v *= 10;
  return v;
}
constexpr __int128 kMaxMantissa = pow10(30);

std::string toDecimalString(unsigned __int128 v) {
  if (v == 0) return "0";
  std::string s;
  while (v > 0) {
    s.push_back(static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  return std::string(s.rbegin(), s.rend());
}

Error outOfRangeFor(std::string_view text) {
  return outOfRange(fmt::format("quantity \"{}\" is out of range", text));
}

struct Suffix {
  std::string_view text;
  int base2_exponent;   // multiply by 2^this
  int base10_exponent;  // multiply by 10^this
  Quantity::Format format;
};

constexpr std::array<Suffix, 16> kSuffixes{{
    {"Ki", 10, 0, Quantity::Format::kBinarySI},
    {"Mi", 20, 0, Quantity::Format::kBinarySI},
    {"Gi", 30, 0, Quantity::Format::kBinarySI},
    {"Ti", 40, 0, Quantity::Format::kBinarySI},
    {"Pi", 50, 0, Quantity::Format::kBinarySI},
    {"Ei", 60, 0, Quantity::Format::kBinarySI},
    {"n", 0, -9, Quantity::Format::kDecimalSI},
    {"u", 0, -6, Quantity::Format::kDecimalSI},
    {"m", 0, -3, Quantity::Format::kDecimalSI},
    {"", 0, 0, Quantity::Format::kDecimalSI},
    {"k", 0, 3, Quantity::Format::kDecimalSI},
    {"M", 0, 6, Quantity::Format::kDecimalSI},
    {"G", 0, 9, Quantity::Format::kDecimalSI},
    {"T", 0, 12, Quantity::Format::kDecimalSI},
    {"P", 0, 15, Quantity::Format::kDecimalSI},
    {"E", 0, 18, Quantity::Format::kDecimalSI},
}};

// Decimal SI suffixes by power of 1000, from 1e-9 to 1e18.
constexpr std::array<std::string_view, 10> kDecimalSuffixes{"n", "u", "m", "",  "k",
                                                            "M", "G", "T", "P", "E"};
constexpr std::array<std::string_view, 7> kBinarySuffixes{"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};

}  // namespace

Result<Quantity> Quantity::parse(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return fail(invalidArgument(fmt::format(
        "invalid quantity \"{}\": {}; expected a number with an optional suffix, like \"500m\", "
        "\"2Gi\", \"1.5\" or \"1e3\"",
        text, why)));
  };
  if (text.empty()) return bad("it is empty");
  size_t i = 0;
  bool negative = false;
  if (text[0] == '+' || text[0] == '-') {
    negative = text[0] == '-';
    ++i;
  }
  // Mantissa: digits with an optional point; kept as an integer and a count of decimals.
  __int128 mantissa = 0;
  int decimals = 0;
  int digits = 0;
  bool seen_point = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.') {
      if (seen_point) return bad("more than one decimal point");
      seen_point = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    ++digits;
    if (mantissa == 0 && c == '0' && !seen_point) continue;  // leading zeros
    if (mantissa > kMaxMantissa) {
      // More than 30 significant digits: only trailing fractional zeros can follow harmlessly.
      if (c != '0' || !seen_point) return fail(outOfRangeFor(text));
      continue;
    }
    mantissa = mantissa * 10 + (c - '0');
    if (seen_point) ++decimals;
  }
  if (digits == 0) return bad("expected a digit");

  // Suffix: binary or decimal SI, or a decimal exponent "e<int>" / "E<int>" ("E" alone is exa).
  const std::string_view rest = text.substr(i);
  int base2 = 0;
  int base10 = 0;
  Format format = Format::kDecimalSI;
  bool matched = false;
  for (const Suffix& s : kSuffixes) {
    if (rest == s.text) {
      base2 = s.base2_exponent;
      base10 = s.base10_exponent;
      format = s.format;
      matched = true;
      break;
    }
  }
  if (!matched) {
    if (rest.size() >= 2 && (rest[0] == 'e' || rest[0] == 'E')) {
      size_t j = 1;
      bool exp_negative = false;
      if (rest[j] == '+' || rest[j] == '-') {
        exp_negative = rest[j] == '-';
        ++j;
      }
      if (j == rest.size()) return bad("expected digits after the exponent");
      int exponent = 0;
      for (; j < rest.size(); ++j) {
        if (rest[j] < '0' || rest[j] > '9') return bad("the exponent must be a whole number");
        exponent = exponent * 10 + (rest[j] - '0');
        if (exponent > 60) return fail(outOfRangeFor(text));
      }
      base10 = exp_negative ? -exponent : exponent;
      format = Format::kDecimalExponent;
    } else {
      return bad(fmt::format("unknown suffix \"{}\"", rest));
    }
  }

  // nanos = mantissa * 2^base2 * 10^(base10 + 9 - decimals), rounded up when that exponent is
  // negative (the input is finer than a nano-unit).
  __int128 value = mantissa;
  for (int k = 0; k < base2; ++k) {
    value *= 2;
    if (value >= kLimit) return fail(outOfRangeFor(text));
  }
  const int exp10 = base10 + 9 - decimals;
  if (exp10 >= 0) {
    for (int k = 0; k < exp10; ++k) {
      if (value >= kLimit / 10) return fail(outOfRangeFor(text));  // before it can overflow
      value *= 10;
    }
  } else if (exp10 < -38) {
    value = value > 0 ? 1 : 0;
  } else {
    value = divideRounded(value, pow10(-exp10), Rounding::kCeil);
  }
  // A value must print to text that reads back (at most 30 significant digits): a fraction of a
  // binary suffix ("1.3Ei") can need more than any written number may have.
  const Quantity out(negative ? -value : value, format);
  const std::string printed = out.toString();
  const size_t first = printed.find_first_of("0123456789");
  const size_t end = printed.find_first_not_of("0123456789", first);
  const size_t printed_digits = (end == std::string::npos ? printed.size() : end) - first;
  if (printed_digits > 30) return fail(outOfRangeFor(text));
  return out;
}

Quantity Quantity::fromInt(int64_t value, Format format) {
  return Quantity(static_cast<__int128>(value) * kNano, format);
}

Quantity Quantity::fromMilli(int64_t milli) {
  return Quantity(static_cast<__int128>(milli) * 1'000'000, Format::kDecimalSI);
}

namespace {

Result<int64_t> roundedAwayFromZero(__int128 nanos, __int128 unit, std::string_view what) {
  __int128 v = nanos / unit;
  if (nanos % unit != 0) v += nanos > 0 ? 1 : -1;
  if (v > INT64_MAX || v < INT64_MIN) {
    return fail(outOfRange(fmt::format("quantity does not fit in 64 bits as {}", what)));
  }
  return static_cast<int64_t>(v);
}

}  // namespace

Result<int64_t> Quantity::value() const { return roundedAwayFromZero(nanos_, kNano, "a value"); }

Result<int64_t> Quantity::milliValue() const {
  return roundedAwayFromZero(nanos_, 1'000'000, "a milli-value");
}

bool Quantity::isInteger() const { return nanos_ % kNano == 0; }

std::string Quantity::toString() const {
  if (nanos_ == 0) return "0";
  const bool negative = nanos_ < 0;
  const unsigned __int128 mag =
      negative ? static_cast<unsigned __int128>(-nanos_) : static_cast<unsigned __int128>(nanos_);
  const std::string sign = negative ? "-" : "";

  if (format_ == Format::kBinarySI && mag % kNano == 0 && mag / kNano >= 1024) {
    unsigned __int128 units = mag / kNano;
    size_t k = 0;
    while (k + 1 < kBinarySuffixes.size() && units % 1024 == 0) {
      units /= 1024;
      ++k;
    }
    return sign + toDecimalString(units) + std::string(kBinarySuffixes[k]);
  }
  // Decimal SI (and the fallback for binary values that are small or fractional): the largest
  // power of 1000 that leaves a whole mantissa.
  unsigned __int128 mantissa = mag;
  int power = -3;  // in thousands: 10^(3*power) units; starts at nano
  while (power < 6 && mantissa % 1000 == 0) {
    mantissa /= 1000;
    ++power;
  }
  if (format_ == Format::kDecimalExponent) {
    const std::string exp = power == 0 ? "" : fmt::format("e{}", 3 * power);
    return sign + toDecimalString(mantissa) + exp;
  }
  return sign + toDecimalString(mantissa) +
         std::string(kDecimalSuffixes[static_cast<size_t>(power + 3)]);
}

Result<Quantity> Quantity::add(const Quantity& other) const {
  const __int128 v = nanos_ + other.nanos_;
  if (v >= kLimit || v <= -kLimit) return fail(outOfRange("quantity addition overflows"));
  return Quantity(v, format_);
}

Result<Quantity> Quantity::sub(const Quantity& other) const {
  const __int128 v = nanos_ - other.nanos_;
  if (v >= kLimit || v <= -kLimit) return fail(outOfRange("quantity subtraction overflows"));
  return Quantity(v, format_);
}

Result<Quantity> Quantity::mul(int64_t factor) const {
  __int128 v;
  if (__builtin_mul_overflow(nanos_, static_cast<__int128>(factor), &v) || v >= kLimit ||
      v <= -kLimit) {
    return fail(outOfRange("quantity multiplication overflows"));
  }
  return Quantity(v, format_);
}

}  // namespace purser
