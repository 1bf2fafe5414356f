// PodCgroups: the control groups that hold a local pod to its limits — memory (its template's
// limits.memory, else its request), CPU (limits.cpu, as a CFS quota) and a cap on its processes
// and threads — and tell afterwards whether the kernel killed one of its processes for memory.
//
// Each pod gets a group of its own under a group of Purser's ("purser-pods", beneath the group
// Purser itself runs in, as a delegated subtree is used under systemd). cgroup v2 is used where
// Purser's group has the memory controller there; otherwise cgroup v1's memory, cpu and pids
// hierarchies, each where it is mounted and writable; otherwise none, and the executor falls back
// to rlimits. A pod's group is made before its first process starts and removed once it is empty.
//
// Thread-safe: the object is immutable after detect(); its methods touch only the pod's files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace purser::exec {

struct PodLimits {
  int64_t memory_bytes = 0;  // 0: none
  int64_t cpu_milli = 0;     // 0: none
  int64_t pids = 0;          // processes and threads at once; 0: none
};

// Where one pod's groups are, made by PodCgroups::create.
struct PodGroups {
  std::vector<std::string> dirs;   // one per hierarchy; removed, deepest first, when empty
  std::vector<std::string> procs;  // the cgroup.procs files to put its first process in
  std::string oom_file;            // memory.oom_control (v1) or memory.events (v2); "" none
};

class PodCgroups {
 public:
  enum class Version { kNone, kV1, kV2 };

  // Finds the hierarchies this process may make pod groups in. `proc_self` and `mountinfo` are
  // /proc/self/cgroup and /proc/self/mountinfo (tests give their own); a hierarchy that cannot
  // be written is left out, with the reason in why().
  static PodCgroups detect(const std::string& proc_self = "/proc/self/cgroup",
                           const std::string& mountinfo = "/proc/self/mountinfo");
  // No groups: rlimits stand in.
  static PodCgroups none(std::string why);

  Version version() const { return version_; }
  bool hasMemory() const { return !memory_.empty(); }
  bool hasCpu() const { return !cpu_.empty(); }
  bool hasPids() const { return !pids_.empty(); }
  // "cgroup v1 (memory, cpu, pids)", "cgroup v2 (memory, cpu, pids)", "none (...why)".
  std::string describe() const;

  // Makes `handle`'s groups with `limits` (a group left from an earlier pod of that handle is
  // reused). Fails, leaving nothing behind, when a group cannot be made or limited.
  Result<PodGroups> create(const std::string& handle, const PodLimits& limits) const;
  // The groups create() made for `handle` (to remove them, or read their kills, after a restart).
  PodGroups of(const std::string& handle) const;
  // Removes `groups`' directories that are empty (a group with processes left is kept).
  static void remove(const PodGroups& groups);
  // How many of the pod's processes the kernel killed for memory (oom_kill of its group).
  static int64_t oomKills(const PodGroups& groups);

  // The parent groups, for tests: hierarchy root of each controller used.
  const std::string& memoryParent() const { return memory_; }
  const std::string& cpuParent() const { return cpu_; }
  const std::string& pidsParent() const { return pids_; }

 private:
  Version version_ = Version::kNone;
  // The parent group of the pods in each hierarchy ("" when not used). With v2 all three are the
  // same directory.
  std::string memory_, cpu_, pids_;
  std::string why_;  // why none, or which controllers are missing
};

// The name a pod's group has (a handle may be too long for one directory entry).
std::string cgroupNameOf(const std::string& handle);

}  // namespace purser::exec
