// What the fleet service's files share (internal to src/workloads): the fleet's resource names and
// small helpers over workloads, manifests and pods. The service is one class, FleetService
// (fleet_service.h), whose methods are defined in the file of their part:
//   fleet_service.cc    opening, closing, the world (queues, manifests; tenancy over its part
//                       Tenancy, tenancy.h)
//   fleet_inventory.cc  the inventory, over its part InventoryFeed (inventory_feed.h), and the
//                       engine rebuilt on it
//   gpu_time.cc         GPU time, over its part GpuMeter (gpu_meter.h): holds, metering,
//                       utilisation
//   scheduling.cc       scheduling cycles; what they change is written through its part
//                       RecordWriter (record_writer.h): one write a pass, fenced, retried
//   pods.cc             runs: recorded before their pods start, ended once their pods have
//                       (the pods are its part PodRunner's, pod_runner.h, and those on their way
//                       out PodRunner's StoppingPods, stopping_pods.h); work found on an engine
//   fleet_requests.cc   what the API hands in, and reads from the store
#pragma once

#include <utility>

#include <algorithm>
#include <string>
#include <vector>

#include "fleet_io/manifest.h"
#include "workloads/fleet_service.h"

namespace purser::workloads {

// Queued in the engine: waiting for admission (held or not).
inline bool queued(const std::string& state) {
  return state == "pending" || state == "evicted" || state == "suspended";
}

template <typename T, typename Key>
inline void upsert(std::vector<T>& into, std::vector<T> from, Key key) {
  for (auto& x : from) {
    auto it = std::find_if(into.begin(), into.end(), [&](const T& y) { return key(y) == key(x); });
    if (it != into.end()) {
      *it = std::move(x);
    } else {
      into.push_back(std::move(x));
    }
  }
}

// Objects of `set` replace those of the same kind and name in `into`, or join them.
inline void merge(fleet::ManifestSet& into, fleet::ManifestSet set) {
  const auto byName = [](const auto& x) { return x.name; };
  upsert(into.flavors, std::move(set.flavors), byName);
  upsert(into.cohorts, std::move(set.cohorts), byName);
  upsert(into.cluster_queues, std::move(set.cluster_queues), byName);
  upsert(into.priority_classes, std::move(set.priority_classes), byName);
  upsert(into.local_queues, std::move(set.local_queues),
         [](const fleet::LocalQueue& q) { return q.namespace_ + "/" + q.name; });
  for (auto& [ns, labels] : set.namespaces) into.namespaces[ns] = std::move(labels);
}

}  // namespace purser::workloads
