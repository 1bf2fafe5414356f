// The admission engine's inside, shared by its files: one Engine::Impl holding the quota tree,
// the workloads and their queues, and the methods of each part of a cycle, defined in the file
// named for that part:
//   quota_tree.cc         the tree of ClusterQueues and Cohorts, quotas and usage (Kueue's cache)
//   queues.cc             workloads in their queues, holds, stops, the queues' state
//   flavor_assignment.cc  flavors for each pod set, and whether they fit
//   preemption.cc         victims within a ClusterQueue and across its Cohort
//   fair_sharing.cc       dominant resource shares and the fair preemption targets
//   cycle.cc              nomination, ordering, reservation, admission, placement
//   explain.cc            why a workload waits
//   engine.cc             the public Engine, which forwards here
// Only the fleet's own files include this header. Not thread-safe (one Engine, one thread).
#pragma once

#include "fleet/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>

#include "common/quantity.h"

namespace purser::fleet {

// The engine's vocabulary (internal to these files).
constexpr Amount kNone = -1;  // an unset limit

// How a flavor serves one resource, worst to best.
enum PMode { kNoFit = 0, kNoCandidates = 1, kPreempt = 2, kReclaim = 3, kFit = 4 };

// The assignment's mode as Kueue reports it: NoFit < Preempt < Fit.
enum class AssignMode { kNoFit = 0, kPreempt = 1, kFit = 2 };

inline AssignMode assignModeOf(PMode m) {
  if (m == kNoFit) return AssignMode::kNoFit;
  if (m == kFit) return AssignMode::kFit;
  return AssignMode::kPreempt;
}

struct Rep {
  PMode pm = kFit;
  int level = 0;
};

inline std::string amountText(Amount milli) { return Quantity::fromMilli(milli).toString(); }

// Pending reason categories, least to most severe for "no fit" resolution.
constexpr const char* kWaitingForQuota = "WaitingForQuota";
constexpr const char* kExceedsMaxQuota = "ExceedsMaxQuota";
constexpr const char* kNoMatchingFlavor = "NoMatchingFlavor";
constexpr const char* kMisconfigured = "Misconfigured";
constexpr const char* kWaitingForPreempted = "WaitingForPreemptedWorkloads";
// With an inventory: quota fits but no node has room now, or none ever could.
constexpr const char* kWaitingForPlacement = "WaitingForPlacement";
constexpr const char* kNeverFits = "NeverFits";
// How the reason that a pod set could never fit a ClusterQueue's quota begins.
constexpr std::string_view kNeverFitsPrefix = "it can never fit in ClusterQueue";

inline int severity(const std::string& reason) {
  if (reason == kNoMatchingFlavor) return 3;
  if (reason == kExceedsMaxQuota) return 2;
  return 1;
}

enum class Variant {
  kNever,
  kWithinCq,
  kHierarchicalReclaim,
  kReclaimWithoutBorrowing,
  kReclaimWhileBorrowing
};

inline const char* reasonOf(Variant v) {
  switch (v) {
    case Variant::kWithinCq:
      return "InClusterQueue";
    case Variant::kReclaimWhileBorrowing:
      return "InCohortReclaimWhileBorrowing";
    default:
      return "InCohortReclamation";
  }
}

class Engine::Impl {
 public:
  // --- The quota tree ------------------------------------------------------------------------

  struct Node {
    std::string name;
    bool is_cq = false;
    int cq = -1;  // index into cqs_ when is_cq
    int parent = -1;
    std::vector<int> children;
    std::vector<Amount> nominal, bl, ll;  // per FR; bl/ll kNone when unset
    std::vector<Amount> subtree, local, usage;
    int height = 0;
    int64_t weight_milli = 1000;
  };

  // Kueue's queue order without the sticky preemptor: higher priority, earlier creation, uid,
  // then name. A workload's keys do not change while it is queued.
  struct QueueOrder {
    const Impl* impl;
    bool operator()(int a, int b) const { return impl->queueOrderBefore(a, b); }
  };

  struct Cq {
    ClusterQueue spec;
    int node = -1;
    std::unordered_map<std::string, int> group_of;  // covered resource -> resource group
    bool covers_pods = false;
    // Pending workloads: `active` in Kueue's queue order (heads come from here); `parked` are
    // the inadmissible ones, back to `active` when quota is released in the tree.
    std::set<int, QueueOrder> active;
    std::vector<int> parked;
    std::vector<int> admitted;  // workload ids holding quota here
    int sticky = -1;            // BestEffortFIFO: the preemptor waiting for its victims
  };

  enum class State { kPending, kAdmitted, kFinished };

  struct Wl {
    Workload spec;
    int cq = -1;
    State state = State::kPending;
    bool inadmissible = false;
    bool attempted = false;
    bool evicting = false;  // chosen as a victim this cycle
    int64_t admitted_seq = 0;
    std::vector<std::pair<int, Amount>> usage;  // per FR while admitted
    std::string reason, message;
    std::string signature;  // what nomination depends on (drain mode's memo key)
    bool held = false;      // kept out of admission from outside (hold())
    // Queue order after priority: creation time, or, once preempted, the eviction (Kueue's
    // queue order timestamp), with the eviction's sequence breaking ties, so a victim queues
    // behind the workloads that were waiting when it was evicted, its preemptor among them.
    int64_t order_ms = 0;
    int64_t order_seq = 0;
    // The preemptor this workload was evicted for: until it is admitted, gives up (is parked)
    // or leaves, this workload is not nominated, so it cannot take back the capacity it was
    // evicted from (a preemption loop).
    int preempted_for = -1;
    bool pressing = false;  // preempted for its own admission and has not since given up
    // ... and, until this workload is admitted again, a workload it may not preempt in turn
    // (two workloads reclaiming from each other would take turns forever).
    int spare = -1;
  };

  static bool orderedBefore(const Wl& a, const Wl& b);

  // One pod set's flavors.
  struct PodSetAssign {
    std::string name;
    int64_t count = 0;
    std::map<std::string, int> flavor;  // resource -> flavor index
    std::map<std::string, PMode> mode;  // resource -> mode
    std::map<std::string, Amount> total;
    bool failed = false;
    std::vector<std::string> reasons;  // messages
    std::string category;              // when failed
  };

  struct Assignment {
    std::vector<PodSetAssign> pod_sets;
    std::map<int, Amount> usage;  // FR -> total
    std::set<int> need_preemption;
    int borrowing = 0;
    AssignMode mode = AssignMode::kFit;
    std::string category;  // pending reason when not Fit
    std::string message;
  };

  struct Target {
    int wl;
    Variant variant;
  };

  Impl(World world, EngineOptions options) : world_(std::move(world)), options_(options) {}

  Result<void> build();

  // The cache's usage or admitted set changed somewhere in `cq`'s cohort tree.
  void touch(int cq);

  int resourceIndex(const std::string& name, bool create);
  int fr(int flavor, int resource) const;
  int frOf(const std::string& flavor, const std::string& resource) const;
  const std::string& flavorName(int fr_index) const;
  const std::string& resourceName(int fr_index) const;

  int newNode(const std::string& name, bool is_cq);

  Result<void> applyQuotas(Node& node, const std::vector<ResourceGroup>& groups,
                           const std::string& what);

  static size_t u(int i);

  Amount localAvailable(const Node& n, int f) const;

  void addUsage(int n, int f, Amount v);

  void removeUsage(int n, int f, Amount v);

  Amount available(int n, int f) const;

  Amount cqAvailable(int cq, int f) const;

  Amount potential(int n, int f) const;

  // The height of the lowest subtree whose quota holds `val`, and whether that subtree is below
  // the root (so its quota may be reclaimed in the hierarchy).
  std::pair<int, bool> findHeight(int cq, int f, Amount val) const;

  // --- Workloads -------------------------------------------------------------------------------

  void addWorkloadUsage(int id);
  void removeWorkloadUsage(int id);

  Result<int> resolveQueue(Workload& w);

  Result<int> newWorkload(Workload w);

  Result<void> addAdmitted(Workload w);

  Result<void> submit(Workload w);

  Result<void> finish(const std::string& name);

  // Hardware was released: with an inventory shared by every tree, each tree's parked
  // workloads get another chance.
  void freePlacement(const std::string& name);

  // Quota was released in `cq`'s tree: every parked workload there gets another chance.
  void retryInadmissible(int cq);

  // Every parked workload in the tree under `root` gets another chance.
  void retryTree(int root);

  // Is `id` a victim whose preemptor still needs the capacity it was evicted from?
  bool waitsForPreemptor(int id);

  // Takes a pending workload out of its queue, parked or not.
  void unqueue(int id);

  void setParked(int id, bool parked);

  bool namespaceMatches(int cq, const std::string& ns) const;

  // Kueue's queue order: the sticky preemptor, higher priority, earlier creation, then name.
  bool queueOrderBefore(int a, int b) const;

  // --- Flavor assignment ---------------------------------------------------------------------

  bool flavorMatches(const ResourceFlavor& f, const PodSet& ps, std::string* why) const;

  static bool isPreferred(const Rep& a, const Rep& b, FungibilityPreference pref);

  static bool shouldTryNextFlavor(const Rep& r, const FlavorFungibility& f);

  // Whether `cq` could take `val` of one FR, and how.
  Rep fitsResourceQuota(int cq, const Wl& w, int f, Amount val, std::string* why,
                        std::string* category);

  // Whether some flavor of `group` could ever hold pod set `ps` (at its smallest partial count)
  // in `cq`, with `assumed` already taken by the workload's earlier pod sets. When none could,
  // `why` names the largest request against the most each flavor allows.
  bool everFits(int cq, const PodSet& ps, int64_t count, const ResourceGroup& group,
                const std::map<int, Amount>& assumed, std::string* why);

  // One attempt at assigning flavors to every pod set with the given counts.
  Assignment assign(const Wl& w, int cq, const std::vector<int64_t>& counts);

  // The assignment Kueue settles on, with its victims: the full counts if they fit or can
  // preempt, else the largest partial counts that do, else the full counts with no victims.
  std::pair<Assignment, std::vector<Target>> initialAssignment(const Wl& w, int cq);

  // --- Preemption ------------------------------------------------------------------------------

  bool mayPreempt(const Workload& pre, const Workload& cand) const;

  static bool satisfies(const Workload& pre, const Workload& cand, int policy_kind, int policy);

  bool usesAny(const Wl& w, const std::set<int>& frs) const;

  bool withinNominal(int n, const std::set<int>& frs) const;

  // Whether `request` fits in `cq` now (within its nominal quota unless borrowing is allowed).
  bool fits(int cq, const std::map<int, Amount>& request, bool allow_borrowing) const;

  // Candidate order: evicted first, other queues before the preemptor's, lower priority, most
  // recently admitted, then uid and name.
  bool candidateBefore(int cq, int a, int b) const;

  std::vector<Target> getTargets(const Wl& pre, int cq, const std::map<int, Amount>& request,
                                 const std::set<int>& need);

  // --- Fair sharing ------------------------------------------------------------------------------

  // The dominant resource share of a node (not the root) as Kueue computes it.
  struct Share {
    bool borrowing = false;
    double value = 0;  // +inf when borrowing with weight 0
    double unweighted = 0;
  };

  Share drs(int n) const;

  static int compareShare(const Share& a, const Share& b);

  std::vector<Target> fairTargets(const Wl& pre, int cq, const std::map<int, Amount>& request,
                                  const std::set<int>& need);

  // --- The cycle -------------------------------------------------------------------------------

  struct Nomination {
    Assignment assignment;
    std::vector<Target> targets;
  };

  struct Entry {
    int wl;
    int cq;
    std::shared_ptr<const Nomination> nomination;
    const Assignment& assignment() const { return nomination->assignment; }
    const std::vector<Target>& targets() const { return nomination->targets; }
    bool inadmissible = false;  // could not even be nominated (namespace, misconfiguration)
    std::string reason, message;
    std::vector<std::vector<PodPlacement>> placements;  // per pod set, with an inventory
  };

  // Everything about a workload its nomination reads: pod sets (names, counts, requests,
  // tolerations, selectors), priority, and its creation time and identity where the queue's
  // preemption policy compares them (LowerOrNewerEqualPriority).
  std::string signatureOf(const Wl& w) const;

  std::vector<Entry> nominate();

  bool entryBefore(const Entry& a, const Entry& b) const;

  // Fair sharing: the next entry, by Kueue's tournament. Each cohort compares its direct
  // children (ClusterQueues and sub-cohorts) by the child's dominant resource share with the
  // child's candidate admitted; the winner of each subtree competes one level up, and the root's
  // winner is next. Ties: not borrowing first, then priority (when sorting by it), then queue
  // order, then name. Trees do not share quota, so which tree goes first changes nothing; the
  // tree winners are taken by their ClusterQueue's share, as within a tree.
  struct FairCandidate {
    int entry = -1;
    // The share of each node on the path from the entry's ClusterQueue (first) to the child of
    // the root, with the entry admitted: at[k] is what the node's parent compares.
    std::vector<Share> at;
    std::vector<int> path;  // those nodes
  };

  bool fairBefore(const FairCandidate& a, size_t ka, const FairCandidate& b, size_t kb,
                  const std::vector<Entry>& entries) const;

  // The winner among the candidates under `node` (an index into cands, or -1), compared at the
  // level of `node`'s children.
  int tournament(int node, const std::vector<FairCandidate>& cands,
                 const std::map<int, std::vector<int>>& by_node,
                 const std::vector<Entry>& entries) const;

  int fairNext(const std::vector<Entry>& entries, const std::vector<bool>& done);

  CycleResult cycle();

  std::string preemptionReason(Variant v) const;

  // A head that needs preemption but has no victims holds its queue's capacity this cycle.
  void reserve(const Entry& e);

  // The flavors and counts an assignment gives each pod set (and their usage).
  std::vector<PodSetAssignment> podSetAssignments(const Assignment& a) const;

  Admission admissionOf(const Entry& e) const;

  // Admitted workloads whose leaving would make room on the hardware for `e` (its quota fits),
  // by the preemptor's queue's policy: lower priority in its own ClusterQueue, and, where it
  // may reclaim, workloads of cohort members above their nominal quota. Kueue's candidate
  // order, then the fewest that make room.
  std::vector<Target> placementTargets(const Entry& e, const std::vector<PodSetAssignment>& flavors,
                                       const std::set<int>& victims);

  void admit(const Entry& e);

  void evict(int id, const std::string& reason = "Preempted",
             const std::string& message = "preempted; waiting for quota again");

  CycleResult runUntilStable(int64_t max_cycles);

  Result<std::vector<std::pair<std::string, std::string>>> preemptionTargets(
      const Workload& incoming, const std::string& cq_name, const GivenAssignment& given);

  std::optional<WorkloadStatus> status(const std::string& name) const;

  std::vector<std::string> workloadNames() const;

  void setNamespace(const std::string& name, std::map<std::string, std::string> labels);

  Result<int> pendingId(const std::string& name) const;

  Result<void> hold(const std::string& name, const std::string& reason, const std::string& message);

  Result<void> stop(const std::string& name, const std::string& reason, const std::string& message);

  Result<void> release(const std::string& name);

  std::vector<QueueStatus> queues() const;

  // Why `name` is where it is, recomputed against the current state.
  Result<nlohmann::json> explain(const std::string& name);

  World world_;
  EngineOptions options_;
  std::unordered_map<std::string, int> flavor_index_;
  std::vector<std::string> resources_;
  std::unordered_map<std::string, int> resource_index_;
  int nfr_ = 0;
  std::vector<Node> nodes_;
  std::vector<Cq> cqs_;
  std::unordered_map<std::string, int> cq_index_;
  std::unordered_map<std::string, int> local_queues_;  // "namespace/name" -> cq
  std::unordered_map<std::string, int32_t> priority_classes_;
  std::vector<Wl> wls_;
  std::unordered_map<std::string, int> wl_index_;
  std::vector<Event> events_;
  int64_t cycles_ = 0;
  // Drain mode: each queue's nominations by the head's signature, valid while its tree is
  // unchanged.
  struct Memo {
    int64_t version = -1;
    std::unordered_map<std::string, std::shared_ptr<const Nomination>> by_signature;
  };
  std::vector<Memo> memo_;
  std::vector<int> root_of_;
  std::vector<int64_t> tree_version_;
  int64_t admit_seq_ = 0;
  // The latest time known (set, or the newest creation) and evictions so far: a preempted
  // workload's queue order.
  int64_t now_ms_ = INT64_MIN;
  int64_t evictions_ = 0;
};

}  // namespace purser::fleet
