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
// The small methods the others call in their loops (quota arithmetic, orders, comparisons) are
// defined here, in the class, so that every file inlines them; the rest live in their part's
// file. Only the fleet's own files include this header. Not thread-safe (one Engine, one thread).
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

  static bool orderedBefore(const Wl& a, const Wl& b) {
    if (a.order_ms != b.order_ms) return a.order_ms < b.order_ms;
    return a.order_seq < b.order_seq;
  }

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
  void touch(int cq) { ++tree_version_[u(root_of_[u(cqs_[u(cq)].node)])]; }

  int resourceIndex(const std::string& name, bool create) {
    auto it = resource_index_.find(name);
    if (it != resource_index_.end()) return it->second;
    if (!create) return -1;
    const int i = static_cast<int>(resources_.size());
    resources_.push_back(name);
    resource_index_[name] = i;
    return i;
  }
  int fr(int flavor, int resource) const {
    return flavor * static_cast<int>(resources_.size()) + resource;
  }
  int frOf(const std::string& flavor, const std::string& resource) const {
    auto f = flavor_index_.find(flavor);
    auto r = resource_index_.find(resource);
    if (f == flavor_index_.end() || r == resource_index_.end()) return -1;
    return fr(f->second, r->second);
  }
  const std::string& flavorName(int fr_index) const {
    return world_.flavors[static_cast<size_t>(fr_index / static_cast<int>(resources_.size()))].name;
  }
  const std::string& resourceName(int fr_index) const {
    return resources_[static_cast<size_t>(fr_index % static_cast<int>(resources_.size()))];
  }

  int newNode(const std::string& name, bool is_cq) {
    Node n;
    n.name = name;
    n.is_cq = is_cq;
    n.nominal.assign(static_cast<size_t>(nfr_), 0);
    n.bl.assign(static_cast<size_t>(nfr_), kNone);
    n.ll.assign(static_cast<size_t>(nfr_), kNone);
    n.subtree.assign(static_cast<size_t>(nfr_), 0);
    n.local.assign(static_cast<size_t>(nfr_), 0);
    n.usage.assign(static_cast<size_t>(nfr_), 0);
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size()) - 1;
  }

  Result<void> applyQuotas(Node& node, const std::vector<ResourceGroup>& groups,
                           const std::string& what);

  static size_t u(int i) { return static_cast<size_t>(i); }

  Amount localAvailable(const Node& n, int f) const {
    return std::max<Amount>(0, n.local[u(f)] - n.usage[u(f)]);
  }

  void addUsage(int n, int f, Amount v) {
    Node& node = nodes_[u(n)];
    const Amount la = localAvailable(node, f);
    node.usage[u(f)] += v;
    if (node.parent >= 0 && v > la) addUsage(node.parent, f, v - la);
  }

  void removeUsage(int n, int f, Amount v) {
    Node& node = nodes_[u(n)];
    const Amount stored = node.usage[u(f)] - node.local[u(f)];
    node.usage[u(f)] -= v;
    if (node.parent >= 0 && stored > 0) removeUsage(node.parent, f, std::min(v, stored));
  }

  Amount available(int n, int f) const {
    const Node& node = nodes_[u(n)];
    if (node.parent < 0) return node.subtree[u(f)] - node.usage[u(f)];
    Amount p = available(node.parent, f);
    if (node.bl[u(f)] != kNone) {
      const Amount stored = node.subtree[u(f)] - node.local[u(f)];
      const Amount used = std::max<Amount>(0, node.usage[u(f)] - node.local[u(f)]);
      p = std::min(p, stored - used + node.bl[u(f)]);
    }
    return localAvailable(node, f) + p;
  }

  Amount cqAvailable(int cq, int f) const {
    return std::max<Amount>(0, available(cqs_[u(cq)].node, f));
  }

  Amount potential(int n, int f) const {
    const Node& node = nodes_[u(n)];
    if (node.parent < 0) return node.subtree[u(f)];
    Amount a = node.local[u(f)] + potential(node.parent, f);
    if (node.bl[u(f)] != kNone) a = std::min(a, node.subtree[u(f)] + node.bl[u(f)]);
    return a;
  }

  // The height of the lowest subtree whose quota holds `val`, and whether that subtree is below
  // the root (so its quota may be reclaimed in the hierarchy).
  std::pair<int, bool> findHeight(int cq, int f, Amount val) const {
    const Node& node = nodes_[u(cqs_[u(cq)].node)];
    if (!(node.nominal[u(f)] < node.usage[u(f)] + val) || node.parent < 0) {
      return {0, node.parent >= 0};
    }
    Amount remaining = val - localAvailable(node, f);
    int last = node.parent;
    for (int c = node.parent; c >= 0; c = nodes_[u(c)].parent) {
      const Node& cn = nodes_[u(c)];
      if (!(cn.subtree[u(f)] < cn.usage[u(f)] + remaining)) return {cn.height, cn.parent >= 0};
      remaining -= localAvailable(cn, f);
      last = c;
    }
    return {nodes_[u(last)].height, false};
  }

  // --- Workloads -------------------------------------------------------------------------------

  void addWorkloadUsage(int id) {
    Wl& w = wls_[u(id)];
    const int node = cqs_[u(w.cq)].node;
    for (const auto& [f, v] : w.usage) addUsage(node, f, v);
  }
  void removeWorkloadUsage(int id) {
    Wl& w = wls_[u(id)];
    const int node = cqs_[u(w.cq)].node;
    for (const auto& [f, v] : w.usage) removeUsage(node, f, v);
  }

  Result<int> resolveQueue(Workload& w);

  Result<int> newWorkload(Workload w);

  Result<void> addAdmitted(Workload w);

  Result<void> submit(Workload w) {
    w.admission.reset();
    const int id = PURSER_TRY_VALUE(newWorkload(std::move(w)));
    Wl& wl = wls_[u(id)];
    // A new workload goes straight to its queue's active list.
    cqs_[u(wl.cq)].active.insert(id);
    return {};
  }

  Result<void> finish(const std::string& name);

  // Hardware was released: with an inventory shared by every tree, each tree's parked
  // workloads get another chance.
  void freePlacement(const std::string& name) {
    if (!options_.placement) return;
    options_.placement->free(name);
    std::set<int> roots;
    for (const auto& q : cqs_) roots.insert(root_of_[u(q.node)]);
    for (int r : roots) retryTree(r);
  }

  // Quota was released in `cq`'s tree: every parked workload there gets another chance.
  void retryInadmissible(int cq) { retryTree(root_of_[u(cqs_[u(cq)].node)]); }

  // Every parked workload in the tree under `root` gets another chance.
  void retryTree(int root);

  // Is `id` a victim whose preemptor still needs the capacity it was evicted from?
  bool waitsForPreemptor(int id) {
    Wl& w = wls_[u(id)];
    if (w.preempted_for < 0) return false;
    const Wl& p = wls_[u(w.preempted_for)];
    if (p.state == State::kPending && p.pressing && !p.inadmissible && !p.held) {
      w.reason = kWaitingForQuota;
      w.message = fmt::format(
          "preempted to make room for {}; waits until that workload is admitted", p.spec.name);
      return true;
    }
    w.preempted_for = -1;
    return false;
  }

  // Takes a pending workload out of its queue, parked or not.
  void unqueue(int id) {
    Wl& w = wls_[u(id)];
    Cq& q = cqs_[u(w.cq)];
    if (w.inadmissible) {
      std::erase(q.parked, id);
      w.inadmissible = false;
    } else {
      q.active.erase(id);
    }
  }

  void setParked(int id, bool parked) {
    Wl& w = wls_[u(id)];
    if (w.inadmissible == parked) return;
    Cq& q = cqs_[u(w.cq)];
    if (parked) {
      q.active.erase(id);
      q.parked.push_back(id);
    } else {
      std::erase(q.parked, id);
      q.active.insert(id);
    }
    w.inadmissible = parked;
  }

  bool namespaceMatches(int cq, const std::string& ns) const {
    const auto& sel = cqs_[u(cq)].spec.namespace_selector;
    if (!sel) return true;
    auto labels = world_.namespaces.find(ns);
    for (const auto& [key, values] : *sel) {
      if (labels == world_.namespaces.end()) return false;
      auto v = labels->second.find(key);
      if (v == labels->second.end()) return false;
      if (std::find(values.begin(), values.end(), v->second) == values.end()) return false;
    }
    return true;
  }

  // Kueue's queue order: the sticky preemptor, higher priority, earlier creation, then name.
  bool queueOrderBefore(int a, int b) const {
    const Workload& x = wls_[u(a)].spec;
    const Workload& y = wls_[u(b)].spec;
    if (x.priority != y.priority) return x.priority > y.priority;
    if (orderedBefore(wls_[u(a)], wls_[u(b)]) || orderedBefore(wls_[u(b)], wls_[u(a)])) {
      return orderedBefore(wls_[u(a)], wls_[u(b)]);
    }
    if (x.uid != y.uid) return x.uid < y.uid;
    return x.name < y.name;
  }

  // --- Flavor assignment ---------------------------------------------------------------------

  bool flavorMatches(const ResourceFlavor& f, const PodSet& ps, std::string* why) const;

  static bool isPreferred(const Rep& a, const Rep& b, FungibilityPreference pref) {
    if (a.pm == kNoFit) return false;
    if (b.pm == kNoFit) return true;
    if ((a.pm == kNoCandidates) != (b.pm == kNoCandidates)) return b.pm == kNoCandidates;
    if (pref == FungibilityPreference::kPreemptionOverBorrowing) {
      if (a.level != b.level) return a.level < b.level;
      return a.pm > b.pm;
    }
    if (a.pm != b.pm) return a.pm > b.pm;
    return a.level < b.level;
  }

  static bool shouldTryNextFlavor(const Rep& r, const FlavorFungibility& f) {
    if (r.pm == kNoFit || r.pm == kNoCandidates) return true;
    if ((r.pm == kPreempt || r.pm == kReclaim) &&
        f.when_can_preempt == WhenCanPreempt::kTryNextFlavor) {
      return true;
    }
    return r.level > 0 && f.when_can_borrow == WhenCanBorrow::kTryNextFlavor;
  }

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

  bool mayPreempt(const Workload& pre, const Workload& cand) const {
    return !options_.may_preempt || options_.may_preempt(pre, cand);
  }

  static bool satisfies(const Workload& pre, const Workload& cand, int policy_kind, int policy) {
    // policy_kind 0: within cluster queue; 1: reclaim within cohort.
    if (policy_kind == 0) {
      switch (static_cast<WithinClusterQueue>(policy)) {
        case WithinClusterQueue::kNever:
          return false;
        case WithinClusterQueue::kLowerPriority:
          return cand.priority < pre.priority;
        case WithinClusterQueue::kLowerOrNewerEqualPriority:
          return cand.priority < pre.priority ||
                 (cand.priority == pre.priority && pre.created_ms < cand.created_ms);
      }
      return false;
    }
    switch (static_cast<ReclaimWithinCohort>(policy)) {
      case ReclaimWithinCohort::kNever:
        return false;
      case ReclaimWithinCohort::kLowerPriority:
        return cand.priority < pre.priority;
      case ReclaimWithinCohort::kAny:
        return true;
    }
    return false;
  }

  bool usesAny(const Wl& w, const std::set<int>& frs) const {
    for (const auto& [f, _] : w.usage) {
      if (frs.count(f) != 0) return true;
    }
    return false;
  }

  bool withinNominal(int n, const std::set<int>& frs) const {
    const Node& node = nodes_[u(n)];
    for (int f : frs) {
      if (node.usage[u(f)] > node.subtree[u(f)]) return false;
    }
    return true;
  }

  // Whether `request` fits in `cq` now (within its nominal quota unless borrowing is allowed).
  bool fits(int cq, const std::map<int, Amount>& request, bool allow_borrowing) const {
    const Node& node = nodes_[u(cqs_[u(cq)].node)];
    for (const auto& [f, v] : request) {
      if (!allow_borrowing && node.usage[u(f)] + v > node.nominal[u(f)]) return false;
      if (v > cqAvailable(cq, f)) return false;
    }
    return true;
  }

  // Candidate order: evicted first, other queues before the preemptor's, lower priority, most
  // recently admitted, then uid and name.
  bool candidateBefore(int cq, int a, int b) const {
    const Wl& x = wls_[u(a)];
    const Wl& y = wls_[u(b)];
    if (x.evicting != y.evicting) return x.evicting;
    if ((x.cq == cq) != (y.cq == cq)) return y.cq == cq;
    if (x.spec.priority != y.spec.priority) return x.spec.priority < y.spec.priority;
    if (x.admitted_seq != y.admitted_seq) return x.admitted_seq > y.admitted_seq;
    if (x.spec.uid != y.spec.uid) return x.spec.uid < y.spec.uid;
    return x.spec.name < y.spec.name;
  }

  std::vector<Target> getTargets(const Wl& pre, int cq, const std::map<int, Amount>& request,
                                 const std::set<int>& need);

  // --- Fair sharing ------------------------------------------------------------------------------

  // The dominant resource share of a node (not the root) as Kueue computes it.
  struct Share {
    bool borrowing = false;
    double value = 0;  // +inf when borrowing with weight 0
    double unweighted = 0;
  };

  Share drs(int n) const {
    const Node& node = nodes_[u(n)];
    Share s;
    if (node.parent < 0) return s;
    const size_t nres = resources_.size();
    std::vector<Amount> borrowed(nres, 0), lendable(nres, 0);
    for (int f = 0; f < nfr_; ++f) {
      const size_t r = u(f) % nres;
      const Amount over = node.usage[u(f)] - node.subtree[u(f)];
      if (over > 0) {
        borrowed[r] += over;
        s.borrowing = true;
      }
      lendable[r] += potential(node.parent, f);
    }
    double ratio = 0;
    for (size_t r = 0; r < nres; ++r) {
      if (lendable[r] > 0) {
        ratio = std::max(
            ratio, static_cast<double>(borrowed[r]) * 1000.0 / static_cast<double>(lendable[r]));
      }
    }
    s.unweighted = ratio;
    if (!s.borrowing) return s;
    if (node.weight_milli == 0) {
      s.value = std::numeric_limits<double>::infinity();
    } else {
      s.value = ratio * 1000.0 / static_cast<double>(node.weight_milli);
    }
    return s;
  }

  static int compareShare(const Share& a, const Share& b) {
    if (std::isinf(a.value) && std::isinf(b.value)) {
      return a.unweighted < b.unweighted ? -1 : (a.unweighted > b.unweighted ? 1 : 0);
    }
    return a.value < b.value ? -1 : (a.value > b.value ? 1 : 0);
  }

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
  std::string signatureOf(const Wl& w) const {
    std::string s = fmt::format("p{}|", w.spec.priority);
    for (const auto& ps : w.spec.pod_sets) {
      s += fmt::format("{}:{}:{}", ps.name, ps.count, ps.min_count.value_or(-1));
      for (const auto& [r, v] : ps.requests) s += fmt::format(",{}={}", r, v);
      for (const auto& t : ps.tolerations) {
        s += fmt::format(",t{}/{}/{}/{}", t.key, t.op, t.value, t.effect);
      }
      for (const auto& [k, v] : ps.node_selector) s += fmt::format(",s{}={}", k, v);
      s += '|';
    }
    if (w.spare >= 0) s += fmt::format("x{}|", w.spare);
    // Who may be preempted depends on whose it is (may_preempt reads the namespace's tenant).
    if (options_.may_preempt) s += fmt::format("n{}|", w.spec.namespace_);
    if (cqs_[u(w.cq)].spec.preemption.within_cluster_queue ==
        WithinClusterQueue::kLowerOrNewerEqualPriority) {
      s += fmt::format("c{}|{}|{}", w.spec.created_ms, w.spec.uid, w.spec.name);
    }
    return s;
  }

  std::vector<Entry> nominate();

  bool entryBefore(const Entry& a, const Entry& b) const {
    // Heads with no nomination (outside their queue's namespaces) take nothing: first.
    if (a.inadmissible != b.inadmissible) return a.inadmissible;
    if (a.inadmissible) return false;
    if (a.assignment().borrowing != b.assignment().borrowing) {
      return a.assignment().borrowing < b.assignment().borrowing;
    }
    const Workload& x = wls_[u(a.wl)].spec;
    const Workload& y = wls_[u(b.wl)].spec;
    if (options_.priority_sorting_within_cohort && x.priority != y.priority) {
      return x.priority > y.priority;
    }
    const Wl& wx = wls_[u(a.wl)];
    const Wl& wy = wls_[u(b.wl)];
    if (orderedBefore(wx, wy) || orderedBefore(wy, wx)) return orderedBefore(wx, wy);
    return x.name < y.name;
  }

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
                  const std::vector<Entry>& entries) const {
    const Share& x = a.at[ka];
    const Share& y = b.at[kb];
    if (x.borrowing != y.borrowing) return !x.borrowing;
    if (const int c = compareShare(x, y); c != 0) return c < 0;
    const Workload& wa = wls_[u(entries[u(a.entry)].wl)].spec;
    const Workload& wb = wls_[u(entries[u(b.entry)].wl)].spec;
    if (options_.priority_sorting_within_cohort && wa.priority != wb.priority) {
      return wa.priority > wb.priority;
    }
    const Wl& oa = wls_[u(entries[u(a.entry)].wl)];
    const Wl& ob = wls_[u(entries[u(b.entry)].wl)];
    if (orderedBefore(oa, ob) || orderedBefore(ob, oa)) return orderedBefore(oa, ob);
    return wa.name < wb.name;
  }

  // The winner among the candidates under `node` (an index into cands, or -1), compared at the
  // level of `node`'s children.
  int tournament(int node, const std::vector<FairCandidate>& cands,
                 const std::map<int, std::vector<int>>& by_node,
                 const std::vector<Entry>& entries) const;

  int fairNext(const std::vector<Entry>& entries, const std::vector<bool>& done);

  CycleResult cycle();

  std::string preemptionReason(Variant v) const {
    if (v == Variant::kNever) return "InCohortFairSharing";  // fair-sharing strategies
    if (options_.fair_sharing && v == Variant::kHierarchicalReclaim) return "InCohortReclamation";
    return reasonOf(v);
  }

  // A head that needs preemption but has no victims holds its queue's capacity this cycle.
  void reserve(const Entry& e) {
    const Cq& q = cqs_[u(e.cq)];
    const Node& node = nodes_[u(q.node)];
    for (const auto& [f, v] : e.assignment().usage) {
      Amount r;
      if (e.assignment().borrowing > 0) {
        r = node.bl[u(f)] == kNone
                ? v
                : std::min(v, node.nominal[u(f)] + node.bl[u(f)] - node.usage[u(f)]);
      } else {
        r = std::max<Amount>(0, std::min(v, node.nominal[u(f)] - node.usage[u(f)]));
      }
      if (r > 0) addUsage(q.node, f, r);
    }
  }

  // The flavors and counts an assignment gives each pod set (and their usage).
  std::vector<PodSetAssignment> podSetAssignments(const Assignment& a) const {
    std::vector<PodSetAssignment> out;
    for (const auto& psa : a.pod_sets) {
      PodSetAssignment p;
      p.name = psa.name;
      p.count = psa.count;
      for (const auto& [res, f] : psa.flavor) {
        p.flavors[res] = world_.flavors[u(f)].name;
        auto t = psa.total.find(res);
        if (t != psa.total.end() && t->second != 0) p.usage[res] = t->second;
      }
      out.push_back(std::move(p));
    }
    return out;
  }

  Admission admissionOf(const Entry& e) const {
    Admission adm;
    adm.cluster_queue = cqs_[u(e.cq)].spec.name;
    adm.pod_sets = podSetAssignments(e.assignment());
    for (size_t i = 0; i < adm.pod_sets.size() && i < e.placements.size(); ++i) {
      adm.pod_sets[i].placements = e.placements[i];
    }
    return adm;
  }

  // Admitted workloads whose leaving would make room on the hardware for `e` (its quota fits),
  // by the preemptor's queue's policy: lower priority in its own ClusterQueue, and, where it
  // may reclaim, workloads of cohort members above their nominal quota. Kueue's candidate
  // order, then the fewest that make room.
  std::vector<Target> placementTargets(const Entry& e, const std::vector<PodSetAssignment>& flavors,
                                       const std::set<int>& victims);

  void admit(const Entry& e);

  void evict(int id, const std::string& reason = "Preempted",
             const std::string& message = "preempted; waiting for quota again");

  CycleResult runUntilStable(int64_t max_cycles) {
    CycleResult all;
    for (int64_t i = 0; i < max_cycles; ++i) {
      CycleResult r = cycle();
      for (auto& a : r.admitted) all.admitted.push_back(std::move(a));
      for (auto& p : r.preempted) all.preempted.push_back(std::move(p));
      if (!r.changed) break;
      all.changed = true;
    }
    return all;
  }

  Result<std::vector<std::pair<std::string, std::string>>> preemptionTargets(
      const Workload& incoming, const std::string& cq_name, const GivenAssignment& given);

  std::optional<WorkloadStatus> status(const std::string& name) const;

  std::vector<std::string> workloadNames() const {
    std::vector<std::string> out;
    for (const auto& w : wls_) out.push_back(w.spec.name);
    return out;
  }

  void setNamespace(const std::string& name, std::map<std::string, std::string> labels) {
    world_.namespaces[name] = std::move(labels);
    // A namespace newly selected may unpark workloads that were outside every selector.
    for (size_t n = 0; n < nodes_.size(); ++n) {
      if (nodes_[n].parent < 0) retryTree(static_cast<int>(n));
    }
  }

  Result<int> pendingId(const std::string& name) const {
    auto it = wl_index_.find(name);
    if (it == wl_index_.end() || wls_[u(it->second)].state == State::kFinished) {
      return fail(Error(ErrorCode::kNotFound, fmt::format("no workload named \"{}\"", name)));
    }
    return it->second;
  }

  Result<void> hold(const std::string& name, const std::string& reason,
                    const std::string& message) {
    const int id = PURSER_TRY_VALUE(pendingId(name));
    Wl& w = wls_[u(id)];
    if (w.state != State::kPending) return {};
    w.held = true;
    w.reason = reason;
    w.message = message;
    Cq& q = cqs_[u(w.cq)];
    if (q.sticky == id) q.sticky = -1;
    setParked(id, true);
    return {};
  }

  Result<void> stop(const std::string& name, const std::string& reason,
                    const std::string& message) {
    auto it = wl_index_.find(name);
    if (it == wl_index_.end() || wls_[u(it->second)].state != State::kAdmitted) {
      return fail(
          Error(ErrorCode::kNotFound, fmt::format("no admitted workload named \"{}\"", name)));
    }
    evict(it->second, reason, message);
    return {};
  }

  Result<void> release(const std::string& name) {
    const int id = PURSER_TRY_VALUE(pendingId(name));
    Wl& w = wls_[u(id)];
    if (!w.held) return {};
    w.held = false;
    if (w.state == State::kPending) setParked(id, false);
    return {};
  }

  std::vector<QueueStatus> queues() const;

  // Why `name` is where it is, recomputed against the current state.
  Result<Explanation> explain(const std::string& name);

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
