// Random: the seam for randomness. Ids, key secrets and jitter draw from a Random& so tests can
// make them reproducible with SeededRandom.
//
// SystemRandom reads OpenSSL's DRBG (crypto::randomBytes: seeded by the kernel, FIPS's under
// crypto.fips) and is safe for secrets; SeededRandom is deterministic and must never be used for
// secrets. Both are thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>

namespace purser {

class Random {
 public:
  virtual ~Random() = default;
  virtual void fill(std::span<uint8_t> out) = 0;
  uint64_t next64();
  // Uniform in [0, bound); bound must be > 0.
  uint64_t uniform(uint64_t bound);
};

class SystemRandom final : public Random {
 public:
  void fill(std::span<uint8_t> out) override;
  static SystemRandom& instance();
};

// splitmix64 stream; deterministic for a seed.
class SeededRandom final : public Random {
 public:
  explicit SeededRandom(uint64_t seed) : state_(seed) {}
  void fill(std::span<uint8_t> out) override;

 private:
  std::mutex mu_;
  uint64_t state_;  // guarded by mu_
};

}  // namespace purser
