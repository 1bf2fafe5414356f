// Kueue's queue objects as tests write them: one ResourceFlavor, one ClusterQueue covering the
// resources of its quota in that flavor, a LocalQueue of it in each namespace, and the
// WorkloadPriorityClasses asked for — the YAML stream `purser fleet apply` and fleet.manifests
// read. The defaults are the fleet tests' usual world: ClusterQueue research with 64 CPUs and 8
// GPUs of h100, open to every namespace, a LocalQueue research in namespace ml.
//   testing::KueueQueue q;
//   q.preemption = "withinClusterQueue: LowerPriority";
//   q.priority_classes = {{"urgent", 1000}};
//   writeFile(dir.file("fleet.yaml"), q.yaml());
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace purser::testing {

struct KueueQueue {
  std::string flavor = "h100";
  std::string cluster_queue = "research";
  std::string cohort;      // empty: none
  std::string preemption;  // the preemption object's fields; empty: Kueue's defaults
  // (resource, what follows "nominalQuota: " — "8", or "8, borrowingLimit: 0"), in order.
  std::vector<std::pair<std::string, std::string>> quota = {{"cpu", "64"}, {"nvidia.com/gpu", "8"}};
  std::vector<std::string> namespaces = {"ml"};
  std::string local_queue;                                    // empty: named as the ClusterQueue
  std::vector<std::pair<std::string, int>> priority_classes;  // (name, value)

  std::string yaml() const {
    std::string covered, resources;
    for (const auto& [resource, nominal] : quota) {
      covered += (covered.empty() ? "" : ", ") + resource;
      resources += "            - {name: " + resource + ", nominalQuota: " + nominal + "}\n";
    }
    std::string out = std::string(kHead) + "ResourceFlavor\nmetadata: {name: " + flavor +
                      "}\n---\n" + std::string(kHead) +
                      "ClusterQueue\nmetadata: {name: " + cluster_queue + "}\nspec:\n";
    if (!cohort.empty()) out += "  cohort: " + cohort + "\n";
    out += "  namespaceSelector: {}\n";
    if (!preemption.empty()) out += "  preemption: {" + preemption + "}\n";
    out += "  resourceGroups:\n    - coveredResources: [" + covered +
           "]\n      flavors:\n        - name: " + flavor + "\n          resources:\n" + resources;
    const std::string lq = local_queue.empty() ? cluster_queue : local_queue;
    for (const auto& ns : namespaces) {
      out += "---\n" + std::string(kHead) + "LocalQueue\nmetadata: {namespace: " + ns +
             ", name: " + lq + "}\nspec: {clusterQueue: " + cluster_queue + "}\n";
    }
    for (const auto& [name, value] : priority_classes) {
      out += "---\n" + std::string(kHead) + "WorkloadPriorityClass\nmetadata: {name: " + name +
             "}\nvalue: " + std::to_string(value) + "\n";
    }
    return out;
  }

 private:
  static constexpr const char* kHead = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ";
};

}  // namespace purser::testing
