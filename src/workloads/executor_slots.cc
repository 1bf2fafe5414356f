#include "workloads/executor_slots.h"

#include <fmt/format.h>

#include <algorithm>

namespace purser::workloads {

std::string executorOf(const std::vector<fleet::PodSetAssignment>& pod_sets,
                       const std::map<std::string, std::string>& flavor_executors) {
  for (const char* resource : {"nvidia.com/gpu", "cpu"}) {
    for (const auto& ps : pod_sets) {
      auto f = ps.flavors.find(resource);
      if (f == ps.flavors.end()) continue;
      auto e = flavor_executors.find(f->second);
      if (e != flavor_executors.end()) return e->second;
    }
  }
  return "local";
}

ExecutorSlots::ExecutorSlots(std::shared_ptr<fleet::PlacementHook> inner,
                             std::map<std::string, int64_t> slots,
                             std::map<std::string, std::string> flavor_executors)
    : inner_(std::move(inner)),
      slots_(std::move(slots)),
      flavor_executors_(std::move(flavor_executors)) {}

int64_t ExecutorSlots::podsOf(const fleet::Workload& w,
                              const std::vector<fleet::PodSetAssignment>& pod_sets) {
  int64_t pods = 0;
  for (const auto& a : pod_sets) {
    for (const auto& ps : w.pod_sets) {
      if (ps.name == a.name && !ps.command.empty()) pods += a.count;
    }
  }
  return pods;
}

fleet::PlacementHook::Answer ExecutorSlots::place(
    const fleet::Workload& w, const std::vector<fleet::PodSetAssignment>& pod_sets,
    const std::vector<std::string>& gone) {
  const std::string executor = executorOf(pod_sets, flavor_executors_);
  if (auto cap = slots_.find(executor); cap != slots_.end()) {
    const int64_t need = podsOf(w, pod_sets);
    int64_t used = held(executor);
    for (const auto& g : gone) {
      auto h = holders_.find(g);
      if (h != holders_.end() && h->second.first == executor) used -= h->second.second;
    }
    if (need > 0 && used + need > cap->second) {
      Answer a;
      a.verdict = need > cap->second ? Verdict::kNever : Verdict::kNotNow;
      a.message = need > cap->second
                      ? fmt::format(
                            "its {} pods can never run at once on the {} executor, which runs "
                            "at most {}",
                            need, executor, cap->second)
                      : fmt::format(
                            "the {} executor runs at most {} pods at once and admitted "
                            "workloads hold {}; its {} pods wait for room",
                            executor, cap->second, used, need);
      return a;
    }
  }
  if (inner_) return inner_->place(w, pod_sets, gone);
  return Answer{};
}

bool ExecutorSlots::take(const fleet::Workload& w) {
  if (inner_ && !inner_->take(w)) return false;
  release(w.name);  // taken again (a restored workload): counted once
  if (!w.admission) return true;
  const std::string executor = executorOf(w.admission->pod_sets, flavor_executors_);
  if (slots_.count(executor) == 0) return true;
  const int64_t pods = podsOf(w, w.admission->pod_sets);
  holders_[w.name] = {executor, pods};
  held_[executor] += pods;
  return true;
}

void ExecutorSlots::free(const std::string& workload) {
  if (inner_) inner_->free(workload);
  release(workload);
}

void ExecutorSlots::release(const std::string& workload) {
  auto h = holders_.find(workload);
  if (h == holders_.end()) return;
  held_[h->second.first] -= h->second.second;
  holders_.erase(h);
}

int64_t ExecutorSlots::held(const std::string& executor) const {
  auto it = held_.find(executor);
  return it == held_.end() ? 0 : it->second;
}

}  // namespace purser::workloads
