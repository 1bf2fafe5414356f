#include "common/random.h"

#include <cstring>

#include "common/assert.h"
#include "common/crypto.h"

namespace purser {

uint64_t Random::next64() {
  uint8_t buf[8];
  fill(buf);
  uint64_t v;
  std::memcpy(&v, buf, sizeof v);
  return v;
}

uint64_t Random::uniform(uint64_t bound) {
  PURSER_CHECK(bound > 0);
  // Rejection sampling: no modulo bias.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  for (;;) {
    const uint64_t v = next64();
    if (v < limit) return v % bound;
  }
}

void SystemRandom::fill(std::span<uint8_t> out) { crypto::randomBytes(out); }

SystemRandom& SystemRandom::instance() {
  static SystemRandom r;
  return r;
}

void SeededRandom::fill(std::span<uint8_t> out) {
  std::lock_guard lock(mu_);
  size_t i = 0;
  while (i < out.size()) {
    state_ += 0x9E3779B97F4A7C15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    for (int b = 0; b < 8 && i < out.size(); ++b, ++i) {
      out[i] = static_cast<uint8_t>(z >> (8 * b));
    }
  }
}

}  // namespace purser
