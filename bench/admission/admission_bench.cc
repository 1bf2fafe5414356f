// bench/admission: the admission engine alone, in virtual time, on the shapes of Kueue's own
// scheduler performance tests and on preemption-heavy variants of them, and the time of one cycle
// as pending workloads grow.
//
//   admission_bench SHAPE [MODE]      SHAPE: baseline | large | preempt-baseline | preempt-large;
//                                     MODE: drain (default) | kueue
//   admission_bench cycle-scaling     one cycle with 10^3 .. 10^6 pending workloads
//   admission_bench scenario SHAPE    baseline or large as a `purser sim admission` scenario
//
// The shapes (from Kueue's test/performance/scheduler configs): every ClusterQueue has nominal
// 20 cpu, borrowing limit 100, reclaimWithinCohort Any, withinClusterQueue LowerPriority, and
// receives three classes of one-pod workloads, created at fixed intervals and running for a
// fixed time once admitted:
//   baseline: 5 cohorts x 6 queues; per queue 350 small (1 cpu, every 100 ms, runs 200 ms,
//             priority 50), 100 medium (5 cpu, every 500 ms, 500 ms, 100), 50 large (20 cpu,
//             every 1200 ms, 1000 ms, 200): 15,000 workloads.
//   large:    10 cohorts x 100 queues; per queue 35 small (every 20 ms, runs 50 ms), 10 medium
//             (every 50 ms, 100 ms), 5 large (every 200 ms, 200 ms): 50,000 workloads.
// The preemption-heavy variants keep that layout. At time 0 every queue is given long-running
// low-priority work (1 cpu, priority 10) that fills its cohort exactly: the even-numbered queues
// (lenders) 5 workloads, below their nominal quota, the odd-numbered ones (borrowers) 35, 15 of
// them on quota borrowed from the lenders. Then high-priority work arrives while the low-priority
// work still runs, and nothing is free: in a lender it is admitted by reclaiming the lent quota
// (preempting borrowers' workloads, InCohortReclamation), in a borrower by preempting its own
// low-priority workloads (InClusterQueue). Lenders' and borrowers' high arrivals alternate, half
// an interval apart; tops come to every queue at once. Victims queue again, are admitted again
// when the arrival ends, and are preempted again by the next one; every workload, once admitted
// for the last time, runs its whole time and finishes.
//   preempt-baseline: 5 cohorts x 6 queues; per queue the low-priority fill (runs 300 s), 100
//             high (2 cpu, priority 100, every 1 s from 1 s in lenders and from 1.5 s in
//             borrowers, runs 400 ms) and 20 top (4 cpu, priority 200, every 5 s from 1.25 s,
//             runs 2 s): 3,600 arrivals, 4,200 workloads.
//   preempt-large: 10 cohorts x 100 queues; per queue the fill (runs 30 s), 4 high (every
//             200 ms from 1 s in lenders and from 1.1 s in borrowers, runs 80 ms) and 1 top (at
//             1.05 s, runs 400 ms): 5,000 arrivals, 25,000 workloads. Kept small: 50 lenders of
//             a cohort reclaiming at once all pick the same victims, so one succeeds per cycle,
//             and each cycle sorts the cohort's candidates for every one of them again.
// Virtual time jumps from event to event (creations, completions); at each instant the engine
// schedules until nothing changes. Prints one JSON object: admissions and preemptions (decisions,
// both), their rate over the engine's own time, and preemptions by reason.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <vector>

#include "fleet/engine.h"

using namespace purser;
using namespace purser::fleet;

namespace {

// Which of a cohort's queues receive a class: all, or the even-numbered (lenders) or
// odd-numbered (borrowers) ones of the preemption-heavy shapes.
enum class Queues { kAll, kLenders, kBorrowers };

struct Class {
  const char* name;
  int count;
  int64_t interval_ms;
  int64_t runtime_ms;
  int32_t priority;
  Amount cpu_milli;
  int64_t start_ms = 0;
  Queues queues = Queues::kAll;

  int64_t createdAt(int i) const { return start_ms + interval_ms * i; }

  bool goesTo(int queue_in_cohort) const {
    return queues == Queues::kAll || (queue_in_cohort % 2 == 0) == (queues == Queues::kLenders);
  }
};

struct Shape {
  int cohorts;
  int queues_per_cohort;
  std::vector<Class> classes;
};

// The fill of a preemption-heavy shape: each cohort's lenders use 5 of their 20 cpu, its
// borrowers 35, so the cohort is exactly full with a quarter of its quota borrowed.
std::vector<Class> lowPriorityFill(int64_t runtime_ms) {
  return {{"low", 5, 0, runtime_ms, 10, 1000, 0, Queues::kLenders},
          {"low", 35, 0, runtime_ms, 10, 1000, 0, Queues::kBorrowers}};
}

std::optional<Shape> shapeOf(const std::string& name) {
  if (name == "baseline") {
    return Shape{5,
                 6,
                 {{"small", 350, 100, 200, 50, 1000},
                  {"medium", 100, 500, 500, 100, 5000},
                  {"large", 50, 1200, 1000, 200, 20000}}};
  }
  if (name == "large") {
    return Shape{10,
                 100,
                 {{"small", 35, 20, 50, 50, 1000},
                  {"medium", 10, 50, 100, 100, 5000},
                  {"large", 5, 200, 200, 200, 20000}}};
  }
  if (name == "preempt-baseline" || name == "preempt-large") {
    const bool large = name == "preempt-large";
    Shape shape{large ? 10 : 5, large ? 100 : 6, lowPriorityFill(large ? 30000 : 300000)};
    // Lenders' and borrowers' high arrivals alternate, each gone before the other's come, so a
    // lender's must reclaim: arriving together, the lenders (not borrowing, so first in a
    // cycle) would take the room the borrowers' preemptions free.
    const int high = large ? 4 : 100;
    const int64_t every = large ? 200 : 1000;
    const int64_t runs = large ? 80 : 400;
    shape.classes.push_back({"high", high, every, runs, 100, 2000, 1000, Queues::kLenders});
    shape.classes.push_back(
        {"high", high, every, runs, 100, 2000, 1000 + every / 2, Queues::kBorrowers});
    if (large) {
      shape.classes.push_back({"top", 1, 0, 400, 200, 4000, 1050});
    } else {
      shape.classes.push_back({"top", 20, 5000, 2000, 200, 4000, 1250});
    }
    return shape;
  }
  return std::nullopt;
}

std::string queueName(int cohort, int queue) {
  return "cohort-" + std::to_string(cohort) + "-cq-" + std::to_string(queue);
}

World worldOf(const Shape& shape) {
  World w;
  w.flavors.push_back({"default", {}, {}, {}});
  for (int c = 0; c < shape.cohorts; ++c) {
    for (int q = 0; q < shape.queues_per_cohort; ++q) {
      ClusterQueue cq;
      cq.name = queueName(c, q);
      cq.cohort = "cohort-" + std::to_string(c);
      cq.preemption.within_cluster_queue = WithinClusterQueue::kLowerPriority;
      cq.preemption.reclaim_within_cohort = ReclaimWithinCohort::kAny;
      ResourceGroup g;
      g.covered = {"cpu"};
      FlavorQuotas fq;
      fq.flavor = "default";
      fq.resources["cpu"] = Quota{20000, 100000, std::nullopt};
      g.flavors.push_back(fq);
      cq.resource_groups.push_back(g);
      w.cluster_queues.push_back(cq);
      w.local_queues.push_back({"ns", cq.name, cq.name});
    }
  }
  w.namespaces["ns"] = {};
  return w;
}

Workload workloadOf(const std::string& name, const std::string& queue, const Class& k,
                    int64_t created_ms) {
  Workload w;
  w.name = "ns/" + name;
  w.namespace_ = "ns";
  w.local_queue = queue;
  w.priority = k.priority;
  w.created_ms = created_ms;
  PodSet ps;
  ps.name = "main";
  ps.count = 1;
  ps.requests["cpu"] = k.cpu_milli;
  w.pod_sets.push_back(ps);
  return w;
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

int runShape(const std::string& shape_name, const std::string& mode) {
  const std::optional<Shape> found = shapeOf(shape_name);
  if (!found || (mode != "drain" && mode != "kueue")) {
    std::fprintf(stderr,
                 "admission_bench: SHAPE is baseline, large, preempt-baseline or preempt-large; "
                 "MODE is drain or kueue\n");
    return 2;
  }
  const Shape& shape = *found;
  EngineOptions options;
  options.mode = mode == "kueue" ? CycleMode::kKueue : CycleMode::kDrain;
  auto engine = Engine::create(worldOf(shape), options);
  if (!engine) {
    std::fprintf(stderr, "%s\n", engine.error().message.c_str());
    return 1;
  }
  // Events in virtual time: (time, kind 0 = finish first, 1 = create, index).
  struct Pending {
    int64_t at;
    int kind;
    int64_t index;
    int64_t generation = 0;  // a finish is stale once its admission was preempted
    bool operator>(const Pending& o) const {
      return at != o.at ? at > o.at : (kind != o.kind ? kind > o.kind : index > o.index);
    }
  };
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> events;
  std::vector<Workload> workloads;
  std::vector<int64_t> runtime;
  std::vector<int64_t> generation;
  for (int c = 0; c < shape.cohorts; ++c) {
    for (int q = 0; q < shape.queues_per_cohort; ++q) {
      const std::string queue = queueName(c, q);
      for (const auto& k : shape.classes) {
        if (!k.goesTo(q)) continue;
        for (int i = 0; i < k.count; ++i) {
          const int64_t at = k.createdAt(i);
          workloads.push_back(
              workloadOf(queue + "-" + k.name + "-" + std::to_string(i), queue, k, at));
          runtime.push_back(k.runtime_ms);
          generation.push_back(0);
          events.push({at, 1, static_cast<int64_t>(workloads.size()) - 1});
        }
      }
    }
  }
  std::map<std::string, int64_t> index_of;
  for (size_t i = 0; i < workloads.size(); ++i)
    index_of[workloads[i].name] = static_cast<int64_t>(i);
  int64_t admissions = 0, preemptions = 0, finished = 0, now = 0;
  // Admissions preempted again before their instant ended: they get no finish of their own.
  int64_t undone = 0;
  std::map<std::string, int64_t> by_reason;
  std::chrono::steady_clock::duration engine_time{0};
  while (!events.empty()) {
    now = events.top().at;
    const auto started = std::chrono::steady_clock::now();
    while (!events.empty() && events.top().at == now) {
      const Pending e = events.top();
      events.pop();
      const auto i = static_cast<size_t>(e.index);
      if (e.kind == 1) {
        (void)(*engine)->submit(workloads[i]);
      } else if (e.generation == generation[i]) {
        // Not preempted since this finish was scheduled, so it must still hold its admission:
        // finishing a pending workload would count work that never ran.
        const auto st = (*engine)->status(workloads[i].name);
        if (!st || st->state != WorkloadStatus::State::kAdmitted ||
            !(*engine)->finish(workloads[i].name)) {
          std::fprintf(stderr, "admission_bench: %s ends but holds no admission\n",
                       workloads[i].name.c_str());
          return 1;
        }
        ++finished;
      }
    }
    (*engine)->setTime(now);
    CycleResult r = (*engine)->runUntilStable();
    (void)(*engine)->takeEvents();  // as the server does: events go to the store
    engine_time += std::chrono::steady_clock::now() - started;
    admissions += static_cast<int64_t>(r.admitted.size());
    preemptions += static_cast<int64_t>(r.preempted.size());
    for (const auto& [name, reason] : r.preempted) {
      ++generation[static_cast<size_t>(index_of[name])];
      ++by_reason[reason];
    }
    // runUntilStable reports all its cycles' admissions and preemptions together, so one
    // workload may have been admitted and then preempted (and perhaps admitted again) within
    // it. Its finish is scheduled once, and only when it holds an admission at the end.
    std::set<int64_t> scheduled;
    for (const auto& name : r.admitted) {
      const int64_t i = index_of[name];
      if (!scheduled.insert(i).second) continue;
      const auto st = (*engine)->status(name);
      if (!st || st->state != WorkloadStatus::State::kAdmitted) {
        ++undone;
        continue;
      }
      // Admitted (again, after a preemption) at this instant: it runs its whole time from now.
      events.push(
          {now + runtime[static_cast<size_t>(i)], 0, i, generation[static_cast<size_t>(i)]});
    }
  }
  const double secs = seconds(engine_time);
  std::string reasons;
  for (const auto& [reason, n] : by_reason) {
    reasons += (reasons.empty() ? "\"" : ", \"") + reason + "\": " + std::to_string(n);
  }
  const int64_t decisions = admissions + preemptions;
  std::printf(
      "{\"shape\": \"%s\", \"mode\": \"%s\", \"cluster_queues\": %d, \"workloads\": %zu, "
      "\"admissions\": %lld, \"preemptions\": %lld, \"decisions\": %lld, \"finished\": %lld, "
      "\"cycles\": %lld, \"virtual_seconds\": %.3f, \"engine_seconds\": %.3f, "
      "\"admissions_per_second\": %.0f, \"decisions_per_second\": %.0f, "
      "\"preemptions_by_reason\": {%s}, \"preempted_within_instant\": %lld}\n",
      shape_name.c_str(), mode.c_str(), shape.cohorts * shape.queues_per_cohort, workloads.size(),
      static_cast<long long>(admissions), static_cast<long long>(preemptions),
      static_cast<long long>(decisions), static_cast<long long>(finished),
      static_cast<long long>((*engine)->cycles()), static_cast<double>(now) / 1000.0, secs,
      static_cast<double>(admissions) / secs, static_cast<double>(decisions) / secs,
      reasons.c_str(), static_cast<long long>(undone));
  return finished == static_cast<int64_t>(workloads.size()) ? 0 : 1;
}

// One cycle's time with N pending workloads spread over the large shape's queues, all of them
// full, so every queue's head is tried and fails (a deep backlog), in both modes. Kueue mode
// nominates every head afresh; drain mode answers heads that ask what an earlier one asked from
// its memo. Submitting the N workloads is timed too.
int cycleScaling() {
  const Shape shape = *shapeOf("large");
  const int queues = shape.cohorts * shape.queues_per_cohort;
  const auto queueAt = [&](int q) {
    return queueName(q / shape.queues_per_cohort, q % shape.queues_per_cohort);
  };
  std::printf("[");
  bool first = true;
  for (int64_t n : {1000, 10000, 100000, 1000000}) {
    for (const char* mode : {"drain", "kueue"}) {
      EngineOptions options;
      options.mode = std::string(mode) == "kueue" ? CycleMode::kKueue : CycleMode::kDrain;
      auto engine = Engine::create(worldOf(shape), options);
      if (!engine) return 1;
      for (int q = 0; q < queues; ++q) {
        // Fill every queue to its borrowing limit so nothing more fits.
        Workload w =
            workloadOf(queueAt(q) + "-filler", queueAt(q), {"filler", 1, 0, 0, 1000, 120000}, 0);
        Admission a;
        a.cluster_queue = queueAt(q);
        a.pod_sets.push_back({"main", 1, {{"cpu", "default"}}, {{"cpu", 120000}}});
        w.admission = a;
        if (!(*engine)->addAdmitted(w)) return 1;
      }
      const auto submit_started = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < n; ++i) {
        const int q = static_cast<int>(i % queues);
        (void)(*engine)->submit(
            workloadOf("w" + std::to_string(i), queueAt(q), {"w", 1, 0, 0, 10, 5000}, i));
      }
      const double submit = seconds(std::chrono::steady_clock::now() - submit_started);
      // Each cycle parks one head per queue; measure while every queue still has heads left.
      const int64_t rounds = std::max<int64_t>(1, std::min<int64_t>(5, n / queues));
      const auto started = std::chrono::steady_clock::now();
      int64_t heads = 0;
      for (int64_t i = 0; i < rounds; ++i) {
        (*engine)->cycle();
        heads += std::min<int64_t>(queues, n - i * queues);
      }
      const double per_cycle =
          seconds(std::chrono::steady_clock::now() - started) / static_cast<double>(rounds);
      std::printf(
          "%s{\"pending\": %lld, \"mode\": \"%s\", \"cluster_queues\": %d, "
          "\"heads_per_cycle\": %lld, \"seconds_per_cycle\": %.6f, \"submit_seconds\": %.3f}",
          first ? "" : ",\n ", static_cast<long long>(n), mode, queues,
          static_cast<long long>(heads / rounds), per_cycle, submit);
      first = false;
      std::fflush(stdout);
    }
  }
  std::printf("]\n");
  return 0;
}

// The shape as a `purser sim admission` scenario (until_stable): its ClusterQueues, and every
// workload pending at once, created in the order of its arrival (`created` in seconds, relative).
// For timing the command end to end: reading, the engine, and printing the outcome. Only the
// arrival-driven shapes: a preemption-heavy one is its arrivals over time, which a scenario's
// single pending set cannot say.
int writeScenario(const std::string& shape_name) {
  if (shape_name != "baseline" && shape_name != "large") {
    std::fprintf(stderr, "admission_bench: scenario SHAPE is baseline or large\n");
    return 2;
  }
  const Shape shape = *shapeOf(shape_name);
  std::string out;
  out += "id: \"bench-" + shape_name + "\"\nname: kueue-performance-shape-" + shape_name +
         "\nmode: until_stable\nflavors: [{name: default}]\nnamespaces: {ns: {}}\n"
         "cluster_queues:\n";
  std::string lqs = "local_queues:\n";
  for (int c = 0; c < shape.cohorts; ++c) {
    for (int q = 0; q < shape.queues_per_cohort; ++q) {
      const std::string name = queueName(c, q);
      out += "  - name: " + name + "\n    cohort: cohort-" + std::to_string(c) +
             "\n    preemption: {within_cluster_queue: LowerPriority, reclaim_within_cohort: "
             "Any}\n    resource_groups:\n      - covered: [cpu]\n        flavors: [{flavor: "
             "default, resources: {cpu: {nominal: \"20\", borrowing_limit: \"100\"}}}]\n";
      lqs += "  - {namespace: ns, name: " + name + ", cluster_queue: " + name + "}\n";
    }
  }
  out += lqs + "pending:\n";
  std::fputs(out.c_str(), stdout);
  for (int c = 0; c < shape.cohorts; ++c) {
    for (int q = 0; q < shape.queues_per_cohort; ++q) {
      const std::string queue = queueName(c, q);
      for (const auto& k : shape.classes) {
        for (int i = 0; i < k.count; ++i) {
          std::printf(
              "  - {name: ns/%s-%s-%d, local_queue: %s, priority: %d, created: %.3f, pod_sets: "
              "[{name: main, count: 1, requests: {cpu: \"%lldm\"}}]}\n",
              queue.c_str(), k.name, i, queue.c_str(), k.priority,
              static_cast<double>(k.createdAt(i)) / 1000.0, static_cast<long long>(k.cpu_milli));
        }
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "baseline";
  if (what == "cycle-scaling") return cycleScaling();
  if (what == "scenario") return writeScenario(argc > 2 ? argv[2] : "large");
  return runShape(what, argc > 2 ? argv[2] : "drain");
}
