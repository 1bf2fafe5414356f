// What the fleet service keeps of a workload: the spec as submitted, who owns and pays for it,
// where it is in its life, its admission, its pods on an executor and its GPU charges; and the
// JSON it is stored as (one row of fleet_workloads per workload).
//
// A workload's life, as Kueue and the engines have it:
//   pending   → queued, never admitted (or requeued after its pods failed to start)
//   suspended → queued and held: a hard wallet cannot hold its next stretch of GPU time
//   evicted   → preempted (or stopped for budget): its pods were stopped, it waits to be admitted
//               again
//   admitted  → quota reserved and placed; its pods are starting, or it runs nothing (a workload
//               without a command holds its quota until it is deleted)
//   running   → its pods run on an executor
//   succeeded → every pod exited 0                                             (terminal)
//   failed    → a pod failed (its exit code and the log's end kept), it could not start, or it
//               was deleted before it ended                                    (terminal)
//   unknown   → its executor cannot be reached; its quota stays held
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/money.h"
#include "common/result.h"
#include "fleet/model.h"

namespace purser::workloads {

// One pod of the current run, on the executor that runs it.
struct PodRun {
  std::string pod_set;
  int64_t index = 0;
  std::string executor = "local";  // which executor runs it
  std::string handle;              // the executor's name for it
  std::string phase = "running";   // running, succeeded, failed, stopped (preempted or deleted)
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string reason;  // why it ended where its executor says more: "OOMKilled"
  int64_t started_ms = 0, finished_ms = 0;
  int64_t pid = 0;          // the local executor's process group, to adopt it after a restart
  int64_t pid_start = 0;    // and when that process started (guards against a reused pid)
  bool serving = false;     // a target of its workload's route now (not stored: rejoins after a
                            // restart once healthy)
  int health_failures = 0;  // health checks failed in a row while serving (not stored)
};

struct Record {
  fleet::Workload spec;  // as submitted (its admission lives below)
  int64_t seq = 0;
  std::string tenant_id, team_id, owner_kind, owner_id, key_id;
  // Work a user handed an engine directly: "EXECUTOR:KEY" of the object it was found as (a
  // Kubernetes Job: "kubernetes:namespace/name/uid"); it runs there, whatever its flavor.
  std::string external;
  // The Job, JobSet or PyTorchJob it was submitted as (JSON), for an engine that runs the object
  // itself (Kubernetes creates it once, then treats it as found); empty for other shapes.
  std::string manifest;
  std::string state = "pending";
  std::string reason, message;  // why it is in its state, when there is a why
  std::optional<fleet::Admission> admission;
  int64_t submitted_ms = 0, admitted_ms = 0, started_ms = 0, metered_until_ms = 0, finished_ms = 0;
  std::optional<int> exit_code;  // of the pod that decided how it ended
  std::string log_tail;          // the end of that pod's output, once it ended
  std::vector<PodRun> pods;      // of the current run
  int64_t runs = 0;              // how many times its pods were started
  // Run `runs` was written before its pods were asked to start, and their start is not known to
  // have finished (replicas sharing the store): whoever leads the fleet next starts that run
  // again under the same keys, which takes back the pods that did start.
  bool launching = false;
  Money charged;
  int64_t preemptions = 0;
  std::string hold;     // the budget hold's message while held
  int64_t version = 0;  // bumped at every write; a retried older write never wins
};

bool isTerminal(const std::string& state);
// Admitted by the engine: its quota is held (admitted, running, unknown).
bool holdsQuota(const std::string& state);

std::string recordText(const Record& r);

// What a tenant sees of a namespace, of "namespace/name" or of a message naming them: Purser's
// "NAME@TENANT-ID" for a second tenant's namespace of a name is shown as NAME.
std::string shownText(std::string text);
// kDataLoss when the text is not a record.
Result<Record> recordFrom(const std::string& text);

}  // namespace purser::workloads
