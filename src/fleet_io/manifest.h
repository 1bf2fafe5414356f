// Kueue manifests as fleet objects: the YAML an administrator already applies with kubectl
// (ResourceFlavor, Cohort, ClusterQueue, LocalQueue, WorkloadPriorityClass) read into the plain
// values of model.h, and one Workload read for submission. Pure functions, no I/O; safe to call
// from any thread.
//
// What is read:
//   - kueue.x-k8s.io/v1beta1 and v1beta2 objects of those five kinds (Cohort also v1alpha1);
//     v1beta1 names the cohort `spec.cohort` and a cohort's parent `spec.parent`, v1beta2 names
//     them `spec.cohortName` and `spec.parentName`; using the other version's name is an error
//     that says so. v1beta1 also accepts flavorFungibility's old values Borrow and Preempt (both
//     mean MayStopSearch).
//   - `v1 Namespace` objects, for their labels (namespaceSelector matches against them; each
//     namespace also carries kubernetes.io/metadata.name, as in Kubernetes), and `v1 List`
//     objects (what `kubectl get -o yaml` prints), item by item.
//   - Quantities ("20", "500m", "16Gi", 4) are converted exactly to milli-units.
//
// What is reported, and how (every error names file:line:col, the object and the field path):
//   - Objects of other API groups (a Deployment, a ConfigMap) are warnings: not fleet objects.
//   - Kueue kinds Purser does not model (AdmissionCheck, Topology, MultiKueueConfig, ...) are
//     warnings; a Workload inside a manifest stream is a warning too (use parseWorkload).
//   - An unknown kueue.x-k8s.io kind or version is an error: it is almost always a typo, and
//     silently skipping a ClusterQueue would change what the fleet admits.
//   - Known Kueue fields Purser does not implement (admissionChecks, admissionChecksStrategy,
//     topologyName, tolerationSeconds, ...) are warnings naming the field; they are never
//     dropped silently. Unknown fields are errors, with a did-you-mean where one is close.
//   - Malformed or negative quantities, missing names, a flavor whose resources do not list the
//     group's coveredResources in order, limits without a cohort, duplicate names: errors. All
//     errors of a stream come back together, as one Error listing each.
//   - Cross-object checks (unknown flavors, cohort cycles) are Engine::create's, on toWorld().
//
// namespaceSelector: `{}` admits every namespace (namespace_selector = an empty map). An absent
// (or null) selector admits no namespace in Kueue (its API says "a nothing selector"), so it maps
// to a selector no namespace satisfies, {kubernetes.io/metadata.name: []}, and a warning says
// how to admit every namespace. matchLabels and matchExpressions with operator In are mapped
// (requirements on one key intersect); NotIn, Exists and DoesNotExist are errors, since dropping
// them would admit namespaces the manifest excludes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "fleet/engine.h"
#include "fleet/model.h"

namespace purser::fleet {

struct ManifestSet {
  std::vector<ResourceFlavor> flavors;
  std::vector<Cohort> cohorts;
  std::vector<ClusterQueue> cluster_queues;
  std::vector<LocalQueue> local_queues;
  std::vector<WorkloadPriorityClass> priority_classes;
  std::map<std::string, std::map<std::string, std::string>> namespaces;  // name -> labels
  // "file:line:col: ClusterQueue \"team-a\": spec.admissionChecks: not supported by Purser;
  // ignored"
  std::vector<std::string> warnings;
};

// A YAML stream (documents separated by ---) of Kubernetes objects, as described above.
// Text that is not valid UTF-8, nested deeper than `max_nesting` or expanding (by aliases) far past
// its size is refused.
Result<ManifestSet> parseManifests(const std::string& yaml, const std::string& file_name,
                                   size_t max_nesting = 128);

// The objects as the engine's World (warnings are left behind).
World toWorld(ManifestSet set);

struct ParsedWorkload {
  Workload workload;
  bool namespace_given = false;       // false: "default" stands in; a server may choose another
  std::vector<std::string> warnings;  // unsupported fields, as for manifests
  // A Job, JobSet or PyTorchJob as JSON (YAML's plain scalars typed as YAML 1.2's core schema
  // types them), for an engine that runs the object itself; empty for the other shapes.
  std::string object_json;
};

// One workload, in any of these shapes:
//   - Kueue's Workload (apiVersion kueue.x-k8s.io/v1beta1|v1beta2, kind Workload): the queue is
//     spec.queueName (or the kueue.x-k8s.io/queue-name label), a pod set's per-pod requests are
//     computed from its template as Kubernetes does (containers summed, init containers as a
//     maximum, sidecars added, overhead added, limits standing in for missing requests).
//     metadata.uid and metadata.creationTimestamp are kept; status is ignored.
//   - a batch/v1 Job carrying the kueue.x-k8s.io/queue-name label, as Kueue's job integration
//     reads it: one pod set "main" of min(parallelism, completions) pods with the template's
//     requests, kueue.x-k8s.io/priority-class naming a WorkloadPriorityClass, and
//     kueue.x-k8s.io/job-min-parallelism allowing partial admission.
//   - Purser's short form: {name, namespace?, queue, priority_class?, priority?,
//     pod_sets: [{name, count?, min_count?, requests: {cpu: "1", nvidia.com/gpu: 1},
//     tolerations?, node_selector?}]}.
// The namespace defaults to "default"; Workload::name becomes "namespace/name". Extended
// resources (nvidia.com/gpu, nvidia.com/gpumem, ...) must be whole numbers, as in Kubernetes.
// JSON is valid YAML, so request bodies in JSON are read by the same function.
// What a workload may ask for at most, checked by parseWorkload besides its shape.
struct WorkloadBounds {
  size_t max_pod_sets = 8;          // Kueue's limit
  int64_t max_pods_per_set = 10000; // parallelism, completions, count, replicas × their pods
  // The least CPU each pod of a pod set that runs a command must request, in thousandths (1: any
  // positive request); 0: none needed.
  int64_t min_pod_cpu_milli = 0;
};

Result<ParsedWorkload> parseWorkload(const std::string& yaml_or_json, const std::string& file_name,
                                     size_t max_nesting = 128, const WorkloadBounds& bounds = {});

}  // namespace purser::fleet
