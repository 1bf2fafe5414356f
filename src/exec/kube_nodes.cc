// A Kubernetes Node as an inventory node: see inventoryNodeOf in kubernetes_executor.h.
#include "exec/kubernetes_executor.h"

#include <fmt/format.h>

#include "common/quantity.h"

namespace purser::exec {

using nlohmann::json;

namespace {

// Resource `name` of a Node's allocatable, in thousandths (`milli`) or whole units; 0 when it
// has none.
Result<int64_t> quantityOf(const json& resources, const char* name, bool milli) {
  if (!resources.is_object() || !resources.contains(name)) return int64_t{0};
  const json& v = resources[name];
  if (!v.is_string()) {
    return fail(invalidArgument(fmt::format("allocatable {} is not a quantity", name)));
  }
  auto q = Quantity::parse(v.get<std::string>());
  if (!q || q->isNegative()) {
    return fail(invalidArgument(
        fmt::format("allocatable {} \"{}\" is not a quantity", name, v.get<std::string>())));
  }
  return milli ? q->milliValue() : q->value();
}

}  // namespace

Result<fleet::InventoryNode> inventoryNodeOf(const json& node, int64_t gpu_memory_mib) {
  if (!node.is_object()) return fail(invalidArgument("a Node is an object"));
  const json meta = node.value("metadata", json::object());
  const json spec = node.value("spec", json::object());
  const json status = node.value("status", json::object());
  fleet::InventoryNode n;
  n.name = meta.is_object() ? meta.value("name", "") : "";
  if (n.name.empty()) return fail(invalidArgument("a Node without a name"));
  const auto where = [&](const Error& e) {
    return invalidArgument(fmt::format("Node {}: {}", n.name, e.message));
  };
  if (meta.contains("labels") && meta["labels"].is_object()) {
    for (const auto& [k, v] : meta["labels"].items()) {
      if (v.is_string()) n.labels[k] = v.get<std::string>();
    }
  }
  if (spec.is_object()) {
    for (const auto& t : spec.value("taints", json::array())) {
      if (!t.is_object() || !t.value("key", json()).is_string()) continue;
      n.taints.push_back({t.value("key", ""), t.value("value", ""), t.value("effect", "")});
    }
    if (spec.value("unschedulable", false)) {
      n.taints.push_back({"node.kubernetes.io/unschedulable", "", "NoSchedule"});
    }
  }
  const json allocatable = status.is_object() ? status.value("allocatable", json()) : json();
  auto cpu = quantityOf(allocatable, "cpu", true);
  auto memory = quantityOf(allocatable, "memory", false);
  auto gpus = quantityOf(allocatable, "nvidia.com/gpu", false);
  if (!cpu) return fail(where(cpu.error()));
  if (!memory) return fail(where(memory.error()));
  if (!gpus) return fail(where(gpus.error()));
  n.cpu_milli = *cpu;
  n.memory_mib = *memory / (1024 * 1024);
  if (*gpus > 4096) return fail(invalidArgument(fmt::format("Node {}: {} GPUs", n.name, *gpus)));
  const auto label = [&](const char* key) {
    auto it = n.labels.find(key);
    return it == n.labels.end() ? std::string() : it->second;
  };
  int64_t gpu_mib = gpu_memory_mib;
  if (const std::string m = label("nvidia.com/gpu.memory"); !m.empty()) {
    if (auto q = Quantity::parse(m)) {
      if (auto v = q->value(); v && *v > 0) gpu_mib = *v;
    }
  }
  if (*gpus > 0 && gpu_mib <= 0) {
    return fail(invalidArgument(
        fmt::format("Node {}: its GPUs' memory is unknown (no nvidia.com/gpu.memory label); set "
                    "fleet.kubernetes.gpu_memory",
                    n.name)));
  }
  for (int64_t i = 0; i < *gpus; ++i) {
    fleet::GpuDevice g;
    g.index = static_cast<int>(i);
    g.model = label("nvidia.com/gpu.product");
    if (g.model.empty()) g.model = "gpu";
    g.memory_mib = gpu_mib;
    n.gpus.push_back(std::move(g));
  }
  n.rack = label("purser.dev/rack");
  n.block = label("purser.dev/block");
  return n;
}

}  // namespace purser::exec
