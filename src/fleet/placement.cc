#include "fleet/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace purser::fleet::placement {

namespace {

size_t u(int i) { return static_cast<size_t>(i); }

std::string tagOf(const Pod& pod) {
  return pod.sharing() ? std::string("share-gpu") : fmt::format("{}-gpu", pod.num_gpu);
}

// The GPUs with left >= need, by ascending left then index.
std::vector<int> fittingByLeft(const NodeState& s, int64_t need) {
  std::vector<int> out;
  for (size_t i = 0; i < s.left.size(); ++i) {
    if (s.left[i] >= need) out.push_back(static_cast<int>(i));
  }
  std::stable_sort(out.begin(), out.end(),
                   [&](int a, int b) { return s.left[u(a)] < s.left[u(b)]; });
  return out;
}

int truncate(double v) { return static_cast<int>(v); }

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// FGD's score of going from fragmentation `before` to `after`.
int fgdScore(double before, double after) {
  return truncate(sigmoid((before - after) / 1000.0) * 100.0);
}

// The CPU the typical GPU pods ask for per milli-GPU, weighted by frequency: what a node must
// keep per milli-GPU left for the typical workload to use its GPUs (0 without typical GPU pods).
double cpuPerMilliGpu(const std::vector<TypicalPod>& typical) {
  double cpu = 0, gpu = 0;
  for (const auto& t : typical) {
    if (t.num_gpu == 0 || t.gpu_milli == 0) continue;
    cpu += t.freq * static_cast<double>(t.cpu_milli);
    gpu += t.freq * static_cast<double>(t.gpu_milli * t.num_gpu);
  }
  return gpu > 0 ? cpu / gpu : 0;
}

// The milli-GPU that `cpu_left` cannot feed at `cpu_per_milli`: GPU capacity the typical
// workload would leave stranded on the node for lack of CPU.
double cpuStranded(double gpu_left, double cpu_left, double cpu_per_milli) {
  if (cpu_per_milli <= 0) return 0;
  return std::max(0.0, gpu_left - cpu_left / cpu_per_milli);
}

// How much more GPU capacity is stranded for lack of CPU once `pod` is on the node (whichever
// GPUs it takes).
double cpuStrandedGrowth(const NodeState& s, const Pod& pod,
                         const std::vector<TypicalPod>& typical) {
  const double r = cpuPerMilliGpu(typical);
  const double L = static_cast<double>(s.gpuLeft()), cpu = static_cast<double>(s.cpu_left);
  return cpuStranded(L - static_cast<double>(pod.totalGpu()),
                     cpu - static_cast<double>(pod.cpu_milli), r) -
         cpuStranded(L, cpu, r);
}

// The demand of model-restricted pods that `pod` displaces on the node: the milli-GPU it takes
// times the pressure on the node's model (at most 1: a GPU taken displaces at most itself).
double displacedDemand(const Node& node, const Pod& pod, const ModelPressure& pressure) {
  if (pod.totalGpu() == 0) return 0;
  const auto it = pressure.find(node.model);
  if (it == pressure.end()) return 0;
  return std::min(1.0, it->second) * static_cast<double>(pod.totalGpu());
}

}  // namespace

NodeState NodeState::of(const Node& node) {
  NodeState s;
  s.cpu_left = node.cpu_milli;
  s.memory_left = node.memory_mib;
  s.left.assign(u(node.gpus), kMilliPerGpu);
  return s;
}

int64_t NodeState::gpuLeft() const {
  int64_t l = 0;
  for (int64_t v : left) l += v;
  return l;
}

Result<Policy> parsePolicy(const std::string& name) {
  static const std::pair<const char*, Policy> kPolicies[] = {
      {"random", Policy::kRandom},         {"dotprod", Policy::kDotProd},
      {"clustering", Policy::kClustering}, {"packing", Policy::kPacking},
      {"best_fit", Policy::kBestFit},      {"fgd", Policy::kFgd},
      {"binpack", Policy::kBinpack},       {"spread", Policy::kSpread},
      {"default", Policy::kDefault}};
  for (const auto& [n, p] : kPolicies) {
    if (name == n) return p;
  }
  return fail(invalidArgument(fmt::format(
      "unknown placement policy \"{}\"; expected default, binpack, spread, best_fit, fgd, "
      "packing, clustering, dotprod or random",
      name)));
}

const char* policyName(Policy p) {
  switch (p) {
    case Policy::kRandom:
      return "random";
    case Policy::kDotProd:
      return "dotprod";
    case Policy::kClustering:
      return "clustering";
    case Policy::kPacking:
      return "packing";
    case Policy::kBestFit:
      return "best_fit";
    case Policy::kFgd:
      return "fgd";
    case Policy::kDefault:
      return "default";
    case Policy::kBinpack:
      return "binpack";
    case Policy::kSpread:
      return "spread";
  }
  return "?";
}

std::vector<TypicalPod> typicalPods(const std::vector<Pod>& pods) {
  using Key = std::tuple<int64_t, int64_t, int, std::vector<std::string>>;
  std::map<Key, int64_t> count;
  for (const auto& p : pods) ++count[Key{p.cpu_milli, p.gpu_milli, p.num_gpu, p.models}];
  std::vector<std::pair<Key, int64_t>> sorted(count.begin(), count.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return a.first > b.first;  // ties: by the fields, descending
  });
  const double wanted = 0.95 * static_cast<double>(pods.size());
  std::vector<TypicalPod> out;
  int64_t cumulative = 0;
  for (const auto& [key, n] : sorted) {
    if (static_cast<double>(cumulative) >= wanted) break;
    cumulative += n;
    out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key),
                   static_cast<double>(n)});
  }
  for (auto& t : out) t.freq /= static_cast<double>(cumulative);
  return out;
}

ModelPressure modelPressure(const std::vector<TypicalPod>& typical,
                            const std::vector<Node>& nodes) {
  std::map<std::string, double> capacity;
  double total_capacity = 0;
  for (const auto& n : nodes) {
    if (n.gpus <= 0) continue;
    capacity[n.model] += static_cast<double>(n.gpus) * kMilliPerGpu;
    total_capacity += static_cast<double>(n.gpus) * kMilliPerGpu;
  }
  double demand = 0;
  for (const auto& t : typical) demand += t.freq * static_cast<double>(t.gpu_milli * t.num_gpu);
  ModelPressure out;
  if (total_capacity <= 0 || demand <= 0) return out;
  for (const auto& t : typical) {
    if (t.models.empty() || t.num_gpu == 0 || t.gpu_milli == 0) continue;
    // A constraint may name a model twice; and models the fleet lacks hold nothing.
    std::vector<std::string> allowed = t.models;
    std::sort(allowed.begin(), allowed.end());
    allowed.erase(std::unique(allowed.begin(), allowed.end()), allowed.end());
    double share = 0;
    for (const auto& m : allowed) {
      const auto it = capacity.find(m);
      if (it != capacity.end()) share += it->second / total_capacity;
    }
    if (share <= 0) continue;
    const double claim = t.freq * static_cast<double>(t.gpu_milli * t.num_gpu) / demand / share;
    for (const auto& m : allowed) {
      if (capacity.count(m) != 0) out[m] += claim;
    }
  }
  return out;
}

double fragmentation(const Node& node, const NodeState& s, const std::vector<TypicalPod>& typical) {
  const double L = static_cast<double>(s.gpuLeft());
  if (L == 0) return 0;
  double frag = 0;
  for (const auto& t : typical) {
    if (t.num_gpu == 0 || t.gpu_milli == 0) {
      // CPU-only (xl_satisfied or xr_lack_cpu): a pod that uses no GPU leaves all of them
      // unused, so the paper counts them as fragmented for it either way.
      frag += t.freq * L;
      continue;
    }
    if (!t.models.empty() &&
        std::find(t.models.begin(), t.models.end(), node.model) == t.models.end()) {
      frag += t.freq * L;  // no_access
      continue;
    }
    int fitting = 0;
    double below = 0;
    for (int64_t l : s.left) {
      if (l >= t.gpu_milli) {
        ++fitting;
      } else {
        below += static_cast<double>(l);
      }
    }
    if (fitting >= t.num_gpu) {
      frag += t.freq * (s.cpu_left >= t.cpu_milli ? below : L);  // q2 part, or q4_lack_cpu
    } else {
      frag += t.freq * L;  // q2_lack_gpu or q1_lack_both
    }
  }
  return frag;
}

bool modelAllowed(const Node& node, const Pod& pod) {
  return pod.models.empty() ||
         std::find(pod.models.begin(), pod.models.end(), node.model) != pod.models.end();
}

bool feasible(const Node& node, const NodeState& s, const Pod& pod) {
  if (s.pods >= kMaxPodsPerNode) return false;
  if (s.cpu_left < pod.cpu_milli || s.memory_left < pod.memory_mib) return false;
  if (pod.totalGpu() == 0) return true;
  if (node.gpus == 0 || !modelAllowed(node, pod)) return false;
  int fitting = 0;
  for (int64_t l : s.left) fitting += l >= pod.gpu_milli ? 1 : 0;
  return fitting >= pod.num_gpu;
}

namespace {

// The state after placing `pod` on the given GPUs.
NodeState after(const NodeState& s, const Pod& pod, const std::vector<std::pair<int, int64_t>>& g) {
  NodeState a = s;
  a.cpu_left -= pod.cpu_milli;
  a.memory_left -= pod.memory_mib;
  for (const auto& [i, m] : g) a.left[u(i)] -= m;
  return a;
}

// The default GPU choice: for a share, the fitting GPU with the least left (lowest index on
// ties); for whole GPUs, the lowest-index fully free ones.
std::vector<std::pair<int, int64_t>> defaultGpus(const NodeState& s, const Pod& pod) {
  std::vector<std::pair<int, int64_t>> out;
  if (pod.totalGpu() == 0) return out;
  if (pod.gpu_milli < kMilliPerGpu) {
    const auto fit = fittingByLeft(s, pod.gpu_milli);
    for (int i = 0; i < pod.num_gpu && i < static_cast<int>(fit.size()); ++i) {
      out.emplace_back(fit[u(i)], pod.gpu_milli);
    }
    return out;
  }
  for (size_t i = 0; i < s.left.size() && static_cast<int>(out.size()) < pod.num_gpu; ++i) {
    if (s.left[i] >= kMilliPerGpu) out.emplace_back(static_cast<int>(i), kMilliPerGpu);
  }
  return out;
}

}  // namespace

std::vector<std::pair<int, int64_t>> chooseGpus(const Node& node, const NodeState& s,
                                                const Pod& pod, Policy policy,
                                                const std::vector<TypicalPod>& typical,
                                                std::mt19937_64& rng) {
  if (pod.totalGpu() == 0) return {};
  if (pod.sharing()) {
    std::vector<int> fit;
    for (size_t i = 0; i < s.left.size(); ++i) {
      if (s.left[i] >= pod.gpu_milli) fit.push_back(static_cast<int>(i));
    }
    if (fit.empty()) return {};
    if (policy == Policy::kRandom) {
      return {{fit[uniform(rng, fit.size())], pod.gpu_milli}};
    }
    if (policy == Policy::kFgd || policy == Policy::kDefault) {
      const double before = fragmentation(node, s, typical);
      int best = -1, best_score = -1;
      for (int i : fit) {
        const int sc =
            fgdScore(before, fragmentation(node, after(s, pod, {{i, pod.gpu_milli}}), typical));
        if (sc > best_score) {
          best = i;
          best_score = sc;
        }
      }
      return {{best, pod.gpu_milli}};
    }
  }
  return defaultGpus(s, pod);
}

int score(Policy policy, const Node& node, const NodeState& s, const Pod& pod,
          const std::vector<TypicalPod>& typical, const ModelPressure& pressure) {
  const int64_t L = s.gpuLeft();
  switch (policy) {
    case Policy::kRandom:
      return 0;
    case Policy::kBinpack:
    case Policy::kSpread: {
      // How full the node is after placing: GPU for GPU pods, CPU for the others.
      double full = 0;
      if (pod.totalGpu() > 0 && node.gpus > 0) {
        full = 1.0 - static_cast<double>(L - pod.totalGpu()) /
                         static_cast<double>(node.gpus * kMilliPerGpu);
      } else if (node.cpu_milli > 0) {
        full = 1.0 - static_cast<double>(s.cpu_left - pod.cpu_milli) /
                         static_cast<double>(node.cpu_milli);
      }
      const int v = truncate(full * 100.0);
      return policy == Policy::kBinpack ? v : 100 - v;
    }
    case Policy::kBestFit: {
      const double v = static_cast<double>(s.cpu_left - pod.cpu_milli) / 128000.0 * 0.5 +
                       static_cast<double>(L - pod.totalGpu()) / 8000.0 * 0.5;
      return truncate((1.0 - v) * 100.0);
    }
    case Policy::kPacking: {
      if (pod.totalGpu() == 0) return 0;
      const int F = static_cast<int>(s.left.size());
      bool all_free = F > 0;
      for (int64_t l : s.left) all_free = all_free && l == kMilliPerGpu;
      if (all_free) return std::max(33 - F, F);
      const auto fit = fittingByLeft(s, pod.gpu_milli);
      int u_free = 0;
      int64_t sum = 0;
      for (int i = 0; i < pod.num_gpu && i < static_cast<int>(fit.size()); ++i) {
        const int64_t l = s.left[u(fit[u(i)])];
        if (l == kMilliPerGpu) ++u_free;
        sum += l * 100 / kMilliPerGpu;
      }
      if (u_free > 0) return std::max(50 - u_free, 33);
      return std::max(static_cast<int>(100 - sum / 10), 50);
    }
    case Policy::kClustering: {
      if (pod.totalGpu() == 0) return 0;
      const int base = static_cast<int>(25 * (8000 - L) / 8000);
      const std::string tag = tagOf(pod);
      const bool present = std::find(s.tags.begin(), s.tags.end(), tag) != s.tags.end();
      if (present) return s.tags.size() == 1 ? base + 75 : base + 50;
      return s.tags.empty() ? base + 25 : base;
    }
    case Policy::kDotProd: {
      if (s.cpu_left < pod.cpu_milli) return 0;
      const double d =
          (static_cast<double>(s.cpu_left) / 128000.0) *
              (static_cast<double>(pod.cpu_milli) / 128000.0) +
          (static_cast<double>(L) / 8000.0) * (static_cast<double>(pod.totalGpu()) / 8000.0);
      return truncate(100.0 * (1.0 - d / 2.0));
    }
    case Policy::kFgd:
    case Policy::kDefault: {
      // kDefault: FGD's score, with the growth of the GPU capacity stranded for lack of CPU, and
      // the restricted pods' demand displaced, counted as fragmentation too. Neither depends on
      // which GPU a share takes, so the GPU choice stays FGD's.
      const double before = fragmentation(node, s, typical);
      const double added = policy == Policy::kDefault ? cpuStrandedGrowth(s, pod, typical) +
                                                            displacedDemand(node, pod, pressure)
                                                      : 0.0;
      if (pod.sharing()) {
        int best = 0;
        for (size_t i = 0; i < s.left.size(); ++i) {
          if (s.left[i] < pod.gpu_milli) continue;
          best = std::max(
              best,
              fgdScore(before,
                       fragmentation(node, after(s, pod, {{static_cast<int>(i), pod.gpu_milli}}),
                                     typical) +
                           added));
        }
        return best;
      }
      std::vector<std::pair<int, int64_t>> g;
      if (pod.totalGpu() > 0) {
        const auto fit = fittingByLeft(s, pod.gpu_milli);
        for (int i = 0; i < pod.num_gpu && i < static_cast<int>(fit.size()); ++i) {
          g.emplace_back(fit[u(i)], pod.gpu_milli);
        }
      }
      return fgdScore(before, fragmentation(node, after(s, pod, g), typical) + added);
    }
  }
  return 0;
}

void place(NodeState& s, const Pod& pod, const std::vector<std::pair<int, int64_t>>& gpus) {
  s.cpu_left -= pod.cpu_milli;
  s.memory_left -= pod.memory_mib;
  for (const auto& [i, m] : gpus) s.left[u(i)] -= m;
  ++s.pods;
  if (pod.totalGpu() > 0) {
    const std::string tag = tagOf(pod);
    if (std::find(s.tags.begin(), s.tags.end(), tag) == s.tags.end()) s.tags.push_back(tag);
  }
}

std::vector<int> chooseGpuSet(const GpuTopology& topology, const std::vector<bool>& free, int k) {
  const int n = static_cast<int>(free.size());
  const auto domainOf = [&](int i) {
    return u(i) < topology.nvlink_domain.size() ? topology.nvlink_domain[u(i)] : -1;
  };
  const auto numaOf = [&](int i) { return u(i) < topology.numa.size() ? topology.numa[u(i)] : 0; };
  // Free GPUs per NVLink domain (GPUs without NVLink are each their own domain).
  std::map<std::pair<int, int>, std::vector<int>> domains;
  for (int i = 0; i < n; ++i) {
    if (!free[u(i)]) continue;
    const int d = domainOf(i);
    domains[d >= 0 ? std::pair{d, -1} : std::pair{-1, i}].push_back(i);
  }
  int total = 0;
  for (const auto& [d, gpus] : domains) total += static_cast<int>(gpus.size());
  if (k <= 0 || total < k) return {};
  // One domain that holds them all: the tightest, then the lowest first index.
  const std::vector<int>* best = nullptr;
  for (const auto& [d, gpus] : domains) {
    if (static_cast<int>(gpus.size()) < k) continue;
    if (best == nullptr || gpus.size() < best->size() ||
        (gpus.size() == best->size() && gpus.front() < best->front())) {
      best = &gpus;
    }
  }
  if (best != nullptr) return {best->begin(), best->begin() + k};
  // Across domains: the fullest domains first (fewest domains), those on the NUMA node with the
  // most free GPUs first, then by index.
  std::map<int, int> free_on_numa;
  for (const auto& [d, gpus] : domains) {
    for (int i : gpus) ++free_on_numa[numaOf(i)];
  }
  std::vector<const std::vector<int>*> order;
  for (const auto& [d, gpus] : domains) order.push_back(&gpus);
  std::stable_sort(order.begin(), order.end(), [&](const auto* a, const auto* b) {
    if (a->size() != b->size()) return a->size() > b->size();
    const int na = free_on_numa[numaOf(a->front())], nb = free_on_numa[numaOf(b->front())];
    if (na != nb) return na > nb;
    return a->front() < b->front();
  });
  std::vector<int> out;
  for (const auto* gpus : order) {
    for (int i : *gpus) {
      if (static_cast<int>(out.size()) == k) break;
      out.push_back(i);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t uniform(std::mt19937_64& rng, uint64_t n) {
  // Lemire's method: unbiased without division in the common case.
  unsigned __int128 m = static_cast<unsigned __int128>(rng()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = -n % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(rng()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace purser::fleet::placement
