// bench/placement: the Placer that `purser serve` admits through, on an inventory built from the
// openb node list (repeated to the size asked, eight-GPU nodes given two NVLink domains, 32
// nodes to a rack), filled with the openb default trace's pods in order until a pod fails.
//
//   placer_bench NODES.csv PODS.csv SIZE POLICY DECISIONS [gang]
//
// Each decision is one place() (all eligible nodes scored) and, when placed, one take(); the run
// stops after DECISIONS of them. With `gang`, every fourth request is instead a gang of four
// 2-GPU pods that must share a rack. Prints one JSON object: decisions, seconds, decisions per
// second, GPUs allocated at the end.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fleet/inventory.h"
#include "fleet_io/openb.h"

using namespace purser;
using namespace purser::fleet;

namespace {

std::string slurp(const char* path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

PlacementRequest requestOf(const placement::Pod& p) {
  PlacementRequest r;
  r.name = p.name;
  r.count = 1;
  r.per_pod["cpu"] = p.cpu_milli;
  r.per_pod["memory"] = p.memory_mib * 1024 * 1024 * 1000;
  if (p.num_gpu > 0) {
    r.per_pod["nvidia.com/gpu"] = p.num_gpu * 1000;
    if (p.gpu_milli < 1000) {
      r.per_pod["nvidia.com/gpumem-percentage"] =
          std::max<int64_t>(1, (p.gpu_milli + 9) / 10) * 1000;
    }
  }
  r.use_gpu_types = p.models;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: placer_bench NODES.csv PODS.csv SIZE POLICY DECISIONS [gang]\n");
    return 2;
  }
  auto nodes = placement::parseNodesCsv(slurp(argv[1]), argv[1]);
  if (!nodes) {
    std::fprintf(stderr, "%s\n", nodes.error().toString().c_str());
    return 1;
  }
  std::vector<std::string> models;
  for (const auto& n : *nodes) models.push_back(n.model);
  auto pods = placement::parsePodsCsv(slurp(argv[2]), argv[2], models);
  auto policy = placement::parsePolicy(argv[4]);
  if (!pods || !policy) {
    std::fprintf(stderr, "bad pods or policy\n");
    return 1;
  }
  const size_t size = std::stoul(argv[3]);
  const int64_t max_decisions = std::stoll(argv[5]);
  const bool gangs = argc > 6 && std::string(argv[6]) == "gang";
  std::vector<InventoryNode> base = inventoryOf(*nodes);
  std::vector<InventoryNode> inventory;
  int64_t gpus = 0;
  for (size_t i = 0; i < size; ++i) {
    InventoryNode n = base[i % base.size()];
    n.name = "node-" + std::to_string(i);
    n.rack = "rack-" + std::to_string(i / 32);
    if (n.gpus.size() == 8) {
      for (auto& g : n.gpus) g.nvlink_domain = g.index / 4;
    }
    gpus += static_cast<int64_t>(n.gpus.size());
    inventory.push_back(std::move(n));
  }
  auto placer = Placer::create(std::move(inventory), *policy, 42);
  if (!placer) {
    std::fprintf(stderr, "%s\n", placer.error().toString().c_str());
    return 1;
  }
  PlacementRequest gang;
  gang.name = "gang";
  gang.count = 4;
  gang.per_pod = {{"cpu", 8000}, {"nvidia.com/gpu", 2000}};
  gang.topology = {"rack", true};
  int64_t decisions = 0, placed = 0, allocated_milli = 0;
  const auto start = std::chrono::steady_clock::now();
  // The trace in order (again from the start if it runs out).
  for (size_t k = 0; decisions < max_decisions; ++k) {
    const placement::Pod& pod = (*pods)[k % pods->size()];
    const bool as_gang = gangs && k % 4 == 3;
    const PlacementRequest r = as_gang ? gang : requestOf(pod);
    const std::string owner = "w" + std::to_string(k);
    PlacementResult res = (*placer)->place({r});
    ++decisions;
    if (res.kind != PlacementResult::Kind::kPlaced) continue;
    if (!(*placer)->take(owner, {r}, res.pod_sets)) return 1;
    ++placed;
    for (const auto& pp : res.pod_sets[0]) {
      allocated_milli += pp.gpu_milli * static_cast<int64_t>(pp.gpus.size());
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "{\"nodes\": %zu, \"gpus\": %lld, \"policy\": \"%s\", \"gangs\": %s, \"decisions\": %lld, "
      "\"placed\": %lld, \"seconds\": %.3f, \"decisions_per_s\": %.0f, \"gpu_allocated_pct\": "
      "%.2f}\n",
      size, static_cast<long long>(gpus), argv[4], gangs ? "true" : "false",
      static_cast<long long>(decisions), static_cast<long long>(placed), seconds,
      static_cast<double>(decisions) / seconds,
      100.0 * static_cast<double>(allocated_milli) / static_cast<double>(gpus * 1000));
  return 0;
}
