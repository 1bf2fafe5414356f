#include "observe/prom_text.h"

#include <gtest/gtest.h>

#include "fakes/mutate.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/json.h"

namespace purser::observe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

const Sample* find(const Exposition& e, std::string_view name,
                   const std::vector<std::pair<std::string_view, std::string_view>>& with = {}) {
  for (const Sample& s : e.samples) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : with) all = all && label(s, k) == v;
    if (all) return &s;
  }
  return nullptr;
}

const Family* family(const Exposition& e, std::string_view name) {
  for (const Family& f : e.families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// What vLLM's /metrics serves (prometheus_client, format 0.0.4), trimmed.
const std::string kVllm =
    R"(# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.41
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 123456.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7636328e+09
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="meta-llama/Llama-3.1-8B-Instruct"} 90.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.005",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.02",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="meta-llama/Llama-3.1-8B-Instruct"} 30.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.06",model_name="meta-llama/Llama-3.1-8B-Instruct"} 55.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.08",model_name="meta-llama/Llama-3.1-8B-Instruct"} 70.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 80.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="meta-llama/Llama-3.1-8B-Instruct"} 95.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="meta-llama/Llama-3.1-8B-Instruct"} 98.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.75",model_name="meta-llama/Llama-3.1-8B-Instruct"} 99.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 100.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="2.5",model_name="meta-llama/Llama-3.1-8B-Instruct"} 100.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 100.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 100.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.31
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",gpu_memory_utilization="0.9",num_gpu_blocks="27153"} 1.0
)";

// What NVIDIA's dcgm-exporter serves, trimmed.
const std::string kDcgm =
    R"(# HELP DCGM_FI_DEV_SM_CLOCK SM frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-5a3f9c1e-8d2b-4c7a-9e1f-0b6d2a4c8e10",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"} 1980
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-5a3f9c1e-8d2b-4c7a-9e1f-0b6d2a4c8e10",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15",container="vllm",namespace="inference",pod="vllm-0"} 87
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"} 12
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-5a3f9c1e-8d2b-4c7a-9e1f-0b6d2a4c8e10",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"} 73215
# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-5a3f9c1e-8d2b-4c7a-9e1f-0b6d2a4c8e10",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"} 0.853124
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-5a3f9c1e-8d2b-4c7a-9e1f-0b6d2a4c8e10",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",err_code="0",err_msg="No Error",DCGM_FI_DRIVER_VERSION="550.54.15"} 0
)";

const std::string kOpenMetrics = R"(# TYPE request_latency_seconds histogram
# UNIT request_latency_seconds seconds
# HELP request_latency_seconds How long requests took.
request_latency_seconds_bucket{le="0.1"} 3 1763632800.5 # {trace_id="abc123"} 0.067 1763632800.25
request_latency_seconds_bucket{le="1.0"} 8 1763632800.5
request_latency_seconds_bucket{le="+Inf"} 9 1763632800.5 # {trace_id="def456",span_id="7"} 3.2
request_latency_seconds_count 9 1763632800.5
request_latency_seconds_sum 5.25 1763632800.5
request_latency_seconds_created 1763630000.0 1763632800.5
# TYPE requests counter
# HELP requests Requests served.
requests_total{code="200"} 1027 1763632800
requests_created{code="200"} 1763630000
# TYPE build info
build_info{version="1.2.3",revision="abc"} 1
# TYPE state stateset
state{state="ready"} 1
state{state="draining"} 0
# TYPE queue_depth gaugehistogram
queue_depth_bucket{le="10"} 4
queue_depth_bucket{le="+Inf"} 5
queue_depth_gcount 5
queue_depth_gsum 21
# TYPE rpc_duration_seconds summary
rpc_duration_seconds{quantile="0.99"} 0.3
rpc_duration_seconds_sum 12.5
rpc_duration_seconds_count 40
# EOF
)";

TEST(PromTextTest, ReadsVllmMetrics) {
  auto e = parsePrometheusText(kVllm);
  ASSERT_TRUE(e.has_value()) << e.error().message;
  EXPECT_EQ(e->samples.size(), 24u);
  EXPECT_EQ(e->families.size(), 8u);

  const Sample* running = find(*e, "vllm:num_requests_running");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->value, 3.0);
  EXPECT_FALSE(running->timestamp_ms.has_value());
  EXPECT_EQ(label(*running, "model_name"), "meta-llama/Llama-3.1-8B-Instruct");
  EXPECT_EQ(label(*running, "engine"), "0");
  EXPECT_EQ(label(*running, "absent"), std::nullopt);
  ASSERT_NE(e->familyOf(*running), nullptr);
  EXPECT_EQ(e->familyOf(*running)->type, MetricType::kGauge);
  EXPECT_EQ(e->familyOf(*running)->help, "Number of requests in model execution batches.");

  EXPECT_EQ(find(*e, "vllm:kv_cache_usage_perc")->value, 0.41);
  EXPECT_EQ(find(*e, "vllm:prompt_tokens_created")->value, 1763632800.0);
  EXPECT_EQ(find(*e, "vllm:request_success_total", {{"finished_reason", "length"}})->value, 10.0);
  EXPECT_EQ(e->familyOf(*find(*e, "vllm:prompt_tokens_total"))->type, MetricType::kCounter);

  // Buckets, _count and _sum belong to the histogram family.
  const Sample* bucket = find(*e, "vllm:time_to_first_token_seconds_bucket", {{"le", "0.06"}});
  ASSERT_NE(bucket, nullptr);
  EXPECT_EQ(bucket->value, 55.0);
  EXPECT_EQ(e->familyOf(*bucket)->name, "vllm:time_to_first_token_seconds");
  EXPECT_EQ(e->familyOf(*bucket)->type, MetricType::kHistogram);
  EXPECT_EQ(e->familyOf(*find(*e, "vllm:time_to_first_token_seconds_sum"))->type,
            MetricType::kHistogram);
  // Labels are sorted by name whatever order they were written in.
  ASSERT_EQ(bucket->labels.size(), 3u);
  EXPECT_EQ(bucket->labels[0].first, "engine");
  EXPECT_EQ(bucket->labels[1].first, "le");
  EXPECT_EQ(bucket->labels[2].first, "model_name");

  const auto buckets =
      histogramBuckets(*e, "vllm:time_to_first_token_seconds",
                       {{"model_name", "meta-llama/Llama-3.1-8B-Instruct"}, {"engine", "0"}});
  ASSERT_EQ(buckets.size(), 14u);
  EXPECT_EQ(buckets.back().first, kInf);
  // p50: rank 50 falls in (0.04, 0.06] holding 30..55: 0.04 + 0.02 * 20/25.
  EXPECT_NEAR(histogramQuantile(0.5, buckets), 0.056, 1e-12);
  // p90: rank 90 in (0.1, 0.25] holding 80..95: 0.1 + 0.15 * 10/15.
  EXPECT_NEAR(histogramQuantile(0.9, buckets), 0.2, 1e-12);
  // p99: rank 99 is the top of (0.5, 0.75].
  EXPECT_NEAR(histogramQuantile(0.99, buckets), 0.75, 1e-12);
  EXPECT_TRUE(histogramBuckets(*e, "vllm:time_to_first_token_seconds", {{"engine", "1"}}).empty());
  EXPECT_TRUE(histogramBuckets(*e, "vllm:time_to_first_token", {}).empty());
}

TEST(PromTextTest, ReadsDcgmExporterMetrics) {
  auto e = parsePrometheusText(kDcgm);
  ASSERT_TRUE(e.has_value()) << e.error().message;
  EXPECT_EQ(e->samples.size(), 6u);
  EXPECT_EQ(e->families.size(), 5u);
  const Sample* util = find(*e, "DCGM_FI_DEV_GPU_UTIL", {{"gpu", "0"}});
  ASSERT_NE(util, nullptr);
  EXPECT_EQ(util->value, 87);
  EXPECT_EQ(label(*util, "UUID"), "GPU-5a3f9c1e-8d2b-4c7a-9e1f-0b6d2a4c8e10");
  EXPECT_EQ(label(*util, "Hostname"), "node-1");
  EXPECT_EQ(label(*util, "modelName"), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(label(*util, "pod"), "vllm-0");
  // Byte order: upper case sorts first.
  EXPECT_EQ(util->labels.front().first, "DCGM_FI_DRIVER_VERSION");
  EXPECT_EQ(util->labels.back().first, "pod");
  EXPECT_EQ(find(*e, "DCGM_FI_DEV_GPU_UTIL", {{"gpu", "1"}})->value, 12);
  EXPECT_DOUBLE_EQ(find(*e, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")->value, 0.853124);
  EXPECT_EQ(label(*find(*e, "DCGM_FI_DEV_XID_ERRORS"), "err_msg"), "No Error");
  EXPECT_EQ(family(*e, "DCGM_FI_DEV_FB_USED")->help, "Framebuffer memory used (in MiB).");
}

TEST(PromTextTest, ReadsOpenMetricsWithUnitsTimestampsAndExemplars) {
  for (const TextFormat format : {TextFormat::kAuto, TextFormat::kOpenMetrics}) {
    auto e = parsePrometheusText(kOpenMetrics, {}, format);
    ASSERT_TRUE(e.has_value()) << e.error().message;
    EXPECT_EQ(e->samples.size(), 18u);
    const Family* latency = family(*e, "request_latency_seconds");
    ASSERT_NE(latency, nullptr);
    EXPECT_EQ(latency->type, MetricType::kHistogram);
    EXPECT_EQ(latency->unit, "seconds");
    EXPECT_EQ(latency->help, "How long requests took.");

    const Sample* b = find(*e, "request_latency_seconds_bucket", {{"le", "0.1"}});
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->value, 3);
    EXPECT_EQ(b->timestamp_ms, 1763632800500);  // seconds with a fraction, exactly
    EXPECT_EQ(b->labels.size(), 1u);            // the exemplar's labels are not the sample's
    EXPECT_EQ(e->familyOf(*b), latency);
    EXPECT_EQ(e->familyOf(*find(*e, "request_latency_seconds_created")), latency);

    const Sample* requests = find(*e, "requests_total");
    ASSERT_NE(requests, nullptr);
    EXPECT_EQ(requests->timestamp_ms, 1763632800000);
    EXPECT_EQ(e->familyOf(*requests)->name, "requests");
    EXPECT_EQ(e->familyOf(*find(*e, "requests_created"))->name, "requests");
    EXPECT_EQ(e->familyOf(*find(*e, "build_info"))->type, MetricType::kInfo);
    EXPECT_EQ(e->familyOf(*find(*e, "state", {{"state", "draining"}}))->type,
              MetricType::kStateSet);
    for (const char* name : {"queue_depth_bucket", "queue_depth_gcount", "queue_depth_gsum"}) {
      ASSERT_NE(e->familyOf(*find(*e, name)), nullptr) << name;
      EXPECT_EQ(e->familyOf(*find(*e, name))->type, MetricType::kGaugeHistogram) << name;
    }
    for (const char* name :
         {"rpc_duration_seconds", "rpc_duration_seconds_sum", "rpc_duration_seconds_count"}) {
      EXPECT_EQ(e->familyOf(*find(*e, name))->type, MetricType::kSummary) << name;
    }
    // Rank 4.5 in (0.1, 1.0] holding 3..8.
    EXPECT_DOUBLE_EQ(histogramQuantile(0.5, histogramBuckets(*e, "request_latency_seconds")),
                     0.1 + 0.9 * 1.5 / 5);
  }
}

TEST(PromTextTest, SuffixesJoinAFamilyOnlyWhenItsTypeWritesThem) {
  auto e = parsePrometheusText(
      "# TYPE g gauge\ng_total 1\ng_bucket{le=\"1\"} 1\n"
      "# TYPE c counter\nc_total 1\nc_bucket 1\nc_info 1\n"
      "# TYPE i info\ni_info 1\ni_total 1\n"
      "# HELP u no type\nu 1\nu_total 1\n"
      "# TYPE x counter\n# TYPE x_total gauge\nx_total 5\n"
      "later_total 3\n# TYPE later counter\n");
  ASSERT_TRUE(e.has_value()) << e.error().message;
  auto familyName = [&](std::string_view sample) -> std::string {
    const Family* f = e->familyOf(*find(*e, sample));
    return f ? f->name : "-";
  };
  EXPECT_EQ(familyName("g_total"), "-");
  EXPECT_EQ(familyName("g_bucket"), "-");
  EXPECT_EQ(familyName("c_total"), "c");
  EXPECT_EQ(familyName("c_bucket"), "-");
  EXPECT_EQ(familyName("c_info"), "-");
  EXPECT_EQ(familyName("i_info"), "i");
  EXPECT_EQ(familyName("i_total"), "-");
  EXPECT_EQ(familyName("u"), "u");
  EXPECT_EQ(familyName("u_total"), "-");
  EXPECT_EQ(familyName("x_total"), "x_total");    // the exact name wins
  EXPECT_EQ(familyName("later_total"), "later");  // metadata may come after the samples
  EXPECT_EQ(family(*e, "u")->type, MetricType::kUnknown);
  EXPECT_EQ(family(*e, "u")->help, "no type");
}

TEST(PromTextTest, DecodesEscapesAndUtf8) {
  auto e = parsePrometheusText(
      "# HELP m A \\\"quoted\\\" \\\\ help\\nwith C:\\path kept\n"
      "m{a=\"back\\\\slash\",b=\"q\\\"uote\",c=\"new\\nline\",d=\"caf\xC3\xA9 \xF0\x9F\x98\x80\","
      "e=\"\",f=\"# not a comment {}\"} 1\n");
  ASSERT_TRUE(e.has_value()) << e.error().message;
  EXPECT_EQ(e->families[0].help, "A \"quoted\" \\ help\nwith C:\\path kept");
  const Sample& s = e->samples.at(0);
  EXPECT_EQ(label(s, "a"), "back\\slash");
  EXPECT_EQ(label(s, "b"), "q\"uote");
  EXPECT_EQ(label(s, "c"), "new\nline");
  EXPECT_EQ(label(s, "d"), "caf\xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(label(s, "e"), "");
  EXPECT_EQ(label(s, "f"), "# not a comment {}");
}

TEST(PromTextTest, ToleratesCrlfBlanksCommentsAndLooseSpacing) {
  auto e = parsePrometheusText(
      "# a comment\r\n"
      "#HELP-ish comment\r\n"
      "\r\n"
      "   \t\r\n"
      "# HELP m help\r\n"
      "  m { a = \"1\" , b=\"2\", } \t 4.5 \t 1763632800\r\n"
      "m{} 1\r\n"
      "m 2\r\n"
      "\tm{a=\"x\",} +7\n"
      "#\n");
  ASSERT_TRUE(e.has_value()) << e.error().message;
  ASSERT_EQ(e->samples.size(), 4u);
  EXPECT_EQ(e->families.size(), 1u);
  EXPECT_EQ(e->families[0].help, "help");
  EXPECT_EQ(e->samples[0].labels.size(), 2u);
  EXPECT_EQ(label(e->samples[0], "b"), "2");
  EXPECT_EQ(e->samples[0].value, 4.5);
  EXPECT_EQ(e->samples[0].timestamp_ms, 1763632800000);
  EXPECT_TRUE(e->samples[1].labels.empty());
  EXPECT_EQ(e->samples[2].value, 2);
  EXPECT_EQ(e->samples[3].value, 7);
}

TEST(PromTextTest, ReadsValuesAsGoDoes) {
  const std::pair<std::string, double> good[] = {
      {"NaN", std::nan("")},
      {"nan", std::nan("")},
      {"+Inf", kInf},
      {"-Inf", -kInf},
      {"Inf", kInf},
      {"inf", kInf},
      {"-Infinity", -kInf},
      {"+1", 1},
      {"-0.25", -0.25},
      {"1.", 1},
      {".5", 0.5},
      {"1e3", 1000},
      {"1E+3", 1000},
      {"2.5e-3", 0.0025},
      {"1e-400", 0},   // underflow reads as zero, as Go reads it
      {"-1e-400", 0},  // (negative zero)
      {"0.0000000000000000000000000000001e-300", 0},
      {"18446744073709551616", 18446744073709551616.0},
      {"1.7976931348623157e308", 1.7976931348623157e308},
  };
  for (const auto& [text, want] : good) {
    auto e = parsePrometheusText("m " + text + "\n");
    ASSERT_TRUE(e.has_value()) << text << ": " << e.error().message;
    const double got = e->samples.at(0).value;
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << text;
    } else {
      EXPECT_EQ(got, want) << text;
    }
    EXPECT_EQ(parseSampleValue(text).has_value(), true) << text;
  }
  for (const std::string bad : {"-nan",     "+NaN", "nan(1)", "0x10",   "0x1p3",   "1_000", "1e",
                                "1e+",      ".",    "-",      "+",      "++1",     "+-1",   "infin",
                                "Infinite", "1,5",  "1e400",  "-1e400", "1.8e308", "\xff"}) {
    auto e = parsePrometheusText("m " + bad + "\n");
    ASSERT_FALSE(e.has_value()) << bad;
    EXPECT_EQ(e.error().line, 1) << bad;
    EXPECT_TRUE(isValidUtf8(e.error().message)) << bad;
    EXPECT_FALSE(parseSampleValue(bad).has_value()) << bad;
  }
  EXPECT_NE(parsePrometheusText("m 1e400").error().message.find("out of the range"),
            std::string::npos);
  EXPECT_NE(parsePrometheusText("m 0x10").error().message.find("is not a number"),
            std::string::npos);
}

TEST(PromTextTest, ReadsTimestampsInTheUnitOfTheFormat) {
  struct Case {
    std::string ts;
    TextFormat format;
    std::optional<int64_t> want;  // nullopt: refused
  };
  const Case cases[] = {
      // Auto without # EOF: the number of digits decides.
      {"1763632800", TextFormat::kAuto, 1763632800000},
      {"1763632800123", TextFormat::kAuto, 1763632800123},
      {"99999999999", TextFormat::kAuto, 99999999999000},  // 11 digits: seconds
      {"100000000000", TextFormat::kAuto, 100000000000},   // 12 digits: milliseconds
      {"-1763632800", TextFormat::kAuto, -1763632800000},
      {"+1763632800", TextFormat::kAuto, 1763632800000},
      {"1763632800.123", TextFormat::kAuto, 1763632800123},
      {"1763632800.1239", TextFormat::kAuto, 1763632800123},  // truncated, as Prometheus does
      {"1763632800.", TextFormat::kAuto, 1763632800000},
      {"-0.5", TextFormat::kAuto, -500},
      {"1.7636328e9", TextFormat::kAuto, 1763632800000},
      {"1e-3", TextFormat::kAuto, 1},
      {"9223372036854775807", TextFormat::kAuto, INT64_MAX},
      {"9223372036854775808", TextFormat::kAuto, std::nullopt},
      {"9223372036854775.807", TextFormat::kAuto, INT64_MAX},
      {"9223372036854775.808", TextFormat::kAuto, std::nullopt},
      {"1e300", TextFormat::kAuto, std::nullopt},
      {"NaN", TextFormat::kAuto, std::nullopt},
      {"+Inf", TextFormat::kAuto, std::nullopt},
      {"1_000", TextFormat::kAuto, std::nullopt},
      {"0x10", TextFormat::kAuto, std::nullopt},
      // Prometheus 0.0.4: integer milliseconds only.
      {"1763632800", TextFormat::kPrometheus, 1763632800},
      {"1763632800123", TextFormat::kPrometheus, 1763632800123},
      {"-5", TextFormat::kPrometheus, -5},
      {"1763632800.5", TextFormat::kPrometheus, std::nullopt},
      {"1e3", TextFormat::kPrometheus, std::nullopt},
      {"99999999999999999999", TextFormat::kPrometheus, std::nullopt},
      // OpenMetrics: seconds, whatever the digits.
      {"1763632800123", TextFormat::kOpenMetrics, 1763632800123000},
      {"1763632800.5", TextFormat::kOpenMetrics, 1763632800500},
      {"1e300", TextFormat::kOpenMetrics, std::nullopt},
  };
  for (const Case& c : cases) {
    std::string text = "m 1 " + c.ts + "\n";
    if (c.format == TextFormat::kOpenMetrics) text += "# EOF\n";
    auto e = parsePrometheusText(text, {}, c.format);
    if (!c.want) {
      ASSERT_FALSE(e.has_value()) << c.ts;
      EXPECT_EQ(e.error().line, 1);
      EXPECT_NE(e.error().message.find("timestamp"), std::string::npos) << e.error().message;
      continue;
    }
    ASSERT_TRUE(e.has_value()) << c.ts << ": " << e.error().message;
    EXPECT_EQ(e->samples.at(0).timestamp_ms, c.want) << c.ts;
  }
  // A text whose last line is # EOF is OpenMetrics in auto: 13 digits are seconds there.
  auto om = parsePrometheusText("m 1 1763632800123\n# EOF");
  ASSERT_TRUE(om.has_value());
  EXPECT_EQ(om->samples.at(0).timestamp_ms, 1763632800123000);
  // The incident excerpts' shape.
  auto incident = parsePrometheusText(
      "vllm:kv_cache_usage_perc{instance=\"a\",model_name=\"m\"} 0.41 1763632800\n");
  ASSERT_TRUE(incident.has_value());
  EXPECT_EQ(incident->samples.at(0).timestamp_ms, 1763632800000);
  EXPECT_EQ(label(incident->samples.at(0), "instance"), "a");
}

TEST(PromTextTest, SkipsExemplarsButChecksTheirShape) {
  auto e = parsePrometheusText(
      "a_total 1 # {trace_id=\"x\"} 1.0\n"
      "b_total 2 1763632800 # {trace_id=\"y\",} 0.5 1763632800.123\n"
      "c_total 3 #{} 1\n"
      "d_total 4 # {trace_id=\"z\"} NaN\t\n");
  ASSERT_TRUE(e.has_value()) << e.error().message;
  ASSERT_EQ(e->samples.size(), 4u);
  EXPECT_TRUE(e->samples[0].labels.empty());
  EXPECT_EQ(e->samples[1].value, 2);
  EXPECT_EQ(e->samples[1].timestamp_ms, 1763632800000);
}

struct BadCase {
  std::string text;
  int line;  // of the text after the three-line prefix the test adds
  std::string says;
};

TEST(PromTextTest, RefusesMalformedLinesNamingTheLine) {
  const BadCase cases[] = {
      {"foo", 1, "the sample foo has no value"},
      {"foo{a=\"b\"}", 1, "has no value"},
      {"foo{", 1, "no closing '}'"},
      {"foo{a=\"b\"", 1, "no closing '}'"},
      {"foo{a=\"b\",", 1, "no closing '}'"},
      {"foo{a} 1", 1, "expected '=' after the label name a"},
      {"foo{a=b} 1", 1, "must be in double quotes"},
      {"foo{a=\"b} 1", 1, "label value has no closing quote"},
      {"foo{a=\"b\\", 1, "label value has no closing quote"},
      {"foo{a=\"\\t\"} 1", 1, "unknown escape \"\\t\" in a label value"},
      {"foo{a=\"\\u00e9\"} 1", 1, "unknown escape"},
      {"foo{a=\"\xff\"} 1", 1, "label value is not valid UTF-8"},
      {"foo{a=\"\xC0\xAF\"} 1", 1, "label value is not valid UTF-8"},
      {"foo{a=\"\xED\xA0\x80\"} 1", 1, "label value is not valid UTF-8"},
      {"foo{a=\"\xE2\x82\"} 1", 1, "label value is not valid UTF-8"},
      {"foo{a=\"1\",a=\"2\"} 1", 1, "label a is given twice"},
      {"foo{b=\"1\",a=\"0\",b=\"2\"} 1", 1, "label b is given twice"},
      {"foo{a=\"1\" b=\"2\"} 1", 1, "expected ',' or '}' after the value of label a"},
      {"foo{,} 1", 1, "expected a label name or '}'"},
      {"foo{1a=\"x\"} 1", 1, "expected a label name or '}'"},
      {"foo{a:b=\"x\"} 1", 1, "expected '=' after the label name a"},
      {"foo abc", 1, "sample value \"abc\" is not a number"},
      {"foo 1e999", 1, "out of the range of a double"},
      {"foo 1 2 3", 1, "unexpected text after the timestamp"},
      {"foo 1 abc", 1, "timestamp \"abc\" is not a number"},
      {"1foo 1", 1, "a sample line must start with a metric name"},
      {"{a=\"b\"} 1", 1, "must start with a metric name"},
      {"\"foo\" 1", 1, "must start with a metric name"},
      {"foo-bar 1", 1, "sample value \"-bar\" is not a number"},
      {"foo 1 # x", 1, "an exemplar after '#' must start with a label set"},
      {"foo 1 #", 1, "an exemplar after '#' must start with a label set"},
      {"foo 1 # {a=\"b\"}", 1, "the exemplar has no value"},
      {"foo 1 # {a=\"b\"} x", 1, "exemplar value \"x\" is not a number"},
      {"foo 1 # {a=\"b\"} 1 x", 1, "timestamp \"x\" is not a number"},
      {"foo 1 # {a=\"b\"} 1 2 3", 1, "unexpected text after the exemplar"},
      {"foo 1 # {a=\"\\q\"} 1", 1, "unknown escape \"\\q\" in an exemplar label value"},
      {"# TYPE foo bar", 1, "unknown metric type \"bar\""},
      {"# TYPE foo", 1, "# TYPE foo names no type"},
      {"# TYPE foo counter extra", 1, "unexpected text after # TYPE foo: \"extra\""},
      {"# TYPE foo-bar counter", 1, "# TYPE names an invalid metric name \"foo-bar counter\""},
      {"# TYPE foo counter\n# TYPE foo gauge", 2, "a second # TYPE for foo"},
      {"# HELP foo a\nfoo 1\n# HELP foo b", 3, "a second # HELP for foo"},
      {"# UNIT foo s\n# UNIT foo s", 2, "a second # UNIT for foo"},
      {"# UNIT foo s-x", 1, "the unit \"s-x\" is not a metric name"},
      {"# UNIT foo s x", 1, "unexpected text after # UNIT foo"},
      {"# HELP", 1, "# HELP must start with a metric name"},
      {"# HELP 9x", 1, "# HELP must start with a metric name"},
      {"# HELP foo \xff", 1, "HELP text is not valid UTF-8"},
      {"# EOF\nfoo 1", 2, "text follows # EOF"},
      {"foo 1\n# EOF\n\n", 3, "text follows # EOF"},
      {"foo 1\n# EOF\r\n\r\n", 3, "text follows # EOF"},
      {"\n\nfoo{a=\"\n\"} 1", 3, "label value has no closing quote"},
  };
  // Three good lines first, so the line numbers are counted, not assumed.
  const std::string prefix = "# HELP ok fine\nok{x=\"1\"} 1\n\n";
  for (const BadCase& c : cases) {
    auto e = parsePrometheusText(prefix + c.text);
    ASSERT_FALSE(e.has_value()) << c.text;
    EXPECT_EQ(e.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.error().line, 3 + c.line) << c.text;
    const std::string want = "line " + std::to_string(3 + c.line) + ": ";
    EXPECT_EQ(e.error().message.rfind(want, 0), 0u) << e.error().message;
    EXPECT_NE(e.error().message.find(c.says), std::string::npos)
        << "text: " << c.text << "\nmessage: " << e.error().message;
    EXPECT_TRUE(isValidUtf8(e.error().message)) << c.text;
  }
}

TEST(PromTextTest, FormatsAreHeldToTheirRules) {
  auto no_eof = parsePrometheusText("foo 1\nbar 2\n", {}, TextFormat::kOpenMetrics);
  ASSERT_FALSE(no_eof.has_value());
  EXPECT_NE(no_eof.error().message.find("must end with a # EOF line"), std::string::npos);
  EXPECT_EQ(no_eof.error().line, 2);
  EXPECT_FALSE(parsePrometheusText("", {}, TextFormat::kOpenMetrics).has_value());
  EXPECT_TRUE(parsePrometheusText("# EOF", {}, TextFormat::kOpenMetrics).has_value());
  EXPECT_TRUE(parsePrometheusText("# EOF\r\n", {}, TextFormat::kOpenMetrics).has_value());
  // # EOF ends the text in every format; an empty text is an empty exposition.
  EXPECT_FALSE(parsePrometheusText("# EOF\nfoo 1\n", {}, TextFormat::kPrometheus).has_value());
  auto empty = parsePrometheusText("");
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->samples.empty());
  // Only the exact line is the end; "# EOF " and "#EOF" are comments.
  auto comments = parsePrometheusText("# EOF \n#EOF\nfoo 1\n");
  ASSERT_TRUE(comments.has_value());
  EXPECT_EQ(comments->samples.size(), 1u);
}

TEST(PromTextTest, EnforcesEveryLimit) {
  auto says = [](const Result<Exposition>& e, std::string_view what) {
    return !e.has_value() && e.error().message.find(what) != std::string::npos;
  };
  {
    const std::string text = "foo 1\nbar 2\n";
    ParseLimits l;
    l.max_bytes = text.size();
    EXPECT_TRUE(parsePrometheusText(text, l).has_value());
    l.max_bytes = text.size() - 1;
    auto e = parsePrometheusText(text, l);
    EXPECT_TRUE(says(e, "the text is 12 bytes, more than the limit of 11"));
  }
  {
    ParseLimits l;
    l.max_line_bytes = 10;
    EXPECT_TRUE(parsePrometheusText("x 1\nfo{a=\"\"} 1\r\n", l).has_value());  // 10 bytes
    auto e = parsePrometheusText("x 1\nfo{a=\"1\"} 1\n", l);
    EXPECT_TRUE(says(e, "line 2: the line is 11 bytes, longer than the limit of 10"));
    EXPECT_TRUE(says(parsePrometheusText("# a very long comment\n", l), "line 1: the line is"));
  }
  {
    ParseLimits l;
    l.max_samples = 3;
    EXPECT_TRUE(parsePrometheusText("a 1\nb 2\n# c\nc 3\n", l).has_value());
    auto e = parsePrometheusText("a 1\nb 2\n# c\nc 3\nd 4\n", l);
    EXPECT_TRUE(says(e, "line 5: more than the limit of 3 samples"));
  }
  {
    ParseLimits l;
    l.max_families = 2;
    EXPECT_TRUE(parsePrometheusText("# HELP a x\n# TYPE a gauge\n# HELP b y\n", l).has_value());
    auto e = parsePrometheusText("# HELP a x\n# TYPE b gauge\n# UNIT c s\n", l);
    EXPECT_TRUE(says(e, "line 3: more than the limit of 2 metric families"));
  }
  {
    ParseLimits l;
    l.max_labels = 3;
    EXPECT_TRUE(parsePrometheusText("m{a=\"\",b=\"\",c=\"\",} 1 # {x=\"\",y=\"\",z=\"\"} 1", l)
                    .has_value());
    EXPECT_TRUE(says(parsePrometheusText("m{a=\"\",b=\"\",c=\"\",d=\"\"} 1", l),
                     "line 1: more than the limit of 3 labels in one set"));
    EXPECT_TRUE(says(parsePrometheusText("m 1 # {a=\"\",b=\"\",c=\"\",d=\"\"} 1", l),
                     "more than the limit of 3 labels"));
  }
  {
    ParseLimits l;
    l.max_label_value_bytes = 4;
    // Escapes count as the byte they decode to.
    EXPECT_TRUE(parsePrometheusText("m{a=\"\\\\\\\"\xC3\xA9\"} 1", l).has_value());
    EXPECT_TRUE(parsePrometheusText("m{a=\"abcd\"} 1", l).has_value());
    EXPECT_TRUE(says(parsePrometheusText("m{a=\"abcde\"} 1", l),
                     "a label value is longer than the limit of 4 bytes"));
    EXPECT_TRUE(says(parsePrometheusText("m{a=\"abc\xC3\xA9\"} 1", l), "longer than the limit"));
    EXPECT_TRUE(says(parsePrometheusText("m{a=\"\\n\\n\\n\\n\\n\"} 1", l), "longer than"));
  }
  {
    ParseLimits l;
    l.max_name_bytes = 4;
    EXPECT_TRUE(parsePrometheusText("# UNIT abcd abcd\nabcd{abcd=\"\"} 1", l).has_value());
    EXPECT_TRUE(says(parsePrometheusText("abcde 1", l),
                     "line 1: the metric name is longer than the limit of 4 bytes"));
    EXPECT_TRUE(says(parsePrometheusText("# HELP abcde x", l), "the metric name is longer"));
    EXPECT_TRUE(says(parsePrometheusText("m{abcde=\"\"} 1", l),
                     "the label name is longer than the limit of 4 bytes"));
    EXPECT_TRUE(says(parsePrometheusText("# UNIT m abcde", l),
                     "the unit is longer than the limit of 4 bytes"));
  }
}

TEST(PromTextTest, HostileShapesEndInAnErrorOrAValue) {
  // Long runs of what the grammar nests or repeats: each is read once, left to right.
  const std::string many_braces = "m" + std::string(60000, '{');
  EXPECT_FALSE(parsePrometheusText(many_braces).has_value());
  std::string many_labels = "m{";
  for (int i = 0; i < 64; ++i) many_labels += "l" + std::to_string(i) + "=\"v\",";
  EXPECT_TRUE(parsePrometheusText(many_labels + "} 1").has_value());
  EXPECT_FALSE(parsePrometheusText(many_labels + "x=\"\"} 1").has_value());
  const std::string nul("m{a=\"\0\"} 1\nm 2\0", 15);
  auto with_nul = parsePrometheusText(nul);
  ASSERT_FALSE(with_nul.has_value());  // the NUL after 2 is not a number's byte
  EXPECT_EQ(with_nul.error().line, 2);
  std::string many_lines;
  for (int i = 0; i < 100000; ++i) many_lines += "\n";
  many_lines += "x";
  auto last = parsePrometheusText(many_lines);
  ASSERT_FALSE(last.has_value());
  EXPECT_EQ(last.error().line, 100001);
}

TEST(PromTextTest, HistogramQuantileMatchesPromQL) {
  const std::vector<std::pair<double, double>> positive = {
      {0.1, 50}, {0.2, 70}, {1, 110}, {kInf, 120}};
  EXPECT_EQ(histogramQuantile(0, positive), 0);
  EXPECT_DOUBLE_EQ(histogramQuantile(0.25, positive), 0.06);  // 0.1 * 30/50
  EXPECT_DOUBLE_EQ(histogramQuantile(0.5, positive), 0.15);   // 0.1 + 0.1 * 10/20
  EXPECT_DOUBLE_EQ(histogramQuantile(0.9, positive), 0.96);   // 0.2 + 0.8 * 38/40
  EXPECT_EQ(histogramQuantile(0.95, positive), 1);            // in +Inf: the highest bound
  EXPECT_EQ(histogramQuantile(1, positive), 1);
  EXPECT_EQ(histogramQuantile(-0.1, positive), -kInf);
  EXPECT_EQ(histogramQuantile(1.1, positive), kInf);
  EXPECT_TRUE(std::isnan(histogramQuantile(std::nan(""), positive)));

  // The lowest bound is not positive: it is the answer inside the lowest bucket.
  const std::vector<std::pair<double, double>> negative = {
      {-0.2, 10}, {-0.1, 20}, {0.3, 20}, {kInf, 30}};
  EXPECT_EQ(histogramQuantile(0, negative), -0.2);
  EXPECT_EQ(histogramQuantile(0.2, negative), -0.2);
  EXPECT_DOUBLE_EQ(histogramQuantile(0.5, negative), -0.15);
  EXPECT_EQ(histogramQuantile(0.8, negative), 0.3);

  // Order does not matter; equal bounds add up (two series, sum by le).
  EXPECT_DOUBLE_EQ(histogramQuantile(0.5, {{kInf, 120}, {1, 110}, {0.1, 50}, {0.2, 70}}), 0.15);
  EXPECT_DOUBLE_EQ(histogramQuantile(0.5, {{1, 2}, {kInf, 4}, {1, 6}, {kInf, 8}}), 0.75);
  // Non-cumulative counts are lifted to their running maximum: (1,10) (2,10) (+Inf,10).
  EXPECT_DOUBLE_EQ(histogramQuantile(0.5, {{1, 10}, {2, 5}, {kInf, 10}}), 0.5);
  EXPECT_DOUBLE_EQ(histogramQuantile(0.25, {{4, 8}, {kInf, 8}}), 1);

  EXPECT_TRUE(std::isnan(histogramQuantile(0.5, {})));
  EXPECT_TRUE(std::isnan(histogramQuantile(0.5, {{kInf, 10}})));         // one bucket
  EXPECT_TRUE(std::isnan(histogramQuantile(0.5, {{1, 5}, {2, 10}})));    // no +Inf
  EXPECT_TRUE(std::isnan(histogramQuantile(0.5, {{1, 0}, {kInf, 0}})));  // no observations
  EXPECT_TRUE(std::isnan(histogramQuantile(0.5, {{std::nan(""), 3}, {kInf, 3}})));
  EXPECT_DOUBLE_EQ(histogramQuantile(0.5, {{std::nan(""), 3}, {2, 4}, {kInf, 4}}), 1);
  // PromQL's own edge: q = 0 with an empty lowest bucket divides 0 by 0.
  EXPECT_TRUE(std::isnan(histogramQuantile(0, {{1, 0}, {2, 4}, {kInf, 4}})));
}

// Prometheus text for an exposition, with every value and label escaped again.
std::string write(const Exposition& e) {
  auto escape = [](std::string_view s, bool quote) {
    std::string out;
    for (const char c : s) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '"' && quote) {
        out += "\\\"";
      } else {
        out += c;
      }
    }
    return out;
  };
  std::string out;
  for (const Family& f : e.families) out += "# HELP " + f.name + " " + escape(f.help, false) + "\n";
  for (const Sample& s : e.samples) {
    out += s.name + "{";
    for (const auto& [k, v] : s.labels) out += k + "=\"" + escape(v, true) + "\",";
    char value[64];
    std::snprintf(value, sizeof value, "%.17g", s.value);
    out += std::string("} ") + (std::isnan(s.value) ? "NaN" : value);
    if (s.timestamp_ms) out += " " + std::to_string(*s.timestamp_ms);
    out += "\n";
  }
  return out;
}

// Random edits of valid texts never crash the parser: each ends in an exposition that reads back
// the same once written out again, or in an error that names its line.
TEST(PromTextTest, MutatedTextsParseOrNameTheLine) {
  const std::vector<std::string> seeds = {kVllm.substr(0, 3000), kDcgm.substr(0, 2000),
                                          kOpenMetrics,
                                          "m{a=\"x\\\\y\\\"z\\n\xC3\xA9\"} NaN 1763632800\r\n"};
  const std::string alphabet = "{}\"=,#\\ \t\r\n.+-eE0123456789NaInf_:abz\xC3\xA9\xFF";
  std::mt19937 rng(20261120);
  size_t accepted = 0, refused = 0;
  for (int round = 0; round < 5000; ++round) {
    const std::string text = testing::mutated(seeds[rng() % seeds.size()], alphabet, rng);
    ParseLimits limits;
    limits.max_labels = 8;
    limits.max_label_value_bytes = 64;
    auto e = parsePrometheusText(text, limits);
    if (!e.has_value()) {
      ++refused;
      ASSERT_EQ(e.error().code, ErrorCode::kInvalidArgument);
      ASSERT_GE(e.error().line, 1) << text;
      ASSERT_EQ(e.error().message.rfind("line " + std::to_string(e.error().line) + ": ", 0), 0u)
          << e.error().message;
      ASSERT_TRUE(isValidUtf8(e.error().message));
      continue;
    }
    ++accepted;
    for (const Sample& s : e->samples) {
      ASSERT_LE(s.labels.size(), 8u);
      for (size_t i = 0; i < s.labels.size(); ++i) {
        ASSERT_TRUE(isValidUtf8(s.labels[i].second));
        ASSERT_LE(s.labels[i].second.size(), 64u);
        if (i > 0) {
          ASSERT_LT(s.labels[i - 1].first, s.labels[i].first);
        }
      }
      if (s.family) {
        ASSERT_LT(*s.family, e->families.size());
      }
    }
    ParseLimits relaxed;
    relaxed.max_line_bytes = 1 << 20;
    auto again = parsePrometheusText(write(*e), relaxed, TextFormat::kPrometheus);
    ASSERT_TRUE(again.has_value()) << again.error().message << "\n" << write(*e);
    ASSERT_EQ(again->samples.size(), e->samples.size());
    for (size_t i = 0; i < e->samples.size(); ++i) {
      const Sample& a = e->samples[i];
      const Sample& b = again->samples[i];
      ASSERT_EQ(a.name, b.name);
      ASSERT_EQ(a.labels, b.labels);
      ASSERT_TRUE(a.value == b.value || (std::isnan(a.value) && std::isnan(b.value)));
      ASSERT_EQ(a.timestamp_ms, b.timestamp_ms);
    }
    // A HELP text that ends in CR reads back without it: the CR is taken for a line ending.
    auto help = [](std::string h) {
      while (!h.empty() && h.back() == '\r') h.pop_back();
      return h;
    };
    for (size_t i = 0; i < e->families.size(); ++i) {
      ASSERT_EQ(help(again->families.at(i).help), help(e->families[i].help));
    }
  }
  // The mutations reach both sides.
  EXPECT_GT(accepted, 500u);
  EXPECT_GT(refused, 500u);
}

}  // namespace
}  // namespace purser::observe
