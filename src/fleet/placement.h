// GPU placement: which node and which GPUs host a pod, for whole GPUs and shares of one GPU
// (thousandths, "milli-GPU"), under a scoring policy; and the fragmentation measure of the FGD
// paper ("Beware of Fragmentation", USENIX ATC '23) that the fragmentation-aware policies
// minimise. Pure and deterministic: randomness comes from a seeded generator passed in.
//
// The policies are the paper's baselines (random, dotprod, clustering, packing, best_fit), FGD
// itself, and Purser's default; each is a scoring function over the same fit check, as
// bench/placement/README.md defines them. openb.h replays the paper's traces.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/result.h"

namespace purser::fleet::placement {

constexpr int64_t kMilliPerGpu = 1000;
constexpr int kMaxPodsPerNode = 1001;

struct Node {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int gpus = 0;
  std::string model;  // empty: no GPUs
};

struct Pod {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;
  int64_t gpu_milli = 0;            // per GPU, 0..1000
  std::vector<std::string> models;  // allowed GPU models; empty: any
  int64_t totalGpu() const { return num_gpu * gpu_milli; }
  bool sharing() const { return num_gpu == 1 && gpu_milli > 0 && gpu_milli < kMilliPerGpu; }
};

// What is left of a node, and which kinds of GPU pods it holds (for `clustering`).
struct NodeState {
  int64_t cpu_left = 0;
  int64_t memory_left = 0;
  std::vector<int64_t> left;  // milli-GPU per GPU
  int pods = 0;
  std::vector<std::string> tags;  // distinct tags of its GPU pods: "share-gpu", "<k>-gpu"

  static NodeState of(const Node& node);
  int64_t gpuLeft() const;  // L: the sum of left[]
};

// kDefault is Purser's own policy: FGD's score, where the fragmentation after placing also
// counts (1) the growth of the node's GPU capacity that the CPU it has left cannot feed at the
// typical GPU pods' CPU per milli-GPU r (max(0, L - cpu_left / r)), and (2) the demand of pods
// restricted to GPU models that the placement displaces: the GPUs it takes times the node
// model's pressure, at most 1 (see modelPressure). GPU choice as FGD's.
// kBinpack and kSpread are the plain rules platform teams know: the node left fullest (GPU, or
// CPU for pods without GPUs) after placing, or the emptiest.
enum class Policy {
  kRandom,
  kDotProd,
  kClustering,
  kPacking,
  kBestFit,
  kFgd,
  kDefault,
  kBinpack,
  kSpread
};
Result<Policy> parsePolicy(const std::string& name);
const char* policyName(Policy p);

// A pod shape that is common in a workload, with its frequency: the "target workload" the
// fragmentation measure is taken against.
struct TypicalPod {
  int64_t cpu_milli = 0;
  int64_t gpu_milli = 0;
  int num_gpu = 0;
  std::vector<std::string> models;
  double freq = 0;
};

// The most frequent shapes that together make up 95 % of `pods`, by count.
std::vector<TypicalPod> typicalPods(const std::vector<Pod>& pods);

// Per GPU model, how much of its capacity the typical pods restricted to GPU models claim: for
// each restricted shape, its share of the typical pods' GPU demand over the share of the fleet's
// GPU capacity its allowed models hold, summed over the shapes the model may serve. At 1 or more
// the restricted pods alone would fill the model's GPUs at full load, so every GPU another pod
// takes there is one a restricted pod will miss. Models no typical pod is restricted to are
// absent (pressure 0).
using ModelPressure = std::map<std::string, double>;
ModelPressure modelPressure(const std::vector<TypicalPod>& typical, const std::vector<Node>& nodes);

// The node's fragmentation in milli-GPU: the GPU capacity the typical pods could not use.
double fragmentation(const Node& node, const NodeState& state,
                     const std::vector<TypicalPod>& typical);

bool modelAllowed(const Node& node, const Pod& pod);
bool feasible(const Node& node, const NodeState& state, const Pod& pod);

// The GPUs a pod takes on a node where it is feasible (index, milli taken), by the policy's rule.
std::vector<std::pair<int, int64_t>> chooseGpus(const Node& node, const NodeState& state,
                                                const Pod& pod, Policy policy,
                                                const std::vector<TypicalPod>& typical,
                                                std::mt19937_64& rng);

// The policy's score (0..100) for placing `pod` on a feasible node. `pressure` (kDefault only):
// modelPressure of `typical` over the fleet.
int score(Policy policy, const Node& node, const NodeState& state, const Pod& pod,
          const std::vector<TypicalPod>& typical, const ModelPressure& pressure = {});

// Takes the pod's CPU, memory and GPUs from the state.
void place(NodeState& state, const Pod& pod, const std::vector<std::pair<int, int64_t>>& gpus);

// How a node's GPUs are linked: per GPU index, its NVLink domain (GPUs in one domain talk over
// NVLink; -1: none) and its NUMA node.
struct GpuTopology {
  std::vector<int> nvlink_domain;
  std::vector<int> numa;
};

// The k free GPUs for a pod that needs several: all in one NVLink domain when a domain has k
// free (the one with the fewest free, so larger domains stay whole for larger pods); otherwise
// across as few domains as possible, preferring GPUs on one NUMA node; lowest indices among
// equals. Empty when fewer than k are free.
std::vector<int> chooseGpuSet(const GpuTopology& topology, const std::vector<bool>& free, int k);

// A uniformly random integer in [0, n).
uint64_t uniform(std::mt19937_64& rng, uint64_t n);

}  // namespace purser::fleet::placement
