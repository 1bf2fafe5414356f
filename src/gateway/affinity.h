// The `slo` routing strategy's scorer: which replica should serve a request, by the load its
// server reports, how full its KV cache is, and how much of the request's prompt it probably
// still holds in its prefix cache — the scorer of the Kubernetes Gateway API Inference
// Extension's endpoint picker (queue weight 2, KV cache 2, prefix affinity 3), with the load
// made current between scrapes by Purser's own count of requests in flight.
//
// Prefix affinity is approximate, as the endpoint picker's is: the prompt's bytes are cut into
// blocks and hashed in a chain (a block's hash covers everything before it), and each replica
// remembers, least recently used first out, the blocks of the prompts routed to it. A request's
// affinity with a replica is the share of its leading blocks that replica has seen. A prompt no
// replica has seen scores the same everywhere, so the load decides and cold prefixes spread.
//
// Pure (PrefixIndex is thread-safe: one mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace purser::gateway {

// Chained hashes of `text`'s whole blocks of `block_bytes` bytes, at most `max_blocks` of them.
std::vector<uint64_t> prefixBlocks(std::string_view text, size_t block_bytes = 64,
                                   size_t max_blocks = 4096);

// The prompt blocks recently routed to one replica.
class PrefixIndex {
 public:
  explicit PrefixIndex(size_t capacity = 16384) : capacity_(capacity) {}
  // How many of `blocks`' leading blocks were routed here (and not forgotten since).
  size_t match(std::span<const uint64_t> blocks) const;
  // Remembers `blocks` as routed here, the most recent.
  void insert(std::span<const uint64_t> blocks);
  size_t size() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<uint64_t> lru_;  // guarded by mu_; most recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where_;  // guarded by mu_
};

struct AffinityWeights {
  double queue = 2;
  double kv_cache = 2;
  double prefix = 3;
};

// What the scorer knows of one candidate.
struct Candidate {
  double in_flight = 0;            // Purser's requests outstanding there now
  std::optional<double> queue;     // waiting at the server, as last scraped
  std::optional<double> kv_cache;  // 0..1, as last scraped
  size_t prefix_matched = 0;       // leading prompt blocks it has seen
};

// Each candidate's score, higher is better: queue and KV scores are min-max normalised across
// the candidates (1 = the least loaded), the prefix score is the matched share of the prompt.
std::vector<double> affinityScores(std::span<const Candidate> candidates, size_t prompt_blocks,
                                   const AffinityWeights& weights = {});

}  // namespace purser::gateway
