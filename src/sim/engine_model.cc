#include "sim/engine_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/assert.h"
#include "common/hash.h"

namespace purser::sim {

namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Far beyond any real server; keeps every product below in 64 bits.
constexpr int64_t kMaxTokens = int64_t{1} << 40;

}  // namespace

std::vector<uint64_t> promptBlockHashes(std::string_view text, size_t block_chars) {
  std::vector<uint64_t> out;
  if (block_chars == 0) return out;
  uint64_t chain = 0xcbf29ce484222325ULL;
  for (size_t at = 0; at + block_chars <= text.size(); at += block_chars) {
    // Chained: a block's identity includes everything before it, as a KV block's contents do.
    const uint64_t h = fnv1a64(text.substr(at, block_chars));
    chain = (chain ^ h) * 0x100000001b3ULL;
    chain ^= chain >> 29;
    out.push_back(chain);
  }
  return out;
}

EngineModel::EngineModel(EngineOptions options) : options_(options) {
  options_.block_tokens = std::max<int64_t>(1, options_.block_tokens);
  options_.max_num_seqs = std::max<int64_t>(1, options_.max_num_seqs);
  options_.max_batched_tokens = std::max<int64_t>(1, options_.max_batched_tokens);
  const int64_t n =
      std::clamp<int64_t>(options_.kv_cache_tokens / options_.block_tokens, 1, int64_t{1} << 24);
  blocks_.resize(static_cast<size_t>(n));
  free_.reserve(static_cast<size_t>(n));
  // Taken from the back: block 0 first.
  for (int64_t b = n - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  counters_.kv_blocks_total = n;
}

void EngineModel::setTiming(const EngineOptions& timing) {
  options_.decode_step = timing.decode_step;
  options_.prefill_step = timing.prefill_step;
  options_.prefill_tokens_per_s = timing.prefill_tokens_per_s;
  options_.batch_slowdown = timing.batch_slowdown;
  options_.slow_factor = timing.slow_factor;
  options_.max_num_seqs = std::max<int64_t>(1, timing.max_num_seqs);
}

bool EngineModel::canEverFit(int64_t tokens) const {
  return tokens >= 1 && tokens <= 2 * kMaxTokens &&
         ceilDiv(tokens, options_.block_tokens) <= counters_.kv_blocks_total;
}

Result<SeqId> EngineModel::add(SeqSpec spec) {
  if (spec.prompt_tokens < 1 || spec.output_tokens < 1 || spec.prompt_tokens > kMaxTokens ||
      spec.output_tokens > kMaxTokens) {
    return fail(invalidArgument("a sequence needs at least one prompt and one output token"));
  }
  const int64_t total = spec.prompt_tokens + spec.output_tokens;
  if (!canEverFit(total)) {
    return fail(invalidArgument(
        fmt::format("the prompt and output need {} tokens of KV cache; this server holds {}", total,
                    counters_.kv_blocks_total * options_.block_tokens)));
  }
  const SeqId id = next_id_++;
  seqs_.emplace(id, Seq{.spec = std::move(spec)});
  waiting_.push_back(id);
  return id;
}

void EngineModel::abort(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  if (it->second.running) {
    running_.erase(std::find(running_.begin(), running_.end(), id));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  }
  releaseBlocks(it->second);
  seqs_.erase(it);
}

int32_t EngineModel::takeBlock() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    PURSER_CHECK(!lru_.empty());
    b = lru_.front();
    lru_.pop_front();
    Block& evicted = blocks_[static_cast<size_t>(b)];
    auto it = cached_.find(evicted.hash);
    if (it != cached_.end() && it->second == b) cached_.erase(it);
    evicted.hashed = false;
  }
  blocks_[static_cast<size_t>(b)].refs = 1;
  return b;
}

void EngineModel::releaseBlocks(Seq& s) {
  // Last blocks first, so that a prompt's tail is evicted before its head, which more prompts
  // share.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) {
    Block& b = blocks_[static_cast<size_t>(*it)];
    PURSER_CHECK(b.refs > 0);
    if (--b.refs > 0) continue;
    if (b.hashed) {
      b.lru = lru_.insert(lru_.end(), *it);
    } else {
      free_.push_back(*it);
    }
  }
  s.blocks.clear();
  s.computed = 0;
}

bool EngineModel::reserve(Seq& s, int64_t tokens) {
  const int64_t needed =
      ceilDiv(tokens, options_.block_tokens) - static_cast<int64_t>(s.blocks.size());
  if (needed <= 0) return true;
  if (freeBlocks() < needed) return false;
  for (int64_t i = 0; i < needed; ++i) s.blocks.push_back(takeBlock());
  return true;
}

int64_t EngineModel::matchPrefix(Seq& s) {
  if (!options_.prefix_caching) return 0;
  const int64_t bt = options_.block_tokens;
  int64_t k = 0;
  for (; k < static_cast<int64_t>(s.spec.block_hashes.size()); ++k) {
    // At least one token is always computed: its logits give the next token.
    if ((k + 1) * bt >= target(s)) break;
    auto it = cached_.find(s.spec.block_hashes[static_cast<size_t>(k)]);
    if (it == cached_.end()) break;
    Block& b = blocks_[static_cast<size_t>(it->second)];
    if (b.refs == 0) lru_.erase(b.lru);
    ++b.refs;
    s.blocks.push_back(it->second);
  }
  return k * bt;
}

void EngineModel::registerFullBlocks(Seq& s) {
  if (!options_.prefix_caching) return;
  const auto full = std::min<int64_t>(static_cast<int64_t>(s.spec.block_hashes.size()),
                                      s.computed / options_.block_tokens);
  for (int64_t k = 0; k < full; ++k) {
    Block& b = blocks_[static_cast<size_t>(s.blocks[static_cast<size_t>(k)])];
    if (b.hashed) continue;
    const uint64_t h = s.spec.block_hashes[static_cast<size_t>(k)];
    if (cached_.contains(h)) continue;  // the same prefix computed twice at once: keep one
    b.hashed = true;
    b.hash = h;
    cached_.emplace(h, s.blocks[static_cast<size_t>(k)]);
  }
}

void EngineModel::preempt(SeqId id) {
  Seq& s = seqs_.at(id);
  running_.erase(std::find(running_.begin(), running_.end(), id));
  releaseBlocks(s);
  s.running = false;
  waiting_.push_front(id);
  ++counters_.preemptions;
}

StepResult EngineModel::step() {
  StepResult r;
  int64_t budget = options_.max_batched_tokens;
  struct Scheduled {
    SeqId id;
    int64_t tokens;
    bool decode;
  };
  std::vector<Scheduled> batch;

  // The running sequences first, in admission order; space for one is made by preempting the
  // most recently admitted.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    const SeqId id = running_[i];
    Seq& s = seqs_.at(id);
    const int64_t n = std::min(target(s) - s.computed, budget);
    bool self_preempted = false;
    while (!reserve(s, s.computed + n)) {
      const SeqId victim = running_.back();
      preempt(victim);
      ++r.preempted;
      if (victim == id) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the last running sequence
    batch.push_back({id, n, s.generated > 0 && s.computed == target(s) - 1});
    budget -= n;
    ++i;
  }

  // Then the queue, first come first served, unless this step had to preempt (as vLLM does: a
  // sequence just pushed out must not be overtaken by ones admitted into the space it left).
  while (r.preempted == 0 && budget > 0 && !waiting_.empty() &&
         static_cast<int64_t>(running_.size()) < options_.max_num_seqs) {
    const SeqId id = waiting_.front();
    Seq& s = seqs_.at(id);
    const int64_t hit = matchPrefix(s);
    s.computed = hit;
    const int64_t n = std::min(target(s) - s.computed, budget);
    if (!reserve(s, s.computed + n)) {
      releaseBlocks(s);  // the prefix's references go back
      break;
    }
    counters_.prefix_queries += static_cast<uint64_t>(target(s));
    counters_.prefix_hits += static_cast<uint64_t>(hit);
    waiting_.pop_front();
    running_.push_back(id);
    s.running = true;
    if (!s.scheduled_once) {
      s.scheduled_once = true;
      r.events.push_back({id, EventKind::kScheduled, 0});
    }
    batch.push_back({id, n, false});
    budget -= n;
  }

  if (batch.empty()) return r;

  // The step's work: KV for the scheduled tokens, and a token from every sequence whose
  // prompt (and what it generated) is now computed.
  bool finished_any = false;
  for (const Scheduled& b : batch) {
    Seq& s = seqs_.at(b.id);
    s.computed += b.tokens;
    if (b.decode) {
      ++r.decoding;
    } else {
      r.prompt_tokens += b.tokens;
    }
    registerFullBlocks(s);
    if (s.computed < target(s)) continue;  // a prompt chunk: more next step
    r.events.push_back({b.id, EventKind::kToken, s.generated});
    ++s.generated;
    ++counters_.generation_tokens;
    if (s.generated >= s.spec.output_tokens) {
      r.events.push_back({b.id, EventKind::kFinished, s.generated});
      releaseBlocks(s);
      s.running = false;
      finished_any = true;
    }
  }
  counters_.prompt_tokens += static_cast<uint64_t>(r.prompt_tokens);
  if (finished_any) {
    std::erase_if(running_, [&](SeqId id) {
      auto it = seqs_.find(id);
      if (it->second.running) return false;
      seqs_.erase(it);
      return true;
    });
  }

  using Seconds = std::chrono::duration<double>;
  double seconds = Seconds(options_.decode_step).count();
  if (r.decoding > 1) {
    seconds += static_cast<double>(r.decoding - 1) * options_.batch_slowdown *
               Seconds(options_.decode_step).count();
  }
  if (r.prompt_tokens > 0) {
    seconds += Seconds(options_.prefill_step).count();
    if (options_.prefill_tokens_per_s > 0) {
      seconds += static_cast<double>(r.prompt_tokens) / options_.prefill_tokens_per_s;
    }
  }
  seconds *= std::max(0.0, options_.slow_factor);
  r.duration = std::chrono::duration_cast<Duration>(Seconds(std::min(seconds, 3600.0)));
  return r;
}

EngineStats EngineModel::stats() const {
  EngineStats s = counters_;
  s.running = static_cast<int64_t>(running_.size());
  s.waiting = static_cast<int64_t>(waiting_.size());
  s.kv_blocks_used = s.kv_blocks_total - freeBlocks();
  return s;
}

}  // namespace purser::sim
