// The fleet service's runs: recorded before their pods start (its part PodRunner, pod_runner.h,
// runs the pods), ended once their pods have, and work found on an engine queued.
#include "workloads/fleet_service.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace purser::workloads {

std::map<std::string, std::string> FleetService::admissionEnv(const Record& r,
                                                              const std::string& pod_set,
                                                              int64_t index) const {
  return podEnvironment(r, pod_set, index, placer_.get());
}

Result<int64_t> FleetService::accountOf(const std::string& team_id) {
  if (auto it = accounts_.find(team_id); it != accounts_.end()) return it->second;
  int64_t uid = 0;
  const std::string at = formatRfc3339(d_.clock.now());
  const int64_t base = options_.account_uid_base, count = options_.account_uid_count;
  PURSER_TRY(writes_.writeNow([&](store::Tx& tx) -> Result<void> {
    // Another leader may have made it meanwhile; else the next uid in the range.
    auto have =
        PURSER_TRY_VALUE(tx.query("SELECT uid FROM fleet_accounts WHERE team_id = $1", {team_id}));
    if (!have.empty()) {
      uid = have[0].getInt(0);
      return {};
    }
    auto top = PURSER_TRY_VALUE(tx.query(
        "SELECT MAX(uid) FROM fleet_accounts WHERE uid >= $1 AND uid < $2", {base, base + count}));
    uid =
        !top.empty() && std::holds_alternative<int64_t>(top[0].at(0)) ? top[0].getInt(0) + 1 : base;
    if (uid >= base + count) {
      return fail(Error(ErrorCode::kResourceExhausted,
                        fmt::format("every account of fleet.local's {} (from uid {}) is some "
                                    "team's; raise fleet.local.uid_count",
                                    count, base)));
    }
    PURSER_TRY(tx.exec("INSERT INTO fleet_accounts (team_id, uid, created_at) VALUES ($1, $2, $3)",
                       {team_id, uid, at}));
    return {};
  }));
  accounts_[team_id] = uid;
  return uid;
}

void FleetService::startPods(Record& r, int64_t now) {
  writes_.changed(r.spec.name);
  // A run written as launching by a leader that died is started again under the same keys.
  const bool resumed = r.launching;
  if (!resumed) {
    ++r.runs;
    // The run is recorded (fenced, where replicas share the store) before any pod is asked to
    // start, so that whoever runs the fleet next — this process after a kill -9, or another
    // replica — knows it may have begun, and starts it again under the same keys, which takes
    // back the pods that did start instead of starting them twice.
    r.launching = true;
    r.started_ms = now;  // as launched: a run resumed after a kill is charged from here
    const std::string at = formatRfc3339(d_.clock.now());
    WorkloadRow row = rowOf(r);
    auto wrote = writes_.writeNow(
        [&row, &at](store::Tx& tx) -> Result<void> { return writeRow(tx, row, at); });
    if (!wrote) {
      r.launching = false;
      --r.runs;
      if (r.reason != "WaitingForStore") {
        r.reason = "WaitingForStore";
        r.message = "its start could not be recorded: " + wrote.error().message;
        spdlog::warn("fleet: {} not started yet: {}", r.spec.name, r.message);
      }
      return;
    }
  }
  if (auto failure = pods_.start(r, now, resumed, placer_.get())) {
    endRun(r, /*failed=*/true, "StartFailed", *failure);
  }
}

void FleetService::pollPods() {
  const int64_t now = nowMs();
  pods_.pollStopping(now);
  std::vector<std::string> ended;
  for (auto& [name, r] : records_) {
    if (r.state != "running" && r.state != "unknown") continue;
    const PodRunner::Watched w = pods_.watch(r, now);
    if (w.changed) writes_.changed(name);
    if (w.ended) ended.push_back(name);
  }
  for (const auto& name : ended) {
    Record& r = records_.at(name);
    const PodRunner::Outcome how = PodRunner::outcome(r);
    endRun(r, how.failed, how.reason, how.message);
  }
}

// Ends `r` (running, or failing to start): GPU time charged to its pods' end, quota released,
// written as ended.
void FleetService::endRun(Record& r, bool failed, const std::string& reason,
                          const std::string& message) {
  const int64_t end = PodRunner::runEnd(r);
  if (auto tx = meter(r, std::max(end, r.metered_until_ms))) writes_.metered(std::move(*tx));
  gpu_.forget(r.spec.name);
  releaseGpu(r);
  pods_.finish(r);
  const std::string queue = r.admission ? r.admission->cluster_queue : "";
  const std::string name = r.spec.name;
  (void)engine_->finish(name);
  r.state = failed ? "failed" : "succeeded";
  r.reason = reason;
  r.message = message;
  // Charged up to here (a metering may have passed the pods' end by the instant between a poll
  // and the metering that followed it).
  r.finished_ms = std::max({end, r.started_ms, r.metered_until_ms});
  noteEvent(failed ? "Failed" : "Succeeded", name, queue, reason, message, "");
  just_ended_[name] = r;
  writes_.ended(std::move(r));
  records_.erase(name);
  writes_.forget(name);
}

// Work users handed an engine directly joins the queues, as Kueue's job integrations make a
// Workload of a Job: owned by the team its namespace names, in that team's tenant, paid for by
// both. Found again (after a restart, a relist), it is the same workload; gone from the engine
// before it ran, it ends (a running one ends as its engine reports).
void FleetService::takeFound() {
  for (const auto& [name, e] : executors_) {
    for (const auto& f : e->takeFound()) found(name, f);
  }
}

void FleetService::found(const std::string& executor, const exec::Found& f) {
  const std::string external = executor + ":" + f.key;
  for (auto& [name, r] : records_) {
    if (r.external != external) continue;
    if (f.manifest.empty() && r.state != "running" && r.state != "unknown") {
      (void)remove(name, executor, nullptr);
    }
    return;
  }
  if (f.manifest.empty()) return;
  const auto refuse = [&](const std::string& why) {
    if (found_warned_.insert(f.key + why).second) {
      spdlog::warn("fleet: {} {} is not queued: {}", executor, f.key, why);
    }
  };
  fleet::WorkloadBounds bounds = options_.bounds;
  bounds.min_pod_cpu_milli = 0;  // its engine places it, not the local executor's slots
  auto parsed = fleet::parseWorkload(f.manifest, executor + " " + f.key, 128, bounds);
  if (!parsed) return refuse(parsed.error().message);
  fleet::Workload w = std::move(parsed->workload);
  const std::string ns = w.namespace_;
  const std::string tenant_id = owningTenant(ns);
  auto team = tenant_id.empty() ? std::nullopt : d_.directory.teamByName(tenant_id, ns);
  if (!team) return refuse(fmt::format("namespace \"{}\" is no team's", ns));
  const std::string bare = w.name.substr(w.name.find('/') + 1);
  w.namespace_ = namespaceOf(tenant_id, ns);
  w.name = w.namespace_ + "/" + bare;
  if (records_.count(w.name) != 0) {
    // Kueue's way of naming a Job's workload, when the plain name is taken.
    const std::string uid = f.key.substr(f.key.rfind('/') + 1);
    w.name = fmt::format("{}/job-{}-{}", w.namespace_, bare, uid.substr(0, 5));
  }
  const int64_t now = nowMs();
  w.created_ms = now;
  w.queued_ms.reset();
  Record r;
  r.tenant_id = tenant_id;
  r.team_id = team->id;
  r.owner_kind = executor;
  r.submitted_ms = now;
  r.external = external;
  r.spec = std::move(w);
  // Applied to the cluster directly, it asks for no more priority than through Purser.
  if (auto granted = checkPriorityGrant(r); !granted) return refuse(granted.error().message);
  auto queued = submit(std::move(r), nullptr);
  if (!queued) return refuse(queued.error().message);
}

}  // namespace purser::workloads
