// The processes a local pod runs as: see pod_process.h.
#include "exec/pod_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

namespace purser::exec::pod_process {

// Appends the decimal digits of `v` to buf at *len (room for 21 bytes is the caller's).
void putNumber(char* buf, size_t* len, int64_t v) {
  char digits[24];
  size_t n = 0;
  const bool negative = v < 0;
  uint64_t u = negative ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
  do {
    digits[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (negative) buf[(*len)++] = '-';
  while (n > 0) buf[(*len)++] = digits[--n];
}

namespace {

void putText(char* buf, size_t* len, const char* text) {
  while (*text != '\0') buf[(*len)++] = *text++;
}

}  // namespace

void writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t w = ::write(fd, data, size);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // a full disk loses output, never the pod
    data += w;
    size -= static_cast<size_t>(w);
  }
}

void report(int fd, int err, int step) {
  const StartFailure f{err, step};
  writeAll(fd, reinterpret_cast<const char*>(&f), sizeof f);
}

namespace {

// Copies what the pod's output (fd `out`, non-blocking) holds into the log (fd 1), rolling it
// over at the bound; true at the output's end.
bool copyOutput(const SupervisorPlan& plan, int out, size_t* log_bytes) {
  while (true) {
    const ssize_t n = ::read(out, plan.buf, plan.buf_size);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
    const char* data = plan.buf;
    size_t size = static_cast<size_t>(n);
    if (size > plan.max_log_bytes) {  // keep a chunk's end when the bound is that small
      data += size - plan.max_log_bytes;
      size = plan.max_log_bytes;
    }
    if (*log_bytes + size > plan.max_log_bytes) {
      // The bound reached: this file becomes the previous one; a new one begins, as fd 1. The
      // directory is Purser's alone, and the files are never followed through a link.
      ::rename(plan.log_path, plan.log_prev_path);
      const int fd =
          ::open(plan.log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_NOFOLLOW, 0600);
      if (fd >= 0 && fd != 1) {
        ::dup2(fd, 1);
        ::close(fd);
      }
      *log_bytes = 0;
    }
    writeAll(1, data, size);
    *log_bytes += size;
  }
}

}  // namespace

// The supervisor's life: runs with the log as fd 1; `init` is the pod's init, `out` the read
// end of the pod's output, `status` where init tells how the pod's first process ended. Never
// returns.
[[noreturn]] void supervise(const SupervisorPlan& plan, pid_t init, int out, int status_fd) {
  size_t log_bytes = 0;
  struct stat st {};
  if (::fstat(1, &st) == 0) log_bytes = static_cast<size_t>(st.st_size);
  ::fcntl(out, F_SETFL, ::fcntl(out, F_GETFL) | O_NONBLOCK);
  bool open_out = true;
  int status = 0;
  while (true) {
    if (open_out) {
      // The output usually ends with the pod; what it left running may hold it open longer, so
      // the pod's own exit is checked between waits too.
      pollfd fd{out, POLLIN, 0};
      if (::poll(&fd, 1, 500) > 0 && copyOutput(plan, out, &log_bytes)) {
        ::close(out);
        open_out = false;
      }
    }
    pid_t w;
    do {
      w = ::waitpid(init, &status, open_out ? WNOHANG : 0);
    } while (w < 0 && errno == EINTR);
    if (w == init) break;
  }
  if (open_out) (void)copyOutput(plan, out, &log_bytes);  // what it wrote last
  // The pod's own end, as its init saw it; else init's (killed before it could say).
  int pod_status = 0;
  ssize_t n;
  do {
    n = ::read(status_fd, &pod_status, sizeof pod_status);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof pod_status)) status = pod_status;
  // How it ended, then its group (leftovers, and this supervisor) goes.
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  char line[96];
  size_t len = 0;
  if (WIFEXITED(status)) {
    putText(line, &len, "exit ");
    putNumber(line, &len, WEXITSTATUS(status));
  } else {
    putText(line, &len, "signal ");
    putNumber(line, &len, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  }
  putText(line, &len, " ");
  putNumber(line, &len, static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1'000'000);
  putText(line, &len, "\n");
  const int fd = ::open(plan.exit_tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    writeAll(fd, line, len);
    ::close(fd);
    ::rename(plan.exit_tmp_path, plan.exit_path);
  }
  ::kill(0, SIGKILL);
  ::_exit(0);
}

[[noreturn]] void podInit(const InitPlan& plan) {
  // Nothing of Purser's in what the pod can read of this process (/proc/1/cmdline, environ).
  for (const uintptr_t* area : {plan.args, plan.env}) {
    if (area[0] != 0 && area[1] > area[0]) {
      std::memset(reinterpret_cast<void*>(area[0]), 0, area[1] - area[0]);
    }
  }
  if (plan.args[0] != 0 && plan.args[1] - plan.args[0] > 16) {
    std::memcpy(reinterpret_cast<void*>(plan.args[0]), "purser-pod-init", 16);
  }
  char byte = 0;
  ssize_t n;
  do {
    n = ::read(plan.sync_fd, &byte, 1);
  } while (n < 0 && errno == EINTR);
  ::close(plan.sync_fd);
  if (n != 1) ::_exit(127);  // the supervisor could not place it; it has said why
  int step = 0;
  if (const int e = plan.sandbox->raise(&step); e != 0) {
    report(2, e, step);
    ::_exit(127);
  }
  const pid_t pod = ::fork();
  if (pod < 0) {
    report(2, errno, kStepFork);
    ::_exit(127);
  }
  if (pod == 0) {
    // The pod: its output into the pipe, its limits, signals as a fresh process has them, its
    // account, then the program. The error pipe moves up, closed by a successful exec.
    const int err = ::fcntl(2, F_DUPFD_CLOEXEC, 3);
    ::dup2(plan.out_fd, 1);
    ::dup2(plan.out_fd, 2);
    ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
    if (plan.dir[0] != '\0' && ::chdir(plan.dir) != 0) {
      report(err, errno, kStepChdirNone);
      ::_exit(127);
    }
    if (plan.rlimit_as > 0) {
      const rlimit r{plan.rlimit_as, plan.rlimit_as};
      ::setrlimit(RLIMIT_AS, &r);
    }
    if (plan.rlimit_cpu > 0) {
      const rlimit r{plan.rlimit_cpu, plan.rlimit_cpu + 5};
      ::setrlimit(RLIMIT_CPU, &r);
    }
    // Under memory pressure a pod goes before Purser does.
    if (const int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
      writeAll(fd, "1000", 4);
      ::close(fd);
    }
    if (const int e = plan.sandbox->enter(&step); e != 0) {
      report(err, e, step);
      ::_exit(127);
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
    }
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // The program is found on the pod's own PATH (execvpe searches the caller's environment).
    environ = const_cast<char**>(plan.envp);
    ::execvpe(plan.argv[0], plan.argv, plan.envp);
    report(err, errno, kStepExec);
    ::_exit(127);
  }
  ::close(plan.out_fd);
  ::close(2);  // the pod's exec closes the last copy of the error pipe: the start succeeded
  int pod_status = 0;
  while (true) {
    int st = 0;
    const pid_t w = ::waitpid(-1, &st, 0);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) break;
    if (w == pod) {
      pod_status = st;
      break;
    }
  }
  writeAll(plan.status_fd, reinterpret_cast<const char*>(&pod_status), sizeof pod_status);
  ::_exit(0);
}

}  // namespace purser::exec::pod_process
