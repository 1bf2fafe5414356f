// KubernetesExecutor: pods as Kubernetes Jobs, the way Kueue runs them — for a fleet whose GPUs a
// cluster already schedules.
//
// Each pod becomes a batch/v1 Job of one pod, created suspended (spec.suspend: true) with the
// kueue.x-k8s.io/queue-name label and Purser's own (the label purser.dev/managed, the annotation
// purser.dev/handle), then released by a merge patch that un-suspends it and sets its node
// selector (kubernetes.io/hostname) from the placement. Its container runs the pod set's image
// with its command, working directory and environment, asking for its CPU and memory and limited
// to its whole GPUs (nvidia.com/gpu). Pods are followed with one list-and-watch of the pods
// Purser manages: a watch that ends resumes from the last resourceVersion it saw; a 410 Gone (the
// version is too old) relists. Phases: Pending and Running are running; Succeeded; Failed with
// the container's exit code. Stopping suspends the Job (Kubernetes ends its pod with the pod's
// own grace period); forgetting it deletes it. Until the first list succeeds, or while the API
// cannot be reached, status() is kUnavailable.
//
// Jobs, JobSets and Kubeflow PyTorchJobs users apply themselves with the
// kueue.x-k8s.io/queue-name label (`adopt_jobs`) are found by a list-and-watch per kind, as
// Kueue's controllers find them (a kind the cluster does not serve is looked for again every
// minute): a new one that is not finished is reported by takeFound() (one that runs although
// Purser never released it is suspended first, as Kueue does). Released like Purser's own Jobs
// (each pod template gains the label and annotation, and its pod set's nodes), it is followed by
// its own status: Complete (Completed, Succeeded) is succeeded, Failed is failed (with a failed
// pod's exit code), suspended again with nothing active is stopped. It is never deleted, except
// by discard(); a deleted one is reported gone.
//
// With `read_nodes`, the cluster's Nodes are the inventory's (see inventoryNodeOf): listed at the
// first nodes() call and again every `node_refresh`; a list that fails keeps the last one.
//
// Thread-safe. Background threads watch pods and Jobs; another lists Nodes once they are read.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "exec/executor.h"
#include "exec/kube_api.h"

namespace purser::exec {

struct KubernetesExecutorOptions {
  KubeApiOptions api;
  std::string default_image;        // for pod sets that name none
  std::function<void()> on_change;  // a watched pod changed (called from the watch thread)
  bool adopt_jobs = true;           // Jobs users apply with the queue-name label are found
  bool read_nodes = false;          // nodes() reports the cluster's Nodes
  int64_t gpu_memory_mib = 0;       // a GPU's memory where a Node's labels do not say
  Duration node_refresh = std::chrono::seconds(30);
  // Pod Security: every template must meet "baseline"; with `restricted`, "restricted" too.
  bool restricted = false;
  // A template may ask for a service account token or name a service account; otherwise every
  // pod Purser creates has automountServiceAccountToken false and the namespace's default one.
  bool service_account_tokens = false;
};

// A Kubernetes Node as an inventory node: its name and labels; its taints (a cordoned node,
// spec.unschedulable, gets node.kubernetes.io/unschedulable:NoSchedule as the scheduler sees it);
// allocatable CPU and memory; allocatable nvidia.com/gpu GPUs of the model and memory (MiB) that
// NVIDIA's GPU feature discovery labels (nvidia.com/gpu.product, else "gpu";
// nvidia.com/gpu.memory, else `gpu_memory_mib`); rack and block from the labels purser.dev/rack
// and purser.dev/block. An error names what is wrong (a Node with GPUs of unknown memory is one).
Result<fleet::InventoryNode> inventoryNodeOf(const nlohmann::json& node, int64_t gpu_memory_mib);

class KubernetesExecutor final : public Executor {
 public:
  static Result<std::unique_ptr<KubernetesExecutor>> create(const Clock& clock,
                                                            KubernetesExecutorOptions options);
  ~KubernetesExecutor() override;

  Result<std::string> start(const PodLaunch& pod) override;
  Result<PodStatus> status(const std::string& handle) override;
  Result<void> stop(const std::string& handle, Duration grace) override;
  Result<std::string> logTail(const std::string& handle, size_t max_bytes) override;
  Result<void> adopt(const Adopted& pod) override;
  void forget(const std::string& handle) override;
  std::optional<Result<std::vector<fleet::InventoryNode>>> nodes() override;
  std::vector<Found> takeFound() override;
  Result<std::string> create(const std::string& object_json, const std::string& ns) override;
  std::optional<std::string> address(const std::string& handle) override;
  void discard(const std::string& key) override;

  // Lists made (for tests and diagnostics).
  int64_t lists() const { return lists_.load(); }

 private:
  struct PodState {
    std::string name, phase;  // the pod's name and phase (Pending, Running, Succeeded, Failed)
    std::string ip;           // status.podIP, once it has one
    std::optional<int> exit_code;
    std::optional<SystemTime> started_at, finished_at;
  };
  struct Job {
    std::string ns, name;
    int kind = 0;  // of a user's object: Job, JobSet, PyTorchJob
    SystemTime started_at{};
    bool stopping = false;
    bool existing = false;  // a user's object, followed by its own status
  };
  // An object a user applied with the queue-name label, as last seen.
  struct UserJob {
    int kind = 0;
    std::string uid;
    bool suspended = false, complete = false, failed = false;
    bool released = false;  // a pod template carries purser.dev/managed (Purser released it)
    int64_t active = 0;
    std::optional<SystemTime> started_at, finished_at;
    std::optional<MonoTime> ended_seen;  // when it was first seen complete or failed
    nlohmann::json spec;                 // to release it (a JobSet's replicatedJobs go back whole)
  };
  // Watched feeds: the pods, then one per kind of object (Job, JobSet, PyTorchJob).
  static constexpr int kPodFeed = 0;
  static constexpr int kFeeds = 4;

  KubernetesExecutor(const Clock& clock, KubernetesExecutorOptions options,
                     std::unique_ptr<KubeApi> api);
  void watchLoop(int feed);
  bool relist(int feed, std::string& version);
  std::string feedPath(int feed) const;
  void apply(int feed, const std::string& type, const nlohmann::json& object);
  void applyPod(const std::string& type, const nlohmann::json& pod);
  void applyObject(int kind, const std::string& type, const nlohmann::json& object);
  Result<std::string> release(const PodLaunch& pod);
  Result<std::vector<fleet::InventoryNode>> listNodes();
  void nodeLoop();

  const Clock& clock_;
  const KubernetesExecutorOptions options_;
  std::unique_ptr<KubeApi> api_;
  // guarded by mu_: everything from here to next_ (the watchers write it, the fleet reads it).
  mutable std::mutex mu_;
  std::map<std::string, Job> jobs_;       // by handle ("namespace.job-name"; "namespace/name" for
                                          // a user's Job)
  std::map<std::string, PodState> pods_;  // by handle, as last seen
  // By handle: the first pod that failed, its exit code and name.
  std::map<std::string, std::pair<int, std::string>> failed_codes_;
  std::map<std::string, UserJob> user_jobs_;  // by handle ("ns/name", "plural/ns/name")
  std::set<std::string> reported_;            // uids of user objects takeFound() returned
  std::vector<Found> found_;                  // to return from takeFound()
  bool synced_[kFeeds] = {};                  // a list has succeeded and the watch is current
  bool absent_[kFeeds] = {};                  // the cluster does not serve this kind (404)
  std::string down_[kFeeds];                  // why the API cannot be reached now
  int64_t next_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> lists_{0};
  std::vector<std::thread> watchers_;
  // The Nodes, as last listed (nodes_mu_): none until the first nodes() call starts nodes_thread_.
  std::mutex nodes_mu_;
  std::optional<std::vector<fleet::InventoryNode>> nodes_;
  std::string nodes_error_;
  std::thread nodes_thread_;
};

}  // namespace purser::exec
