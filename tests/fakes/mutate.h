// Random small edits of a text, for tests that check a parser against hostile input: one to
// three bytes replaced, inserted or removed, the new bytes drawn from `alphabet` (the bytes the
// grammar cares about, plus some invalid UTF-8). Deterministic for a seeded generator.
#pragma once

#include <cstddef>
#include <random>
#include <string>
#include <string_view>

namespace purser::testing {

inline std::string mutated(std::string text, std::string_view alphabet, std::mt19937& rng) {
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits && !text.empty(); ++e) {
    const size_t at = rng() % text.size();
    const char c = alphabet[rng() % alphabet.size()];
    switch (rng() % 3) {
      case 0:
        text[at] = c;
        break;
      case 1:
        text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c);
        break;
      default:
        text.erase(at, 1);
        break;
    }
  }
  return text;
}

}  // namespace purser::testing
