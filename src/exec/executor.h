// Executors run what the fleet admitted: one pod of a workload at a time, on whatever engine a
// pool uses (local processes, Slurm batch jobs, Kubernetes Jobs). The fleet service starts pods
// with what their admission decided, polls them, and stops them on preemption or deletion; an
// executor never decides anything.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "fleet/inventory.h"

namespace purser::exec {

// One pod to run.
struct PodLaunch {
  std::string workload;  // "namespace/name"
  std::string pod_set;
  int64_t index = 0;                       // the pod's index within its pod set
  std::vector<std::string> argv;           // the container's command followed by its args
  std::string working_dir;                 // empty: the executor's default
  std::map<std::string, std::string> env;  // the template's env, then the admission's
  // What the pod was admitted with, for engines that allocate it themselves (Slurm).
  int64_t gpus = 0;                // whole GPUs
  int64_t cpu_milli = 0;           // CPU, in thousandths
  int64_t memory_bytes = 0;        // memory
  std::string node;                // the node it was placed on; empty: wherever the engine likes
  std::string image;               // the container image (Kubernetes); others ignore it
  std::string queue;               // the workload's LocalQueue (Kubernetes labels the Job with it)
  int64_t time_limit_seconds = 0;  // how long it may run (Slurm's --time); 0: no limit
  // The engine's own object to release instead of creating one (a Found key, for work users
  // handed the engine directly); every pod of the workload names it, and it is released once.
  std::string existing;
  // The nodes of every pod set's placements, in order (to release an existing object whole).
  std::map<std::string, std::vector<std::string>> placement;
  // Names this start, so that starting it again is not a second pod: an executor that honours it
  // (the local one) gives the pod a handle made from it, and a start under a key it finds
  // already started takes that pod back instead (a fleet taken over after its leader died in the
  // middle of a start). Empty: every start is a new pod.
  std::string key;
  // Who runs it and where, for executors that run it on this machine (the local one): its team
  // (the workspace it works in), that team's account, the memory and CPU it is held to (its
  // template's limits; 0: the request's memory, no CPU cap) and the device indices of its GPUs.
  std::string team;
  int64_t uid = 0;  // 0: the executor's default (nobody)
  int64_t memory_limit_bytes = 0;
  int64_t cpu_limit_milli = 0;
  std::vector<int> gpu_indices;
};

// Work users handed an engine directly, for the fleet to queue and run there (Kubernetes Jobs
// applied with Kueue's queue-name label).
struct Found {
  std::string key;       // the object's identity on the engine ("namespace/name/uid")
  std::string manifest;  // the object as JSON, status left out; empty: it is gone
};

enum class PodPhase { kRunning, kSucceeded, kFailed };
const char* podPhaseName(PodPhase phase);

struct PodStatus {
  PodPhase phase = PodPhase::kRunning;
  std::optional<int> exit_code;  // once it exited
  std::optional<int> signal;     // once it was ended by a signal
  // Why it ended, where the engine says more than the code: "OOMKilled" (its memory limit ended
  // it; exit_code 137, as Kubernetes reports it).
  std::string reason;
  SystemTime started_at{};
  std::optional<SystemTime> finished_at;
  bool stopping = false;  // asked to stop, not yet gone
};

// A pod started before a restart, as the store remembers it.
struct Adopted {
  std::string handle;
  int64_t pid = 0;        // a local pod's process group
  int64_t pid_start = 0;  // when that process started (clock ticks since boot), against pid reuse
  SystemTime started_at{};
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Starts the pod; its handle names it in later calls. Fails, changing nothing, when it cannot
  // be started (a missing program, an unusable working directory).
  virtual Result<std::string> start(const PodLaunch& pod) = 0;
  // Where the pod is now; an unknown handle is kNotFound.
  virtual Result<PodStatus> status(const std::string& handle) = 0;
  // Asks the pod to stop: a polite signal now, a forceful one once `grace` has passed (at a later
  // status() or stop() call). Stopping a pod that has ended does nothing.
  virtual Result<void> stop(const std::string& handle, Duration grace) = 0;
  // What the pod wrote (stdout and stderr together), at most `max_bytes` of its end; also of pods
  // that ended before a restart, while their logs are kept.
  virtual Result<std::string> logTail(const std::string& handle, size_t max_bytes) = 0;
  // Takes back a pod this executor started before a restart: from now on status() and stop()
  // know it. One that ended meanwhile is reported as it ended (or kFailed, when how is lost).
  virtual Result<void> adopt(const Adopted& pod) = 0;
  // The executor may let go of a pod that has ended and whose end has been read (its log stays).
  virtual void forget(const std::string& handle) { (void)handle; }
  // The nodes of the engine's cluster, for the fleet's inventory (Kubernetes' Nodes, Slurm's
  // nodes), as last read; nullopt for an executor that reports none. May block to read them the
  // first time; an error when they have never been read.
  virtual std::optional<Result<std::vector<fleet::InventoryNode>>> nodes() { return std::nullopt; }
  // Where the pod can be reached (its IP address or host name), once the engine says; nullopt
  // before that, or for a pod that is one of several sharing a handle.
  virtual std::optional<std::string> address(const std::string& handle) {
    (void)handle;
    return std::nullopt;
  }
  // What users handed the engine since the last call (none for engines without such a door).
  virtual std::vector<Found> takeFound() { return {}; }
  // Creates a workload's own object (a Job, JobSet or PyTorchJob as JSON) in namespace `ns`,
  // suspended, to be released like a found one; its Found key. kUnimplemented where the engine
  // has no such objects.
  virtual Result<std::string> create(const std::string& object_json, const std::string& ns) {
    (void)object_json;
    (void)ns;
    return fail(Error(ErrorCode::kUnimplemented, "this executor runs pods, not objects"));
  }
  // A found object's work was deleted through Purser: the engine's object goes too.
  virtual void discard(const std::string& key) { (void)key; }
  // A local pod's process group and its start time (to adopt it later); nullopt elsewhere.
  virtual std::optional<std::pair<int64_t, int64_t>> identity(const std::string& handle) {
    (void)handle;
    return std::nullopt;
  }
};

}  // namespace purser::exec
