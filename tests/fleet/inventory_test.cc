// The Placer over a declared inventory: fit checks, policies, gangs with topology requests,
// NVLink-aware GPU sets, never-fits reporting, and placement inside admission.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <tuple>

#include "fleet/engine.h"
#include "fleet/inventory.h"

namespace purser::fleet {
namespace {

using placement::Policy;

constexpr int64_t kGi = int64_t{1073741824} * 1000;  // memory in milli-bytes

// A node with `gpus` GPUs of `model` (NVLink domains of `domain_size` GPUs; 0: none).
InventoryNode gpuNode(const std::string& name, int gpus, const std::string& model = "A100",
                      int64_t cpu = 64, int domain_size = 0, const std::string& rack = "",
                      int64_t gpu_memory_mib = 81920) {
  InventoryNode n;
  n.name = name;
  n.cpu_milli = cpu * 1000;
  n.memory_mib = 512 * 1024;
  n.rack = rack;
  for (int i = 0; i < gpus; ++i) {
    GpuDevice g;
    g.index = i;
    g.uuid = "GPU-" + name + "-" + std::to_string(i);
    g.model = model;
    g.memory_mib = gpu_memory_mib;
    g.numa = i < gpus / 2 ? 0 : 1;
    g.nvlink_domain = domain_size > 0 ? i / domain_size : -1;
    n.gpus.push_back(g);
  }
  return n;
}

PlacementRequest pods(const std::string& name, int64_t count, int64_t cpu, int64_t gpus,
                      Resources extra = {}) {
  PlacementRequest r;
  r.name = name;
  r.count = count;
  r.per_pod["cpu"] = cpu * 1000;
  if (gpus > 0) r.per_pod["nvidia.com/gpu"] = gpus * 1000;
  for (const auto& [k, v] : extra) r.per_pod[k] = v;
  return r;
}

std::unique_ptr<Placer> placer(std::vector<InventoryNode> nodes, Policy p = Policy::kBinpack) {
  auto made = Placer::create(std::move(nodes), p, 42);
  if (!made) throw std::runtime_error("the test's inventory was refused: " + made.error().message);
  return std::move(*made);
}

std::set<std::string> nodesOf(const PlacementResult& r) {
  std::set<std::string> out;
  for (const auto& set : r.pod_sets) {
    for (const auto& pp : set) out.insert(pp.node);
  }
  return out;
}

TEST(InventoryTest, RejectsABadInventoryNamingTheNodeAndField) {
  auto mixed = gpuNode("n1", 2);
  mixed.gpus[1].model = "H100";
  auto r = Placer::create({mixed}, Policy::kDefault, 1);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("node \"n1\": gpus[1]"), std::string::npos) << r.error().message;
  auto gap = gpuNode("n1", 2);
  gap.gpus[1].index = 3;
  r = Placer::create({gap}, Policy::kDefault, 1);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("without gaps"), std::string::npos);
  r = Placer::create({gpuNode("n1", 1), gpuNode("n1", 1)}, Policy::kDefault, 1);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("listed twice"), std::string::npos);
  r = Placer::create({gpuNode("GPU_node", 1)}, Policy::kDefault, 1);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("is not a DNS subdomain"), std::string::npos);
  auto negative = gpuNode("n2", 0);
  negative.cpu_milli = -1;
  r = Placer::create({negative}, Policy::kDefault, 1);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("cpu: may not be negative"), std::string::npos);
}

TEST(InventoryTest, FitChecksCpuMemoryWholeAndSharedGpusAndModels) {
  auto p = placer({gpuNode("small", 2, "T4", 8, 0, "", 16384), gpuNode("big", 8, "A100", 64)});
  // CPU: 16 cores only fit on "big".
  auto r = p->place({pods("cpu", 1, 16, 0)});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced);
  EXPECT_EQ(nodesOf(r), std::set<std::string>{"big"});
  // Memory: more than any node has never fits, and says so.
  r = p->place({pods("mem", 1, 1, 0, {{"memory", 1024 * kGi}})});
  EXPECT_EQ(r.kind, PlacementResult::Kind::kNever);
  EXPECT_NE(r.message.find("2 are too small for one pod"), std::string::npos) << r.message;
  // Whole GPUs: 4 only fit on "big".
  r = p->place({pods("gpu", 1, 1, 4)});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced);
  EXPECT_EQ(nodesOf(r), std::set<std::string>{"big"});
  EXPECT_EQ(r.pod_sets[0][0].gpus.size(), 4u);
  EXPECT_EQ(r.pod_sets[0][0].gpu_milli, 1000);
  // A share in MiB: 20 GiB does not fit a 16 GiB T4, so it goes to an A100 as 250 thousandths.
  r = p->place({pods("share", 1, 1, 1, {{"nvidia.com/gpumem", 20480 * 1000}})});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced);
  EXPECT_EQ(nodesOf(r), std::set<std::string>{"big"});
  EXPECT_EQ(r.pod_sets[0][0].gpu_milli, 250);
  // Model constraints (HAMi's use-gputype / nouse-gputype, case-insensitive parts of the name).
  auto t4 = pods("t4", 1, 1, 1);
  t4.use_gpu_types = {"t4"};
  r = p->place({t4});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced);
  EXPECT_EQ(nodesOf(r), std::set<std::string>{"small"});
  auto not_a100 = pods("x", 1, 1, 1);
  not_a100.nouse_gpu_types = {"A100"};
  r = p->place({not_a100});
  EXPECT_EQ(nodesOf(r), std::set<std::string>{"small"});
  auto h100 = pods("h", 1, 1, 1);
  h100.use_gpu_types = {"H100"};
  r = p->place({h100});
  EXPECT_EQ(r.kind, PlacementResult::Kind::kNever);
  EXPECT_NE(r.message.find("2 have no GPU of an allowed model"), std::string::npos) << r.message;
  // Labels and taints.
  auto labelled = pods("l", 1, 1, 0);
  labelled.node_selector["pool"] = "none";
  r = p->place({labelled});
  EXPECT_EQ(r.kind, PlacementResult::Kind::kNever);
  EXPECT_NE(r.message.find("2 lack its node labels"), std::string::npos) << r.message;
  // Nothing was taken by any of these.
  for (const auto& v : p->view()) {
    EXPECT_EQ(v.cpu_used_milli, 0);
    for (const auto& g : v.gpus) EXPECT_EQ(g.used_milli, 0);
  }
}

TEST(InventoryTest, TaintsNeedTolerations) {
  auto tainted = gpuNode("tainted", 8);
  tainted.taints.push_back({"dedicated", "prod", "NoSchedule"});
  auto p = placer({tainted});
  auto r = p->place({pods("a", 1, 1, 1)});
  EXPECT_EQ(r.kind, PlacementResult::Kind::kNever);
  EXPECT_NE(r.message.find("1 have taints it does not tolerate"), std::string::npos);
  auto tolerant = pods("b", 1, 1, 1);
  tolerant.tolerations.push_back({"dedicated", "Equal", "prod", "NoSchedule"});
  EXPECT_EQ(p->place({tolerant}).kind, PlacementResult::Kind::kPlaced);
}

TEST(InventoryTest, EachPolicyChoosesItsNode) {
  // "full" has 6 of 8 GPUs taken, "half" 4 of 8, "empty" none.
  const auto setup = [](Policy policy) {
    auto p = placer({gpuNode("empty", 8), gpuNode("half", 8), gpuNode("full", 8)}, policy);
    EXPECT_TRUE(p->take("x", {pods("x", 1, 1, 4)}, {{{"half", {0, 1, 2, 3}, 1000}}}));
    EXPECT_TRUE(p->take("y", {pods("y", 1, 1, 6)}, {{{"full", {0, 1, 2, 3, 4, 5}, 1000}}}));
    return p;
  };
  EXPECT_EQ(nodesOf(setup(Policy::kBinpack)->place({pods("a", 1, 1, 1)})),
            std::set<std::string>{"full"});
  EXPECT_EQ(nodesOf(setup(Policy::kSpread)->place({pods("a", 1, 1, 1)})),
            std::set<std::string>{"empty"});
  EXPECT_EQ(nodesOf(setup(Policy::kBestFit)->place({pods("a", 1, 1, 1)})),
            std::set<std::string>{"full"});
  // Fragmentation-aware: a 4-GPU pod is the common shape, so 2 GPUs go where they strand no
  // room for it: "full" (its last 2 could never host a 4-GPU pod), not "half" or "empty".
  auto p = setup(Policy::kDefault);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(
        p->take("t" + std::to_string(i), {pods("t", 1, 1, 4)}, {{{"empty", {0, 1, 2, 3}, 1000}}}));
    p->free("t" + std::to_string(i));
  }
  EXPECT_EQ(nodesOf(p->place({pods("a", 1, 1, 2)})), std::set<std::string>{"full"});
}

// Where the policies part: a CPU-only pod on two nodes alike in GPUs, one short of CPU. Binpack
// fills the smaller node; default sees that this would leave its GPUs without CPU for the common
// 1-GPU, 8-CPU pods, and takes the roomy one.
TEST(InventoryTest, DefaultKeepsCpuForTheGpusWhereBinpackDoesNot) {
  const auto setup = [](Policy policy) {
    auto p = placer({gpuNode("roomy", 4, "A100", 64), gpuNode("tight", 4, "A100", 40)}, policy);
    for (int i = 0; i < 4; ++i) {  // the common shape: 1 GPU and 8 CPUs
      const std::string name = "t" + std::to_string(i);
      EXPECT_TRUE(p->take(name, {pods(name, 1, 8, 1)}, {{{"roomy", {0}, 1000}}}));
      p->free(name);
    }
    return p;
  };
  EXPECT_EQ(nodesOf(setup(Policy::kBinpack)->place({pods("etl", 1, 16, 0)})),
            std::set<std::string>{"tight"});
  EXPECT_EQ(nodesOf(setup(Policy::kDefault)->place({pods("etl", 1, 16, 0)})),
            std::set<std::string>{"roomy"});
}

// Pods that may use only one GPU model (useGpuType) press on it: with such pods common, the
// default policy keeps other pods off that model even where the CPU argues for it.
TEST(InventoryTest, DefaultKeepsOtherPodsOffAModelThatRestrictedPodsNeed) {
  const auto setup = [](bool restricted) {
    // The T4 node has CPU to spare; the A100 node little (18 CPUs for 2 GPUs).
    auto p = placer({gpuNode("t4", 2, "T4", 64), gpuNode("a100", 2, "A100", 18)}, Policy::kDefault);
    for (int i = 0; i < 4; ++i) {  // the common shape: 1 GPU and 8 CPUs, 3 of 4 on T4s only
      const std::string name = "t" + std::to_string(i);
      PlacementRequest r = pods(name, 1, 8, 1);
      if (restricted && i < 3) r.use_gpu_types = {"T4"};
      EXPECT_TRUE(p->take(name, {r}, {{{"t4", {0}, 1000}}}));
      p->free(name);
    }
    return p;
  };
  // A pod of 1 GPU and 16 CPUs would leave the A100 node 2 CPUs for its other GPU. Without
  // restricted pods that weighs most: it goes to the T4 node.
  EXPECT_EQ(nodesOf(setup(false)->place({pods("etl", 1, 16, 1)})), std::set<std::string>{"t4"});
  // With them, the T4's pressure (3/4 of the demand on half the capacity) outweighs it.
  EXPECT_EQ(nodesOf(setup(true)->place({pods("etl", 1, 16, 1)})), std::set<std::string>{"a100"});
}

TEST(InventoryTest, NvlinkAwareGpuSetOnAnEightGpuNodeWithTwoDomains) {
  // Domains {0,1,2,3} and {4,5,6,7}; GPU 0 is taken.
  auto p = placer({gpuNode("dgx", 8, "H100", 128, 4)});
  ASSERT_TRUE(p->take("one", {pods("one", 1, 1, 1)}, {{{"dgx", {0}, 1000}}}));
  auto r = p->place({pods("four", 1, 1, 4)});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced);
  EXPECT_EQ(r.pod_sets[0][0].gpus, (std::vector<int>{4, 5, 6, 7}));
  // Two GPUs go to the tighter domain (three free), keeping {4..7} whole.
  r = p->place({pods("two", 1, 1, 2)});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced);
  EXPECT_EQ(r.pod_sets[0][0].gpus, (std::vector<int>{1, 2}));
  // With GPU 4 taken instead, they go to {5, 6}, not the lowest free {0, 1}.
  auto q = placer({gpuNode("dgx", 8, "H100", 128, 4)});
  ASSERT_TRUE(q->take("one", {pods("one", 1, 1, 1)}, {{{"dgx", {4}, 1000}}}));
  r = q->place({pods("two", 1, 1, 2)});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced);
  EXPECT_EQ(r.pod_sets[0][0].gpus, (std::vector<int>{5, 6}));
}

TEST(InventoryTest, GangHonoursRequiredTopologyAndFallsBackOnlyWherePreferred) {
  // Two racks of two 8-GPU nodes; rack "r1" has 6 GPUs free in all, "r2" 10.
  auto p = placer({gpuNode("a1", 8, "A100", 64, 0, "r1"), gpuNode("a2", 8, "A100", 64, 0, "r1"),
                   gpuNode("b1", 8, "A100", 64, 0, "r2"), gpuNode("b2", 8, "A100", 64, 0, "r2")});
  ASSERT_TRUE(p->take("busy-a", {pods("x", 2, 1, 5)},
                      {{{"a1", {0, 1, 2, 3, 4}, 1000}, {"a2", {0, 1, 2, 3, 4}, 1000}}}));
  ASSERT_TRUE(p->take("busy-b", {pods("x", 2, 1, 3)},
                      {{{"b1", {0, 1, 2}, 1000}, {"b2", {0, 1, 2}, 1000}}}));
  // Four pods of 2 GPUs in one rack: only r2 has room (its 5+5 free hold 2+2 per node).
  auto gang = pods("workers", 4, 1, 2);
  gang.topology = {"rack", true};
  auto r = p->place({gang});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced) << r.message;
  EXPECT_EQ(nodesOf(r), (std::set<std::string>{"b1", "b2"}));
  // Five pods of 2 GPUs: no rack holds them. Required: not now (an idle rack would).
  gang.count = 5;
  r = p->place({gang});
  EXPECT_EQ(r.kind, PlacementResult::Kind::kNotNow);
  EXPECT_NE(r.message.find("within one rack (required)"), std::string::npos) << r.message;
  // Preferred, when one rack can hold them: still one rack.
  auto four = pods("workers", 4, 1, 2);
  four.topology = {"rack", false};
  r = p->place({four});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced) << r.message;
  EXPECT_EQ(nodesOf(r), (std::set<std::string>{"b1", "b2"}));
  // Preferred, when none can: spread across racks instead.
  gang.topology.required = false;
  r = p->place({gang});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced) << r.message;
  EXPECT_EQ(r.pod_sets[0].size(), 5u);
  // Nine pods of 2 GPUs can never share one rack (16 GPUs each).
  gang.count = 9;
  gang.topology.required = true;
  r = p->place({gang});
  EXPECT_EQ(r.kind, PlacementResult::Kind::kNever);
  EXPECT_NE(r.message.find("even an idle fleet"), std::string::npos) << r.message;
  // One node, required: two pods of 2 GPUs land together on the same node.
  auto pair = pods("pair", 2, 1, 2);
  pair.topology = {"kubernetes.io/hostname", true};
  r = p->place({pair});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced);
  EXPECT_EQ(nodesOf(r).size(), 1u);
}

TEST(InventoryTest, GangInsideOneNvlinkDomain) {
  auto p = placer({gpuNode("dgx", 8, "H100", 128, 4)});
  ASSERT_TRUE(p->take("one", {pods("one", 1, 1, 1)}, {{{"dgx", {5}, 1000}}}));
  // Two pods of 2 GPUs that must talk over NVLink: all four in domain {0..3}.
  auto gang = pods("ring", 2, 1, 2);
  gang.topology = {"nvlink", true};
  auto r = p->place({gang});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced) << r.message;
  std::set<int> gpus;
  for (const auto& pp : r.pod_sets[0]) gpus.insert(pp.gpus.begin(), pp.gpus.end());
  EXPECT_EQ(gpus, (std::set<int>{0, 1, 2, 3}));
  // A third pair needs a second domain with 4 free: none now.
  ASSERT_TRUE(p->take("ring", {gang}, r.pod_sets));
  EXPECT_EQ(p->place({gang}).kind, PlacementResult::Kind::kNotNow);
}

TEST(InventoryTest, PodSetsThatNeverFitTogetherAreNeverNotNow) {
  auto p = placer({gpuNode("only", 8)});
  // Each fits the idle node alone; together (6 + 6 of 8 GPUs) they never can.
  auto r = p->place({pods("a", 1, 1, 6), pods("b", 1, 1, 6)});
  EXPECT_EQ(r.kind, PlacementResult::Kind::kNever);
  EXPECT_NE(r.message.find("with the workload's other pod sets"), std::string::npos) << r.message;
  // 6 + 2 can, once the node is free.
  ASSERT_TRUE(p->take("x", {pods("x", 1, 1, 1)}, {{{"only", {7}, 1000}}}));
  EXPECT_EQ(p->place({pods("a", 1, 1, 6), pods("b", 1, 1, 2)}).kind,
            PlacementResult::Kind::kNotNow);
}

// A request in MiB takes a different share of GPUs of different sizes: a rack of large GPUs is
// not ruled out by the share it would take of a small one.
TEST(InventoryTest, MixedGpuMemoryDoesNotRuleOutADomainThatFits) {
  auto small = gpuNode("small", 1, "T4", 64, 0, "r1", 16384);
  auto big1 = gpuNode("big1", 1, "A100", 64, 0, "r2", 81920);
  auto big2 = gpuNode("big2", 1, "A100", 64, 0, "r2", 81920);
  auto p = placer({small, big1, big2});
  // 12 GiB: 750 thousandths of a T4, 150 of an A100. Six of them fit rack r2 (its A100s); judged
  // by the T4's share (4,500 thousandths against r2's 2,000 free), r2 was skipped.
  auto gang = pods("shards", 6, 1, 1, {{"nvidia.com/gpumem", 12288 * 1000}});
  gang.topology = {"rack", true};
  auto r = p->place({gang});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced) << r.message;
  for (const auto& node : nodesOf(r)) EXPECT_NE(node, "small");
}

TEST(InventoryTest, WholeWorkloadOrNothingAndTakeFreeEnvironment) {
  auto p = placer({gpuNode("n1", 2, "A100", 64, 0, "", 40960)});
  // Two pod sets; the second cannot fit beside the first, so the first takes nothing either
  // (and, as 1 + 2 GPUs never fit this 2-GPU node, it never can).
  auto r = p->place({pods("a", 1, 1, 1), pods("b", 1, 1, 2)});
  EXPECT_EQ(r.kind, PlacementResult::Kind::kNever);
  // A share: memory and SM limits for HAMi-core.
  auto share =
      pods("s", 1, 1, 1, {{"nvidia.com/gpumem", 10240 * 1000}, {"nvidia.com/gpucores", 30000}});
  r = p->place({share});
  ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced);
  EXPECT_EQ(r.pod_sets[0][0].gpu_milli, 250);  // a quarter of the memory; 30 % of compute apart
  ASSERT_TRUE(p->take("s", {share}, r.pod_sets));
  EXPECT_FALSE(p->take("s", {share}, r.pod_sets));  // already held
  auto env = p->environment(r.pod_sets[0][0], share.per_pod);
  ASSERT_TRUE(env);
  std::map<std::string, std::string> e(env->begin(), env->end());
  EXPECT_EQ(e["CUDA_VISIBLE_DEVICES"], "GPU-n1-" + std::to_string(r.pod_sets[0][0].gpus[0]));
  EXPECT_EQ(e["CUDA_DEVICE_MEMORY_LIMIT"], "10240m");
  EXPECT_EQ(e["CUDA_DEVICE_SM_LIMIT"], "30");
  // The node map shows the share.
  const auto v = p->view();
  int64_t used = 0;
  int cores = 0;
  for (const auto& g : v[0].gpus) {
    used += g.used_milli;
    cores += g.cores_used;
  }
  EXPECT_EQ(used, 250);
  EXPECT_EQ(cores, 30);
  // Taking more than is free is refused and takes nothing.
  EXPECT_FALSE(p->take("big", {pods("big", 1, 1, 2)}, {{{"n1", {0, 1}, 1000}}}));
  EXPECT_FALSE(p->take("ghost", {pods("g", 1, 1, 1)}, {{{"nope", {0}, 1000}}}));
  EXPECT_TRUE(p->free("s"));
  EXPECT_FALSE(p->free("s"));
  EXPECT_TRUE(p->take("big", {pods("big", 1, 1, 2)}, {{{"n1", {0, 1}, 1000}}}));
}

// HAMi's two budgets of a GPU: memory (the share the policies see) and compute (gpucores). Pods
// fit on one GPU while both last.
TEST(InventoryTest, SharesNeedBothMemoryAndComputeLeft) {
  auto p = placer({gpuNode("one", 1, "A100", 64, 0, "", 40960)});
  const auto share = [](const std::string& name, int mem_pct, int cores) {
    Resources extra{{"nvidia.com/gpumem-percentage", mem_pct * 1000}};
    if (cores > 0) extra["nvidia.com/gpucores"] = cores * 1000;
    return pods(name, 1, 1, 1, extra);
  };
  for (const auto& [name, mem, cores] :
       std::vector<std::tuple<std::string, int, int>>{{"a", 10, 80}, {"b", 80, 10}}) {
    auto r = p->place({share(name, mem, cores)});
    ASSERT_EQ(r.kind, PlacementResult::Kind::kPlaced) << name << ": " << r.message;
    ASSERT_TRUE(p->take(name, {share(name, mem, cores)}, r.pod_sets));
  }
  // 90 % of compute is held: 20 % more does not fit, though memory does.
  EXPECT_EQ(p->place({share("c", 5, 20)}).kind, PlacementResult::Kind::kNotNow);
  EXPECT_FALSE(p->take("c", {share("c", 5, 20)}, {{{"one", {0}, 50}}}));
  // A share that asks no compute budget still fits in the memory left.
  EXPECT_EQ(p->place({share("d", 5, 0)}).kind, PlacementResult::Kind::kPlaced);
  EXPECT_EQ(p->view()[0].gpus[0].cores_used, 90);
  p->free("a");
  EXPECT_EQ(p->place({share("c", 5, 20)}).kind, PlacementResult::Kind::kPlaced);
}

// --- Inside admission ------------------------------------------------------------------------

World gpuWorld() {
  World w;
  w.flavors.push_back({"a100", {{"pool", "a100"}}, {}, {}});
  ClusterQueue cq;
  cq.name = "research";
  cq.preemption.within_cluster_queue = WithinClusterQueue::kLowerPriority;
  cq.resource_groups.push_back(
      {{"nvidia.com/gpu"}, {{"a100", {{"nvidia.com/gpu", Quota{64000, {}, {}}}}}}});
  w.cluster_queues.push_back(cq);
  w.local_queues.push_back({"ml", "q", "research"});
  w.namespaces["ml"] = {};
  return w;
}

Workload job(const std::string& name, int64_t pods_n, int64_t gpus, int32_t priority = 0,
             int64_t created = 0) {
  Workload w;
  w.name = "ml/" + name;
  w.namespace_ = "ml";
  w.local_queue = "q";
  w.priority = priority;
  w.created_ms = created;
  PodSet ps;
  ps.name = "main";
  ps.count = pods_n;
  ps.requests["nvidia.com/gpu"] = gpus * 1000;
  w.pod_sets.push_back(ps);
  return w;
}

struct Fleet {
  std::shared_ptr<Placer> placer;
  std::unique_ptr<Engine> engine;
};

Fleet fleet() {
  auto a = gpuNode("a", 8);
  auto b = gpuNode("b", 8);
  a.labels["pool"] = b.labels["pool"] = "a100";
  auto other = gpuNode("other", 8);  // not in the flavor
  other.labels["pool"] = "h100";
  Fleet f;
  f.placer = placer({a, b, other});
  EngineOptions o;
  const World w = gpuWorld();
  o.placement = placementHook(f.placer, w.flavors);
  auto e = Engine::create(w, o);
  EXPECT_TRUE(e) << e.error().message;
  f.engine = std::move(*e);
  return f;
}

TEST(InventoryAdmissionTest, AdmittedOnlyWithAPlacementThatTheAdmissionCarries) {
  Fleet f = fleet();
  ASSERT_TRUE(f.engine->submit(job("six-a", 1, 6, 0, 1)));
  ASSERT_TRUE(f.engine->submit(job("six-b", 1, 6, 0, 2)));
  ASSERT_TRUE(f.engine->submit(job("four", 1, 4, 0, 3)));
  f.engine->runUntilStable();
  auto a = f.engine->status("ml/six-a");
  auto b = f.engine->status("ml/six-b");
  ASSERT_EQ(a->state, WorkloadStatus::State::kAdmitted);
  ASSERT_EQ(b->state, WorkloadStatus::State::kAdmitted);
  ASSERT_EQ(a->admission->pod_sets[0].placements.size(), 1u);
  EXPECT_EQ(a->admission->pod_sets[0].placements[0].gpus.size(), 6u);
  EXPECT_NE(a->admission->pod_sets[0].placements[0].node,
            b->admission->pod_sets[0].placements[0].node);
  EXPECT_NE(a->admission->pod_sets[0].placements[0].node, "other");
  // 16 GPUs of quota are enough for 4 more, but neither flavor node has 4 free.
  auto four = f.engine->status("ml/four");
  EXPECT_EQ(four->state, WorkloadStatus::State::kPending);
  EXPECT_EQ(four->reason, "WaitingForPlacement");
  EXPECT_NE(four->message.find("does not fit in what is free now"), std::string::npos)
      << four->message;
  // When one finishes, it is admitted on the freed node.
  ASSERT_TRUE(f.engine->finish("ml/six-a"));
  f.engine->runUntilStable();
  four = f.engine->status("ml/four");
  ASSERT_EQ(four->state, WorkloadStatus::State::kAdmitted);
  EXPECT_EQ(four->admission->pod_sets[0].placements[0].node,
            a->admission->pod_sets[0].placements[0].node);
}

TEST(InventoryAdmissionTest, ARequestLargerThanAnyNodeIsReportedAsNeverFitting) {
  Fleet f = fleet();
  ASSERT_TRUE(f.engine->submit(job("huge", 1, 12)));
  f.engine->runUntilStable();
  auto s = f.engine->status("ml/huge");
  EXPECT_EQ(s->state, WorkloadStatus::State::kPending);
  EXPECT_EQ(s->reason, "NeverFits");
  EXPECT_NE(s->message.find("can never be placed"), std::string::npos) << s->message;
  EXPECT_NE(s->message.find("1 lack its node labels"), std::string::npos) << s->message;
  EXPECT_NE(s->message.find("2 are too small for one pod"), std::string::npos) << s->message;
}

TEST(InventoryAdmissionTest, PreemptsWhereRemovalMakesAPlacementPossible) {
  Fleet f = fleet();
  // Low-priority 5-GPU jobs on both nodes: 6 GPUs free in all, in quota, but no node has 4.
  ASSERT_TRUE(f.engine->submit(job("low-1", 1, 5, 0, 1)));
  ASSERT_TRUE(f.engine->submit(job("low-2", 1, 5, 0, 2)));
  f.engine->runUntilStable();
  ASSERT_TRUE(f.engine->submit(job("urgent", 1, 4, 10, 3)));
  const CycleResult r = f.engine->runUntilStable();
  ASSERT_EQ(r.preempted.size(), 1u);            // one victim is enough
  EXPECT_EQ(r.preempted[0].first, "ml/low-2");  // the most recently admitted
  EXPECT_EQ(r.preempted[0].second, "InClusterQueue");
  auto urgent = f.engine->status("ml/urgent");
  ASSERT_EQ(urgent->state, WorkloadStatus::State::kAdmitted);
  EXPECT_EQ(f.engine->status("ml/low-2")->state, WorkloadStatus::State::kPending);
  // An equal-priority job may not preempt: it waits for placement.
  ASSERT_TRUE(f.engine->submit(job("peer", 1, 5, 0, 4)));
  f.engine->runUntilStable();
  EXPECT_EQ(f.engine->status("ml/peer")->reason, "WaitingForPlacement");
}

// Found by the cycle-mode property test: a workload whose quota needs a preemption but which no
// node could ever hold evicted its victim, failed placement, let the victim back, and evicted it
// again, forever. Victims are now taken only when the workload can be placed without them.
TEST(InventoryAdmissionTest, AWorkloadThatCanNeverBePlacedPreemptsNothing) {
  World w = gpuWorld();
  w.cluster_queues[0].resource_groups[0].flavors[0].resources["nvidia.com/gpu"].nominal = 8000;
  auto a = gpuNode("a", 8);
  a.labels["pool"] = "a100";
  EngineOptions o;
  o.placement = placementHook(std::shared_ptr<Placer>(placer({a})), w.flavors);
  auto engine = std::move(*Engine::create(w, o));
  ASSERT_TRUE(engine->submit(job("low", 1, 8, 0, 1)));
  engine->runUntilStable();
  ASSERT_EQ(engine->status("ml/low")->state, WorkloadStatus::State::kAdmitted);
  // Higher priority, within quota once "low" is gone, but its pods want a zone no node has.
  Workload picky = job("picky", 1, 4, 10, 2);
  picky.pod_sets[0].node_selector["zone"] = "mars";
  ASSERT_TRUE(engine->submit(picky));
  const CycleResult r = engine->runUntilStable(1000);
  EXPECT_TRUE(r.preempted.empty());
  EXPECT_LT(engine->cycles(), 1000);
  EXPECT_EQ(engine->status("ml/low")->state, WorkloadStatus::State::kAdmitted);
  EXPECT_EQ(engine->status("ml/picky")->reason, "NeverFits");
  EXPECT_NE(engine->status("ml/picky")->message.find("lack its node labels"), std::string::npos);
}

TEST(InventoryAdmissionTest, ARestoredAdmissionHoldsItsGpus) {
  Fleet f = fleet();
  Workload w = job("restored", 1, 8);
  w.cluster_queue = "research";
  Admission adm;
  adm.cluster_queue = "research";
  PodSetAssignment psa;
  psa.name = "main";
  psa.count = 1;
  psa.flavors["nvidia.com/gpu"] = "a100";
  psa.usage["nvidia.com/gpu"] = 8000;
  psa.placements = {{"a", {0, 1, 2, 3, 4, 5, 6, 7}, 1000}};
  adm.pod_sets.push_back(psa);
  w.admission = adm;
  ASSERT_TRUE(f.engine->addAdmitted(w));
  EXPECT_TRUE(f.placer->holds("ml/restored"));
  ASSERT_TRUE(f.engine->submit(job("next", 1, 8, 0, 5)));
  f.engine->runUntilStable();
  auto next = f.engine->status("ml/next");
  ASSERT_EQ(next->state, WorkloadStatus::State::kAdmitted);
  EXPECT_EQ(next->admission->pod_sets[0].placements[0].node, "b");
}

}  // namespace
}  // namespace purser::fleet
