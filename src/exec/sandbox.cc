#include "exec/sandbox.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <functional>

namespace purser::exec {

namespace {

// mount_setattr(2) (Linux 5.12), declared here: <linux/mount.h> clashes with glibc's
// <sys/mount.h> on Debian 12.
constexpr long kSysMountSetattr = 442;
constexpr uint64_t kAttrRdonly = 0x1, kAttrNosuid = 0x2, kAttrNodev = 0x4;
constexpr unsigned kAtRecursive = 0x8000;
struct MountAttr {
  uint64_t attr_set, attr_clr, propagation, userns_fd;
};

// The steps of raise() and enter() that are not ops (ops are numbered from 0).
enum Step {
  kStepMaps = -1,
  kStepPrivate = -2,
  kStepBase = -3,
  kStepPivot = -4,
  kStepOldRoot = -5,
  kStepRootReadOnly = -6,
  kStepHostname = -7,
  kStepChdir = -10,
  kStepCapabilities = -11,
  kStepGroups = -12,
  kStepGid = -13,
  kStepUid = -14,
  kStepNoNewPrivs = -15,
};

size_t length(const char* s) {
  size_t n = 0;
  while (s[n] != '\0') ++n;
  return n;
}

bool isUnder(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

std::string resolved(const std::string& path) {
  std::error_code ec;
  auto r = std::filesystem::canonical(path, ec);
  return ec ? path : r.string();
}

// Writes `text` to `path` with system calls only; 0 or an errno.
int writeSmall(const char* path, const char* text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const size_t n = length(text);
  const ssize_t w = ::write(fd, text, n);
  const int e = errno;
  ::close(fd);
  return w == static_cast<ssize_t>(n) ? 0 : (w < 0 ? e : EIO);
}

// Sets MOUNT_ATTR_ bits on the mount at `target` (and those beneath, when recursive). Where the
// kernel has no mount_setattr, the mount itself is remounted with its flags kept (the kernel
// refuses a remount in a user namespace that would drop one).
int setAttr(const char* target, uint64_t attr, bool recursive) {
  MountAttr a{attr, 0, 0, 0};
  if (::syscall(kSysMountSetattr, AT_FDCWD, target, recursive ? kAtRecursive : 0u, &a, sizeof a) ==
      0) {
    return 0;
  }
  if (errno != ENOSYS) return errno;
  struct statfs st {};
  if (::statfs(target, &st) != 0) return errno;
  unsigned long flags = MS_BIND | MS_REMOUNT;
  const unsigned long have = static_cast<unsigned long>(st.f_flags);
  if ((have & ST_RDONLY) || (attr & kAttrRdonly)) flags |= MS_RDONLY;
  if ((have & ST_NOSUID) || (attr & kAttrNosuid)) flags |= MS_NOSUID;
  if ((have & ST_NODEV) || (attr & kAttrNodev)) flags |= MS_NODEV;
  if (have & ST_NOEXEC) flags |= MS_NOEXEC;
  if (have & ST_NOATIME) flags |= MS_NOATIME;
  if (have & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (have & ST_RELATIME) flags |= MS_RELATIME;
  return ::mount(nullptr, target, nullptr, flags, nullptr) == 0 ? 0 : errno;
}

}  // namespace

const char* isolationName(Isolation isolation) {
  switch (isolation) {
    case Isolation::kNone:
      return "none";
    case Isolation::kAccounts:
      return "accounts";
    case Isolation::kUserNamespace:
      return "user-namespace";
  }
  return "unknown";
}

int sandboxCloneFlags(Isolation isolation) {
  switch (isolation) {
    case Isolation::kNone:
      return 0;
    case Isolation::kAccounts:
      return CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
    case Isolation::kUserNamespace:
      return CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
  }
  return 0;
}

const char* SandboxPlan::keep(std::string s) {
  text_.push_back(std::move(s));
  return text_.back().c_str();
}

std::string SandboxPlan::at(const std::string& view_path) {
  return std::string(base_) + (view_path == "/" ? "" : view_path);
}

void SandboxPlan::addDirs(const std::string& view_path) {
  for (size_t slash = 1; slash <= view_path.size(); ++slash) {
    if (slash == view_path.size() || view_path[slash] == '/') {
      add({Op::kDir, nullptr, keep(at(view_path.substr(0, slash)))});
    }
  }
}

SandboxPlan SandboxPlan::make(Isolation isolation, const SandboxOptions& options,
                              const std::string& base, const std::string& workdir_root,
                              const std::string& workdir, const std::vector<int>& gpus, int64_t uid,
                              int64_t gid, const std::string& hostname, int64_t tmp_bytes) {
  SandboxPlan p;
  p.isolation_ = isolation;
  if (isolation == Isolation::kNone) return p;
  p.uid_ = uid > 0 ? static_cast<uid_t>(uid) : 65534;
  p.gid_ = gid > 0 ? static_cast<gid_t>(gid) : 65534;
  p.base_ = p.keep(base);
  p.old_root_ = p.keep(base + "/.oldroot");
  p.hostname_ = p.keep(hostname.substr(0, 63));
  if (isolation == Isolation::kUserNamespace) {
    p.uid_map_ = p.keep(fmt::format("{} {} 1\n", p.uid_, ::getuid()));
    p.gid_map_ = p.keep(fmt::format("{} {} 1\n", p.gid_, ::getgid()));
  }
  p.add({Op::kDir, nullptr, p.old_root_});
  const std::string tmp_size = fmt::format("size={}", std::max<int64_t>(tmp_bytes, 1 << 20));

  std::vector<std::string> hidden, masked;
  for (const auto& h : options.hidden_paths) hidden.push_back(resolved(h));
  masked = hidden;
  for (const auto& h : options.masked_paths) masked.push_back(resolved(h));
  auto isHidden = [&](const std::string& path) {
    return std::any_of(hidden.begin(), hidden.end(),
                       [&](const std::string& h) { return isUnder(path, h); });
  };

  // The view is built in order of depth, so that what lies beneath a mount goes on top of it:
  // a path shown beneath /tmp after /tmp's tmpfs, a hidden path beneath /etc after /etc.
  struct Entry {
    std::string path;  // where in the view (resolved)
    std::function<void()> emit;
  };
  std::vector<Entry> entries;
  auto depthOf = [](const std::string& path) {
    return std::count(path.begin(), path.end(), '/') - (path == "/" ? 1 : 0);
  };
  // Shown read-only, as the host has it; `shown` keeps the resolved paths, to find the hidden
  // paths that lie beneath one.
  std::vector<std::string> shown;
  auto showReadOnly = [&](const std::string& path) {
    struct stat st {};
    if (path.empty() || path[0] != '/' || ::lstat(path.c_str(), &st) != 0) return;
    const std::string real = resolved(path);
    if (isHidden(real) || isHidden(path)) return;  // never shown, whoever asks
    for (const auto& s : shown) {
      if (isUnder(real, s) && !S_ISLNK(st.st_mode)) return;  // shown already
    }
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      const auto text = std::filesystem::read_symlink(path, ec);
      if (ec) return;
      entries.push_back({path, [&p, path, text] {
                           p.addDirs(std::filesystem::path(path).parent_path().string());
                           p.add({Op::kSymlink, p.keep(text.string()), p.keep(p.at(path)), nullptr,
                                  0, false, false, "symlink"});
                         }});
      return;
    }
    const bool dir = S_ISDIR(st.st_mode);
    entries.push_back(
        {path, [&p, path, dir] {
           if (dir) {
             p.addDirs(path);
           } else {
             p.addDirs(std::filesystem::path(path).parent_path().string());
             p.add({Op::kFile, nullptr, p.keep(p.at(path))});
           }
           const char* target = p.keep(p.at(path));
           p.add({Op::kBind, p.keep(path), target, nullptr, 0, true, false, "bind-ro"});
           p.add(
               {Op::kAttr, nullptr, target, nullptr, kAttrRdonly | kAttrNosuid | kAttrNodev, true});
         }});
    shown.push_back(real);
  };
  for (const auto& s : options.system_paths) showReadOnly(s);
  for (const auto& s : options.read_only_paths) showReadOnly(s);
  if (!options.self_binary.empty()) showReadOnly(options.self_binary);
  if (!options.gpu_share_library.empty()) showReadOnly(options.gpu_share_library);

  // /dev: the usual character devices, the pod's GPUs and the driver's shared devices.
  entries.push_back(
      {"/dev", [&p, &options, &gpus, &tmp_size] {
         p.addDirs("/dev");
         p.add({Op::kTmpfs, "tmpfs", p.keep(p.at("/dev")), "mode=0755,size=64k",
                MS_NOSUID | MS_NOEXEC, false, false, "tmpfs"});
         std::vector<std::string> devices = {"/dev/null",   "/dev/zero",    "/dev/full",
                                             "/dev/random", "/dev/urandom", "/dev/tty"};
         for (int g : gpus) devices.push_back(fmt::format("/dev/nvidia{}", g));
         for (const auto& d : options.shared_devices) devices.push_back(d);
         for (const auto& d : devices) {
           struct stat st {};
           if (::stat(d.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
           const char* target = p.keep(p.at(d));
           p.add({Op::kFile, nullptr, target, nullptr, 0, false, true});
           p.add({Op::kBind, p.keep(d), target, nullptr, 0, false, true, "device"});
         }
         p.addDirs("/dev/shm");
         p.add({Op::kTmpfs, "tmpfs", p.keep(p.at("/dev/shm")), p.keep("mode=1777," + tmp_size),
                MS_NOSUID | MS_NODEV, false, false, "tmpfs"});
         p.addDirs("/dev/pts");
         p.add({Op::kDevpts, "devpts", p.keep(p.at("/dev/pts")),
                "newinstance,ptmxmode=0666,mode=0620", MS_NOSUID | MS_NOEXEC, false, true,
                "devpts"});
         for (const auto& [link, text] : std::vector<std::pair<const char*, const char*>>{
                  {"/dev/ptmx", "pts/ptmx"},
                  {"/dev/fd", "/proc/self/fd"},
                  {"/dev/stdin", "/proc/self/fd/0"},
                  {"/dev/stdout", "/proc/self/fd/1"},
                  {"/dev/stderr", "/proc/self/fd/2"}}) {
           p.add({Op::kSymlink, text, p.keep(p.at(link)), nullptr, 0, false, true});
         }
       }});
  // /proc of its own PID namespace; /sys read-only, without the cgroup tree; a private /tmp.
  entries.push_back({"/proc", [&p] {
                       p.addDirs("/proc");
                       p.add({Op::kProc, "proc", p.keep(p.at("/proc")), nullptr,
                              MS_NOSUID | MS_NODEV | MS_NOEXEC, false, false, "proc"});
                     }});
  if (struct stat st{}; ::stat("/sys", &st) == 0) {
    entries.push_back(
        {"/sys", [&p] {
           p.addDirs("/sys");
           const char* sys = p.keep(p.at("/sys"));
           p.add({Op::kBind, "/sys", sys, nullptr, 0, true, false, "bind-ro"});
           p.add({Op::kAttr, nullptr, sys, nullptr, kAttrRdonly | kAttrNosuid | kAttrNodev, true});
           if (struct stat cg{}; ::stat("/sys/fs/cgroup", &cg) == 0) {
             p.add({Op::kTmpfs, "tmpfs", p.keep(p.at("/sys/fs/cgroup")), "mode=0555,size=4k",
                    MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, false, true, "hide"});
           }
         }});
  }
  entries.push_back({"/tmp", [&p, &tmp_size] {
                       p.addDirs("/tmp");
                       p.add({Op::kTmpfs, "tmpfs", p.keep(p.at("/tmp")),
                              p.keep("mode=1777," + tmp_size), MS_NOSUID | MS_NODEV, false, false,
                              "tmpfs"});
                     }});

  // What Purser keeps to itself, where it lies beneath something shown: an empty directory over
  // it (writable only until the view is finished, for mount points inside), or /dev/null.
  std::vector<const char*> masks;
  for (const auto& h : masked) {
    bool beneath = false;
    for (const auto& s : shown) beneath = beneath || (isUnder(h, s) && h != s);
    struct stat st {};
    if (!beneath || ::stat(h.c_str(), &st) != 0) continue;
    const bool dir = S_ISDIR(st.st_mode);
    entries.push_back(
        {h, [&p, &masks, h, dir] {
           const char* target = p.keep(p.at(h));
           if (dir) {
             p.add({Op::kTmpfs, "tmpfs", target, "mode=0755,size=64k",
                    MS_NOSUID | MS_NODEV | MS_NOEXEC, false, false, "hide"});
             masks.push_back(target);
           } else {
             p.add({Op::kBind, "/dev/null", target, nullptr, 0, false, false, "hide"});
           }
         }});
  }
  std::stable_sort(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) {
    return depthOf(a.path) < depthOf(b.path);
  });
  for (const auto& e : entries) e.emit();

  // The working directory, read-write, bound from a descriptor the child opens for it.
  if (!workdir.empty() && workdir[0] == '/' && !workdir_root.empty() &&
      isUnder(workdir, workdir_root)) {
    p.workdir_ = p.keep(workdir);
    p.workdir_root_ = p.keep(workdir_root);
    std::string rest = workdir.substr(workdir_root.size());
    size_t start = 0;
    while (start < rest.size()) {
      size_t end = rest.find('/', start);
      if (end == std::string::npos) end = rest.size();
      if (end > start) p.workdir_steps_.push_back(p.keep(rest.substr(start, end - start)));
      start = end + 1;
    }
    p.addDirs(workdir);
    const char* target = p.keep(p.at(workdir));
    p.add({Op::kBindWorkdir, p.workdir_root_, target, nullptr, 0, false, false, "bind-rw"});
    p.add({Op::kAttr, nullptr, target, nullptr, kAttrNosuid | kAttrNodev, false});
  }
  for (const char* m : masks) p.add({Op::kAttr, nullptr, m, nullptr, kAttrRdonly, false});
  return p;
}

int SandboxPlan::raise(int* step) const {
  if (isolation_ == Isolation::kNone) return 0;
  if (isolation_ == Isolation::kUserNamespace) {
    *step = kStepMaps;
    // An unprivileged process may map only its own ids, and a gid only once setgroups is denied.
    // Purser's processes are not dumpable (so that nothing of its user can read their memory),
    // which leaves their /proc files to root: this one is dumpable for as long as it writes its
    // own (no pod exists yet, and nothing else can name it in its PID namespace), and first
    // under memory pressure, as the pod it starts will be.
    ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    int e = writeSmall("/proc/self/setgroups", "deny");
    if (e == ENOENT) e = 0;
    if (e == 0) e = writeSmall("/proc/self/uid_map", uid_map_);
    if (e == 0) e = writeSmall("/proc/self/gid_map", gid_map_);
    if (e == 0) (void)writeSmall("/proc/self/oom_score_adj", "1000");
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (e != 0) return e;
  }
  *step = kStepPrivate;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return errno;
  *step = kStepBase;
  if (::mount("tmpfs", base_, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0) {
    return errno;
  }
  for (size_t i = 0; i < ops_.size(); ++i) {
    const Op& op = ops_[i];
    *step = static_cast<int>(i);
    int rc = 0;
    struct stat st {};
    switch (op.kind) {
      case Op::kDir:
        if (::lstat(op.target, &st) != 0 && ::mkdir(op.target, 0755) != 0 && errno != EEXIST) {
          rc = errno;
        }
        break;
      case Op::kFile:
        if (::lstat(op.target, &st) != 0) {
          const int fd = ::open(op.target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
          if (fd < 0) {
            rc = errno;
          } else {
            ::close(fd);
          }
        }
        break;
      case Op::kBind:
        if (::mount(op.source, op.target, nullptr, MS_BIND | (op.recursive ? MS_REC : 0),
                    nullptr) != 0) {
          rc = errno;
        }
        break;
      case Op::kBindWorkdir: {
        // Opened step by step in this mount namespace (a descriptor of another namespace's
        // mount cannot be bound here), never through a link.
        int fd = ::open(workdir_root_, O_PATH | O_DIRECTORY | O_CLOEXEC);
        for (size_t k = 0; fd >= 0 && k < workdir_steps_.size(); ++k) {
          const int next =
              ::openat(fd, workdir_steps_[k], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          ::close(fd);
          fd = next;
        }
        if (fd < 0) {
          rc = errno;
          break;
        }
        char source[32] = "/proc/self/fd/";
        size_t len = length(source);
        char digits[12];
        size_t n = 0;
        for (int v = fd; n == 0 || v > 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
        while (n > 0) source[len++] = digits[--n];
        source[len] = '\0';
        if (::mount(source, op.target, nullptr, MS_BIND, nullptr) != 0) rc = errno;
        ::close(fd);
        break;
      }
      case Op::kTmpfs:
        if (::mount("tmpfs", op.target, "tmpfs", op.flags, op.data) != 0) rc = errno;
        break;
      case Op::kProc:
        if (::mount("proc", op.target, "proc", op.flags, nullptr) != 0) rc = errno;
        break;
      case Op::kDevpts:
        if (::mount("devpts", op.target, "devpts", op.flags, op.data) != 0) rc = errno;
        break;
      case Op::kSymlink:
        if (::symlink(op.source, op.target) != 0 && errno != EEXIST) rc = errno;
        break;
      case Op::kAttr:
        rc = setAttr(op.target, op.flags, op.recursive);
        break;
    }
    if (rc != 0 && !op.optional) return rc;
  }
  // The view becomes the root; the host's root goes, and nothing of it stays reachable.
  *step = kStepPivot;
  if (::syscall(SYS_pivot_root, base_, old_root_) != 0) return errno;
  if (::chdir("/") != 0) return errno;
  *step = kStepOldRoot;
  if (::umount2("/.oldroot", MNT_DETACH) != 0) return errno;
  ::rmdir("/.oldroot");
  *step = kStepRootReadOnly;
  if (int e = setAttr("/", kAttrRdonly | kAttrNosuid | kAttrNodev, false); e != 0) return e;
  *step = kStepHostname;
  if (::sethostname(hostname_, length(hostname_)) != 0) return errno;
  return 0;
}

int SandboxPlan::enter(int* step) const {
  if (isolation_ == Isolation::kNone) return 0;
  *step = kStepChdir;
  if (::chdir(workdir_) != 0) return errno;
  *step = kStepCapabilities;
  for (int cap = 0; cap <= 63; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      if (errno == EINVAL) break;  // past the last capability this kernel has
      return errno;
    }
  }
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  // Raw system calls: this process has one thread, and glibc's wrappers would signal others.
  if (isolation_ == Isolation::kAccounts) {
    *step = kStepGroups;
    if (::syscall(SYS_setgroups, 0, nullptr) != 0) return errno;
  }
  *step = kStepGid;
  if (::syscall(SYS_setresgid, gid_, gid_, gid_) != 0) return errno;
  *step = kStepUid;
  if (::syscall(SYS_setresuid, uid_, uid_, uid_) != 0) return errno;
  *step = kStepNoNewPrivs;
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  return 0;
}

std::string SandboxPlan::stepName(int step) const {
  switch (step) {
    case kStepMaps:
      return "mapping its user namespace's ids";
    case kStepPrivate:
      return "making its mounts private";
    case kStepBase:
      return fmt::format("mounting its root on {}", base_);
    case kStepPivot:
      return "pivoting into its view";
    case kStepOldRoot:
      return "letting go of the host's root";
    case kStepRootReadOnly:
      return "making its root read-only";
    case kStepHostname:
      return "naming its host";
    case kStepChdir:
      return fmt::format("entering its working directory {}", workdir_);
    case kStepCapabilities:
      return "dropping its capabilities";
    case kStepGroups:
      return "dropping its supplementary groups";
    case kStepGid:
      return fmt::format("changing to group {}", gid_);
    case kStepUid:
      return fmt::format("changing to user {}", uid_);
    case kStepNoNewPrivs:
      return "forbidding new privileges";
    default:
      break;
  }
  if (step >= 0 && static_cast<size_t>(step) < ops_.size()) {
    const Op& op = ops_[static_cast<size_t>(step)];
    const std::string target = std::string(op.target).substr(length(base_));
    switch (op.kind) {
      case Op::kDir:
        return fmt::format("making directory {}", target);
      case Op::kFile:
        return fmt::format("making mount point {}", target);
      case Op::kBind:
        return fmt::format("showing {} at {}", op.source, target);
      case Op::kBindWorkdir:
        return fmt::format("showing its working directory {}", target);
      case Op::kTmpfs:
        return fmt::format("mounting a tmpfs at {}", target);
      case Op::kProc:
        return "mounting its /proc";
      case Op::kDevpts:
        return "mounting its /dev/pts";
      case Op::kSymlink:
        return fmt::format("linking {}", target);
      case Op::kAttr:
        return fmt::format("restricting {}", target.empty() ? "/" : target);
    }
  }
  return fmt::format("step {}", step);
}

std::vector<std::string> SandboxPlan::describe() const {
  std::vector<std::string> out;
  const size_t base = length(base_);
  for (const auto& op : ops_) {
    if (op.label[0] == '\0') continue;
    std::string target = std::string(op.target).substr(base);
    if (op.kind == Op::kBind && std::string(op.label) == "bind-rw") {
      out.push_back("bind-rw " + target);
    } else {
      out.push_back(std::string(op.label) + " " + target);
    }
  }
  return out;
}

Result<void> probeSandbox(Isolation isolation, const SandboxOptions& options,
                          const std::string& base) {
  if (isolation == Isolation::kNone) return {};
  const SandboxPlan plan =
      SandboxPlan::make(isolation, options, base, "", "", {}, 65534, 65534, "probe", 1 << 20);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    return fail(unavailable(fmt::format("pipe: {}", std::strerror(errno))));
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    // As a pod's supervisor does: the sandbox's init is cloned into its namespaces.
    const long child =
        ::syscall(SYS_clone, sandboxCloneFlags(isolation) | SIGCHLD, nullptr, nullptr, nullptr, 0);
    if (child == 0) {
      int step = 0;
      int result[2] = {plan.raise(&step), step};
      if (result[0] == 0) result[0] = plan.enter(&step), result[1] = step;
      (void)!::write(report[1], result, sizeof result);
      ::_exit(0);
    }
    if (child < 0) {
      int result[2] = {errno, INT_MIN};
      (void)!::write(report[1], result, sizeof result);
      ::_exit(0);
    }
    int st = 0;
    while (::waitpid(static_cast<pid_t>(child), &st, 0) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    return fail(unavailable(fmt::format("fork: {}", std::strerror(errno))));
  }
  int result[2] = {0, 0};
  ssize_t n;
  do {
    n = ::read(report[0], result, sizeof result);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof result)) {
    return fail(unavailable("the probe ended without a word"));
  }
  if (result[0] == 0) return {};
  const std::string what =
      result[1] == INT_MIN ? std::string("creating its namespaces") : plan.stepName(result[1]);
  return fail(unavailable(fmt::format("{}: {}", what, std::strerror(result[0]))));
}

}  // namespace purser::exec
