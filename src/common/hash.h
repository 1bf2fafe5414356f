// Non-cryptographic hashing for change detection (ETags, migration checksums). Never for
// secrets or anything an adversary chooses to collide.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace purser {

// 64-bit FNV-1a.
uint64_t fnv1a64(std::string_view data);
// The same as 16 lower-case hex digits.
std::string fnv1a64Hex(std::string_view data);

}  // namespace purser
