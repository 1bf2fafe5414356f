#include "exec/local_executor.h"

#include "exec/command.h"
#include "exec/gpu_share_env.h"
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

namespace purser::exec {

using pod_process::InitPlan;
using pod_process::kStepCgroup;
using pod_process::kStepChdirNone;
using pod_process::kStepClone;
using pod_process::kStepExec;
using pod_process::kStepFork;
using pod_process::kStepPipe;
using pod_process::podInit;
using pod_process::putNumber;
using pod_process::report;
using pod_process::StartFailure;
using pod_process::supervise;
using pod_process::SupervisorPlan;
using pod_process::writeAll;

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

// The files a pod has in log_dir, HANDLE + one of these: its log (and the log before it), how it
// ended (and that file being written) and its supervisor's pid. A longer suffix comes before one
// it ends with, so that the first that matches a name is the right one.
constexpr const char* kPodFileSuffixes[] = {".log.1", ".log", ".exit.tmp",
                                            ".exit",  ".pid", ".gpushare"};

// A handle that is also a safe file name, unique across restarts: "ml.train-1.workers.0.<ms>-7";
// under a key, the same for every start under it: "ml.train-1.workers.0.k<key>".
std::string handleFor(const PodLaunch& pod, int64_t ms, int64_t seq) {
  std::string workload = pod.workload;
  std::replace(workload.begin(), workload.end(), '/', '.');
  // An unkeyed start is named by when, by which process and in what order, so that two
  // executors beside each other (their pods' cgroups share a parent) never name two pods alike.
  std::string out = pod.key.empty()
                        ? fmt::format("{}.{}.{}.{}-{}-{}", workload, pod.pod_set, pod.index, ms,
                                      static_cast<int64_t>(::getpid()), seq)
                        : fmt::format("{}.{}.{}.k{}", workload, pod.pod_set, pod.index, pod.key);
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

// Is `handle` one this executor could have made (and so a file name under its directory)?
bool validHandle(const std::string& handle) {
  if (handle.empty() || handle.size() > 512 || handle[0] == '.') return false;
  for (char c : handle) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-' || c == '_';
    if (!safe) return false;
  }
  return true;
}

// When process `pid` started, in clock ticks since boot (field 22 of /proc/PID/stat); 0 when it
// is gone or a zombie.
int64_t startTimeOf(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  int64_t start = 0;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 3 && (field == "Z" || field == "X")) return 0;
    if (i == 22) start = std::strtoll(field.c_str(), nullptr, 10);
  }
  return start;
}

// How a pod ended, from its exit file: nullopt when there is none (it has not ended, or its
// supervisor was killed before it could say).
struct Ending {
  std::optional<int> exit_code, signal;
  SystemTime at{};
};
std::optional<Ending> readEnding(const std::string& path) {
  std::ifstream in(path);
  std::string kind;
  int64_t value = 0, ms = 0;
  if (!(in >> kind >> value >> ms)) return std::nullopt;
  Ending e;
  if (kind == "exit") {
    e.exit_code = static_cast<int>(value);
  } else if (kind == "signal") {
    e.signal = static_cast<int>(value);
  } else {
    return std::nullopt;
  }
  e.at = SystemTime(std::chrono::milliseconds(ms));
  return e;
}

}  // namespace

struct LocalExecutor::Pod {
  std::string handle;
  pid_t pid = -1;         // the supervisor's, which leads the pod's process group
  int64_t pid_start = 0;  // its start time (clock ticks since boot)
  bool child = false;     // ours to reap (not adopted after a restart)
  PodStatus status;
  bool ended = false;
  bool killed = false;              // the forceful signal was sent
  std::optional<MonoTime> kill_at;  // when the forceful signal follows the polite one
  int pidfd = -1;                   // readable once the supervisor has ended; the watcher's
  ~Pod() {
    if (pidfd >= 0) ::close(pidfd);
  }
};

LocalExecutor::LocalExecutor(const Clock& clock, LocalExecutorOptions options)
    : clock_(clock), options_(std::move(options)) {
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::runtime_error(fmt::format("local executor: pipe: {}", std::strerror(errno)));
  }
  view_base_ = options_.log_dir + "/.view";
  if (options_.isolation != Isolation::kNone && ::mkdir(view_base_.c_str(), 0700) != 0 &&
      errno != EEXIST) {
    spdlog::warn("local executor: cannot make {}: {}", view_base_, std::strerror(errno));
  }
  // Where this process's arguments and environment lie (fields 48 to 51 of /proc/self/stat).
  {
    std::ifstream in("/proc/self/stat");
    std::string stat;
    std::getline(in, stat);
    const size_t close = stat.rfind(')');
    if (close != std::string::npos) {
      std::istringstream rest(stat.substr(close + 1));
      std::string field;
      for (int i = 3; i <= 51 && rest >> field; ++i) {
        const uintptr_t v = static_cast<uintptr_t>(std::strtoull(field.c_str(), nullptr, 10));
        if (i == 48) args_[0] = v;
        if (i == 49) args_[1] = v;
        if (i == 50) env_[0] = v;
        if (i == 51) env_[1] = v;
      }
    }
  }
  watcher_ = std::thread([this] { watchLoop(); });
}

void LocalExecutor::wake() {
  const char byte = 'x';
  (void)!::write(wake_[1], &byte, 1);
}

void LocalExecutor::watchLoop() {
  while (true) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
    std::vector<std::shared_ptr<Pod>> watched;
    {
      std::lock_guard lock(mu_);
      if (ending_) return;
      for (auto& [handle, pod] : pods_) {
        if (pod->pidfd < 0) continue;
        fds.push_back({pod->pidfd, POLLIN, 0});
        watched.push_back(pod);
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("local executor: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) {
      char drain[64];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
    }
    bool ended = false;
    {
      std::lock_guard lock(mu_);
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        ::close(watched[i - 1]->pidfd);
        watched[i - 1]->pidfd = -1;
        ended = true;
      }
    }
    if (ended && options_.on_change) options_.on_change();
  }
}

void LocalExecutor::forget(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(handle);
  if (it != pods_.end() && it->second->ended) pods_.erase(it);
  // Pods end here: at most once an hour, what ended long ago goes.
  const int64_t now = unixMillis(clock_.now());
  if (options_.file_retention > Duration::zero() && now - swept_ms_ >= 3'600'000) {
    swept_ms_ = now;
    sweepLocked();
  }
}

void LocalExecutor::sweepLocked() {
  DIR* dir = ::opendir(options_.log_dir.c_str());
  if (dir == nullptr) return;
  const int64_t cutoff_s =
      unixMillis(clock_.now()) / 1000 -
      std::chrono::duration_cast<std::chrono::seconds>(options_.file_retention).count();
  // A pod's files go together, and only once its supervisor wrote how it ended that long ago: a
  // pod that may still run (no .exit) keeps its pid file, or a restarted Purser could not take
  // it back and would start it twice.
  std::map<std::string, std::vector<std::string>> files;  // handle -> its regular files
  std::set<std::string> ended;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;  // ".", "..", and the pods' view (".view")
    std::string handle, suffix;
    for (const char* s : kPodFileSuffixes) {
      if (name.size() > std::strlen(s) && name.ends_with(s)) {
        handle = name.substr(0, name.size() - std::strlen(s));
        suffix = s;
        break;
      }
    }
    if (handle.empty() || pods_.contains(handle)) continue;
    struct stat st {};
    if (::fstatat(::dirfd(dir), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode)) continue;
    files[handle].push_back(name);
    if (suffix == ".exit" && st.st_mtime <= cutoff_s) ended.insert(handle);
  }
  int removed = 0;
  for (const std::string& handle : ended) {
    for (const std::string& name : files[handle]) {
      if (::unlinkat(::dirfd(dir), name.c_str(), 0) == 0) ++removed;
    }
  }
  ::closedir(dir);
  if (removed > 0) spdlog::info("fleet: removed {} file(s) of pods that ended long ago", removed);
}

LocalExecutor::~LocalExecutor() {
  {
    std::lock_guard lock(mu_);
    ending_ = true;
  }
  wake();
  watcher_.join();
  ::close(wake_[0]);
  ::close(wake_[1]);
  if (!options_.stop_on_close) return;
  std::lock_guard lock(mu_);
  for (auto& [handle, pod] : pods_) {
    if (pod->ended) continue;
    ::kill(-pod->pid, SIGKILL);
    if (pod->child) {
      int st = 0;
      while (::waitpid(pod->pid, &st, 0) < 0 && errno == EINTR) {
      }
    }
  }
}

std::string LocalExecutor::pathOf(const std::string& handle, const char* suffix) const {
  return options_.log_dir + "/" + handle + suffix;
}

namespace {

// Is `name` a safe single directory entry (a team's workspace)?
bool validEntry(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  for (char c : name) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-' || c == '_' || c == '@';
    if (!safe) return false;
  }
  return true;
}

// An absolute path's components, or nullopt when it is not absolute or holds "." or "..".
std::optional<std::vector<std::string>> componentsOf(const std::string& path) {
  if (path.empty() || path[0] != '/') return std::nullopt;
  std::vector<std::string> out;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(start, end - start);
    if (part == "." || part == "..") return std::nullopt;
    if (!part.empty()) out.push_back(std::move(part));
    start = end + 1;
  }
  return out;
}

// Opens directory `name` under `dir` without following a link, making it (owned by uid:gid when
// they are given, mode `mode`) when missing. An O_PATH descriptor, or -1 with errno.
int openOrMakeDir(int dir, const std::string& name, int64_t uid, mode_t mode) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::openat(dir, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 || errno != ENOENT) return fd;
    if (::mkdirat(dir, name.c_str(), mode) != 0 && errno != EEXIST) return -1;
    if (uid > 0 && ::fchownat(dir, name.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(uid),
                              AT_SYMLINK_NOFOLLOW) != 0) {
      return -1;
    }
  }
  return -1;
}

}  // namespace

Result<int> LocalExecutor::openWorkspace(const std::string& team, int64_t uid) {
  if (!validEntry(team)) {
    return fail(invalidArgument(fmt::format("\"{}\" cannot name a team's workspace", team)));
  }
  const int root = ::open(options_.workspace_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) {
    return fail(unavailable(fmt::format("cannot open the workspaces' root {}: {}",
                                        options_.workspace_root, std::strerror(errno))));
  }
  const bool accounts = options_.isolation == Isolation::kAccounts;
  const int fd = openOrMakeDir(root, team, accounts ? uid : 0, 0700);
  const int e = errno;
  ::close(root);
  if (fd < 0) {
    return fail(unavailable(fmt::format("cannot open the workspace {}/{}: {}",
                                        options_.workspace_root, team, std::strerror(e))));
  }
  if (accounts && uid > 0) {
    // A workspace belongs to its team's account alone (it may have been made before it had one).
    struct stat st {};
    if (::fstat(fd, &st) == 0 && (st.st_uid != static_cast<uid_t>(uid) || (st.st_mode & 077))) {
      const std::string path = fmt::format("/proc/self/fd/{}", fd);
      if (::chown(path.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(uid)) != 0 ||
          ::chmod(path.c_str(), 0700) != 0) {
        const int ce = errno;
        ::close(fd);
        return fail(unavailable(fmt::format("cannot give {}/{} to its team's account: {}",
                                            options_.workspace_root, team, std::strerror(ce))));
      }
    }
  }
  return fd;
}

Result<std::string> LocalExecutor::workspaceOf(const std::string& team, int64_t uid) {
  if (options_.workspace_root.empty()) return fail(Error(ErrorCode::kNotFound, "no workspaces"));
  const int fd = PURSER_TRY_VALUE(openWorkspace(team, uid));
  ::close(fd);
  return options_.workspace_root + "/" + team;
}

Result<std::pair<int, std::string>> LocalExecutor::openWorkingDir(const PodLaunch& pod) {
  const bool sandboxed = options_.isolation != Isolation::kNone;
  if (options_.workspace_root.empty() || pod.team.empty()) {
    // No workspaces (an executor of its own, in tests and tools): the directory as given.
    const std::string dir =
        pod.working_dir.empty() ? options_.default_working_dir : pod.working_dir;
    if (dir.empty()) return std::make_pair(-1, std::string());
    if (dir[0] != '/') {
      return fail(invalidArgument(fmt::format("workingDir \"{}\" is not an absolute path", dir))
                      .withField("workingDir"));
    }
    const int fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      return fail(invalidArgument(fmt::format("working directory \"{}\" is not a directory", dir))
                      .withField("workingDir"));
    }
    if (!sandboxed) ::close(fd);
    return std::make_pair(sandboxed ? fd : -1, dir);
  }
  const std::string home = options_.workspace_root + "/" + pod.team;
  auto refuse = [&](const std::string& why) {
    return fail(invalidArgument(fmt::format("workingDir \"{}\" {}; a pod of team \"{}\" works in "
                                            "its team's workspace {} or a directory inside it",
                                            pod.working_dir, why, pod.team, home))
                    .withField("workingDir"));
  };
  std::vector<std::string> rest;
  if (!pod.working_dir.empty()) {
    auto parts = componentsOf(pod.working_dir);
    if (!parts) return refuse("is not an absolute path without \".\" or \"..\"");
    auto root = componentsOf(home);
    if (!root || parts->size() < root->size() ||
        !std::equal(root->begin(), root->end(), parts->begin())) {
      return refuse("is outside the team's workspace");
    }
    rest.assign(parts->begin() + static_cast<std::ptrdiff_t>(root->size()), parts->end());
  }
  int fd = PURSER_TRY_VALUE(openWorkspace(pod.team, pod.uid));
  std::string path = home;
  const int64_t owner = options_.isolation == Isolation::kAccounts ? pod.uid : 0;
  for (const auto& part : rest) {
    // Each step is opened without following a link: a pod may have left links behind.
    const int next = openOrMakeDir(fd, part, owner, 0755);
    const int e = errno;
    ::close(fd);
    if (next < 0) {
      return e == ELOOP || e == ENOTDIR
                 ? refuse(fmt::format("passes through \"{}\", which is not a directory", part))
                 : fail(unavailable(fmt::format("cannot open the working directory {}/{}: {}", path,
                                                part, std::strerror(e))));
    }
    fd = next;
    path += "/" + part;
  }
  if (!sandboxed) {
    ::close(fd);
    return std::make_pair(-1, path);
  }
  return std::make_pair(fd, path);
}

Result<std::string> LocalExecutor::start(const PodLaunch& pod) {
  if (!options_.refused.empty()) {
    return fail(Error(ErrorCode::kFailedPrecondition,
                      "local pods are refused on this machine: " + options_.refused));
  }
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
  const bool sandboxed = options_.isolation != Isolation::kNone;
  // Everything the children need, made before fork(): after it, only async-signal-safe calls.
  std::vector<char*> argv;
  for (const auto& a : pod.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  if (holdsGpuShare(pod.env) && options_.gpu_share_library.empty()) {
    return fail(withGpuShare(pod.env, {}, {}).error());
  }

  auto p = std::make_shared<Pod>();
  {
    std::lock_guard lock(mu_);
    size_t live = 0;
    for (const auto& [h, other] : pods_) live += other->ended ? 0 : 1;
    if (live >= options_.max_pods) {
      return fail(Error(ErrorCode::kResourceExhausted,
                        fmt::format("the local executor runs at most {} pods at once, and as "
                                    "many run now",
                                    options_.max_pods)));
    }
    p->handle = handleFor(pod, unixMillis(clock_.now()), ++next_);
    if (!pod.key.empty() && pods_.count(p->handle) != 0) return p->handle;  // started already
  }
  // Its environment. A share of a GPU is enforced in its processes by the shim, through a region
  // of its own: in its private /tmp when sandboxed, else beside its other files.
  const std::map<std::string, std::string> env = PURSER_TRY_VALUE(withGpuShare(
      pod.env, options_.gpu_share_library,
      sandboxed ? std::string("/tmp/purser-gpushare.region") : pathOf(p->handle, ".gpushare")));
  std::vector<std::string> env_text;
  for (const auto& [k, v] : env) env_text.push_back(k + "=" + v);
  if (env.count("PATH") == 0) {
    // A pod's scripts find their tools as a container's would; PATH is the one thing passed on.
    const char* path = ::getenv("PATH");
    env_text.push_back(std::string("PATH=") + (path ? path : "/usr/local/bin:/usr/bin:/bin"));
  }
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  // Where it works: checked (and made) now without following links; its init opens it again
  // the same way to show it.
  auto [workdir_fd, dir] = PURSER_TRY_VALUE(openWorkingDir(pod));
  closeFd(workdir_fd);
  const std::string workdir_root =
      options_.workspace_root.empty() || pod.team.empty() ? dir : options_.workspace_root;
  // A keyed start claims its key with the pod's pid file; a key claimed before is that pod.
  int pid_fd = -1;
  if (!pod.key.empty()) {
    auto claimed = PURSER_TRY_VALUE(claim(p->handle));
    if (!claimed) return p->handle;  // taken back
    pid_fd = *claimed;
  }
  // Its limits: cgroups where Purser has them; else RLIMIT_AS stands in for the memory limit.
  const int64_t memory_limit =
      pod.memory_limit_bytes > 0 ? pod.memory_limit_bytes : pod.memory_bytes;
  PodGroups groups;
  if (options_.cgroups.version() != PodCgroups::Version::kNone) {
    auto made = options_.cgroups.create(
        p->handle, PodLimits{memory_limit, pod.cpu_limit_milli, options_.pids_limit});
    if (!made) {
      unclaim(pid_fd, p->handle);
      return fail(made.error());
    }
    groups = std::move(*made);
  }
  uint64_t rlimit_as = options_.max_memory_bytes;
  if (!options_.cgroups.hasMemory() && memory_limit > 0 &&
      (rlimit_as == 0 || static_cast<uint64_t>(memory_limit) < rlimit_as)) {
    rlimit_as = static_cast<uint64_t>(memory_limit);
  }
  std::string hostname = pod.workload.substr(pod.workload.find('/') + 1) + "-" + pod.pod_set + "-" +
                         std::to_string(pod.index);
  const SandboxPlan sandbox = SandboxPlan::make(
      options_.isolation, options_.sandbox, view_base_, workdir_root, dir, pod.gpu_indices, pod.uid,
      pod.uid, hostname,
      memory_limit > 0 ? std::min<int64_t>(memory_limit, options_.tmp_bytes) : options_.tmp_bytes);
  std::vector<std::string> procs_text;
  std::vector<const char*> procs;
  for (const auto& f : groups.procs) procs_text.push_back(f);
  for (const auto& f : procs_text) procs.push_back(f.c_str());

  const std::string log_path = pathOf(p->handle, ".log");
  const std::string log_prev_path = pathOf(p->handle, ".log.1");
  const std::string exit_path = pathOf(p->handle, ".exit");
  const std::string exit_tmp_path = pathOf(p->handle, ".exit.tmp");
  std::vector<char> buf(64 * 1024);
  const SupervisorPlan plan{log_path.c_str(),
                            log_prev_path.c_str(),
                            exit_path.c_str(),
                            exit_tmp_path.c_str(),
                            options_.max_log_bytes,
                            buf.data(),
                            buf.size()};
  auto undo = [&] {
    for (const char* suffix : kPodFileSuffixes) {
      ::unlink(pathOf(p->handle, suffix).c_str());
    }
    PodCgroups::remove(groups);
  };
  // Descriptors the children use are kept above 2, so moving them onto 0, 1 and 2 is safe.
  int log_fd = ::open(log_path.c_str(),
                      O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (log_fd < 0) {
    const int e = errno;
    unclaim(pid_fd, p->handle);
    PodCgroups::remove(groups);
    return fail(
        unavailable(fmt::format("cannot open the pod's log {}: {}", log_path, std::strerror(e))));
  }
  int err[2] = {-1, -1};
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (::pipe2(err, O_CLOEXEC) != 0 || null_fd < 0) {
    const int e = errno;
    closeFd(log_fd), closeFd(null_fd), closeFd(err[0]), closeFd(err[1]);
    unclaim(pid_fd, p->handle);
    undo();
    return fail(unavailable(fmt::format("cannot start the pod: {}", std::strerror(e))));
  }
  for (int* fd : {&log_fd, &null_fd, &err[1], &pid_fd}) {
    if (*fd >= 0 && *fd <= 2) {
      const int moved = ::fcntl(*fd, F_DUPFD_CLOEXEC, 3);
      ::close(*fd);
      *fd = moved;
    }
  }
  const int clone_flags = sandboxCloneFlags(options_.isolation);
  InitPlan init_plan{&sandbox,
                     -1,
                     -1,
                     -1,
                     sandboxed ? "" : dir.c_str(),
                     rlimit_as,
                     options_.max_cpu_seconds,
                     argv.data(),
                     envp.data(),
                     {args_[0], args_[1]},
                     {env_[0], env_[1]}};
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The supervisor: a group of its own; /dev/null, the log and the error pipe as 0, 1 and 2;
    // nothing else of Purser's open (not its listening sockets); deaf to the polite signals.
    ::setpgid(0, 0);
    if (pid_fd >= 0) {
      // The key's pod is this group from now on, whatever becomes of Purser.
      char text[24];
      size_t len = 0;
      putNumber(text, &len, ::getpid());
      text[len++] = '\n';
      (void)!::write(pid_fd, text, len);
    }
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(err[1], 2);
    ::syscall(SYS_close_range, 3U, ~0U, 0U);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGQUIT}) ::sigaction(sig, &ign, nullptr);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int out[2] = {-1, -1}, sync[2] = {-1, -1}, status[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(sync, O_CLOEXEC) != 0 ||
        ::pipe2(status, O_CLOEXEC) != 0) {
      report(2, errno, kStepPipe);
      ::_exit(127);
    }
    // The pod's init, in the pod's namespaces.
    const long init = ::syscall(SYS_clone, clone_flags | SIGCHLD, nullptr, nullptr, nullptr, 0);
    if (init < 0) {
      report(2, errno, kStepClone);
      ::_exit(127);
    }
    if (init == 0) {
      ::close(out[0]);
      ::close(sync[1]);
      ::close(status[0]);
      init_plan.sync_fd = sync[0];
      init_plan.status_fd = status[1];
      init_plan.out_fd = out[1];
      podInit(init_plan);
    }
    ::close(out[1]);
    ::close(sync[0]);
    ::close(status[1]);
    // Into its cgroups before it starts anything; then it may go on.
    char text[24];
    size_t len = 0;
    putNumber(text, &len, init);
    text[len] = '\0';
    for (const char* file : procs) {
      const int fd = ::open(file, O_WRONLY | O_CLOEXEC);
      const bool placed = fd >= 0 && ::write(fd, text, len) == static_cast<ssize_t>(len);
      const int e = errno;
      if (fd >= 0) ::close(fd);
      if (!placed) {
        report(2, e, kStepCgroup);
        ::kill(static_cast<pid_t>(init), SIGKILL);
        ::_exit(127);
      }
    }
    writeAll(sync[1], "x", 1);
    ::close(sync[1]);
    ::close(2);
    supervise(plan, static_cast<pid_t>(init), out[0], status[0]);
  }
  const int fork_errno = errno;
  closeFd(null_fd);
  closeFd(log_fd);
  closeFd(err[1]);
  closeFd(pid_fd);
  if (pid < 0) {
    closeFd(err[0]);
    undo();
    return fail(
        unavailable(fmt::format("cannot start the pod: fork: {}", std::strerror(fork_errno))));
  }
  ::setpgid(pid, pid);  // also here, so the group exists whichever runs first
  // The pod's exec closes the error pipe; a failure in it means the program never ran.
  StartFailure failure;
  ssize_t n;
  do {
    n = ::read(err[0], &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  closeFd(err[0]);
  if (n == static_cast<ssize_t>(sizeof failure)) {
    ::kill(-pid, SIGKILL);
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    undo();
    const std::string where = dir.empty() ? "" : " in " + dir;
    switch (failure.step) {
      case kStepExec:
        return fail(
            invalidArgument(fmt::format("cannot run \"{}\"{}: {}{}", pod.argv[0], where,
                                        std::strerror(failure.err),
                                        sandboxed && failure.err == ENOENT
                                            ? " (a local pod sees the system's directories, its "
                                              "working directory and fleet.local.read_only_paths)"
                                            : ""))
                .withField("command"));
      case kStepChdirNone:
        return fail(invalidArgument(fmt::format("cannot enter the working directory {}: {}", dir,
                                                std::strerror(failure.err)))
                        .withField("workingDir"));
      case kStepClone:
        return fail(unavailable(
            fmt::format("cannot make the pod's namespaces: {}", std::strerror(failure.err))));
      case kStepCgroup:
        return fail(unavailable(
            fmt::format("cannot put the pod in its cgroups: {}", std::strerror(failure.err))));
      case kStepPipe:
      case kStepFork:
        return fail(
            unavailable(fmt::format("cannot start the pod: {}", std::strerror(failure.err))));
      default:
        return fail(
            unavailable(fmt::format("cannot build the pod's sandbox ({}): {}",
                                    sandbox.stepName(failure.step), std::strerror(failure.err))));
    }
  }
  p->pid = pid;
  p->pid_start = startTimeOf(pid);
  p->child = true;
  p->status.started_at = clock_.now();
  p->pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  {
    std::lock_guard lock(mu_);
    pods_[p->handle] = p;
  }
  wake();
  return p->handle;
}

// Brings `pod`'s status up to date: has it ended, and how?
void LocalExecutor::refreshLocked(Pod& pod) {
  if (pod.ended) return;
  bool gone = false;
  int st = 0;
  if (pod.child) {
    pid_t r;
    do {
      r = ::waitpid(pod.pid, &st, WNOHANG);
    } while (r < 0 && errno == EINTR);
    gone = r == pod.pid || (r < 0 && errno == ECHILD);
  } else {
    // Not ours to reap: alive while a process of that pid and start time is there.
    const int64_t start = startTimeOf(pod.pid);
    gone = start == 0 || (pod.pid_start != 0 && start != pod.pid_start);
  }
  auto ending = readEnding(pathOf(pod.handle, ".exit"));
  if (!gone && !ending) {
    // A process of the pod killed for memory ends the whole pod, as cgroup v2's memory.oom.group
    // has the kernel do (v1 has no such thing: it is done here).
    if (options_.cgroups.hasMemory() && !pod.killed &&
        PodCgroups::oomKills(options_.cgroups.of(pod.handle)) > 0) {
      ::kill(-pod.pid, SIGKILL);
      pod.killed = true;
    }
    return;
  }
  if (!gone && ending) {
    // Its supervisor wrote the end and is killing its group: as good as gone.
    ::kill(-pod.pid, SIGKILL);
  }
  pod.ended = true;
  pod.kill_at.reset();
  pod.status.stopping = false;
  if (ending) {
    pod.status.exit_code = ending->exit_code;
    pod.status.signal = ending->signal;
    pod.status.finished_at = pod.child ? clock_.now() : ending->at;
  } else {
    // The supervisor died before it could say (killed with its group): the pod went with it.
    pod.status.signal = pod.killed || !pod.child || !WIFSIGNALED(st) ? SIGKILL : WTERMSIG(st);
    pod.status.finished_at = clock_.now();
  }
  pod.status.phase = pod.status.exit_code == 0 ? PodPhase::kSucceeded : PodPhase::kFailed;
  // Anything left in the group goes too.
  ::kill(-pod.pid, SIGKILL);
  // Its memory limit ended it when the kernel killed one of its processes for it (as Kubernetes
  // has it: OOMKilled, 137); its groups go once empty.
  if (options_.cgroups.version() != PodCgroups::Version::kNone) {
    const PodGroups groups = options_.cgroups.of(pod.handle);
    if (PodCgroups::oomKills(groups) > 0) {
      pod.status.reason = "OOMKilled";
      pod.status.exit_code = 137;
      pod.status.signal.reset();
      pod.status.phase = PodPhase::kFailed;
    }
    PodCgroups::remove(groups);
  }
}

void LocalExecutor::escalateLocked(Pod& pod) {
  if (pod.ended || !pod.kill_at || clock_.monotonic() < *pod.kill_at) return;
  ::kill(-pod.pid, SIGKILL);
  pod.killed = true;
  pod.kill_at.reset();
}

Result<PodStatus> LocalExecutor::status(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(handle);
  if (it == pods_.end()) return fail(unknownPod(handle));
  escalateLocked(*it->second);
  refreshLocked(*it->second);
  return it->second->status;
}

Result<void> LocalExecutor::stop(const std::string& handle, Duration grace) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(handle);
  if (it == pods_.end()) return fail(unknownPod(handle));
  Pod& pod = *it->second;
  refreshLocked(pod);
  if (pod.ended) return {};
  if (!pod.status.stopping) {
    pod.status.stopping = true;
    if (grace <= Duration::zero()) {
      ::kill(-pod.pid, SIGKILL);
      pod.killed = true;
    } else {
      ::kill(-pod.pid, SIGTERM);  // the supervisor ignores it; the pod and its children do not
      pod.kill_at = clock_.monotonic() + grace;
    }
  }
  escalateLocked(pod);
  return {};
}

Result<std::string> LocalExecutor::logTail(const std::string& handle, size_t max_bytes) {
  if (!validHandle(handle)) return fail(unknownPod(handle));
  const std::string path = pathOf(handle, ".log");
  if (::access(path.c_str(), F_OK) != 0) return fail(unknownPod(handle));
  std::string tail = fileTail(path, max_bytes);
  if (tail.size() < max_bytes) tail = fileTail(path + ".1", max_bytes - tail.size()) + tail;
  return tail;
}

Result<std::optional<int>> LocalExecutor::claim(const std::string& handle) {
  const std::string path = pathOf(handle, ".pid");
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) return std::optional<int>(fd);
    if (errno != EEXIST) {
      return fail(unavailable(
          fmt::format("cannot write the pod's pid file {}: {}", path, std::strerror(errno))));
    }
    // Claimed before: its supervisor writes its pid as its first act, so an empty file that
    // stays empty for a second is a start that never forked (its Purser died first).
    for (int wait = 0; wait < 100; ++wait) {
      std::ifstream in(path);
      int64_t pid = 0;
      if (in >> pid && pid > 1) {
        struct stat st {};
        const SystemTime at = ::stat(path.c_str(), &st) == 0
                                  ? SystemTime(std::chrono::seconds(st.st_mtim.tv_sec) +
                                               std::chrono::nanoseconds(st.st_mtim.tv_nsec))
                                  : clock_.now();
        // Its start time now, when the process is there (else it ended: its .exit says how).
        const int64_t start = startTimeOf(static_cast<pid_t>(pid));
        PURSER_TRY(adopt(Adopted{handle, pid, start, at}));
        spdlog::info("local executor: pod {} was started before (process group {}); taken back",
                     handle, pid);
        return std::optional<int>();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::unlink(path.c_str());
  }
  return fail(unavailable(fmt::format("cannot claim the pod's pid file {}", path)));
}

void LocalExecutor::unclaim(int& pid_fd, const std::string& handle) {
  if (pid_fd < 0) return;
  closeFd(pid_fd);
  ::unlink(pathOf(handle, ".pid").c_str());
}

Result<void> LocalExecutor::adopt(const Adopted& a) {
  if (!validHandle(a.handle)) return fail(invalidArgument("not a handle of this executor"));
  if (a.pid <= 1) return fail(invalidArgument("an adopted pod needs its process group"));
  std::lock_guard lock(mu_);
  if (pods_.count(a.handle) != 0) return {};
  auto p = std::make_shared<Pod>();
  p->handle = a.handle;
  p->pid = static_cast<pid_t>(a.pid);
  p->pid_start = a.pid_start;
  p->child = false;
  p->status.started_at = a.started_at;
  refreshLocked(*p);
  if (!p->ended) {
    // Readable when it ends (a pidfd works for processes that are not our children too).
    p->pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(a.pid), 0));
    if (p->pidfd >= 0 && startTimeOf(p->pid) != p->pid_start && p->pid_start != 0) {
      ::close(p->pidfd);  // the pid was reused between the check and the open
      p->pidfd = -1;
    }
  }
  pods_[a.handle] = p;
  wake();
  return {};
}

std::optional<std::pair<int64_t, int64_t>> LocalExecutor::identity(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(handle);
  if (it == pods_.end()) return std::nullopt;
  return std::make_pair(static_cast<int64_t>(it->second->pid), it->second->pid_start);
}

Result<PodStatus> LocalExecutor::wait(const std::string& handle) {
  while (true) {
    auto st = status(handle);
    if (!st || st->phase != PodPhase::kRunning) return st;
    // Ends are polled: no SIGCHLD handler is Purser's to install.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::optional<pid_t> LocalExecutor::processGroup(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(handle);
  if (it == pods_.end()) return std::nullopt;
  return it->second->pid;
}

std::optional<std::string> LocalExecutor::address(const std::string& handle) {
  (void)handle;
  return "127.0.0.1";  // every local pod runs on this machine
}

}  // namespace purser::exec
