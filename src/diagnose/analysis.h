// The analysis inside the diagnosis engine, shared by its files: one Analysis over a Case runs a
// table of detectors, a filter chain by domain, each adding candidate findings with their
// evidence; engine.cc ranks them. Each detector lives in the file of its domain:
//   detect_serving.cc   model servers and routes    detect_gpu.cc       GPUs, nodes, NVLink
//   detect_upstream.cc  upstream providers          detect_budget.cc    wallets
//   detect_queues.cc    the fleet's queues          detect_changes.cc   configuration changes
//   analysis.cc         the table, lookups over the case's series, logs and events, evidence
// The analysis reads only the Case: it includes no reader (diagnose_io reads incident files).
// Only the diagnosis engine's own files include this header.
#pragma once

#include "diagnose/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

#include "diagnose/signals.h"

namespace purser::diagnose {

constexpr TimeMs kMinute = 60'000;

inline bool contains(std::string_view hay, std::string_view needle) {
  return hay.find(needle) != std::string_view::npos;
}

inline std::string gpuName(const std::string& node, int64_t index) {
  return fmt::format("{}/{}", node, index);
}

// A logfmt value: key=value or key="quoted value".
inline std::optional<std::string> logfmtValue(std::string_view line, std::string_view key) {
  size_t pos = 0;
  while ((pos = line.find(key, pos)) != std::string_view::npos) {
    bool at_start = pos == 0 || line[pos - 1] == ' ';
    size_t eq = pos + key.size();
    if (at_start && eq < line.size() && line[eq] == '=') {
      size_t v = eq + 1;
      if (v < line.size() && line[v] == '"') {
        size_t end = v + 1;
        std::string out;
        while (end < line.size() && line[end] != '"') {
          if (line[end] == '\\' && end + 1 < line.size()) ++end;
          out += line[end++];
        }
        return out;
      }
      size_t end = line.find(' ', v);
      return std::string(line.substr(v, end == std::string_view::npos ? end : end - v));
    }
    pos = eq;
  }
  return std::nullopt;
}

// A subject written as a wallet scope ("team:ml", "user:dana", "key:ci").
inline std::optional<Subject> scopeSubject(std::string_view scope) {
  size_t colon = scope.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 >= scope.size()) {
    return std::nullopt;
  }
  std::string kind(scope.substr(0, colon));
  if (kind == "service_account" || kind == "agent") kind = "key";
  return Subject{kind, std::string(scope.substr(colon + 1))};
}

struct Candidate {
  Finding f;
  double strength = 0;
  std::vector<Subject> affects;  // objects it touches besides its subject
  bool explained = false;        // the effect of another finding
};

class Analysis {
 public:
  explicit Analysis(const Case& c) : c_(c) {
    for (const Series& s : c.series) by_name_[s.name].push_back(&s);
    for (const Deployment& d : c.inventory.deployments) deployments_[d.name] = &d;
    for (const Workload& w : c.inventory.workloads) workloads_[w.id()] = &w;
    for (const NodeInfo& n : c.inventory.nodes) nodes_[n.name] = &n;
    for (const Deployment& d : c.inventory.deployments) {
      for (int64_t g : d.gpus) gpu_users_[gpuName(d.node, g)].push_back({"deployment", d.name});
    }
    for (const Workload& w : c.inventory.workloads) {
      if (w.node.empty()) continue;
      for (int64_t g : w.gpus) gpu_users_[gpuName(w.node, g)].push_back({"workload", w.id()});
    }
    // The sample interval: the most common step of the first series.
    step_ = 30'000;
    if (!c.series.empty() && c.series.front().t.size() > 2) {
      step_ = std::max<TimeMs>(1, c.series.front().t[1] - c.series.front().t[0]);
    }
  }

  // Runs every detector over the case; the candidates they found, unranked.
  std::vector<Candidate> run();

  // The detectors, one per domain, in the order they run.
  struct Detector {
    const char* domain;
    void (Analysis::*run)();
  };
  static const std::vector<Detector>& detectors();

 private:
  // Each domain's detector: the checks of its file, in order.
  void serving();       // detect_serving.cc
  void gpusAndNodes();  // detect_gpu.cc
  void fleetQueues();   // detect_queues.cc

  // ------------------------------------------------------------------ lookups
  const std::vector<const Series*>& named(const std::string& name) const;

  std::vector<const Series*> select(
      const std::string& name,
      std::initializer_list<std::pair<std::string_view, std::string_view>> match) const;

  const Series* one(
      const std::string& name,
      std::initializer_list<std::pair<std::string_view, std::string_view>> match) const;

  // A model server's series: labelled with the replica's name as `instance` (incident files),
  // `target` (Purser's own scraper) or `pod` (Prometheus' Kubernetes discovery).
  const Series* engine(const std::string& name, const std::string& deployment) const;

  const Series* gpuSeries(const std::string& name, const std::string& node, int64_t index) const;

  // The per-interval mean of a histogram whose _sum and _count carry these labels.
  std::optional<std::pair<Points, const Series*>> histMean(const std::string& base,
                                                           const Labels& labels) const;

  std::optional<std::pair<Points, const Series*>> engineHist(const std::string& base,
                                                             const std::string& d) const;

  // ------------------------------------------------------------------ evidence
  Evidence metric(const Series& s, const Shift& sh, std::string summary,
                  std::string name = "") const;

  Evidence histEvidence(const Series& sum_series, const std::string& base, const Shift& sh,
                        const std::string& what) const;

  static Evidence log(const LogLine& l);

  static Evidence event(const Event& ev);

  // Log lines from `source` containing any of `needles`, oldest first.
  std::vector<const LogLine*> logs(std::string_view source,
                                   std::initializer_list<std::string_view> needles) const;

  // Adds up to `max` log lines as evidence: the first and the last, which show the span.
  static void addLogs(Finding& f, const std::vector<const LogLine*>& lines, size_t max = 2);

  // Latency of a replica: the larger relative rise of its mean TTFT and its mean ITL.
  struct Latency {
    Shift shift;
    const Series* sum = nullptr;
    std::string base;
    std::string what;
    double ratio = 1;
  };
  std::optional<Latency> replicaLatency(const std::string& d) const;

  void emit(Candidate c);

  // A counter that first appears inside the window was created by its first event (a
  // Prometheus client creates a labelled counter when it first counts): before that its rate
  // was 0, and its first value counts as an increase.
  bool lateStart(const Series& s) const;
  // Rates over at least kRateSpanMs: live series are sampled every second or faster, where a
  // few events a second would otherwise read as lone spikes between zeros.
  static constexpr TimeMs kRateSpanMs = 5000;
  Points rate(const Series& s) const;
  Points counterRate(const Series& s) const;
  double counterIncrease(const Series& s) const;

  // ------------------------------------------------------------------ detectors
  void kvCache(const Deployment& d);

  void saturation(const Deployment& d);

  void oomDeployment(const Deployment& d);

  void oomWorkloads();

  void oomObject(const Subject& subject, const std::string& source, const std::string& node,
                 const std::vector<int64_t>& gpus, std::vector<Subject> affects);

  bool hasGap(const Series& s) const;

  double capacityMiB(const std::string& node) const;

  // Route-level: all replicas saturated (capacity of the route), or a traffic change.
  void routeLevel();

  // Every replica of a route saturated at once: the route is short of capacity, not one replica.
  void routeSaturation();

  void trafficShift(const std::string& route);

  void gpus();

  static std::pair<std::string, int64_t> gpuKey(const Series& s);

  std::vector<Subject> gpuAffects(const std::string& node, int64_t index) const;

  void thermal(const std::string& node, int64_t index);

  void noisyNeighbor(const std::string& node, int64_t index);

  static bool criticalXid(int64_t code);

  struct XidLog {
    const LogLine* line = nullptr;
    int64_t code = 0;
    std::string pci;
  };

  std::vector<XidLog> xidLogs() const;

  // The GPU index a PCI address names on a node, from the kernel's "GPU at PCI:...: GPU-uuid"
  // line and the exporter's UUID label.
  std::optional<int64_t> gpuOfPci(const std::string& node, const std::string& pci) const;

  void hardwareFaults(const std::set<std::pair<std::string, int64_t>>& gpus);

  static std::string xidMeaning(int64_t code);

  // A training job's throughput from its log lines: "tps: 27,535" (tokens/s) or
  // "step_time=0.88s"; the first line of the last quarter when the job runs 20 % slower there
  // than in its first quarter.
  const LogLine* slowerSteps(const std::string& source) const;

  void nodesNvlink();

  // Outside providers: 5xx / connection failures, and 429s.
  void providers();

  void upstream(const std::string& target, bool rate_limited);

  void budgets();

  void budget(const std::string& scope);

  void queues();

  std::string queueOf(const std::string& object) const;

  void quota(const std::string& q);

  std::string teamOfQueue(const std::string& q) const;

  void churn(const std::string& q);

  void idle();

  // Audit changes that precede a change in behaviour of what they changed.
  static bool behaviourChange(const Event& ev);

  void configChanges();

  const Case& c_;
  std::unordered_map<std::string, std::vector<const Series*>> by_name_;
  std::map<std::string, const Deployment*> deployments_;
  std::map<std::string, const Workload*> workloads_;
  std::map<std::string, const NodeInfo*> nodes_;
  std::map<std::string, std::vector<Subject>> gpu_users_;
  TimeMs step_ = 30'000;
  std::vector<Candidate> out_;
};

}  // namespace purser::diagnose
