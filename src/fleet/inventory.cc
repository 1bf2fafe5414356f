#include "fleet/inventory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "fleet/gpu_share.h"

namespace purser::fleet {

namespace {

using placement::NodeState;
using placement::Pod;

size_t u(int i) { return static_cast<size_t>(i); }

constexpr int64_t kMilliBytesPerMib = int64_t{1024} * 1024 * 1000;
constexpr int kMaxGpusPerNode = 64;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// HAMi matches GPU types by a case-insensitive part of the device's model name.
bool typeMatches(const std::string& model, const std::vector<std::string>& types) {
  if (types.empty()) return false;
  const std::string m = lower(model);
  for (const auto& t : types) {
    if (m.find(lower(t)) != std::string::npos) return true;
  }
  return false;
}

int64_t amount(const Resources& r, const char* name) {
  auto it = r.find(name);
  return it == r.end() ? 0 : it->second;
}

// The memory of the openb traces' GPU models, in MiB (G2 and G3 are Alibaba's names for
// models it does not disclose; they are taken as 16 GiB and 32 GiB parts).
int64_t openbMemory(const std::string& model) {
  static const std::map<std::string, int64_t> kMemory = {
      {"A10", 24576}, {"G2", 16384},      {"G3", 32768},     {"P100", 16384},
      {"T4", 16384},  {"V100M16", 16384}, {"V100M32", 32768}};
  auto it = kMemory.find(model);
  return it == kMemory.end() ? 16384 : it->second;
}

// The widening order of the built-in topology levels.
const std::vector<std::string>& builtinLevels() {
  static const std::vector<std::string> kLevels = {"nvlink", "node", "rack", "block"};
  return kLevels;
}

std::string canonicalLevel(const std::string& level) {
  return level == "kubernetes.io/hostname" ? "node" : level;
}

std::string describe(const PlacementRequest& r) {
  std::string out;
  for (const auto& [name, v] : r.per_pod) {
    if (v == 0) continue;
    if (!out.empty()) out += ", ";
    if (name == "memory") {
      out += fmt::format("memory {}Mi", (v + kMilliBytesPerMib - 1) / kMilliBytesPerMib);
    } else if (name == "cpu") {
      out += v % 1000 == 0 ? fmt::format("cpu {}", v / 1000) : fmt::format("cpu {}m", v);
    } else {
      out += v % 1000 == 0 ? fmt::format("{} {}", name, v / 1000) : fmt::format("{} {}m", name, v);
    }
  }
  return out.empty() ? "nothing" : out;
}

}  // namespace

bool carriesLabels(const InventoryNode& node, const std::map<std::string, std::string>& labels) {
  for (const auto& [k, v] : labels) {
    auto it = node.labels.find(k);
    if (it == node.labels.end() || it->second != v) return false;
  }
  return true;
}

Result<void> validateInventory(const std::vector<InventoryNode>& nodes) {
  std::set<std::string> names;
  for (const auto& n : nodes) {
    const auto bad = [&](const std::string& field, const std::string& why) {
      return fail(
          invalidArgument(fmt::format("node \"{}\": {}: {}", n.name, field, why)).withField(field));
    };
    if (!isDnsSubdomain(n.name)) {
      return fail(invalidArgument(
          fmt::format("node name \"{}\" is not a DNS subdomain: lowercase letters, digits, '-' "
                      "and '.', starting and ending with a letter or digit, at most 253",
                      n.name)));
    }
    if (!names.insert(n.name).second) return bad("name", "listed twice");
    if (n.cpu_milli < 0) return bad("cpu", "may not be negative");
    if (n.memory_mib < 0) return bad("memory", "may not be negative");
    if (n.gpus.size() > static_cast<size_t>(kMaxGpusPerNode)) {
      return bad("gpus", fmt::format("at most {} GPUs per node", kMaxGpusPerNode));
    }
    for (size_t i = 0; i < n.gpus.size(); ++i) {
      const GpuDevice& g = n.gpus[i];
      if (g.index != static_cast<int>(i)) {
        return bad(
            fmt::format("gpus[{}].index", i),
            fmt::format("GPU indices run from 0 without gaps; expected {}, got {}", i, g.index));
      }
      if (g.model.empty()) return bad(fmt::format("gpus[{}].model", i), "required");
      if (g.memory_mib <= 0) return bad(fmt::format("gpus[{}].memory", i), "must be positive");
      if (g.model != n.gpus.front().model || g.memory_mib != n.gpus.front().memory_mib) {
        return bad(fmt::format("gpus[{}]", i),
                   "a node's GPUs must share one model and memory size; split mixed machines "
                   "into one node per GPU model");
      }
      if (g.numa < 0) return bad(fmt::format("gpus[{}].numa", i), "may not be negative");
      if (g.nvlink_domain < -1) {
        return bad(fmt::format("gpus[{}].nvlink_domain", i), "may not be negative");
      }
      for (size_t j = 0; j < i; ++j) {
        if (!g.uuid.empty() && g.uuid == n.gpus[j].uuid) {
          return bad(fmt::format("gpus[{}].uuid", i), fmt::format("same as gpus[{}]", j));
        }
      }
    }
  }
  return {};
}

std::vector<InventoryNode> inventoryOf(const std::vector<placement::Node>& nodes) {
  std::vector<InventoryNode> out;
  out.reserve(nodes.size());
  for (const auto& n : nodes) {
    InventoryNode in;
    in.name = n.name;
    in.cpu_milli = n.cpu_milli;
    in.memory_mib = n.memory_mib;
    for (int i = 0; i < n.gpus; ++i) {
      in.gpus.push_back({i, "", n.model, openbMemory(n.model), 0, -1, false});
    }
    out.push_back(std::move(in));
  }
  return out;
}

// --- Placer --------------------------------------------------------------------------------

Placer::Placer(std::vector<InventoryNode> nodes, placement::Policy policy, uint64_t seed)
    : nodes_(std::move(nodes)), policy_(policy), rng_(seed) {
  std::map<std::string, int> type_index;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const InventoryNode& n = nodes_[i];
    placement::Node shape{n.name, n.cpu_milli, n.memory_mib, static_cast<int>(n.gpus.size()),
                          n.gpus.empty() ? "" : n.gpus.front().model};
    states_.push_back(NodeState::of(shape));
    // Nodes alike in everything a score reads share a type (and memoised scores).
    const std::string key =
        fmt::format("{}|{}|{}|{}|{}", shape.model, shape.gpus, shape.cpu_milli, shape.memory_mib,
                    n.gpus.empty() ? 0 : n.gpus.front().memory_mib);
    types_.push_back(type_index.emplace(key, static_cast<int>(type_index.size())).first->second);
    shapes_.push_back(std::move(shape));
    shares_.emplace_back(n.gpus.size());
    cores_used_.emplace_back(n.gpus.size(), 0);
    index_[n.name] = static_cast<int>(i);
    if (!n.gpus.empty() &&
        std::find(models_.begin(), models_.end(), n.gpus.front().model) == models_.end()) {
      models_.push_back(n.gpus.front().model);
    }
  }
  idle_ = states_;
}

Result<std::unique_ptr<Placer>> Placer::create(std::vector<InventoryNode> nodes,
                                               placement::Policy policy, uint64_t seed) {
  PURSER_TRY(validateInventory(nodes));
  return std::unique_ptr<Placer>(new Placer(std::move(nodes), policy, seed));
}

const InventoryNode* Placer::node(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &nodes_[u(it->second)];
}

bool Placer::holds(const std::string& owner) const { return held_.count(owner) != 0; }

void Placer::apply(const Holding& h, int sign, const std::string& owner) {
  NodeState& s = states_[u(h.node)];
  s.cpu_left -= sign * h.cpu_milli;
  s.memory_left -= sign * h.memory_mib;
  s.pods += sign;
  for (const auto& [g, m] : h.gpus) {
    s.left[u(g)] -= sign * m;
    cores_used_[u(h.node)][u(g)] += sign * h.cores;
    auto& list = shares_[u(h.node)][u(g)];
    if (sign > 0) {
      list.push_back({owner, m});
    } else {
      for (auto it = list.begin(); it != list.end(); ++it) {
        if (it->owner == owner && it->milli == m) {
          list.erase(it);
          break;
        }
      }
    }
  }
}

void Placer::remember(const Pod& pod) {
  if (recent_.size() < kRecent) {
    recent_.push_back(pod);
  } else {
    recent_[recent_next_] = pod;
    recent_next_ = (recent_next_ + 1) % kRecent;
  }
  ++recent_changes_;
}

const std::vector<placement::TypicalPod>& Placer::typical() {
  // Recomputed as the mix drifts, not on every placement.
  if (recent_changes_ > 0 && (typical_.empty() || recent_changes_ >= 64)) {
    typical_ = placement::typicalPods(recent_);
    pressure_ = placement::modelPressure(typical_, shapes_);
    recent_changes_ = 0;
  }
  return typical_;
}

// One call of place(): what is free (the fleet now, or idle), changed only in a scratch overlay.
class Placer::Attempt {
 public:
  Attempt(Placer& p, bool idle) : p_(p), idle_(idle) {}

  const NodeState& state(int i) {
    auto it = overlay_.find(i);
    if (it != overlay_.end()) return it->second;
    return idle_ ? p_.idle_[u(i)] : p_.states_[u(i)];
  }
  NodeState& mutableState(int i) {
    auto it = overlay_.find(i);
    if (it != overlay_.end()) return it->second;
    return overlay_.emplace(i, state(i)).first->second;
  }
  void giveBack(const Holding& h) {
    NodeState& s = mutableState(h.node);
    s.cpu_left += h.cpu_milli;
    s.memory_left += h.memory_mib;
    --s.pods;
    for (const auto& [g, m] : h.gpus) s.left[u(g)] += m;
    std::vector<int>& cores = mutableCores(h.node);
    for (const auto& [g, m] : h.gpus) cores[u(g)] -= h.cores;
  }

  // Percent of each GPU's compute held, as this attempt sees it.
  const std::vector<int>& coresUsed(int i) {
    auto it = cores_overlay_.find(i);
    if (it != cores_overlay_.end()) return it->second;
    if (idle_) {
      idle_cores_.assign(p_.cores_used_[u(i)].size(), 0);
      return idle_cores_;
    }
    return p_.cores_used_[u(i)];
  }
  std::vector<int>& mutableCores(int i) {
    auto it = cores_overlay_.find(i);
    if (it != cores_overlay_.end()) return it->second;
    std::vector<int> base = coresUsed(i);
    return cores_overlay_.emplace(i, std::move(base)).first->second;
  }

  // A request, made ready: the GPU ask, and per node whether it is eligible and the pod's shape.
  struct Prepared {
    const PlacementRequest* request = nullptr;
    GpuRequest gpu;
    std::vector<int> eligible;  // nodes that match and could hold one pod when idle
    std::vector<Pod> pods;      // the pod's shapes (its share depends on the GPU's memory)
    std::vector<int> pod_of;    // per node: index into `pods`; -1 when not eligible
    int cores = 0;              // percent of each GPU's compute per pod (HAMi's gpucores)
    int labels = 0, taints = 0, model = 0, small = 0;  // why the others are not eligible
    // Scores already computed for this pod, by node type and state.
    std::unordered_map<uint64_t, int> scores;
    const Pod& pod(int node) const { return pods[u(pod_of[u(node)])]; }
  };

  Result<Prepared> prepare(const PlacementRequest& r) {
    Prepared p;
    p.request = &r;
    p.gpu = PURSER_TRY_VALUE(gpuRequestOf(r.per_pod));
    p.cores = p.gpu.whole() ? 0 : p.gpu.cores_percent;
    const int64_t cpu = amount(r.per_pod, "cpu");
    const int64_t memory =
        (amount(r.per_pod, "memory") + kMilliBytesPerMib - 1) / kMilliBytesPerMib;
    p.pod_of.assign(p_.nodes_.size(), -1);
    std::map<int64_t, int> by_gpu_memory;  // GPU memory -> index into p.pods, -1: too small
    std::unordered_map<std::string, bool> model_ok;
    for (size_t i = 0; i < p_.nodes_.size(); ++i) {
      const InventoryNode& n = p_.nodes_[i];
      if (!carriesLabels(n, r.node_selector)) {
        ++p.labels;
        continue;
      }
      bool taints_ok = true;
      for (const auto& t : n.taints) {
        if (t.effect != "NoSchedule" && t.effect != "NoExecute") continue;
        taints_ok = taints_ok && tolerates(r.tolerations, t);
      }
      if (!taints_ok) {
        ++p.taints;
        continue;
      }
      // The pod's shape depends only on the GPU's memory (for shares), its admissibility on the
      // GPU's model: both are worked out once per distinct value, not per node.
      // (One shape for pods without GPUs, whatever the node's GPUs.)
      const int64_t gm = p.gpu.count == 0 || n.gpus.empty() ? 0 : n.gpus.front().memory_mib;
      if (p.gpu.count > 0) {
        if (n.gpus.empty()) {
          ++p.model;
          continue;
        }
        const std::string& model = n.gpus.front().model;
        auto known = model_ok.find(model);
        if (known == model_ok.end()) {
          const bool ok = (r.use_gpu_types.empty() || typeMatches(model, r.use_gpu_types)) &&
                          !typeMatches(model, r.nouse_gpu_types);
          known = model_ok.emplace(model, ok).first;
        }
        if (!known->second) {
          ++p.model;
          continue;
        }
      }
      auto shape = by_gpu_memory.find(gm);
      if (shape == by_gpu_memory.end()) {
        Pod pod;
        pod.name = r.name;
        pod.cpu_milli = cpu;
        pod.memory_mib = memory;
        int index = static_cast<int>(p.pods.size());
        if (p.gpu.count > 0) {
          auto share = shareMilli(p.gpu, gm);
          if (share) {
            pod.num_gpu = p.gpu.count;
            pod.gpu_milli = *share;
          } else {
            index = -1;  // more memory than this GPU has
          }
        }
        if (index >= 0) p.pods.push_back(std::move(pod));
        shape = by_gpu_memory.emplace(gm, index).first;
      }
      if (shape->second < 0 ||
          !placement::feasible(p_.shapes_[i], p_.idle_[i], p.pods[u(shape->second)])) {
        ++p.small;
        continue;
      }
      p.eligible.push_back(static_cast<int>(i));
      p.pod_of[i] = shape->second;
    }
    return p;
  }

  struct Domain {
    std::vector<std::pair<int, uint64_t>> members;  // node, mask of its GPUs in the domain
  };

  // The eligible nodes grouped into domains at `level` ("" : one domain of all of them).
  std::vector<Domain> domains(const Prepared& p, const std::string& level) {
    const uint64_t all = ~uint64_t{0};
    std::vector<Domain> out;
    if (level.empty()) {
      Domain d;
      for (int i : p.eligible) d.members.emplace_back(i, all);
      out.push_back(std::move(d));
      return out;
    }
    if (level == "nvlink") {
      for (int i : p.eligible) {
        const InventoryNode& n = p_.nodes_[u(i)];
        std::map<std::pair<int, int>, uint64_t> masks;  // (domain, gpu when none) -> mask
        for (const auto& g : n.gpus) {
          const auto key =
              g.nvlink_domain >= 0 ? std::pair{g.nvlink_domain, -1} : std::pair{-1, g.index};
          masks[key] |= uint64_t{1} << g.index;
        }
        if (n.gpus.empty()) masks[{-1, -1}] = all;
        for (const auto& [key, mask] : masks) out.push_back({{{i, mask}}});
      }
      return out;
    }
    std::map<std::string, Domain> by;
    for (int i : p.eligible) {
      const InventoryNode& n = p_.nodes_[u(i)];
      std::string key;
      if (level == "node") {
        key = n.name;
      } else if (level == "rack") {
        key = n.rack;
      } else if (level == "block") {
        key = n.block;
      } else if (auto it = n.labels.find(level); it != n.labels.end()) {
        key = it->second;
      }
      if (key.empty()) continue;  // not in any domain at this level
      by[key].members.emplace_back(i, all);
    }
    for (auto& [k, d] : by) out.push_back(std::move(d));
    return out;
  }

  // Places every pod of `p` inside `d`; on failure the overlay is as it was.
  std::optional<std::vector<PodPlacement>> placeIn(Prepared& p, const Domain& d,
                                                   std::vector<Holding>& holdings) {
    const auto saved = overlay_;
    const auto saved_cores = cores_overlay_;
    const size_t held_before = holdings.size();
    std::vector<PodPlacement> out;
    const auto& typical = typicalFor(p);
    for (int64_t k = 0; k < p.request->count; ++k) {
      int best = -1, best_score = -1;
      uint64_t best_mask = 0;
      uint64_t ties = 0;
      NodeState scratch;
      for (const auto& [i, mask] : d.members) {
        const Pod& pod = p.pod(i);
        const NodeState& masked =
            mask == kAll && p.cores == 0 ? state(i) : (scratch = maskedState(i, mask, p.cores));
        if (!placement::feasible(p_.shapes_[u(i)], masked, pod)) continue;
        const int sc = scoreOf(p, i, masked, typical);
        if (sc > best_score) {
          best = i;
          best_score = sc;
          best_mask = mask;
          ties = 1;
        } else if (sc == best_score && placement::uniform(p_.rng_, ++ties) == 0) {
          best = i;
          best_mask = mask;
        }
      }
      if (best < 0) {
        overlay_ = saved;
        cores_overlay_ = saved_cores;
        holdings.resize(held_before);
        return std::nullopt;
      }
      const Pod& pod = p.pod(best);
      const NodeState masked = maskedState(best, best_mask, p.cores);
      std::vector<std::pair<int, int64_t>> gpus;
      if (pod.totalGpu() > 0 && pod.gpu_milli == placement::kMilliPerGpu) {
        placement::GpuTopology topo;
        std::vector<bool> free;
        for (const auto& g : p_.nodes_[u(best)].gpus) {
          topo.nvlink_domain.push_back(g.nvlink_domain);
          topo.numa.push_back(g.numa);
          free.push_back(masked.left[u(g.index)] == placement::kMilliPerGpu);
        }
        for (int g : placement::chooseGpuSet(topo, free, pod.num_gpu)) {
          gpus.emplace_back(g, placement::kMilliPerGpu);
        }
      } else if (pod.totalGpu() > 0) {
        gpus =
            placement::chooseGpus(p_.shapes_[u(best)], masked, pod, p_.policy_, typical, p_.rng_);
      }
      NodeState& s = mutableState(best);
      placement::place(s, pod, gpus);
      std::vector<int>& cores = mutableCores(best);
      for (const auto& [g, m] : gpus) cores[u(g)] += p.cores;
      Holding h{best, pod.cpu_milli, pod.memory_mib, gpus, p.cores};
      PodPlacement pp;
      pp.node = p_.nodes_[u(best)].name;
      for (const auto& [g, m] : gpus) pp.gpus.push_back(g);
      std::sort(pp.gpus.begin(), pp.gpus.end());
      pp.gpu_milli = pod.totalGpu() > 0 ? pod.gpu_milli : 0;
      holdings.push_back(std::move(h));
      out.push_back(std::move(pp));
    }
    return out;
  }

  // Places `p` at its topology request: the tightest domain at the level that holds every pod;
  // a preferred level widens, then gives up the request, when none does.
  std::optional<std::vector<PodPlacement>> placeSet(Prepared& p, std::vector<Holding>& holdings) {
    const TopologyRequest& t = p.request->topology;
    std::vector<std::string> levels;
    const std::string level = canonicalLevel(t.level);
    if (level.empty()) {
      levels = {""};
    } else {
      levels.push_back(level);
      if (!t.required) {
        const auto& b = builtinLevels();
        auto it = std::find(b.begin(), b.end(), level);
        if (it != b.end()) levels.insert(levels.end(), it + 1, b.end());
        levels.push_back("");
      }
    }
    for (const auto& l : levels) {
      std::vector<Domain> ds = domains(p, l);
      // Best fit: the domain with the least free GPU (then CPU) that could hold them all first.
      std::vector<std::tuple<int64_t, int64_t, size_t>> order;
      // What every pod needs at least (a share's thousandths differ with the GPU's memory).
      int64_t least_gpu = INT64_MAX;
      for (const Pod& pod : p.pods) least_gpu = std::min(least_gpu, pod.totalGpu());
      const int64_t cpu_per_pod = p.pods.empty() ? 0 : p.pods.front().cpu_milli;
      for (size_t k = 0; k < ds.size(); ++k) {
        int64_t gpu = 0, cpu = 0;
        NodeState scratch;
        for (const auto& [i, mask] : ds[k].members) {
          const NodeState& m =
              mask == kAll && p.cores == 0 ? state(i) : (scratch = maskedState(i, mask, p.cores));
          gpu += m.gpuLeft();
          cpu += m.cpu_left;
        }
        if (!p.pods.empty() &&
            (gpu < least_gpu * p.request->count || cpu < cpu_per_pod * p.request->count)) {
          continue;
        }
        order.emplace_back(gpu, cpu, k);
      }
      std::sort(order.begin(), order.end());
      for (const auto& [gpu, cpu, k] : order) {
        if (auto placed = placeIn(p, ds[k], holdings)) return placed;
      }
    }
    return std::nullopt;
  }

 private:
  static constexpr uint64_t kAll = ~uint64_t{0};

  // The policy's score, memoised by node type and state (the pod is the request's): on a large
  // fleet most nodes are alike, and the fragmentation-aware scores are the costly part.
  int scoreOf(Prepared& p, int i, const NodeState& s,
              const std::vector<placement::TypicalPod>& typical) {
    if (p_.policy_ == placement::Policy::kRandom) return 0;
    if (p_.policy_ == placement::Policy::kClustering) {
      return placement::score(p_.policy_, p_.shapes_[u(i)], s, p.pod(i), typical, p_.pressure_);
    }
    // A 64-bit mix of the key (type, pod shape, CPU, memory, GPU left): alike nodes collide by
    // design, different ones with odds near 2^-64.
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    const auto put = [&h](int64_t v) {
      h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h *= 0xff51afd7ed558ccdULL;
      h ^= h >> 33;
    };
    put(p_.types_[u(i)]);
    put(p.pod_of[u(i)]);
    put(s.cpu_left);
    put(s.memory_left);
    for (int64_t l : s.left) put(l);
    auto it = p.scores.find(h);
    if (it != p.scores.end()) return it->second;
    const int sc =
        placement::score(p_.policy_, p_.shapes_[u(i)], s, p.pod(i), typical, p_.pressure_);
    p.scores.emplace(h, sc);
    return sc;
  }

  // The node as a pod sees it: GPUs outside `mask`, or without `cores` percent of compute
  // free, have nothing left.
  NodeState maskedState(int i, uint64_t mask, int cores = 0) {
    NodeState s = state(i);
    const std::vector<int>& used = cores > 0 ? coresUsed(i) : idle_cores_;
    for (size_t g = 0; g < s.left.size(); ++g) {
      const bool outside = mask != ~uint64_t{0} && (mask >> g & 1) == 0;
      const bool busy = cores > 0 && g < used.size() && 100 - used[g] < cores;
      if (outside || busy) s.left[g] = 0;
    }
    return s;
  }

  const std::vector<placement::TypicalPod>& typicalFor(const Prepared& p) {
    if (!p_.typical().empty() || p.pods.empty()) return p_.typical();
    // Nothing placed yet: the pod at hand is the workload's only known shape.
    const Pod& pod = p.pods.front();
    own_ = {{pod.cpu_milli, pod.gpu_milli, pod.num_gpu, {}, 1.0}};
    return own_;
  }

  Placer& p_;
  bool idle_;
  std::unordered_map<int, NodeState> overlay_;
  std::unordered_map<int, std::vector<int>> cores_overlay_;
  std::vector<int> idle_cores_;  // scratch: an idle node's compute (all free)
  std::vector<placement::TypicalPod> own_;
};

PlacementResult Placer::place(const std::vector<PlacementRequest>& requests,
                              const std::vector<std::string>& ignoring) {
  PlacementResult result;
  Attempt now(*this, false);
  for (const auto& owner : ignoring) {
    auto it = held_.find(owner);
    if (it == held_.end()) continue;
    for (const auto& h : it->second) now.giveBack(h);
  }
  std::vector<Holding> holdings;
  for (const auto& r : requests) {
    if (r.count <= 0) {
      result.pod_sets.emplace_back();
      continue;
    }
    auto prepared = now.prepare(r);
    if (!prepared) {
      result.kind = PlacementResult::Kind::kNever;
      result.message =
          fmt::format("pod set \"{}\" can never be placed: {}", r.name, prepared.error().message);
      result.pod_sets.clear();
      return result;
    }
    auto placed = now.placeSet(*prepared, holdings);
    if (placed) {
      result.pod_sets.push_back(std::move(*placed));
      continue;
    }
    // Not now; and on an idle fleet?
    Attempt::Prepared& p = *prepared;
    std::string what =
        fmt::format("pod set \"{}\" ({} pod(s) of {})", r.name, r.count, describe(r));
    std::string within;
    if (!r.topology.level.empty()) {
      within = fmt::format(" within one {} ({})", canonicalLevel(r.topology.level),
                           r.topology.required ? "required" : "preferred");
    }
    Attempt idle(*this, true);
    std::vector<Holding> scratch;
    result.pod_sets.clear();
    if (p.eligible.empty()) {
      result.kind = PlacementResult::Kind::kNever;
      std::vector<std::string> whys;
      if (p.labels > 0) whys.push_back(fmt::format("{} lack its node labels", p.labels));
      if (p.taints > 0)
        whys.push_back(fmt::format("{} have taints it does not tolerate", p.taints));
      if (p.model > 0) whys.push_back(fmt::format("{} have no GPU of an allowed model", p.model));
      if (p.small > 0) whys.push_back(fmt::format("{} are too small for one pod", p.small));
      std::string list;
      for (size_t i = 0; i < whys.size(); ++i) list += (i == 0 ? "" : ", ") + whys[i];
      result.message =
          nodes_.empty()
              ? fmt::format("{} can never be placed: the fleet has no nodes", what)
              : fmt::format("{} can never be placed: of {} node(s), {}", what, nodes_.size(), list);
      return result;
    }
    // On an idle fleet, with the workload's earlier pod sets placed first (all or nothing).
    const size_t index = static_cast<size_t>(&r - requests.data());
    bool together = true;
    for (size_t k = 0; k < index && together; ++k) {
      if (requests[k].count <= 0) continue;
      auto earlier = idle.prepare(requests[k]);
      together = earlier && idle.placeSet(*earlier, scratch);
    }
    if (!together || !idle.placeSet(p, scratch)) {
      result.kind = PlacementResult::Kind::kNever;
      result.message = fmt::format(
          "{} can never be placed: {} node(s) could each hold one pod, but even an idle fleet "
          "cannot hold all of them together{}{}",
          what, p.eligible.size(), index > 0 ? " with the workload's other pod sets" : "", within);
      return result;
    }
    result.kind = PlacementResult::Kind::kNotNow;
    result.message = fmt::format(
        "{} does not fit in what is free now{}; {} node(s) could hold its pods when free", what,
        within, p.eligible.size());
    return result;
  }
  return result;
}

Result<void> Placer::take(const std::string& owner, const std::vector<PlacementRequest>& requests,
                          const std::vector<std::vector<PodPlacement>>& placements) {
  if (requests.size() != placements.size()) {
    return fail(invalidArgument(fmt::format("\"{}\": {} pod set(s) but {} placement(s)", owner,
                                            requests.size(), placements.size())));
  }
  if (held_.count(owner) != 0) {
    return fail(invalidArgument(fmt::format("\"{}\" already holds a placement", owner)));
  }
  std::vector<Holding> holdings;
  for (size_t r = 0; r < requests.size(); ++r) {
    const auto gpu = PURSER_TRY_VALUE(gpuRequestOf(requests[r].per_pod));
    for (const auto& pp : placements[r]) {
      auto it = index_.find(pp.node);
      if (it == index_.end()) {
        return fail(invalidArgument(fmt::format("\"{}\": no node named \"{}\"", owner, pp.node)));
      }
      const InventoryNode& n = nodes_[u(it->second)];
      Holding h{it->second,
                amount(requests[r].per_pod, "cpu"),
                (amount(requests[r].per_pod, "memory") + kMilliBytesPerMib - 1) / kMilliBytesPerMib,
                {},
                gpu.whole() ? 0 : gpu.cores_percent};
      if (static_cast<int>(pp.gpus.size()) != gpu.count) {
        return fail(invalidArgument(fmt::format("\"{}\": {} GPU(s) on node \"{}\", {} asked", owner,
                                                pp.gpus.size(), pp.node, gpu.count)));
      }
      for (int g : pp.gpus) {
        if (g < 0 || g >= static_cast<int>(n.gpus.size())) {
          return fail(
              invalidArgument(fmt::format("\"{}\": node \"{}\" has no GPU {}", owner, pp.node, g)));
        }
        h.gpus.emplace_back(g, pp.gpu_milli);
      }
      holdings.push_back(std::move(h));
    }
  }
  for (const auto& h : holdings) apply(h, +1, owner);
  bool over = false;
  for (const auto& h : holdings) {
    const NodeState& s = states_[u(h.node)];
    over = over || s.cpu_left < 0 || s.memory_left < 0;
    for (const auto& [g, m] : h.gpus) {
      over = over || s.left[u(g)] < 0 || cores_used_[u(h.node)][u(g)] > 100;
    }
  }
  if (over) {
    for (const auto& h : holdings) apply(h, -1, owner);
    return fail(Error(ErrorCode::kFailedPrecondition,
                      fmt::format("\"{}\": its placement is no longer free", owner)));
  }
  for (size_t r = 0; r < requests.size(); ++r) {
    // A request that may use only some of the fleet's GPU models (useGpuType, noUseGpuType) is
    // remembered with them: the fragmentation-aware policies weigh what such pods need.
    std::vector<std::string> allowed;
    for (const auto& m : models_) {
      if ((requests[r].use_gpu_types.empty() || typeMatches(m, requests[r].use_gpu_types)) &&
          !typeMatches(m, requests[r].nouse_gpu_types)) {
        allowed.push_back(m);
      }
    }
    if (allowed.size() == models_.size()) allowed.clear();
    for (const auto& pp : placements[r]) {
      Pod pod;
      pod.cpu_milli = amount(requests[r].per_pod, "cpu");
      pod.num_gpu = static_cast<int>(pp.gpus.size());
      pod.gpu_milli = pp.gpus.empty() ? 0 : pp.gpu_milli;
      if (pod.num_gpu > 0) pod.models = allowed;
      remember(pod);
    }
  }
  held_[owner] = std::move(holdings);
  return {};
}

bool Placer::free(const std::string& owner) {
  auto it = held_.find(owner);
  if (it == held_.end()) return false;
  for (const auto& h : it->second) apply(h, -1, owner);
  held_.erase(it);
  return true;
}

std::vector<Placer::NodeView> Placer::view() const {
  std::vector<NodeView> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    NodeView v;
    v.node = &nodes_[i];
    v.cpu_used_milli = nodes_[i].cpu_milli - states_[i].cpu_left;
    v.memory_used_mib = nodes_[i].memory_mib - states_[i].memory_left;
    v.pods = states_[i].pods;
    for (size_t g = 0; g < nodes_[i].gpus.size(); ++g) {
      v.gpus.push_back({&nodes_[i].gpus[g], placement::kMilliPerGpu - states_[i].left[g],
                        cores_used_[i][g], shares_[i][g]});
    }
    out.push_back(std::move(v));
  }
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> Placer::environment(
    const PodPlacement& pod, const Resources& per_pod) const {
  const InventoryNode* n = node(pod.node);
  if (n == nullptr) {
    return fail(Error(ErrorCode::kNotFound, fmt::format("no node named \"{}\"", pod.node)));
  }
  const GpuRequest request = PURSER_TRY_VALUE(gpuRequestOf(per_pod));
  std::vector<AssignedGpu> gpus;
  for (int g : pod.gpus) {
    if (g < 0 || g >= static_cast<int>(n->gpus.size())) {
      return fail(
          Error(ErrorCode::kNotFound, fmt::format("node \"{}\" has no GPU {}", pod.node, g)));
    }
    gpus.push_back({g, n->gpus[u(g)].uuid});
  }
  return executorEnv(request, gpus, n->gpus.empty() ? 0 : n->gpus.front().memory_mib);
}

// --- The admission engine's hook -------------------------------------------------------------

std::vector<PlacementRequest> placementRequests(const Workload& w,
                                                const std::vector<PodSetAssignment>& pod_sets,
                                                const std::vector<ResourceFlavor>& flavors) {
  std::vector<PlacementRequest> out;
  for (const auto& psa : pod_sets) {
    PlacementRequest r;
    r.name = psa.name;
    r.count = psa.count;
    for (const auto& ps : w.pod_sets) {
      if (ps.name != psa.name) continue;
      r.per_pod = ps.requests;
      r.tolerations = ps.tolerations;
      r.node_selector = ps.node_selector;
      r.topology = ps.topology;
      r.use_gpu_types = ps.use_gpu_types;
      r.nouse_gpu_types = ps.nouse_gpu_types;
    }
    std::set<std::string> used;
    for (const auto& [res, flavor] : psa.flavors) used.insert(flavor);
    for (const auto& f : flavors) {
      if (used.count(f.name) == 0) continue;
      for (const auto& [k, v] : f.node_labels) r.node_selector.emplace(k, v);
      r.tolerations.insert(r.tolerations.end(), f.tolerations.begin(), f.tolerations.end());
    }
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

class InventoryHook : public PlacementHook {
 public:
  InventoryHook(std::shared_ptr<Placer> placer, std::vector<ResourceFlavor> flavors)
      : placer_(std::move(placer)), flavors_(std::move(flavors)) {}

  Answer place(const Workload& w, const std::vector<PodSetAssignment>& pod_sets,
               const std::vector<std::string>& gone) override {
    PlacementResult r = placer_->place(placementRequests(w, pod_sets, flavors_), gone);
    Answer a;
    a.verdict = r.kind == PlacementResult::Kind::kPlaced  ? Verdict::kPlaced
                : r.kind == PlacementResult::Kind::kNever ? Verdict::kNever
                                                          : Verdict::kNotNow;
    a.message = std::move(r.message);
    a.pod_sets = std::move(r.pod_sets);
    return a;
  }

  bool take(const Workload& w) override {
    if (!w.admission) return false;
    std::vector<std::vector<PodPlacement>> placements;
    for (const auto& psa : w.admission->pod_sets) placements.push_back(psa.placements);
    placer_->free(w.name);
    return placer_->take(w.name, placementRequests(w, w.admission->pod_sets, flavors_), placements)
        .has_value();
  }

  void free(const std::string& workload) override { placer_->free(workload); }

 private:
  std::shared_ptr<Placer> placer_;
  std::vector<ResourceFlavor> flavors_;
};

}  // namespace

std::shared_ptr<PlacementHook> placementHook(std::shared_ptr<Placer> placer,
                                             std::vector<ResourceFlavor> flavors) {
  return std::make_shared<InventoryHook>(std::move(placer), std::move(flavors));
}

}  // namespace purser::fleet
