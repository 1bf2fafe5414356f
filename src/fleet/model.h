// The fleet's objects, with Kueue's names and meanings: ResourceFlavor, Cohort, ClusterQueue,
// LocalQueue, WorkloadPriorityClass and Workload. Plain values: the admission engine owns a set
// of them and reads them without I/O.
//
// Amounts are int64 milli-units of the resource (1 cpu = 1000, 1Gi = 1073741824000), converted
// exactly from Kubernetes quantities (Quantity::milliValue rounds finer input up, as Kubernetes
// does). Nothing here uses floating point.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace purser::fleet {

using Amount = int64_t;  // milli-units
using Resources = std::map<std::string, Amount>;

struct Taint {
  std::string key;
  std::string value;
  std::string effect;  // NoSchedule, PreferNoSchedule, NoExecute
};

struct Toleration {
  std::string key;
  std::string op = "Equal";  // Equal or Exists
  std::string value;
  std::string effect;  // empty: every effect
};

bool tolerates(const std::vector<Toleration>& tolerations, const Taint& taint);

// RFC 1123: a DNS label ([a-z0-9-], starting and ending alphanumeric, at most 63 characters), and
// a subdomain (labels joined by dots, at most 253). Kubernetes object names (nodes among them) are
// subdomains, namespaces labels.
bool isDnsLabel(std::string_view s);
bool isDnsSubdomain(std::string_view s);

struct ResourceFlavor {
  std::string name;
  std::map<std::string, std::string> node_labels;
  std::vector<Taint> taints;
  std::vector<Toleration> tolerations;
};

// One resource's quota in one flavor.
struct Quota {
  Amount nominal = 0;
  std::optional<Amount> borrowing_limit;  // none: unlimited
  std::optional<Amount> lending_limit;    // none: all of nominal may be lent
};

struct FlavorQuotas {
  std::string flavor;
  std::map<std::string, Quota> resources;
};

struct ResourceGroup {
  std::vector<std::string> covered;
  std::vector<FlavorQuotas> flavors;  // in order of preference
};

enum class QueueingStrategy { kBestEffortFifo, kStrictFifo };
enum class WithinClusterQueue { kNever, kLowerPriority, kLowerOrNewerEqualPriority };
enum class ReclaimWithinCohort { kNever, kLowerPriority, kAny };
enum class BorrowWithinCohort { kNever, kLowerPriority };

struct PreemptionPolicy {
  WithinClusterQueue within_cluster_queue = WithinClusterQueue::kNever;
  ReclaimWithinCohort reclaim_within_cohort = ReclaimWithinCohort::kNever;
  BorrowWithinCohort borrow_within_cohort = BorrowWithinCohort::kNever;
  std::optional<int32_t> max_priority_threshold;  // for borrow_within_cohort
};

enum class WhenCanBorrow { kMayStopSearch, kTryNextFlavor };
enum class WhenCanPreempt { kTryNextFlavor, kMayStopSearch };
enum class FungibilityPreference { kNone, kBorrowingOverPreemption, kPreemptionOverBorrowing };

struct FlavorFungibility {
  WhenCanBorrow when_can_borrow = WhenCanBorrow::kMayStopSearch;
  WhenCanPreempt when_can_preempt = WhenCanPreempt::kTryNextFlavor;
  FungibilityPreference preference = FungibilityPreference::kNone;
};

enum class StopPolicy { kNone, kHold, kHoldAndDrain };

struct Cohort {
  std::string name;
  std::string parent;                 // empty: a root
  std::vector<ResourceGroup> quotas;  // the cohort's own quota
  int64_t fair_weight_milli = 1000;
};

struct ClusterQueue {
  std::string name;
  std::string cohort;  // empty: none
  QueueingStrategy strategy = QueueingStrategy::kBestEffortFifo;
  // label -> allowed values; absent: every namespace.
  std::optional<std::map<std::string, std::vector<std::string>>> namespace_selector;
  PreemptionPolicy preemption;
  FlavorFungibility fungibility;
  std::vector<ResourceGroup> resource_groups;
  int64_t fair_weight_milli = 1000;
  StopPolicy stop_policy = StopPolicy::kNone;
};

struct LocalQueue {
  std::string namespace_;
  std::string name;
  std::string cluster_queue;
};

struct WorkloadPriorityClass {
  std::string name;
  int32_t value = 0;
};

// Kueue's topology-aware scheduling request: keep a pod set's pods inside one domain at a level
// of the fleet's topology. Levels, narrowest first: "nvlink" (one NVLink domain of one node),
// "node" (also "kubernetes.io/hostname"), "rack", "block"; any other name is a node label key
// whose values are the domains.
struct TopologyRequest {
  std::string level;      // empty: no request
  bool required = false;  // false: preferred (wider levels, then anywhere, when it cannot be met)
};

struct PodSet {
  std::string name;
  int64_t count = 1;
  std::optional<int64_t> min_count;  // partial admission down to this count
  Resources requests;                // per pod
  std::vector<Toleration> tolerations;
  std::map<std::string, std::string> node_selector;
  TopologyRequest topology;
  // HAMi's nvidia.com/use-gputype and nouse-gputype: GPU models (a case-insensitive part of the
  // model's name) the pods may, or may not, run on. Empty: any.
  std::vector<std::string> use_gpu_types;
  std::vector<std::string> nouse_gpu_types;
  // What each pod runs, for executors that run commands (admission never reads it): the first
  // container's command followed by its args, its working directory and its environment.
  std::vector<std::string> command;
  std::string working_dir;
  std::map<std::string, std::string> env;
  // What each pod is held to where it runs (its first container's limits: memory, cpu); the
  // engine never reads it (limits stand in for missing requests in `requests`).
  Resources limits;
  std::string image;  // the container image, for executors that run images (Kubernetes)
};

// Where one pod of an admitted pod set runs, when the fleet has an inventory.
struct PodPlacement {
  std::string node;
  std::vector<int> gpus;  // indices on the node
  int64_t gpu_milli = 0;  // of each of those GPUs, in thousandths (1000: the whole GPU)
};

// What a pod set was admitted with.
struct PodSetAssignment {
  std::string name;
  int64_t count = 0;
  std::map<std::string, std::string> flavors;  // resource -> flavor
  Resources usage;                             // for all `count` pods
  std::vector<PodPlacement> placements;        // one per pod; empty without an inventory
};

struct Admission {
  std::string cluster_queue;
  std::vector<PodSetAssignment> pod_sets;
};

// A workload that serves a model through the gateway (`purser.dev/serve`): each of its pods, once
// it runs and answers its health check, is a target of the route until it is stopped.
struct ServeSpec {
  std::string route;               // the gateway route (model alias) its replicas join
  int64_t port = 0;                // pod i listens on port + i (PURSER_SERVE_PORT)
  std::string api = "openai";      // what its server speaks: openai or anthropic
  std::string model;               // the upstream model name its server answers to
  std::string health = "/health";  // a GET that answers 200 once it serves
  // Its server's Prometheus metrics, scraped for the gateway's load- and health-aware routing
  // as a provider's metrics_url is ("": not scraped), and the engine that writes them.
  std::string metrics = "/metrics";
  std::string engine = "vllm";  // vllm, sglang or tgi
};

struct Workload {
  std::string name;  // "namespace/name" (bare name when the namespace is empty)
  std::string namespace_;
  std::string local_queue;    // in the workload's namespace
  std::string cluster_queue;  // resolved from the local queue (or given, for admitted ones)
  int32_t priority = 0;
  std::string priority_class;
  // Creation time in milliseconds; INT64_MIN stands for "never set" (earlier than any time).
  int64_t created_ms = INT64_MIN;
  int64_t admitted_ms = 0;  // quota reservation time (for candidate ordering)
  // Set for a workload requeued by a preemption: it queues as of then (its eviction), not as of
  // its creation.
  std::optional<int64_t> queued_ms;
  std::string uid;
  std::vector<PodSet> pod_sets;
  std::optional<Admission> admission;  // set while it holds quota
  std::optional<ServeSpec> serve;      // for executors and the gateway; the engine ignores it
  // How long a run may last, in seconds (Kueue's maximumExecutionTimeSeconds); 0: no limit.
  // For the fleet service and executors; the engine ignores it.
  int64_t max_execution_seconds = 0;
};

}  // namespace purser::fleet
