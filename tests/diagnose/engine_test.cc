#include "diagnose/engine.h"
#include "diagnose_io/case_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>

#include "diagnose/answer.h"
#include "diagnose/case.h"
#include "sim/incident_gen.h"

namespace purser::diagnose {
namespace {

namespace fs = std::filesystem;

fs::path publicDir() {
  return fs::path(PURSER_SOURCE_DIR) / "tests" / "diagnose" / "incident-cases";
}

fs::path sharedDir() {
  const char* env = std::getenv("PURSER_SHARED_DIR");
  const fs::path shared = env != nullptr && *env != '\0'
                              ? fs::path(env)
                              : fs::path(PURSER_SOURCE_DIR) / ".." / "shared";
  return shared / "specs" / "incident-cases";
}

std::vector<std::string> yamlFiles(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".yaml") out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string readAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Case load(const std::string& file) {
  auto c = parseCase(readAll(publicDir() / file), file);
  EXPECT_TRUE(c) << c.error().toString();
  return c ? std::move(*c) : Case{};
}

class PublicCases : public testing::TestWithParam<std::string> {};

TEST_P(PublicCases, FirstFindingIsTheExpectedCauseWithRealEvidence) {
  Case c = load(GetParam());
  ASSERT_TRUE(c.expected_cause.has_value());
  Diagnosis d = diagnose(c);
  Score s = scoreAnswer(c, d);
  EXPECT_TRUE(s.top1) << "expected " << s.expected << ", got " << s.got;
  EXPECT_TRUE(s.evidence_real) << testing::PrintToString(s.problems);
  EXPECT_TRUE(s.evidence_enough);
  if (*c.expected_cause == "none") {
    EXPECT_EQ(d.findings.size(), 1u) << "a `none` answer carries no other finding";
  } else {
    EXPECT_GE(d.findings.front().evidence.size(), 2u);
    EXPECT_FALSE(d.findings.front().explanation.empty());
    EXPECT_FALSE(d.findings.front().next_steps.empty());
    EXPECT_GT(d.findings.front().confidence, 0.3);
  }
  // Every cause named is in the vocabulary; findings are ranked.
  for (size_t i = 0; i < d.findings.size(); ++i) {
    const auto& v = causeVocabulary();
    EXPECT_NE(std::find(v.begin(), v.end(), d.findings[i].cause), v.end());
    if (i > 0 && d.findings[0].cause != "none") {
      EXPECT_GE(d.findings[i - 1].confidence, d.findings[i].confidence);
    }
  }
  // Deterministic: the same case, the same answer.
  EXPECT_EQ(writeJson(toJson(diagnose(c))), writeJson(toJson(d)));
}

INSTANTIATE_TEST_SUITE_P(Shared, PublicCases, testing::ValuesIn(yamlFiles(publicDir())),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param.substr(0, info.param.find('.'));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(PublicCasesCopy, AreInStepWithTheSharedSpecs) {
  ASSERT_EQ(yamlFiles(publicDir()).size(), 16u);
  if (!fs::exists(sharedDir())) {
    GTEST_SKIP() << "the shared specs folder is not beside this checkout (a plain clone)";
  }
  EXPECT_EQ(yamlFiles(sharedDir()), yamlFiles(publicDir()));
  for (const std::string& f : yamlFiles(sharedDir())) {
    EXPECT_EQ(readAll(sharedDir() / f), readAll(publicDir() / f)) << f << " differs; copy it again";
  }
}

TEST(Diagnose, KvExhaustionIsFoundWithoutTheEngineLogLines) {
  // Some vLLM versions never print the RECOMPUTE line: the metrics alone must carry it.
  Case c = load("001-kv_cache_exhaustion.yaml");
  std::erase_if(c.logs,
                [](const LogLine& l) { return l.line.find("RECOMPUTE") != std::string::npos; });
  Diagnosis d = diagnose(c);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].cause, "kv_cache_exhaustion");
  EXPECT_EQ(d.findings[0].subject.name, "vllm-llama-8b-b");
  EXPECT_GE(d.findings[0].evidence.size(), 2u);
}

TEST(Diagnose, TroubleOutsideTheQuestionsScopeIsNotTheAnswer) {
  // The thermal case asked about a route none of whose replicas runs on the hot GPU.
  Case c = load("004-gpu_thermal_throttle.yaml");
  c.question = {"route", "no-such-route", "slow"};
  Diagnosis d = diagnose(c);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].cause, "none");
  // Asked about the whole fleet, the same trouble is the answer.
  c.question = {"fleet", "*", "any"};
  d = diagnose(c);
  EXPECT_EQ(d.findings[0].cause, "gpu_thermal_throttle");
  // And about the node that holds the GPU.
  c.question = {"node", "worker-gpu-9", "any"};
  d = diagnose(c);
  EXPECT_EQ(d.findings[0].cause, "gpu_thermal_throttle");
}

TEST(Diagnose, AHarmlessAuditChangeIsNotACause) {
  // 001 carries a tag-only route.update on the asked route, twelve minutes before the KV cache
  // fills: it must not be blamed.
  Case c = load("001-kv_cache_exhaustion.yaml");
  Diagnosis d = diagnose(c);
  for (const Finding& f : d.findings) EXPECT_NE(f.cause, "bad_config_change");
}

TEST(Diagnose, AConfigChangeWithNothingAfterItIsNotACause) {
  // The change of 009 without its effect: the replicas' series cut to before it.
  Case c = load("009-bad_config_change.yaml");
  TimeMs change = 0;
  for (const Event& e : c.events) {
    if (e.kind == "route.update") change = e.time;
  }
  ASSERT_NE(change, 0);
  for (Series& s : c.series) {
    while (!s.t.empty() && s.t.back() > change - 60'000) {
      s.t.pop_back();
      s.v.pop_back();
    }
  }
  Diagnosis d = diagnose(c);
  for (const Finding& f : d.findings) EXPECT_NE(f.cause, "bad_config_change");
}

TEST(Diagnose, AnEmptyCaseIsNone) {
  Case c;
  c.question = {"fleet", "*", "any"};
  c.start = 0;
  c.end = 1'200'000;
  Diagnosis d = diagnose(c);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].cause, "none");
  Score s = scoreAnswer(c, d);
  EXPECT_FALSE(s.top1);  // no expected block: nothing to score against
}

TEST(Diagnose, HostileValuesNeverCrashOrLeakNonFiniteConfidence) {
  Case c = load("001-kv_cache_exhaustion.yaml");
  c.question = {"fleet", "*", "any"};
  const double kInf = std::numeric_limits<double>::infinity();
  size_t i = 0;
  for (Series& s : c.series) {
    for (double& v : s.v) {
      switch (i++ % 7) {
        case 0:
          v = std::numeric_limits<double>::quiet_NaN();
          break;
        case 1:
          v = kInf;
          break;
        case 2:
          v = -kInf;
          break;
        case 3:
          v = 1e308;
          break;
        case 4:
          v = -1;
          break;
        default:
          break;
      }
    }
  }
  Diagnosis d = diagnose(c);
  ASSERT_FALSE(d.findings.empty());
  for (const Finding& f : d.findings) {
    EXPECT_TRUE(std::isfinite(f.confidence));
    EXPECT_GE(f.confidence, 0);
    EXPECT_LE(f.confidence, 1);
  }
  (void)writeJson(toJson(d));
}

TEST(Answer, MetricEvidenceCarriesItsPointsForDrawing) {
  Case c = load("001-kv_cache_exhaustion.yaml");
  Diagnosis d = diagnose(c);
  Json answer = toJson(d);
  attachPoints(answer, c, d);
  const Json& ev = answer["findings"][0]["evidence"];
  size_t drawn = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (ev[i]["kind"] != "metric") {
      EXPECT_FALSE(ev[i].contains("points"));
      continue;
    }
    ASSERT_TRUE(ev[i].contains("points"));
    if (ev[i]["points"].size() >= 2) ++drawn;
    for (const Json& p : ev[i]["points"]) ASSERT_EQ(p.size(), 2u);
  }
  EXPECT_GE(drawn, 2u) << writeJson(ev);
  // The KV cache gauge as it is: its peak is in the points.
  Evidence kv;
  kv.kind = Evidence::Kind::kMetric;
  kv.name = "vllm:kv_cache_usage_perc";
  kv.labels = {{"instance", "vllm-llama-8b-b"}};
  kv.from = c.start;
  kv.to = c.end;
  Json points = evidencePoints(c, kv);
  double peak = 0;
  for (const Json& p : points) peak = std::max(peak, p[1].get<double>());
  EXPECT_GE(peak, 0.97);
  EXPECT_LE(evidencePoints(c, kv, 10).size(), 10u);
}

TEST(Score, EvidenceMustNameWhatIsInTheCase) {
  Case c = load("007-upstream_errors.yaml");
  Evidence metric;
  metric.kind = Evidence::Kind::kMetric;
  metric.name = "purser_gateway_upstream_errors";  // a counter without _total
  metric.labels = {{"target", "azure-eu"}};
  EXPECT_TRUE(evidenceInCase(c, metric));
  metric.labels = {{"target", "nowhere"}};
  EXPECT_FALSE(evidenceInCase(c, metric));
  Evidence hist;
  hist.kind = Evidence::Kind::kMetric;
  hist.name = "purser_gateway_ttft_seconds";  // a histogram by its base name
  EXPECT_TRUE(evidenceInCase(c, hist));
  Evidence log;
  log.kind = Evidence::Kind::kLog;
  log.line = "level=warn component=gateway";
  EXPECT_TRUE(evidenceInCase(c, log));
  log.line = "short";
  EXPECT_FALSE(evidenceInCase(c, log));
  Evidence ev;
  ev.kind = Evidence::Kind::kEvent;
  ev.time = *parseTime("2026-10-22T10:28:12Z");
  ev.source = "gateway";
  ev.event_kind = "target.cooldown";
  ev.object = "agent-large/azure-eu";
  EXPECT_TRUE(evidenceInCase(c, ev));
  ev.object = "agent-large/other";
  EXPECT_FALSE(evidenceInCase(c, ev));
}

}  // namespace
}  // namespace purser::diagnose

namespace purser::diagnose {
namespace {

// The judging set the simulators generate (purser sim incident --suite): every cause, several
// sizes and seeds, red herrings, and two faults at once. Its score is recorded in the issue note;
// here it guards against regressions: nothing unreadable, every evidence item real, no false
// alarm on a `none` case, and the top-1 score at least what it was when the engine was tuned.
TEST(GeneratedSuite, IsAnsweredWithRealEvidenceAndNoFalseAlarms) {
  std::vector<sim::IncidentSpec> suite = sim::incidentSuite();
  ASSERT_GE(suite.size(), 100u);
  size_t right = 0;
  std::vector<std::string> misses;
  for (size_t i = 0; i < suite.size(); ++i) {
    std::string name = sim::incidentFileName(i + 1, suite[i]);
    auto text = sim::generateIncident(suite[i]);
    ASSERT_TRUE(text) << name << ": " << text.error().message;
    auto c = parseCase(*text, name);
    ASSERT_TRUE(c) << c.error().toString();
    Diagnosis d = diagnose(*c);
    Score s = scoreAnswer(*c, d);
    EXPECT_TRUE(s.evidence_real) << name << ": " << testing::PrintToString(s.problems);
    EXPECT_TRUE(s.evidence_enough) << name;
    EXPECT_FALSE(s.false_alarm) << name << " answered " << s.got;
    if (s.top1) {
      ++right;
    } else {
      misses.push_back(name + ": expected " + s.expected + ", got " + s.got);
    }
  }
  // 112 of 112 when this was written; a few misses are tolerated so that a better generator
  // does not fail the build, but each is listed.
  EXPECT_GE(right * 100, suite.size() * 95) << testing::PrintToString(misses);
  for (const std::string& m : misses) std::cerr << "miss (tolerated): " << m << "\n";
}

}  // namespace
}  // namespace purser::diagnose
