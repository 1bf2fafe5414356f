// EngineModel: the scheduler of a continuous-batching inference engine (vLLM's), modelled
// closely enough that load, KV-cache pressure and prefix caching show on its metrics as they do
// on a real server — the model `purser sim llm` runs and the routing benchmarks replay.
//
// The engine runs in steps. Each step schedules a batch within a token budget: every running
// sequence decodes one token (or computes its next chunk of prompt), then waiting sequences are
// admitted first come, first served while there is a free slot (`max_num_seqs`), budget and KV
// space. KV space is paged in blocks of `block_tokens`. A running sequence that needs a block
// when none is free preempts the most recently admitted running sequence (recompute: its blocks
// are freed and it goes back to the head of the queue, to compute its prompt and what it has
// generated again). Full prompt blocks are content-addressed (a hash chained over the prompt's
// blocks): a later prompt that starts the same way reuses them instead of computing them
// (prefix caching); a freed hashed block stays cached until its space is needed (LRU).
//
// A step takes `decode_step` (the forward pass; 1/tokens-per-second of a lone sequence), plus a
// `batch_slowdown` fraction of it for each further decoding sequence, plus `prefill_step` when a
// prompt chunk runs, plus its prompt tokens at `prefill_tokens_per_s`; all scaled by
// `slow_factor` (a fault: a slow or throttled GPU). Tokens come out at the end of the step.
//
// Pure and deterministic: no clock, no threads, no randomness — the caller sleeps each step's
// duration (or advances a virtual clock). Not thread-safe; the caller serialises.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/result.h"

namespace purser::sim {

struct EngineOptions {
  int64_t kv_cache_tokens = 65536;
  int64_t block_tokens = 16;
  int64_t max_num_seqs = 64;
  int64_t max_batched_tokens = 8192;  // per step: prompt chunks plus one per decoding sequence
  bool prefix_caching = true;
  Duration decode_step{std::chrono::milliseconds(5)};
  Duration prefill_step{0};
  double prefill_tokens_per_s = 0;  // 0: prompt tokens cost nothing beyond prefill_step
  double batch_slowdown = 0.01;
  double slow_factor = 1;
};

using SeqId = uint64_t;

// The full prompt blocks' chained hashes of `text`, `block_chars` characters a block (the
// simulator counts a token per 4 characters, so a 16-token block is 64 characters).
std::vector<uint64_t> promptBlockHashes(std::string_view text, size_t block_chars);

struct SeqSpec {
  int64_t prompt_tokens = 1;
  std::vector<uint64_t> block_hashes;  // of the prompt's full blocks, in order
  int64_t output_tokens = 1;           // to generate, at least 1
};

enum class EventKind {
  kScheduled,  // first admitted: its wait in the queue ends
  kToken,      // token `index` (0-based) is generated
  kFinished,   // the last token was generated; its KV space is free
};

struct StepEvent {
  SeqId seq = 0;
  EventKind kind = EventKind::kToken;
  int64_t index = 0;
};

struct StepResult {
  Duration duration{0};
  std::vector<StepEvent> events;
  int64_t prompt_tokens = 0;  // computed in this step (prefix-cache hits excluded)
  int64_t decoding = 0;       // sequences that generated a token by decoding
  int64_t preempted = 0;
};

struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_used = 0;  // held by a sequence (cached but unused blocks count as free)
  int64_t kv_blocks_total = 0;
  uint64_t preemptions = 0;
  uint64_t prefix_queries = 0;  // prompt tokens looked up in the prefix cache
  uint64_t prefix_hits = 0;     // of which found there
  uint64_t prompt_tokens = 0;   // computed, hits excluded (recomputation included)
  uint64_t generation_tokens = 0;

  double kvUsage() const {
    return kv_blocks_total == 0
               ? 0.0
               : static_cast<double>(kv_blocks_used) / static_cast<double>(kv_blocks_total);
  }
};

class EngineModel {
 public:
  explicit EngineModel(EngineOptions options);

  // Queues a sequence. Refused (invalid argument) when its prompt and output could never fit
  // the whole KV cache.
  Result<SeqId> add(SeqSpec spec);
  // Drops a sequence wherever it is (a client that went away); its blocks are freed now.
  void abort(SeqId id);
  // Whether `tokens` of prompt and output fit the whole KV cache. Reads only what never changes.
  bool canEverFit(int64_t tokens) const;
  bool hasWork() const { return !running_.empty() || !waiting_.empty(); }
  StepResult step();
  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }
  // Faults and tuning while running: only the timing fields and max_num_seqs take effect.
  void setTiming(const EngineOptions& timing);

 private:
  struct Block {
    int32_t refs = 0;
    bool hashed = false;
    uint64_t hash = 0;
    std::list<int32_t>::iterator lru;  // valid when hashed and refs == 0
  };
  struct Seq {
    SeqSpec spec;
    std::vector<int32_t> blocks;
    int64_t computed = 0;   // tokens whose KV is in `blocks`
    int64_t generated = 0;  // tokens generated so far
    bool scheduled_once = false;
    bool running = false;
  };

  int64_t target(const Seq& s) const { return s.spec.prompt_tokens + s.generated; }
  int64_t freeBlocks() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int32_t takeBlock();
  void releaseBlocks(Seq& s);
  // Reuses cached blocks for the start of `s`'s prompt; returns the tokens found.
  int64_t matchPrefix(Seq& s);
  // Grows `s`'s blocks to hold `tokens` tokens; false (nothing taken) when space is short.
  bool reserve(Seq& s, int64_t tokens);
  void registerFullBlocks(Seq& s);
  void preempt(SeqId id);

  EngineOptions options_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;  // unhashed, unused
  std::list<int32_t> lru_;     // hashed, unused: evicted from the front
  std::unordered_map<uint64_t, int32_t> cached_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::vector<SeqId> running_;  // in admission order
  std::deque<SeqId> waiting_;
  SeqId next_id_ = 1;
  EngineStats counters_;
};

}  // namespace purser::sim
