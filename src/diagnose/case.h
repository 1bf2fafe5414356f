// Case: what the diagnosis engine reasons over — a question, a window of time, the inventory
// (which replica runs where, which workload holds which GPUs, which team owns what), metric
// series, events (fleet, gateway, audit) and log lines. It is the same value whether it was read
// from an incident file (`purser diagnose --case FILE`, the format of docs/incidents.md)
// or assembled from Purser's own scraped series and records (live diagnosis), so the engine
// never knows where its input came from and never does I/O.
//
// diagnose_io/case_io.h reads and writes incident files, within CaseLimits (below).
//
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace purser::diagnose {

using TimeMs = int64_t;  // Unix time in milliseconds
using Labels = std::vector<std::pair<std::string, std::string>>;

// What the operator asks about. kind: route, deployment, workload, queue, team, user, node,
// fleet (name "*"). symptom: slow, errors, pending, over_budget, idle, any.
struct Question {
  std::string kind;
  std::string name;
  std::string symptom = "any";
};

// An object a finding names: {kind: gpu, name: "node-1/0"}, {kind: workload, name: "ml/t-7"}.
struct Subject {
  std::string kind;
  std::string name;
  friend bool operator==(const Subject&, const Subject&) = default;
};

struct NodeInfo {
  std::string name;
  int64_t gpus = 0;
  std::string gpu_type;  // "H100-80GB": the memory is read from the suffix when FB_FREE is absent
};

// A model-server replica Purser routes to.
struct Deployment {
  std::string name;
  std::string route;
  std::string provider;
  std::string node;
  std::vector<int64_t> gpus;
};

// A batch workload (Kueue's Workload). `node` is empty when it was never admitted.
struct Workload {
  std::string ns;
  std::string name;
  std::string queue;  // its ClusterQueue
  std::string node;
  std::vector<int64_t> gpus;
  std::string id() const { return ns + "/" + name; }
};

struct Team {
  std::string name;
  std::string tenant;
};

struct Inventory {
  std::vector<NodeInfo> nodes;
  std::vector<Deployment> deployments;
  std::vector<Workload> workloads;
  std::vector<Team> teams;
};

// One series: its samples in time order (a repeated or older timestamp is dropped on reading).
struct Series {
  std::string name;
  Labels labels;  // sorted by name
  std::vector<TimeMs> t;
  std::vector<double> v;
  std::optional<std::string_view> label(std::string_view key) const;
};

struct Event {
  TimeMs time = 0;
  std::string source;  // fleet, gateway, audit
  std::string kind;    // Kueue's reason (Preempted, Admitted...) or an audit action (route.update)
  std::string reason;
  std::string actor;
  std::string object;
  std::string message;
};

struct LogLine {
  TimeMs time = 0;
  std::string source;  // a deployment, `namespace/workload`, a node, or `purser`
  std::string line;
};

struct Case {
  std::string name;
  Question question;
  TimeMs start = 0;
  TimeMs end = 0;
  Inventory inventory;
  std::vector<Series> series;
  std::vector<Event> events;  // oldest first
  std::vector<LogLine> logs;  // oldest first
  // The answer a judged case carries (`expected:`); never read by the engine.
  std::optional<std::string> expected_cause;
  std::optional<Subject> expected_subject;
};

struct CaseLimits {
  size_t max_bytes = 512u << 20;
  size_t max_series = 200000;
  size_t max_samples = 20'000'000;
  size_t max_line_bytes = 64 * 1024;  // a metric sample line
  size_t max_events = 200000;
  size_t max_logs = 500000;
  size_t max_inventory = 100000;  // nodes, deployments, workloads and teams, each
};

// "2026-11-20T10:00:00Z" (or with a fraction of a second, or an offset) as Unix milliseconds.
std::optional<TimeMs> parseTime(std::string_view text);
// Unix milliseconds as "2026-11-20T10:00:00Z" (whole seconds), or with the milliseconds
// ("2026-11-20T10:00:00.250Z") when `millis` is set and there are any.
std::string formatTime(TimeMs t, bool millis = false);

}  // namespace purser::diagnose
