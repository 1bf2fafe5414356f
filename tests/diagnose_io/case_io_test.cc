#include "diagnose_io/case_io.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <tuple>

namespace purser::diagnose {
namespace {

const char* kMinimal = R"(name: t-1
question: {kind: route, name: chat, symptom: slow}
window: {start: "2026-11-20T10:00:00Z", end: "2026-11-20T10:30:00Z"}
inventory:
  nodes:
    - {name: gpu-1, gpus: 2, gpu_type: H100-80GB}
  deployments:
    - {name: llama-a, route: chat, provider: pool, node: gpu-1, gpus: [0, 1]}
  workloads:
    - {namespace: ml, name: train-7, queue: ml-cq, node: null, gpus: []}
  teams:
    - {name: ml, tenant: acme}
metrics: |
  vllm:kv_cache_usage_perc{instance="llama-a",model_name="m"} 0.41 1763632800
  vllm:kv_cache_usage_perc{instance="llama-a",model_name="m"} 0.42 1763632830

  odd{note="a b } c"} 1 1763632800
  vllm:kv_cache_usage_perc{instance="llama-a",model_name="m"} 0.43 1763632860
  vllm:kv_cache_usage_perc{instance="llama-a",model_name="m"} 0.40 1763632830
events:
  - {time: "2026-11-20T10:12:03Z", source: fleet, kind: Preempted, object: ml/train-7, reason: InClusterQueue, message: "x: y"}
logs:
  - {time: "2026-11-20T10:01:00Z", source: llama-a, line: "WARNING {braces} and: colons"}
expected:
  cause: kv_cache_exhaustion
  subject: {kind: deployment, name: llama-a}
)";

TEST(ParseCase, ReadsEveryPartAndKeepsTheSeriesInTimeOrder) {
  auto c = parseCase(kMinimal, "t.yaml");
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->name, "t-1");
  EXPECT_EQ(c->question.kind, "route");
  EXPECT_EQ(c->question.symptom, "slow");
  EXPECT_EQ(c->end - c->start, 30 * 60 * 1000);
  ASSERT_EQ(c->inventory.deployments.size(), 1u);
  EXPECT_EQ(c->inventory.deployments[0].gpus, (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(c->inventory.workloads.size(), 1u);
  EXPECT_EQ(c->inventory.workloads[0].node, "");  // never admitted
  EXPECT_EQ(c->inventory.workloads[0].id(), "ml/train-7");
  ASSERT_EQ(c->series.size(), 2u);
  const Series& kv = c->series[0];
  EXPECT_EQ(kv.name, "vllm:kv_cache_usage_perc");
  EXPECT_EQ(kv.label("instance"), std::optional<std::string_view>("llama-a"));
  // The out-of-order sample is dropped; the rest are kept in order.
  EXPECT_EQ(kv.t, (std::vector<TimeMs>{1763632800000, 1763632830000, 1763632860000}));
  EXPECT_DOUBLE_EQ(kv.v[2], 0.43);
  // A label value may hold blanks and braces.
  EXPECT_EQ(c->series[1].label("note"), std::optional<std::string_view>("a b } c"));
  ASSERT_EQ(c->events.size(), 1u);
  EXPECT_EQ(c->events[0].reason, "InClusterQueue");
  EXPECT_EQ(c->events[0].message, "x: y");
  ASSERT_EQ(c->logs.size(), 1u);
  EXPECT_EQ(c->logs[0].line, "WARNING {braces} and: colons");
  EXPECT_EQ(c->expected_cause, std::optional<std::string>("kv_cache_exhaustion"));
  EXPECT_EQ(c->expected_subject, (std::optional<Subject>(Subject{"deployment", "llama-a"})));
}

std::string withMetrics(const std::string& lines) {
  std::string text = kMinimal;
  size_t a = text.find("metrics: |\n");
  size_t b = text.find("events:");
  return text.substr(0, a) + "metrics: |\n" + lines + text.substr(b);
}

TEST(ParseCase, RefusesABadSampleWithItsLine) {
  struct Bad {
    std::string line;
    std::string says;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"  up{a=\"1\"} 1\n", "timestamp"},
           {"  up{a=\"1\"} x 1763632800\n", "not a sample value"},
           {"  up{a=\"1\"} 1 yesterday\n", "not a timestamp"},
           {"  up{a=\"1\" 1 1763632800\n", "not closed"},
           {"  up{a=\"\\q\"} 1 1763632800\n", "escape"},
           {"  up 1 1763632800 extra\n", "after the sample's timestamp"},
       }) {
    auto c = parseCase(withMetrics("  fine 1 1763632800\n" + bad.line), "t.yaml");
    ASSERT_FALSE(c) << bad.line;
    EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(c.error().line, 15) << c.error().toString();
    EXPECT_NE(c.error().message.find(bad.says), std::string::npos) << c.error().toString();
  }
}

TEST(ParseCase, RefusesInvalidUtf8AndMalformedYamlWithTheLine) {
  std::string text = kMinimal;
  text.replace(text.find("colons"), 6, "co\xff\xfens");
  auto c = parseCase(text, "t.yaml");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("UTF-8"), std::string::npos);
  EXPECT_EQ(c.error().line, 23);

  auto broken = parseCase("question: {kind: route, name: [\n", "t.yaml");
  ASSERT_FALSE(broken);
  EXPECT_EQ(broken.error().code, ErrorCode::kInvalidArgument);
}

TEST(ParseCase, RefusesUnknownKindsSymptomsAndABackwardsWindow) {
  std::string text = kMinimal;
  text.replace(text.find("symptom: slow"), 13, "symptom: sad");
  auto c = parseCase(text, "t.yaml");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("not a symptom"), std::string::npos);

  text = kMinimal;
  text.replace(text.find("10:30:00Z"), 9, "09:30:00Z");
  c = parseCase(text, "t.yaml");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("ends before it starts"), std::string::npos);

  text = kMinimal;
  text.replace(text.find("2026-11-20T10:12:03Z"), 20, "noon");
  c = parseCase(text, "t.yaml");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("not a time"), std::string::npos);
}

TEST(ParseCase, EnforcesItsLimits) {
  CaseLimits limits;
  limits.max_series = 1;
  auto c = parseCase(kMinimal, "t.yaml", limits);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("more than 1 series"), std::string::npos);

  limits = {};
  limits.max_samples = 2;
  c = parseCase(kMinimal, "t.yaml", limits);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("more than 2 samples"), std::string::npos);

  limits = {};
  limits.max_bytes = 100;
  c = parseCase(kMinimal, "t.yaml", limits);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("larger than 100 bytes"), std::string::npos);

  limits = {};
  limits.max_line_bytes = 40;
  c = parseCase(kMinimal, "t.yaml", limits);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("longer than 40 bytes"), std::string::npos);
}

TEST(ParseCase, HostileInputNeverCrashesTheReader) {
  // Deep nesting, a lone block header, garbage and truncations of a valid case: each is
  // refused or read, never a crash.
  std::string deep = "question: " + std::string(5000, '[') + "\n";
  EXPECT_FALSE(parseCase(deep, "t.yaml"));
  EXPECT_FALSE(parseCase("metrics: |\n", "t.yaml"));
  EXPECT_FALSE(parseCase(std::string("\0\x01\x02", 3), "t.yaml"));
  std::string text = kMinimal;
  for (size_t cut = 0; cut < text.size(); cut += 7) {
    (void)parseCase(text.substr(0, cut), "t.yaml");
  }
}

void expectSameCase(const Case& a, const Case& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.question.kind, b.question.kind);
  EXPECT_EQ(a.question.name, b.question.name);
  EXPECT_EQ(a.question.symptom, b.question.symptom);
  EXPECT_EQ(a.start, b.start);
  EXPECT_EQ(a.end, b.end);
  ASSERT_EQ(a.inventory.nodes.size(), b.inventory.nodes.size());
  ASSERT_EQ(a.inventory.deployments.size(), b.inventory.deployments.size());
  for (size_t i = 0; i < a.inventory.deployments.size(); ++i) {
    const auto& x = a.inventory.deployments[i];
    const auto& y = b.inventory.deployments[i];
    EXPECT_EQ(std::tie(x.name, x.route, x.provider, x.node, x.gpus),
              std::tie(y.name, y.route, y.provider, y.node, y.gpus));
  }
  ASSERT_EQ(a.inventory.workloads.size(), b.inventory.workloads.size());
  for (size_t i = 0; i < a.inventory.workloads.size(); ++i) {
    EXPECT_EQ(a.inventory.workloads[i].id(), b.inventory.workloads[i].id());
    EXPECT_EQ(a.inventory.workloads[i].node, b.inventory.workloads[i].node);
    EXPECT_EQ(a.inventory.workloads[i].gpus, b.inventory.workloads[i].gpus);
  }
  ASSERT_EQ(a.inventory.teams.size(), b.inventory.teams.size());
  ASSERT_EQ(a.series.size(), b.series.size());
  for (size_t i = 0; i < a.series.size(); ++i) {
    EXPECT_EQ(a.series[i].name, b.series[i].name);
    EXPECT_EQ(a.series[i].labels, b.series[i].labels);
    EXPECT_EQ(a.series[i].t, b.series[i].t) << a.series[i].name;
    EXPECT_EQ(a.series[i].v, b.series[i].v) << a.series[i].name;
  }
  ASSERT_EQ(a.events.size(), b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    const auto& x = a.events[i];
    const auto& y = b.events[i];
    EXPECT_EQ(std::tie(x.time, x.source, x.kind, x.reason, x.actor, x.object, x.message),
              std::tie(y.time, y.source, y.kind, y.reason, y.actor, y.object, y.message));
  }
  ASSERT_EQ(a.logs.size(), b.logs.size());
  for (size_t i = 0; i < a.logs.size(); ++i) {
    EXPECT_EQ(std::tie(a.logs[i].time, a.logs[i].source, a.logs[i].line),
              std::tie(b.logs[i].time, b.logs[i].source, b.logs[i].line));
  }
  EXPECT_EQ(a.expected_cause, b.expected_cause);
  EXPECT_EQ(a.expected_subject, b.expected_subject);
}

TEST(WriteCase, ReadsBackToTheSameCase) {
  auto c = parseCase(kMinimal, "t.yaml");
  ASSERT_TRUE(c) << c.error().toString();
  auto again = parseCase(writeCase(*c), "again.yaml");
  ASSERT_TRUE(again) << again.error().toString() << "\n" << writeCase(*c);
  expectSameCase(*c, *again);
}

TEST(WriteCase, KeepsMillisecondsAndEscapesWhatItMust) {
  // What live diagnosis assembles: sub-second samples and events, label values and messages
  // with quotes, backslashes, newlines and invalid UTF-8, values that are not plain numbers.
  Case c;
  c.name = "live";
  c.question = {"route", "chat \"x\"", "errors"};
  c.start = 1763632800123;
  c.end = 1763632920999;
  c.inventory.deployments.push_back({"vllm-a", "chat \"x\"", "vllm-a", "", {}});
  c.inventory.workloads.push_back({"ml", "t:7", "research", "node-a", {0, 3}});
  c.inventory.teams.push_back({"ml", "acme"});
  Series s;
  s.name = "purser_gateway_requests_total";
  s.labels = {{"code", "200"}, {"route", "a\\b\"c\nd"}, {"target", ""}};
  s.t = {1763632800200, 1763632800400, 1763632801000, 1763632801001};
  s.v = {1, 2.5, 1e-9, std::numeric_limits<double>::infinity()};
  c.series.push_back(s);
  c.events.push_back({1763632800250, "audit", "route.update", "", "dana \"ops\"", "chat",
                      "targets a, b -> b\nline two \xff"});
  c.logs.push_back({1763632801999, "purser", "upstream \"x\" said: {no}"});
  auto back = parseCase(writeCase(c), "live.yaml");
  ASSERT_TRUE(back) << back.error().toString() << "\n" << writeCase(c);
  c.events[0].message = "targets a, b -> b\nline two \xef\xbf\xbd";  // invalid UTF-8 replaced
  expectSameCase(c, *back);
}

TEST(Time, ParsesAndFormatsRfc3339) {
  EXPECT_EQ(parseTime("1970-01-01T00:00:00Z"), std::optional<TimeMs>(0));
  EXPECT_EQ(parseTime("2026-11-20T10:00:00Z"), std::optional<TimeMs>(1795168800000));
  EXPECT_EQ(parseTime("2026-11-20T10:00:00.250Z"), std::optional<TimeMs>(1795168800250));
  EXPECT_EQ(parseTime("2026-11-20T11:00:00+01:00"), std::optional<TimeMs>(1795168800000));
  EXPECT_EQ(parseTime("2024-02-29T00:00:00Z"), std::optional<TimeMs>(1709164800000));
  EXPECT_FALSE(parseTime("2026-13-01T00:00:00Z"));
  EXPECT_FALSE(parseTime("2026-11-20 10:00"));
  EXPECT_FALSE(parseTime("2026-11-20T10:00:00"));
  EXPECT_FALSE(parseTime("2026-11-20T10:00:00Zjunk"));
  EXPECT_EQ(formatTime(1795168800999), "2026-11-20T10:00:00Z");
  EXPECT_EQ(formatTime(1795168800999, true), "2026-11-20T10:00:00.999Z");
  EXPECT_EQ(formatTime(1795168800000, true), "2026-11-20T10:00:00Z");
}

}  // namespace
}  // namespace purser::diagnose
