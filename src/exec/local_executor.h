// LocalExecutor: pods as processes of this machine — the embedded default, for one machine.
//
// Each pod is a pair of processes in a process group of their own: a small supervisor (a fork of
// Purser that never execs and makes only async-signal-safe calls) and, under it, the pod's argv
// (PATH searched), with the environment it was given and nothing else of Purser's (not Purser's
// own keys). The supervisor ignores SIGTERM, writes the pod's stdout and stderr to
// <log_dir>/<handle>.log, bounded (past max_log_bytes the file becomes <handle>.log.1, replacing
// any earlier one, and a new one begins), and, once the pod has exited, writes how it ended to
// <handle>.exit and kills whatever the pod left in its group. So a pod outlives a Purser that
// dies or restarts: its output still reaches its log, its end is still known, and a new executor
// adopt()s it by the process group and start time recorded at start. A start under a key
// (PodLaunch::key) writes the supervisor's pid to <handle>.pid before anything else, so a second
// start under that key (another Purser taking over the directory) adopts the pod instead. Memory
// (address space) and CPU time are limited with rlimits where configured. Exit code 0 is
// kSucceeded; any other, or death by a signal, kFailed.
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

#include "exec/executor.h"

namespace purser::exec {

struct LocalExecutorOptions {
  std::string log_dir;                     // must exist
  size_t max_log_bytes = 8 * 1024 * 1024;  // per file; a pod keeps at most two
  uint64_t max_memory_bytes = 0;           // RLIMIT_AS per process; 0: none
  uint64_t max_cpu_seconds = 0;            // RLIMIT_CPU per process; 0: none
  std::string default_working_dir;         // empty: Purser's own
  bool stop_on_close = false;              // kill every pod when the executor is destroyed
  size_t max_pods = 1024;  // pods running at once; start() beyond is kResourceExhausted
  // Called (from the executor's own thread) when a pod's process has ended, so its end is read
  // at once instead of at the next poll.
  std::function<void()> on_change;
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

 private:
  struct Pod;
  // Claims a keyed start's handle: its pid file, open for the supervisor to write its pid to; or
  // nullopt when it was claimed before, and that pod is adopted.
  Result<std::optional<int>> claim(const std::string& handle);
  // Lets go of a claim whose pod did not start.
  void unclaim(int& pid_fd, const std::string& handle);
  void refreshLocked(Pod& pod);
  void escalateLocked(Pod& pod);
  std::string pathOf(const std::string& handle, const char* suffix) const;
  void watchLoop();
  void wake();

  const Clock& clock_;
  const LocalExecutorOptions options_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Pod>> pods_;
  int64_t next_ = 0;
  int wake_[2] = {-1, -1};  // wakes the watcher when pods come or it must end
  bool ending_ = false;
  std::thread watcher_;  // waits on the pods' pidfds, calls on_change when one ends
};

}  // namespace purser::exec
