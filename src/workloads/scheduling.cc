// The fleet service's scheduling: admission cycles, and records and events persisted.
#include "workloads/fleet_service.h"

#include "workloads/fleet_service_parts.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace purser::workloads {

namespace asio = boost::asio;
using fleet::Amount;
using fleet::Workload;

// --- Scheduling and persistence -----------------------------------------------------------------

// Applies budget holds, runs the engine to a stable state, starts what was admitted, and brings
// the records up to date; returns the write that records every change (nullopt when nothing
// changed).
std::optional<store::TxFn> FleetService::schedule() {
  const int64_t now = nowMs();
  for (auto& [name, r] : records_) {
    if (!queued(r.state)) continue;
    std::string hold = budgetHold(r);
    if (hold == r.hold) continue;
    if (hold.empty()) {
      (void)engine_->release(name);
      noteEvent("Released", name, "", "BudgetAvailable", "the GPU budget has room again", "");
      r.state = r.preemptions > 0 ? "evicted" : "pending";
    } else {
      (void)engine_->hold(name, "BudgetExhausted", hold);
      noteEvent("Held", name, "", "BudgetExhausted", hold, "");
      r.state = "suspended";
    }
    r.hold = std::move(hold);
    writes_.changed(name);
  }
  engine_->setTime(now);
  // Admission takes a hold on the wallets for the GPU time ahead; a workload whose hold fails
  // (a hard wallet raced below it) goes back, held, and the engine runs again.
  for (int round = 0; round < 8; ++round) {
    engine_->runUntilStable();
    std::vector<std::string> stops;
    processEvents(now, stops);
    if (stops.empty()) break;
    for (const auto& name : stops) stopForBudget(name);
  }
  // What was admitted starts once the pods it displaced are gone. (A start that fails ends its
  // workload, which leaves records_: the names are taken first.)
  std::vector<std::string> starting;
  for (auto& [name, r] : records_) {
    const bool running = std::any_of(r.pods.begin(), r.pods.end(),
                                     [](const PodRun& p) { return p.phase == "running"; });
    if (r.state == "admitted" && pods_.runsPods(r) && !running && pods_.mayStart(r, now)) {
      starting.push_back(name);
    }
  }
  for (const auto& name : starting) {
    auto it = records_.find(name);
    if (it == records_.end()) continue;
    startPods(it->second, now);
    it = records_.find(name);
    if (it == records_.end() || it->second.state != "admitted") pods_.settled(name);
  }
  publishQueues();
  return writes_.take(records_);
}

void FleetService::processEvents(int64_t now, std::vector<std::string>& stops) {
  for (const fleet::Event& e : engine_->takeEvents()) {
    auto it = records_.find(e.workload);
    if (it == records_.end()) continue;
    Record& r = it->second;
    switch (e.kind) {
      case fleet::Event::Kind::kAdmitted: {
        auto st = engine_->status(e.workload);
        r.state = "admitted";
        r.reason.clear();
        r.message.clear();
        r.admission = st ? st->admission : std::nullopt;
        r.admitted_ms = now;
        r.metered_until_ms = now;
        noteEvent("Admitted", e.workload, e.cluster_queue, "QuotaReserved", "", "");
        if (!holdGpu(r)) stops.push_back(e.workload);
        break;
      }
      case fleet::Event::Kind::kPreempted:
        noteEvent("Preempted", e.workload, e.cluster_queue, e.reason, e.message, e.by);
        break;
      case fleet::Event::Kind::kEvicted: {
        if (auto tx = meter(r, now)) writes_.metered(std::move(*tx));
        gpu_.forget(e.workload);
        pods_.stop(r, e.reason, now);
        const bool budget = e.reason == "BudgetExhausted";
        r.state = budget ? "suspended" : "evicted";
        r.reason = e.reason;
        r.message = e.message;
        r.admission.reset();
        if (!budget) ++r.preemptions;
        if (auto st = engine_->status(e.workload); st && st->queued_ms) {
          r.spec.queued_ms = st->queued_ms;
        }
        noteEvent("Evicted", e.workload, e.cluster_queue, e.reason, e.message, e.by);
        break;
      }
      default:
        break;
    }
    writes_.changed(e.workload);
  }
}

void FleetService::publishQueues() {
  auto queues = engine_->queues();
  std::lock_guard lock(shared_mu_);
  queues_ = std::move(queues);
}

QueueSnapshot FleetService::queueSnapshot() const {
  std::lock_guard lock(shared_mu_);
  return queues_;
}

std::vector<std::pair<std::string, std::vector<ledger::Alert>>> FleetService::takeAlerts() {
  return gpu_.takeAlerts();
}

// Every poll interval: the pods' ends; every second: retried writes, GPU time that is due and
// the holds ahead of it.
void FleetService::tick() {
  takeFound();
  pollPods();
  const int64_t now = nowMs();
  // The directory changed (a tenant's priority grant, say): what waits is looked at again.
  if (const uint64_t g = d_.directory.generation(); g != directory_generation_) {
    directory_generation_ = g;
    engine_->reconsider();
    if (auto write = schedule()) writes_.enqueue(std::move(*write), nullptr);
  }
  if (now - last_tick_ms_ >= 1000 || now < last_tick_ms_) {
    last_tick_ms_ = now;
    writes_.retry();
    const int64_t interval =
        std::chrono::duration_cast<std::chrono::milliseconds>(options_.metering_interval).count();
    sampleUtilisation();
    std::vector<std::string> stops;
    for (auto& [name, r] : records_) {
      if (!holdsQuota(r.state) || now - r.metered_until_ms < interval) continue;
      if (auto tx = meter(r, now)) writes_.metered(std::move(*tx));
      if (!holdGpu(r)) stops.push_back(name);
      writes_.changed(name);
    }
    for (const auto& name : stops) stopForBudget(name);
    overtime(now);
    if (!terminating_.empty()) endTerminated();
    // Served replicas join their routes once healthy, and leave them while they are not.
    for (auto& [name, r] : records_) {
      if (pods_.serve(r)) writes_.changed(name);
    }
    if (inventory_.due(now)) refreshInventory();
  }
  if (auto write = schedule()) writes_.enqueue(std::move(*write), nullptr);
}

// A run past its workload's maximum execution time is stopped, and the workload fails (as Kueue
// deactivates it: it is not queued again).
void FleetService::overtime(int64_t now) {
  std::vector<std::string> over;
  for (const auto& [name, r] : records_) {
    if ((r.state == "running" || r.state == "unknown") && r.spec.max_execution_seconds > 0 &&
        now - r.started_ms >= r.spec.max_execution_seconds * 1000) {
      over.push_back(name);
    }
  }
  for (const auto& name : over) {
    Record& r = records_.at(name);
    pods_.stop(r, "MaximumExecutionTimeExceeded", now);
    endRun(r, /*failed=*/true, "MaximumExecutionTimeExceeded",
           fmt::format("it ran past its maximum execution time of {} s, and was stopped",
                       r.spec.max_execution_seconds));
  }
}

}  // namespace purser::workloads
