#include "exec/cgroups.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace purser::exec {

namespace {

constexpr const char* kPodsGroup = "purser-pods";

std::vector<std::string> splitOn(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result<void> writeText(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return fail(unavailable(fmt::format("cannot open {}: {}", path, std::strerror(errno))));
  }
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return fail(unavailable(fmt::format("cannot write \"{}\" to {}: {}", text, path,
                                        n < 0 ? std::strerror(e) : "short write")));
  }
  return {};
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Makes `dir` (a group); true when it is there afterwards.
bool makeGroup(const std::string& dir, std::string* why) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    if (why) *why = fmt::format("cannot make {}: {}", dir, std::strerror(errno));
    return false;
  }
  // Made before (by another Purser, or as another user): this one must be able to use it.
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    if (why) *why = fmt::format("cannot make groups in {}: {}", dir, std::strerror(errno));
    return false;
  }
  return true;
}

// One line of /proc/self/mountinfo: its mount point, the mount's root, its type and options.
struct Mount {
  std::string point, root, type;
  std::set<std::string> options;
};

// Octal escapes (\040 for a space) of mountinfo's paths.
std::string unescape(const std::string& s) {
  std::string out;
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && octal(s[i + 1]) && octal(s[i + 2]) &&
        octal(s[i + 3])) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::vector<Mount> cgroupMounts(const std::string& mountinfo) {
  std::vector<Mount> out;
  std::istringstream in(readAll(mountinfo));
  std::string line;
  while (std::getline(in, line)) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, dev, root, point, type, source, super;
    if (!(head >> id >> parent >> dev >> root >> point)) continue;
    if (!(tail >> type >> source >> super)) continue;
    if (type != "cgroup" && type != "cgroup2") continue;
    Mount m{unescape(point), unescape(root), type, {}};
    for (auto& o : splitOn(super, ',')) m.options.insert(o);
    out.push_back(std::move(m));
  }
  return out;
}

// Where the group at `path` (as /proc/self/cgroup names it) is under mount `m`.
std::string dirOf(const Mount& m, const std::string& path) {
  std::string rel = path;
  if (m.root != "/" && (rel == m.root || rel.starts_with(m.root + "/"))) {
    rel = rel.substr(m.root.size());
  }
  if (rel == "/") rel.clear();
  return m.point + rel;
}

}  // namespace

std::string cgroupNameOf(const std::string& handle) {
  if (handle.size() <= 200) return handle;
  return fmt::format("{}-{:016x}", handle.substr(0, 180), std::hash<std::string>{}(handle));
}

PodCgroups PodCgroups::none(std::string why) {
  PodCgroups c;
  c.why_ = std::move(why);
  return c;
}

PodCgroups PodCgroups::detect(const std::string& proc_self, const std::string& mountinfo) {
  // Purser's own groups: hierarchy id -> (controllers, path).
  std::map<std::string, std::string> v1_paths;  // controller -> path
  std::string v2_path;
  bool v2_listed = false;
  {
    std::istringstream in(readAll(proc_self));
    std::string line;
    while (std::getline(in, line)) {
      const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
      if (b == std::string::npos) continue;
      const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      if (line.substr(0, a) == "0" && controllers.empty()) {
        v2_path = path;
        v2_listed = true;
        continue;
      }
      for (auto& c : splitOn(controllers, ',')) {
        if (!c.empty()) v1_paths[c] = path;
      }
    }
  }
  const std::vector<Mount> mounts = cgroupMounts(mountinfo);
  std::string why;
  // cgroup v2, where Purser's group offers the memory controller.
  for (const auto& m : mounts) {
    if (m.type != "cgroup2" || !v2_listed) continue;
    const std::string own = dirOf(m, v2_path);
    std::set<std::string> offered;
    for (auto& c : splitOn(readAll(own + "/cgroup.controllers"), ' ')) {
      std::string t = c;
      while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
      if (!t.empty()) offered.insert(t);
    }
    if (offered.count("memory") == 0) {
      why = "cgroup v2 offers no memory controller to Purser's group";
      break;
    }
    std::string enable;
    for (const char* c : {"memory", "cpu", "pids"}) {
      if (offered.count(c) != 0) enable += fmt::format("{}+{}", enable.empty() ? "" : " ", c);
    }
    const std::string parent = own + "/" + kPodsGroup;
    if (!makeGroup(parent, &why)) break;
    // A group with processes of its own cannot pass controllers down (v2's rule): Purser moves
    // into a leaf of its own group first, as a service with a delegated subtree does.
    auto enabled = writeText(own + "/cgroup.subtree_control", enable);
    if (!enabled) {
      const std::string self = own + "/purser";
      if (makeGroup(self, &why) && writeText(self + "/cgroup.procs", std::to_string(::getpid()))) {
        enabled = writeText(own + "/cgroup.subtree_control", enable);
      }
    }
    if (!enabled) {
      why = enabled.error().message;
      ::rmdir(parent.c_str());
      break;
    }
    if (auto down = writeText(parent + "/cgroup.subtree_control", enable); !down) {
      why = down.error().message;
      break;
    }
    PodCgroups c;
    c.version_ = Version::kV2;
    c.memory_ = parent;
    if (offered.count("cpu") != 0) c.cpu_ = parent;
    if (offered.count("pids") != 0) c.pids_ = parent;
    return c;
  }
  // cgroup v1: each controller where it is mounted and Purser may make groups.
  PodCgroups c;
  for (const char* controller : {"memory", "cpu", "pids"}) {
    auto path = v1_paths.find(controller);
    if (path == v1_paths.end()) continue;
    for (const auto& m : mounts) {
      if (m.type != "cgroup" || m.options.count(controller) == 0) continue;
      const std::string parent = dirOf(m, path->second) + "/" + kPodsGroup;
      std::string here;
      if (!makeGroup(parent, &here)) {
        if (why.empty()) why = here;
        break;
      }
      std::string& slot = std::string(controller) == "memory" ? c.memory_
                          : std::string(controller) == "cpu"  ? c.cpu_
                                                              : c.pids_;
      slot = parent;
      break;
    }
  }
  if (!c.memory_.empty() || !c.cpu_.empty() || !c.pids_.empty()) {
    c.version_ = Version::kV1;
    c.why_ = why;
    return c;
  }
  return none(why.empty() ? "no cgroup hierarchy with memory, cpu or pids is mounted" : why);
}

std::string PodCgroups::describe() const {
  if (version_ == Version::kNone) return fmt::format("none ({})", why_);
  std::string used;
  for (const auto& [name, dir] : {std::pair<const char*, const std::string*>{"memory", &memory_},
                                  {"cpu", &cpu_},
                                  {"pids", &pids_}}) {
    if (!dir->empty()) used += fmt::format("{}{}", used.empty() ? "" : ", ", name);
  }
  return fmt::format("cgroup {} ({})", version_ == Version::kV2 ? "v2" : "v1", used);
}

PodGroups PodCgroups::of(const std::string& handle) const {
  PodGroups g;
  const std::string name = cgroupNameOf(handle);
  if (version_ == Version::kV2) {
    g.dirs.push_back(memory_ + "/" + name);
    g.procs.push_back(g.dirs.back() + "/cgroup.procs");
    g.oom_file = g.dirs.back() + "/memory.events";
    return g;
  }
  for (const std::string* parent : {&memory_, &cpu_, &pids_}) {
    if (parent->empty()) continue;
    g.dirs.push_back(*parent + "/" + name);
    g.procs.push_back(g.dirs.back() + "/cgroup.procs");
  }
  if (!memory_.empty()) g.oom_file = memory_ + "/" + name + "/memory.oom_control";
  return g;
}

Result<PodGroups> PodCgroups::create(const std::string& handle, const PodLimits& limits) const {
  PodGroups g = of(handle);
  if (version_ == Version::kNone) return g;
  for (const auto& dir : g.dirs) {
    std::string why;
    if (!makeGroup(dir, &why)) {
      remove(g);
      return fail(unavailable("cannot make the pod's cgroup: " + why));
    }
  }
  const std::string name = cgroupNameOf(handle);
  auto limit = [&]() -> Result<void> {
    // CFS: `cpu_milli` thousandths of a CPU each 100 ms period (at least 1 ms, the kernel's floor).
    const int64_t quota_us =
        limits.cpu_milli > 0 ? std::max<int64_t>(1000, limits.cpu_milli * 100) : -1;
    if (version_ == Version::kV2) {
      const std::string dir = memory_ + "/" + name;
      if (limits.memory_bytes > 0) {
        PURSER_TRY(writeText(dir + "/memory.max", std::to_string(limits.memory_bytes)));
        // No swap to spill into, and one OOM kill ends the whole pod (as Kubernetes does).
        if (exists(dir + "/memory.swap.max")) PURSER_TRY(writeText(dir + "/memory.swap.max", "0"));
        if (exists(dir + "/memory.oom.group")) PURSER_TRY(writeText(dir + "/memory.oom.group", "1"));
      }
      if (!cpu_.empty() && quota_us > 0) {
        PURSER_TRY(writeText(dir + "/cpu.max", fmt::format("{} 100000", quota_us)));
      }
      if (!pids_.empty() && limits.pids > 0) {
        PURSER_TRY(writeText(dir + "/pids.max", std::to_string(limits.pids)));
      }
      return {};
    }
    if (!memory_.empty() && limits.memory_bytes > 0) {
      const std::string dir = memory_ + "/" + name;
      PURSER_TRY(writeText(dir + "/memory.limit_in_bytes", std::to_string(limits.memory_bytes)));
      // With swap accounting, memory and swap together are held to the same bound (no swap).
      if (exists(dir + "/memory.memsw.limit_in_bytes")) {
        PURSER_TRY(
            writeText(dir + "/memory.memsw.limit_in_bytes", std::to_string(limits.memory_bytes)));
      }
    }
    if (!cpu_.empty() && quota_us > 0) {
      const std::string dir = cpu_ + "/" + name;
      PURSER_TRY(writeText(dir + "/cpu.cfs_period_us", "100000"));
      PURSER_TRY(writeText(dir + "/cpu.cfs_quota_us", std::to_string(quota_us)));
    }
    if (!pids_.empty() && limits.pids > 0) {
      PURSER_TRY(writeText(pids_ + "/" + name + "/pids.max", std::to_string(limits.pids)));
    }
    return {};
  }();
  if (!limit) {
    remove(g);
    return fail(unavailable("cannot limit the pod's cgroup: " + limit.error().message));
  }
  return g;
}

void PodCgroups::remove(const PodGroups& groups) {
  for (const auto& dir : groups.dirs) ::rmdir(dir.c_str());
}

int64_t PodCgroups::oomKills(const PodGroups& groups) {
  if (groups.oom_file.empty()) return 0;
  std::istringstream in(readAll(groups.oom_file));
  std::string key;
  int64_t value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return 0;
}

}  // namespace purser::exec
