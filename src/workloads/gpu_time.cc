// The fleet service's GPU time, over its part GpuMeter (gpu_meter.h): what a workload's next
// stretch costs, its budget hold, metering, utilisation.
#include "workloads/fleet_service.h"

#include <algorithm>

#include "workloads/fleet_service_parts.h"

namespace purser::workloads {

int64_t FleetService::nowMs() const { return unixMillis(d_.clock.now()); }

// What `r`'s next stretch of GPU time costs: admitted, at its flavors' prices; waiting, at the
// dearest flavor its ClusterQueue offers GPUs in.
Money FleetService::costAhead(const Record& r) const {
  std::vector<std::string> offered;
  if (!(holdsQuota(r.state) && r.admission)) {
    auto st = engine_->status(r.spec.name);
    const std::string cq = st ? st->cluster_queue : std::string();
    for (const auto& q : base_.cluster_queues) {
      if (q.name != cq) continue;
      for (const auto& group : q.resource_groups) {
        if (std::find(group.covered.begin(), group.covered.end(), kGpu) == group.covered.end()) {
          continue;
        }
        for (const auto& fq : group.flavors) offered.push_back(fq.flavor);
      }
    }
  }
  return gpu_.lookaheadCost(r, offered);
}

std::string FleetService::budgetHold(const Record& r) const {
  if (r.tenant_id.empty() || !requestsGpu(r.spec)) return {};
  return gpu_.budgetHold(r, costAhead(r));
}

bool FleetService::holdGpu(Record& r) {
  gpu_.release(r);
  if (r.tenant_id.empty() || !requestsGpu(r.spec)) return true;
  return gpu_.hold(r, costAhead(r));
}

// Sends an admitted workload whose GPU time can no longer be held back to its queue, held.
void FleetService::stopForBudget(const std::string& name) {
  auto it = records_.find(name);
  if (it == records_.end() || !holdsQuota(it->second.state)) return;
  Record& r = it->second;
  releaseGpu(r);
  std::string why = budgetHold(r);
  if (why.empty()) why = "the GPU budget cannot hold this workload's next stretch of GPU time";
  if (!engine_->stop(name, "BudgetExhausted", why)) return;
  (void)engine_->hold(name, "BudgetExhausted", why);
  r.hold = why;
}

// Charges `r`'s GPU time up to `now_ms`; a workload that runs pods here is charged from the
// moment they run, not from its admission.
std::optional<store::TxFn> FleetService::meter(Record& r, int64_t now_ms) {
  return gpu_.meter(r, now_ms, pods_.runsPods(r) && r.state == "admitted");
}

// Charged for its GPUs now: as meter() charges it.
bool FleetService::charging(const Record& r) const {
  return holdsQuota(r.state) && r.admission && !(r.state == "admitted" && pods_.runsPods(r));
}

std::optional<fleet::GpuReading> FleetService::gpuReading(const std::string& node,
                                                          int gpu_index) const {
  return gpu_.reading(node, gpu_index);
}

void FleetService::sampleUtilisation() {
  gpu_.sampleAll(
      records_, [this](const Record& r) { return charging(r); }, nowMs());
}

std::optional<LiveUtilisation> FleetService::utilisationOf(const std::string& name) const {
  const Record* r = find(name);
  if (r == nullptr || !charging(*r)) return std::nullopt;
  return gpu_.utilisation(name, nowMs());
}

void FleetService::noteEvent(std::string kind, const std::string& workload,
                             std::string cluster_queue, std::string reason, std::string message,
                             std::string by) {
  const Record* r = find(workload);
  const Record* b = by.empty() ? nullptr : find(by);
  writes_.event({formatRfc3339(d_.clock.now()), std::move(kind), workload, std::move(cluster_queue),
                 std::move(reason), std::move(message), std::move(by), r ? r->tenant_id : "",
                 r ? r->team_id : "", b ? b->tenant_id : ""});
}

const Record* FleetService::find(const std::string& name) const {
  auto it = records_.find(name);
  return it == records_.end() ? nullptr : &it->second;
}

}  // namespace purser::workloads
