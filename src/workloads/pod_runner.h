// PodRunner: a workload's pods on their executors — a part of FleetService (fleet_service.h) that
// runs on its thread, testable without one. The service decides when a run starts and ends and
// writes the records; the runner does what that means for the pods:
//
//   - start(): one pod per placement of every pod set that runs something, each told its
//     placement and Purser's identity (podEnvironment()), run as its team's account (local
//     executor), under a key (installation-seq-run) that makes a second start of the same run —
//     by the next leader, after a kill — take back the pods that did start instead of starting
//     them twice. An executor with no room: what started is let go, and the workload waits,
//     tried again after 1 s, doubling to a minute (mayStart()). A pod that cannot start: what
//     started is stopped, and the failure is returned (the service ends the workload).
//   - stop(): running pods stop in the background and hold their GPUs until gone (its part
//     StoppingPods); a serving replica leaves its route first and is drained.
//   - watch(): a run's pods as their executor reports them. One pod failed: the others are
//     stopped. An executor that cannot be asked: the workload is "unknown" (its quota and GPU
//     time go on) until it answers again.
//   - serve(): running replicas that answer their health check join their route; one that fails
//     it three times in a row leaves it until it answers again.
//   - finish(), outcome(): how a run ended (the pod that decided it), its exit code and the end
//     of its log; the executors forget the ended pods.
//   - adopt(): after a restart, the pods the store says run are their executors' to find again.
//
// Every change of a workload's life is noted through Deps::note (the service's events). Not
// thread-safe: the fleet service's thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/result.h"
#include "exec/executor.h"
#include "fleet/inventory.h"
#include "workloads/record.h"
#include "workloads/served_routes.h"
#include "workloads/stopping_pods.h"

namespace purser::workloads {

// What an executor sets for pod `index` of pod set `pod_set` of `r` beyond the template's env:
// the placement's (CUDA_VISIBLE_DEVICES, HAMi-core's limits, through `placer`; a pod placed
// without GPUs sees none) and Purser's identity (PURSER_*, JOB_COMPLETION_INDEX).
std::map<std::string, std::string> podEnvironment(const Record& r, const std::string& pod_set,
                                                  int64_t index, const fleet::Placer* placer);

// The name a serving pod has among its route's replicas: "namespace/name/podset-index".
std::string replicaId(const Record& r, const PodRun& p);

class PodRunner {
 public:
  // The account (uid) the local pods of a team run as ("namespace:NS" for a namespace no team
  // owns), made when it has none.
  using AccountOf = std::function<Result<int64_t>(const std::string& team)>;
  // An event of a workload's life: kind, workload, ClusterQueue, reason, message.
  using Note =
      std::function<void(std::string kind, const std::string& workload, std::string cluster_queue,
                         std::string reason, std::string message)>;
  struct Deps {
    StoppingPods::ExecutorOf executors;
    AccountOf account_of;
    Note note;
    ServedRoutes* served = nullptr;  // none: serving workloads run and join nothing
  };
  struct Options {
    Duration termination_grace = std::chrono::seconds(30);
    size_t log_tail_bytes = 4096;
    std::string installation;  // in every start's key
    // ResourceFlavor → the executor its workloads run on (those not listed: "local").
    std::map<std::string, std::string> flavor_executors;
  };

  PodRunner(Deps deps, Options options);

  // The executor `r` runs on: the engine it was found on, else its admitted GPU flavor's.
  std::string executorFor(const Record& r) const;
  // Whether `r` runs pods at all: a pod set with a command does anywhere; one with only an image,
  // only on Kubernetes. (A workload that runs nothing holds its quota until it is deleted.)
  bool runsPods(const Record& r) const;

  // Whether `r`, admitted, may start at `now_ms`: not placed on a GPU a stopping pod still holds,
  // and not waiting for room on its executor.
  bool mayStart(const Record& r, int64_t now_ms) const;
  // Starts run `r.runs` of `r` (admitted; its start recorded). Running: its pods listed, state
  // "running", GPU time counted from its first pod's start (or, `resumed`, from the first try's
  // launch). No room: nothing runs, reason WaitingForExecutor, tried again later. Returns the
  // failure that ends it, when a pod could not start.
  std::optional<std::string> start(Record& r, int64_t now_ms, bool resumed,
                                   const fleet::Placer* placer);
  // `r` left the admitted state (started, ended): it no longer waits for room.
  void settled(const std::string& workload) { backoff_.erase(workload); }

  // Stops `r`'s running pods for reason `why`; they show as "stopped" and stay on the record
  // (their logs with them) until the next run starts. A wait for room on its executor ends with
  // it (an evicted workload admitted again starts afresh).
  void stop(Record& r, const std::string& why, int64_t now_ms);
  // Pods stopping in the background: drained replicas are signalled, gone ones free their GPUs.
  void pollStopping(int64_t now_ms);
  // The service stops: every replica still draining is signalled.
  void signalAll() { stopping_.signalAll(); }

  struct Watched {
    bool changed = false;  // the record changed (to be written)
    bool ended = false;    // no pod runs and its executor answers: the run is over
  };
  // Asks the executors about `r`'s running pods (r running or unknown).
  Watched watch(Record& r, int64_t now_ms);
  // Joins `r`'s healthy running replicas to its route, and takes failing ones out; true when the
  // record changed.
  bool serve(Record& r);

  struct Outcome {
    bool failed = false;
    std::string reason, message;  // Completed, PodFailed or OOMKilled, and what happened
  };
  // How `r`'s run ended, its pods all ended: its first failed pod decides, else it completed.
  static Outcome outcome(const Record& r);
  // When `r`'s run ended: its last pod's end (its start, when none ran).
  static int64_t runEnd(const Record& r);
  // The run is over: `r` takes the deciding pod's exit code (128 + signal for a death by signal)
  // and the end of its log; the executors forget the ended pods, and the runner the workload.
  void finish(Record& r);
  // After a restart: running pods are adopted by their executors (those that cannot be are
  // logged, and found ended at the next watch).
  void adopt(const std::map<std::string, Record>& records);

  size_t stopping() const { return stopping_.size(); }

 private:
  std::string queueOf(const Record& r) const;

  Deps d_;
  const Options options_;
  StoppingPods stopping_;
  StoppingPods::InFlight in_flight_;  // over Deps::served; none without it
  // Workloads whose pods found no room on their executor: (when to try again, the delay) in ms.
  std::map<std::string, std::pair<int64_t, int64_t>> backoff_;
};

}  // namespace purser::workloads
