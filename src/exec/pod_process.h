// The processes a local pod runs as, outside Purser's threads: the supervisor (its own process,
// forked from Purser; copies the pod's output into its bounded log, writes how the pod ended)
// and the pod's init (PID 1 of the pod's namespaces: raises the sandbox, starts the program,
// reaps). Both run in a fork of a threaded process, so everything here is async-signal-safe:
// no allocation, no locks, no stdio. Internal to src/exec (local_executor.cc starts them).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "exec/sandbox.h"

namespace purser::exec::pod_process {

// Appends the decimal digits of `v` to buf at *len (room for 21 bytes is the caller's).
void putNumber(char* buf, size_t* len, int64_t v);

// Writes all of `data` to `fd` (retrying short writes; a full disk loses output, never the pod).
void writeAll(int fd, const char* data, size_t size);

// What a start that failed in a child reports through the error pipe: an errno and the step
// (SandboxPlan's, or one of these).
struct StartFailure {
  int err = 0;
  int step = 0;
};

constexpr int kStepExec = -100;
constexpr int kStepClone = -101;
constexpr int kStepCgroup = -102;
constexpr int kStepChdirNone = -103;
constexpr int kStepPipe = -104;
constexpr int kStepFork = -105;

void report(int fd, int err, int step);

struct SupervisorPlan {
  const char* log_path;
  const char* log_prev_path;
  const char* exit_path;
  const char* exit_tmp_path;
  size_t max_log_bytes;
  char* buf;
  size_t buf_size;
};

// The supervisor's life: runs with the log as fd 1; `init` is the pod's init, `out` the read
// end of the pod's output, `status` where init tells how the pod's first process ended. Never
// returns.
[[noreturn]] void supervise(const SupervisorPlan& plan, pid_t init, int out, int status_fd);

// What the pod's init is given.
struct InitPlan {
  const SandboxPlan* sandbox;
  int sync_fd;      // a byte once the supervisor has put this process in the pod's cgroups
  int status_fd;    // the pod's wait status goes here
  int out_fd;       // the pod's stdout and stderr
  const char* dir;  // without isolation: the working directory ("" none)
  uint64_t rlimit_as, rlimit_cpu;
  char* const* argv;
  char* const* envp;
  uintptr_t args[2], env[2];
};

// The pod's init: PID 1 of its namespaces under isolation. Raises the view, starts the pod and
// reaps until the pod's first process has ended; tells the supervisor how, then ends (taking
// what is left in its namespace with it). Never returns.
[[noreturn]] void podInit(const InitPlan& plan);

}  // namespace purser::exec::pod_process
