// Placement: fit checks, each policy's choice on small hand-made clusters, the fragmentation
// measure, the openb CSV readers and the replay's determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "fleet/placement.h"
#include "fleet_io/openb.h"

namespace purser::fleet::placement {
namespace {

Node gpuNode(const std::string& name, int gpus, const std::string& model = "V100",
             int64_t cpu = 64000, int64_t mem = 262144) {
  return {name, cpu, mem, gpus, model};
}

Pod pod(int64_t cpu, int num_gpu, int64_t milli, std::vector<std::string> models = {}) {
  return {"p", cpu, 1024, num_gpu, milli, std::move(models)};
}

TEST(PlacementFitTest, ChecksCpuMemoryGpusModelsAndPodCount) {
  const Node n = gpuNode("n", 2, "V100", 8000, 4096);
  NodeState s = NodeState::of(n);
  EXPECT_TRUE(feasible(n, s, pod(8000, 0, 0)));
  EXPECT_FALSE(feasible(n, s, pod(8001, 0, 0)));
  Pod big_memory = pod(1000, 0, 0);
  big_memory.memory_mib = 4097;
  EXPECT_FALSE(feasible(n, s, big_memory));
  EXPECT_TRUE(feasible(n, s, pod(1000, 2, 1000)));
  EXPECT_FALSE(feasible(n, s, pod(1000, 3, 1000)));
  EXPECT_TRUE(feasible(n, s, pod(1000, 1, 500, {"T4", "V100"})));
  EXPECT_FALSE(feasible(n, s, pod(1000, 1, 500, {"T4"})));
  // Shares: a GPU with 400 left fits 400, not 500.
  s.left = {400, 300};
  EXPECT_TRUE(feasible(n, s, pod(1000, 1, 400)));
  EXPECT_FALSE(feasible(n, s, pod(1000, 1, 500)));
  EXPECT_FALSE(feasible(n, s, pod(1000, 1, 1000)));
  // A CPU-only node hosts no GPU pod; a full node hosts nothing.
  const Node cpu_only{"c", 64000, 262144, 0, ""};
  EXPECT_FALSE(feasible(cpu_only, NodeState::of(cpu_only), pod(1000, 1, 100)));
  NodeState full = NodeState::of(n);
  full.pods = kMaxPodsPerNode;
  EXPECT_FALSE(feasible(n, full, pod(1, 0, 0)));
}

TEST(PlacementGpuChoiceTest, SharesTakeTheTightestGpuAndWholeGpusTheLowestFree) {
  const Node n = gpuNode("n", 4);
  NodeState s = NodeState::of(n);
  s.left = {1000, 600, 300, 1000};
  std::mt19937_64 rng(1);
  const auto share = chooseGpus(n, s, pod(1000, 1, 250), Policy::kBestFit, {}, rng);
  ASSERT_EQ(share.size(), 1u);
  EXPECT_EQ(share[0], (std::pair<int, int64_t>{2, 250}));
  const auto whole = chooseGpus(n, s, pod(1000, 2, 1000), Policy::kBestFit, {}, rng);
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0].first, 0);
  EXPECT_EQ(whole[1].first, 3);
  place(s, pod(1000, 2, 1000), whole);
  EXPECT_EQ(s.left, (std::vector<int64_t>{0, 600, 300, 0}));
  EXPECT_EQ(s.cpu_left, 63000);
  EXPECT_EQ(s.pods, 1);
  EXPECT_EQ(s.tags, (std::vector<std::string>{"2-gpu"}));
}

TEST(PlacementTopologyTest, MultiGpuPodsStayInOneNvlinkDomain) {
  // An 8-GPU node with two NVLink domains of four, one per NUMA node.
  const GpuTopology topo{{0, 0, 0, 0, 1, 1, 1, 1}, {0, 0, 0, 0, 1, 1, 1, 1}};
  const std::vector<bool> two_used = {true, true, false, false, true, true, true, true};
  // Two GPUs: the domain with just two free, keeping the whole other domain for a larger pod.
  EXPECT_EQ(chooseGpuSet(topo, two_used, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(chooseGpuSet(topo, two_used, 3), (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(chooseGpuSet(topo, two_used, 4), (std::vector<int>{4, 5, 6, 7}));
  // No domain holds six: across both, every free GPU.
  EXPECT_EQ(chooseGpuSet(topo, two_used, 6), (std::vector<int>{0, 1, 4, 5, 6, 7}));
  EXPECT_TRUE(chooseGpuSet(topo, two_used, 7).empty());
  // One free in domain 0, three in domain 1: a pair goes to domain 1, not across the link.
  const std::vector<bool> scattered = {true, false, false, false, true, true, true, false};
  EXPECT_EQ(chooseGpuSet(topo, scattered, 2), (std::vector<int>{4, 5}));
  // Three across a node with no NVLink: the NUMA node with more free GPUs first.
  const GpuTopology pcie{{-1, -1, -1, -1}, {0, 0, 1, 1}};
  EXPECT_EQ(chooseGpuSet(pcie, {true, false, true, true}, 2), (std::vector<int>{2, 3}));
}

TEST(PlacementScoreTest, EachPolicyPrefersWhatItShould) {
  const Node n = gpuNode("n", 8);
  const Pod share = pod(4000, 1, 500);
  NodeState empty = NodeState::of(n);
  NodeState busy = NodeState::of(n);
  busy.left = {500, 1000, 1000, 1000, 1000, 1000, 1000, 1000};
  busy.cpu_left = 32000;
  busy.tags = {"share-gpu"};
  // best_fit, packing and clustering: the node already in use.
  for (Policy p : {Policy::kBestFit, Policy::kPacking, Policy::kClustering}) {
    EXPECT_GT(score(p, n, busy, share, {}), score(p, n, empty, share, {})) << policyName(p);
  }
  // dotprod prefers the node whose free resources point away from the pod's (less free ones).
  const Pod cpu_heavy = pod(32000, 1, 500);
  EXPECT_EQ(score(Policy::kDotProd, n, empty, cpu_heavy, {}), 90);  // d = 0.1875
  EXPECT_EQ(score(Policy::kDotProd, n, busy, cpu_heavy, {}), 93);   // d = 0.12109375
  // The spec's formulas, on numbers worked by hand.
  EXPECT_EQ(score(Policy::kPacking, n, empty, share, {}), 25);     // max(33 - 8, 8)
  EXPECT_EQ(score(Policy::kPacking, n, busy, share, {}), 95);      // 100 - 50 div 10
  EXPECT_EQ(score(Policy::kClustering, n, empty, share, {}), 25);  // base 0 + 25
  EXPECT_EQ(score(Policy::kClustering, n, busy, share, {}), 76);   // 25*500/8000 = 1, + 75
  // best_fit: s = (32000-4000)/128000*0.5 + (7500-500)/8000*0.5 = 0.546875 -> 45
  EXPECT_EQ(score(Policy::kBestFit, n, busy, share, {}), 45);
  EXPECT_EQ(score(Policy::kPacking, n, empty, pod(4000, 0, 0), {}), 0);
}

TEST(PlacementScoreTest, BinpackAndSpreadLookAtHowFullTheNodeIsLeft) {
  const Node n = gpuNode("n", 8);
  NodeState empty = NodeState::of(n);
  NodeState half = NodeState::of(n);
  half.left = {0, 0, 0, 0, 1000, 1000, 1000, 1000};
  const Pod one = pod(1000, 1, 1000);
  EXPECT_EQ(score(Policy::kBinpack, n, empty, one, {}), 12);  // 1 of 8 taken after
  EXPECT_EQ(score(Policy::kBinpack, n, half, one, {}), 62);   // 5 of 8
  EXPECT_EQ(score(Policy::kSpread, n, half, one, {}), 38);
  EXPECT_GT(score(Policy::kSpread, n, empty, one, {}), score(Policy::kSpread, n, half, one, {}));
  // Pods without GPUs: by CPU.
  EXPECT_EQ(score(Policy::kBinpack, n, empty, pod(32000, 0, 0), {}), 50);
}

// The default policy is FGD's score plus the GPU capacity a placement strands for want of CPU:
// two nodes alike to FGD differ when one would be left with too little CPU for its GPUs.
TEST(PlacementScoreTest, DefaultCountsGpuCapacityStrandedForWantOfCpu) {
  const Node roomy = gpuNode("roomy", 4, "V100", 64000);
  const Node tight = gpuNode("tight", 4, "V100", 40000);
  // The typical workload: one GPU and 8 CPUs per pod (8 CPU-milli per milli-GPU).
  const std::vector<TypicalPod> typical = {{8000, 1000, 1, {}, 1.0}};
  const Pod cpu_only = pod(16000, 0, 0);
  const NodeState a = NodeState::of(roomy);
  const NodeState b = NodeState::of(tight);
  // FGD sees no difference: a typical pod still fits on either afterwards.
  EXPECT_EQ(score(Policy::kFgd, roomy, a, cpu_only, typical),
            score(Policy::kFgd, tight, b, cpu_only, typical));
  // After it, "tight" has 24 CPUs for 4 GPUs: one GPU's worth (1000 milli) is stranded.
  EXPECT_GT(score(Policy::kDefault, roomy, a, cpu_only, typical),
            score(Policy::kDefault, tight, b, cpu_only, typical));
  EXPECT_EQ(score(Policy::kDefault, roomy, a, cpu_only, typical),
            score(Policy::kFgd, roomy, a, cpu_only, typical));
  EXPECT_EQ(score(Policy::kDefault, tight, b, cpu_only, typical), 26);  // sigmoid(-1) = 0.269
}

// A model's pressure: the restricted shapes' share of the GPU demand over the share of the
// fleet's GPUs their allowed models hold, summed per model.
TEST(PlacementPressureTest, WeighsRestrictedDemandAgainstTheCapacityItMayUse) {
  // 4 of 16 GPUs are T4s (25 %), 12 are G2s.
  const std::vector<Node> nodes = {gpuNode("t1", 2, "T4"),
                                   gpuNode("t2", 2, "T4"),
                                   gpuNode("g1", 8, "G2"),
                                   gpuNode("g2", 4, "G2"),
                                   {"cpu", 64000, 262144, 0, ""}};
  const std::vector<TypicalPod> typical = {
      {8000, 1000, 1, {"T4"}, 0.25},                    // 25 % of the GPU demand, T4 only
      {8000, 500, 2, {"G2", "T4", "T4", "A100"}, 0.2},  // 20 %, anywhere the fleet has
      {8000, 1000, 1, {}, 0.55},                        // 55 %, unrestricted
      {4000, 0, 0, {"T4"}, 0.5},                        // no GPU: claims none
  };
  const ModelPressure p = modelPressure(typical, nodes);
  ASSERT_EQ(p.size(), 2U);
  EXPECT_DOUBLE_EQ(p.at("T4"), 0.25 / 0.25 + 0.2 / 1.0);
  EXPECT_DOUBLE_EQ(p.at("G2"), 0.2 / 1.0);
  EXPECT_TRUE(modelPressure({{8000, 1000, 1, {}, 1.0}}, nodes).empty());
  EXPECT_TRUE(modelPressure(typical, {{"cpu", 64000, 262144, 0, ""}}).empty());
}

// The default policy counts the restricted demand a placement displaces: an unrestricted pod
// on a pressed model costs the GPUs it takes (pressure at most 1), elsewhere what FGD says.
TEST(PlacementScoreTest, DefaultCountsTheRestrictedDemandAPlacementDisplaces) {
  const Node t4 = gpuNode("t4", 2, "T4");
  const Node g2 = gpuNode("g2", 2, "G2");
  const std::vector<TypicalPod> typical = {{8000, 1000, 1, {"T4"}, 0.5}, {8000, 1000, 1, {}, 0.5}};
  const ModelPressure pressure = {{"T4", 2.0}, {"G2", 0.25}};
  const Pod free_pod = pod(8000, 1, 1000);
  const NodeState s4 = NodeState::of(t4), s2 = NodeState::of(g2);
  const auto expected = [&](const Node& n, const NodeState& s, double displaced) {
    NodeState a = s;
    place(a, free_pod, {{0, 1000}});
    const double delta = fragmentation(n, s, typical) - fragmentation(n, a, typical) - displaced;
    return static_cast<int>(100.0 / (1.0 + std::exp(-delta / 1000.0)));
  };
  EXPECT_EQ(score(Policy::kDefault, t4, s4, free_pod, typical, pressure),
            expected(t4, s4, 1000.0));  // capped at one GPU's worth
  EXPECT_EQ(score(Policy::kDefault, g2, s2, free_pod, typical, pressure), expected(g2, s2, 250.0));
  EXPECT_EQ(score(Policy::kFgd, t4, s4, free_pod, typical, pressure), expected(t4, s4, 0.0));
  // Without pressure the default is FGD here (the CPU is plentiful).
  EXPECT_EQ(score(Policy::kDefault, t4, s4, free_pod, typical),
            score(Policy::kFgd, t4, s4, free_pod, typical));
  EXPECT_GT(score(Policy::kDefault, g2, s2, free_pod, typical, pressure),
            score(Policy::kDefault, t4, s4, free_pod, typical, pressure));
  // A pod without GPUs displaces nothing.
  EXPECT_EQ(score(Policy::kDefault, t4, s4, pod(8000, 0, 0), typical, pressure),
            score(Policy::kDefault, t4, s4, pod(8000, 0, 0), typical));
}

TEST(PlacementFragmentationTest, CountsWhatTypicalPodsCannotUse) {
  const Node n = gpuNode("n", 2, "V100", 16000);
  NodeState s = NodeState::of(n);
  s.left = {300, 1000};
  // Half the pods want 500 milli, half a whole GPU; both with 1 cpu.
  const std::vector<TypicalPod> typical = {{1000, 500, 1, {}, 0.5}, {1000, 1000, 1, {}, 0.5}};
  // For each: the GPU with 300 left is below what it asks: 0.5*300 + 0.5*300.
  EXPECT_DOUBLE_EQ(fragmentation(n, s, typical), 300.0);
  // Without the CPU for them, all of L is fragmented for both.
  s.cpu_left = 500;
  EXPECT_DOUBLE_EQ(fragmentation(n, s, typical), 1300.0);
  // A model the node does not have: no access, all of L.
  s.cpu_left = 16000;
  EXPECT_DOUBLE_EQ(fragmentation(n, s, {{1000, 500, 1, {"T4"}, 1.0}}), 1300.0);
  // CPU-only typical pods leave every GPU unused.
  EXPECT_DOUBLE_EQ(fragmentation(n, s, {{1000, 0, 0, {}, 1.0}}), 1300.0);
  // FGD places a 300 share where it removes the 300 fragment: on GPU 0, not GPU 1.
  std::mt19937_64 rng(1);
  const auto g = chooseGpus(n, s, pod(1000, 1, 300), Policy::kFgd, typical, rng);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].first, 0);
}

TEST(PlacementTypicalPodsTest, TakesTheCommonShapesUpTo95Percent) {
  std::vector<Pod> pods;
  for (int i = 0; i < 60; ++i) pods.push_back(pod(1000, 1, 500));
  for (int i = 0; i < 36; ++i) pods.push_back(pod(2000, 1, 1000));
  for (int i = 0; i < 4; ++i) pods.push_back(pod(8000, 0, 0));
  const auto t = typicalPods(pods);
  ASSERT_EQ(t.size(), 2u);  // 60 + 36 = 96 >= 95
  EXPECT_EQ(t[0].gpu_milli, 500);
  EXPECT_DOUBLE_EQ(t[0].freq, 60.0 / 96.0);
  EXPECT_DOUBLE_EQ(t[1].freq, 36.0 / 96.0);
}

TEST(OpenbCsvTest, ReadsNodesAndPodsAsTheSpecSays) {
  auto nodes = parseNodesCsv(
      "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,V100\n"
      "n1,32000,131072,0,\n",
      "nodes.csv");
  ASSERT_TRUE(nodes) << nodes.error().message;
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].gpus, 2);
  EXPECT_EQ((*nodes)[1].model, "");
  auto pods = parsePodsCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
      "a,1000,1024,1,460,,LS\nb,1000,1024,2,2000,V100|T4,BE\nc,500,512,0,300,,LS\n",
      "pods.csv", {"V100", "T4"});
  ASSERT_TRUE(pods) << pods.error().message;
  EXPECT_EQ((*pods)[0].gpu_milli, 460);
  EXPECT_EQ((*pods)[1].gpu_milli, 1000);  // larger than a GPU: a whole one
  EXPECT_EQ((*pods)[1].models, (std::vector<std::string>{"V100", "T4"}));
  EXPECT_EQ((*pods)[2].totalGpu(), 0);  // no GPUs: its gpu_milli does not count
  // Without a gpu_milli column, GPU pods take whole GPUs.
  auto whole = parsePodsCsv("name,cpu_milli,memory_mib,num_gpu\nw,1000,1024,4\n", "m.csv", {});
  ASSERT_TRUE(whole);
  EXPECT_EQ((*whole)[0].totalGpu(), 4000);
}

TEST(OpenbCsvTest, BadInputNamesTheFileLineAndColumn) {
  const auto nodeError = [](const std::string& text) {
    auto r = parseNodesCsv(text, "nodes.csv");
    return r ? std::string() : r.error().message;
  };
  EXPECT_EQ(nodeError("sn,cpu_milli,memory_mib,model\nn,1,1,V100\n"),
            "nodes.csv:1: missing column \"gpu\"");
  EXPECT_EQ(nodeError("sn,cpu_milli,memory_mib,gpu,model\nn,-4,1,1,V100\n"),
            "nodes.csv:2: column cpu_milli: \"-4\" is not a whole number of 0 or more");
  EXPECT_EQ(nodeError("sn,cpu_milli,memory_mib,gpu,model\nn,4,lots,1,V100\n"),
            "nodes.csv:2: column memory_mib: \"lots\" is not a whole number of 0 or more");
  EXPECT_EQ(nodeError("sn,cpu_milli,memory_mib,gpu,model\nn,4,4,1\n"),
            "nodes.csv:2: expected 5 columns, got 4");
  EXPECT_EQ(nodeError(""), "nodes.csv: the file is empty");
  auto unknown = parsePodsCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
      "p,1,1,1,500,A100\n",
      "pods.csv", {"V100"});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().message,
            "pods.csv:2: pod p: gpu_spec names GPU model \"A100\", which no node has");
}

TEST(OpenbReplayTest, IsDeterministicForASeedAndTunesTheArrivals) {
  std::vector<Node> nodes;
  for (int i = 0; i < 8; ++i) nodes.push_back(gpuNode("n" + std::to_string(i), 2));
  std::vector<Pod> pods;
  for (int i = 0; i < 10; ++i) {
    Pod p = pod(2000, 1, i % 2 == 0 ? 300 : 1000);
    p.name = "p" + std::to_string(i);
    pods.push_back(p);
  }
  for (Policy policy : {Policy::kRandom, Policy::kBestFit, Policy::kFgd}) {
    auto a = replay(nodes, pods, {policy, 7, 1.3});
    auto b = replay(nodes, pods, {policy, 7, 1.3});
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->allocation_ratio_130, b->allocation_ratio_130) << policyName(policy);
    EXPECT_EQ(a->failed, b->failed);
    // 16 GPUs at 130 % is 20,800 milli; the 6,500 of the trace are tuned up with copies.
    EXPECT_GT(a->arrivals, 10);
    EXPECT_GT(a->failed, 0);  // more arrived than fits
    EXPECT_LE(a->allocation_ratio_130, 100.0);
    EXPECT_GT(a->allocation_ratio_130, 50.0);
  }
  // What is left pending at full load, and fragmentation over time: a tenth of the load at a
  // time up to the tuned 130 %, its last point the figure at 130 %.
  auto r = replay(nodes, pods, {Policy::kFgd, 7, 1.3});
  ASSERT_TRUE(r);
  EXPECT_LE(r->failed_100, r->failed);
  // Every pod asks 0.3 GPU or a whole one.
  EXPECT_GE(r->failed_gpus_100, 0.3 * static_cast<double>(r->failed_100));
  EXPECT_LE(r->failed_gpus_100, 1.0 * static_cast<double>(r->failed_100));
  ASSERT_EQ(r->fragmentation_by_arrival.size(), 13U);
  for (size_t i = 0; i < 13; ++i) {
    EXPECT_EQ(r->fragmentation_by_arrival[i].first, static_cast<int>(10 * (i + 1)));
  }
  EXPECT_EQ(r->fragmentation_by_arrival.back().second, r->fragmentation_130);
  EXPECT_EQ(r->fragmentation_by_arrival[9].second, r->fragmentation_100);
  // Tuning down: a trace larger than the target loses pods.
  auto down = replay(nodes, pods, {Policy::kBestFit, 7, 0.2});
  ASSERT_TRUE(down);
  EXPECT_LT(down->arrivals, 10);
}

// The replay on the paper's own data: `random` on the default trace lands where the paper's
// does (87.47 % at 130 %, the mean of seeds 42-51; bench/placement checks every policy, trace
// and seed). Skipped when the shared traces are not beside the checkout.
TEST(OpenbReplayTest, RandomOnTheDefaultTraceMatchesThePaper) {
  const char* env = std::getenv("PURSER_SHARED_DIR");
  const std::filesystem::path shared =
      env != nullptr && *env != '\0' ? std::filesystem::path(env)
                                     : std::filesystem::path(PURSER_SOURCE_DIR) / ".." / "shared";
  const auto dir = shared / "data" / "openb";
  if (!std::filesystem::exists(dir)) {
    GTEST_SKIP() << "the openb traces are not at " << dir.string()
                 << " (set PURSER_SHARED_DIR to the shared folder)";
  }
  const auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  auto nodes = parseNodesCsv(read(dir / "openb_node_list_gpu_node.csv"), "nodes");
  ASSERT_TRUE(nodes) << nodes.error().message;
  EXPECT_EQ(nodes->size(), 1213u);
  std::vector<std::string> models;
  int64_t gpus = 0;
  for (const auto& n : *nodes) {
    gpus += n.gpus;
    if (!n.model.empty() && std::find(models.begin(), models.end(), n.model) == models.end()) {
      models.push_back(n.model);
    }
  }
  EXPECT_EQ(gpus, 6212);
  auto pods = parsePodsCsv(read(dir / "openb_pod_list_default.csv"), "pods", models);
  ASSERT_TRUE(pods) << pods.error().message;
  EXPECT_EQ(typicalPods(*pods).size(), 35u);  // as the spec counts them
  auto r = replay(*nodes, *pods, {Policy::kRandom, 42, 1.3});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_NEAR(r->allocation_ratio_130, 87.47, 0.5);
  EXPECT_NEAR(r->allocation_ratio_100, 86.30, 0.5);
}

}  // namespace
}  // namespace purser::fleet::placement
