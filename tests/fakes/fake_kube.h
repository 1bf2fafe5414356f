// A wire-level fake of the Kubernetes API server, for the Kubernetes executor's tests (no API
// server is installable on these machines). It speaks the real paths and objects over HTTP/1.1:
// Nodes (list), batch/v1 Jobs (create, merge-patch, delete with a uid precondition, list and
// watch), Pods (list, watch) — lists carry a resourceVersion, watch streams of
// ADDED/MODIFIED/DELETED events resume from one, and a version it no longer keeps gets a 410
// Expired ERROR event — and pod logs; it checks the bearer token. Its "Job controller and
// kubelet": a Job that is not suspended gets `parallelism` Running pods (their podIP loopback, so
// a test's own server can stand in for what a pod serves) and a startTime; a pod
// that fails past the Job's backoffLimit (default 6) fails the Job (else it is replaced), enough
// successes (completions, default one) complete it; suspending it deletes its pods. JobSets
// (jobset.x-k8s.io/v1alpha2) and Kubeflow PyTorchJobs (kubeflow.org/v1) are served the same way
// (list, watch, merge-patch, delete): released, each gets its pods (replicas x parallelism per
// replicated Job, replicas per replica type), all succeeded is Completed (Succeeded), one failed
// is Failed. The test finishes pods with an exit code. Every request is recorded for the test to
// inspect.
#pragma once

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fakes/fake_upstream.h"

namespace purser::testing {

class FakeKube {
 public:
  explicit FakeKube(std::string token);
  ~FakeKube();

  uint16_t port() const { return server_->port(); }

  struct Request {
    std::string method, target, body, content_type;
  };
  std::vector<Request> requests() const;
  // The Job named `name` (any namespace) as it is now; null when there is none.
  nlohmann::json job(const std::string& name) const;
  // The name of the Job whose pods carry purser.dev/handle = `handle`... by the Job's label.
  std::string jobOfWorkload(const std::string& workload_prefix) const;
  // Ends one running pod of the Job with `exit_code` (Succeeded when 0, else Failed), writing
  // `log` as its log.
  bool finishPod(const std::string& job_name, int exit_code, const std::string& log);
  // What `kubectl apply` of a Job, a JobSet or a PyTorchJob does: it is created (with a uid) as
  // given.
  void applyJob(const nlohmann::json& job);
  // The JobSet or PyTorchJob named `name` as it is now; null when there is none.
  nlohmann::json object(const std::string& name) const;
  // What `kubectl delete job` does.
  bool deleteJob(const std::string& ns, const std::string& name);
  // The running pods of the Job.
  int runningPods(const std::string& job_name) const;
  // Ends every watch connection abruptly (as an API server restart or a load balancer does).
  void dropWatches();
  // Forgets the events so far: a watch resuming from an older version gets 410 Expired.
  void compact();
  int64_t resourceVersion() const;
  // The resourceVersion of the newest event about an object of `kind` (Pod, Job).
  int64_t lastEventVersion(const std::string& kind) const;
  // Adds Node `node` (a v1 Node object), or replaces the one of its name.
  void setNode(const nlohmann::json& node);

 private:
  void handle(int fd);
  void event(const std::string& type, const nlohmann::json& object);  // mu_ held
  void reconcile(const std::string& key);                             // mu_ held
  void reconcileObject(const std::string& key);                       // mu_ held
  void startPod(const std::string& ns, const std::string& owner,
                const nlohmann::json& tmpl);                        // mu_ held
  int64_t deleteRunningPods(const std::vector<std::string>& keys);  // mu_ held
  void watch(int fd, int64_t from, const std::string& kind);

  const std::string token_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  int64_t rv_ = 100;
  int64_t kept_from_ = 0;  // a watch from a version below this one is told 410 Expired
  int64_t drops_ = 0;
  bool ending_ = false;
  std::map<std::string, nlohmann::json> jobs_;     // "ns/name"
  std::map<std::string, nlohmann::json> pods_;     // "ns/name"
  std::map<std::string, nlohmann::json> nodes_;    // by name
  std::map<std::string, nlohmann::json> objects_;  // JobSets, PyTorchJobs: "plural/ns/name"
  std::map<std::string, std::string> logs_;        // pod name -> log
  struct Event {
    int64_t rv;
    std::string type;
    nlohmann::json object;
  };
  std::vector<Event> events_;
  std::vector<Request> requests_;
  std::unique_ptr<FakeUpstream> server_;
};

}  // namespace purser::testing
