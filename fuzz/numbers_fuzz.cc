// Fuzzes the exact-number parsers (Money, Quantity, durations) with round-trip properties:
// whatever parses must print to text that parses back to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/duration.h"
#include "common/money.h"
#include "common/quantity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto m = purser::Money::parse(text)) {
    auto back = purser::Money::parse(m->toString());
    if (!back || *back != *m) std::abort();
  }
  if (auto q = purser::Quantity::parse(text)) {
    auto back = purser::Quantity::parse(q->toString());
    if (!back || *back != *q) std::abort();
  }
  if (auto d = purser::parseDuration(text)) {
    auto back = purser::parseDuration(purser::formatDuration(*d));
    if (!back || *back != *d) std::abort();
  }
  return 0;
}
