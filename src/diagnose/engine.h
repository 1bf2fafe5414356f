// The diagnosis engine: from a Case (see case.h) to ranked findings, each naming a cause from a
// fixed vocabulary, its subject, a confidence and the evidence for it — the series with their
// interval and a summary ("0.42 -> 0.99"), the log lines and the events — with a plain
// explanation and next steps an operator may take.
//
// How it reasons, in the order a careful SRE would:
//   1. Every detector looks for one cause's signature on every object it applies to (a
//      replica's KV cache, a GPU's temperature and clocks, a provider's error counters, a
//      wallet's ratio, a ClusterQueue's quota...), comparing each object against its own
//      baseline at the start of the window and, where it has them, its peers. A signature needs
//      two independent sources to be strong (a metric and a log line, two metrics), because
//      any one source can be missing.
//   2. The question scopes the answer: it names an object and the inventory's relations lead
//      from it to what could be the cause (route -> replicas -> GPUs -> node; workload -> GPUs,
//      queue; team -> workloads, queues, wallets). Trouble outside the scope is not the answer,
//      however loud. The symptom weighs causes that produce it.
//   3. Causes explain effects: a configuration change shortly before a replica saturates is
//      the cause of the saturation; a fault anywhere in scope means a traffic change is not
//      the story. An explained finding stays in the list, ranked below its cause.
//   4. When nothing in scope stands out from noise, the answer is `none`.
//
// Pure: no I/O, no clock, no randomness; the same case gives the same answer.
// Thread-safety: a pure function over a const Case.
#pragma once

#include <string>
#include <vector>

#include "diagnose/case.h"

namespace purser::diagnose {

struct Evidence {
  enum class Kind { kMetric, kLog, kEvent };
  Kind kind = Kind::kMetric;
  // kMetric: a series (a histogram by its base name), the interval shown and what it did.
  std::string name;
  Labels labels;
  TimeMs from = 0;
  TimeMs to = 0;
  std::string summary;
  // kLog and kEvent: when and where.
  TimeMs time = 0;
  std::string source;
  std::string line;        // kLog
  std::string event_kind;  // kEvent
  std::string object;      // kEvent
  std::string message;     // kEvent
};

struct Finding {
  std::string cause;
  Subject subject;
  double confidence = 0;  // 0..1
  std::vector<Evidence> evidence;
  std::string explanation;
  std::vector<std::string> next_steps;
  TimeMs onset = 0;  // when the trouble began, as far as the evidence shows; 0 when unknown
};

struct Diagnosis {
  std::vector<Finding> findings;  // most likely first; a lone `none` when nothing is wrong
};

// The causes a finding may name (docs/incidents.md §2).
const std::vector<std::string>& causeVocabulary();

Diagnosis diagnose(const Case& c);

}  // namespace purser::diagnose
