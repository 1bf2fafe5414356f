// Incident cases on demand: `purser sim incident`.
//
// generateIncident() writes one incident case — the YAML file `purser diagnose --case` is judged
// on, in the format of docs/incidents.md — for a named cause and a seed: a small GPU
// fleet behind Purser with healthy background traffic, one fault (optionally two at once, and red
// herrings) whose onset falls inside the window, the question an operator would ask about it,
// and the `expected:` answer. Every fault is told as the real systems would show it: the spec's
// "typical evidence" derived from a model (a continuous-batching queue per vLLM replica, GPU
// temperature and clocks, Kueue's quota accounting, Purser's routing with fallback, cooldowns and
// budgets), with every parameter drawn from the seed — magnitudes, onset and duration, sizes,
// names, which corroborating lines exist at all — and nothing in the case names the fault except
// `expected:`.
//
// incidentSuite() is the standard judging set: every cause, several seeds and sizes, some with a
// second simultaneous fault placed outside the question's scope.
//
// Pure and deterministic: the same spec gives the same bytes; nothing reads a clock. Safe to call
// from several threads at once (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace purser::sim {

struct IncidentSpec {
  std::string cause;  // one of incidentCauses()
  uint64_t seed = 1;
  std::string second_cause;  // "" = none; a second fault outside the question's scope
  bool red_herrings = true;
  int nodes = 0;          // 0 = drawn from the seed (2..5)
  int gpus_per_node = 0;  // 0 = drawn per node (2, 4 or 8 by GPU type)
  int samples = 41;
  int step_s = 30;
};

// The causes of docs/incidents.md §2, in its order.
const std::vector<std::string>& incidentCauses();

// The whole case as YAML text. Errors: kInvalidArgument for an unknown cause or parameter out of
// range (the message lists what is accepted) or a pair of causes that cannot coexist (the
// message says why); kFailedPrecondition when the fleet is too small to place the faults apart.
Result<std::string> generateIncident(const IncidentSpec& spec);

// The standard judging set: at least 6 specs per cause (2 of them with a second fault), all with
// red herrings.
std::vector<IncidentSpec> incidentSuite();

// "007-kv_cache_exhaustion+noisy_neighbor-s1234.yaml": a suite file's name (index from 1).
std::string incidentFileName(size_t index, const IncidentSpec& spec);

}  // namespace purser::sim
