// LocalExecutor: pods as child processes of this one — the embedded default, for one machine.
//
// Each pod runs its argv (PATH searched) in a process group of its own, so stopping it reaches
// everything it started; with the environment it was given and nothing else of Purser's (not
// Purser's own keys). Its stdout and stderr go, through a pipe read by one background thread, to
// <log_dir>/<handle>.log, bounded: past max_log_bytes the file becomes <handle>.log.1 (replacing
// any earlier one) and a new one begins, so a pod never holds more than twice the bound on disk
// and never blocks on a full pipe. Memory (address space) and CPU time are limited with rlimits
// where configured. Exit code 0 is kSucceeded; any other, or death by a signal, kFailed.
//
// Thread-safe. The destructor stops every pod still running (SIGKILL to its group) and reaps it.
#pragma once

#include <sys/types.h>

#include <condition_variable>
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

  // Blocks until the pod has ended and its output is all in its log (for shutdown and tests).
  Result<PodStatus> wait(const std::string& handle);
  // The process group of a pod (its leader's pid), while known.
  std::optional<pid_t> processGroup(const std::string& handle);

 private:
  struct Pod;
  void readLoop();
  void reapLocked(Pod& pod, bool block);
  void escalateLocked(Pod& pod);

  const Clock& clock_;
  const LocalExecutorOptions options_;
  std::mutex mu_;
  std::condition_variable changed_;  // a pod reaped or its output ended
  std::map<std::string, std::shared_ptr<Pod>> pods_;
  int64_t next_ = 0;
  int wake_[2] = {-1, -1};  // wakes the reader when pods come or it must end
  bool ending_ = false;
  std::thread reader_;
};

}  // namespace purser::exec
