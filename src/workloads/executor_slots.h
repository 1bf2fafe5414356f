// ExecutorSlots: the room an executor has for pods is quota too. An executor that runs at most so
// many pods at once (the local one: fleet.local.max_pods) is a resource the engine admits
// against, as it admits against the hardware: a workload whose pods would not all find a slot is
// not admitted — it waits, pending with its reason — instead of being started, failing and being
// started again. Slots are held from admission to the workload's end (or eviction) and may be
// freed by preemption, as GPUs are.
//
// A PlacementHook (fleet/engine.h) in front of the one that places on the hardware (none without
// an inventory). Called on the engine's thread only, like the engine; not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fleet/engine.h"

namespace purser::workloads {

// The executor a workload admitted with `pod_sets` runs on: the one its GPU flavor, else its CPU
// flavor, is mapped to in `flavor_executors`; "local" when none is.
std::string executorOf(const std::vector<fleet::PodSetAssignment>& pod_sets,
                       const std::map<std::string, std::string>& flavor_executors);

class ExecutorSlots final : public fleet::PlacementHook {
 public:
  // `slots`: executor name -> pods it runs at once (executors not listed are not counted);
  // `inner`: the hardware's hook, or null.
  ExecutorSlots(std::shared_ptr<fleet::PlacementHook> inner, std::map<std::string, int64_t> slots,
                std::map<std::string, std::string> flavor_executors);

  Answer place(const fleet::Workload& w, const std::vector<fleet::PodSetAssignment>& pod_sets,
               const std::vector<std::string>& gone) override;
  bool take(const fleet::Workload& w) override;
  void free(const std::string& workload) override;

  // Slots held now on `executor`.
  int64_t held(const std::string& executor) const;

 private:
  // The pods of `w` admitted with `pod_sets` that run on an executor (pod sets with a command).
  static int64_t podsOf(const fleet::Workload& w,
                        const std::vector<fleet::PodSetAssignment>& pod_sets);
  void release(const std::string& workload);  // what it counted of `workload`, not the inner's

  std::shared_ptr<fleet::PlacementHook> inner_;
  const std::map<std::string, int64_t> slots_;
  const std::map<std::string, std::string> flavor_executors_;
  std::map<std::string, std::pair<std::string, int64_t>> holders_;  // workload -> (executor, pods)
  std::map<std::string, int64_t> held_;                             // executor -> pods
};

}  // namespace purser::workloads
