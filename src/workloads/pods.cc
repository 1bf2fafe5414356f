// The fleet service's pods: starting, watching and ending them; served replicas.
#include "workloads/fleet_service.h"

#include "workloads/executor_slots.h"
#include "workloads/fleet_service_parts.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "common/json.h"
#include "exec/command.h"
#include "identity/payer.h"
#include "ledger/price.h"

namespace purser::workloads {

namespace asio = boost::asio;
using fleet::Amount;
using fleet::Workload;

// --- Pods
// -----------------------------------------------------------------------------------------

std::map<std::string, std::string> FleetService::admissionEnv(const Record& r,
                                                              const std::string& pod_set,
                                                              int64_t index) const {
  std::map<std::string, std::string> env = {
      {"PURSER_WORKLOAD", shown(r.spec.name)},
      {"PURSER_NAMESPACE", shown(r.spec.namespace_)},
      {"PURSER_POD_SET", pod_set},
      {"PURSER_POD_INDEX", std::to_string(index)},
      // What an Indexed Job's pods read their index from.
      {"JOB_COMPLETION_INDEX", std::to_string(index)},
  };
  if (r.spec.serve) {
    env["PURSER_SERVE_PORT"] = std::to_string(r.spec.serve->port + index);
    env["PURSER_SERVE_MODEL"] = r.spec.serve->model;
  }
  if (!r.admission) return env;
  env["PURSER_CLUSTER_QUEUE"] = r.admission->cluster_queue;
  for (const auto& ps : r.admission->pod_sets) {
    if (ps.name != pod_set) continue;
    env["PURSER_POD_COUNT"] = std::to_string(ps.count);
    if (auto f = ps.flavors.find(kGpu); f != ps.flavors.end()) env["PURSER_GPU_FLAVOR"] = f->second;
    if (index < 0 || static_cast<size_t>(index) >= ps.placements.size()) break;
    const fleet::PodPlacement& p = ps.placements[static_cast<size_t>(index)];
    env["PURSER_NODE"] = p.node;
    const fleet::PodSet* spec = nullptr;
    for (const auto& s : r.spec.pod_sets) {
      if (s.name == pod_set) spec = &s;
    }
    if (placer_ && spec != nullptr && !p.gpus.empty()) {
      if (auto placed = placer_->environment(p, spec->requests)) {
        for (const auto& [k, v] : *placed) env[k] = v;
      }
    } else if (p.gpus.empty()) {
      // A pod placed without GPUs sees none (not the machine's).
      env["CUDA_VISIBLE_DEVICES"] = "";
    }
  }
  return env;
}

// Does `r` wait for the pods it displaced? Its placements share a GPU with a pod still stopping.
bool FleetService::blocked(const Record& r) const {
  return r.admission && stopping_.blocks(*r.admission);
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
  if (!resumed) ++r.runs;
  if (!resumed) {
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
  r.pods.clear();
  const std::string queue = r.admission ? r.admission->cluster_queue : "";
  std::string failure;
  const std::string executor_name = executorFor(r);
  exec::Executor* executor = executorNamed(executor_name);
  if (executor == nullptr) {
    failure = fmt::format("this Purser has no executor \"{}\" to run pods on", executor_name);
  }
  if (executor != nullptr && executor_name == "kubernetes" && r.external.empty() &&
      !r.manifest.empty()) {
    // Submitted as a Job, JobSet or PyTorchJob: that object is created once, then released (and
    // suspended, and released again) like one a user applied.
    auto key = executor->create(r.manifest, shown(r.spec.namespace_));
    if (key) {
      r.external = executor_name + ":" + *key;
    } else {
      failure = fmt::format("its {} could not be created: {}", "object", key.error().message);
    }
  }
  for (const auto& ps : r.spec.pod_sets) {
    if (!failure.empty()) break;
    // A pod set with nothing to run here holds its quota only.
    if (ps.command.empty() && (executor_name != "kubernetes" || ps.image.empty())) continue;
    int64_t count = ps.count;
    if (r.admission) {
      for (const auto& a : r.admission->pod_sets) {
        if (a.name == ps.name) count = a.count;
      }
    }
    for (int64_t i = 0; i < count && failure.empty(); ++i) {
      exec::PodLaunch launch;
      launch.workload = shown(r.spec.name);
      launch.pod_set = ps.name;
      launch.index = i;
      launch.argv = ps.command;
      launch.working_dir = ps.working_dir;
      launch.env = ps.env;
      for (auto& [k, v] : admissionEnv(r, ps.name, i)) launch.env[k] = v;
      if (auto g = ps.requests.find(kGpu); g != ps.requests.end()) launch.gpus = g->second / 1000;
      if (auto c = ps.requests.find("cpu"); c != ps.requests.end()) launch.cpu_milli = c->second;
      if (auto m = ps.requests.find("memory"); m != ps.requests.end()) {
        launch.memory_bytes = m->second / 1000;
      }
      if (auto n = launch.env.find("PURSER_NODE"); n != launch.env.end()) launch.node = n->second;
      launch.image = ps.image;
      launch.queue = r.spec.local_queue;
      launch.time_limit_seconds = r.spec.max_execution_seconds;
      launch.key = fmt::format("{}-{}-{}", options_.installation, r.seq, r.runs);
      launch.team = r.spec.namespace_;
      if (auto l = ps.limits.find("memory"); l != ps.limits.end()) {
        launch.memory_limit_bytes = l->second / 1000;
      }
      if (auto l = ps.limits.find("cpu"); l != ps.limits.end()) launch.cpu_limit_milli = l->second;
      if (r.admission) {
        for (const auto& a : r.admission->pod_sets) {
          if (a.name == ps.name && static_cast<size_t>(i) < a.placements.size()) {
            launch.gpu_indices = a.placements[static_cast<size_t>(i)].gpus;
          }
        }
      }
      if (executor_name == "local") {
        auto uid = accountOf(r.team_id.empty() ? "namespace:" + r.spec.namespace_ : r.team_id);
        if (!uid) {
          failure = fmt::format("pod {}-{} has no account to run as: {}", ps.name, i,
                                uid.error().message);
          break;
        }
        launch.uid = *uid;
      }
      if (!r.external.empty()) launch.existing = r.external.substr(r.external.find(':') + 1);
      if (r.admission) {
        for (const auto& a : r.admission->pod_sets) {
          for (const auto& p : a.placements) launch.placement[a.name].push_back(p.node);
        }
      }
      auto handle = executor->start(launch);
      if (!handle && handle.error().code == ErrorCode::kResourceExhausted) {
        // The executor is full: what started is let go, and it waits for room (every poll).
        for (auto& p : r.pods) {
          (void)executor->stop(p.handle, Duration::zero());
          stopping_.add({r.spec.name, p.executor, p.handle, std::nullopt});
        }
        r.pods.clear();
        // The run keeps its number: its keys were claimed by the pods let go.
        r.launching = false;
        if (r.reason != "WaitingForExecutor") {
          r.reason = "WaitingForExecutor";
          r.message = handle.error().message;
          noteEvent("Waiting", r.spec.name, queue, r.reason, r.message, "");
        }
        // Tried again after a while, longer each time (1 s doubling to a minute), never at
        // every poll.
        auto& [next, delay] = start_backoff_[r.spec.name];
        delay = delay == 0 ? 1000 : std::min<int64_t>(delay * 2, 60'000);
        next = now + delay;
        return;
      }
      if (!handle) {
        failure = fmt::format("pod {}-{} could not start: {}", ps.name, i, handle.error().message);
        break;
      }
      PodRun pod;
      pod.pod_set = ps.name;
      pod.index = i;
      pod.handle = *handle;
      pod.executor = executor_name;
      pod.started_ms = now;
      if (auto st = executor->status(*handle)) pod.started_ms = unixMillis(st->started_at);
      if (auto id = executor->identity(*handle)) {
        pod.pid = id->first;
        pod.pid_start = id->second;
      }
      r.pods.push_back(std::move(pod));
    }
  }
  if (!failure.empty()) {
    for (auto& p : r.pods) (void)executor->stop(p.handle, Duration::zero());
    r.pods.clear();
    r.launching = false;
    r.started_ms = now;
    r.metered_until_ms = now;
    endRun(r, /*failed=*/true, "StartFailed", failure);
    return;
  }
  r.state = "running";
  r.launching = false;
  // Its GPU time counts from its launch (the first try's, for a run resumed after a kill: its
  // pods ran while no Purser watched them) or its pods' first start, whichever came first.
  if (!resumed || r.started_ms <= 0 || r.started_ms > now) r.started_ms = now;
  for (const auto& p : r.pods) r.started_ms = std::min(r.started_ms, p.started_ms);
  r.metered_until_ms = r.started_ms;
  noteEvent("Started", r.spec.name, queue, "PodsStarted",
            fmt::format("{} pod(s) started (run {})", r.pods.size(), r.runs), "");
}

// Stops `r`'s running pods; they stop in the background (holding their GPUs until gone) and
// show as "stopped".
void FleetService::stopPods(Record& r, const std::string& why) {
  for (const auto& p : r.pods) {
    if (p.phase != "running") continue;
    exec::Executor* executor = executorNamed(p.executor);
    if (executor == nullptr) continue;
    StoppingPods::Pod s{r.spec.name, p.executor, p.handle, std::nullopt};
    if (p.serving && d_.served && r.spec.serve) {
      // Out of the route first; signalled once what it serves now is done.
      s.route = r.spec.serve->route;
      s.replica = replicaId(r, p);
      s.signalled = false;
      s.drain_until_ms =
          nowMs() +
          std::chrono::duration_cast<std::chrono::milliseconds>(options_.termination_grace).count();
      d_.served->leave(s.route, s.replica);
      noteEvent("Draining", r.spec.name, r.admission ? r.admission->cluster_queue : "", why,
                fmt::format("pod {}-{} left route {}; stopped once its requests are done",
                            p.pod_set, p.index, s.route),
                "");
    } else if (auto stopped = executor->stop(p.handle, options_.termination_grace); !stopped) {
      spdlog::warn("fleet: pod {} of {} not stopped ({}): {}", p.handle, r.spec.name, why,
                   stopped.error().message);
    }
    if (r.admission) {
      for (const auto& a : r.admission->pod_sets) {
        if (a.name == p.pod_set && p.index >= 0 &&
            static_cast<size_t>(p.index) < a.placements.size()) {
          s.placement = a.placements[static_cast<size_t>(p.index)];
        }
      }
    }
    stopping_.add(std::move(s));
  }
  // The run's pods stay on the record (their logs with them) until the next run starts.
  for (auto& p : r.pods) {
    if (p.phase != "running") continue;
    p.phase = "stopped";
    p.serving = false;
    p.finished_ms = nowMs();
  }
}

void FleetService::pollPods() {
  // Pods stopping in the background: gone ones free their GPUs.
  StoppingPods::InFlight in_flight;
  if (d_.served) {
    in_flight = [this](const std::string& route, const std::string& replica) {
      return d_.served->inFlight(route, replica);
    };
  }
  stopping_.poll(in_flight, nowMs());
  std::vector<std::string> ended;
  for (auto& [name, r] : records_) {
    if (r.state != "running" && r.state != "unknown") continue;
    bool running = false, failed = false;
    std::optional<Error> lost;  // the executor could not be asked
    for (auto& p : r.pods) {
      if (p.phase == "running") {
        exec::Executor* executor = executorNamed(p.executor);
        auto st = executor ? executor->status(p.handle) : Result<exec::PodStatus>(fail(Error()));
        if (!st && st.error().code == ErrorCode::kUnavailable) {
          lost = st.error();
        } else if (!st) {
          // The executor does not know it (nor can it learn of it): ended, with no code.
          p.phase = "failed";
          p.finished_ms = nowMs();
          writes_.changed(name);
        } else if (st->phase != exec::PodPhase::kRunning) {
          if (p.serving && d_.served && r.spec.serve) {
            d_.served->leave(r.spec.serve->route, replicaId(r, p));
            p.serving = false;
          }
          p.phase = st->phase == exec::PodPhase::kSucceeded ? "succeeded" : "failed";
          p.exit_code = st->exit_code;
          p.signal = st->signal;
          p.reason = st->reason;
          p.finished_ms = st->finished_at ? unixMillis(*st->finished_at) : nowMs();
          writes_.changed(name);
        }
      }
      if (p.phase == "running") running = true;
      if (p.phase == "failed") failed = true;
    }
    // An engine that cannot be reached: the workload is unknown (its quota and its GPU time go
    // on) until it answers again; asked again at every poll.
    if (lost && r.state == "running") {
      r.state = "unknown";
      r.reason = "ExecutorUnreachable";
      r.message = lost->message;
      noteEvent("Unknown", name, r.admission ? r.admission->cluster_queue : "",
                "ExecutorUnreachable", lost->message, "");
      writes_.changed(name);
    } else if (!lost && r.state == "unknown") {
      r.state = "running";
      r.reason.clear();
      r.message.clear();
      noteEvent("Running", name, r.admission ? r.admission->cluster_queue : "", "ExecutorReachable",
                "its executor answers again", "");
      writes_.changed(name);
    }
    if (failed && running) {
      // One pod failed: the others are stopped (the workload has failed; none is retried).
      for (auto& p : r.pods) {
        exec::Executor* executor = executorNamed(p.executor);
        if (p.phase == "running" && executor) {
          (void)executor->stop(p.handle, options_.termination_grace);
        }
      }
    }
    if (!running && !lost) ended.push_back(name);
  }
  for (const auto& name : ended) {
    Record& r = records_.at(name);
    const PodRun* decisive = nullptr;
    for (const auto& p : r.pods) {
      if (p.phase == "failed" && (decisive == nullptr || p.finished_ms < decisive->finished_ms)) {
        decisive = &p;
      }
    }
    if (decisive != nullptr) {
      endRun(r, true, decisive->reason == "OOMKilled" ? "OOMKilled" : "PodFailed",
             fmt::format("pod {}-{} {}", decisive->pod_set, decisive->index, endOf(*decisive)));
    } else {
      endRun(r, false, "Completed", fmt::format("{} pod(s) exited with code 0", r.pods.size()));
    }
  }
}

// Ends `r` (running, or failing to start): GPU time charged to its pods' end, quota released,
// written as ended.
void FleetService::endRun(Record& r, bool failed, const std::string& reason,
                          const std::string& message) {
  int64_t end = r.started_ms;
  const PodRun* decisive = nullptr;
  for (const auto& p : r.pods) {
    end = std::max(end, p.finished_ms);
    if (p.phase == "failed" && (decisive == nullptr || p.finished_ms < decisive->finished_ms)) {
      decisive = &p;
    }
  }
  if (decisive == nullptr && !r.pods.empty()) decisive = &r.pods.back();
  if (auto tx = meter(r, std::max(end, r.metered_until_ms))) writes_.metered(std::move(*tx));
  gpu_.forget(r.spec.name);
  releaseGpu(r);
  if (decisive != nullptr) {
    if (decisive->exit_code) {
      r.exit_code = decisive->exit_code;
    } else if (decisive->signal) {
      r.exit_code = 128 + *decisive->signal;  // as a shell reports a death by signal
    }
    exec::Executor* executor = executorNamed(decisive->executor);
    if (auto tail = executor ? executor->logTail(decisive->handle, options_.log_tail_bytes)
                             : Result<std::string>(fail(Error()))) {
      r.log_tail = std::move(*tail);
    }
  }
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
  for (const auto& p : r.pods) {
    if (exec::Executor* e = executorNamed(p.executor); e && p.phase != "running")
      e->forget(p.handle);
  }
  just_ended_[name] = r;
  writes_.ended(std::move(r));
  records_.erase(name);
  writes_.forget(name);
}

// After a restart: the pods the store says were running are the executor's to find again; one
// it no longer knows has ended while Purser was away.
void FleetService::adopt() {
  for (auto& [name, r] : records_) {
    if (r.state != "running") continue;
    for (auto& p : r.pods) {
      if (p.phase != "running") continue;
      const exec::Adopted a{p.handle, p.pid, p.pid_start,
                            SystemTime(std::chrono::milliseconds(p.started_ms))};
      exec::Executor* executor = executorNamed(p.executor);
      if (executor == nullptr) {
        spdlog::warn("fleet: pod {} of {} ran on executor \"{}\", which is not configured now",
                     p.handle, name, p.executor);
        continue;
      }
      if (auto adopted = executor->adopt(a); !adopted) {
        spdlog::warn("fleet: pod {} of {} cannot be adopted: {}", p.handle, name,
                     adopted.error().message);
      }
    }
  }
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
