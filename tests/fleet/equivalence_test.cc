// The two cycle modes reach the same states: a property test over generated worlds.
//
// CycleMode::kDrain answers a head from a memo when its cohort tree has not changed since a head
// asking the same was nominated; CycleMode::kKueue nominates every head afresh. The claim is that
// the memo is invisible. Each scenario here is a small random world (flavors with taints, one or
// two resources, a cohort tree with its own quota, ClusterQueues with limits, policies and
// fungibility, workloads of a few shared shapes so the memo is hit, some admitted from the start)
// and a script of steps (finish, hold and release some workloads, submit a batch, run until
// stable) run on one engine per mode; after every step both must show the same workloads (state,
// queue, admission, reason, message), the same queue usage and the same events, cycle for cycle.
//
// Deterministic: the seed is fixed (PURSER_EQUIVALENCE_SEED overrides it, PURSER_EQUIVALENCE_CASES
// the number of scenarios). Scenario i uses seed + i, so a failure names the one seed that
// reproduces it alone, and prints the scenario in the YAML `purser sim admission` reads
// (PURSER_EQUIVALENCE_DUMP=1 prints every scenario run, with its events). Scenarios run on every
// core; the outcome does not depend on which ran where. So that a pass means something, the test
// counts the scenarios that preempted, borrowed, admitted partially and were answered from the
// memo, and expects each in a good share of them. A scenario that does not settle within the cap
// is a preemption loop (see loop_test.cc): it ends there, and the test fails naming its seed.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/quantity.h"
#include "fleet/engine.h"
#include "fleet/inventory.h"

namespace purser::fleet {
namespace {

constexpr uint64_t kDefaultSeed = 20250601;
// In `make test`: bounded by work so a busy machine never fails it; `make test-long` runs 10,000.
constexpr int kDefaultCases = 1'000;
// More cycles than any of these small worlds needs to settle; reaching it means a loop.
constexpr int64_t kCycleCap = 60;

constexpr const char* kGpu = "nvidia.com/gpu";
// ClusterQueues whose namespace selector leaves the workloads' namespace out (their heads are
// Misconfigured and take nothing; see FoundByGeneratorTest below).
constexpr int kMismatchedSelectorPercent = 4;

// mt19937_64's sequence is fixed by the standard; the library's distributions are not, so
// draws are taken from the raw output.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(mix(seed)) {}
  int below(int n) { return static_cast<int>(gen_() % static_cast<uint64_t>(n)); }
  int between(int lo, int hi) { return lo + below(hi - lo + 1); }
  bool chance(int percent) { return below(100) < percent; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(below(static_cast<int>(v.size())))];
  }
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i)
      std::swap(v[i - 1], v[static_cast<size_t>(below(static_cast<int>(i)))]);
  }

 private:
  static uint64_t mix(uint64_t x) {  // splitmix64, so neighbouring seeds start far apart
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  std::mt19937_64 gen_;
};

uint64_t envOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::strtoull(v, nullptr, 10);
}

// --- The generated scenario --------------------------------------------------------------------

struct Generated {
  uint64_t seed = 0;
  World world;
  EngineOptions options;
  std::vector<Workload> admitted;              // addAdmitted before anything runs
  std::vector<std::vector<Workload>> batches;  // batch 0 is submitted at the start
  std::map<std::string, int> shape_of;         // workload -> shape (what its pod sets are)
  // Nodes to place on (some scenarios): admission then also needs a placement, and both modes
  // must place alike.
  std::vector<InventoryNode> inventory;
};

// A step of the script after the start: workloads finished, held and released (hold() keeps a
// pending one out of admission), then workloads submitted.
struct Step {
  std::vector<std::string> finish;
  std::vector<std::string> hold;
  std::vector<std::string> release;
  std::vector<Workload> create;
};

bool matches(const ResourceFlavor& f, const PodSet& ps) {
  for (const auto& t : f.taints) {
    if (t.effect != "NoSchedule" && t.effect != "NoExecute") continue;
    if (!tolerates(ps.tolerations, t) && !tolerates(f.tolerations, t)) return false;
  }
  for (const auto& [k, v] : ps.node_selector) {
    auto it = f.node_labels.find(k);
    if (it != f.node_labels.end() && it->second != v) return false;
  }
  return true;
}

using QueueUse = std::map<std::pair<std::string, std::string>, Amount>;  // (flavor, resource)

// `w` as admitted to `cq` within the queue's nominal quota, on top of what `used` holds there (so
// any cohort tree holds it), with flavors chosen the way a real admission could; nothing when it
// does not fit.
std::optional<Workload> placed(Rng& rng, const Generated& g, const ClusterQueue& cq, Workload w,
                               const QueueUse& used) {
  QueueUse trial = used;
  Admission adm{.cluster_queue = cq.name};
  for (const auto& ps : w.pod_sets) {
    PodSetAssignment psa{.name = ps.name, .count = ps.count};
    if (ps.min_count && rng.chance(50))
      psa.count = rng.between(static_cast<int>(*ps.min_count), static_cast<int>(ps.count));
    for (const auto& group : cq.resource_groups) {
      bool asks = false;
      for (const auto& r : group.covered) asks = asks || ps.requests.count(r) != 0;
      if (!asks) continue;
      std::vector<const FlavorQuotas*> options;
      for (const auto& fq : group.flavors) options.push_back(&fq);
      rng.shuffle(options);
      bool placed = false;
      for (const FlavorQuotas* fq : options) {
        const ResourceFlavor* flavor = nullptr;
        for (const auto& f : g.world.flavors) flavor = f.name == fq->flavor ? &f : flavor;
        if (flavor == nullptr || !matches(*flavor, ps)) continue;
        bool fits = true;
        for (const auto& [r, per_pod] : ps.requests) {
          auto q = fq->resources.find(r);
          if (q == fq->resources.end()) continue;
          fits = fits && trial[{fq->flavor, r}] + per_pod * psa.count <= q->second.nominal;
        }
        if (!fits) continue;
        for (const auto& [r, per_pod] : ps.requests) {
          if (fq->resources.count(r) == 0) continue;
          trial[{fq->flavor, r}] += per_pod * psa.count;
          psa.flavors[r] = fq->flavor;
          psa.usage[r] = per_pod * psa.count;
        }
        placed = true;
        break;
      }
      if (!placed) return std::nullopt;
    }
    for (const auto& [r, _] : ps.requests) {
      if (psa.flavors.count(r) == 0) return std::nullopt;  // a resource no group covers
    }
    adm.pod_sets.push_back(std::move(psa));
  }
  w.admission = std::move(adm);
  w.cluster_queue = cq.name;
  w.local_queue.clear();
  w.admitted_ms = -1000 * rng.between(1, 3);  // before anything the engine admits; ties too
  return w;
}

Generated generate(uint64_t seed) {
  Rng rng(seed);
  Generated g;
  g.seed = seed;
  g.options.fair_sharing = rng.chance(30);
  g.options.partial_admission = rng.chance(70);
  g.options.priority_sorting_within_cohort = rng.chance(85);
  const std::vector<int32_t> priorities = {0, 10, 100};

  // Flavors; some tainted, some labelled by zone.
  const int nflavors = rng.between(1, 3);
  bool tainted = false;
  for (int i = 0; i < nflavors; ++i) {
    ResourceFlavor f{.name = fmt::format("f{}", i)};
    if (rng.chance(25)) {
      f.taints.push_back({.key = "spot", .value = "true", .effect = "NoSchedule"});
      tainted = true;
    }
    if (rng.chance(20)) f.node_labels["zone"] = fmt::format("z{}", i);
    g.world.flavors.push_back(std::move(f));
  }
  std::vector<std::string> resources = {"cpu"};
  if (rng.chance(40)) resources.push_back(kGpu);
  const auto units = [&](int most) { return static_cast<Amount>(rng.between(0, most)) * 1000; };
  g.world.namespaces["ns"] = {{"team", "a"}};

  // Cohorts: a forest (parents come earlier), some with quota of their own.
  const int ncohorts = rng.between(1, 3);
  for (int i = 0; i < ncohorts; ++i) {
    Cohort c{.name = fmt::format("c{}", i)};
    if (i > 0 && rng.chance(50)) c.parent = fmt::format("c{}", rng.below(i));
    if (rng.chance(25)) {
      ResourceGroup group{.covered = resources};
      for (const auto& f : g.world.flavors) {
        if (!rng.chance(60)) continue;
        FlavorQuotas fq{.flavor = f.name};
        for (const auto& r : resources) {
          Quota q{.nominal = units(4)};
          if (rng.chance(20)) q.lending_limit = units(4);
          fq.resources[r] = q;
        }
        group.flavors.push_back(std::move(fq));
      }
      if (!group.flavors.empty()) c.quotas.push_back(std::move(group));
    }
    if (g.options.fair_sharing && rng.chance(20)) {
      c.fair_weight_milli = rng.pick(std::vector<int64_t>{0, 500, 2000});
    }
    g.world.cohorts.push_back(std::move(c));
  }

  // ClusterQueues, one LocalQueue each. Nominal quotas are 0-10 units, in most scenarios less,
  // so that a handful of workloads contend for them.
  const int most_nominal = rng.pick(std::vector<int>{2, 3, 4, 6, 10});
  const int nqueues = rng.between(1, 5);
  for (int i = 0; i < nqueues; ++i) {
    ClusterQueue cq{.name = fmt::format("q{}", i)};
    if (rng.chance(85)) cq.cohort = fmt::format("c{}", rng.below(ncohorts));
    cq.strategy =
        rng.chance(50) ? QueueingStrategy::kBestEffortFifo : QueueingStrategy::kStrictFifo;
    // Mostly policies that do preempt. LowerOrNewerEqualPriority puts the workload's identity in
    // its signature (no two heads share a memo entry), so it is the rarer one.
    cq.preemption.within_cluster_queue = rng.chance(10) ? WithinClusterQueue::kNever
                                         : rng.chance(30)
                                             ? WithinClusterQueue::kLowerOrNewerEqualPriority
                                             : WithinClusterQueue::kLowerPriority;
    cq.preemption.reclaim_within_cohort = rng.chance(25)
                                              ? ReclaimWithinCohort::kNever
                                              : static_cast<ReclaimWithinCohort>(rng.between(1, 2));
    if (rng.chance(35)) {
      cq.preemption.borrow_within_cohort = BorrowWithinCohort::kLowerPriority;
      if (rng.chance(50))
        cq.preemption.max_priority_threshold = rng.pick(std::vector<int32_t>{0, 10});
    }
    cq.fungibility.when_can_borrow =
        rng.chance(50) ? WhenCanBorrow::kMayStopSearch : WhenCanBorrow::kTryNextFlavor;
    cq.fungibility.when_can_preempt =
        rng.chance(50) ? WhenCanPreempt::kTryNextFlavor : WhenCanPreempt::kMayStopSearch;
    cq.fungibility.preference = static_cast<FungibilityPreference>(rng.below(3));
    std::vector<std::string> order;
    for (const auto& f : g.world.flavors) order.push_back(f.name);
    rng.shuffle(order);
    std::vector<ResourceGroup> groups;
    if (resources.size() == 2 && nflavors >= 2 && rng.chance(40)) {
      // cpu and gpu in separate groups, each with its own flavors.
      const int split = rng.between(1, nflavors - 1);
      groups.push_back({.covered = {"cpu"}});
      groups.push_back({.covered = {kGpu}});
      for (int k = 0; k < nflavors; ++k) {
        groups[k < split ? 0 : 1].flavors.push_back({.flavor = order[static_cast<size_t>(k)]});
      }
    } else {
      groups.push_back({.covered = resources});
      const int n = rng.between(1, nflavors);
      for (int k = 0; k < n; ++k)
        groups[0].flavors.push_back({.flavor = order[static_cast<size_t>(k)]});
    }
    for (auto& group : groups) {
      for (auto& fq : group.flavors) {
        for (const auto& r : group.covered) {
          Quota q{.nominal = units(most_nominal)};
          if (rng.chance(25)) q.borrowing_limit = units(5);
          if (rng.chance(20))
            q.lending_limit = rng.between(0, static_cast<int>(q.nominal / 1000)) * Amount{1000};
          fq.resources[r] = q;
        }
      }
    }
    cq.resource_groups = std::move(groups);
    if (g.options.fair_sharing && rng.chance(20)) {
      cq.fair_weight_milli = rng.pick(std::vector<int64_t>{0, 500, 2000});
    }
    if (rng.chance(6)) {
      cq.namespace_selector = std::map<std::string, std::vector<std::string>>{{"team", {"a", "c"}}};
    } else if (rng.chance(kMismatchedSelectorPercent)) {
      cq.namespace_selector = std::map<std::string, std::vector<std::string>>{{"team", {"b"}}};
    }
    if (rng.chance(3)) cq.stop_policy = StopPolicy::kHold;
    g.world.local_queues.push_back(
        {.namespace_ = "ns", .name = fmt::format("lq{}", i), .cluster_queue = cq.name});
    g.world.cluster_queues.push_back(std::move(cq));
  }

  // A few shapes; every workload takes one, so many ask exactly the same.
  std::vector<std::vector<PodSet>> shapes(static_cast<size_t>(rng.between(1, 3)));
  for (auto& shape : shapes) {
    const int npodsets = rng.chance(25) ? 2 : 1;
    for (int p = 0; p < npodsets; ++p) {
      // Pod sets of 1-4 pods; most fit the scenario's typical queue (a workload that can never
      // fit only ever says ExceedsMaxQuota).
      PodSet ps{.name = p == 0 ? "main" : "workers", .count = rng.between(1, 4)};
      ps.requests["cpu"] = rng.pick(std::vector<Amount>{500, 1000, 1000, 2000, 3000});
      if (rng.chance(80)) {
        while (ps.count > 1 && ps.count * ps.requests["cpu"] > most_nominal * 1000) --ps.count;
        if (ps.requests["cpu"] > most_nominal * 1000) ps.requests["cpu"] = 500;
      }
      if (ps.count > 1 && rng.chance(35))
        ps.min_count = rng.between(1, static_cast<int>(ps.count) - 1);
      if (resources.size() == 2 && rng.chance(50)) {
        ps.requests[kGpu] = rng.pick(std::vector<Amount>{1000, 2000});
        if (rng.chance(20)) ps.requests.erase("cpu");
      }
      if (tainted && rng.chance(40)) {
        ps.tolerations.push_back(
            rng.chance(50)
                ? Toleration{.key = "spot", .op = "Exists"}
                : Toleration{
                      .key = "spot", .op = "Equal", .value = "true", .effect = "NoSchedule"});
      }
      if (rng.chance(10)) ps.node_selector["zone"] = fmt::format("z{}", rng.below(nflavors));
      shape.push_back(std::move(ps));
    }
  }

  // Workloads in 1-3 batches; priorities and creation times from a few values (ties). Mostly a
  // handful (every cycle costs, and ten thousand scenarios must run in seconds), now and then up
  // to twenty. Later batches lean to the top priority, so they find the quota taken and preempt.
  const int nworkloads = rng.chance(5) ? 0 : rng.chance(8) ? rng.between(9, 20) : rng.between(2, 5);
  g.batches.resize(rng.chance(20) ? 1 : rng.chance(80) ? 2 : 3);
  for (int k = 0; k < nworkloads; ++k) {
    const size_t batch = static_cast<size_t>(rng.below(static_cast<int>(g.batches.size())));
    const int shape = rng.below(static_cast<int>(shapes.size()));
    Workload w{.name = fmt::format("ns/w{}", k),
               .namespace_ = "ns",
               // Most go to one or two busy queues, where they contend.
               .local_queue =
                   fmt::format("lq{}", rng.below(rng.chance(70) ? std::min(nqueues, 2) : nqueues)),
               .priority = batch > 0 && rng.chance(70)    ? priorities.back()
                           : batch == 0 && rng.chance(50) ? priorities.front()
                                                          : rng.pick(priorities),
               .created_ms = 1000 * rng.below(6),
               .pod_sets = shapes[static_cast<size_t>(shape)]};
    g.shape_of[w.name] = shape;
    g.batches[batch].push_back(std::move(w));
  }

  // Some of the first batch already hold quota, within their queue's nominal quota.
  if (rng.chance(30)) {
    std::map<std::string, QueueUse> used;  // queue -> what the admitted ones hold
    std::vector<Workload> still;
    for (auto& w : g.batches[0]) {
      if (g.admitted.size() < 3 && rng.chance(50)) {
        const auto& cq = g.world.cluster_queues[static_cast<size_t>(rng.below(nqueues))];
        if (auto a = placed(rng, g, cq, w, used[cq.name])) {
          for (const auto& ps : a->admission->pod_sets) {
            for (const auto& [r, f] : ps.flavors) used[cq.name][{f, r}] += ps.usage.at(r);
          }
          g.admitted.push_back(std::move(*a));
          continue;
        }
      }
      still.push_back(w);
    }
    g.batches[0] = std::move(still);
  }
  // A third of the scenarios place on a small inventory: per flavor a few nodes carrying its
  // labels and taints, small enough that placement, not quota, is often what binds. Drawn from
  // a generator of its own, so the rest of the scenario is what it was without.
  Rng nodes(seed ^ 0x1a7e11);
  if (nodes.chance(33)) {
    const bool gpus = std::find(resources.begin(), resources.end(), kGpu) != resources.end();
    for (const auto& f : g.world.flavors) {
      for (int n = nodes.between(1, 3); n > 0; --n) {
        InventoryNode node;
        node.name = fmt::format("{}-n{}", f.name, n);
        node.labels = f.node_labels;
        node.taints = f.taints;
        node.cpu_milli = static_cast<Amount>(nodes.between(1, 6)) * 1000;
        node.memory_mib = 1 << 20;
        node.rack = fmt::format("r{}", nodes.below(2));
        for (int k = gpus ? nodes.between(0, 4) : 0; k > 0; --k) {
          const int index = static_cast<int>(node.gpus.size());
          node.gpus.push_back({index, "", "G", 16384, 0, index / 2, false});
        }
        g.inventory.push_back(std::move(node));
      }
    }
  }
  return g;
}

// --- The scenario as `purser sim admission` YAML -------------------------------------------------

std::string qty(Amount milli) { return "\"" + Quantity::fromMilli(milli).toString() + "\""; }

std::string resourcesYaml(const Resources& r) {
  std::string out;
  for (const auto& [k, v] : r) out += fmt::format("{}{}: {}", out.empty() ? "" : ", ", k, qty(v));
  return "{" + out + "}";
}

std::string podSetsYaml(const std::vector<PodSet>& pod_sets) {
  std::string out;
  for (const auto& ps : pod_sets) {
    std::string s = fmt::format("{{name: {}, count: {}", ps.name, ps.count);
    if (ps.min_count) s += fmt::format(", min_count: {}", *ps.min_count);
    s += ", requests: " + resourcesYaml(ps.requests);
    if (!ps.tolerations.empty()) {
      std::string ts;
      for (const auto& t : ps.tolerations) {
        ts += fmt::format("{}{{key: {}, operator: {}", ts.empty() ? "" : ", ", t.key, t.op);
        if (!t.value.empty()) ts += fmt::format(", value: \"{}\"", t.value);
        if (!t.effect.empty()) ts += fmt::format(", effect: {}", t.effect);
        ts += "}";
      }
      s += ", tolerations: [" + ts + "]";
    }
    for (const auto& [k, v] : ps.node_selector)
      s += fmt::format(", node_selector: {{{}: {}}}", k, v);
    out += (out.empty() ? "" : ", ") + s + "}";
  }
  return "[" + out + "]";
}

std::string workloadYaml(const Workload& w) {
  std::string s = fmt::format("{{name: {}", w.name);
  if (w.admission) {
    s += fmt::format(", cluster_queue: {}, admitted_at: {}", w.cluster_queue, qty(w.admitted_ms));
  } else {
    s += fmt::format(", local_queue: {}", w.local_queue);
  }
  s += fmt::format(", priority: {}, created: {}, pod_sets: {}", w.priority, qty(w.created_ms),
                   podSetsYaml(w.pod_sets));
  if (w.admission) {
    std::string a;
    for (const auto& ps : w.admission->pod_sets) {
      std::string fl;
      for (const auto& [r, f] : ps.flavors)
        fl += fmt::format("{}{}: {}", fl.empty() ? "" : ", ", r, f);
      a += fmt::format("{}{}: {{count: {}, flavors: {{{}}}, usage: {}}}", a.empty() ? "" : ", ",
                       ps.name, ps.count, fl, resourcesYaml(ps.usage));
    }
    s += ", assignment: {" + a + "}";
  }
  return s + "}";
}

std::string quotaYaml(const Quota& q) {
  std::string s = "{nominal: " + qty(q.nominal);
  if (q.borrowing_limit) s += ", borrowing_limit: " + qty(*q.borrowing_limit);
  if (q.lending_limit) s += ", lending_limit: " + qty(*q.lending_limit);
  return s + "}";
}

std::string flavorQuotasYaml(const std::vector<FlavorQuotas>& fqs) {
  std::string out;
  for (const auto& fq : fqs) {
    std::string rs;
    for (const auto& [r, q] : fq.resources)
      rs += fmt::format("{}{}: {}", rs.empty() ? "" : ", ", r, quotaYaml(q));
    out +=
        fmt::format("{}{{flavor: {}, resources: {{{}}}}}", out.empty() ? "" : ", ", fq.flavor, rs);
  }
  return "[" + out + "]";
}

std::string scenarioYaml(const Generated& g, const std::vector<Step>& steps) {
  static const char* kWithin[] = {"Never", "LowerPriority", "LowerOrNewerEqualPriority"};
  static const char* kReclaim[] = {"Never", "LowerPriority", "Any"};
  static const char* kPreference[] = {"null", "BorrowingOverPreemption", "PreemptionOverBorrowing"};
  std::string y = fmt::format(
      "# PURSER_EQUIVALENCE_SEED={} PURSER_EQUIVALENCE_CASES=1 reruns this scenario alone\n"
      "mode: until_stable\n"
      "features: {{partial_admission: {}, fair_sharing: {}, priority_sorting_within_cohort: {}}}\n",
      g.seed, g.options.partial_admission, g.options.fair_sharing,
      g.options.priority_sorting_within_cohort);
  y += "flavors:\n";
  for (const auto& f : g.world.flavors) {
    y += fmt::format("  - {{name: {}", f.name);
    for (const auto& [k, v] : f.node_labels) y += fmt::format(", node_labels: {{{}: {}}}", k, v);
    for (const auto& t : f.taints) {
      y += fmt::format(", taints: [{{key: {}, value: \"{}\", effect: {}}}]", t.key, t.value,
                       t.effect);
    }
    y += "}\n";
  }
  y += "namespaces: {ns: {team: a}}\ncohorts:\n";
  for (const auto& c : g.world.cohorts) {
    y += fmt::format("  - {{name: {}", c.name);
    if (!c.parent.empty()) y += ", parent: " + c.parent;
    if (!c.quotas.empty()) y += ", quotas: " + flavorQuotasYaml(c.quotas[0].flavors);
    if (c.fair_weight_milli != 1000) y += ", fair_weight: " + qty(c.fair_weight_milli);
    y += "}\n";
  }
  y += "cluster_queues:\n";
  for (const auto& cq : g.world.cluster_queues) {
    y += fmt::format("  - name: {}\n", cq.name);
    if (!cq.cohort.empty()) y += fmt::format("    cohort: {}\n", cq.cohort);
    if (cq.strategy == QueueingStrategy::kStrictFifo) y += "    strategy: StrictFIFO\n";
    y += fmt::format("    preemption: {{within_cluster_queue: {}, reclaim_within_cohort: {}",
                     kWithin[static_cast<int>(cq.preemption.within_cluster_queue)],
                     kReclaim[static_cast<int>(cq.preemption.reclaim_within_cohort)]);
    if (cq.preemption.borrow_within_cohort == BorrowWithinCohort::kLowerPriority) {
      y += ", borrow_within_cohort: {policy: LowerPriority";
      if (cq.preemption.max_priority_threshold) {
        y += fmt::format(", max_priority_threshold: {}", *cq.preemption.max_priority_threshold);
      }
      y += "}";
    }
    y += "}\n";
    y += fmt::format(
        "    flavor_fungibility: {{when_can_borrow: {}, when_can_preempt: {}, preference: {}}}\n",
        cq.fungibility.when_can_borrow == WhenCanBorrow::kMayStopSearch ? "MayStopSearch"
                                                                        : "TryNextFlavor",
        cq.fungibility.when_can_preempt == WhenCanPreempt::kMayStopSearch ? "MayStopSearch"
                                                                          : "TryNextFlavor",
        kPreference[static_cast<int>(cq.fungibility.preference)]);
    if (cq.namespace_selector) {
      for (const auto& [k, values] : *cq.namespace_selector) {
        y += fmt::format("    namespace_selector: {{{}: [{}]}}\n", k, fmt::join(values, ", "));
      }
    }
    if (cq.stop_policy == StopPolicy::kHold) y += "    stop_policy: Hold\n";
    if (cq.fair_weight_milli != 1000) y += "    fair_weight: " + qty(cq.fair_weight_milli) + "\n";
    y += "    resource_groups:\n";
    for (const auto& group : cq.resource_groups) {
      std::string covered;
      for (const auto& r : group.covered) covered += (covered.empty() ? "" : ", ") + r;
      y += fmt::format("      - {{covered: [{}], flavors: {}}}\n", covered,
                       flavorQuotasYaml(group.flavors));
    }
  }
  y += "local_queues:\n";
  for (const auto& lq : g.world.local_queues) {
    y += fmt::format("  - {{namespace: {}, name: {}, cluster_queue: {}}}\n", lq.namespace_, lq.name,
                     lq.cluster_queue);
  }
  y += "admitted:\n";
  for (const auto& w : g.admitted) y += "  - " + workloadYaml(w) + "\n";
  y += "pending:\n";
  for (const auto& w : g.batches[0]) y += "  - " + workloadYaml(w) + "\n";
  y += "steps:\n";
  for (const auto& s : steps) {
    // The scenario format has no hold or release; they stand as comments, in their place.
    if (!s.hold.empty()) y += fmt::format("  # then hold: [{}]\n", fmt::join(s.hold, ", "));
    if (!s.release.empty())
      y += fmt::format("  # then release: [{}]\n", fmt::join(s.release, ", "));
    if (s.finish.empty() && s.create.empty()) continue;
    y += "  - actions:\n";
    if (!s.finish.empty()) {
      std::string names;
      for (const auto& n : s.finish) names += (names.empty() ? "" : ", ") + n;
      y += "      finish: [" + names + "]\n";
    }
    if (!s.create.empty()) {
      y += "      create:\n";
      for (const auto& w : s.create) y += "        - " + workloadYaml(w) + "\n";
    }
  }
  return y;
}

// --- Observing and comparing -------------------------------------------------------------------

const char* stateName(WorkloadStatus::State s) {
  switch (s) {
    case WorkloadStatus::State::kPending:
      return "pending";
    case WorkloadStatus::State::kAdmitted:
      return "admitted";
    case WorkloadStatus::State::kFinished:
      return "finished";
  }
  return "?";
}

std::string statusText(const std::optional<WorkloadStatus>& s) {
  if (!s) return "(unknown)";
  std::string out = fmt::format("{} in {}", stateName(s->state), s->cluster_queue);
  if (s->admission) {
    out += " with";
    for (const auto& ps : s->admission->pod_sets) {
      out += fmt::format(" {}x{}", ps.name, ps.count);
      for (const auto& [r, f] : ps.flavors) {
        auto u = ps.usage.find(r);
        out += fmt::format(" {}={}@{}", r, u == ps.usage.end() ? 0 : u->second, f);
      }
    }
  }
  if (!s->reason.empty()) out += " reason=" + s->reason;
  if (!s->message.empty()) out += " message=\"" + s->message + "\"";
  if (s->inadmissible) out += " inadmissible";
  if (s->attempted) out += " attempted";
  return out;
}

const char* kindName(Event::Kind k) {
  switch (k) {
    case Event::Kind::kAdmitted:
      return "admitted";
    case Event::Kind::kPreempted:
      return "preempted";
    case Event::Kind::kEvicted:
      return "evicted";
    case Event::Kind::kFinished:
      return "finished";
    case Event::Kind::kPending:
      return "pending";
  }
  return "?";
}

std::string eventText(const Event& e) {
  std::string out =
      fmt::format("cycle {}: {} {} in {}", e.cycle, kindName(e.kind), e.workload, e.cluster_queue);
  if (!e.by.empty()) out += " by " + e.by;
  if (!e.reason.empty()) out += " (" + e.reason + ")";
  if (!e.message.empty()) out += " \"" + e.message + "\"";
  return out;
}

bool sameEvent(const Event& a, const Event& b) {
  return a.kind == b.kind && a.workload == b.workload && a.cluster_queue == b.cluster_queue &&
         a.reason == b.reason && a.message == b.message && a.by == b.by && a.cycle == b.cycle;
}

bool sameAdmission(const std::optional<Admission>& a, const std::optional<Admission>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  if (a->cluster_queue != b->cluster_queue || a->pod_sets.size() != b->pod_sets.size())
    return false;
  for (size_t i = 0; i < a->pod_sets.size(); ++i) {
    const auto& x = a->pod_sets[i];
    const auto& y = b->pod_sets[i];
    if (x.name != y.name || x.count != y.count || x.flavors != y.flavors || x.usage != y.usage ||
        x.placements.size() != y.placements.size()) {
      return false;
    }
    for (size_t p = 0; p < x.placements.size(); ++p) {
      if (x.placements[p].node != y.placements[p].node ||
          x.placements[p].gpus != y.placements[p].gpus ||
          x.placements[p].gpu_milli != y.placements[p].gpu_milli) {
        return false;
      }
    }
  }
  return true;
}

bool sameStatus(const std::optional<WorkloadStatus>& a, const std::optional<WorkloadStatus>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  return a->state == b->state && a->cluster_queue == b->cluster_queue &&
         sameAdmission(a->admission, b->admission) && a->reason == b->reason &&
         a->message == b->message && a->inadmissible == b->inadmissible &&
         a->attempted == b->attempted;
}

// What the generator exercised, counted per scenario.
struct Coverage {
  int scenarios = 0;
  int preemption = 0;
  int borrowing = 0;
  int partial = 0;
  int memo_hits = 0;
  int fair_preemption = 0;
  int hierarchical = 0;
  int started_admitted = 0;
  int parked = 0;
  int held = 0;
  int placed = 0;           // with an inventory
  int waited_for_room = 0;  // a workload pending for placement (WaitingForPlacement, NeverFits)
  int64_t cycles = 0, most_cycles = 0;
  int loops_sorting_off = 0;
  int loops = 0;
  std::vector<uint64_t> loop_seeds;

  void add(const Coverage& o) {
    scenarios += o.scenarios;
    preemption += o.preemption;
    borrowing += o.borrowing;
    partial += o.partial;
    memo_hits += o.memo_hits;
    fair_preemption += o.fair_preemption;
    hierarchical += o.hierarchical;
    started_admitted += o.started_admitted;
    parked += o.parked;
    held += o.held;
    placed += o.placed;
    waited_for_room += o.waited_for_room;
    cycles += o.cycles;
    most_cycles = std::max(most_cycles, o.most_cycles);
    loops_sorting_off += o.loops_sorting_off;
    loops += o.loops;
    loop_seeds.insert(loop_seeds.end(), o.loop_seeds.begin(), o.loop_seeds.end());
    std::sort(loop_seeds.begin(), loop_seeds.end());
    if (loop_seeds.size() > 5) loop_seeds.resize(5);
  }
};

// Runs one scenario on both engines; returns the first difference, or nothing.
class PairedRun {
 public:
  PairedRun(const Generated& g, Coverage& coverage)
      : g_(g), coverage_(coverage), rng_(g.seed ^ 0x5eed) {
    for (const auto& cq : g.world.cluster_queues) {
      // The root of the queue's cohort tree (drain mode's memo is per tree).
      std::string root = cq.name;
      for (std::string c = cq.cohort; !c.empty();) {
        root = c;
        std::string parent;
        for (const auto& co : g.world.cohorts) parent = co.name == c ? co.parent : parent;
        c = parent;
      }
      root_of_[cq.name] = root;
      bool selected = true;
      if (cq.namespace_selector) {
        for (const auto& [k, values] : *cq.namespace_selector) {
          selected = selected && std::find(values.begin(), values.end(), "a") != values.end();
        }
      }
      memo_countable_[cq.name] = selected && cq.preemption.within_cluster_queue !=
                                                 WithinClusterQueue::kLowerOrNewerEqualPriority;
    }
  }

  std::optional<std::string> go() {
    auto diff = script();
    if (!diff) account();
    return diff;
  }

  const std::vector<Step>& steps() const { return steps_; }

  // The Kueue-mode engine's events, as comment lines (after the scenario in a dump).
  std::string eventsYaml() const {
    std::string out;
    if (kueue_ == nullptr) return out;
    for (const auto& e : kueue_->events()) out += "# " + eventText(e) + "\n";
    return out;
  }

 private:
  // The script: start, then per batch finish/hold/release a few and submit the batch. A loop
  // (both modes looping alike) ends it: everything after would cost the cycle cap again.
  std::optional<std::string> script() {
    EngineOptions ko = g_.options, dro = g_.options;
    ko.mode = CycleMode::kKueue;
    dro.mode = CycleMode::kDrain;
    if (!g_.inventory.empty()) {
      // Two Placers alike: each mode places on its own copy, with the same seed.
      for (EngineOptions* o : {&ko, &dro}) {
        auto placer = Placer::create(g_.inventory, placement::Policy::kDefault, g_.seed);
        if (!placer) return "the generated inventory was refused: " + placer.error().message;
        o->placement = placementHook(std::shared_ptr<Placer>(std::move(*placer)), g_.world.flavors);
      }
    }
    auto k = Engine::create(g_.world, ko);
    auto d = Engine::create(g_.world, dro);
    if (!k || !d)
      return "the generated world was refused: " + (k ? d.error().message : k.error().message);
    kueue_ = std::move(*k);
    drain_ = std::move(*d);
    for (const auto& w : g_.admitted) {
      auto a = kueue_->addAdmitted(w);
      auto b = drain_->addAdmitted(w);
      if (!a || !b)
        return "addAdmitted refused " + w.name + ": " + (a ? b.error().message : a.error().message);
    }
    for (const auto& w : g_.batches[0]) {
      if (!kueue_->submit(w) || !drain_->submit(w)) return "submit refused " + w.name;
      unattempted_.push_back(w.name);
    }
    if (auto diff = settle("the start")) return diff;
    if (looped_) return std::nullopt;
    for (size_t r = 1; r <= g_.batches.size(); ++r) {
      // One step (then run until stable): finish a few, mostly admitted ones (their quota comes
      // free), some pending; now and then hold a pending one or release what was held; submit
      // the next batch.
      Step step;
      std::vector<std::string> admitted, pending;
      for (const auto& name : kueue_->workloadNames()) {
        auto s = kueue_->status(name);
        if (s->state == WorkloadStatus::State::kAdmitted) admitted.push_back(name);
        if (s->state == WorkloadStatus::State::kPending) pending.push_back(name);
      }
      for (int n = rng_.below(r == g_.batches.size() ? 4 : 3); n > 0; --n) {
        auto& from = !admitted.empty() && (pending.empty() || rng_.chance(70)) ? admitted : pending;
        if (from.empty()) break;
        const size_t i = static_cast<size_t>(rng_.below(static_cast<int>(from.size())));
        step.finish.push_back(from[i]);
        from.erase(from.begin() + static_cast<std::ptrdiff_t>(i));
      }
      if (!pending.empty() && rng_.chance(25)) {
        const std::string& name = rng_.pick(pending);
        step.hold.push_back(name);
        held_.push_back(name);
      }
      if (!held_.empty() && rng_.chance(50)) {
        const size_t i = static_cast<size_t>(rng_.below(static_cast<int>(held_.size())));
        if (std::find(step.finish.begin(), step.finish.end(), held_[i]) == step.finish.end() &&
            std::find(step.hold.begin(), step.hold.end(), held_[i]) == step.hold.end()) {
          step.release.push_back(held_[i]);
        }
        held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
      }
      for (const auto& name : step.finish) {
        if (!kueue_->finish(name) || !drain_->finish(name)) return "finish refused " + name;
      }
      for (const auto& name : step.hold) {
        const std::string reason = "Held", message = "held by the test";
        if (!kueue_->hold(name, reason, message) || !drain_->hold(name, reason, message)) {
          return "hold refused " + name;
        }
        held_any_ = true;
      }
      for (const auto& name : step.release) {
        // A held workload may have finished since; both engines then refuse alike.
        if (kueue_->release(name).has_value() != drain_->release(name).has_value()) {
          return "release answered differently for " + name;
        }
      }
      if (r < g_.batches.size()) {
        for (const auto& w : g_.batches[r]) {
          if (!kueue_->submit(w) || !drain_->submit(w)) return "submit refused " + w.name;
          unattempted_.push_back(w.name);
        }
        step.create = g_.batches[r];
      }
      if (step.finish.empty() && step.hold.empty() && step.release.empty() && step.create.empty()) {
        continue;
      }
      steps_.push_back(step);
      if (auto diff = settle(fmt::format("step {}", steps_.size()))) return diff;
      if (looped_) return std::nullopt;
    }
    return std::nullopt;
  }

  void account() {
    coverage_.scenarios++;
    coverage_.preemption += preempted_;
    coverage_.borrowing += borrowed_;
    coverage_.partial += partial_;
    coverage_.memo_hits += memo_hit_;
    coverage_.fair_preemption += preempted_ && g_.options.fair_sharing;
    coverage_.parked += parked_;
    coverage_.held += held_any_;
    coverage_.started_admitted += !g_.admitted.empty();
    coverage_.placed += !g_.inventory.empty();
    coverage_.waited_for_room += waited_for_room_;
    bool hierarchical = false;
    for (const auto& c : g_.world.cohorts) hierarchical = hierarchical || !c.parent.empty();
    coverage_.hierarchical += hierarchical;
    if (looped_) {
      coverage_.loops++;
      coverage_.loops_sorting_off += !g_.options.priority_sorting_within_cohort;
      if (coverage_.loop_seeds.size() < 5) coverage_.loop_seeds.push_back(g_.seed);
    }
  }

  // Both engines to a stable state; then everything observable must agree.
  std::optional<std::string> settle(const std::string& when) {
    const int64_t before = kueue_->cycles();
    const CycleResult kr = kueue_->runUntilStable(kCycleCap);
    const CycleResult dr = drainUntilStable();
    looped_ = looped_ || kueue_->cycles() - before >= kCycleCap;
    coverage_.cycles += kueue_->cycles() - before;
    coverage_.most_cycles =
        std::max(coverage_.most_cycles, looped_ ? 0 : kueue_->cycles() - before);
    std::string diff;
    if (kr.admitted != dr.admitted || kr.preempted != dr.preempted || kr.changed != dr.changed) {
      diff += fmt::format(
          "  runUntilStable: kueue admitted {} preempted {}; drain admitted {} preempted {}\n",
          kr.admitted.size(), kr.preempted.size(), dr.admitted.size(), dr.preempted.size());
    }
    if (kueue_->cycles() != drain_->cycles()) {
      diff += fmt::format("  cycles: kueue {} drain {}\n", kueue_->cycles(), drain_->cycles());
    }
    const auto names = kueue_->workloadNames();
    if (names != drain_->workloadNames()) diff += "  the engines know different workloads\n";
    for (const auto& name : names) {
      auto a = kueue_->status(name);
      auto b = drain_->status(name);
      parked_ = parked_ || (b && b->inadmissible);
      waited_for_room_ = waited_for_room_ ||
                         (b && (b->reason == "WaitingForPlacement" || b->reason == "NeverFits"));
      if (!sameStatus(a, b)) {
        diff += fmt::format("  {}:\n    kueue: {}\n    drain: {}\n", name, statusText(a),
                            statusText(b));
      }
    }
    const auto kq = kueue_->queues();
    const auto dq = drain_->queues();
    for (size_t i = 0; i < std::min(kq.size(), dq.size()); ++i) {
      if (kq[i].name != dq[i].name || kq[i].pending != dq[i].pending ||
          kq[i].admitted != dq[i].admitted || kq[i].usage.size() != dq[i].usage.size()) {
        diff +=
            fmt::format("  queue {}: kueue {} pending {} admitted; drain {} pending {} admitted\n",
                        kq[i].name, kq[i].pending, kq[i].admitted, dq[i].pending, dq[i].admitted);
        continue;
      }
      for (size_t j = 0; j < kq[i].usage.size(); ++j) {
        const auto& a = kq[i].usage[j];
        const auto& b = dq[i].usage[j];
        borrowed_ = borrowed_ || b.borrowed > 0;
        if (a.flavor != b.flavor || a.resource != b.resource || a.usage != b.usage ||
            a.borrowed != b.borrowed || a.lent != b.lent || a.available != b.available) {
          diff += fmt::format(
              "  queue {} {}/{}: kueue usage {} available {}; drain usage {} available {}\n",
              kq[i].name, a.flavor, a.resource, a.usage, a.available, b.usage, b.available);
        }
      }
    }
    if (kq.size() != dq.size()) diff += "  the engines list different queues\n";
    const auto& ke = kueue_->events();
    const auto& de = drain_->events();
    for (size_t i = 0; i < std::max(ke.size(), de.size()); ++i) {
      if (i < ke.size() && i < de.size() && sameEvent(ke[i], de[i])) continue;
      diff += fmt::format("  events differ from #{}:\n", i);
      for (size_t j = i; j < std::min(i + 6, std::max(ke.size(), de.size())); ++j) {
        diff +=
            fmt::format("    kueue: {}\n    drain: {}\n", j < ke.size() ? eventText(ke[j]) : "-",
                        j < de.size() ? eventText(de[j]) : "-");
      }
      break;
    }
    if (diff.empty()) return std::nullopt;
    return fmt::format("the modes differ after {}:\n{}", when, diff);
  }

  // drain_->runUntilStable(kCycleCap), one cycle at a time, watching what the memo can serve.
  CycleResult drainUntilStable() {
    CycleResult all;
    for (int64_t i = 0; i < kCycleCap; ++i) {
      noteEvents();
      std::map<std::string, int64_t> version = version_;  // what nomination sees this cycle
      CycleResult r = drain_->cycle();
      observe(version, r);
      for (auto& a : r.admitted) all.admitted.push_back(std::move(a));
      for (auto& p : r.preempted) all.preempted.push_back(std::move(p));
      if (!r.changed) break;
      all.changed = true;
    }
    noteEvents();
    return all;
  }

  // A tree changes (drain mode's touch) when a workload is admitted, evicted or finished in it;
  // finishing a pending one changes nothing, so counting it is conservative.
  void noteEvents() {
    const auto& events = drain_->events();
    for (; seen_events_ < events.size(); ++seen_events_) {
      const Event& e = events[seen_events_];
      if (e.kind == Event::Kind::kPreempted) preempted_ = true;
      if (e.kind == Event::Kind::kAdmitted || e.kind == Event::Kind::kEvicted ||
          e.kind == Event::Kind::kFinished) {
        ++version_[root_of_[e.cluster_queue]];
      }
    }
  }

  // After a drain cycle: partial admissions, and certain memo hits: a head nominated for the
  // first time in a queue where a head of the same shape and priority was nominated at the same
  // tree version (the memo then holds its answer, so drain mode answered from it).
  void observe(const std::map<std::string, int64_t>& version, const CycleResult& r) {
    for (const auto& name : r.admitted) {
      auto s = drain_->status(name);
      const Workload& spec = specOf(name);
      for (size_t i = 0;
           s->admission && i < s->admission->pod_sets.size() && i < spec.pod_sets.size(); ++i) {
        partial_ = partial_ || s->admission->pod_sets[i].count < spec.pod_sets[i].count;
      }
    }
    std::vector<std::string> still;
    for (const auto& name : unattempted_) {
      auto s = drain_->status(name);
      if (!s->attempted) {
        still.push_back(name);
        continue;
      }
      if (!memo_countable_[s->cluster_queue]) continue;
      const auto key = std::make_pair(
          s->cluster_queue, fmt::format("{}|{}", specOf(name).priority, g_.shape_of.at(name)));
      auto v = version.find(root_of_[s->cluster_queue]);
      const int64_t now = v == version.end() ? 0 : v->second;
      auto seen = memo_seen_.find(key);
      if (seen != memo_seen_.end() && seen->second == now) memo_hit_ = true;
      memo_seen_[key] = now;
    }
    unattempted_ = std::move(still);
  }

  const Workload& specOf(const std::string& name) {
    if (specs_.empty()) {
      for (const auto& w : g_.admitted) specs_[w.name] = &w;
      for (const auto& b : g_.batches) {
        for (const auto& w : b) specs_[w.name] = &w;
      }
    }
    return *specs_.at(name);
  }

  const Generated& g_;
  Coverage& coverage_;
  Rng rng_;
  std::unique_ptr<Engine> kueue_, drain_;
  std::vector<Step> steps_;
  std::map<std::string, std::string> root_of_;
  std::map<std::string, bool> memo_countable_;
  std::map<std::string, const Workload*> specs_;
  std::map<std::string, int64_t> version_;
  size_t seen_events_ = 0;
  std::vector<std::string> unattempted_;  // submitted, never yet a head
  std::map<std::pair<std::string, std::string>, int64_t> memo_seen_;
  bool preempted_ = false, borrowed_ = false, partial_ = false, memo_hit_ = false, parked_ = false;
  bool looped_ = false, held_any_ = false, waited_for_room_ = false;
  std::vector<std::string> held_;
};

TEST(CycleModeEquivalenceTest, DrainAndKueueReachTheSameStates) {
  const uint64_t seed = envOr("PURSER_EQUIVALENCE_SEED", kDefaultSeed);
  const int cases = static_cast<int>(envOr("PURSER_EQUIVALENCE_CASES", kDefaultCases));
  const bool dump = std::getenv("PURSER_EQUIVALENCE_DUMP") != nullptr;
  // Scenarios are independent and each is deterministic, so they are spread over the cores;
  // what is reported does not depend on which thread ran what.
  const unsigned threads = dump ? 1 : std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  std::atomic<int> next{0};
  std::atomic<int> failures{0};
  std::mutex mu;
  std::map<int, std::string> failed;  // case -> report, GUARDED_BY(mu)
  std::vector<Coverage> coverage_of(threads);
  const auto work = [&](unsigned t) {
    for (int i = next++; i < cases && failures.load() < 3; i = next++) {
      const Generated g = generate(seed + static_cast<uint64_t>(i));
      PairedRun run(g, coverage_of[t]);
      auto diff = run.go();
      if (dump) std::cout << scenarioYaml(g, run.steps()) << run.eventsYaml();
      if (diff) {
        ++failures;
        std::lock_guard<std::mutex> lock(mu);
        failed[i] =
            fmt::format("scenario seed {} (case {} from seed {}): {}--- the scenario ---\n{}",
                        g.seed, i, seed, *diff, scenarioYaml(g, run.steps()));
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  Coverage coverage;
  for (const auto& c : coverage_of) coverage.add(c);
  for (const auto& [i, report] : failed) ADD_FAILURE() << report;
  std::cout << fmt::format(
      "cycle-mode equivalence: {} scenarios from seed {}: preemption in {}, borrowing in {}, "
      "partial admission in {}, memo hits in {}, fair-sharing preemption in {}, hierarchical "
      "cohorts in {}, admitted at start in {}, parked heads in {}, holds in {}, placement on "
      "nodes in {} (waiting for room in {}), loops in {}{}; {} "
      "cycles, at most {} to settle, {} loops without priority sorting\n",
      coverage.scenarios, seed, coverage.preemption, coverage.borrowing, coverage.partial,
      coverage.memo_hits, coverage.fair_preemption, coverage.hierarchical,
      coverage.started_admitted, coverage.parked, coverage.held, coverage.placed,
      coverage.waited_for_room, coverage.loops,
      coverage.loop_seeds.empty()
          ? ""
          : fmt::format(" (seeds {})", fmt::join(coverage.loop_seeds, ", ")),
      coverage.cycles, coverage.most_cycles, coverage.loops_sorting_off);
  // Neither mode may loop: every scenario settles within the cap (however many ran).
  EXPECT_EQ(coverage.loops, 0) << "seeds: "
                               << fmt::format("{}", fmt::join(coverage.loop_seeds, ", "));
  if (!failed.empty() || cases < kDefaultCases / 2) return;
  // The generator must exercise what the memo could get wrong, or a pass means nothing.
  const auto share = [&](int n) { return 100.0 * n / coverage.scenarios; };
  EXPECT_GT(share(coverage.preemption), 5.0);
  EXPECT_GT(share(coverage.borrowing), 5.0);
  EXPECT_GT(share(coverage.partial), 5.0);
  EXPECT_GT(share(coverage.memo_hits), 5.0);
  EXPECT_GT(share(coverage.fair_preemption), 1.0);
  EXPECT_GT(share(coverage.placed), 20.0);
  EXPECT_GT(share(coverage.waited_for_room), 5.0);
}

// --- What the generator found ------------------------------------------------------------------

// A head whose namespace its ClusterQueue does not select gets an entry with no nomination
// (Misconfigured); the cycle's ordering (entryBefore, or fairNext with fair sharing) once read
// that entry's assignment through a null pointer. Such entries are now settled first.
TEST(FoundByGeneratorTest, HeadOutsideItsNamespaceSelectorIsOrderedWithoutANomination) {
  for (bool fair : {false, true}) {
    SCOPED_TRACE(fair ? "fair sharing" : "classical");
    World world;
    world.flavors = {{.name = "f0"}};
    world.namespaces["ns"] = {{"team", "a"}};
    for (const char* name : {"q0", "q1"}) {
      ClusterQueue cq{.name = name};
      cq.resource_groups = {
          {.covered = {"cpu"},
           .flavors = {{.flavor = "f0", .resources = {{"cpu", {.nominal = 1000}}}}}}};
      world.cluster_queues.push_back(std::move(cq));
      world.local_queues.push_back({.namespace_ = "ns", .name = name, .cluster_queue = name});
    }
    world.cluster_queues[0].namespace_selector =
        std::map<std::string, std::vector<std::string>>{{"team", {"b"}}};
    auto engine = Engine::create(world, {.fair_sharing = fair});
    ASSERT_TRUE(engine.has_value()) << engine.error().message;
    const auto pod = std::vector<PodSet>{{.name = "main", .requests = {{"cpu", 1000}}}};
    ASSERT_TRUE((*engine)->submit(
        {.name = "ns/x", .namespace_ = "ns", .local_queue = "q0", .pod_sets = pod}));
    ASSERT_TRUE((*engine)->submit(
        {.name = "ns/y", .namespace_ = "ns", .local_queue = "q1", .pod_sets = pod}));
    (*engine)->runUntilStable(10);
    auto x = (*engine)->status("ns/x");
    auto y = (*engine)->status("ns/y");
    EXPECT_EQ(x->reason, "Misconfigured");
    EXPECT_TRUE(x->inadmissible);
    EXPECT_EQ(y->state, WorkloadStatus::State::kAdmitted);
  }
}

}  // namespace
}  // namespace purser::fleet
