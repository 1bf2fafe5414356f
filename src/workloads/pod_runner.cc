// PodRunner: see pod_runner.h.
#include "workloads/pod_runner.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "exec/command.h"
#include "workloads/executor_slots.h"
#include "workloads/gpu_meter.h"

namespace purser::workloads {

std::map<std::string, std::string> podEnvironment(const Record& r, const std::string& pod_set,
                                                  int64_t index, const fleet::Placer* placer) {
  std::map<std::string, std::string> env = {
      {"PURSER_WORKLOAD", shownText(r.spec.name)},
      {"PURSER_NAMESPACE", shownText(r.spec.namespace_)},
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
    if (placer != nullptr && spec != nullptr && !p.gpus.empty()) {
      if (auto placed = placer->environment(p, spec->requests)) {
        for (const auto& [k, v] : *placed) env[k] = v;
      }
    } else if (p.gpus.empty()) {
      // A pod placed without GPUs sees none (not the machine's).
      env["CUDA_VISIBLE_DEVICES"] = "";
    }
  }
  return env;
}

std::string replicaId(const Record& r, const PodRun& p) {
  return fmt::format("{}/{}-{}", shownText(r.spec.name), p.pod_set, p.index);
}

namespace {

// Pod `index` of pod set `ps` of `r`, as its executor is asked to start it (all but its account).
exec::PodLaunch launchOf(const Record& r, const fleet::PodSet& ps, int64_t index,
                         const fleet::Placer* placer, const std::string& installation) {
  exec::PodLaunch launch;
  launch.workload = shownText(r.spec.name);
  launch.pod_set = ps.name;
  launch.index = index;
  launch.argv = ps.command;
  launch.working_dir = ps.working_dir;
  launch.env = ps.env;
  for (auto& [k, v] : podEnvironment(r, ps.name, index, placer)) launch.env[k] = v;
  if (auto g = ps.requests.find(kGpu); g != ps.requests.end()) launch.gpus = g->second / 1000;
  if (auto c = ps.requests.find("cpu"); c != ps.requests.end()) launch.cpu_milli = c->second;
  if (auto m = ps.requests.find("memory"); m != ps.requests.end()) {
    launch.memory_bytes = m->second / 1000;
  }
  if (auto n = launch.env.find("PURSER_NODE"); n != launch.env.end()) launch.node = n->second;
  launch.image = ps.image;
  launch.queue = r.spec.local_queue;
  launch.time_limit_seconds = r.spec.max_execution_seconds;
  launch.key = fmt::format("{}-{}-{}", installation, r.seq, r.runs);
  launch.team = r.spec.namespace_;
  if (auto l = ps.limits.find("memory"); l != ps.limits.end()) {
    launch.memory_limit_bytes = l->second / 1000;
  }
  if (auto l = ps.limits.find("cpu"); l != ps.limits.end()) launch.cpu_limit_milli = l->second;
  if (!r.external.empty()) launch.existing = r.external.substr(r.external.find(':') + 1);
  if (r.admission) {
    for (const auto& a : r.admission->pod_sets) {
      if (a.name == ps.name && static_cast<size_t>(index) < a.placements.size()) {
        launch.gpu_indices = a.placements[static_cast<size_t>(index)].gpus;
      }
      for (const auto& p : a.placements) launch.placement[a.name].push_back(p.node);
    }
  }
  return launch;
}

// How a pod's end reads: "exited with code 3", "was killed by signal 9".
std::string endOf(const PodRun& p) {
  if (p.reason == "OOMKilled") {
    return fmt::format("was killed for going over its memory limit (OOMKilled, exit code {})",
                       p.exit_code.value_or(137));
  }
  if (p.signal) return fmt::format("was ended by signal {}", *p.signal);
  return fmt::format("exited with code {}", p.exit_code.value_or(-1));
}

// The pod whose end decided the run: the first to fail.
const PodRun* firstFailed(const Record& r) {
  const PodRun* decisive = nullptr;
  for (const auto& p : r.pods) {
    if (p.phase == "failed" && (decisive == nullptr || p.finished_ms < decisive->finished_ms)) {
      decisive = &p;
    }
  }
  return decisive;
}

}  // namespace

PodRunner::PodRunner(Deps deps, Options options)
    : d_(std::move(deps)),
      options_(std::move(options)),
      stopping_(d_.executors, options_.termination_grace) {
  if (d_.served != nullptr) {
    in_flight_ = [served = d_.served](const std::string& route, const std::string& replica) {
      return served->inFlight(route, replica);
    };
  }
}

std::string PodRunner::queueOf(const Record& r) const {
  return r.admission ? r.admission->cluster_queue : "";
}

std::string PodRunner::executorFor(const Record& r) const {
  if (!r.external.empty()) return r.external.substr(0, r.external.find(':'));
  if (!r.admission) return "local";
  return executorOf(r.admission->pod_sets, options_.flavor_executors);
}

bool PodRunner::runsPods(const Record& r) const {
  const bool kubernetes = executorFor(r) == "kubernetes";
  for (const auto& ps : r.spec.pod_sets) {
    if (!ps.command.empty() || (kubernetes && !ps.image.empty())) return true;
  }
  return false;
}

bool PodRunner::mayStart(const Record& r, int64_t now_ms) const {
  if (r.admission && stopping_.blocks(*r.admission)) return false;
  auto backoff = backoff_.find(r.spec.name);
  return backoff == backoff_.end() || now_ms >= backoff->second.first;
}

std::optional<std::string> PodRunner::start(Record& r, int64_t now_ms, bool resumed,
                                            const fleet::Placer* placer) {
  r.pods.clear();
  const std::string queue = queueOf(r);
  const std::string executor_name = executorFor(r);
  exec::Executor* executor = d_.executors(executor_name);
  std::string failure;
  if (executor == nullptr) {
    failure = fmt::format("this Purser has no executor \"{}\" to run pods on", executor_name);
  }
  if (executor != nullptr && executor_name == "kubernetes" && r.external.empty() &&
      !r.manifest.empty()) {
    // Submitted as a Job, JobSet or PyTorchJob: that object is created once, then released (and
    // suspended, and released again) like one a user applied.
    auto key = executor->create(r.manifest, shownText(r.spec.namespace_));
    if (key) {
      r.external = executor_name + ":" + *key;
    } else {
      failure = fmt::format("its object could not be created: {}", key.error().message);
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
      exec::PodLaunch launch = launchOf(r, ps, i, placer, options_.installation);
      if (executor_name == "local") {
        auto uid = d_.account_of(r.team_id.empty() ? "namespace:" + r.spec.namespace_ : r.team_id);
        if (!uid) {
          failure = fmt::format("pod {}-{} has no account to run as: {}", ps.name, i,
                                uid.error().message);
          break;
        }
        launch.uid = *uid;
      }
      auto handle = executor->start(launch);
      if (!handle && handle.error().code == ErrorCode::kResourceExhausted) {
        // The executor is full: what started is let go, and it waits for room.
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
          d_.note("Waiting", r.spec.name, queue, r.reason, r.message);
        }
        // Tried again after a while, longer each time (1 s doubling to a minute), never at
        // every poll.
        auto& [next, delay] = backoff_[r.spec.name];
        delay = delay == 0 ? 1000 : std::min<int64_t>(delay * 2, 60'000);
        next = now_ms + delay;
        return std::nullopt;
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
      pod.started_ms = now_ms;
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
    r.started_ms = now_ms;
    r.metered_until_ms = now_ms;
    return failure;
  }
  r.state = "running";
  r.launching = false;
  // Its GPU time counts from its launch (the first try's, for a run resumed after a kill: its
  // pods ran while no Purser watched them) or its pods' first start, whichever came first.
  if (!resumed || r.started_ms <= 0 || r.started_ms > now_ms) r.started_ms = now_ms;
  for (const auto& p : r.pods) r.started_ms = std::min(r.started_ms, p.started_ms);
  r.metered_until_ms = r.started_ms;
  d_.note("Started", r.spec.name, queue, "PodsStarted",
          fmt::format("{} pod(s) started (run {})", r.pods.size(), r.runs));
  return std::nullopt;
}

void PodRunner::stop(Record& r, const std::string& why, int64_t now_ms) {
  backoff_.erase(r.spec.name);
  for (const auto& p : r.pods) {
    if (p.phase != "running") continue;
    exec::Executor* executor = d_.executors(p.executor);
    if (executor == nullptr) continue;
    StoppingPods::Pod s{r.spec.name, p.executor, p.handle, std::nullopt};
    if (p.serving && d_.served && r.spec.serve) {
      // Out of the route first; signalled once what it serves now is done.
      s.route = r.spec.serve->route;
      s.replica = replicaId(r, p);
      s.signalled = false;
      s.drain_until_ms =
          now_ms +
          std::chrono::duration_cast<std::chrono::milliseconds>(options_.termination_grace).count();
      d_.served->leave(s.route, s.replica);
      d_.note("Draining", r.spec.name, queueOf(r), why,
              fmt::format("pod {}-{} left route {}; stopped once its requests are done", p.pod_set,
                          p.index, s.route));
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
  for (auto& p : r.pods) {
    if (p.phase != "running") continue;
    p.phase = "stopped";
    p.serving = false;
    p.finished_ms = now_ms;
  }
}

void PodRunner::pollStopping(int64_t now_ms) { stopping_.poll(in_flight_, now_ms); }

PodRunner::Watched PodRunner::watch(Record& r, int64_t now_ms) {
  Watched out;
  bool running = false, failed = false;
  std::optional<Error> lost;  // the executor could not be asked
  for (auto& p : r.pods) {
    if (p.phase == "running") {
      exec::Executor* executor = d_.executors(p.executor);
      auto st = executor ? executor->status(p.handle) : Result<exec::PodStatus>(fail(Error()));
      if (!st && st.error().code == ErrorCode::kUnavailable) {
        lost = st.error();
      } else if (!st) {
        // The executor does not know it (nor can it learn of it): ended, with no code.
        p.phase = "failed";
        p.finished_ms = now_ms;
        out.changed = true;
      } else if (st->phase != exec::PodPhase::kRunning) {
        if (p.serving && d_.served && r.spec.serve) {
          d_.served->leave(r.spec.serve->route, replicaId(r, p));
          p.serving = false;
        }
        p.phase = st->phase == exec::PodPhase::kSucceeded ? "succeeded" : "failed";
        p.exit_code = st->exit_code;
        p.signal = st->signal;
        p.reason = st->reason;
        p.finished_ms = st->finished_at ? unixMillis(*st->finished_at) : now_ms;
        out.changed = true;
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
    d_.note("Unknown", r.spec.name, queueOf(r), "ExecutorUnreachable", lost->message);
    out.changed = true;
  } else if (!lost && r.state == "unknown") {
    r.state = "running";
    r.reason.clear();
    r.message.clear();
    d_.note("Running", r.spec.name, queueOf(r), "ExecutorReachable", "its executor answers again");
    out.changed = true;
  }
  if (failed && running) {
    // One pod failed: the others are stopped (the workload has failed; none is retried).
    for (auto& p : r.pods) {
      exec::Executor* executor = d_.executors(p.executor);
      if (p.phase == "running" && executor) {
        (void)executor->stop(p.handle, options_.termination_grace);
      }
    }
  }
  out.ended = !running && !lost;
  return out;
}

bool PodRunner::serve(Record& r) {
  constexpr int kMaxHealthFailures = 3;
  if (d_.served == nullptr || !r.spec.serve || r.state != "running") return false;
  const fleet::ServeSpec& serve = *r.spec.serve;
  const std::string queue = queueOf(r);
  bool changed = false;
  for (auto& p : r.pods) {
    if (p.phase != "running") continue;
    exec::Executor* executor = d_.executors(p.executor);
    const auto host = executor ? executor->address(p.handle) : std::nullopt;
    if (!host) continue;  // not reachable (yet)
    const int port = static_cast<int>(serve.port + p.index);
    const bool healthy = exec::httpOk(*host, port, serve.health, std::chrono::milliseconds(300));
    if (p.serving) {
      p.health_failures = healthy ? 0 : p.health_failures + 1;
      if (p.health_failures < kMaxHealthFailures) continue;
      d_.served->leave(serve.route, replicaId(r, p));
      p.serving = false;
      p.health_failures = 0;
      d_.note("NotServing", r.spec.name, queue, "ReplicaUnhealthy",
              fmt::format("pod {}-{} failed its health check {} times in a row and left route {}",
                          p.pod_set, p.index, kMaxHealthFailures, serve.route));
      changed = true;
      continue;
    }
    if (!healthy) continue;
    const std::string where = host->find(':') != std::string::npos
                                  ? fmt::format("[{}]:{}", *host, port)  // IPv6
                                  : fmt::format("{}:{}", *host, port);
    const std::string base =
        fmt::format("http://{}{}", where, serve.api == "anthropic" ? "" : "/v1");
    const std::string metrics =
        serve.metrics.empty() ? "" : fmt::format("http://{}{}", where, serve.metrics);
    auto joined = d_.served->join(serve.route, replicaId(r, p), base, serve.api, serve.model,
                                  metrics, serve.engine, {r.tenant_id, r.team_id});
    if (!joined) {
      const std::string why =
          joined.error().code == ErrorCode::kNotFound ? "RouteMissing" : "NotAllowedToServe";
      if (r.reason != why) {
        r.reason = why;
        r.message = joined.error().message;
        d_.note("NotServing", r.spec.name, queue, r.reason, r.message);
        changed = true;
      }
      continue;
    }
    p.serving = true;
    d_.note("Serving", r.spec.name, queue, "ReplicaReady",
            fmt::format("pod {}-{} serves route {} at {}", p.pod_set, p.index, serve.route, where));
    changed = true;
  }
  return changed;
}

PodRunner::Outcome PodRunner::outcome(const Record& r) {
  if (const PodRun* decisive = firstFailed(r)) {
    return {true, decisive->reason == "OOMKilled" ? "OOMKilled" : "PodFailed",
            fmt::format("pod {}-{} {}", decisive->pod_set, decisive->index, endOf(*decisive))};
  }
  return {false, "Completed", fmt::format("{} pod(s) exited with code 0", r.pods.size())};
}

int64_t PodRunner::runEnd(const Record& r) {
  int64_t end = r.started_ms;
  for (const auto& p : r.pods) end = std::max(end, p.finished_ms);
  return end;
}

void PodRunner::finish(Record& r) {
  backoff_.erase(r.spec.name);
  const PodRun* decisive = firstFailed(r);
  if (decisive == nullptr && !r.pods.empty()) decisive = &r.pods.back();
  if (decisive != nullptr) {
    if (decisive->exit_code) {
      r.exit_code = decisive->exit_code;
    } else if (decisive->signal) {
      r.exit_code = 128 + *decisive->signal;  // as a shell reports a death by signal
    }
    exec::Executor* executor = d_.executors(decisive->executor);
    if (auto tail = executor ? executor->logTail(decisive->handle, options_.log_tail_bytes)
                             : Result<std::string>(fail(Error()))) {
      r.log_tail = std::move(*tail);
    }
  }
  for (const auto& p : r.pods) {
    if (exec::Executor* e = d_.executors(p.executor); e && p.phase != "running") {
      e->forget(p.handle);
    }
  }
}

void PodRunner::adopt(const std::map<std::string, Record>& records) {
  for (const auto& [name, r] : records) {
    if (r.state != "running") continue;
    for (const auto& p : r.pods) {
      if (p.phase != "running") continue;
      const exec::Adopted a{p.handle, p.pid, p.pid_start,
                            SystemTime(std::chrono::milliseconds(p.started_ms))};
      exec::Executor* executor = d_.executors(p.executor);
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

}  // namespace purser::workloads
