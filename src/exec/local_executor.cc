#include "exec/local_executor.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

namespace purser::exec {

const char* podPhaseName(PodPhase phase) {
  switch (phase) {
    case PodPhase::kRunning:
      return "running";
    case PodPhase::kSucceeded:
      return "succeeded";
    case PodPhase::kFailed:
      return "failed";
  }
  return "unknown";
}

namespace {

Error unknownPod(const std::string& handle) {
  return Error(ErrorCode::kNotFound, fmt::format("no pod \"{}\" on this executor", handle));
}

// The bytes of a string that execve would cut short.
bool hasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

// A handle that is also a safe file name: "ml.train-1.workers.0.7".
std::string handleFor(const PodLaunch& pod, int64_t seq) {
  std::string workload = pod.workload;
  std::replace(workload.begin(), workload.end(), '/', '.');
  std::string out = fmt::format("{}.{}.{}.{}", workload, pod.pod_set, pod.index, seq);
  for (char& c : out) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-' || c == '_';
    if (!safe) c = '_';
  }
  return out;
}

void closeFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// The last `max_bytes` of a file ("" when it is not there).
std::string fileTail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > static_cast<std::streamoff>(max_bytes)
                                  ? size - static_cast<std::streamoff>(max_bytes)
                                  : 0;
  in.seekg(from);
  std::string out(static_cast<size_t>(size - from), '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  out.resize(static_cast<size_t>(in.gcount()));
  return out;
}

}  // namespace

struct LocalExecutor::Pod {
  std::string handle;
  pid_t pid = -1;
  int out = -1;  // the read end of its output pipe, until it reaches its end
  std::string log_path;
  int log_fd = -1;
  size_t log_bytes = 0;
  PodStatus status;
  bool reaped = false;
  bool drained = false;
  std::optional<MonoTime> kill_at;  // when the forceful signal follows the polite one
};

LocalExecutor::LocalExecutor(const Clock& clock, LocalExecutorOptions options)
    : clock_(clock), options_(std::move(options)) {
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::runtime_error(fmt::format("local executor: pipe: {}", std::strerror(errno)));
  }
  reader_ = std::thread([this] { readLoop(); });
}

LocalExecutor::~LocalExecutor() {
  std::vector<std::shared_ptr<Pod>> pods;
  {
    std::lock_guard lock(mu_);
    for (auto& [handle, pod] : pods_) {
      if (!pod->reaped) ::kill(-pod->pid, SIGKILL);
      pods.push_back(pod);
    }
    ending_ = true;
  }
  const char byte = 'x';
  (void)!::write(wake_[1], &byte, 1);
  reader_.join();
  std::lock_guard lock(mu_);
  for (auto& pod : pods) {
    reapLocked(*pod, /*block=*/true);
    closeFd(pod->out);
    closeFd(pod->log_fd);
  }
  closeFd(wake_[0]);
  closeFd(wake_[1]);
}

Result<std::string> LocalExecutor::start(const PodLaunch& pod) {
  if (pod.argv.empty() || pod.argv[0].empty()) {
    return fail(invalidArgument("a pod needs a command to run").withField("command"));
  }
  for (const auto& a : pod.argv) {
    if (hasNul(a)) return fail(invalidArgument("a command or argument holds a NUL byte"));
  }
  for (const auto& [k, v] : pod.env) {
    if (k.empty() || k.find('=') != std::string::npos || hasNul(k) || hasNul(v)) {
      return fail(invalidArgument(fmt::format("\"{}\" is not a usable environment variable", k))
                      .withField("env"));
    }
  }
  const std::string dir = pod.working_dir.empty() ? options_.default_working_dir : pod.working_dir;
  if (!dir.empty()) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return fail(invalidArgument(fmt::format("working directory \"{}\" is not a directory", dir))
                      .withField("workingDir"));
    }
  }
  // Everything the child needs, made before fork(): after it, only async-signal-safe calls.
  std::vector<char*> argv;
  for (const auto& a : pod.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_text;
  for (const auto& [k, v] : pod.env) env_text.push_back(k + "=" + v);
  if (pod.env.count("PATH") == 0) {
    // A pod's scripts find their tools as a container's would; PATH is the one thing passed on.
    const char* path = ::getenv("PATH");
    env_text.push_back(std::string("PATH=") + (path ? path : "/usr/local/bin:/usr/bin:/bin"));
  }
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);

  auto p = std::make_shared<Pod>();
  {
    std::lock_guard lock(mu_);
    p->handle = handleFor(pod, ++next_);
  }
  p->log_path = options_.log_dir + "/" + p->handle + ".log";
  p->log_fd = ::open(p->log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (p->log_fd < 0) {
    return fail(unavailable(
        fmt::format("cannot open the pod's log {}: {}", p->log_path, std::strerror(errno))));
  }
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    closeFd(out[0]), closeFd(out[1]), closeFd(p->log_fd);
    return fail(unavailable(fmt::format("cannot start the pod: pipe: {}", std::strerror(e))));
  }
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const uint64_t mem = options_.max_memory_bytes, cpu = options_.max_cpu_seconds;
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child: its own process group, its output into the pipe, its limits, then the program.
    ::setpgid(0, 0);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
    if (!dir.empty() && ::chdir(dir.c_str()) != 0) {
      const int e = errno;
      (void)!::write(err[1], &e, sizeof e);
      ::_exit(127);
    }
    if (mem > 0) {
      const rlimit r{mem, mem};
      ::setrlimit(RLIMIT_AS, &r);
    }
    if (cpu > 0) {
      const rlimit r{cpu, cpu + 5};
      ::setrlimit(RLIMIT_CPU, &r);
    }
    // Signals as a fresh process has them: none blocked (the forking thread's mask would be
    // inherited) and none ignored (an ignored SIGPIPE or SIGTERM would survive the exec).
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
    }
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int e = errno;
    (void)!::write(err[1], &e, sizeof e);
    ::_exit(127);
  }
  const int fork_errno = errno;
  if (null_fd >= 0) ::close(null_fd);
  closeFd(out[1]);
  closeFd(err[1]);
  if (pid < 0) {
    closeFd(out[0]), closeFd(err[0]), closeFd(p->log_fd);
    return fail(
        unavailable(fmt::format("cannot start the pod: fork: {}", std::strerror(fork_errno))));
  }
  ::setpgid(pid, pid);  // also here, so the group exists whichever runs first
  // The child's exec closes the error pipe; an errno in it means the program never ran.
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(err[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  closeFd(err[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    closeFd(out[0]);
    closeFd(p->log_fd);
    ::unlink(p->log_path.c_str());
    return fail(
        invalidArgument(fmt::format("cannot run \"{}\"{}: {}", pod.argv[0],
                                    dir.empty() ? "" : " in " + dir, std::strerror(child_errno)))
            .withField("command"));
  }
  p->pid = pid;
  p->out = out[0];
  p->status.started_at = clock_.now();
  {
    std::lock_guard lock(mu_);
    pods_[p->handle] = p;
  }
  const char byte = 'p';
  (void)!::write(wake_[1], &byte, 1);
  return p->handle;
}

void LocalExecutor::reapLocked(Pod& pod, bool block) {
  if (pod.reaped) return;
  int st = 0;
  pid_t r;
  do {
    r = ::waitpid(pod.pid, &st, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r != pod.pid) return;
  pod.reaped = true;
  pod.kill_at.reset();
  pod.status.finished_at = clock_.now();
  pod.status.stopping = false;
  if (WIFEXITED(st)) {
    pod.status.exit_code = WEXITSTATUS(st);
    pod.status.phase = *pod.status.exit_code == 0 ? PodPhase::kSucceeded : PodPhase::kFailed;
  } else {
    pod.status.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    pod.status.phase = PodPhase::kFailed;
  }
  // What it left behind in its group goes with it (and lets its output reach its end).
  ::kill(-pod.pid, SIGKILL);
  changed_.notify_all();
}

void LocalExecutor::escalateLocked(Pod& pod) {
  if (pod.reaped || !pod.kill_at || clock_.monotonic() < *pod.kill_at) return;
  ::kill(-pod.pid, SIGKILL);
  pod.kill_at.reset();
}

Result<PodStatus> LocalExecutor::status(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(handle);
  if (it == pods_.end()) return fail(unknownPod(handle));
  escalateLocked(*it->second);
  reapLocked(*it->second, /*block=*/false);
  return it->second->status;
}

Result<void> LocalExecutor::stop(const std::string& handle, Duration grace) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(handle);
  if (it == pods_.end()) return fail(unknownPod(handle));
  Pod& pod = *it->second;
  reapLocked(pod, /*block=*/false);
  if (pod.reaped) return {};
  if (!pod.status.stopping) {
    pod.status.stopping = true;
    ::kill(-pod.pid, grace <= Duration::zero() ? SIGKILL : SIGTERM);
    if (grace > Duration::zero()) pod.kill_at = clock_.monotonic() + grace;
  }
  escalateLocked(pod);
  return {};
}

Result<std::string> LocalExecutor::logTail(const std::string& handle, size_t max_bytes) {
  std::string path;
  {
    std::lock_guard lock(mu_);
    auto it = pods_.find(handle);
    if (it == pods_.end()) return fail(unknownPod(handle));
    path = it->second->log_path;
  }
  std::string tail = fileTail(path, max_bytes);
  if (tail.size() < max_bytes) tail = fileTail(path + ".1", max_bytes - tail.size()) + tail;
  return tail;
}

Result<PodStatus> LocalExecutor::wait(const std::string& handle) {
  std::unique_lock lock(mu_);
  auto it = pods_.find(handle);
  if (it == pods_.end()) return fail(unknownPod(handle));
  std::shared_ptr<Pod> pod = it->second;
  while (true) {
    escalateLocked(*pod);
    reapLocked(*pod, /*block=*/false);
    if (pod->reaped && pod->drained) return pod->status;
    // Reaping is polled (no SIGCHLD handler is Purser's to install); output ends are signalled.
    changed_.wait_for(lock, std::chrono::milliseconds(20));
  }
}

std::optional<pid_t> LocalExecutor::processGroup(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(handle);
  if (it == pods_.end()) return std::nullopt;
  return it->second->pid;
}

void LocalExecutor::readLoop() {
  std::vector<char> buf(64 * 1024);
  while (true) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
    std::vector<std::shared_ptr<Pod>> watched;
    {
      std::lock_guard lock(mu_);
      if (ending_) break;
      for (auto& [handle, pod] : pods_) {
        if (pod->out < 0) continue;
        fds.push_back({pod->out, POLLIN, 0});
        watched.push_back(pod);
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("local executor: poll: {}", std::strerror(errno));
      break;
    }
    if (fds[0].revents != 0) {
      char drain[64];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Pod& pod = *watched[i - 1];
      const ssize_t n = ::read(pod.out, buf.data(), buf.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      std::lock_guard lock(mu_);
      if (n <= 0) {
        closeFd(pod.out);
        closeFd(pod.log_fd);
        pod.drained = true;
        changed_.notify_all();
        continue;
      }
      const char* data = buf.data();
      size_t size = static_cast<size_t>(n);
      if (size > options_.max_log_bytes) {  // keep a chunk's end when the bound is that small
        data += size - options_.max_log_bytes;
        size = options_.max_log_bytes;
      }
      if (pod.log_bytes + size > options_.max_log_bytes && pod.log_fd >= 0) {
        // The bound reached: this file becomes the previous one; a new one begins.
        closeFd(pod.log_fd);
        ::rename(pod.log_path.c_str(), (pod.log_path + ".1").c_str());
        pod.log_fd = ::open(pod.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        pod.log_bytes = 0;
      }
      if (pod.log_fd >= 0) {
        size_t done = 0;
        while (done < size) {
          const ssize_t w = ::write(pod.log_fd, data + done, size - done);
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) break;  // a full disk loses output, never the pod
          done += static_cast<size_t>(w);
        }
        pod.log_bytes += done;
      }
    }
  }
}

}  // namespace purser::exec
