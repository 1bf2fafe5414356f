// LocalExecutor: pods as processes of this machine — the embedded default, for one machine.
//
// Each pod is three processes in a process group of their own: a small supervisor (a fork of
// Purser that never execs and makes only async-signal-safe calls), under it the pod's init, and
// under that the pod's argv (PATH searched), with the environment it was given and nothing else
// of Purser's. Under isolation (sandbox.h) the init is PID 1 of the pod's own namespaces: it
// raises the pod's view, puts the pod under its team's account, reaps what the pod leaves, and
// when the pod's first process ends, everything else in the namespace goes with it. The pod's
// cgroups (cgroups.h) hold it to limits.memory (else its memory request), limits.cpu and a cap on
// its processes; a pod its memory limit killed ends kFailed with reason OOMKilled and exit 137.
//
// The supervisor ignores SIGTERM, writes the pod's stdout and stderr to <log_dir>/<handle>.log —
// outside every pod's view, never through a link — bounded (past max_log_bytes the file becomes
// <handle>.log.1, replacing any earlier one, and a new one begins), and, once the pod has ended,
// writes how it ended to <handle>.exit and kills whatever the pod left in its group. So a pod
// outlives a Purser that dies or restarts: its output still reaches its log, its end is still
// known, and a new executor adopt()s it by the process group and start time recorded at start. A
// start under a key (PodLaunch::key) writes the supervisor's pid to <handle>.pid before anything
// else, so a second start under that key (another Purser taking over the directory) adopts the
// pod instead. Exit code 0 is kSucceeded; any other, or death by a signal, kFailed.
//
// With a workspace root, each team's pods work in <root>/<team> (made for the team, owned by its
// account, mode 0700): a pod's workingDir must be an absolute path inside it, reached without
// following a link; missing directories are made.
//
// A thread waits on the pods' pidfds to tell on_change at once when one ends.
//
// Thread-safe. The destructor leaves pods running (a restart adopts them) unless
// stop_on_close is set, in which case it kills every group it knows and reaps it.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "exec/cgroups.h"
#include "exec/executor.h"
#include "exec/sandbox.h"

namespace purser::exec {

struct LocalExecutorOptions {
  std::string log_dir;                     // must exist; Purser's alone (mode 0700)
  size_t max_log_bytes = 8 * 1024 * 1024;  // per file; a pod keeps at most two
  uint64_t max_memory_bytes = 0;           // RLIMIT_AS per process; 0: none
  uint64_t max_cpu_seconds = 0;            // RLIMIT_CPU per process; 0: none
  std::string default_working_dir;         // without a workspace root: where pods run ("" ours)
  bool stop_on_close = false;              // kill every pod when the executor is destroyed
  size_t max_pods = 1024;  // pods running at once; start() beyond is kResourceExhausted
  // Called (from the executor's own thread) when a pod's process has ended, so its end is read
  // at once instead of at the next poll.
  std::function<void()> on_change;
  // The wall around each pod (sandbox.h); kNone runs pods as Purser, seeing what it sees.
  Isolation isolation = Isolation::kNone;
  SandboxOptions sandbox;
  // Non-empty: every start is refused with this reason (the isolation asked for is not possible
  // here, and `none` was not written).
  std::string refused;
  // Where teams' workspaces are (<root>/<team>); "" for none (a pod's working_dir is used as it
  // is). Required with isolation.
  std::string workspace_root;
  // The pods' cgroups (none: rlimits stand in for the memory limit).
  PodCgroups cgroups;
  int64_t pids_limit = 4096;      // processes and threads of one pod at once; 0: none
  int64_t tmp_bytes = 1ll << 30;  // each pod's /tmp and /dev/shm, at most (counted as memory)
  // The files of ended pods (logs, exit and pid files) are removed once this old (and once the
  // executor no longer follows the pod); 0 keeps them.
  Duration file_retention = std::chrono::hours(24 * 7);
  // The GPU share shim preloaded into pods that hold a share (gpu_share_env.h); "" refuses them.
  std::string gpu_share_library;
};

class LocalExecutor final : public Executor {
 public:
  LocalExecutor(const Clock& clock, LocalExecutorOptions options);
  ~LocalExecutor() override;
  LocalExecutor(const LocalExecutor&) = delete;
  LocalExecutor& operator=(const LocalExecutor&) = delete;

  Result<std::string> start(const PodLaunch& pod) override;
  Result<PodStatus> status(const std::string& handle) override;
  Result<void> stop(const std::string& handle, Duration grace) override;
  Result<std::string> logTail(const std::string& handle, size_t max_bytes) override;
  Result<void> adopt(const Adopted& pod) override;
  void forget(const std::string& handle) override;
  std::optional<std::string> address(const std::string& handle) override;
  std::optional<std::pair<int64_t, int64_t>> identity(const std::string& handle) override;

  // Blocks until the pod has ended and its output is all in its log (for shutdown and tests).
  Result<PodStatus> wait(const std::string& handle);
  // The process group of a pod (its supervisor's pid), while known.
  std::optional<pid_t> processGroup(const std::string& handle);
  // A team's workspace (made, owned by `uid`, when missing), for the fleet's views and tests.
  Result<std::string> workspaceOf(const std::string& team, int64_t uid);

 private:
  struct Pod;
  // Claims a keyed start's handle: its pid file, open for the supervisor to write its pid to; or
  // nullopt when it was claimed before, and that pod is adopted.
  Result<std::optional<int>> claim(const std::string& handle);
  // Lets go of a claim whose pod did not start.
  void unclaim(int& pid_fd, const std::string& handle);
  void refreshLocked(Pod& pod);
  // The pod's working directory, opened without following a link (O_PATH), and its path.
  Result<std::pair<int, std::string>> openWorkingDir(const PodLaunch& pod);
  Result<int> openWorkspace(const std::string& team, int64_t uid);
  void escalateLocked(Pod& pod);
  std::string pathOf(const std::string& handle, const char* suffix) const;
  void watchLoop();
  void wake();

  const Clock& clock_;
  const LocalExecutorOptions options_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Pod>> pods_;  // guarded by mu_
  int64_t next_ = 0;                                  // guarded by mu_
  int64_t swept_ms_ = 0;  // guarded by mu_: when ended pods' files were last looked at
  // Removes files of pods it no longer follows that are older than file_retention (mu_ held).
  void sweepLocked();
  int wake_[2] = {-1, -1};  // wakes the watcher when pods come or it must end
  bool ending_ = false;     // guarded by mu_
  std::thread watcher_;     // waits on the pods' pidfds, calls on_change when one ends
  std::string view_base_;   // <log_dir>/.view: where sandboxes build their views
  // This process's argument and environment areas ([start, end) addresses, from /proc/self/stat),
  // which a pod's init blanks so that its /proc/1/cmdline and environ say nothing of Purser's.
  uintptr_t args_[2] = {0, 0}, env_[2] = {0, 0};
};

}  // namespace purser::exec
