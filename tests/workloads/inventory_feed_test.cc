// InventoryFeed, the fleet service's nodes, on its own (no service, no executor): configured nodes
// first, executors' nodes after them, what is left out and why (logged once), a node that is no
// longer reported kept tainted while work is placed on it, when a read is due, and what counts as
// a change.
#include "workloads/inventory_feed.h"

#include <gtest/gtest.h>

#include <map>

namespace purser::workloads {
namespace {

fleet::InventoryNode node(const std::string& name, int gpus = 0) {
  fleet::InventoryNode n;
  n.name = name;
  n.cpu_milli = 32'000;
  n.memory_mib = 256 * 1024;
  for (int i = 0; i < gpus; ++i) n.gpus.push_back({i, "", "H100", 81'920, 0, -1, false});
  return n;
}

std::vector<std::string> names(const std::vector<fleet::InventoryNode>& nodes) {
  std::vector<std::string> out;
  for (const auto& n : nodes) out.push_back(n.name);
  return out;
}

// Executors by name: what each reports (none: it reports no nodes).
struct Reports {
  std::map<std::string, Result<std::vector<fleet::InventoryNode>>> by;
  NodesOf fn() {
    return
        [this](
            const std::string& name) -> std::optional<Result<std::vector<fleet::InventoryNode>>> {
          auto it = by.find(name);
          if (it == by.end()) return std::nullopt;
          return it->second;
        };
  }
};

TEST(InventoryFeedTest, ConfiguredNodesComeFirstThenEachExecutorsAndDuplicatesAreLeftOut) {
  InventoryFeed feed({node("gpu-1", 8)}, {"kubernetes", "slurm", "local"},
                     std::chrono::seconds(30));
  Reports r;
  r.by.emplace("kubernetes", std::vector<fleet::InventoryNode>{node("k-1", 4), node("gpu-1", 2)});
  fleet::InventoryNode bad = node("Not_A_DNS_Label");
  r.by.emplace("slurm", std::vector<fleet::InventoryNode>{bad, node("s-1", 4)});
  const auto nodes = feed.read(r.fn(), {}, {}, 1'000);
  EXPECT_EQ(names(nodes), (std::vector<std::string>{"gpu-1", "k-1", "s-1"}));
  EXPECT_EQ(nodes[0].gpus.size(), 8u) << "the configured node wins over a reported one";
  ASSERT_EQ(feed.warned().size(), 2u);  // the duplicate and the invalid node
  // Read again: the same problems are not logged again.
  feed.read(r.fn(), {}, {}, 2'000);
  EXPECT_EQ(feed.warned().size(), 2u);
  // An executor that cannot be read this time is logged and left out; the others stay.
  r.by.erase("kubernetes");
  r.by.emplace("kubernetes",
               Result<std::vector<fleet::InventoryNode>>(fail(unavailable("no API server"))));
  EXPECT_EQ(names(feed.read(r.fn(), {}, {}, 3'000)), (std::vector<std::string>{"gpu-1", "s-1"}));
  EXPECT_EQ(feed.warned().count("kubernetes: no API server"), 1u);
}

TEST(InventoryFeedTest, ANodeGoneWhileWorkIsPlacedOnItStaysTaintedUntilTheWorkIsGone) {
  InventoryFeed feed({}, {"kubernetes"}, std::chrono::seconds(30));
  Reports r;
  r.by.emplace("kubernetes", std::vector<fleet::InventoryNode>{node("k-1", 4), node("k-2", 4)});
  const auto before = feed.read(r.fn(), {}, {}, 0);
  ASSERT_EQ(before.size(), 2u);
  r.by.clear();
  r.by.emplace("kubernetes", std::vector<fleet::InventoryNode>{node("k-1", 4)});
  // k-2 holds admitted work: it stays, unschedulable, its GPUs given to no one else.
  const auto kept = feed.read(r.fn(), {"k-2"}, before, 30'000);
  ASSERT_EQ(names(kept), (std::vector<std::string>{"k-1", "k-2"}));
  ASSERT_EQ(kept[1].taints.size(), 1u);
  EXPECT_EQ(kept[1].taints[0].key, "node.kubernetes.io/unreachable");
  EXPECT_EQ(kept[1].taints[0].effect, "NoSchedule");
  EXPECT_FALSE(InventoryFeed::same(kept, before)) << "the taint is a change placement reads";
  // Read again while the work is still there: tainted once, not twice.
  const auto again = feed.read(r.fn(), {"k-2"}, kept, 60'000);
  EXPECT_TRUE(InventoryFeed::same(again, kept));
  // The work is gone: so is the node.
  EXPECT_EQ(names(feed.read(r.fn(), {}, again, 90'000)), (std::vector<std::string>{"k-1"}));
}

TEST(InventoryFeedTest, AReadIsDueEveryRefreshAndOnlyWhenExecutorsAreRead) {
  InventoryFeed fixed({node("gpu-1", 8)}, {}, std::chrono::seconds(30));
  EXPECT_FALSE(fixed.live());
  EXPECT_FALSE(fixed.due(1'000'000));
  InventoryFeed feed({}, {"kubernetes"}, std::chrono::seconds(30));
  EXPECT_TRUE(feed.live());
  Reports r;
  feed.read(r.fn(), {}, {}, 100'000);
  EXPECT_FALSE(feed.due(129'999));
  EXPECT_TRUE(feed.due(130'000));
}

TEST(InventoryFeedTest, SameComparesWhatPlacementReads) {
  const std::vector<fleet::InventoryNode> a = {node("n-1", 2)};
  std::vector<fleet::InventoryNode> b = a;
  EXPECT_TRUE(InventoryFeed::same(a, b));
  b[0].labels["zone"] = "b";
  EXPECT_FALSE(InventoryFeed::same(a, b));
  b = a;
  b[0].gpus[1].memory_mib = 40'960;
  EXPECT_FALSE(InventoryFeed::same(a, b));
  b = a;
  b[0].rack = "r-1";
  EXPECT_FALSE(InventoryFeed::same(a, b));
}

}  // namespace
}  // namespace purser::workloads
