// InventoryFeed: the nodes and GPUs workloads are placed on — a part of FleetService
// (fleet_service.h) that runs on its thread, testable without one.
//
// The inventory is the configured nodes, then the nodes each executor named in
// fleet.inventory_from reports (Kubernetes' Nodes, Slurm's nodes), read at the start and again
// every `refresh`:
//   - a node named like one before it is left out, and so is a node the inventory's rules refuse
//     (each problem logged once, not at every read);
//   - a node no longer reported while admitted work is placed on it stays, tainted
//     node.kubernetes.io/unreachable:NoSchedule, until that work is gone — its GPUs are not
//     given to anyone else meanwhile.
// The service rebuilds its engine only when a read changed something placement reads (same()).
//
// Not thread-safe: the fleet service's thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "fleet/inventory.h"

namespace purser::workloads {

// What one executor reports of its nodes: nullopt when it reports none (it has no such notion),
// an error when it could not be read this time.
using NodesOf =
    std::function<std::optional<Result<std::vector<fleet::InventoryNode>>>(const std::string&)>;

class InventoryFeed {
 public:
  InventoryFeed(std::vector<fleet::InventoryNode> configured, std::vector<std::string> from,
                Duration refresh)
      : configured_(std::move(configured)), from_(std::move(from)), refresh_(refresh) {}

  // Whether executors are read at all (fleet.inventory_from names some).
  bool live() const { return !from_.empty(); }
  // Whether the next read is due at `now_ms`.
  bool due(int64_t now_ms) const;

  // The inventory now: the configured nodes, each executor's (through `nodes_of`), and the nodes
  // of `current` that `placed` names (nodes admitted work is placed on) but no one reports any
  // more, tainted unreachable. Remembers `now_ms` as the last read.
  std::vector<fleet::InventoryNode> read(const NodesOf& nodes_of,
                                         const std::set<std::string>& placed,
                                         const std::vector<fleet::InventoryNode>& current,
                                         int64_t now_ms);

  // Whether two inventories are the same for placement (names, sizes, labels, taints, GPUs, in
  // order).
  static bool same(const std::vector<fleet::InventoryNode>& a,
                   const std::vector<fleet::InventoryNode>& b);

  // The problems logged so far (each once), for tests.
  const std::set<std::string>& warned() const { return warned_; }

 private:
  const std::vector<fleet::InventoryNode> configured_;
  const std::vector<std::string> from_;
  const Duration refresh_;
  int64_t read_ms_ = 0;
  std::set<std::string> warned_;  // problems with the inventory already logged
};

}  // namespace purser::workloads
