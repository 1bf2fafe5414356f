// The wall around a local pod: who it runs as and what it can see.
//
// A pod runs in namespaces of its own — mount, PID, IPC and UTS (and a user namespace when Purser
// is not root) — under a small init that is PID 1 there and reaps what the pod leaves. Its view
// is built from nothing (a tmpfs root, pivoted into): the host's system directories read-only
// (/usr, /bin, /lib*, /etc, /opt …), Purser's own binary read-only (so a pod may run `purser sim
// llm`), the paths the operator lists read-only, a private /tmp and /dev/shm, a /dev of the usual
// character devices plus its own GPUs' device files, a /proc of its own PID namespace, /sys
// read-only with the cgroup tree hidden, and its working directory (read-write) — nothing else.
// Paths Purser keeps to itself (its data directory, configuration, logs, every team's
// workspaces) are hidden even where they lie under a directory shown. Then it drops to its
// team's account: when Purser is root, a uid/gid of the team's own with no supplementary groups;
// when it is not, the same number inside a user namespace that maps it to Purser's own uid (so
// the view is the only wall between pods and Purser's files, and it holds). No new privileges,
// an empty capability bounding set.
//
// SandboxPlan is made in the parent (it allocates) and raised in the children of a fork of a
// threaded process, where only async-signal-safe calls may be made: raise() and enter() only
// make system calls on what the plan holds.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "common/result.h"

namespace purser::exec {

enum class Isolation {
  kNone,           // pods run as Purser and see what it sees (fleet.local.isolation: none)
  kAccounts,       // Purser is root: each team's pods run as an account (uid/gid) of their own
  kUserNamespace,  // Purser is not root: pods run in user namespaces mapped to Purser's uid
};
const char* isolationName(Isolation isolation);

struct SandboxOptions {
  // The host's directories every pod sees read-only (those that exist; a symbolic link among
  // them is shown as the same link).
  std::vector<std::string> system_paths = {"/usr",   "/bin",    "/sbin", "/lib", "/lib32",
                                           "/lib64", "/libx32", "/etc",  "/opt"};
  std::vector<std::string> read_only_paths;  // the operator's additions (fleet.local)
  // Never seen, even beneath a directory shown, and never shown whoever asks: Purser's data,
  // configuration, logs, workspaces, key files. Absolute.
  std::vector<std::string> hidden_paths;
  // Hidden beneath a directory shown, though a path inside one may be shown on purpose (the
  // configuration's directory: what lies beside it often holds secrets).
  std::vector<std::string> masked_paths;
  std::string self_binary;        // Purser's own program, shown read-only at its path ("" none)
  std::string gpu_share_library;  // the GPU share shim, shown read-only at its path ("" none)
  // Device files every pod gets when the host has them (the GPU driver's control devices).
  std::vector<std::string> shared_devices = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                             "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};
};

// The namespaces a sandbox's init is cloned into (0 for kNone).
int sandboxCloneFlags(Isolation isolation);

// One pod's wall. Its strings stay where they are while it lives (raise() holds pointers).
class SandboxPlan {
 public:
  // `base`: an empty directory of Purser's own (never shown to a pod) to build the view on.
  // `workdir`: the pod's working directory ("" for none: the view's root), shown read-write at its
  // path; it lies beneath `workdir_root` (trusted: the workspaces' root), and the child opens
  // each directory below that root again without following a link, so that nothing a pod
  // changed meanwhile can move it. `gpus`: the pod's GPUs' device indices. `uid`/`gid`: its
  // account (the id inside its user namespace under kUserNamespace); 0 or less: nobody's
  // (65534). `tmp_bytes`: the size of its /tmp and /dev/shm each.
  static SandboxPlan make(Isolation isolation, const SandboxOptions& options,
                          const std::string& base, const std::string& workdir_root,
                          const std::string& workdir, const std::vector<int>& gpus, int64_t uid,
                          int64_t gid, const std::string& hostname, int64_t tmp_bytes);

  SandboxPlan(SandboxPlan&&) = default;
  SandboxPlan& operator=(SandboxPlan&&) = default;

  Isolation isolation() const { return isolation_; }
  // In the child of the clone, before anything else: the user namespace's maps (when there is
  // one), then the view, pivoted into. 0, or an errno with *step saying what failed (stepName).
  int raise(int* step) const;
  // In the pod's own process, last before exec: into its working directory, its account, no new
  // privileges, no capabilities. 0, or an errno with *step.
  int enter(int* step) const;
  // What step `step` of raise() or enter() was, for an error message.
  std::string stepName(int step) const;
  // The view, for tests and the docs: "bind-ro /usr", "tmpfs /tmp", "hide /var/lib/purser", ...
  std::vector<std::string> describe() const;
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }

 private:
  SandboxPlan() = default;
  struct Op {
    enum Kind { kDir, kFile, kBind, kBindWorkdir, kTmpfs, kProc, kDevpts, kSymlink, kAttr } kind;
    const char* source = nullptr;  // bind: host path; symlink: its text
    const char* target = nullptr;  // in the view, under the base
    const char* data = nullptr;    // file system options
    unsigned long flags = 0;       // mount flags; kAttr: the MOUNT_ATTR_ bits to set
    bool recursive = false;        // bind, kAttr: with what is mounted beneath it
    bool optional = false;         // a failure is passed over (a device the host lacks)
    const char* label = "";        // for describe(): "bind-ro", "hide", ...
  };
  const char* keep(std::string s);
  std::string at(const std::string& view_path);  // the path under the base
  void addDirs(const std::string& view_path);    // a kDir for each directory down to it
  void add(Op op) { ops_.push_back(op); }

  Isolation isolation_ = Isolation::kNone;
  std::deque<std::string> text_;  // what the ops point into (a deque: nothing moves)
  std::vector<Op> ops_;
  const char* base_ = "";
  const char* old_root_ = "";  // base/.oldroot: where the host's root goes at the pivot
  const char* workdir_ = "/";
  const char* workdir_root_ = "";           // opened as it is
  std::vector<const char*> workdir_steps_;  // each opened beneath the last without a link
  const char* hostname_ = "";
  const char* uid_map_ = "";  // user namespace maps ("<inside> <outside> 1")
  const char* gid_map_ = "";
  uid_t uid_ = 65534;
  gid_t gid_ = 65534;
};

// Can this process start sandboxes of `isolation`? Builds one (a fork that raises a view in its
// namespaces and exits); the reason when it cannot. `base` as for SandboxPlan::make.
Result<void> probeSandbox(Isolation isolation, const SandboxOptions& options,
                          const std::string& base);

}  // namespace purser::exec
