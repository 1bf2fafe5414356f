#include "common/id.h"

#include <algorithm>

namespace purser {
namespace {

constexpr char kAlphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";

int decodeChar(char c) {
  if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  for (int i = 0; i < 32; ++i) {
    if (kAlphabet[i] == c) return i;
  }
  return -1;
}

}  // namespace

std::string IdGenerator::next() {
  std::array<uint8_t, 16> bytes{};
  {
    std::lock_guard lock(mu_);
    int64_t ms = unixMillis(clock_.now());
    if (ms <= last_ms_) {
      // Same (or an earlier, if the wall clock stepped back) millisecond: keep the previous
      // timestamp and increment the random part so the order is preserved.
      ms = last_ms_;
      int i = static_cast<int>(last_random_.size()) - 1;
      while (i >= 0 && ++last_random_[static_cast<size_t>(i)] == 0) --i;
      if (i < 0) {
        // 2^80 ids in one millisecond: move to the next millisecond.
        ++ms;
        random_.fill(last_random_);
      }
    } else {
      random_.fill(last_random_);
    }
    last_ms_ = ms;
    const auto ums = static_cast<uint64_t>(ms);
    for (int i = 0; i < 6; ++i)
      bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(ums >> (8 * (5 - i)));
    std::copy(last_random_.begin(), last_random_.end(), bytes.begin() + 6);
  }
  // 128 bits -> 26 base32 digits (the first carries only 3 bits).
  std::string out(26, '0');
  unsigned __int128 v = 0;
  for (uint8_t b : bytes) v = (v << 8) | b;
  for (int i = 25; i >= 0; --i) {
    out[static_cast<size_t>(i)] = kAlphabet[static_cast<int>(v & 31)];
    v >>= 5;
  }
  return out;
}

bool isValidId(std::string_view id) {
  if (id.size() != 26) return false;
  if (decodeChar(id[0]) > 7) return false;  // would overflow 128 bits
  return std::all_of(id.begin(), id.end(), [](char c) { return decodeChar(c) >= 0; });
}

Result<int64_t> idMillis(std::string_view id) {
  if (!isValidId(id)) return fail(invalidArgument("not a valid id (26 base32 characters)"));
  unsigned __int128 v = 0;
  for (char c : id) v = (v << 5) | static_cast<unsigned>(decodeChar(c));
  return static_cast<int64_t>(static_cast<uint64_t>(v >> 80));
}

}  // namespace purser
