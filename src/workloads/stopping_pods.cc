// StoppingPods: see stopping_pods.h.
#include "workloads/stopping_pods.h"

#include <algorithm>

namespace purser::workloads {

bool StoppingPods::blocks(const fleet::Admission& admission) const {
  if (pods_.empty()) return false;
  for (const auto& ps : admission.pod_sets) {
    for (const auto& p : ps.placements) {
      for (const auto& s : pods_) {
        if (!s.placement || s.placement->node != p.node) continue;
        for (int g : p.gpus) {
          if (std::find(s.placement->gpus.begin(), s.placement->gpus.end(), g) !=
              s.placement->gpus.end()) {
            return true;
          }
        }
      }
    }
  }
  return false;
}

void StoppingPods::poll(const InFlight& in_flight, int64_t now_ms) {
  for (auto it = pods_.begin(); it != pods_.end();) {
    exec::Executor* executor = executors_(it->executor);
    if (!it->signalled && executor) {
      if (in_flight && in_flight(it->route, it->replica) > 0 && now_ms < it->drain_until_ms) {
        ++it;  // still serving what it had
        continue;
      }
      it->signalled = true;
      (void)executor->stop(it->handle, grace_);
    }
    auto st = executor ? executor->status(it->handle) : Result<exec::PodStatus>(fail(Error()));
    if (!st && st.error().code == ErrorCode::kUnavailable) {
      ++it;  // not known yet: the engine cannot be asked
    } else if (!st || st->phase != exec::PodPhase::kRunning) {
      if (executor) executor->forget(it->handle);
      it = pods_.erase(it);
    } else {
      ++it;
    }
  }
}

void StoppingPods::signalAll() {
  for (auto& s : pods_) {
    if (s.signalled) continue;
    s.signalled = true;
    if (exec::Executor* e = executors_(s.executor)) (void)e->stop(s.handle, grace_);
  }
}

}  // namespace purser::workloads
