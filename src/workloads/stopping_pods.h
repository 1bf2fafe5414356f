// StoppingPods: pods asked to stop and not gone yet — a part of FleetService (fleet_service.h)
// that runs on its thread, testable without one.
//
//   - A pod stops in the background and keeps the GPUs it was placed on until its executor says
//     it is gone: a workload placed on one of those GPUs waits for it (blocks()), so two pods
//     never share a GPU the placement gave one of them whole.
//   - A serving replica is drained first: it has left its route already; it is signalled once its
//     requests in flight are done, or at its drain deadline (poll()).
//   - When the service stops, every replica still draining is signalled at once (signalAll()): a
//     drain cut short beats a pod left running that no record will adopt after a restart.
//   - A pod whose executor cannot be asked now (kUnavailable) is kept, and asked again.
//
// Not thread-safe: the fleet service's thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "exec/executor.h"
#include "fleet/model.h"

namespace purser::workloads {

class StoppingPods {
 public:
  struct Pod {
    std::string workload, executor, handle;
    std::optional<fleet::PodPlacement> placement;  // the GPUs it holds until gone
    // A serving replica drained first: out of `route` already, signalled once `replica` has no
    // request in flight (or at drain_until_ms).
    std::string route, replica;
    bool signalled = true;
    int64_t drain_until_ms = 0;
  };
  // The executor named so (null: none, the pod is forgotten).
  using ExecutorOf = std::function<exec::Executor*(const std::string&)>;
  // Requests in flight on a replica of a route.
  using InFlight = std::function<int64_t(const std::string& route, const std::string& replica)>;

  StoppingPods(ExecutorOf executors, Duration grace)
      : executors_(std::move(executors)), grace_(grace) {}

  // `pod` was asked to stop (or, being drained, will be).
  void add(Pod pod) { pods_.push_back(std::move(pod)); }
  // Whether `admission` places a pod on a GPU a stopping pod still holds.
  bool blocks(const fleet::Admission& admission) const;
  // Signals drained replicas whose requests are done (or whose deadline passed at `now_ms`), and
  // forgets the pods their executors say are gone.
  void poll(const InFlight& in_flight, int64_t now_ms);
  // Signals every replica still draining.
  void signalAll();

  size_t size() const { return pods_.size(); }
  bool empty() const { return pods_.empty(); }

 private:
  const ExecutorOf executors_;
  const Duration grace_;
  std::vector<Pod> pods_;
};

}  // namespace purser::workloads
