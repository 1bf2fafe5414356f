// Quantity: an exact Kubernetes resource quantity ("500m", "2Gi", "1.5", "1e3", "16Mi").
//
// The value is held as a signed 128-bit count of nano-units (1e-9), so every quantity Kubernetes
// can express in practice is exact: comparison and arithmetic never round. Input finer than one
// nano-unit is rounded up, as Kubernetes does. Each quantity remembers the notation it was written
// in (decimal SI, binary SI or decimal exponent) and prints in that notation's canonical form
// ("1.5Gi" -> "1536Mi", "10000m" -> "10", "0.5" -> "500m"). Equality compares values, not
// notation: Quantity::parse("10000m") == Quantity::parse("10").
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace purser {

class Quantity {
 public:
  enum class Format { kDecimalSI, kBinarySI, kDecimalExponent };

  constexpr Quantity() = default;
  static Result<Quantity> parse(std::string_view text);
  static Quantity fromInt(int64_t value, Format format = Format::kDecimalSI);
  static Quantity fromMilli(int64_t milli);
  static Quantity fromNanos(__int128 nanos, Format format = Format::kDecimalSI) {
    return Quantity(nanos, format);
  }

  __int128 nanos() const { return nanos_; }
  Format format() const { return format_; }
  bool isZero() const { return nanos_ == 0; }
  bool isNegative() const { return nanos_ < 0; }

  // The value rounded up (away from zero) to a whole number / to thousandths, as Kubernetes'
  // Value() and MilliValue(); an error when it does not fit in 64 bits.
  Result<int64_t> value() const;
  Result<int64_t> milliValue() const;
  // True when the value is a whole number.
  bool isInteger() const;

  std::string toString() const;

  Result<Quantity> add(const Quantity& other) const;
  Result<Quantity> sub(const Quantity& other) const;
  Result<Quantity> mul(int64_t factor) const;

  friend bool operator==(const Quantity& a, const Quantity& b) { return a.nanos_ == b.nanos_; }
  friend std::strong_ordering operator<=>(const Quantity& a, const Quantity& b) {
    return a.nanos_ <=> b.nanos_;
  }

 private:
  Quantity(__int128 nanos, Format format) : nanos_(nanos), format_(format) {}
  __int128 nanos_ = 0;
  Format format_ = Format::kDecimalSI;
};

}  // namespace purser
