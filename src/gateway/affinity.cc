#include "gateway/affinity.h"

#include <algorithm>

#include <cstring>

namespace purser::gateway {

std::vector<uint64_t> prefixBlocks(std::string_view text, size_t block_bytes, size_t max_blocks) {
  std::vector<uint64_t> out;
  if (block_bytes == 0) return out;
  out.reserve(std::min(max_blocks, text.size() / block_bytes));
  // Eight bytes at a time, each word mixed into the chain (a multiply and a shift: not a
  // cryptographic hash, only one that spreads prompts; a collision costs a wrong guess of
  // affinity, never a wrong answer).
  uint64_t chain = 0x9e3779b97f4a7c15ULL;
  for (size_t at = 0; at + block_bytes <= text.size() && out.size() < max_blocks;
       at += block_bytes) {
    size_t i = 0;
    for (; i + 8 <= block_bytes; i += 8) {
      uint64_t word;
      std::memcpy(&word, text.data() + at + i, 8);
      chain = (chain ^ word) * 0xff51afd7ed558ccdULL;
      chain ^= chain >> 32;
    }
    for (; i < block_bytes; ++i) {
      chain = (chain ^ static_cast<uint8_t>(text[at + i])) * 0xc4ceb9fe1a85ec53ULL;
    }
    chain ^= chain >> 29;
    out.push_back(chain);
  }
  return out;
}

size_t PrefixIndex::match(std::span<const uint64_t> blocks) const {
  std::lock_guard lock(mu_);
  if (blocks.empty() || !where_.contains(blocks[0])) return 0;
  // A prompt's blocks are remembered and forgotten head last (insert() below), so those held
  // form a leading run: binary search for its end instead of looking up every block.
  size_t lo = 1;  // blocks[0, lo) are held
  size_t hi = blocks.size();
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (where_.contains(blocks[mid])) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

void PrefixIndex::insert(std::span<const uint64_t> blocks) {
  if (capacity_ == 0) return;
  std::lock_guard lock(mu_);
  // Last block first, so that the prompt's head ends up the most recent and is forgotten last.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    auto found = where_.find(*it);
    if (found != where_.end()) {
      lru_.splice(lru_.begin(), lru_, found->second);
      continue;
    }
    lru_.push_front(*it);
    where_.emplace(*it, lru_.begin());
    if (lru_.size() > capacity_) {
      where_.erase(lru_.back());
      lru_.pop_back();
    }
  }
}

size_t PrefixIndex::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

std::vector<double> affinityScores(std::span<const Candidate> candidates, size_t prompt_blocks,
                                   const AffinityWeights& weights) {
  std::vector<double> scores(candidates.size(), 0.0);
  if (candidates.empty()) return scores;
  // Work ahead of a new request: what waits at the server, plus what Purser sent since.
  const auto load = [](const Candidate& c) { return c.in_flight + c.queue.value_or(0); };
  double lo = load(candidates[0]);
  double hi = lo;
  for (const Candidate& c : candidates) {
    lo = std::min(lo, load(c));
    hi = std::max(hi, load(c));
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    const double queue = hi > lo ? (hi - load(c)) / (hi - lo) : 1.0;
    const double kv = 1.0 - std::clamp(c.kv_cache.value_or(0), 0.0, 1.0);
    const double prefix = prompt_blocks == 0 ? 0.0
                                             : static_cast<double>(c.prefix_matched) /
                                                   static_cast<double>(prompt_blocks);
    scores[i] = weights.queue * queue + weights.kv_cache * kv + weights.prefix * prefix;
  }
  return scores;
}

}  // namespace purser::gateway
