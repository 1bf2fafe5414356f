// SlurmExecutor: pods as Slurm batch jobs, one job per pod, through Slurm's own tools (sbatch,
// scontrol, scancel) — the engine an HPC site already runs.
//
// A pod becomes `sbatch --export=NONE` of a script that exports its environment and execs its
// argv, with --gres=gpu[:TYPE]:N for its whole GPUs, --cpus-per-task and --mem from its requests,
// --nodelist from its placement, --time from its time limit, --chdir from its working directory
// and --output into log_dir
// (which must be a directory the nodes share). Slurm binds the GPUs itself: the job sees
// SLURM_JOB_GPUS and CUDA_VISIBLE_DEVICES as Slurm sets them (Purser's own placement's
// CUDA_VISIBLE_DEVICES is not passed). Status comes from one `scontrol show job -o` for all jobs,
// at most once a second; a job Slurm forgot (past MinJobAge) has ended with no code to tell.
// Stopping sends SIGTERM to the batch script and its steps (scancel --full --signal=TERM), then,
// once the grace has passed, scancel. Handles end in ".slurm-<job id>", so after a restart a
// pod is adopted by its handle alone. When Slurm cannot be reached, status() is kUnavailable.
//
// With `read_nodes`, Slurm's nodes are the inventory's (`scontrol show node -o`, read at most
// once per `node_refresh`; see inventoryNodeOfSlurm).
//
// Each team's jobs run as a Unix account of its own (`accounts`: `sbatch --uid/--gid` when Purser
// runs as root), never as Purser's user: its script, output and default working directory are
// in <log_dir>/<team>, owned by that account, mode 0700, so no job reads another team's scripts
// (their environment) or logs; a job's log is read without following a link it may have made.
// A team without an account cannot start jobs (the start says so).
//
// Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <optional>

#include "exec/command.h"
#include "exec/executor.h"

namespace purser::exec {

struct SlurmExecutorOptions {
  std::string log_dir;    // the jobs' output (and scripts): a directory the nodes share
  std::string partition;  // empty: the cluster's default
  std::string gres_type;  // "h100" gives --gres=gpu:h100:N; empty: --gres=gpu:N
  std::string conf;       // SLURM_CONF for the tools; empty: their default
  std::string bin_dir;    // where sbatch, scontrol and scancel are; empty: PATH
  Duration command_timeout = std::chrono::seconds(30);
  Duration refresh = std::chrono::seconds(1);  // how stale the jobs' states may be
  bool read_nodes = false;                     // nodes() reports Slurm's nodes
  int64_t gpu_memory_mib = 0;                  // each GPU's memory (Slurm does not know it)
  Duration node_refresh = std::chrono::seconds(30);
  // Team (namespace) -> the Unix account (uid, gid) its jobs run as.
  struct Account {
    std::string name;
    int64_t uid = -1, gid = -1;
  };
  std::map<std::string, Account> accounts;
  // The GPU share shim, at the same path on every node (installed with Purser's package), preloaded
  // into jobs that hold a share (gpu_share_env.h); "" refuses them.
  std::string gpu_share_library;
};

// One line of `scontrol show node -o` as an inventory node: NodeName, CPUTot (whole CPUs),
// RealMemory (MiB), the GPUs of its Gres ("gpu:h100:8(S:0-1)": 8 GPUs of model h100, "gpu" when
// untyped, of `gpu_memory_mib` each; GPUs of another type beside the first are left out, as a
// node's GPUs share a model here; a node with GPUs and no memory for them is an error), labels
// kubernetes.io/hostname, purser.dev/executor: slurm and slurm.schedmd.com/partition (its first
// partition); a node Slurm will not give work to (DOWN, DRAIN, FAIL, ...) is tainted
// node.kubernetes.io/unschedulable:NoSchedule. An error names what is wrong.
Result<fleet::InventoryNode> inventoryNodeOfSlurm(const std::string& line, int64_t gpu_memory_mib);

class SlurmExecutor final : public Executor {
 public:
  SlurmExecutor(const Clock& clock, SlurmExecutorOptions options);

  Result<std::string> start(const PodLaunch& pod) override;
  Result<PodStatus> status(const std::string& handle) override;
  Result<void> stop(const std::string& handle, Duration grace) override;
  Result<std::string> logTail(const std::string& handle, size_t max_bytes) override;
  Result<void> adopt(const Adopted& pod) override;
  void forget(const std::string& handle) override;
  std::optional<Result<std::vector<fleet::InventoryNode>>> nodes() override;
  std::optional<std::string> address(const std::string& handle) override;

  // The Slurm job id of a handle (nullopt when it is not one of this executor's).
  static std::optional<int64_t> jobId(const std::string& handle);

 private:
  struct Job {
    int64_t id = 0;
    PodStatus status;
    std::string host;   // BatchHost: the node its batch script runs on
    bool seen = false;  // ever listed by scontrol
    std::optional<MonoTime> kill_at;
  };
  Result<void> refreshLocked(bool force);
  Result<CommandResult> tool(const std::string& name, std::vector<std::string> args);
  void escalateLocked(Job& job);

  const Clock& clock_;
  const SlurmExecutorOptions options_;
  // guarded by mu_: everything below it (Slurm's commands run with it held, one at a time).
  std::mutex mu_;
  std::map<std::string, Job> jobs_;  // by handle
  std::optional<MonoTime> refreshed_;
  std::optional<Error> down_;  // why Slurm could not be asked, at the last refresh
  int64_t next_ = 0;
  std::optional<MonoTime> nodes_read_;  // when nodes_ was last asked for
  std::optional<Result<std::vector<fleet::InventoryNode>>> nodes_;
};

}  // namespace purser::exec
