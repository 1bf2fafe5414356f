// The fleet's hardware and where admitted work runs on it: nodes (CPU, memory, labels, taints,
// rack and block) and their GPUs (model, memory, index, UUID, NUMA node, NVLink domain), and a
// Placer that finds room for a workload's pod sets, whole GPUs or shares of one, honouring node
// selectors, taints, GPU model constraints and topology requests (a pod set kept inside one
// NVLink domain, node, rack or block, required or preferred, as Kueue's topology-aware
// scheduling asks). Node choice is a placement policy's score (placement.h); GPU choice within a
// node is NVLink-aware for whole GPUs and fragmentation-aware for shares.
//
// Deterministic for a seed and a sequence of calls. Not thread-safe: the admission engine's
// owner serializes calls.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/result.h"
#include "fleet/engine.h"
#include "fleet/model.h"
#include "fleet/placement.h"

namespace purser::fleet {

struct GpuDevice {
  int index = 0;
  std::string uuid;  // empty: unknown
  std::string model;
  int64_t memory_mib = 0;
  int numa = 0;
  int nvlink_domain = -1;  // GPUs with the same domain talk over NVLink; -1: none
  bool mig_capable = false;
};

struct InventoryNode {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<Taint> taints;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::string rack;             // empty: not in a rack the inventory knows
  std::string block;            // a group of racks
  std::vector<GpuDevice> gpus;  // by index: gpus[i].index == i
};

// Whether `node` has every one of `labels` with the same value.
bool carriesLabels(const InventoryNode& node, const std::map<std::string, std::string>& labels);

// Names are unique DNS labels; GPU indices run 0..n-1; a node's GPUs share one model and memory
// size; amounts are not negative. Errors name the node and the field.
Result<void> validateInventory(const std::vector<InventoryNode>& nodes);

// The openb node list (simulation) as an inventory: GPUs with the model's memory, no topology.
std::vector<InventoryNode> inventoryOf(const std::vector<placement::Node>& nodes);

// One pod set to place: `count` identical pods.
struct PlacementRequest {
  std::string name;
  int64_t count = 0;
  Resources per_pod;  // milli-units, as in model.h
  std::vector<Toleration> tolerations;
  std::map<std::string, std::string> node_selector;
  TopologyRequest topology;
  std::vector<std::string> use_gpu_types;
  std::vector<std::string> nouse_gpu_types;
};

struct PlacementResult {
  enum class Kind { kPlaced, kNotNow, kNever };
  Kind kind = Kind::kPlaced;
  std::string message;                              // why not, in plain words
  std::vector<std::vector<PodPlacement>> pod_sets;  // when placed: per request, one per pod
};

class Placer {
 public:
  static Result<std::unique_ptr<Placer>> create(std::vector<InventoryNode> nodes,
                                                placement::Policy policy, uint64_t seed);

  // Room for every pod of every request now, as if the owners in `ignoring` held nothing; all
  // or nothing. kNever: not even on an idle fleet (too large, or nothing matches).
  PlacementResult place(const std::vector<PlacementRequest>& requests,
                        const std::vector<std::string>& ignoring = {});
  // Records what `owner` holds. Errors (and takes nothing) when a node or GPU is unknown, or
  // the room is no longer free.
  Result<void> take(const std::string& owner, const std::vector<PlacementRequest>& requests,
                    const std::vector<std::vector<PodPlacement>>& placements);
  // Gives back everything `owner` holds; false when it held nothing.
  bool free(const std::string& owner);
  bool holds(const std::string& owner) const;

  struct Share {
    std::string owner;
    int64_t milli = 0;
  };
  struct GpuView {
    const GpuDevice* gpu = nullptr;
    int64_t used_milli = 0;  // of its memory
    int cores_used = 0;      // percent of its compute held by shares (HAMi's gpucores)
    std::vector<Share> shares;
  };
  struct NodeView {
    const InventoryNode* node = nullptr;
    int64_t cpu_used_milli = 0;
    int64_t memory_used_mib = 0;
    int pods = 0;
    std::vector<GpuView> gpus;
  };
  std::vector<NodeView> view() const;
  const std::vector<InventoryNode>& nodes() const { return nodes_; }
  const InventoryNode* node(const std::string& name) const;

  // What an executor sets for a placed pod: CUDA_VISIBLE_DEVICES and, for shares, HAMi-core's
  // memory and SM limits.
  Result<std::vector<std::pair<std::string, std::string>>> environment(
      const PodPlacement& pod, const Resources& per_pod) const;

 private:
  struct Holding {
    int node = 0;
    int64_t cpu_milli = 0;
    int64_t memory_mib = 0;
    std::vector<std::pair<int, int64_t>> gpus;  // index, milli of its memory
    int cores = 0;                              // percent of each of those GPUs' compute
  };
  Placer(std::vector<InventoryNode> nodes, placement::Policy policy, uint64_t seed);
  class Attempt;
  void apply(const Holding& h, int sign, const std::string& owner);
  const std::vector<placement::TypicalPod>& typical();
  void remember(const placement::Pod& pod);

  std::vector<InventoryNode> nodes_;
  std::vector<placement::Node> shapes_;  // per node, for the policies
  std::vector<std::string> models_;      // the fleet's GPU models, each once
  std::vector<placement::NodeState> states_;
  std::vector<placement::NodeState> idle_;  // every node free
  std::vector<int> types_;                  // per node: nodes alike in shape share a type
  std::vector<std::vector<std::vector<Share>>> shares_;  // per node, per GPU
  // Per node, per GPU: percent of its compute held (HAMi's gpucores is a budget apart from the
  // memory share the policies see).
  std::vector<std::vector<int>> cores_used_;
  std::unordered_map<std::string, int> index_;
  std::unordered_map<std::string, std::vector<Holding>> held_;
  placement::Policy policy_;
  std::mt19937_64 rng_;
  // The fragmentation-aware policies measure fragmentation against the pod shapes the fleet
  // has seen most (the last kRecent placed), as FGD does against its workload's typical pods.
  static constexpr size_t kRecent = 1024;
  std::vector<placement::Pod> recent_;
  size_t recent_next_ = 0;
  size_t recent_changes_ = 0;
  std::vector<placement::TypicalPod> typical_;
  placement::ModelPressure pressure_;  // of typical_ over shapes_
};

// The admission engine's placement hook over a Placer: pod sets go where their admitted flavors'
// node labels and tolerations allow.
std::shared_ptr<PlacementHook> placementHook(std::shared_ptr<Placer> placer,
                                             std::vector<ResourceFlavor> flavors);

// The placement requests of a workload admitted with `pod_sets` (flavors per resource).
std::vector<PlacementRequest> placementRequests(const Workload& w,
                                                const std::vector<PodSetAssignment>& pod_sets,
                                                const std::vector<ResourceFlavor>& flavors);

}  // namespace purser::fleet
