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

bool isDnsLabel(std::string_view s) {
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (s.empty() || s.size() > 63 || !alnum(s.front()) || !alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return alnum(c) || c == '-'; });
}

bool isDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (size_t start = 0;;) {
    const size_t dot = s.find('.', start);
    if (!isDnsLabel(s.substr(start, dot == std::string_view::npos ? dot : dot - start))) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool tolerates(const std::vector<Toleration>& tolerations, const Taint& taint) {
  for (const auto& t : tolerations) {
    if (!t.effect.empty() && t.effect != taint.effect) continue;
    if (t.op == "Exists") {
      if (t.key.empty() || t.key == taint.key) return true;
    } else if (t.key == taint.key && t.value == taint.value) {
      return true;
    }
  }
  return false;
}

namespace {

constexpr Amount kNone = -1;  // an unset limit

// How a flavor serves one resource, worst to best.
enum PMode { kNoFit = 0, kNoCandidates = 1, kPreempt = 2, kReclaim = 3, kFit = 4 };

// The assignment's mode as Kueue reports it: NoFit < Preempt < Fit.
enum class AssignMode { kNoFit = 0, kPreempt = 1, kFit = 2 };

AssignMode assignModeOf(PMode m) {
  if (m == kNoFit) return AssignMode::kNoFit;
  if (m == kFit) return AssignMode::kFit;
  return AssignMode::kPreempt;
}

struct Rep {
  PMode pm = kFit;
  int level = 0;
};

std::string amountText(Amount milli) { return Quantity::fromMilli(milli).toString(); }

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

int severity(const std::string& reason) {
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

const char* reasonOf(Variant v) {
  switch (v) {
    case Variant::kWithinCq:
      return "InClusterQueue";
    case Variant::kReclaimWhileBorrowing:
      return "InCohortReclaimWhileBorrowing";
    default:
      return "InCohortReclamation";
  }
}

}  // namespace

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

  Result<void> build() {
    // Flavors and resources.
    for (const auto& f : world_.flavors) {
      if (flavor_index_.count(f.name) != 0) {
        return fail(invalidArgument(fmt::format("ResourceFlavor \"{}\" is defined twice", f.name)));
      }
      flavor_index_[f.name] = static_cast<int>(flavor_index_.size());
    }
    const auto noteResources = [&](const std::vector<ResourceGroup>& groups) {
      for (const auto& g : groups) {
        for (const auto& r : g.covered) resourceIndex(r, true);
        for (const auto& f : g.flavors) {
          for (const auto& [r, _] : f.resources) resourceIndex(r, true);
        }
      }
    };
    for (const auto& c : world_.cohorts) noteResources(c.quotas);
    for (const auto& cq : world_.cluster_queues) noteResources(cq.resource_groups);
    nfr_ = static_cast<int>(flavor_index_.size() * resources_.size());

    // Cohorts (declared ones, then the implicit roots ClusterQueues name).
    std::unordered_map<std::string, int> cohort_node;
    for (const auto& c : world_.cohorts) {
      if (cohort_node.count(c.name) != 0) {
        return fail(invalidArgument(fmt::format("Cohort \"{}\" is defined twice", c.name)));
      }
      const int n = newNode(c.name, false);
      nodes_[n].weight_milli = c.fair_weight_milli;
      PURSER_TRY(applyQuotas(nodes_[n], c.quotas, "Cohort \"" + c.name + "\""));
      cohort_node[c.name] = n;
    }
    for (const auto& c : world_.cohorts) {
      if (c.parent.empty()) continue;
      auto it = cohort_node.find(c.parent);
      if (it == cohort_node.end()) {
        it = cohort_node.emplace(c.parent, newNode(c.parent, false)).first;
      }
      nodes_[cohort_node[c.name]].parent = it->second;
    }
    // Cycles in the cohort tree.
    for (const auto& [name, n] : cohort_node) {
      int slow = n, steps = 0;
      for (int p = nodes_[n].parent; p >= 0; p = nodes_[p].parent) {
        if (p == slow || ++steps > static_cast<int>(nodes_.size())) {
          return fail(
              invalidArgument(fmt::format("Cohort \"{}\": its parents form a cycle", name)));
        }
      }
    }
    for (const auto& spec : world_.cluster_queues) {
      if (cq_index_.count(spec.name) != 0) {
        return fail(
            invalidArgument(fmt::format("ClusterQueue \"{}\" is defined twice", spec.name)));
      }
      Cq cq{.active = std::set<int, QueueOrder>(QueueOrder{this})};
      cq.spec = spec;
      cq.node = newNode(spec.name, true);
      nodes_[cq.node].cq = static_cast<int>(cqs_.size());
      nodes_[cq.node].weight_milli = spec.fair_weight_milli;
      for (size_t g = 0; g < spec.resource_groups.size(); ++g) {
        const auto& group = spec.resource_groups[g];
        for (const auto& r : group.covered) {
          if (cq.group_of.count(r) != 0) {
            return fail(invalidArgument(fmt::format(
                "ClusterQueue \"{}\": resource \"{}\" is covered by two resource groups", spec.name,
                r)));
          }
          cq.group_of[r] = static_cast<int>(g);
          if (r == "pods") cq.covers_pods = true;
        }
        for (const auto& f : group.flavors) {
          for (const auto& [r, _] : f.resources) {
            if (std::find(group.covered.begin(), group.covered.end(), r) == group.covered.end()) {
              return fail(invalidArgument(fmt::format(
                  "ClusterQueue \"{}\": flavor \"{}\" sets quota for \"{}\", which its resource "
                  "group does not cover",
                  spec.name, f.flavor, r)));
            }
          }
          if (!f.resources.empty()) {
            for (const auto& r : group.covered) {
              if (f.resources.count(r) == 0) {
                return fail(invalidArgument(fmt::format(
                    "ClusterQueue \"{}\": flavor \"{}\" lists no quota for covered resource "
                    "\"{}\"",
                    spec.name, f.flavor, r)));
              }
            }
          }
        }
      }
      PURSER_TRY(
          applyQuotas(nodes_[cq.node], spec.resource_groups, "ClusterQueue \"" + spec.name + "\""));
      if (!spec.cohort.empty()) {
        auto it = cohort_node.find(spec.cohort);
        if (it == cohort_node.end()) {
          it = cohort_node.emplace(spec.cohort, newNode(spec.cohort, false)).first;
        }
        nodes_[cq.node].parent = it->second;
      }
      cq_index_[spec.name] = static_cast<int>(cqs_.size());
      cqs_.push_back(std::move(cq));
    }
    for (size_t n = 0; n < nodes_.size(); ++n) {
      if (nodes_[n].parent >= 0) nodes_[nodes_[n].parent].children.push_back(static_cast<int>(n));
    }
    // Subtree quotas bottom-up (children before parents: deepest first).
    std::vector<int> order(nodes_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::vector<int> depth(nodes_.size(), 0);
    for (size_t n = 0; n < nodes_.size(); ++n) {
      for (int p = nodes_[n].parent; p >= 0; p = nodes_[p].parent) ++depth[n];
    }
    std::sort(order.begin(), order.end(), [&](int a, int b) { return depth[a] > depth[b]; });
    for (int n : order) {
      Node& node = nodes_[n];
      for (int fr = 0; fr < nfr_; ++fr) {
        Amount sub = node.nominal[fr];
        for (int c : node.children) sub += nodes_[c].subtree[fr] - nodes_[c].local[fr];
        node.subtree[fr] = sub;
        node.local[fr] = node.ll[fr] == kNone ? 0 : std::max<Amount>(0, sub - node.ll[fr]);
      }
      int h = node.is_cq ? 0 : std::min<int>(static_cast<int>(node.children.size()), 1);
      for (int c : node.children) {
        if (!nodes_[c].is_cq) h = std::max(h, nodes_[c].height + 1);
      }
      node.height = h;
    }
    for (const auto& lq : world_.local_queues) {
      if (cq_index_.count(lq.cluster_queue) == 0) {
        return fail(
            invalidArgument(fmt::format("LocalQueue \"{}/{}\": no ClusterQueue named \"{}\"",
                                        lq.namespace_, lq.name, lq.cluster_queue)));
      }
      local_queues_[lq.namespace_ + "/" + lq.name] = cq_index_[lq.cluster_queue];
    }
    for (const auto& pc : world_.priority_classes) priority_classes_[pc.name] = pc.value;
    root_of_.resize(nodes_.size());
    for (size_t n = 0; n < nodes_.size(); ++n) {
      int r = static_cast<int>(n);
      while (nodes_[u(r)].parent >= 0) r = nodes_[u(r)].parent;
      root_of_[n] = r;
    }
    tree_version_.assign(nodes_.size(), 0);
    memo_.resize(cqs_.size());
    return {};
  }

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
                           const std::string& what) {
    for (const auto& g : groups) {
      for (const auto& f : g.flavors) {
        auto fi = flavor_index_.find(f.flavor);
        if (fi == flavor_index_.end()) {
          return fail(
              invalidArgument(fmt::format("{}: no ResourceFlavor named \"{}\"", what, f.flavor)));
        }
        for (const auto& [r, q] : f.resources) {
          const int i = fr(fi->second, resourceIndex(r, false));
          node.nominal[static_cast<size_t>(i)] = q.nominal;
          if (q.borrowing_limit) node.bl[static_cast<size_t>(i)] = *q.borrowing_limit;
          if (q.lending_limit) {
            if (*q.lending_limit > q.nominal && node.is_cq) {
              return fail(invalidArgument(fmt::format(
                  "{}: the lending limit of {} in flavor \"{}\" is above its nominal quota", what,
                  r, f.flavor)));
            }
            node.ll[static_cast<size_t>(i)] = *q.lending_limit;
          }
        }
      }
    }
    return {};
  }

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

  Result<int> resolveQueue(Workload& w) {
    if (!w.priority_class.empty()) {
      auto pc = priority_classes_.find(w.priority_class);
      if (pc == priority_classes_.end()) {
        return fail(invalidArgument(fmt::format(
            "Workload \"{}\": no WorkloadPriorityClass named \"{}\"", w.name, w.priority_class)));
      }
      w.priority = pc->second;
    }
    if (!w.cluster_queue.empty() && w.local_queue.empty()) {
      auto it = cq_index_.find(w.cluster_queue);
      if (it == cq_index_.end()) {
        return fail(invalidArgument(
            fmt::format("Workload \"{}\": no ClusterQueue named \"{}\"", w.name, w.cluster_queue)));
      }
      return it->second;
    }
    auto it = local_queues_.find(w.namespace_ + "/" + w.local_queue);
    if (it == local_queues_.end()) {
      return fail(invalidArgument(
          fmt::format("Workload \"{}\": no LocalQueue named \"{}\" in namespace \"{}\"", w.name,
                      w.local_queue, w.namespace_)));
    }
    return it->second;
  }

  Result<int> newWorkload(Workload w) {
    if (wl_index_.count(w.name) != 0 && wls_[u(wl_index_[w.name])].state != State::kFinished) {
      return fail(invalidArgument(fmt::format("Workload \"{}\" already exists", w.name)));
    }
    if (w.pod_sets.empty()) {
      return fail(invalidArgument(fmt::format("Workload \"{}\" has no pod sets", w.name)));
    }
    // Every total (requests x count, summed over pod sets) must stay far from overflow.
    constexpr Amount kMostTotal = Amount{1} << 60;
    std::map<std::string, Amount> totals;
    for (const auto& ps : w.pod_sets) {
      if (ps.count < 0 || (ps.min_count && (*ps.min_count < 0 || *ps.min_count > ps.count))) {
        return fail(invalidArgument(
            fmt::format("Workload \"{}\": pod set \"{}\" has an invalid count", w.name, ps.name)));
      }
      for (const auto& [res, per_pod] : ps.requests) {
        Amount total = 0;
        if (per_pod < 0 || __builtin_mul_overflow(per_pod, ps.count, &total) ||
            total > kMostTotal || (totals[res] += total) > kMostTotal) {
          return fail(invalidArgument(fmt::format(
              "Workload \"{}\": pod set \"{}\" requests more {} than any quota can hold", w.name,
              ps.name, res)));
        }
      }
    }
    const int cq = PURSER_TRY_VALUE(resolveQueue(w));
    Wl wl;
    wl.spec = std::move(w);
    wl.cq = cq;
    wl.order_ms = wl.spec.queued_ms.value_or(wl.spec.created_ms);
    wl.order_seq = wl.spec.queued_ms ? ++evictions_ : 0;
    if (wl.spec.created_ms != INT64_MIN) now_ms_ = std::max(now_ms_, wl.spec.created_ms);
    const int id = static_cast<int>(wls_.size());
    wl_index_[wl.spec.name] = id;
    wls_.push_back(std::move(wl));
    return id;
  }

  Result<void> addAdmitted(Workload w) {
    if (!w.admission) {
      return fail(invalidArgument(fmt::format("Workload \"{}\" has no admission", w.name)));
    }
    const std::string cq_name = w.admission->cluster_queue;
    if (cq_index_.count(cq_name) == 0) {
      return fail(invalidArgument(
          fmt::format("Workload \"{}\": no ClusterQueue named \"{}\"", w.name, cq_name)));
    }
    if (w.cluster_queue.empty()) w.cluster_queue = cq_name;
    std::vector<std::pair<int, Amount>> usage;
    std::map<int, Amount> total;
    for (const auto& ps : w.admission->pod_sets) {
      for (const auto& [res, amount] : ps.usage) {
        auto fl = ps.flavors.find(res);
        if (fl == ps.flavors.end()) {
          if (amount == 0) continue;
          return fail(invalidArgument(fmt::format(
              "Workload \"{}\": pod set \"{}\" uses {} without a flavor", w.name, ps.name, res)));
        }
        const int f = frOf(fl->second, res);
        if (f < 0) {
          return fail(invalidArgument(fmt::format(
              "Workload \"{}\": no quota of {} in flavor \"{}\"", w.name, res, fl->second)));
        }
        total[f] += amount;
      }
    }
    // An admitted workload is placed in its admission's queue directly.
    Workload copy = w;
    copy.local_queue.clear();
    copy.cluster_queue = cq_name;
    const int id = PURSER_TRY_VALUE(newWorkload(std::move(copy)));
    Wl& wl = wls_[u(id)];
    wl.cq = cq_index_[cq_name];
    wl.state = State::kAdmitted;
    wl.usage.assign(total.begin(), total.end());
    // Later admissions rank after it (candidate order prefers the most recently admitted).
    wl.admitted_seq = wl.spec.admitted_ms;
    admit_seq_ = std::max(admit_seq_, wl.spec.admitted_ms);
    cqs_[u(wl.cq)].admitted.push_back(id);
    addWorkloadUsage(id);
    touch(wl.cq);
    // Its placement is held again; one that no longer fits the inventory (the hardware changed)
    // is kept by quota alone, and the caller learns it from status().
    if (options_.placement && !options_.placement->take(wl.spec)) {
      for (auto& ps : wl.spec.admission->pod_sets) ps.placements.clear();
    }
    return {};
  }

  Result<void> submit(Workload w) {
    w.admission.reset();
    const int id = PURSER_TRY_VALUE(newWorkload(std::move(w)));
    Wl& wl = wls_[u(id)];
    // A new workload goes straight to its queue's active list.
    cqs_[u(wl.cq)].active.insert(id);
    return {};
  }

  Result<void> finish(const std::string& name) {
    auto it = wl_index_.find(name);
    if (it == wl_index_.end() || wls_[u(it->second)].state == State::kFinished) {
      return fail(Error(ErrorCode::kNotFound, fmt::format("no workload named \"{}\"", name)));
    }
    const int id = it->second;
    Wl& w = wls_[u(id)];
    Cq& cq = cqs_[u(w.cq)];
    if (w.state == State::kAdmitted) {
      removeWorkloadUsage(id);
      touch(w.cq);
      std::erase(cq.admitted, id);
      w.usage.clear();
      w.spec.admission.reset();
      retryInadmissible(w.cq);
      freePlacement(name);
    } else {
      unqueue(id);
      if (cq.sticky == id) cq.sticky = -1;
    }
    w.state = State::kFinished;
    events_.push_back({Event::Kind::kFinished, name, cq.spec.name, "", "", "", cycles_});
    return {};
  }

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
  void retryTree(int root) {
    std::vector<int> stack = {root};
    while (!stack.empty()) {
      const int n = stack.back();
      stack.pop_back();
      if (nodes_[u(n)].is_cq) {
        Cq& q = cqs_[u(nodes_[u(n)].cq)];
        std::vector<int> still;
        for (int id : q.parked) {
          Wl& w = wls_[u(id)];
          if (!w.held && namespaceMatches(nodes_[u(n)].cq, w.spec.namespace_)) {
            w.inadmissible = false;
            q.active.insert(id);
          } else {
            still.push_back(id);
          }
        }
        q.parked = std::move(still);
      }
      for (int c : nodes_[u(n)].children) stack.push_back(c);
    }
  }

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

  bool flavorMatches(const ResourceFlavor& f, const PodSet& ps, std::string* why) const {
    for (const auto& t : f.taints) {
      if (t.effect != "NoSchedule" && t.effect != "NoExecute") continue;
      if (!tolerates(ps.tolerations, t) && !tolerates(f.tolerations, t)) {
        *why = fmt::format("untolerated taint {{{} {} {}}} in flavor {}", t.key, t.value, t.effect,
                           f.name);
        return false;
      }
    }
    for (const auto& [key, value] : ps.node_selector) {
      auto it = f.node_labels.find(key);
      if (it != f.node_labels.end() && it->second != value) {
        *why = fmt::format("flavor {} doesn't match node affinity", f.name);
        return false;
      }
    }
    return true;
  }

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
                        std::string* category) {
    const Cq& q = cqs_[u(cq)];
    const Node& node = nodes_[u(q.node)];
    const Amount max_cap = potential(q.node, f);
    if (val > max_cap) {
      *why = fmt::format(
          "insufficient quota for {} in flavor {}, request ({}) > maximum capacity ({})",
          resourceName(f), flavorName(f), amountText(val), amountText(max_cap));
      *category = kExceedsMaxQuota;
      return {kNoFit, 0};
    }
    auto [level, may_reclaim] = findHeight(cq, f, val);
    const Amount avail = cqAvailable(cq, f);
    if (val <= avail) return {kFit, level};
    *why = fmt::format("insufficient unused quota for {} in flavor {}, {} more needed",
                       resourceName(f), flavorName(f), amountText(val - avail));
    *category = kWaitingForQuota;
    const bool while_borrowing =
        q.spec.preemption.borrow_within_cohort != BorrowWithinCohort::kNever ||
        (options_.fair_sharing &&
         q.spec.preemption.reclaim_within_cohort != ReclaimWithinCohort::kNever);
    if (node.nominal[u(f)] >= val || may_reclaim || while_borrowing) {
      const std::map<int, Amount> request = {{f, val}};
      const std::set<int> need = {f};
      auto targets = getTargets(w, cq, request, need);
      if (targets.empty()) return {kNoCandidates, level};
      bool own = false;
      for (const auto& t : targets) own = own || wls_[u(t.wl)].cq == cq;
      // The borrowing level once the victims are gone.
      for (const auto& t : targets) removeWorkloadUsage(t.wl);
      const int after = findHeight(cq, f, val).first;
      for (const auto& t : targets) addWorkloadUsage(t.wl);
      return {own ? kPreempt : kReclaim, after};
    }
    return {kNoFit, 0};
  }

  // Whether some flavor of `group` could ever hold pod set `ps` (at its smallest partial count)
  // in `cq`, with `assumed` already taken by the workload's earlier pod sets. When none could,
  // `why` names the largest request against the most each flavor allows.
  bool everFits(int cq, const PodSet& ps, int64_t count, const ResourceGroup& group,
                const std::map<int, Amount>& assumed, std::string* why) {
    const Cq& q = cqs_[u(cq)];
    const int64_t least = ps.min_count ? std::min(*ps.min_count, count) : count;
    std::vector<std::string> limits;
    for (const auto& fq : group.flavors) {
      const int flavor = flavor_index_.at(fq.flavor);
      std::string ignored;
      if (!flavorMatches(world_.flavors[u(flavor)], ps, &ignored)) continue;
      bool holds = true;
      for (const auto& r : group.covered) {
        Amount per_pod = 0;
        if (r == "pods" && q.covers_pods) {
          per_pod = 1000;
        } else if (auto it = ps.requests.find(r); it != ps.requests.end()) {
          per_pod = it->second;
        }
        if (per_pod == 0) continue;
        const int f = fr(flavor, resourceIndex(r, false));
        auto before = assumed.find(f);
        const Amount val = per_pod * least + (before == assumed.end() ? 0 : before->second);
        const Amount most = potential(q.node, f);
        if (val > most) {
          holds = false;
          limits.push_back(fmt::format("flavor {} holds at most {} {} ({} asked)", fq.flavor,
                                       amountText(most), r, amountText(val)));
          break;
        }
      }
      if (holds) return true;
    }
    std::string joined;
    for (const auto& l : limits) joined += (joined.empty() ? "" : " and ") + l;
    *why = fmt::format("{} {}: {}", kNeverFitsPrefix, q.spec.name, joined);
    return false;
  }

  // One attempt at assigning flavors to every pod set with the given counts.
  Assignment assign(const Wl& w, int cq, const std::vector<int64_t>& counts) {
    Assignment a;
    const Cq& q = cqs_[u(cq)];
    AssignMode worst = AssignMode::kFit;
    for (size_t i = 0; i < w.spec.pod_sets.size(); ++i) {
      const PodSet& ps = w.spec.pod_sets[i];
      PodSetAssign psa;
      psa.name = ps.name;
      psa.count = counts[i];
      for (const auto& [res, per_pod] : ps.requests) psa.total[res] = per_pod * counts[i];
      if (q.covers_pods) psa.total["pods"] = counts[i] * 1000;  // one pod each, in milli-units
      std::set<int> groups_done;
      PMode ps_mode = kFit;
      for (const auto& [res, total] : psa.total) {
        auto g = q.group_of.find(res);
        if (g == q.group_of.end()) {
          if (total == 0) continue;
          psa.failed = true;
          psa.reasons.push_back(fmt::format("resource {} unavailable in ClusterQueue", res));
          psa.category = kNoMatchingFlavor;
          break;
        }
        if (!groups_done.insert(g->second).second) continue;
        const ResourceGroup& group = q.spec.resource_groups[u(g->second)];
        // The pod set's requests for this group's resources.
        std::map<std::string, Amount> group_requests;
        for (const auto& r : group.covered) {
          auto t = psa.total.find(r);
          if (t != psa.total.end()) group_requests[r] = t->second;
        }
        std::map<std::string, std::pair<int, PMode>> best;
        Rep best_rep{kNoFit, 0};
        std::vector<std::pair<std::string, std::string>> attempts;  // (category, message)
        for (const auto& fq : group.flavors) {
          const int flavor = flavor_index_.at(fq.flavor);
          std::string why;
          if (!flavorMatches(world_.flavors[u(flavor)], ps, &why)) {
            attempts.emplace_back(kNoMatchingFlavor, why);
            continue;
          }
          Rep rep{kFit, 0};
          std::map<std::string, std::pair<int, PMode>> choice;
          for (const auto& [r, v] : group_requests) {
            const int f = fr(flavor, resourceIndex(r, false));
            auto assumed = a.usage.find(f);
            const Amount val = v + (assumed == a.usage.end() ? 0 : assumed->second);
            std::string msg, cat;
            const Rep one = fitsResourceQuota(cq, w, f, val, &msg, &cat);
            if (!msg.empty()) attempts.emplace_back(cat, msg);
            if (isPreferred(rep, one, q.spec.fungibility.preference) || one.pm == kNoFit) {
              rep = one;
            } else if (one.pm == rep.pm) {
              rep.level = std::max(rep.level, one.level);
            }
            if (rep.pm == kNoFit) break;
            choice[r] = {flavor, one.pm};
          }
          if (rep.pm == kNoFit) continue;
          if (!shouldTryNextFlavor(rep, q.spec.fungibility)) {
            best = choice;
            best_rep = rep;
            break;
          }
          if (isPreferred(rep, best_rep, q.spec.fungibility.preference)) {
            best = choice;
            best_rep = rep;
          }
        }
        if (best.empty()) {
          psa.failed = true;
          // The alternatives' least severe reason stands for the group.
          std::string cat = kNoMatchingFlavor;
          int sev = 4;
          for (const auto& [c, m] : attempts) {
            if (severity(c) < sev) {
              sev = severity(c);
              cat = c;
            }
            psa.reasons.push_back(m);
          }
          if (attempts.empty()) psa.reasons.push_back("no flavor of its resource group fits");
          // Kueue's attempts stop at the first resource that does not fit now, so they can say
          // "insufficient unused quota" of a pod set that no flavor could ever hold. When none
          // could, even at its smallest partial count, that is the reason that stands.
          if (cat == kWaitingForQuota) {
            std::string never;
            if (!everFits(cq, ps, counts[i], group, a.usage, &never)) {
              cat = kExceedsMaxQuota;
              psa.reasons.push_back(never);
            }
          }
          psa.category = cat;
          break;
        }
        for (const auto& [r, choice] : best) {
          psa.flavor[r] = choice.first;
          psa.mode[r] = choice.second;
          ps_mode = std::min(ps_mode, choice.second);
        }
        // Reasons are kept for the message even when the pod set ends up fitting by preemption.
        if (best_rep.pm != kFit) {
          for (const auto& [c, m] : attempts) psa.reasons.push_back(m);
        }
        a.borrowing = std::max(a.borrowing, best_rep.level);
      }
      if (psa.failed) {
        a.pod_sets.push_back(std::move(psa));
        worst = AssignMode::kNoFit;
        break;
      }
      for (const auto& [res, total] : psa.total) {
        auto fl = psa.flavor.find(res);
        if (fl == psa.flavor.end() || total == 0) continue;
        const int f = fr(fl->second, resourceIndex(res, false));
        a.usage[f] += total;
        if (psa.mode[res] != kFit) a.need_preemption.insert(f);
      }
      worst = std::min(worst, assignModeOf(ps_mode));
      a.pod_sets.push_back(std::move(psa));
    }
    a.mode = worst;
    // The message and category of what did not fit.
    std::vector<std::string> parts;
    std::string category;
    for (const auto& psa : a.pod_sets) {
      if (!psa.failed && psa.reasons.empty()) continue;
      std::vector<std::string> reasons = psa.reasons;
      std::sort(reasons.begin(), reasons.end());
      reasons.erase(std::unique(reasons.begin(), reasons.end()), reasons.end());
      // That it can never fit is the headline; what is short now follows, in Kueue's order.
      std::stable_partition(reasons.begin(), reasons.end(),
                            [](const std::string& r) { return r.starts_with(kNeverFitsPrefix); });
      std::string joined;
      for (const auto& r : reasons) joined += (joined.empty() ? "" : ", ") + r;
      parts.push_back(fmt::format("couldn't assign flavors to pod set {}: {}", psa.name, joined));
      if (psa.failed && (category.empty() || severity(psa.category) > severity(category))) {
        category = psa.category;
      }
    }
    for (const auto& p : parts) a.message += (a.message.empty() ? "" : "; ") + p;
    a.category = category.empty() ? kWaitingForQuota : category;
    return a;
  }

  // The assignment Kueue settles on, with its victims: the full counts if they fit or can
  // preempt, else the largest partial counts that do, else the full counts with no victims.
  std::pair<Assignment, std::vector<Target>> initialAssignment(const Wl& w, int cq) {
    std::vector<int64_t> full;
    for (const auto& ps : w.spec.pod_sets) full.push_back(ps.count);
    Assignment a = assign(w, cq, full);
    if (a.mode == AssignMode::kFit) return {std::move(a), {}};
    if (a.mode == AssignMode::kPreempt) {
      auto targets = getTargets(w, cq, a.usage, a.need_preemption);
      if (!targets.empty()) return {std::move(a), std::move(targets)};
    }
    if (options_.partial_admission) {
      int64_t total_delta = 0;
      std::vector<int64_t> delta;
      for (const auto& ps : w.spec.pod_sets) {
        delta.push_back(ps.count - ps.min_count.value_or(ps.count));
        total_delta += delta.back();
      }
      if (total_delta > 0) {
        const auto countsAt = [&](int64_t i) {
          std::vector<int64_t> c;
          for (size_t k = 0; k < full.size(); ++k)
            c.push_back(full[k] - delta[k] * i / total_delta);
          return c;
        };
        std::optional<std::pair<Assignment, std::vector<Target>>> found;
        const auto good = [&](int64_t i) -> bool {
          Assignment t = assign(w, cq, countsAt(i));
          if (t.mode == AssignMode::kFit) {
            found = {std::move(t), {}};
            return true;
          }
          if (t.mode == AssignMode::kPreempt) {
            auto victims = getTargets(w, cq, t.usage, t.need_preemption);
            if (!victims.empty()) {
              found = {std::move(t), std::move(victims)};
              return true;
            }
          }
          return false;
        };
        // The smallest reduction that fits (fit is monotone in the reduction).
        int64_t lo = 0, hi = total_delta;
        if (good(hi)) {
          while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (good(mid)) {
              hi = mid;
            } else {
              lo = mid + 1;
            }
          }
          found.reset();
          good(hi);
          if (found) return std::move(*found);
        }
      }
    }
    return {std::move(a), {}};
  }

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
                                 const std::set<int>& need) {
    if (options_.fair_sharing) return fairTargets(pre, cq, request, need);
    const Cq& q = cqs_[u(cq)];
    const PreemptionPolicy& policy = q.spec.preemption;
    struct Cand {
      int wl;
      int lca;
      Variant variant;
    };
    std::vector<Cand> same, hierarchy, priority;
    const auto classify = [&](const Wl& w, bool advantage) {
      if (!usesAny(w, need) || !mayPreempt(pre.spec, w.spec)) return Variant::kNever;
      if (w.cq == cq) {
        return satisfies(pre.spec, w.spec, 0, static_cast<int>(policy.within_cluster_queue))
                   ? Variant::kWithinCq
                   : Variant::kNever;
      }
      if (!satisfies(pre.spec, w.spec, 1, static_cast<int>(policy.reclaim_within_cohort))) {
        return Variant::kNever;
      }
      if (advantage) return Variant::kHierarchicalReclaim;
      if (policy.borrow_within_cohort == BorrowWithinCohort::kNever) {
        return Variant::kReclaimWithoutBorrowing;
      }
      if (w.spec.priority >= pre.spec.priority ||
          (policy.max_priority_threshold && w.spec.priority > *policy.max_priority_threshold)) {
        return Variant::kReclaimWithoutBorrowing;
      }
      return Variant::kReclaimWhileBorrowing;
    };
    if (policy.within_cluster_queue != WithinClusterQueue::kNever) {
      for (int id : q.admitted) {
        if (wls_[u(id)].evicting || id == pre.spare) continue;
        const Variant v = classify(wls_[u(id)], false);
        if (v != Variant::kNever) same.push_back({id, q.node, v});
      }
    }
    const Node& pnode = nodes_[u(q.node)];
    if (pnode.parent >= 0 && policy.reclaim_within_cohort != ReclaimWithinCohort::kNever) {
      bool advantage = true;
      std::map<int, Amount> remaining;
      for (const auto& [f, v] : request) {
        if (pnode.usage[u(f)] + v > pnode.nominal[u(f)]) advantage = false;
        remaining[f] = std::max<Amount>(0, v - localAvailable(pnode, f));
      }
      std::function<void(int, int, int, bool)> collect = [&](int cohort, int skip, int lca,
                                                             bool adv) {
        for (int c : nodes_[u(cohort)].children) {
          if (c == skip) continue;
          const Node& cn = nodes_[u(c)];
          if (withinNominal(c, need)) continue;
          if (!cn.is_cq) {
            collect(c, skip, lca, adv);
            continue;
          }
          if (cn.cq == cq) continue;
          for (int id : cqs_[u(cn.cq)].admitted) {
            if (wls_[u(id)].evicting || id == pre.spare) continue;
            const Variant v = classify(wls_[u(id)], adv);
            if (v == Variant::kNever) continue;
            (v == Variant::kHierarchicalReclaim ? hierarchy : priority).push_back({id, lca, v});
          }
        }
      };
      int prev = q.node;
      for (int n = pnode.parent; n >= 0; n = nodes_[u(n)].parent) {
        collect(n, prev, n, advantage);
        const Node& cn = nodes_[u(n)];
        bool fits_here = true;
        for (auto& [f, rem] : remaining) {
          if (cn.usage[u(f)] + rem > cn.subtree[u(f)]) fits_here = false;
          rem = std::max<Amount>(0, rem - localAvailable(cn, f));
        }
        advantage = advantage || fits_here;
        prev = n;
      }
    }
    // Kueue's candidate order: hierarchical reclaims, then other queues', then the queue's own,
    // each by candidateBefore. The fields it reads are copied beside each candidate first: a
    // cohort can hold thousands, and the comparisons would otherwise each reach into two
    // workloads' records. Sorted only as far as the search reads: a preemption usually takes a
    // few, and a search that borrows never reads the candidates only reclaimable without it.
    struct Keyed {
      bool evicting;
      bool own;
      int32_t priority;
      int64_t admitted_seq;
      int wl;
      size_t index;  // into `ordered`
    };
    std::vector<Cand> ordered;
    ordered.reserve(hierarchy.size() + priority.size() + same.size());
    std::vector<Keyed> all_keys;
    all_keys.reserve(ordered.capacity());
    std::vector<size_t> segment_ends;  // in `all_keys`
    for (auto* seg : {&hierarchy, &priority, &same}) {
      for (const Cand& c : *seg) {
        const Wl& w = wls_[u(c.wl)];
        all_keys.push_back(
            {w.evicting, w.cq == cq, w.spec.priority, w.admitted_seq, c.wl, ordered.size()});
        ordered.push_back(c);
      }
      segment_ends.push_back(all_keys.size());
    }
    const auto before = [&](const Keyed& a, const Keyed& b) {
      if (a.evicting != b.evicting) return a.evicting;
      if (a.own != b.own) return b.own;
      if (a.priority != b.priority) return a.priority < b.priority;
      if (a.admitted_seq != b.admitted_seq) return a.admitted_seq > b.admitted_seq;
      return candidateBefore(cq, a.wl, b.wl);  // the same up to here: by uid, then name
    };
    // The candidates a search may take, in order, sorted as they are read. A search that may
    // take any reads (and sorts, within each segment) the full list in place.
    struct Order {
      std::vector<Keyed>* keys;
      std::vector<std::pair<size_t, size_t>> segments;  // [begin, end) of each, in `keys`
      size_t sorted_to = 0;                             // keys[0, sorted_to) is final
    };
    std::vector<Keyed> filtered;
    const auto orderFor = [&](bool borrow) {
      Order o{borrow ? &filtered : &all_keys, {}, 0};
      size_t from = 0;
      filtered.clear();
      for (size_t end : segment_ends) {
        if (!borrow) {
          o.segments.emplace_back(from, end);
          from = end;
          continue;
        }
        const size_t begin = filtered.size();
        for (size_t i = from; i < end; ++i) {
          if (ordered[all_keys[i].index].variant != Variant::kReclaimWithoutBorrowing) {
            filtered.push_back(all_keys[i]);
          }
        }
        o.segments.emplace_back(begin, filtered.size());
        from = end;
      }
      return o;
    };
    const auto candidate = [&](Order& o, size_t i) -> const Cand& {
      while (i >= o.sorted_to) {
        const auto seg = std::find_if(o.segments.begin(), o.segments.end(),
                                      [&](const auto& s) { return o.sorted_to < s.second; });
        // Double what is sorted of this segment (at least 32 more); the rest stays unordered.
        const size_t upto =
            std::min(seg->second, o.sorted_to + std::max<size_t>(32, o.sorted_to - seg->first));
        const auto first = o.keys->begin() + static_cast<std::ptrdiff_t>(o.sorted_to);
        const auto middle = o.keys->begin() + static_cast<std::ptrdiff_t>(upto);
        const auto last = o.keys->begin() + static_cast<std::ptrdiff_t>(seg->second);
        if (middle == last) {
          std::sort(first, last, before);
        } else {
          std::nth_element(first, middle, last, before);
          std::sort(first, middle, before);
        }
        o.sorted_to = upto;
      }
      return ordered[(*o.keys)[i].index];
    };
    const bool bwc_forbidden = policy.borrow_within_cohort == BorrowWithinCohort::kNever;
    bool under_nominal = true;
    for (int f : need) {
      if (!(pnode.usage[u(f)] < pnode.nominal[u(f)])) under_nominal = false;
    }
    const bool no_other = hierarchy.empty() && priority.empty();
    std::vector<bool> attempts;
    if (no_other || (bwc_forbidden && !under_nominal)) {
      attempts = {true};
    } else if (bwc_forbidden && hierarchy.empty()) {
      attempts = {false, true};
    } else {
      attempts = {true, false};
    }
    // Whether a cross-queue candidate is still worth taking.
    const auto valid = [&](const Cand& c, bool borrow) {
      const Wl& w = wls_[u(c.wl)];
      if (w.cq == cq) return true;
      if (borrow && c.variant == Variant::kReclaimWithoutBorrowing) return false;
      const int wnode = cqs_[u(w.cq)].node;
      if (withinNominal(wnode, need)) return false;
      for (int n = nodes_[u(wnode)].parent; n >= 0 && n != c.lca; n = nodes_[u(n)].parent) {
        if (withinNominal(n, need)) return false;
      }
      return true;
    };
    for (bool borrow : attempts) {
      std::vector<Cand> taken;
      bool done = false;
      Order order = orderFor(borrow);
      for (size_t i = 0; i < order.keys->size(); ++i) {
        const Cand& c = candidate(order, i);
        if (!valid(c, borrow)) continue;
        removeWorkloadUsage(c.wl);
        taken.push_back(c);
        if (fits(cq, request, borrow)) {
          done = true;
          break;
        }
      }
      if (done) {
        // Put back every victim it can do without, newest first; the last one stays.
        std::vector<bool> keep(taken.size(), true);
        for (int i = static_cast<int>(taken.size()) - 2; i >= 0; --i) {
          addWorkloadUsage(taken[u(i)].wl);
          if (fits(cq, request, borrow)) {
            keep[u(i)] = false;
          } else {
            removeWorkloadUsage(taken[u(i)].wl);
          }
        }
        std::vector<Target> out;
        for (size_t i = 0; i < taken.size(); ++i) {
          if (keep[i]) {
            addWorkloadUsage(taken[i].wl);
            out.push_back({taken[i].wl, taken[i].variant});
          }
        }
        return out;
      }
      for (const auto& c : taken) addWorkloadUsage(c.wl);
    }
    return {};
  }

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
                                  const std::set<int>& need) {
    const Cq& q = cqs_[u(cq)];
    const PreemptionPolicy& policy = q.spec.preemption;
    // Candidates per queue, in candidate order.
    std::map<int, std::vector<int>> by_cq;
    if (policy.within_cluster_queue != WithinClusterQueue::kNever) {
      for (int id : q.admitted) {
        const Wl& w = wls_[u(id)];
        if (w.evicting || id == pre.spare || !usesAny(w, need)) continue;
        if (!mayPreempt(pre.spec, w.spec)) continue;
        if (satisfies(pre.spec, w.spec, 0, static_cast<int>(policy.within_cluster_queue))) {
          by_cq[cq].push_back(id);
        }
      }
    }
    int root = q.node;
    while (nodes_[u(root)].parent >= 0) root = nodes_[u(root)].parent;
    if (nodes_[u(q.node)].parent >= 0 &&
        policy.reclaim_within_cohort != ReclaimWithinCohort::kNever) {
      std::vector<int> stack = {root};
      while (!stack.empty()) {
        const int n = stack.back();
        stack.pop_back();
        const Node& node = nodes_[u(n)];
        for (int c : node.children) stack.push_back(c);
        if (!node.is_cq || node.cq == cq) continue;
        bool borrowing = false;
        for (int f : need) borrowing = borrowing || node.usage[u(f)] > node.nominal[u(f)];
        if (!borrowing) continue;
        for (int id : cqs_[u(node.cq)].admitted) {
          const Wl& w = wls_[u(id)];
          if (w.evicting || id == pre.spare || !usesAny(w, need)) continue;
          if (!mayPreempt(pre.spec, w.spec)) continue;
          if (satisfies(pre.spec, w.spec, 1, static_cast<int>(policy.reclaim_within_cohort))) {
            by_cq[node.cq].push_back(id);
          }
        }
      }
    }
    for (auto& [_, list] : by_cq) {
      std::sort(list.begin(), list.end(), [&](int a, int b) { return candidateBefore(cq, a, b); });
    }
    if (by_cq.empty()) return {};
    // The incoming usage counts in every share; it is taken out for each fit check.
    const int pnode = q.node;
    for (const auto& [f, v] : request) addUsage(pnode, f, v);
    const auto fitsNow = [&]() {
      for (const auto& [f, v] : request) removeUsage(pnode, f, v);
      const bool ok = fits(cq, request, true);
      for (const auto& [f, v] : request) addUsage(pnode, f, v);
      return ok;
    };
    std::vector<Target> taken;
    const auto take = [&](int id, Variant v) {
      removeWorkloadUsage(id);
      taken.push_back({id, v});
    };
    // The child of the least common ancestor on each side ("almost LCA").
    const auto almostLca = [&](int a_node, int b_node) -> std::pair<int, int> {
      std::vector<int> pa, pb;
      for (int n = a_node; n >= 0; n = nodes_[u(n)].parent) pa.push_back(n);
      for (int n = b_node; n >= 0; n = nodes_[u(n)].parent) pb.push_back(n);
      std::reverse(pa.begin(), pa.end());
      std::reverse(pb.begin(), pb.end());
      size_t i = 0;
      while (i < pa.size() && i < pb.size() && pa[i] == pb[i]) ++i;
      return {pa[std::min(i, pa.size() - 1)], pb[std::min(i, pb.size() - 1)]};
    };
    bool done = false;
    std::map<int, std::vector<int>> retry;
    // The tournament: the queue whose share is highest gives up a workload next.
    std::set<int> pruned;
    std::function<int(int)> nextTarget = [&](int cohort) -> int {
      int best_cq = -1;
      Share best_cq_share;
      int best_cohort = -1;
      Share best_cohort_share;
      for (int c : nodes_[u(cohort)].children) {
        if (pruned.count(c) != 0) continue;
        const Node& cn = nodes_[u(c)];
        const Share s = drs(c);
        if (cn.is_cq) {
          auto list = by_cq.find(cn.cq);
          if ((s.value == 0 && !s.borrowing && cn.cq != cq) || list == by_cq.end() ||
              list->second.empty()) {
            continue;
          }
          if (best_cq < 0 || compareShare(s, best_cq_share) > 0 ||
              (compareShare(s, best_cq_share) == 0 &&
               candidateBefore(cq, list->second.front(), by_cq[nodes_[u(best_cq)].cq].front()))) {
            best_cq = c;
            best_cq_share = s;
          }
        } else {
          bool ancestor = false;
          for (int n = pnode; n >= 0; n = nodes_[u(n)].parent) ancestor = ancestor || n == c;
          if (s.value == 0 && !s.borrowing && !ancestor) continue;
          if (best_cohort < 0 || compareShare(s, best_cohort_share) >= 0) {
            best_cohort = c;
            best_cohort_share = s;
          }
        }
      }
      if (best_cq < 0 && best_cohort < 0) {
        pruned.insert(cohort);
        return -1;
      }
      if (best_cohort >= 0 &&
          (best_cq < 0 || compareShare(best_cohort_share, best_cq_share) >= 0)) {
        const int t = nextTarget(best_cohort);
        if (t >= 0) return t;
        return nextTarget(cohort);
      }
      return best_cq;
    };
    const auto withinNominalWithIncoming = [&]() {
      const Node& node = nodes_[u(pnode)];
      for (int f : need) {
        if (node.usage[u(f)] > node.nominal[u(f)]) return false;
      }
      return true;
    };
    if (nodes_[u(pnode)].parent < 0) {
      // No cohort: only the queue's own workloads.
      for (int id : by_cq[cq]) {
        take(id, Variant::kWithinCq);
        if (fitsNow()) {
          done = true;
          break;
        }
      }
    } else {
      const bool pre_within = withinNominalWithIncoming();
      for (;;) {
        const int t = nextTarget(root);
        if (t < 0) break;
        const int tcq = nodes_[u(t)].cq;
        auto& list = by_cq[tcq];
        if (tcq == cq) {
          const int id = list.front();
          list.erase(list.begin());
          take(id, Variant::kWithinCq);
        } else if (pre_within) {
          const int id = list.front();
          list.erase(list.begin());
          take(id, Variant::kHierarchicalReclaim);
        } else {
          auto [pre_side, tgt_side] = almostLca(pnode, t);
          const Share pre_new = drs(pre_side);
          const Share tgt_old = drs(tgt_side);
          if (std::isinf(pre_new.value) && !std::isinf(tgt_old.value)) {
            for (int id : list) retry[tcq].push_back(id);
            list.clear();
            continue;
          }
          bool removed = false;
          while (!list.empty()) {
            const int id = list.front();
            list.erase(list.begin());
            removeWorkloadUsage(id);
            const Share tgt_new = drs(tgt_side);
            addWorkloadUsage(id);
            if (compareShare(pre_new, tgt_new) <= 0) {
              take(id, Variant::kReclaimWhileBorrowing);
              removed = true;
              break;
            }
            retry[tcq].push_back(id);
          }
          if (!removed) continue;
        }
        if (fitsNow()) {
          done = true;
          break;
        }
      }
      if (!done && !retry.empty()) {
        pruned.clear();
        by_cq = retry;
        std::set<int> used;
        for (;;) {
          const int t = nextTarget(root);
          if (t < 0) break;
          const int tcq = nodes_[u(t)].cq;
          auto [pre_side, tgt_side] = almostLca(pnode, t);
          const Share pre_new = drs(pre_side);
          const Share tgt_old = drs(tgt_side);
          auto& list = by_cq[tcq];
          if (compareShare(pre_new, tgt_old) < 0 && !list.empty()) {
            take(list.front(), Variant::kReclaimWhileBorrowing);
            list.clear();
            if (fitsNow()) {
              done = true;
              break;
            }
          }
          list.clear();
        }
      }
    }
    std::vector<Target> out;
    if (done) {
      std::vector<bool> keep(taken.size(), true);
      for (int i = static_cast<int>(taken.size()) - 2; i >= 0; --i) {
        addWorkloadUsage(taken[u(i)].wl);
        if (fitsNow()) {
          keep[u(i)] = false;
        } else {
          removeWorkloadUsage(taken[u(i)].wl);
        }
      }
      for (size_t i = 0; i < taken.size(); ++i) {
        if (keep[i]) out.push_back(taken[i]);
      }
    }
    for (size_t i = 0; i < taken.size(); ++i) {
      bool already = false;
      for (const auto& o : out) already = already || o.wl == taken[i].wl;
      // Everything taken is put back; dropped ones were put back during the fill-back pass.
      if (already || !done) addWorkloadUsage(taken[i].wl);
    }
    for (const auto& [f, v] : request) removeUsage(pnode, f, v);
    // Fair-sharing reasons: in-queue stays, reclaim within nominal, otherwise fair sharing.
    for (auto& t : out) {
      if (t.variant == Variant::kReclaimWhileBorrowing) t.variant = Variant::kNever;
    }
    return out;
  }

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

  std::vector<Entry> nominate() {
    std::vector<Entry> entries;
    for (size_t c = 0; c < cqs_.size(); ++c) {
      Cq& q = cqs_[c];
      if (q.spec.stop_policy != StopPolicy::kNone) continue;
      int head = q.sticky >= 0 && !wls_[u(q.sticky)].inadmissible ? q.sticky : -1;
      if (head < 0) {
        // The first in queue order that is not waiting for its preemptor; StrictFIFO waits
        // behind one that is.
        for (int id : q.active) {
          if (!waitsForPreemptor(id)) {
            head = id;
            break;
          }
          if (q.spec.strategy == QueueingStrategy::kStrictFifo) break;
        }
      }
      if (head < 0) continue;
      Wl& w = wls_[u(head)];
      w.attempted = true;
      Entry e;
      e.wl = head;
      e.cq = static_cast<int>(c);
      if (!namespaceMatches(static_cast<int>(c), w.spec.namespace_)) {
        e.inadmissible = true;
        e.reason = kMisconfigured;
        e.message = "Workload namespace doesn't match ClusterQueue selector";
        entries.push_back(std::move(e));
        continue;
      }
      if (options_.mode == CycleMode::kDrain) {
        // Nomination is a pure function of the tree's state and what the head asks for: a head
        // asking what an earlier one asked, in an unchanged tree, gets its answer.
        Memo& m = memo_[c];
        const int64_t version = tree_version_[u(root_of_[u(q.node)])];
        if (m.version != version) {
          m.by_signature.clear();
          m.version = version;
        }
        if (w.signature.empty()) w.signature = signatureOf(w);
        auto& slot = m.by_signature[w.signature];
        if (!slot) {
          auto [a, targets] = initialAssignment(w, static_cast<int>(c));
          slot = std::make_shared<const Nomination>(Nomination{std::move(a), std::move(targets)});
        }
        e.nomination = slot;
      } else {
        auto [a, targets] = initialAssignment(w, static_cast<int>(c));
        e.nomination =
            std::make_shared<const Nomination>(Nomination{std::move(a), std::move(targets)});
      }
      entries.push_back(std::move(e));
    }
    return entries;
  }

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
                 const std::vector<Entry>& entries) const {
    int best = -1;
    size_t best_k = 0;
    const auto consider = [&](int c) {
      // The level at which `node` compares: the index of its child on c's path.
      const FairCandidate& fc = cands[u(c)];
      size_t k = 0;
      while (k + 1 < fc.path.size() && nodes_[u(fc.path[k])].parent != node) ++k;
      if (best < 0 || fairBefore(fc, k, cands[u(best)], best_k, entries)) {
        best = c;
        best_k = k;
      }
    };
    for (int child : nodes_[u(node)].children) {
      if (nodes_[u(child)].is_cq) {
        auto it = by_node.find(child);
        if (it == by_node.end()) continue;
        for (int c : it->second) consider(c);
      } else if (const int w = tournament(child, cands, by_node, entries); w >= 0) {
        consider(w);
      }
    }
    return best;
  }

  int fairNext(const std::vector<Entry>& entries, const std::vector<bool>& done) {
    std::vector<FairCandidate> cands;
    std::map<int, std::vector<int>> by_node;  // ClusterQueue node -> its candidates
    std::map<int, std::vector<int>> by_root;  // root node -> candidates in its tree
    for (size_t i = 0; i < entries.size(); ++i) {
      if (done[i]) continue;
      const Entry& e = entries[i];
      if (e.inadmissible) return static_cast<int>(i);  // takes nothing; settle it first
      const int node = cqs_[u(e.cq)].node;
      FairCandidate fc;
      fc.entry = static_cast<int>(i);
      // Simulate the entry's admission; the shares along its path include it.
      for (const auto& [f, v] : e.assignment().usage) addUsage(node, f, v);
      int root = node;
      for (int n = node; n >= 0; n = nodes_[u(n)].parent) {
        root = n;
        if (nodes_[u(n)].parent < 0 && n != node) break;
        fc.path.push_back(n);
        fc.at.push_back(drs(n));
      }
      for (const auto& [f, v] : e.assignment().usage) removeUsage(node, f, v);
      const int c = static_cast<int>(cands.size());
      cands.push_back(std::move(fc));
      by_node[node].push_back(c);
      by_root[root].push_back(c);
    }
    int best = -1;
    for (const auto& [root, members] : by_root) {
      // A ClusterQueue without a cohort is a tree of its own: its candidates compete directly.
      int winner = -1;
      if (nodes_[u(root)].is_cq) {
        for (int c : members) {
          if (winner < 0 || fairBefore(cands[u(c)], 0, cands[u(winner)], 0, entries)) winner = c;
        }
      } else {
        winner = tournament(root, cands, by_node, entries);
      }
      if (winner >= 0 &&
          (best < 0 || fairBefore(cands[u(winner)], 0, cands[u(best)], 0, entries))) {
        best = winner;
      }
    }
    return best < 0 ? -1 : cands[u(best)].entry;
  }

  CycleResult cycle() {
    ++cycles_;
    CycleResult result;
    std::vector<Entry> entries = nominate();
    // The cycle works on a copy of the usage; reservations and preemptors' usage end with it.
    std::vector<std::vector<Amount>> saved;
    saved.reserve(nodes_.size());
    for (const auto& n : nodes_) saved.push_back(n.usage);
    std::vector<size_t> order(entries.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (!options_.fair_sharing) {
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return entryBefore(entries[a], entries[b]); });
    }
    std::set<int> victims;
    std::vector<int> admitted;
    std::vector<std::pair<int, Variant>> preempted;
    std::vector<bool> processed(entries.size(), false);
    for (size_t k = 0; k < entries.size(); ++k) {
      size_t i = order[k];
      if (options_.fair_sharing) {
        const int next = fairNext(entries, processed);
        if (next < 0) break;
        i = static_cast<size_t>(next);
      }
      processed[i] = true;
      Entry& e = entries[i];
      Wl& w = wls_[u(e.wl)];
      Cq& q = cqs_[u(e.cq)];
      const bool strict = q.spec.strategy == QueueingStrategy::kStrictFifo;
      const auto park = [&](bool parked) {
        if (parked && !w.inadmissible) result.changed = true;
        setParked(e.wl, parked);
      };
      if (e.inadmissible) {
        w.reason = e.reason;
        w.message = e.message;
        park(true);
        continue;
      }
      const Assignment& a = e.assignment();
      if (a.mode == AssignMode::kNoFit) {
        w.reason = a.category;
        w.message = a.message;
        w.pressing = false;  // gave up: its victims may come back
        if (q.sticky == e.wl) q.sticky = -1;
        park(!strict);
        continue;
      }
      if (a.mode == AssignMode::kPreempt && e.targets().empty()) {
        w.reason = kWaitingForQuota;
        w.message = a.message.empty() ? "no workload can be preempted to make room" : a.message;
        if (q.spec.preemption.reclaim_within_cohort != ReclaimWithinCohort::kAny) {
          reserve(e);
        }
        w.pressing = false;
        if (q.sticky == e.wl) q.sticky = -1;
        park(!strict);
        continue;
      }
      bool overlap = false;
      for (const auto& t : e.targets()) overlap = overlap || victims.count(t.wl) != 0;
      if (overlap) {
        w.reason = kWaitingForQuota;
        w.message = "Workload has overlapping preemption targets with another workload";
        continue;
      }
      // Does it still fit, with every victim so far (and its own) gone?
      std::vector<int> gone(victims.begin(), victims.end());
      for (const auto& t : e.targets()) gone.push_back(t.wl);
      for (int v : gone) removeWorkloadUsage(v);
      bool ok = true;
      for (const auto& [f, v] : a.usage) ok = ok && cqAvailable(e.cq, f) >= v;
      for (int v : gone) addWorkloadUsage(v);
      if (!ok) {
        w.reason = kWaitingForQuota;
        w.message = "Workload no longer fits after processing another workload";
        continue;
      }
      const auto preempt = [&](const std::vector<Target>& targets, const std::string& why) {
        for (const auto& t : targets) {
          victims.insert(t.wl);
          preempted.emplace_back(t.wl, t.variant);
          wls_[u(t.wl)].evicting = true;
          wls_[u(t.wl)].preempted_for = e.wl;
          wls_[u(t.wl)].spare = e.wl;
          wls_[u(t.wl)].signature.clear();  // its nominations now depend on whom it spares
          events_.push_back({Event::Kind::kPreempted, wls_[u(t.wl)].spec.name,
                             cqs_[u(wls_[u(t.wl)].cq)].spec.name, preemptionReason(t.variant),
                             fmt::format("preempted to admit {}", w.spec.name), w.spec.name,
                             cycles_});
        }
        if (!targets.empty()) w.pressing = true;
        w.reason = kWaitingForPreempted;
        w.message =
            fmt::format("{}. Pending the preemption of {} workload(s)",
                        why.empty() ? "waiting for preempted workloads" : why, targets.size());
        if (!strict) {
          if (q.sticky != e.wl) result.changed = true;
          q.sticky = e.wl;
        }
      };
      const auto unplaced = [&](const PlacementHook::Answer& answer) {
        const bool never = answer.verdict == PlacementHook::Verdict::kNever;
        w.reason = never ? kNeverFits : kWaitingForPlacement;
        w.message = answer.message;
        w.pressing = false;
        if (q.sticky == e.wl) q.sticky = -1;
        park(!strict || never);
      };
      if (a.mode == AssignMode::kPreempt) {
        if (options_.placement) {
          // Victims are taken only if, once they are gone, the workload can be placed: one
          // that never fits would otherwise evict them, fail, and let them back, forever.
          std::vector<std::string> gone;
          for (const auto& t : e.targets()) gone.push_back(wls_[u(t.wl)].spec.name);
          PlacementHook::Answer placed =
              options_.placement->place(w.spec, podSetAssignments(a), gone);
          if (placed.verdict != PlacementHook::Verdict::kPlaced) {
            unplaced(placed);
            continue;
          }
        }
        for (const auto& [f, v] : a.usage) addUsage(q.node, f, v);
        preempt(e.targets(), a.message);
        continue;
      }
      if (options_.placement) {
        // Quota fits; so must the hardware.
        const auto flavors = podSetAssignments(a);
        PlacementHook::Answer placed = options_.placement->place(w.spec, flavors, {});
        if (placed.verdict != PlacementHook::Verdict::kPlaced) {
          const bool never = placed.verdict == PlacementHook::Verdict::kNever;
          const std::vector<Target> targets =
              never ? std::vector<Target>{} : placementTargets(e, flavors, victims);
          if (!targets.empty()) {
            for (const auto& [f, v] : a.usage) addUsage(q.node, f, v);
            preempt(targets, placed.message);
            continue;
          }
          unplaced(placed);
          continue;
        }
        e.placements = std::move(placed.pod_sets);
        // Taken now, so the heads after it in this cycle see the room gone.
        Workload taken = w.spec;
        taken.admission = admissionOf(e);
        (void)options_.placement->take(taken);
      }
      for (const auto& [f, v] : a.usage) addUsage(q.node, f, v);
      admitted.push_back(static_cast<int>(i));
    }
    // Back to the cache's usage; then apply what the cycle decided.
    for (size_t n = 0; n < nodes_.size(); ++n) nodes_[n].usage = std::move(saved[n]);
    for (int i : admitted) admit(entries[u(i)]);
    for (const auto& [id, variant] : preempted) {
      evict(id);
      result.preempted.emplace_back(wls_[u(id)].spec.name, preemptionReason(variant));
    }
    for (int i : admitted) result.admitted.push_back(wls_[u(entries[u(i)].wl)].spec.name);
    result.changed = result.changed || !admitted.empty() || !preempted.empty();
    return result;
  }

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
                                       const std::set<int>& victims) {
    const Wl& pre = wls_[u(e.wl)];
    const PreemptionPolicy& policy = cqs_[u(e.cq)].spec.preemption;
    const int root = root_of_[u(cqs_[u(e.cq)].node)];
    std::vector<int> cands;
    for (size_t c = 0; c < cqs_.size(); ++c) {
      const int cq = static_cast<int>(c);
      const bool same = cq == e.cq;
      if (!same && root_of_[u(cqs_[c].node)] != root) continue;
      for (int id : cqs_[c].admitted) {
        const Wl& w = wls_[u(id)];
        if (w.evicting || id == pre.spare || victims.count(id) != 0) continue;
        if (!mayPreempt(pre.spec, w.spec)) continue;
        if (same) {
          if (!satisfies(pre.spec, w.spec, 0, static_cast<int>(policy.within_cluster_queue))) {
            continue;
          }
        } else {
          if (!satisfies(pre.spec, w.spec, 1, static_cast<int>(policy.reclaim_within_cohort))) {
            continue;
          }
          std::set<int> frs;
          for (const auto& [f, v] : w.usage) frs.insert(f);
          if (withinNominal(cqs_[c].node, frs)) continue;
        }
        cands.push_back(id);
      }
    }
    std::sort(cands.begin(), cands.end(),
              [&](int a, int b) { return candidateBefore(e.cq, a, b); });
    // Each try is a placement over the fleet: bound them.
    constexpr size_t kMaxTried = 64;
    if (cands.size() > kMaxTried) cands.resize(kMaxTried);
    std::vector<std::string> gone;
    std::vector<int> chosen;
    bool fits = false;
    for (int id : cands) {
      gone.push_back(wls_[u(id)].spec.name);
      chosen.push_back(id);
      if (options_.placement->place(pre.spec, flavors, gone).verdict ==
          PlacementHook::Verdict::kPlaced) {
        fits = true;
        break;
      }
    }
    if (!fits) return {};
    // The fewest: drop each one (latest first) that is not needed.
    for (size_t k = chosen.size() - 1; k-- > 0;) {
      std::vector<std::string> without;
      for (size_t j = 0; j < chosen.size(); ++j) {
        if (j != k) without.push_back(wls_[u(chosen[j])].spec.name);
      }
      if (options_.placement->place(pre.spec, flavors, without).verdict ==
          PlacementHook::Verdict::kPlaced) {
        chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
    std::vector<Target> out;
    for (int id : chosen) {
      out.push_back(
          {id, wls_[u(id)].cq == e.cq ? Variant::kWithinCq : Variant::kReclaimWithoutBorrowing});
    }
    return out;
  }

  void admit(const Entry& e) {
    Wl& w = wls_[u(e.wl)];
    Cq& q = cqs_[u(e.cq)];
    unqueue(e.wl);
    if (q.sticky == e.wl) q.sticky = -1;
    w.state = State::kAdmitted;
    w.evicting = false;
    w.pressing = false;
    if (w.spare >= 0) {
      w.spare = -1;
      w.signature.clear();
    }
    w.usage.assign(e.assignment().usage.begin(), e.assignment().usage.end());
    w.admitted_seq = ++admit_seq_;
    Admission adm = admissionOf(e);
    w.spec.admission = adm;
    w.reason.clear();
    w.message.clear();
    q.admitted.push_back(e.wl);
    addWorkloadUsage(e.wl);
    touch(e.cq);
    events_.push_back({Event::Kind::kAdmitted, w.spec.name, q.spec.name, "", "", "", cycles_});
  }

  void evict(int id, const std::string& reason = "Preempted",
             const std::string& message = "preempted; waiting for quota again") {
    Wl& w = wls_[u(id)];
    Cq& q = cqs_[u(w.cq)];
    if (w.state != State::kAdmitted) return;
    removeWorkloadUsage(id);
    touch(w.cq);
    std::erase(q.admitted, id);
    w.usage.clear();
    w.spec.admission.reset();
    freePlacement(w.spec.name);
    w.state = State::kPending;
    w.evicting = false;
    w.inadmissible = false;
    w.reason = reason == "Preempted" ? std::string(kWaitingForQuota) : reason;
    w.message = message;
    w.order_ms = now_ms_;
    w.order_seq = ++evictions_;
    q.active.insert(id);
    events_.push_back({Event::Kind::kEvicted, w.spec.name, q.spec.name, reason,
                       reason == "Preempted" ? std::string() : message, "", cycles_});
    retryInadmissible(w.cq);
  }

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
      const Workload& incoming, const std::string& cq_name, const GivenAssignment& given) {
    auto cq = cq_index_.find(cq_name);
    if (cq == cq_index_.end()) {
      return fail(invalidArgument(fmt::format("no ClusterQueue named \"{}\"", cq_name)));
    }
    Wl pre;
    pre.spec = incoming;
    pre.cq = cq->second;
    std::map<int, Amount> request;
    std::set<int> need;
    for (const auto& ps : incoming.pod_sets) {
      auto g = given.pod_sets.find(ps.name);
      if (g == given.pod_sets.end()) continue;
      const int64_t count = g->second.count > 0 ? g->second.count : ps.count;
      std::map<std::string, Amount> totals;
      for (const auto& [res, per_pod] : ps.requests) totals[res] = per_pod * count;
      if (cqs_[u(cq->second)].covers_pods) totals["pods"] = count * 1000;
      for (const auto& [res, fl] : g->second.flavors) {
        const int f = frOf(fl.first, res);
        if (f < 0) continue;
        auto t = totals.find(res);
        if (t != totals.end()) request[f] += t->second;
        if (fl.second) need.insert(f);
      }
    }
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& t : getTargets(pre, cq->second, request, need)) {
      out.emplace_back(wls_[u(t.wl)].spec.name, preemptionReason(t.variant));
    }
    return out;
  }

  std::optional<WorkloadStatus> status(const std::string& name) const {
    auto it = wl_index_.find(name);
    if (it == wl_index_.end()) return std::nullopt;
    const Wl& w = wls_[u(it->second)];
    WorkloadStatus s;
    s.state = w.state == State::kAdmitted   ? WorkloadStatus::State::kAdmitted
              : w.state == State::kFinished ? WorkloadStatus::State::kFinished
                                            : WorkloadStatus::State::kPending;
    s.cluster_queue = cqs_[u(w.cq)].spec.name;
    s.admission = w.spec.admission;
    s.reason = w.reason;
    s.message = w.message;
    s.inadmissible = w.inadmissible;
    s.attempted = w.attempted;
    if (w.order_seq > 0) s.queued_ms = w.order_ms;
    return s;
  }

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

  std::vector<QueueStatus> queues() const {
    // Borrowed capacity in each tree, attributed to the queues lending it in proportion to what
    // each has idle and lendable.
    std::vector<std::vector<Amount>> borrowed_in(nodes_.size(), std::vector<Amount>(u(nfr_), 0));
    std::vector<std::vector<Amount>> lendable_in(nodes_.size(), std::vector<Amount>(u(nfr_), 0));
    const auto lendable = [&](const Node& n, int f) {
      const Amount idle = std::max<Amount>(0, n.nominal[u(f)] - n.usage[u(f)]);
      return n.ll[u(f)] == kNone ? idle : std::min(idle, n.ll[u(f)]);
    };
    for (const auto& q : cqs_) {
      const Node& n = nodes_[u(q.node)];
      const size_t root = u(root_of_[u(q.node)]);
      for (int f = 0; f < nfr_; ++f) {
        borrowed_in[root][u(f)] += std::max<Amount>(0, n.usage[u(f)] - n.nominal[u(f)]);
        lendable_in[root][u(f)] += lendable(n, f);
      }
    }
    std::vector<QueueStatus> out;
    for (const auto& q : cqs_) {
      const Node& n = nodes_[u(q.node)];
      const size_t root = u(root_of_[u(q.node)]);
      QueueStatus st;
      st.name = q.spec.name;
      st.cohort = q.spec.cohort;
      st.pending = static_cast<int64_t>(q.active.size() + q.parked.size());
      st.admitted = static_cast<int64_t>(q.admitted.size());
      for (const auto& g : q.spec.resource_groups) {
        for (const auto& fq : g.flavors) {
          for (const auto& res : g.covered) {
            const int f = frOf(fq.flavor, res);
            if (f < 0) continue;
            QueueStatus::Usage use;
            use.flavor = fq.flavor;
            use.resource = res;
            use.nominal = n.nominal[u(f)];
            if (n.bl[u(f)] != kNone) use.borrowing_limit = n.bl[u(f)];
            if (n.ll[u(f)] != kNone) use.lending_limit = n.ll[u(f)];
            use.usage = n.usage[u(f)];
            use.borrowed = std::max<Amount>(0, n.usage[u(f)] - n.nominal[u(f)]);
            const Amount mine = lendable(n, f);
            const Amount pool = lendable_in[root][u(f)];
            const Amount want = borrowed_in[root][u(f)];
            use.lent =
                pool == 0
                    ? 0
                    : std::min<Amount>(
                          mine, static_cast<Amount>(static_cast<__int128>(want) * mine / pool));
            use.available = cqAvailable(static_cast<int>(&q - cqs_.data()), f);
            st.usage.push_back(std::move(use));
          }
        }
      }
      out.push_back(std::move(st));
    }
    return out;
  }

  // Why `name` is where it is, recomputed against the current state.
  Result<nlohmann::json> explain(const std::string& name) {
    using nlohmann::json;
    auto it = wl_index_.find(name);
    if (it == wl_index_.end()) {
      return fail(Error(ErrorCode::kNotFound, fmt::format("no workload named \"{}\"", name)));
    }
    const int id = it->second;
    Wl& w = wls_[u(id)];
    const Cq& q = cqs_[u(w.cq)];
    json out = {{"workload", w.spec.name},
                {"cluster_queue", q.spec.name},
                {"local_queue", w.spec.local_queue},
                {"priority", w.spec.priority}};
    if (w.state == State::kFinished) {
      out["state"] = "finished";
      return out;
    }
    if (w.state == State::kAdmitted) {
      out["state"] = "admitted";
      return out;
    }
    out["state"] = "pending";
    out["reason"] = w.reason.empty() ? json("NotYetAttempted") : json(w.reason);
    out["message"] = w.message;
    out["held"] = w.held;
    out["inadmissible"] = w.inadmissible;
    int64_t ahead = 0;
    if (!w.inadmissible) {
      for (int other : q.active) {
        if (other == id) break;
        ++ahead;
      }
    }
    out["ahead_in_queue"] = ahead;
    if (q.spec.stop_policy != StopPolicy::kNone) {
      out["stopped"] = "the ClusterQueue is stopped (stopPolicy); nothing is admitted from it";
    }
    if (!namespaceMatches(w.cq, w.spec.namespace_)) {
      out["namespace_mismatch"] =
          fmt::format("namespace \"{}\" is not selected by ClusterQueue \"{}\"", w.spec.namespace_,
                      q.spec.name);
    }
    json pod_sets = json::array();
    for (const auto& ps : w.spec.pod_sets) {
      json flavors = json::array();
      for (const auto& [res, per_pod] : ps.requests) {
        auto g = q.group_of.find(res);
        if (g == q.group_of.end()) {
          flavors.push_back({{"resource", res},
                             {"verdict", "not covered"},
                             {"detail", fmt::format("ClusterQueue \"{}\" has no quota for {}",
                                                    q.spec.name, res)}});
          continue;
        }
        for (const auto& fq : q.spec.resource_groups[u(g->second)].flavors) {
          const ResourceFlavor& flavor = world_.flavors[u(flavor_index_.at(fq.flavor))];
          std::string mismatch;
          json entry = {{"flavor", fq.flavor}, {"resource", res}};
          if (!flavorMatches(flavor, ps, &mismatch)) {
            entry["verdict"] = "does not match";
            entry["detail"] = mismatch;
            flavors.push_back(std::move(entry));
            continue;
          }
          const int f = frOf(fq.flavor, res);
          const Node& n = nodes_[u(q.node)];
          const Amount requested = per_pod * ps.count;
          const Amount available = cqAvailable(w.cq, f);
          const Amount idle_own = std::max<Amount>(0, n.nominal[u(f)] - n.usage[u(f)]);
          const Amount most = potential(q.node, f);
          entry["requested"] = requested;
          entry["nominal"] = n.nominal[u(f)];
          entry["in_use"] = n.usage[u(f)];
          entry["available"] = available;
          entry["borrowable"] = std::max<Amount>(0, available - idle_own);
          entry["at_most"] = most;
          if (requested <= available) {
            entry["verdict"] = "fits";
          } else if (requested <= most) {
            entry["verdict"] = "needs preemption or released quota";
          } else {
            entry["verdict"] = "never fits";
          }
          flavors.push_back(std::move(entry));
        }
      }
      pod_sets.push_back({{"name", ps.name},
                          {"count", ps.count},
                          {"min_count", ps.min_count ? json(*ps.min_count) : json(nullptr)},
                          {"flavors", std::move(flavors)}});
    }
    out["pod_sets"] = std::move(pod_sets);
    // What preemption would take, and what the queue's policy allows.
    const PreemptionPolicy& p = q.spec.preemption;
    json preemption = {
        {"within_cluster_queue", p.within_cluster_queue == WithinClusterQueue::kNever ? "Never"
                                 : p.within_cluster_queue == WithinClusterQueue::kLowerPriority
                                     ? "LowerPriority"
                                     : "LowerOrNewerEqualPriority"},
        {"reclaim_within_cohort", p.reclaim_within_cohort == ReclaimWithinCohort::kNever ? "Never"
                                  : p.reclaim_within_cohort == ReclaimWithinCohort::kAny
                                      ? "Any"
                                      : "LowerPriority"},
        {"borrow_within_cohort",
         p.borrow_within_cohort == BorrowWithinCohort::kNever ? "Never" : "LowerPriority"}};
    if (q.spec.stop_policy == StopPolicy::kNone && !w.held) {
      auto [a, targets] = initialAssignment(w, w.cq);
      preemption["mode"] = a.mode == AssignMode::kFit       ? "fit"
                           : a.mode == AssignMode::kPreempt ? "preempt"
                                                            : "no fit";
      json victims = json::array();
      for (const auto& t : targets) {
        victims.push_back({{"workload", wls_[u(t.wl)].spec.name},
                           {"cluster_queue", cqs_[u(wls_[u(t.wl)].cq)].spec.name},
                           {"priority", wls_[u(t.wl)].spec.priority},
                           {"reason", preemptionReason(t.variant)}});
      }
      preemption["would_preempt"] = std::move(victims);
      if (a.mode == AssignMode::kPreempt && targets.empty()) {
        preemption["why_not"] = fmt::format(
            "no set of workloads this queue's policy lets it preempt frees enough quota "
            "(withinClusterQueue {}, reclaimWithinCohort {}, borrowWithinCohort {})",
            preemption["within_cluster_queue"].get<std::string>(),
            preemption["reclaim_within_cohort"].get<std::string>(),
            preemption["borrow_within_cohort"].get<std::string>());
      }
      if (!a.message.empty()) preemption["assignment"] = a.message;
    }
    out["preemption"] = std::move(preemption);
    return out;
  }

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

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(World world, EngineOptions options) {
  auto impl = std::make_unique<Impl>(std::move(world), options);
  PURSER_TRY(impl->build());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<void> Engine::addAdmitted(Workload workload) {
  return impl_->addAdmitted(std::move(workload));
}
Result<void> Engine::submit(Workload workload) { return impl_->submit(std::move(workload)); }
Result<void> Engine::finish(const std::string& name) { return impl_->finish(name); }
CycleResult Engine::cycle() { return impl_->cycle(); }
CycleResult Engine::runUntilStable(int64_t max_cycles) { return impl_->runUntilStable(max_cycles); }
Result<std::vector<std::pair<std::string, std::string>>> Engine::preemptionTargets(
    const Workload& incoming, const std::string& cluster_queue, const GivenAssignment& given) {
  return impl_->preemptionTargets(incoming, cluster_queue, given);
}
std::optional<WorkloadStatus> Engine::status(const std::string& name) const {
  return impl_->status(name);
}
std::vector<std::string> Engine::workloadNames() const { return impl_->workloadNames(); }
Result<void> Engine::hold(const std::string& name, const std::string& reason,
                          const std::string& message) {
  return impl_->hold(name, reason, message);
}
Result<void> Engine::release(const std::string& name) { return impl_->release(name); }
Result<void> Engine::stop(const std::string& name, const std::string& reason,
                          const std::string& message) {
  return impl_->stop(name, reason, message);
}
void Engine::reconsider() {
  std::set<int> roots;
  for (const auto& q : impl_->cqs_) roots.insert(impl_->root_of_[static_cast<size_t>(q.node)]);
  for (int r : roots) {
    impl_->retryTree(r);
    ++impl_->tree_version_[static_cast<size_t>(r)];  // what was nominated may now be otherwise
  }
}
void Engine::setNamespace(const std::string& name, std::map<std::string, std::string> labels) {
  impl_->setNamespace(name, std::move(labels));
}
bool Engine::hasNamespace(const std::string& name) const {
  return impl_->world_.namespaces.count(name) != 0;
}
std::vector<QueueStatus> Engine::queues() const { return impl_->queues(); }
Result<nlohmann::json> Engine::explain(const std::string& name) { return impl_->explain(name); }
const std::vector<Event>& Engine::events() const { return impl_->events_; }
void Engine::setTime(int64_t now_ms) { impl_->now_ms_ = std::max(impl_->now_ms_, now_ms); }
std::vector<Event> Engine::takeEvents() { return std::exchange(impl_->events_, {}); }
int64_t Engine::cycles() const { return impl_->cycles_; }

}  // namespace purser::fleet
