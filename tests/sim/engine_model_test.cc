#include "sim/engine_model.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace purser::sim {
namespace {

using std::chrono::milliseconds;

std::vector<uint64_t> hashes(std::initializer_list<uint64_t> ids) { return ids; }

// Runs steps until nothing is left; every event in order.
std::vector<StepEvent> drain(EngineModel& m, int max_steps = 100000) {
  std::vector<StepEvent> out;
  for (int i = 0; i < max_steps && m.hasWork(); ++i) {
    auto r = m.step();
    out.insert(out.end(), r.events.begin(), r.events.end());
  }
  EXPECT_FALSE(m.hasWork()) << "still working after " << max_steps << " steps";
  return out;
}

TEST(EngineModelTest, ALoneSequencePrefillsThenDecodesOneTokenAStep) {
  EngineModel m({.kv_cache_tokens = 1024,
                 .decode_step = milliseconds(10),
                 .prefill_step = milliseconds(20),
                 .prefill_tokens_per_s = 1000});
  const SeqId id = *m.add({.prompt_tokens = 32, .output_tokens = 3});
  auto first = m.step();
  EXPECT_EQ(first.prompt_tokens, 32);
  EXPECT_EQ(first.decoding, 0);
  // 10 ms forward pass + 20 ms prefill + 32 tokens at 1000/s.
  EXPECT_EQ(first.duration, milliseconds(62));
  ASSERT_EQ(first.events.size(), 2u);
  EXPECT_EQ(first.events[0].kind, EventKind::kScheduled);
  EXPECT_EQ(first.events[1].kind, EventKind::kToken);
  EXPECT_EQ(first.events[1].index, 0);
  EXPECT_EQ(m.stats().kv_blocks_used, 2);  // the 32 computed tokens; the next one's comes later

  auto second = m.step();
  EXPECT_EQ(second.decoding, 1);
  EXPECT_EQ(second.prompt_tokens, 0);
  EXPECT_EQ(second.duration, milliseconds(10));
  ASSERT_EQ(second.events.size(), 1u);
  EXPECT_EQ(second.events[0].index, 1);

  auto third = m.step();
  ASSERT_EQ(third.events.size(), 2u);
  EXPECT_EQ(third.events[0].index, 2);
  EXPECT_EQ(third.events[1].kind, EventKind::kFinished);
  EXPECT_EQ(third.events[1].seq, id);
  EXPECT_FALSE(m.hasWork());
  EXPECT_EQ(m.stats().kv_blocks_used, 0);
  EXPECT_EQ(m.stats().generation_tokens, 3u);
  EXPECT_EQ(m.stats().prompt_tokens, 32u);
  EXPECT_EQ(m.step().duration, Duration(0));  // nothing to do takes no time
}

TEST(EngineModelTest, BatchingSlowsEachStepByTheBatchSize) {
  EngineModel m({.kv_cache_tokens = 4096, .decode_step = milliseconds(10), .batch_slowdown = 0.1});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(m.add({.prompt_tokens = 4, .output_tokens = 10}));
  m.step();  // the five prompts
  auto r = m.step();
  EXPECT_EQ(r.decoding, 5);
  EXPECT_EQ(r.duration, milliseconds(14));  // 10 ms + 4 × 10 % of it
}

TEST(EngineModelTest, AtMostMaxNumSeqsRunAndTheRestWaitInOrder) {
  EngineModel m({.kv_cache_tokens = 4096, .max_num_seqs = 2});
  const SeqId a = *m.add({.prompt_tokens = 4, .output_tokens = 2});
  const SeqId b = *m.add({.prompt_tokens = 4, .output_tokens = 5});
  const SeqId c = *m.add({.prompt_tokens = 4, .output_tokens = 1});
  m.step();
  EXPECT_EQ(m.stats().running, 2);
  EXPECT_EQ(m.stats().waiting, 1);
  auto r = m.step();                // a finishes
  EXPECT_EQ(m.stats().waiting, 1);  // admitted only when a step starts with a free slot
  r = m.step();
  bool c_scheduled = false;
  for (const auto& e : r.events) c_scheduled |= e.seq == c && e.kind == EventKind::kScheduled;
  EXPECT_TRUE(c_scheduled);
  auto events = drain(m);
  (void)a;
  (void)b;
  EXPECT_EQ(m.stats().kv_blocks_used, 0);
}

TEST(EngineModelTest, ChunkedPrefillSpreadsALongPromptOverSteps) {
  EngineModel m({.kv_cache_tokens = 4096, .max_batched_tokens = 16});
  ASSERT_TRUE(m.add({.prompt_tokens = 40, .output_tokens = 1}));
  EXPECT_EQ(m.step().prompt_tokens, 16);
  EXPECT_EQ(m.step().prompt_tokens, 16);
  auto last = m.step();
  EXPECT_EQ(last.prompt_tokens, 8);
  ASSERT_EQ(last.events.size(), 2u);
  EXPECT_EQ(last.events[0].kind, EventKind::kToken);
  EXPECT_EQ(last.events[1].kind, EventKind::kFinished);
}

TEST(EngineModelTest, WhenTheKvCacheIsFullTheNewestIsPreemptedAndRecomputed) {
  // 4 blocks of 16 tokens; two sequences that each grow to 3 blocks cannot both fit.
  EngineModel m({.kv_cache_tokens = 64, .block_tokens = 16});
  const SeqId a = *m.add({.prompt_tokens = 16, .output_tokens = 30});
  const SeqId b = *m.add({.prompt_tokens = 16, .output_tokens = 30});
  std::map<SeqId, std::vector<int64_t>> tokens;
  std::map<SeqId, int> finished;
  int64_t max_used = 0;
  while (m.hasWork()) {
    auto r = m.step();
    max_used = std::max(max_used, m.stats().kv_blocks_used);
    for (const auto& e : r.events) {
      if (e.kind == EventKind::kToken) tokens[e.seq].push_back(e.index);
      if (e.kind == EventKind::kFinished) ++finished[e.seq];
    }
  }
  EXPECT_GE(m.stats().preemptions, 1u);
  EXPECT_LE(max_used, 4);
  for (SeqId id : {a, b}) {
    // Every token exactly once, in order, recomputation or not.
    ASSERT_EQ(tokens[id].size(), 30u) << id;
    for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(tokens[id][static_cast<size_t>(i)], i);
    EXPECT_EQ(finished[id], 1);
  }
  // Recomputation costs prompt tokens beyond the two prompts.
  EXPECT_GT(m.stats().prompt_tokens, 32u);
  EXPECT_EQ(m.stats().kv_blocks_used, 0);
}

TEST(EngineModelTest, ASharedPromptPrefixIsComputedOnce) {
  EngineModel m({.kv_cache_tokens = 4096, .block_tokens = 16});
  // Four full blocks and a partial one.
  ASSERT_TRUE(
      m.add({.prompt_tokens = 70, .block_hashes = hashes({1, 2, 3, 4}), .output_tokens = 1}));
  drain(m);
  EXPECT_EQ(m.stats().prefix_hits, 0u);
  EXPECT_EQ(m.stats().prefix_queries, 70u);
  // The same first three blocks, then different ones.
  ASSERT_TRUE(
      m.add({.prompt_tokens = 70, .block_hashes = hashes({1, 2, 3, 9}), .output_tokens = 1}));
  auto r = m.step();
  EXPECT_EQ(r.prompt_tokens, 70 - 48);
  EXPECT_EQ(m.stats().prefix_hits, 48u);
  EXPECT_EQ(m.stats().prefix_queries, 140u);
  drain(m);
  // A prompt made only of cached blocks still computes its last token.
  ASSERT_TRUE(m.add({.prompt_tokens = 32, .block_hashes = hashes({1, 2}), .output_tokens = 1}));
  EXPECT_EQ(m.step().prompt_tokens, 16);
}

TEST(EngineModelTest, CachedBlocksAreEvictedLeastRecentlyUsedFirstWhenSpaceIsNeeded) {
  EngineModel m({.kv_cache_tokens = 64, .block_tokens = 16});  // 4 blocks
  ASSERT_TRUE(m.add({.prompt_tokens = 33, .block_hashes = hashes({1, 2}), .output_tokens = 1}));
  drain(m);
  EXPECT_EQ(m.stats().kv_blocks_used, 0);  // cached, but free to reuse
  // A prompt that needs all four blocks evicts the cached ones.
  ASSERT_TRUE(m.add({.prompt_tokens = 63, .block_hashes = hashes({7, 8, 9}), .output_tokens = 1}));
  drain(m);
  ASSERT_TRUE(m.add({.prompt_tokens = 33, .block_hashes = hashes({1, 2}), .output_tokens = 1}));
  m.step();
  EXPECT_EQ(m.stats().prefix_hits, 0u);
}

TEST(EngineModelTest, PrefixCachingCanBeTurnedOff) {
  EngineModel m({.kv_cache_tokens = 4096, .prefix_caching = false});
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(
        m.add({.prompt_tokens = 70, .block_hashes = hashes({1, 2, 3, 4}), .output_tokens = 1}));
    drain(m);
  }
  EXPECT_EQ(m.stats().prefix_hits, 0u);
  EXPECT_EQ(m.stats().prompt_tokens, 140u);
}

TEST(EngineModelTest, ASequenceThatCanNeverFitIsRefusedAndAbortFreesItsSpace) {
  EngineModel m({.kv_cache_tokens = 64, .block_tokens = 16});
  auto refused = m.add({.prompt_tokens = 60, .output_tokens = 10});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("64"), std::string::npos);
  EXPECT_FALSE(m.add({.prompt_tokens = 0, .output_tokens = 1}));
  EXPECT_FALSE(m.add({.prompt_tokens = 1, .output_tokens = 0}));

  const SeqId a = *m.add({.prompt_tokens = 40, .output_tokens = 10});
  const SeqId b = *m.add({.prompt_tokens = 40, .output_tokens = 10});
  m.step();
  EXPECT_EQ(m.stats().running, 1);  // b does not fit beside a
  m.abort(a);
  EXPECT_EQ(m.stats().kv_blocks_used, 0);
  m.abort(b);
  EXPECT_FALSE(m.hasWork());
  m.abort(12345);  // unknown: nothing happens
}

TEST(EngineModelTest, SlowFactorScalesEveryStep) {
  EngineModel m({.kv_cache_tokens = 4096, .decode_step = milliseconds(10)});
  ASSERT_TRUE(m.add({.prompt_tokens = 4, .output_tokens = 3}));
  EXPECT_EQ(m.step().duration, milliseconds(10));
  EngineOptions slow = m.options();
  slow.slow_factor = 3;
  m.setTiming(slow);
  EXPECT_EQ(m.step().duration, milliseconds(30));
}

// Random load against the invariants: space never overcommitted, every sequence's tokens once
// and in order, one finish each, everything freed at the end — and the same events twice.
TEST(EngineModelTest, RandomLoadKeepsEveryInvariantAndIsDeterministic) {
  auto run = [](uint64_t seed) {
    std::mt19937_64 rng(seed);
    EngineModel m(
        {.kv_cache_tokens = 512, .block_tokens = 16, .max_num_seqs = 8, .max_batched_tokens = 96});
    std::map<SeqId, int64_t> expected_tokens;
    std::map<SeqId, int64_t> next_index;
    std::map<SeqId, int> finishes;
    std::vector<StepEvent> all;
    // Arrivals for 2,000 steps (more than it can serve: a queue forms), then until it drains.
    for (int step = 0; step < 2000 || (m.hasWork() && step < 1000000); ++step) {
      if (step < 2000 && rng() % 3 == 0) {
        SeqSpec spec;
        spec.prompt_tokens = 1 + static_cast<int64_t>(rng() % 200);
        spec.output_tokens = 1 + static_cast<int64_t>(rng() % 100);
        const uint64_t family = rng() % 4;  // a few shared prefixes
        for (int64_t k = 0; k < spec.prompt_tokens / 16; ++k) {
          spec.block_hashes.push_back(family * 1000 + static_cast<uint64_t>(k));
        }
        auto id = m.add(spec);
        if (id) expected_tokens[*id] = spec.output_tokens;
      }
      if (step < 2000 && rng() % 50 == 0 && !expected_tokens.empty()) {
        auto it = expected_tokens.begin();
        std::advance(it, static_cast<long>(rng() % expected_tokens.size()));
        if (finishes[it->first] == 0) {
          m.abort(it->first);
          expected_tokens.erase(it);
        }
      }
      auto r = m.step();
      const EngineStats s = m.stats();
      EXPECT_LE(s.kv_blocks_used, s.kv_blocks_total);
      EXPECT_LE(s.running, 8);
      for (const auto& e : r.events) {
        all.push_back(e);
        if (!expected_tokens.contains(e.seq)) continue;
        if (e.kind == EventKind::kToken) {
          EXPECT_EQ(e.index, next_index[e.seq]++) << "sequence " << e.seq;
        } else if (e.kind == EventKind::kFinished) {
          ++finishes[e.seq];
        }
      }
    }
    EXPECT_FALSE(m.hasWork());
    EXPECT_EQ(m.stats().kv_blocks_used, 0);
    EXPECT_GT(m.stats().prefix_hits, 0u);
    for (const auto& [id, n] : expected_tokens) {
      EXPECT_EQ(next_index[id], n) << "sequence " << id;
      EXPECT_EQ(finishes[id], 1) << "sequence " << id;
    }
    return all;
  };
  const auto first = run(42);
  const auto second = run(42);
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].seq, second[i].seq);
    EXPECT_EQ(first[i].kind, second[i].kind);
    EXPECT_EQ(first[i].index, second[i].index);
  }
}

TEST(EngineModelTest, PromptBlockHashesAreChainedOverFullBlocks) {
  const std::string a(200, 'a');
  std::string b = a;
  b[70] = 'b';  // in the second 64-character block
  const auto ha = promptBlockHashes(a, 64);
  const auto hb = promptBlockHashes(b, 64);
  ASSERT_EQ(ha.size(), 3u);  // 200 / 64: the partial block is not hashed
  ASSERT_EQ(hb.size(), 3u);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);
  EXPECT_NE(ha[2], hb[2]);  // identical third blocks, different prefixes
  EXPECT_NE(ha[0], ha[1]);  // identical blocks at different places differ
  EXPECT_TRUE(promptBlockHashes("short", 64).empty());
  EXPECT_TRUE(promptBlockHashes(a, 0).empty());
}

}  // namespace
}  // namespace purser::sim
