// The engines' nodes as the fleet's inventory: a Kubernetes Node object and a line of Slurm's
// `scontrol show node -o`, including what a hostile or half-configured cluster reports.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "exec/kubernetes_executor.h"
#include "exec/slurm_executor.h"

namespace purser::exec {
namespace {

using nlohmann::json;

json kubeNode() {
  return json::parse(R"({
    "metadata": {"name": "gpu-7.example", "labels": {
      "kubernetes.io/hostname": "gpu-7", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
      "nvidia.com/gpu.memory": "81920", "purser.dev/rack": "r2", "purser.dev/block": "b1"}},
    "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
    "status": {"allocatable": {"cpu": "95500m", "memory": "1056508Mi", "nvidia.com/gpu": "8",
                               "pods": "110"}}})");
}

TEST(KubernetesNodeTest, ANodeBecomesAnInventoryNode) {
  auto n = inventoryNodeOf(kubeNode(), 0);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->name, "gpu-7.example");
  EXPECT_EQ(n->cpu_milli, 95500);
  EXPECT_EQ(n->memory_mib, 1056508);
  ASSERT_EQ(n->gpus.size(), 8u);
  EXPECT_EQ(n->gpus[7].index, 7);
  EXPECT_EQ(n->gpus[0].model, "NVIDIA-A100-SXM4-80GB");
  EXPECT_EQ(n->gpus[0].memory_mib, 81920);
  EXPECT_EQ(n->rack, "r2");
  EXPECT_EQ(n->block, "b1");
  ASSERT_EQ(n->taints.size(), 1u);
  EXPECT_EQ(n->taints[0].key, "nvidia.com/gpu");
  EXPECT_EQ(n->labels.at("kubernetes.io/hostname"), "gpu-7");
  EXPECT_TRUE(fleet::validateInventory({*n}));
}

TEST(KubernetesNodeTest, ACordonedNodeIsTaintedAsTheSchedulerSeesIt) {
  json node = kubeNode();
  node["spec"]["unschedulable"] = true;
  auto n = inventoryNodeOf(node, 0);
  ASSERT_TRUE(n);
  ASSERT_EQ(n->taints.size(), 2u);
  EXPECT_EQ(n->taints[1].key, "node.kubernetes.io/unschedulable");
  EXPECT_EQ(n->taints[1].effect, "NoSchedule");
}

TEST(KubernetesNodeTest, UnlabelledGpusTakeTheConfiguredMemoryOrAreRefused) {
  json node = kubeNode();
  node["metadata"]["labels"].erase("nvidia.com/gpu.memory");
  node["metadata"]["labels"].erase("nvidia.com/gpu.product");
  auto refused = inventoryNodeOf(node, 0);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("fleet.kubernetes.gpu_memory"), std::string::npos);
  auto n = inventoryNodeOf(node, 24576);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->gpus[0].model, "gpu");
  EXPECT_EQ(n->gpus[0].memory_mib, 24576);
  // A node without GPUs needs no GPU memory.
  node["status"]["allocatable"].erase("nvidia.com/gpu");
  auto cpu_only = inventoryNodeOf(node, 0);
  ASSERT_TRUE(cpu_only);
  EXPECT_TRUE(cpu_only->gpus.empty());
}

TEST(KubernetesNodeTest, HostileNodesAreRefusedWithTheirName) {
  EXPECT_FALSE(inventoryNodeOf(json::array(), 0));
  EXPECT_FALSE(inventoryNodeOf(json::object(), 0));  // no name
  for (const json& bad : {json("lots"), json("-4"), json(8), json("1e40")}) {
    json node = kubeNode();
    node["status"]["allocatable"]["nvidia.com/gpu"] = bad;
    auto n = inventoryNodeOf(node, 0);
    ASSERT_FALSE(n) << bad.dump();
    EXPECT_NE(n.error().message.find("gpu-7.example"), std::string::npos) << n.error().message;
  }
  json huge = kubeNode();
  huge["status"]["allocatable"]["nvidia.com/gpu"] = "100000000";
  EXPECT_FALSE(inventoryNodeOf(huge, 0));
  // Labels and taints of the wrong type are ignored, not fatal.
  json odd = kubeNode();
  odd["metadata"]["labels"]["x"] = 5;
  odd["spec"]["taints"] = json::array({7, {{"key", 3}}});
  auto n = inventoryNodeOf(odd, 0);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->labels.count("x"), 0u);
  EXPECT_TRUE(n->taints.empty());
}

constexpr const char* kSlurmLine =
    "NodeName=dgx-01 Arch=x86_64 CoresPerSocket=28 CPUAlloc=0 CPUEfctv=112 CPUTot=112 "
    "CPULoad=0.12 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8(S:0-1) "
    "NodeAddr=dgx-01 NodeHostName=dgx-01 Version=22.05.8 OS=Linux RealMemory=2000000 "
    "AllocMem=0 FreeMem=1900000 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 "
    "Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu,all BootTime=2026-11-30T10:00:00";

TEST(SlurmNodeTest, ALineOfScontrolBecomesAnInventoryNode) {
  auto n = inventoryNodeOfSlurm(kSlurmLine, 81559);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->name, "dgx-01");
  EXPECT_EQ(n->cpu_milli, 112000);
  EXPECT_EQ(n->memory_mib, 2000000);
  ASSERT_EQ(n->gpus.size(), 8u);
  EXPECT_EQ(n->gpus[0].model, "h100");
  EXPECT_EQ(n->gpus[0].memory_mib, 81559);
  EXPECT_EQ(n->labels.at("slurm.schedmd.com/partition"), "gpu");
  EXPECT_EQ(n->labels.at("purser.dev/executor"), "slurm");
  EXPECT_TRUE(n->taints.empty());
  EXPECT_TRUE(fleet::validateInventory({*n}));
}

TEST(SlurmNodeTest, DrainedAndDownNodesAreTaintedAndOtherGpuTypesLeftOut) {
  std::string line = kSlurmLine;
  line.replace(line.find("State=IDLE"), 10, "State=MIXED+DRAIN");
  line.replace(line.find("Gres=gpu:h100:8(S:0-1)"), 22, "Gres=gpu:h100:4(S:0),gpu:a100:2,shard:8");
  auto n = inventoryNodeOfSlurm(line, 81559);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->gpus.size(), 4u);
  ASSERT_EQ(n->taints.size(), 1u);
  EXPECT_EQ(n->taints[0].key, "node.kubernetes.io/unschedulable");
  auto down = inventoryNodeOfSlurm("NodeName=n2 CPUTot=4 RealMemory=100 Gres=gpu:2 State=DOWN*", 1);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->gpus.size(), 2u);
  EXPECT_EQ(down->gpus[0].model, "gpu");
  EXPECT_EQ(down->taints.size(), 1u);
  auto none = inventoryNodeOfSlurm("NodeName=login CPUTot=4 RealMemory=100 Gres=(null)", 0);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->gpus.empty());
}

TEST(SlurmNodeTest, HostileLinesAreRefused) {
  EXPECT_FALSE(inventoryNodeOfSlurm("", 1));
  EXPECT_FALSE(inventoryNodeOfSlurm("CPUTot=4", 1));
  EXPECT_FALSE(inventoryNodeOfSlurm("NodeName=x CPUTot=-4", 1));
  EXPECT_FALSE(inventoryNodeOfSlurm("NodeName=x CPUTot=99999999999999999999999", 1));
  EXPECT_FALSE(inventoryNodeOfSlurm("NodeName=x Gres=gpu:h100:lots", 1));
  EXPECT_FALSE(inventoryNodeOfSlurm("NodeName=x Gres=gpu:h100:999999", 1));
  auto no_memory = inventoryNodeOfSlurm("NodeName=x Gres=gpu:h100:8", 0);
  ASSERT_FALSE(no_memory);
  EXPECT_NE(no_memory.error().message.find("fleet.slurm.gpu_memory"), std::string::npos);
}

}  // namespace
}  // namespace purser::exec
