// InventoryFeed: see inventory_feed.h.
#include "workloads/inventory_feed.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace purser::workloads {

namespace {

constexpr const char* kUnreachable = "node.kubernetes.io/unreachable";

// Everything placement reads of a node, to tell whether an inventory changed.
std::string inventoryKey(const std::vector<fleet::InventoryNode>& nodes) {
  std::string key;
  for (const auto& n : nodes) {
    key += fmt::format("{}|{}|{}|{}|{}|", n.name, n.cpu_milli, n.memory_mib, n.rack, n.block);
    for (const auto& [k, v] : n.labels) key += fmt::format("{}={};", k, v);
    for (const auto& t : n.taints) key += fmt::format("{}={}:{};", t.key, t.value, t.effect);
    for (const auto& g : n.gpus) {
      key += fmt::format("[{} {} {} {} {} {} {}]", g.index, g.uuid, g.model, g.memory_mib, g.numa,
                         g.nvlink_domain, g.mig_capable);
    }
    key += '\n';
  }
  return key;
}

}  // namespace

bool InventoryFeed::due(int64_t now_ms) const {
  return live() && now_ms - read_ms_ >=
                       std::chrono::duration_cast<std::chrono::milliseconds>(refresh_).count();
}

bool InventoryFeed::same(const std::vector<fleet::InventoryNode>& a,
                         const std::vector<fleet::InventoryNode>& b) {
  return inventoryKey(a) == inventoryKey(b);
}

std::vector<fleet::InventoryNode> InventoryFeed::read(
    const NodesOf& nodes_of, const std::set<std::string>& placed,
    const std::vector<fleet::InventoryNode>& current, int64_t now_ms) {
  read_ms_ = now_ms;
  std::vector<fleet::InventoryNode> out = configured_;
  std::set<std::string> names;
  for (const auto& n : out) names.insert(n.name);
  const auto warnOnce = [&](const std::string& what) {
    if (warned_.insert(what).second) spdlog::warn("fleet: inventory: {}", what);
  };
  for (const auto& name : from_) {
    auto reported = nodes_of ? nodes_of(name) : std::nullopt;
    if (!reported) continue;
    if (!*reported) {
      warnOnce(fmt::format("{}: {}", name, reported->error().message));
      continue;
    }
    for (auto& n : **reported) {
      if (auto valid = fleet::validateInventory({n}); !valid) {
        warnOnce(fmt::format("{} node left out: {}", name, valid.error().message));
        continue;
      }
      if (!names.insert(n.name).second) {
        warnOnce(fmt::format("{} node \"{}\" left out: a node of that name is listed before it",
                             name, n.name));
        continue;
      }
      out.push_back(std::move(n));
    }
  }
  // Nodes that admitted work is placed on stay until it is gone.
  for (const auto& n : current) {
    if (placed.count(n.name) == 0 || names.count(n.name) != 0) continue;
    fleet::InventoryNode kept = n;
    const bool tainted = std::any_of(kept.taints.begin(), kept.taints.end(),
                                     [](const auto& t) { return t.key == kUnreachable; });
    if (!tainted) kept.taints.push_back({kUnreachable, "", "NoSchedule"});
    names.insert(kept.name);
    out.push_back(std::move(kept));
  }
  return out;
}

}  // namespace purser::workloads
