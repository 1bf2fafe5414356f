#include "common/hash.h"

#include <fmt/format.h>

namespace purser {

uint64_t fnv1a64(std::string_view data) {
  uint64_t h = 14695981039346656037ULL;  // the FNV offset basis
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string fnv1a64Hex(std::string_view data) { return fmt::format("{:016x}", fnv1a64(data)); }

}  // namespace purser
