// Kueue conformance: every scenario in the shared admission cases (translated from Kueue's own
// scheduler tests) gives Kueue's outcome. Normative: which workloads are admitted (queue, counts,
// flavors, usage by value), which are preempted (with reasons) and which stay pending.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "common/quantity.h"
#include "fleet_io/scenario.h"

namespace purser::fleet {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The shared folder: PURSER_SHARED_DIR when set, else ../shared beside the checkout (it may be
// absent: a plain clone has no such folder).
fs::path sharedCasesDir() {
  const char* env = std::getenv("PURSER_SHARED_DIR");
  const fs::path shared = env != nullptr && *env != '\0'
                              ? fs::path(env)
                              : fs::path(PURSER_SOURCE_DIR) / ".." / "shared";
  return shared / "specs" / "admission-cases";
}

// The cases the conformance claims rest on, kept in the repository (copied from the shared
// specs; see tests/fleet/admission-cases/README.md).
fs::path casesDir() { return fs::path(PURSER_SOURCE_DIR) / "tests" / "fleet" / "admission-cases"; }

std::vector<std::string> yamlFiles(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> caseFiles() { return yamlFiles(casesDir()); }

// Purser's own cases in the same format (not copied from the shared specs).
std::vector<std::string> hierarchicalCaseFiles() {
  return yamlFiles(fs::path(PURSER_SOURCE_DIR) / "tests" / "fleet" / "hierarchical-cases");
}

std::string readAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool sameQuantity(const json& a, const json& b) {
  const auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  auto x = Quantity::parse(text(a));
  auto y = Quantity::parse(text(b));
  return x && y && *x == *y;
}

// Compares one checkpoint's outcome with its `expect` block; returns the differences.
std::vector<std::string> compare(const json& expect, const json& actual) {
  std::vector<std::string> diffs;
  const json admitted = expect.value("admitted", json::object());
  const json got_admitted = actual.value("admitted", json::object());
  for (const auto& [name, want] : admitted.items()) {
    if (!got_admitted.contains(name)) {
      diffs.push_back(name + " should be admitted");
      continue;
    }
    const json& got = got_admitted[name];
    if (want.contains("cluster_queue") && want["cluster_queue"] != got["cluster_queue"]) {
      diffs.push_back(name + ": cluster_queue " + got["cluster_queue"].dump() +
                      " != " + want["cluster_queue"].dump());
    }
    const json want_pod_sets = want.value("pod_sets", json::object());
    for (const auto& [ps, w] : want_pod_sets.items()) {
      const json g = got["pod_sets"].value(ps, json::object());
      if (w.contains("count") && w["count"] != g.value("count", json())) {
        diffs.push_back(name + "/" + ps + ": count " + g.value("count", json()).dump() +
                        " != " + w["count"].dump());
      }
      if (w.contains("flavors") && w["flavors"] != g.value("flavors", json::object())) {
        diffs.push_back(name + "/" + ps + ": flavors " + g.value("flavors", json()).dump() +
                        " != " + w["flavors"].dump());
      }
      const json gu = g.value("usage", json::object());
      const json want_usage = w.value("usage", json::object());
      for (const auto& [res, q] : want_usage.items()) {
        if (!gu.contains(res) || !sameQuantity(gu[res], q)) {
          diffs.push_back(name + "/" + ps + ": usage of " + res + " " + gu.dump() +
                          " != " + w["usage"].dump());
        }
      }
    }
  }
  for (const auto& [name, _] : got_admitted.items()) {
    if (!admitted.contains(name)) diffs.push_back(name + " should not be admitted");
  }
  const json got_preempted = actual.value("preempted", json::object());
  if (expect.contains("preempted_one_of")) {
    const json one_of = expect["preempted_one_of"];
    if (expect.contains("preempted_count") &&
        got_preempted.size() != expect["preempted_count"].get<size_t>()) {
      diffs.push_back("preempted " + got_preempted.dump() + ", count should be " +
                      expect["preempted_count"].dump());
    }
    for (const auto& [name, _] : got_preempted.items()) {
      if (std::find(one_of.begin(), one_of.end(), name) == one_of.end()) {
        diffs.push_back(name + " should not be preempted");
      }
    }
  } else {
    const json preempted = expect.value("preempted", json::object());
    for (const auto& [name, want] : preempted.items()) {
      if (!got_preempted.contains(name)) {
        diffs.push_back(name + " should be preempted");
      } else if (want.contains("reason") && got_preempted[name]["reason"] != want["reason"]) {
        diffs.push_back(name + ": preemption reason " + got_preempted[name]["reason"].dump() +
                        " != " + want["reason"].dump());
      }
    }
    for (const auto& [name, _] : got_preempted.items()) {
      if (!preempted.contains(name)) diffs.push_back(name + " should not be preempted");
    }
  }
  const json still = expect.value("still_admitted", json::array());
  for (const auto& name : still) {
    if (got_preempted.contains(name.get<std::string>())) {
      diffs.push_back(name.get<std::string>() + " should keep its quota");
    }
  }
  const json got_pending = actual.value("pending", json::object());
  const json pending = expect.value("pending", json::object());
  for (const auto& [name, _] : pending.items()) {
    if (!got_pending.contains(name)) diffs.push_back(name + " should be pending");
  }
  return diffs;
}

class ConformanceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ConformanceTest, MatchesKueue) {
  auto scenario = loadScenario(GetParam());
  ASSERT_TRUE(scenario.has_value()) << scenario.error().toString();
  auto out = runScenario(*scenario);
  ASSERT_TRUE(out.has_value()) << out.error().toString();
  for (const auto& d : compare(scenario->expect, *out)) ADD_FAILURE() << d;
  const json steps = out->value("steps", json::array());
  ASSERT_EQ(steps.size(), scenario->steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    if (scenario->steps[i].expect.is_null()) continue;
    for (const auto& d : compare(scenario->steps[i].expect, steps[i])) {
      ADD_FAILURE() << "step " << i + 1 << ": " << d;
    }
  }
  if (HasFailure()) ADD_FAILURE() << "outcome: " << out->dump(1);
}

// The drain mode `purser serve` runs reaches the state Kueue's cycles reach, on every case that
// runs cycles: run until stable in both modes (each step too), the same workloads are admitted
// with the same flavors and usage, the same are preempted and the same are left pending.
TEST(ConformanceCases, TheDrainModeReachesTheStateKueuesCyclesReach) {
  int compared = 0;
  std::vector<std::string> files = caseFiles();
  for (const auto& f : hierarchicalCaseFiles()) files.push_back(f);
  for (const auto& file : files) {
    auto scenario = loadScenario(file);
    ASSERT_TRUE(scenario.has_value()) << scenario.error().toString();
    if (scenario->mode == Mode::kPreemptionTargets) continue;  // victims only: no cycle runs
    Scenario s = *scenario;
    s.mode = Mode::kUntilStable;
    RunStats kueue_stats, drain_stats;
    auto kueue = runScenario(s, CycleMode::kKueue, &kueue_stats);
    auto drain = runScenario(s, CycleMode::kDrain, &drain_stats);
    ASSERT_TRUE(kueue.has_value()) << file << ": " << kueue.error().toString();
    ASSERT_TRUE(drain.has_value()) << file << ": " << drain.error().toString();
    const auto names = [](const json& o, const char* key) {
      std::set<std::string> out;
      const json part = o.value(key, json::object());
      for (const auto& [name, _] : part.items()) out.insert(name);
      return out;
    };
    const auto same = [&](const json& k, const json& d, const std::string& where) {
      EXPECT_EQ(k.value("admitted", json::object()), d.value("admitted", json::object())) << where;
      EXPECT_EQ(names(k, "preempted"), names(d, "preempted")) << where;
      EXPECT_EQ(names(k, "pending"), names(d, "pending")) << where;
    };
    same(*kueue, *drain, file);
    const json ks = kueue->value("steps", json::array());
    const json ds = drain->value("steps", json::array());
    ASSERT_EQ(ks.size(), ds.size()) << file;
    for (size_t i = 0; i < ks.size(); ++i) same(ks[i], ds[i], file + " step " + std::to_string(i));
    EXPECT_GT(kueue_stats.cycles, 0) << file;
    EXPECT_GT(drain_stats.cycles, 0) << file;
    ++compared;
  }
  EXPECT_GE(compared, 10) << "too few cases run cycles for the comparison to say much";
}

std::string caseName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = fs::path(info.param).stem().string();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return "case_" + name;
}

INSTANTIATE_TEST_SUITE_P(AdmissionCases, ConformanceTest, ::testing::ValuesIn(caseFiles()),
                         caseName);
// Purser's own cases in the same format: fair sharing over nested cohorts, where the tournament
// compares cohorts, not ClusterQueues (derived from Kueue's tournament; see each file's notes).
INSTANTIATE_TEST_SUITE_P(HierarchicalCases, ConformanceTest,
                         ::testing::ValuesIn(hierarchicalCaseFiles()), caseName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ConformanceTest);

TEST(ConformanceCases, ArePresent) {
  // Without the cases the suite above would pass vacuously.
  EXPECT_GE(caseFiles().size(), 16u) << "no admission cases at " << casesDir().string();
}

TEST(ConformanceCases, AreInStepWithTheSharedSpecs) {
  const fs::path shared = sharedCasesDir();
  if (!fs::exists(shared)) {
    GTEST_SKIP() << "no shared folder beside the checkout to compare the copied admission cases "
                    "with (set PURSER_SHARED_DIR)";
  }
  std::set<std::string> ours, theirs;
  for (const auto& f : caseFiles()) ours.insert(fs::path(f).filename().string());
  for (const auto& f : yamlFiles(shared)) theirs.insert(fs::path(f).filename().string());
  EXPECT_EQ(ours, theirs) << "copy the shared admission cases into " << casesDir().string();
  for (const auto& name : theirs) {
    if (!ours.contains(name)) continue;
    EXPECT_EQ(readAll(casesDir() / name), readAll(shared / name))
        << name << " differs from the shared spec: copy it again";
  }
}

}  // namespace
}  // namespace purser::fleet
