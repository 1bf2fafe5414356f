// Admission scenarios: one world (flavors, cohorts, ClusterQueues, LocalQueues, admitted and
// pending workloads) and what to run on it, in the YAML format `purser sim admission` reads
// (the format is specified with the conformance cases the project is tested against).
//
// Three modes: `single_cycle` runs one Kueue scheduling cycle; `preemption_targets` computes the
// victims for one incoming workload with a given flavor assignment; `until_stable` runs cycles
// until nothing changes, then applies each step's actions (create, finish) and runs again.
// The outcome is printed as JSON: admitted (with flavors and usage), preempted (with reasons),
// pending (with a reason and a message in plain words).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "fleet/engine.h"
#include "fleet/model.h"

namespace purser::fleet {

struct Features {
  bool partial_admission = true;
  bool fair_sharing = false;
  bool priority_sorting_within_cohort = true;
};

// preemption_targets: the flavor chosen per resource, and whether it needs preemption.
struct GivenFlavor {
  std::string flavor;
  bool preempt = false;
};
struct IncomingPodSet {
  int64_t count = 0;
  std::map<std::string, GivenFlavor> flavors;  // resource -> flavor
};
struct Incoming {
  Workload workload;
  std::map<std::string, IncomingPodSet> assignment;  // pod set name -> assignment
};

struct Step {
  std::vector<Workload> create;
  std::vector<std::string> finish;
  nlohmann::json expect;  // informational here; the tests compare against it
};

enum class Mode { kSingleCycle, kPreemptionTargets, kUntilStable };

struct Scenario {
  std::string id;
  std::string name;
  Mode mode = Mode::kSingleCycle;
  Features features;
  std::vector<ResourceFlavor> flavors;
  std::map<std::string, std::map<std::string, std::string>> namespaces;  // name -> labels
  std::vector<Cohort> cohorts;
  std::vector<ClusterQueue> cluster_queues;
  std::vector<LocalQueue> local_queues;
  std::vector<Workload> admitted;
  std::vector<Workload> pending;
  std::optional<Incoming> incoming;
  std::vector<Step> steps;
  nlohmann::json expect;
};

// Parses a scenario; errors name the file, line, column and field.
Result<Scenario> parseScenario(std::string_view yaml, const std::string& file_name);
Result<Scenario> loadScenario(const std::string& path);

// What a run took: scheduling cycles, and decisions (admissions and preemptions).
struct RunStats {
  int64_t cycles = 0;
  int64_t decisions = 0;
};

// Runs the scenario and returns the outcome as the JSON object `purser sim admission` prints.
// `mode`: Kueue's cycles (one head per ClusterQueue, as the conformance cases expect) or the
// drain mode `purser serve` runs (each cycle admits until nothing more fits; the same final state
// once run until stable, fewer cycles). `stats`, when given, learns what the run took.
Result<nlohmann::json> runScenario(const Scenario& scenario, CycleMode mode = CycleMode::kKueue,
                                   RunStats* stats = nullptr);

}  // namespace purser::fleet
