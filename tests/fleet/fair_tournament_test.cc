// Fair sharing over nested cohorts, against a reference written straight from Kueue's
// description of its tournament: at each cohort the direct children (ClusterQueues and
// sub-cohorts) are compared by the child's dominant resource share with its candidate admitted,
// the winner of each subtree competes one level up, and the root's winner goes next; ties go to
// the one not borrowing, then to higher priority, then to the earlier workload.
//
// Generated trees: a root cohort, up to five sub-cohorts nested at random, two to seven
// ClusterQueues that borrow (each with some admitted usage and one pending workload) and one
// that only lends, so that every pending workload fits and one cycle admits them all, in the
// order the tournament picks them. One resource, no borrowing or lending limits, weights from
// 0.5 to 2. The engine's admission order is compared with the reference's.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fleet/engine.h"
#include "fleet/model.h"

namespace purser::fleet {
namespace {

constexpr const char* kCpu = "cpu";

struct RefNode {
  std::string name;
  int parent = -1;
  bool cq = false;
  Amount nominal = 0;  // a ClusterQueue's; cohorts have none of their own here
  Amount usage = 0;    // a ClusterQueue's admitted usage
  int64_t weight_milli = 1000;
  std::vector<int> children;
};

struct RefHead {
  std::string workload;
  int cq = -1;  // node
  Amount request = 0;
  int32_t priority = 0;
  int64_t created_ms = 0;
};

struct Generated {
  World world;
  std::vector<Workload> admitted;
  std::vector<Workload> pending;
  std::vector<RefNode> nodes;
  std::vector<RefHead> heads;
};

struct RefShare {
  bool borrowing = false;
  double value = 0;
};

// The reference: shares computed from the tree as Kueue defines them (no limits: what a node
// may borrow from is everything the whole tree holds).
class Reference {
 public:
  explicit Reference(Generated g) : g_(std::move(g)) {
    for (const auto& n : g_.nodes) total_ += n.nominal;
  }

  std::vector<std::string> order() {
    std::vector<std::string> out;
    std::vector<bool> taken(g_.heads.size(), false);
    for (size_t round = 0; round < g_.heads.size(); ++round) {
      const int h = play(0, taken);
      if (h < 0) break;
      taken[static_cast<size_t>(h)] = true;
      g_.nodes[static_cast<size_t>(g_.heads[static_cast<size_t>(h)].cq)].usage +=
          g_.heads[static_cast<size_t>(h)].request;
      out.push_back(g_.heads[static_cast<size_t>(h)].workload);
    }
    return out;
  }

 private:
  Amount usageOf(int n, int extra_at, Amount extra) const {
    const RefNode& node = g_.nodes[static_cast<size_t>(n)];
    Amount u = node.usage + (n == extra_at ? extra : 0);
    for (int c : node.children) u += usageOf(c, extra_at, extra);
    return u;
  }
  Amount quotaOf(int n) const {
    const RefNode& node = g_.nodes[static_cast<size_t>(n)];
    Amount q = node.nominal;
    for (int c : node.children) q += quotaOf(c);
    return q;
  }
  RefShare share(int n, int extra_at, Amount extra) const {
    RefShare s;
    const RefNode& node = g_.nodes[static_cast<size_t>(n)];
    if (node.parent < 0) return s;
    const Amount borrowed = usageOf(n, extra_at, extra) - quotaOf(n);
    if (borrowed <= 0) return s;
    s.borrowing = true;
    s.value = static_cast<double>(borrowed) * 1000.0 / static_cast<double>(total_) * 1000.0 /
              static_cast<double>(node.weight_milli);
    return s;
  }
  bool contains(int n, int cq) const {
    for (int x = cq; x >= 0; x = g_.nodes[static_cast<size_t>(x)].parent) {
      if (x == n) return true;
    }
    return false;
  }
  // The winning head under cohort `n`, or -1.
  int play(int n, const std::vector<bool>& taken) const {
    int best = -1;
    RefShare best_share;
    for (int child : g_.nodes[static_cast<size_t>(n)].children) {
      int candidate = -1;
      if (g_.nodes[static_cast<size_t>(child)].cq) {
        for (size_t h = 0; h < g_.heads.size(); ++h) {
          if (!taken[h] && g_.heads[h].cq == child) candidate = static_cast<int>(h);
        }
      } else {
        candidate = play(child, taken);
      }
      if (candidate < 0) continue;
      const RefHead& head = g_.heads[static_cast<size_t>(candidate)];
      const RefShare s = share(child, head.cq, head.request);
      if (best < 0 || before(head, s, g_.heads[static_cast<size_t>(best)], best_share)) {
        best = candidate;
        best_share = s;
      }
    }
    return best;
  }
  static bool before(const RefHead& a, const RefShare& sa, const RefHead& b, const RefShare& sb) {
    if (sa.borrowing != sb.borrowing) return !sa.borrowing;
    if (sa.value != sb.value) return sa.value < sb.value;
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.created_ms != b.created_ms) return a.created_ms < b.created_ms;
    return a.workload < b.workload;
  }

  Generated g_;
  Amount total_ = 0;
};

Generated generate(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int64_t weights[] = {500, 1000, 1500, 2000};
  Generated g;
  g.world.flavors.push_back({"f", {}, {}, {}});
  g.world.namespaces["ml"] = {};
  std::vector<int> cohorts;
  const auto addCohort = [&](const std::string& name, int parent) {
    RefNode n;
    n.name = name;
    n.parent = parent;
    n.weight_milli = parent < 0 ? 1000 : weights[pick(0, 3)];
    const int id = static_cast<int>(g.nodes.size());
    g.nodes.push_back(n);
    if (parent >= 0) g.nodes[static_cast<size_t>(parent)].children.push_back(id);
    cohorts.push_back(id);
    Cohort c;
    c.name = name;
    c.parent = parent < 0 ? "" : g.nodes[static_cast<size_t>(parent)].name;
    c.fair_weight_milli = n.weight_milli;
    g.world.cohorts.push_back(c);
  };
  addCohort("root", -1);
  const int subcohorts = pick(0, 5);
  for (int i = 0; i < subcohorts; ++i) {
    addCohort(fmt::format("c{}", i),
              cohorts[static_cast<size_t>(pick(0, static_cast<int>(cohorts.size()) - 1))]);
  }
  const auto addQueue = [&](const std::string& name, int parent, Amount nominal, int64_t weight) {
    RefNode n;
    n.name = name;
    n.parent = parent;
    n.cq = true;
    n.nominal = nominal;
    n.weight_milli = weight;
    const int id = static_cast<int>(g.nodes.size());
    g.nodes.push_back(n);
    g.nodes[static_cast<size_t>(parent)].children.push_back(id);
    ClusterQueue cq;
    cq.name = name;
    cq.cohort = g.nodes[static_cast<size_t>(parent)].name;
    cq.fair_weight_milli = weight;
    cq.resource_groups.push_back({{kCpu}, {{"f", {{kCpu, Quota{nominal, {}, {}}}}}}});
    g.world.cluster_queues.push_back(cq);
    g.world.local_queues.push_back({"ml", name, name});
    return id;
  };
  // The lender: enough for every pending workload, so that each fits when its turn comes.
  addQueue("lender", 0, 1'000'000, 1000);
  const int queues = pick(2, 7);
  for (int i = 0; i < queues; ++i) {
    const int parent = cohorts[static_cast<size_t>(pick(0, static_cast<int>(cohorts.size()) - 1))];
    const Amount nominal = pick(0, 4) * 1000;
    const std::string name = fmt::format("q{}", i);
    const int id = addQueue(name, parent, nominal, weights[pick(0, 3)]);
    const Amount used = pick(0, 8) * 1000;
    if (used > 0) {
      Workload w;
      w.name = fmt::format("ml/running-{}", i);
      w.namespace_ = "ml";
      w.local_queue = name;
      w.cluster_queue = name;
      w.created_ms = 1;
      PodSet ps;
      ps.name = "main";
      ps.requests[kCpu] = used;
      w.pod_sets.push_back(ps);
      PodSetAssignment a;
      a.name = "main";
      a.count = 1;
      a.flavors[kCpu] = "f";
      a.usage[kCpu] = used;
      w.admission = Admission{name, {a}};
      g.admitted.push_back(w);
      g.nodes[static_cast<size_t>(id)].usage = used;
    }
    RefHead head;
    head.workload = fmt::format("ml/next-{}", i);
    head.cq = id;
    head.request = pick(1, 3) * 1000;
    head.priority = pick(0, 3) == 0 ? 1 : 0;
    head.created_ms = 100 + pick(0, 3);  // ties happen: then the name decides
    g.heads.push_back(head);
    Workload w;
    w.name = head.workload;
    w.namespace_ = "ml";
    w.local_queue = name;
    w.priority = head.priority;
    w.created_ms = head.created_ms;
    PodSet ps;
    ps.name = "main";
    ps.requests[kCpu] = head.request;
    w.pod_sets.push_back(ps);
    g.pending.push_back(w);
  }
  return g;
}

uint64_t envOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::strtoull(v, nullptr, 10) : fallback;
}

TEST(FairTournamentTest, NestedCohortsAdmitInTheOrderOfKueuesTournament) {
  const uint64_t seed = envOr("PURSER_TOURNAMENT_SEED", 20261203);
  const int cases = static_cast<int>(envOr("PURSER_TOURNAMENT_CASES", 2000));
  int differences = 0, nested = 0, reordered = 0;
  for (int i = 0; i < cases && differences < 3; ++i) {
    const Generated g = generate(seed + static_cast<uint64_t>(i));
    EngineOptions options;
    options.mode = CycleMode::kKueue;
    options.fair_sharing = true;
    auto engine = Engine::create(g.world, options);
    ASSERT_TRUE(engine.has_value()) << engine.error().message;
    for (const auto& w : g.admitted) ASSERT_TRUE((*engine)->addAdmitted(w).has_value());
    for (const auto& w : g.pending) ASSERT_TRUE((*engine)->submit(w).has_value());
    (void)(*engine)->cycle();
    std::vector<std::string> got;
    for (const auto& e : (*engine)->events()) {
      if (e.kind == Event::Kind::kAdmitted) got.push_back(e.workload);
    }
    const std::vector<std::string> want = Reference(g).order();
    if (got != want) {
      ++differences;
      ADD_FAILURE() << fmt::format("case {} (seed {}): admitted {} but the tournament says {}", i,
                                   seed + static_cast<uint64_t>(i), fmt::join(got, ", "),
                                   fmt::join(want, ", "));
    }
    nested += g.world.cohorts.size() > 1 ? 1 : 0;
    // How often the order is not simply the pending workloads' own order.
    std::vector<std::string> plain;
    for (const auto& w : g.pending) plain.push_back(w.name);
    reordered += want != plain ? 1 : 0;
  }
  fmt::print(stderr,
             "fair tournament: {} scenarios ({} with nested cohorts, {} reordered), {} "
             "differences\n",
             cases, nested, reordered, differences);
  EXPECT_EQ(differences, 0);
  EXPECT_GT(nested, cases / 2) << "the generator should nest cohorts in most scenarios";
}

}  // namespace
}  // namespace purser::fleet
