// Time-sortable unique ids (ULID layout: 48-bit Unix milliseconds + 80 random bits), written as
// 26 characters of lower-case Crockford base32 so they are safe in URLs, file names and keys
// ("pk-<id>-<secret>"). Ids from one generator sort in creation order, also within the same
// millisecond (the random part is incremented). IdGenerator is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/random.h"
#include "common/result.h"

namespace purser {

class IdGenerator {
 public:
  IdGenerator(const Clock& clock, Random& random) : clock_(clock), random_(random) {}

  std::string next();

 private:
  const Clock& clock_;
  Random& random_;
  std::mutex mu_;
  int64_t last_ms_ = -1;                   // guarded by mu_
  std::array<uint8_t, 10> last_random_{};  // guarded by mu_
};

// True when `id` is 26 Crockford base32 characters (either case).
bool isValidId(std::string_view id);
// The millisecond timestamp encoded in a valid id.
Result<int64_t> idMillis(std::string_view id);

}  // namespace purser
