// The admission engine: Kueue's quota, cohort, borrowing, preemption and fair-sharing semantics,
// as a pure state machine. No I/O, no clocks: time comes in with the workloads. Not thread-safe:
// `purser serve` drives it from one strand.
//
// What Kueue does, this engine does (the conformance cases are Kueue's own scheduler tests):
//   - quota lives in a tree of ClusterQueues and Cohorts; a ClusterQueue may lend what its
//     lending limit allows and borrow up to its borrowing limit from its cohort tree;
//   - flavors are tried in order per resource group, with flavor fungibility deciding between
//     borrowing, preempting and trying the next flavor;
//   - a workload that does not fit may preempt within its ClusterQueue, reclaim from cohort
//     members above their nominal quota, or preempt while borrowing, per the queue's policies,
//     choosing a minimal set of victims in Kueue's candidate order;
//   - with fair sharing, heads are ordered and victims chosen by dominant resource share.
// cycle() runs exactly one Kueue scheduling cycle (one head per ClusterQueue). runUntilStable()
// repeats cycles, evicting victims and requeueing between them, until nothing changes.
//
// Every decision leaves a reason: a pending workload carries its category (WaitingForQuota,
// ExceedsMaxQuota, NoMatchingFlavor, Misconfigured, WaitingForPreemptedWorkloads) and a message in
// plain words; every admission, preemption and eviction is an Event.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "fleet/model.h"

namespace purser::fleet {

// kKueue: every cycle nominates every ClusterQueue's head afresh, as Kueue does. kDrain: the same
// cycles, back to back, but a head whose cohort tree has not changed since its last nomination
// reuses it (nomination is a pure function of the tree's state and the head), so a backlog in
// one tree costs nothing while another drains. Both reach the same states; a property test over
// generated scenarios holds them to it.
enum class CycleMode { kDrain, kKueue };

// Where admitted workloads run, when the fleet knows its hardware (inventory.h). Asked once a
// workload's quota fits: a workload is admitted only with a placement, which its admission then
// carries (PodSetAssignment::placements).
class PlacementHook {
 public:
  enum class Verdict { kPlaced, kNotNow, kNever };
  struct Answer {
    Verdict verdict = Verdict::kPlaced;
    std::string message;
    std::vector<std::vector<PodPlacement>> pod_sets;  // per pod set of `pod_sets`
  };
  virtual ~PlacementHook() = default;
  // Room for `w` admitted with `pod_sets` (counts and flavors), as if the workloads named in
  // `gone` held nothing.
  virtual Answer place(const Workload& w, const std::vector<PodSetAssignment>& pod_sets,
                       const std::vector<std::string>& gone) = 0;
  // Records the placement in `w`'s admission (an admitted workload restored, say); false when
  // it no longer fits.
  virtual bool take(const Workload& w) = 0;
  virtual void free(const std::string& workload) = 0;
};

struct EngineOptions {
  CycleMode mode = CycleMode::kDrain;
  bool partial_admission = true;
  bool fair_sharing = false;
  bool priority_sorting_within_cohort = true;
  std::shared_ptr<PlacementHook> placement;  // none: admission by quota alone
  // Besides Kueue's rules, may `preemptor` take `victim`'s place? (Purser's tenants: another
  // tenant's workload only with a priority that tenant's grant does not reach.) None: Kueue's
  // rules alone. Called during victim searches; must be cheap and pure.
  std::function<bool(const Workload& preemptor, const Workload& victim)> may_preempt;
};

// The fleet's configuration objects.
struct World {
  std::vector<ResourceFlavor> flavors;
  std::map<std::string, std::map<std::string, std::string>> namespaces;  // name -> labels
  std::vector<Cohort> cohorts;
  std::vector<ClusterQueue> cluster_queues;
  std::vector<LocalQueue> local_queues;
  std::vector<WorkloadPriorityClass> priority_classes;
};

struct Event {
  enum class Kind { kAdmitted, kPreempted, kEvicted, kFinished, kPending };
  Kind kind;
  std::string workload;
  std::string cluster_queue;
  std::string reason;   // preemption reason, pending reason
  std::string message;  // in plain words
  std::string by;       // the preemptor, for preemptions
  int64_t cycle = 0;
};

// A workload's state as the engine sees it.
struct WorkloadStatus {
  enum class State { kPending, kAdmitted, kFinished };
  State state = State::kPending;
  std::string cluster_queue;
  std::optional<Admission> admission;
  std::string reason;   // when pending
  std::string message;  // when pending
  bool inadmissible = false;
  bool attempted = false;  // was ever considered by a cycle
  // When it was requeued by a preemption: it queues as of then, not its creation (pass it back
  // as Workload::queued_ms to keep its place after a restart).
  std::optional<int64_t> queued_ms;
};

// Why a workload is where it is (Engine::explain): facts only; `api/fleet_views.cc` renders them.
struct Explanation {
  enum class State { kPending, kAdmitted, kFinished };
  // One flavor tried for one resource of a pod set, or a resource no flavor covers.
  struct FlavorTry {
    enum class Verdict { kFits, kNeedsPreemption, kNeverFits, kDoesNotMatch, kNotCovered };
    std::string flavor;  // empty when kNotCovered
    std::string resource;
    Verdict verdict = Verdict::kFits;
    std::string detail;  // kDoesNotMatch, kNotCovered: why
    // The quota figures (milli-units), for a flavor that matches.
    Amount requested = 0, nominal = 0, in_use = 0, available = 0, borrowable = 0, at_most = 0;
  };
  struct PodSet {
    std::string name;
    int64_t count = 0;
    std::optional<int64_t> min_count;
    std::vector<FlavorTry> flavors;
  };
  struct Victim {
    std::string workload, cluster_queue;
    int32_t priority = 0;
    std::string reason;  // Kueue's preemption reason (InClusterQueue, InCohortReclamation, ...)
  };
  enum class Mode { kFit, kPreempt, kNoFit };

  std::string workload, cluster_queue, local_queue;
  int32_t priority = 0;
  State state = State::kPending;
  // The rest is set for a pending workload only.
  std::string reason;  // the last attempt's category; empty: not yet attempted
  std::string message;
  bool held = false;
  bool inadmissible = false;
  int64_t ahead_in_queue = 0;
  bool queue_stopped = false;  // the ClusterQueue's stopPolicy
  bool namespace_mismatch = false;
  std::string namespace_;  // the workload's, for the mismatch
  std::vector<PodSet> pod_sets;
  PreemptionPolicy policy;  // the ClusterQueue's
  // What a cycle would do now (not when the queue is stopped or the workload held).
  bool tried = false;
  Mode mode = Mode::kNoFit;
  std::vector<Victim> would_preempt;
  std::string assignment;  // the assignment's message, when it has one
};

struct QueueStatus {
  struct Usage {
    std::string flavor;
    std::string resource;
    Amount nominal = 0;
    std::optional<Amount> borrowing_limit;
    std::optional<Amount> lending_limit;
    Amount usage = 0;
    Amount borrowed = 0;   // usage above nominal
    Amount lent = 0;       // idle lendable quota others borrow, attributed pro rata in the tree
    Amount available = 0;  // what a new workload could use now, borrowing included
  };
  std::string name;
  std::string cohort;
  int64_t pending = 0;
  int64_t admitted = 0;
  std::vector<Usage> usage;
};

// The outcome of one cycle.
struct CycleResult {
  std::vector<std::string> admitted;
  std::vector<std::pair<std::string, std::string>> preempted;  // victim, reason
  bool changed = false;  // anything admitted, preempted, or a queue's state moved
};

// preemption_targets: a flavor per resource, and whether that resource needs preemption.
struct GivenAssignment {
  struct PodSet {
    int64_t count = 0;
    std::map<std::string, std::pair<std::string, bool>> flavors;  // resource -> (flavor, preempt)
  };
  std::map<std::string, PodSet> pod_sets;
};

class Engine {
 public:
  // Checks the world (unknown flavors or cohorts, cohort cycles, covered resources without quota,
  // duplicate names) and builds the quota tree.
  static Result<std::unique_ptr<Engine>> create(World world, EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // A workload that already holds quota (its admission says where and with what).
  Result<void> addAdmitted(Workload workload);
  // A new pending workload, queued through its LocalQueue.
  Result<void> submit(Workload workload);
  // The workload ends (admitted: its quota is released; pending: it leaves its queue).
  Result<void> finish(const std::string& name);

  // The current time, for what the engine stamps itself: a workload preempted now queues as if
  // it arrived now (Kueue's eviction timestamp), behind those already waiting. Never goes back;
  // without it, the newest creation time seen stands in.
  void setTime(int64_t now_ms);

  // One Kueue scheduling cycle; victims of preemption are evicted at the end of it.
  CycleResult cycle();
  // Cycles until one changes nothing; returns every cycle's admissions and preemptions.
  CycleResult runUntilStable(int64_t max_cycles = 1'000'000);

  // The victims Kueue would choose for `incoming` in its ClusterQueue with the given flavors.
  Result<std::vector<std::pair<std::string, std::string>>> preemptionTargets(
      const Workload& incoming, const std::string& cluster_queue, const GivenAssignment& given);

  // Keeps a pending workload out of admission (a budget gate, say) with this reason and
  // message, until release(). Admitted workloads are not touched.
  Result<void> hold(const std::string& name, const std::string& reason, const std::string& message);
  Result<void> release(const std::string& name);
  // Sends an admitted workload back to its queue from outside (its budget ran out, say): its
  // quota and placement are released and it queues as of now; an kEvicted event carries
  // `reason`. Pair it with hold() to keep it from being admitted again at once.
  Result<void> stop(const std::string& name, const std::string& reason, const std::string& message);

  // Gives every parked (inadmissible) workload another chance at the next cycle: something the
  // engine cannot see changed (may_preempt's answers: a tenant's priority grant).
  void reconsider();
  // Adds or relabels a namespace (a team created since the engine was).
  void setNamespace(const std::string& name, std::map<std::string, std::string> labels);
  bool hasNamespace(const std::string& name) const;

  // Every ClusterQueue's quota and usage per flavor and resource.
  std::vector<QueueStatus> queues() const;
  // Why a workload is where it is: per pod set, flavor and resource what it asks for, what the
  // queue has and could borrow, and what preemption would take or why it may not.
  Result<Explanation> explain(const std::string& name);

  std::optional<WorkloadStatus> status(const std::string& name) const;
  std::vector<std::string> workloadNames() const;
  const std::vector<Event>& events() const;
  // Hands over the events so far and forgets them (a long-running server's engine would
  // otherwise keep every event it ever made).
  std::vector<Event> takeEvents();
  int64_t cycles() const;

 private:
  class Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace purser::fleet
