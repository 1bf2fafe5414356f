#include "observe/observation.h"

#include <gtest/gtest.h>

namespace purser::observe {
namespace {

using std::chrono::milliseconds;

class ObservationTest : public ::testing::Test {
 protected:
  void SetUp() override { store = *SeriesStore::create(); }

  void gauge(const std::string& name, const std::string& target, int64_t t_ms, double v,
             Labels extra = {}) {
    extra.emplace_back("target", target);
    ASSERT_EQ(store->append(SeriesKey(name, extra), t_ms, v), AppendStatus::kAppended);
  }

  // A TTFT histogram for `target` whose observations over the window all fall at `seconds`
  // (cumulative buckets 0.1, 0.5, 1, 2.5, +Inf).
  void ttft(const std::string& target, int64_t t_ms, double count_at_or_below_05,
            double count_total) {
    const std::vector<std::pair<std::string, double>> buckets = {{"0.1", 0},
                                                                 {"0.5", count_at_or_below_05},
                                                                 {"1", count_at_or_below_05},
                                                                 {"2.5", count_total},
                                                                 {"+Inf", count_total}};
    for (const auto& [le, v] : buckets) {
      gauge("vllm:time_to_first_token_seconds_bucket", target, t_ms, v, {{"le", le}});
    }
  }

  std::unique_ptr<SeriesStore> store;
};

TEST_F(ObservationTest, ReadsGaugesPercentilesAndRatesOfOneTargetOnly) {
  const int64_t t0 = 1'000'000;
  for (int64_t s = 0; s <= 60; ++s) {
    const int64_t t = t0 + s * 1000;
    // Two model names on one server: queues add up, KV usage is the larger.
    gauge("vllm:num_requests_waiting", "a", t, 2, {{"model_name", "x"}});
    gauge("vllm:num_requests_waiting", "a", t, 3, {{"model_name", "y"}});
    gauge("vllm:kv_cache_usage_perc", "a", t, 0.4, {{"model_name", "x"}});
    gauge("vllm:kv_cache_usage_perc", "a", t, 0.7, {{"model_name", "y"}});
    gauge("vllm:num_requests_waiting", "b", t, 40);
    gauge("vllm:num_preemptions_total", "a", t, static_cast<double>(s * 2));
    gauge("vllm:prefix_cache_queries_total", "a", t, static_cast<double>(s * 100));
    gauge("vllm:prefix_cache_hits_total", "a", t, static_cast<double>(s * 25));
    // 100 requests over the minute: 90 within 0.5 s, 10 between 1 and 2.5 s.
    ttft("a", t, static_cast<double>(s) * 1.5, static_cast<double>(s) * 100.0 / 60.0);
  }
  const int64_t now = t0 + 60'000;
  Observation o = observeTarget(*store, "a", profileOf(EngineKind::kVllm), now, 60'000, 5'000);
  ASSERT_TRUE(o.queue);
  EXPECT_DOUBLE_EQ(*o.queue, 5);
  ASSERT_TRUE(o.kv_usage);
  EXPECT_DOUBLE_EQ(*o.kv_usage, 0.7);
  EXPECT_FALSE(o.running) << "never reported";
  ASSERT_TRUE(o.preemptions_per_s);
  EXPECT_DOUBLE_EQ(*o.preemptions_per_s, 2);
  ASSERT_TRUE(o.prefix_hit_rate);
  EXPECT_DOUBLE_EQ(*o.prefix_hit_rate, 0.25);
  ASSERT_TRUE(o.ttft_p95_s);
  // Rank 95 of 100 falls in (1, 2.5] holding ranks 91..100: 1 + 1.5 × (95-90)/10.
  EXPECT_NEAR(*o.ttft_p95_s, 1.75, 1e-9);
  EXPECT_EQ(o.newest_ms, now);

  // Stale gauges are not believed.
  Observation later =
      observeTarget(*store, "a", profileOf(EngineKind::kVllm), now + 10'000, 60'000, 5'000);
  EXPECT_FALSE(later.queue);
  EXPECT_FALSE(later.kv_usage);
  // An unknown target has nothing.
  Observation none = observeTarget(*store, "zz", profileOf(EngineKind::kVllm), now, 60'000, 5'000);
  EXPECT_FALSE(none.queue);
  EXPECT_FALSE(none.ttft_p95_s);
}

TEST_F(ObservationTest, OlderVllmNamesAreReadWhenTheNewOnesAreAbsent) {
  gauge("vllm:gpu_cache_usage_perc", "a", 1000, 0.9);
  Observation o = observeTarget(*store, "a", profileOf(EngineKind::kVllm), 1000, 60'000, 5'000);
  ASSERT_TRUE(o.kv_usage);
  EXPECT_DOUBLE_EQ(*o.kv_usage, 0.9);
}

TEST(EngineProfileTest, KeepsOnlyTheFamiliesItReads) {
  const EngineProfile& vllm = profileOf(EngineKind::kVllm);
  EXPECT_TRUE(vllm.keeps("vllm:num_requests_waiting"));
  EXPECT_TRUE(vllm.keeps("vllm:time_to_first_token_seconds_bucket"));
  EXPECT_TRUE(vllm.keeps("vllm:time_to_first_token_seconds_count"));
  EXPECT_FALSE(vllm.keeps("vllm:time_to_first_token_seconds_created"));
  EXPECT_FALSE(vllm.keeps("vllm:request_params_n_bucket"));
  EXPECT_FALSE(vllm.keeps("python_gc_objects_collected_total"));
  const EngineProfile& dcgm = profileOf(EngineKind::kDcgm);
  EXPECT_TRUE(dcgm.keeps("DCGM_FI_DEV_GPU_UTIL"));
  EXPECT_FALSE(dcgm.keeps("go_goroutines"));
  EXPECT_TRUE(profileOf(EngineKind::kSglang).keeps("sglang:num_queue_reqs"));
  EXPECT_TRUE(profileOf(EngineKind::kTgi).keeps("tgi_queue_size"));
  EXPECT_TRUE(parseEngineKind("sglang"));
  auto bad = parseEngineKind("triton");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("vllm, sglang, tgi and dcgm"), std::string::npos);
  EXPECT_EQ(engineKindName(*parseEngineKind("tgi")), "tgi");
}

TEST(JudgeTargetTest, EachStateWithItsReason) {
  ServiceObjectives slo{.ttft_p95 = milliseconds(2000), .itl_p95 = milliseconds(100)};
  TargetEvidence fresh{.scraped = true, .fresh = true};
  fresh.observation.queue = 1;
  fresh.observation.kv_usage = 0.3;
  fresh.observation.ttft_p95_s = 0.5;
  fresh.observation.itl_p95_s = 0.02;
  EXPECT_EQ(judgeTarget(fresh, slo).state, TargetState::kHealthy);

  TargetEvidence queued = fresh;
  queued.observation.queue = 5;
  auto j = judgeTarget(queued, slo);
  EXPECT_EQ(j.state, TargetState::kSaturated);
  EXPECT_EQ(j.reason, "5 requests waiting (saturated at 5)");

  TargetEvidence full = fresh;
  full.observation.kv_usage = 0.93;
  j = judgeTarget(full, slo);
  EXPECT_EQ(j.state, TargetState::kSaturated);
  EXPECT_EQ(j.reason, "KV cache 93 % full (saturated at 80 %)");
  ServiceObjectives lenient = slo;
  lenient.saturation_kv = 0.95;
  EXPECT_EQ(judgeTarget(full, lenient).state, TargetState::kHealthy);

  TargetEvidence slow = fresh;
  slow.observation.ttft_p95_s = 3.2;
  j = judgeTarget(slow, slo);
  EXPECT_EQ(j.state, TargetState::kDegraded);
  EXPECT_EQ(j.reason, "time to first token p95 3200 ms over its objective 2000 ms");
  EXPECT_EQ(judgeTarget(slow, ServiceObjectives{}).state, TargetState::kHealthy)
      << "no objective, nothing to miss";

  TargetEvidence choppy = fresh;
  choppy.observation.itl_p95_s = 0.25;
  EXPECT_EQ(judgeTarget(choppy, slo).state, TargetState::kDegraded);

  TargetEvidence silent = fresh;
  silent.scrape_failures = 2;
  silent.fresh = false;
  j = judgeTarget(silent, slo);
  EXPECT_EQ(j.state, TargetState::kDown);
  EXPECT_EQ(j.reason, "its metrics did not answer the last 2 scrapes");
  silent.scrape_failures = 1;
  EXPECT_EQ(judgeTarget(silent, slo).state, TargetState::kUnknown);

  TargetEvidence cooling = fresh;
  cooling.cooling_down = true;
  cooling.consecutive_failures = 3;
  j = judgeTarget(cooling, slo);
  EXPECT_EQ(j.state, TargetState::kDown);
  EXPECT_EQ(j.reason, "3 requests failed in a row; cooling down");

  TargetEvidence xid = fresh;
  xid.gpu_fault = "GPU 0 on node-1 reported XID 79";
  j = judgeTarget(xid, slo);
  EXPECT_EQ(j.state, TargetState::kDown);
  EXPECT_EQ(j.reason, "GPU 0 on node-1 reported XID 79");
  EXPECT_EQ(judgeTarget({.gpu_fault = "GPU 1 on n reported XID 48"}, slo).state, TargetState::kDown)
      << "a GPU's fault is enough, scraped or not";

  TargetEvidence failing = fresh;
  failing.consecutive_failures = 1;
  EXPECT_EQ(judgeTarget(failing, slo).state, TargetState::kDegraded);

  // Without metrics: judged by its traffic.
  EXPECT_EQ(judgeTarget({.any_traffic = true}, slo).state, TargetState::kHealthy);
  j = judgeTarget({}, slo);
  EXPECT_EQ(j.state, TargetState::kUnknown);
  EXPECT_EQ(j.reason, "no traffic and no metrics");
  EXPECT_EQ(targetStateName(TargetState::kSaturated), "saturated");
}

TEST(JudgeTargetTest, PursersOwnMeasurementCountsWhateverTheServerSays) {
  const ServiceObjectives slo{.ttft_p95 = milliseconds(2000)};
  // A server whose own histograms look fine, while its answers reach Purser late.
  TargetEvidence fine{.scraped = true, .fresh = true};
  fine.observation.ttft_p95_s = 0.4;
  fine.measured_ttft_p95_s = 2.6;
  fine.measured = kMinMeasured;
  auto j = judgeTarget(fine, slo);
  EXPECT_EQ(j.state, TargetState::kDegraded);
  EXPECT_EQ(j.reason,
            "time to first token p95 2600 ms over its objective 2000 ms, as Purser measured its "
            "last 20 requests");
  fine.measured = kMinMeasured - 1;
  EXPECT_EQ(judgeTarget(fine, slo).state, TargetState::kHealthy) << "too few to judge by";
  // Without metrics (a hosted API): judged by its traffic, its measured latency included.
  TargetEvidence hosted{.any_traffic = true, .measured_ttft_p95_s = 3.0, .measured = 50};
  EXPECT_EQ(judgeTarget(hosted, slo).state, TargetState::kDegraded);
  hosted.measured_ttft_p95_s = 1.0;
  EXPECT_EQ(judgeTarget(hosted, slo).state, TargetState::kHealthy);
  hosted.measured_ttft_p95_s = 3.0;
  EXPECT_EQ(judgeTarget(hosted, ServiceObjectives{}).state, TargetState::kHealthy)
      << "no objective, nothing to miss";
  // Saturation and being down still come first.
  fine.measured = 100;
  fine.observation.queue = 9;
  EXPECT_EQ(judgeTarget(fine, slo).state, TargetState::kSaturated);
}

}  // namespace
}  // namespace purser::observe
