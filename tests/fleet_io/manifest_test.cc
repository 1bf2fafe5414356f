// Tests of reading Kueue manifests and workloads into fleet objects.
#include "fleet_io/manifest.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "fleet/engine.h"

namespace purser::fleet {
namespace {

using ::testing::HasSubstr;

// The same fleet in each API version; {V} is the version, {COHORT} the ClusterQueue's cohort
// field and {PARENT} the Cohort's parent field.
std::string fleet(const std::string& version, const std::string& cohort_field,
                  const std::string& parent_field, const std::string& cohort_version) {
  std::string y = R"(apiVersion: kueue.x-k8s.io/V
kind: ResourceFlavor
metadata:
  name: a100
spec:
  nodeLabels:
    gpu: a100
  nodeTaints:
  - key: nvidia.com/gpu
    value: "true"
    effect: NoSchedule
  tolerations:
  - key: nvidia.com/gpu
    operator: Exists
    effect: NoSchedule
---
apiVersion: kueue.x-k8s.io/CV
kind: Cohort
metadata:
  name: research
spec:
  PARENT: org
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: a100
      resources:
      - name: cpu
        nominalQuota: 500m
        lendingLimit: 250m
  fairSharing:
    weight: "1.5"
---
apiVersion: kueue.x-k8s.io/V
kind: ClusterQueue
metadata:
  name: team-a
spec:
  COHORT: research
  queueingStrategy: StrictFIFO
  namespaceSelector:
    matchLabels:
      team: a
    matchExpressions:
    - key: tier
      operator: In
      values: [gold, silver]
  preemption:
    withinClusterQueue: LowerPriority
    reclaimWithinCohort: Any
    borrowWithinCohort:
      policy: LowerPriority
      maxPriorityThreshold: 100
  flavorFungibility:
    whenCanBorrow: TryNextFlavor
    whenCanPreempt: MayStopSearch
  stopPolicy: Hold
  fairSharing:
    weight: 2
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - name: cpu
        nominalQuota: 20
      - name: memory
        nominalQuota: 16Gi
        borrowingLimit: 1Gi
      - name: nvidia.com/gpu
        nominalQuota: 4
---
apiVersion: kueue.x-k8s.io/V
kind: LocalQueue
metadata:
  name: main
  namespace: team-a
spec:
  clusterQueue: team-a
---
apiVersion: kueue.x-k8s.io/V
kind: WorkloadPriorityClass
metadata:
  name: high
value: 1000
description: for deadlines
)";
  const auto replace = [&](const std::string& from, const std::string& to) {
    for (size_t at = y.find(from); at != std::string::npos; at = y.find(from, at + to.size())) {
      y.replace(at, from.size(), to);
    }
  };
  replace("/CV\n", "/" + cohort_version + "\n");
  replace("/V\n", "/" + version + "\n");
  replace("COHORT:", cohort_field + ":");
  replace("PARENT:", parent_field + ":");
  return y;
}

void expectFleet(const ManifestSet& m) {
  ASSERT_EQ(m.flavors.size(), 1u);
  EXPECT_EQ(m.flavors[0].name, "a100");
  EXPECT_EQ(m.flavors[0].node_labels.at("gpu"), "a100");
  ASSERT_EQ(m.flavors[0].taints.size(), 1u);
  EXPECT_EQ(m.flavors[0].taints[0].effect, "NoSchedule");
  ASSERT_EQ(m.flavors[0].tolerations.size(), 1u);
  EXPECT_EQ(m.flavors[0].tolerations[0].op, "Exists");

  ASSERT_EQ(m.cohorts.size(), 1u);
  EXPECT_EQ(m.cohorts[0].name, "research");
  EXPECT_EQ(m.cohorts[0].parent, "org");
  EXPECT_EQ(m.cohorts[0].fair_weight_milli, 1500);
  ASSERT_EQ(m.cohorts[0].quotas.size(), 1u);
  EXPECT_EQ(m.cohorts[0].quotas[0].flavors[0].resources.at("cpu").nominal, 500);
  EXPECT_EQ(m.cohorts[0].quotas[0].flavors[0].resources.at("cpu").lending_limit, 250);

  ASSERT_EQ(m.cluster_queues.size(), 1u);
  const ClusterQueue& cq = m.cluster_queues[0];
  EXPECT_EQ(cq.name, "team-a");
  EXPECT_EQ(cq.cohort, "research");
  EXPECT_EQ(cq.strategy, QueueingStrategy::kStrictFifo);
  ASSERT_TRUE(cq.namespace_selector.has_value());
  EXPECT_EQ(cq.namespace_selector->at("team"), std::vector<std::string>{"a"});
  EXPECT_EQ(cq.namespace_selector->at("tier"), (std::vector<std::string>{"gold", "silver"}));
  EXPECT_EQ(cq.preemption.within_cluster_queue, WithinClusterQueue::kLowerPriority);
  EXPECT_EQ(cq.preemption.reclaim_within_cohort, ReclaimWithinCohort::kAny);
  EXPECT_EQ(cq.preemption.borrow_within_cohort, BorrowWithinCohort::kLowerPriority);
  EXPECT_EQ(cq.preemption.max_priority_threshold, 100);
  EXPECT_EQ(cq.fungibility.when_can_borrow, WhenCanBorrow::kTryNextFlavor);
  EXPECT_EQ(cq.fungibility.when_can_preempt, WhenCanPreempt::kMayStopSearch);
  EXPECT_EQ(cq.stop_policy, StopPolicy::kHold);
  EXPECT_EQ(cq.fair_weight_milli, 2000);
  ASSERT_EQ(cq.resource_groups.size(), 1u);
  EXPECT_EQ(cq.resource_groups[0].covered,
            (std::vector<std::string>{"cpu", "memory", "nvidia.com/gpu"}));
  const auto& q = cq.resource_groups[0].flavors[0];
  EXPECT_EQ(q.flavor, "a100");
  EXPECT_EQ(q.resources.at("cpu").nominal, 20'000);
  EXPECT_EQ(q.resources.at("memory").nominal, int64_t{16} * 1024 * 1024 * 1024 * 1000);
  EXPECT_EQ(q.resources.at("memory").borrowing_limit, int64_t{1024} * 1024 * 1024 * 1000);
  EXPECT_FALSE(q.resources.at("cpu").borrowing_limit.has_value());
  EXPECT_EQ(q.resources.at("nvidia.com/gpu").nominal, 4000);

  ASSERT_EQ(m.local_queues.size(), 1u);
  EXPECT_EQ(m.local_queues[0].namespace_, "team-a");
  EXPECT_EQ(m.local_queues[0].name, "main");
  EXPECT_EQ(m.local_queues[0].cluster_queue, "team-a");

  ASSERT_EQ(m.priority_classes.size(), 1u);
  EXPECT_EQ(m.priority_classes[0].name, "high");
  EXPECT_EQ(m.priority_classes[0].value, 1000);
  EXPECT_TRUE(m.warnings.empty()) << m.warnings.front();
}

std::string errorOf(const std::string& yaml) {
  auto m = parseManifests(yaml, "fleet.yaml");
  return m ? std::string("no error") : m.error().toString();
}

TEST(ManifestTest, ReadsAllFiveKindsInV1beta1) {
  auto m = parseManifests(fleet("v1beta1", "cohort", "parent", "v1beta1"), "fleet.yaml");
  ASSERT_TRUE(m) << m.error().toString();
  expectFleet(*m);
}

TEST(ManifestTest, ReadsAllFiveKindsInV1beta2) {
  auto m = parseManifests(fleet("v1beta2", "cohortName", "parentName", "v1beta2"), "fleet.yaml");
  ASSERT_TRUE(m) << m.error().toString();
  expectFleet(*m);
}

TEST(ManifestTest, ReadsAV1alpha1Cohort) {
  auto m = parseManifests(fleet("v1beta1", "cohort", "parent", "v1alpha1"), "fleet.yaml");
  ASSERT_TRUE(m) << m.error().toString();
  expectFleet(*m);
}

TEST(ManifestTest, SaysWhenAFieldHasTheOtherVersionsName) {
  const std::string v2_with_v1_name = fleet("v1beta2", "cohort", "parentName", "v1beta2");
  EXPECT_THAT(errorOf(v2_with_v1_name), HasSubstr("spec.cohort: ClusterQueue \"team-a\": this is "
                                                  "the field's name in kueue.x-k8s.io/v1beta1"));
  EXPECT_THAT(errorOf(v2_with_v1_name), HasSubstr("calls it \"cohortName\""));
  EXPECT_THAT(errorOf(fleet("v1beta1", "cohort", "parentName", "v1beta1")),
              HasSubstr("spec.parentName: Cohort \"research\": this is the field's name in "
                        "kueue.x-k8s.io/v1beta2"));
}

TEST(ManifestTest, ConvertsQuantitiesExactlyToMilliUnits) {
  const std::string yaml = R"(
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: q}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, pods, example.com/x, y]
    flavors:
    - name: f
      resources:
      - {name: cpu, nominalQuota: "500m"}
      - {name: memory, nominalQuota: 1.5Gi}
      - {name: pods, nominalQuota: 4}
      - {name: example.com/x, nominalQuota: 1e3}
      - {name: y, nominalQuota: 1n}
)";
  auto m = parseManifests(yaml, "q.yaml");
  ASSERT_TRUE(m) << m.error().toString();
  const auto& r = m->cluster_queues[0].resource_groups[0].flavors[0].resources;
  EXPECT_EQ(r.at("cpu").nominal, 500);
  EXPECT_EQ(r.at("memory").nominal, int64_t{1536} * 1024 * 1024 * 1000);
  EXPECT_EQ(r.at("pods").nominal, 4000);
  EXPECT_EQ(r.at("example.com/x").nominal, 1'000'000);
  EXPECT_EQ(r.at("y").nominal, 1);  // finer than a milli-unit rounds up, as in Kubernetes
}

TEST(ManifestTest, EmptyNamespaceSelectorAdmitsEveryNamespace) {
  auto m = parseManifests(
      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: q}\n"
      "spec: {namespaceSelector: {}}\n",
      "q.yaml");
  ASSERT_TRUE(m) << m.error().toString();
  ASSERT_TRUE(m->cluster_queues[0].namespace_selector.has_value());
  EXPECT_TRUE(m->cluster_queues[0].namespace_selector->empty());
  EXPECT_TRUE(m->warnings.empty());
}

TEST(ManifestTest, AbsentNamespaceSelectorAdmitsNoNamespaceAndSaysSo) {
  const std::string yaml =
      "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {team: a}}\n---\n"
      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: f}\n---\n"
      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: closed}\n"
      "spec:\n  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n    - name: f\n"
      "      resources: [{name: cpu, nominalQuota: 10}]\n---\n"
      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\n"
      "metadata: {name: lq, namespace: team-a}\nspec: {clusterQueue: closed}\n";
  auto m = parseManifests(yaml, "q.yaml");
  ASSERT_TRUE(m) << m.error().toString();
  ASSERT_EQ(m->warnings.size(), 1u);
  EXPECT_THAT(m->warnings[0], HasSubstr("q.yaml:9:1: ClusterQueue \"closed\": "
                                        "spec.namespaceSelector: not set"));
  EXPECT_EQ(m->namespaces.at("team-a").at("team"), "a");
  EXPECT_EQ(m->namespaces.at("team-a").at("kubernetes.io/metadata.name"), "team-a");

  // The engine admits nothing from the queue's namespace.
  auto engine = Engine::create(toWorld(*m));
  ASSERT_TRUE(engine) << engine.error().toString();
  Workload w;
  w.name = "team-a/w";
  w.namespace_ = "team-a";
  w.local_queue = "lq";
  w.pod_sets.push_back(PodSet{.name = "main", .count = 1, .requests = {{"cpu", 1000}}});
  ASSERT_TRUE((*engine)->submit(w));
  (*engine)->runUntilStable();
  EXPECT_EQ((*engine)->status("team-a/w")->state, WorkloadStatus::State::kPending);
}

TEST(ManifestTest, MatchExpressionsOtherThanInAreErrors) {
  const std::string yaml =
      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: q}\n"
      "spec:\n  namespaceSelector:\n    matchExpressions:\n"
      "    - {key: team, operator: NotIn, values: [b]}\n";
  EXPECT_THAT(errorOf(yaml),
              HasSubstr("fleet.yaml:7:29: spec.namespaceSelector.matchExpressions[0].operator: "
                        "ClusterQueue \"q\": operator NotIn is not supported by Purser"));
}

TEST(ManifestTest, InRequirementsOnOneKeyIntersect) {
  auto m = parseManifests(
      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: q}\n"
      "spec:\n  namespaceSelector:\n    matchLabels: {team: a}\n    matchExpressions:\n"
      "    - {key: team, operator: In, values: [a, b]}\n"
      "    - {key: zone, operator: In, values: [x, y]}\n"
      "    - {key: zone, operator: In, values: [y, z]}\n",
      "q.yaml");
  ASSERT_TRUE(m) << m.error().toString();
  const auto& sel = *m->cluster_queues[0].namespace_selector;
  EXPECT_EQ(sel.at("team"), std::vector<std::string>{"a"});
  EXPECT_EQ(sel.at("zone"), std::vector<std::string>{"y"});
}

TEST(ManifestTest, OtherObjectsAndKueueKindsAreWarnings) {
  const std::string yaml =
      "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 2}\n---\n"
      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: AdmissionCheck\nmetadata: {name: prov}\n"
      "spec: {controllerName: x}\n---\n"
      "# an empty document\n---\n"
      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: f}\n";
  auto m = parseManifests(yaml, "mixed.yaml");
  ASSERT_TRUE(m) << m.error().toString();
  EXPECT_EQ(m->flavors.size(), 1u);
  ASSERT_EQ(m->warnings.size(), 2u);
  EXPECT_EQ(m->warnings[0],
            "mixed.yaml:1:1: Deployment \"web\": apps/v1 is not a fleet object; ignored");
  EXPECT_THAT(m->warnings[1], HasSubstr("mixed.yaml:6:1: AdmissionCheck \"prov\": this Kueue "
                                        "kind is not supported by Purser; ignored"));
}

TEST(ManifestTest, UnknownKueueKindsAndVersionsAreErrors) {
  EXPECT_THAT(errorOf("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueu\n"
                      "metadata: {name: q}\n"),
              HasSubstr("fleet.yaml:2:7: kind: ClusterQueu \"q\": unknown "
                        "kueue.x-k8s.io kind \"ClusterQueu\"; did you mean \"ClusterQueue\"?"));
  EXPECT_THAT(errorOf("apiVersion: kueue.x-k8s.io/v1alpha1\nkind: ClusterQueue\n"
                      "metadata: {name: q}\n"),
              HasSubstr("Purser reads ClusterQueue as kueue.x-k8s.io/v1beta1 or v1beta2"));
  EXPECT_THAT(errorOf("kind: ClusterQueue\nmetadata: {name: q}\n"),
              HasSubstr("apiVersion: document 1: required field is missing"));
}

TEST(ManifestTest, UnsupportedKueueFieldsAreWarningsNamingTheField) {
  const std::string yaml = R"(apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: team-a
spec:
  namespaceSelector: {}
  admissionChecks: [prov]
  admissionChecksStrategy:
    admissionChecks: [{name: prov}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: tas
spec:
  nodeLabels: {rack: r1}
  topologyName: default
  tolerations:
  - {key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 30}
)";
  auto m = parseManifests(yaml, "fleet.yaml");
  ASSERT_TRUE(m) << m.error().toString();
  ASSERT_EQ(m->warnings.size(), 4u);
  EXPECT_EQ(m->warnings[0],
            "fleet.yaml:7:3: ClusterQueue \"team-a\": spec.admissionChecks: not supported by "
            "Purser; ignored");
  EXPECT_EQ(m->warnings[1],
            "fleet.yaml:8:3: ClusterQueue \"team-a\": spec.admissionChecksStrategy: not "
            "supported by Purser; ignored");
  EXPECT_THAT(m->warnings[2], HasSubstr("spec.tolerations[0].tolerationSeconds: not supported"));
  EXPECT_THAT(m->warnings[3],
              HasSubstr("fleet.yaml:17:3: ResourceFlavor \"tas\": spec.topologyName"));
}

TEST(ManifestTest, UnknownFieldsAreErrorsWithADidYouMean) {
  EXPECT_THAT(errorOf("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\n"
                      "metadata: {name: q}\nspec:\n  namespaceSelector: {}\n"
                      "  queueingStrategi: StrictFIFO\n"),
              HasSubstr("fleet.yaml:6:3: spec.queueingStrategi: ClusterQueue \"q\": unknown "
                        "field; did you mean \"queueingStrategy\"?"));
  // admissionChecks is not a v1beta2 field at all.
  EXPECT_THAT(errorOf("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\n"
                      "metadata: {name: q}\nspec:\n  namespaceSelector: {}\n"
                      "  admissionChecks: [x]\n"),
              HasSubstr("spec.admissionChecks: ClusterQueue \"q\": unknown field"));
}

TEST(ManifestTest, BadQuantitiesNameTheObjectAndTheFieldPath) {
  const std::string yaml = R"(apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: team-a
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: on-demand
      resources:
      - name: cpu
        nominalQuota: 10
    - name: spot
      resources:
      - name: cpu
        nominalQuota: -2
  - coveredResources: [memory]
    flavors:
    - name: big
      resources:
      - name: memory
        nominalQuota: 12 GB
)";
  auto m = parseManifests(yaml, "cq.yaml");
  ASSERT_FALSE(m);
  const std::string e = m.error().toString();
  EXPECT_THAT(e, HasSubstr("2 errors:"));
  EXPECT_THAT(e, HasSubstr("cq.yaml:17:23: spec.resourceGroups[0].flavors[1].resources[0]."
                           "nominalQuota: ClusterQueue \"team-a\": a quantity may not be "
                           "negative, got \"-2\""));
  EXPECT_THAT(e, HasSubstr("cq.yaml:23:23: spec.resourceGroups[1].flavors[0].resources[0]."
                           "nominalQuota: ClusterQueue \"team-a\": \"12 GB\" is not a quantity"));
}

TEST(ManifestTest, FlavorsMustListEveryCoveredResourceInOrder) {
  const std::string head =
      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: team-a}\n"
      "spec:\n  namespaceSelector: {}\n  resourceGroups:\n"
      "  - coveredResources: [cpu, memory]\n    flavors:\n    - name: f\n      resources:\n";
  EXPECT_THAT(errorOf(head + "      - {name: cpu, nominalQuota: 1}\n"),
              HasSubstr("spec.resourceGroups[0].flavors[0].resources: ClusterQueue \"team-a\": "
                        "flavor \"f\" lists [cpu], but the group's coveredResources are [cpu, "
                        "memory]"));
  EXPECT_THAT(errorOf(head + "      - {name: memory, nominalQuota: 1}\n"
                             "      - {name: cpu, nominalQuota: 1}\n"),
              HasSubstr("lists [memory, cpu], but the group's coveredResources are [cpu, memory]"));
}

TEST(ManifestTest, MissingNamesAndDuplicatesAreErrors) {
  EXPECT_THAT(errorOf("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\n"
                      "metadata: {labels: {a: b}}\n"),
              HasSubstr("fleet.yaml:3:11: metadata.name: ResourceFlavor in document 1: "
                        "required field is missing"));
  EXPECT_THAT(errorOf("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\n"),
              HasSubstr("metadata.name: ResourceFlavor in document 1: required field"));
  const std::string twice =
      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: f}\n---\n"
      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: f}\n";
  EXPECT_THAT(errorOf(twice), HasSubstr("fleet.yaml:7:1: metadata.name: ResourceFlavor \"f\": "
                                        "defined twice; first at fleet.yaml:3:1"));
  // LocalQueues are unique per namespace.
  const std::string lq =
      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\n"
      "metadata: {name: q, namespace: NS}\nspec: {clusterQueue: c}\n";
  auto both = parseManifests(lq + "---\n" + lq, "lq.yaml");
  EXPECT_FALSE(both);
  std::string two_namespaces = lq + "---\n" + lq;
  two_namespaces.replace(two_namespaces.find("NS"), 2, "a");
  two_namespaces.replace(two_namespaces.find("NS"), 2, "b");
  EXPECT_TRUE(parseManifests(two_namespaces, "lq.yaml"));
}

TEST(ManifestTest, LimitsNeedACohort) {
  EXPECT_THAT(errorOf("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\n"
                      "metadata: {name: solo}\nspec:\n  namespaceSelector: {}\n"
                      "  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n"
                      "    - name: f\n      resources:\n"
                      "      - {name: cpu, nominalQuota: 4, borrowingLimit: 2}\n"),
              HasSubstr("resources[0].borrowingLimit: ClusterQueue \"solo\": borrowingLimit may "
                        "only be set together with spec.cohortName"));
}

TEST(ManifestTest, ErrorsOfAllObjectsComeBackTogether) {
  const std::string yaml =
      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata: {name: p}\n"
      "value: high\n---\n"
      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: q}\nspec: {}\n";
  const std::string e = errorOf(yaml);
  EXPECT_THAT(e, HasSubstr("2 errors:"));
  EXPECT_THAT(e, HasSubstr("fleet.yaml:4:8: value: WorkloadPriorityClass \"p\": expected a whole "
                           "number"));
  EXPECT_THAT(e, HasSubstr("spec.clusterQueue: LocalQueue \"q\": required field is missing"));
}

TEST(ManifestTest, CohortCyclesAreCaughtByTheEngineWithTheirNames) {
  const std::string yaml =
      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: left}\n"
      "spec: {parentName: right}\n---\n"
      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: right}\n"
      "spec: {parentName: left}\n";
  auto m = parseManifests(yaml, "cycle.yaml");
  ASSERT_TRUE(m) << m.error().toString();
  auto engine = Engine::create(toWorld(*m));
  ASSERT_FALSE(engine);
  EXPECT_THAT(engine.error().message, HasSubstr("its parents form a cycle"));
  EXPECT_THAT(engine.error().message,
              ::testing::AnyOf(HasSubstr("Cohort \"left\""), HasSubstr("Cohort \"right\"")));
}

TEST(ManifestTest, ALoadedFleetAdmitsAWorkload) {
  auto m = parseManifests(fleet("v1beta2", "cohortName", "parentName", "v1beta2") +
                              "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n"
                              "  labels: {team: a, tier: gold}\n",
                          "fleet.yaml");
  ASSERT_TRUE(m) << m.error().toString();
  m->cluster_queues[0].stop_policy = StopPolicy::kNone;
  auto engine = Engine::create(toWorld(*m));
  ASSERT_TRUE(engine) << engine.error().toString();
  auto w = parseWorkload(
      R"({"name": "train", "namespace": "team-a", "queue": "main", "priority_class": "high",
          "pod_sets": [{"name": "workers", "count": 2,
                        "requests": {"cpu": "2", "nvidia.com/gpu": 1},
                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}]})",
      "body.json");
  ASSERT_TRUE(w) << w.error().toString();
  ASSERT_TRUE((*engine)->submit(w->workload));
  (*engine)->runUntilStable();
  const auto status = (*engine)->status("team-a/train");
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->state, WorkloadStatus::State::kAdmitted);
}

TEST(ManifestTest, ReadsAListAsItsItems) {
  auto m = parseManifests(
      "apiVersion: v1\nkind: List\nitems:\n"
      "- apiVersion: kueue.x-k8s.io/v1beta1\n  kind: ResourceFlavor\n  metadata: {name: a}\n"
      "- apiVersion: kueue.x-k8s.io/v1beta1\n  kind: ResourceFlavor\n  metadata: {name: b}\n"
      "  spec: {nodeLabelz: {}}\n",
      "list.yaml");
  ASSERT_FALSE(m);
  EXPECT_THAT(m.error().toString(), HasSubstr("list.yaml:10:10: items[1].spec.nodeLabelz: "
                                              "ResourceFlavor \"b\": unknown field"));
}

TEST(ManifestTest, SyntaxErrorsHaveALine) {
  EXPECT_THAT(errorOf("apiVersion: v1\nkind: [\n"), HasSubstr("fleet.yaml:3:"));
}

TEST(ManifestTest, MalformedShapesAreErrorsNotCrashes) {
  const std::string cq =
      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: q}\n";
  for (const std::string& yaml : {
           std::string("[1, 2]\n"),
           std::string("apiVersion: [x]\nkind: ClusterQueue\n"),
           std::string("apiVersion: v1\nkind: List\nitems: 5\n"),
           cq + "spec: x\n",
           std::string("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: []\n"),
           cq + "spec: {resourceGroups: [1, 2]}\n",
           cq + "spec: {resourceGroups: [{coveredResources: cpu, flavors: {}}]}\n",
           cq + "spec: {resourceGroups: [{coveredResources: [cpu], flavors: [{name: f, "
                "resources: [{name: cpu, nominalQuota: [1]}]}]}]}\n",
           cq + "spec: {namespaceSelector: {matchExpressions: x}}\n",
           cq + "spec: {namespaceSelector: {matchLabels: [a]}}\n",
           cq + "spec: {preemption: [], flavorFungibility: 3, fairSharing: {weight: -1}}\n",
           cq + "spec: {namespaceSelector: {}, stopPolicy: Paused}\n",
       }) {
    EXPECT_FALSE(parseManifests(yaml, "bad.yaml")) << yaml;
  }
  for (const std::string& text : {
           std::string("[]"),
           std::string("\"just a string\""),
           std::string("name: w\nqueue: q\npod_sets: [{name: m, requests: [cpu]}]\n"),
           std::string("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: {name: "
                       "w}\nspec: {podSets: [{template: {spec: {containers: [1, {resources: "
                       "{requests: x}}], initContainers: [x]}}}]}\n"),
           std::string("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: {name: "
                       "w}\nspec: {podSets: [{template: {spec: {containers: [{resources: "
                       "{requests: {cpu: 9223372036854775807}}}, {resources: {requests: {cpu: "
                       "9223372036854775807}}}]}}}]}\n"),
       }) {
    EXPECT_FALSE(parseWorkload(text, "bad")) << text;
  }
}

// --- Workloads ----------------------------------------------------------------------------------

TEST(ManifestWorkloadTest, ReadsKueuesWorkloadShape) {
  const std::string yaml = R"(apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata:
  name: job-train-1
  namespace: team-a
  uid: 1234
  creationTimestamp: "2025-01-02T03:04:05Z"
spec:
  queueName: main
  priorityClassName: high
  priorityClassSource: kueue.x-k8s.io/workloadpriorityclass
  priority: 1000
  podSets:
  - name: workers
    count: 4
    minCount: 2
    template:
      metadata: {labels: {app: train}}
      spec:
        nodeSelector: {gpu: a100}
        tolerations:
        - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
        initContainers:
        - name: proxy
          restartPolicy: Always
          resources: {requests: {cpu: 100m}}
        - name: fetch
          image: busybox
          resources: {requests: {cpu: "4", memory: 1Gi}}
        containers:
        - name: main
          image: trainer
          resources:
            requests: {cpu: "1", memory: 2Gi}
            limits: {nvidia.com/gpu: 2, nvidia.com/gpumem: 3000, nvidia.com/gpucores: 30}
        - name: logger
          resources:
            requests: {cpu: 250m, nvidia.com/gpumem-percentage: 50}
        overhead: {memory: 64Mi}
status:
  conditions: []
)";
  auto w = parseWorkload(yaml, "wl.yaml");
  ASSERT_TRUE(w) << w.error().toString();
  EXPECT_TRUE(w->warnings.empty()) << w->warnings.front();
  const Workload& wl = w->workload;
  EXPECT_EQ(wl.name, "team-a/job-train-1");
  EXPECT_EQ(wl.namespace_, "team-a");
  EXPECT_EQ(wl.local_queue, "main");
  EXPECT_EQ(wl.priority_class, "high");
  EXPECT_EQ(wl.priority, 1000);
  EXPECT_EQ(wl.uid, "1234");
  EXPECT_EQ(wl.created_ms, int64_t{1735787045} * 1000);
  ASSERT_EQ(wl.pod_sets.size(), 1u);
  const PodSet& ps = wl.pod_sets[0];
  EXPECT_EQ(ps.name, "workers");
  EXPECT_EQ(ps.count, 4);
  EXPECT_EQ(ps.min_count, 2);
  EXPECT_EQ(ps.node_selector.at("gpu"), "a100");
  ASSERT_EQ(ps.tolerations.size(), 1u);
  // cpu: containers 1 + 0.25, plus the sidecar 0.1 = 1.35; the init container started after
  // the sidecar needs 4 + 0.1.
  EXPECT_EQ(ps.requests.at("cpu"), 4100);
  // memory: 2Gi against the init container's 1Gi, plus 64Mi of overhead.
  EXPECT_EQ(ps.requests.at("memory"), (int64_t{2048} + 64) * 1024 * 1024 * 1000);
  // HAMi's resources are plain integers; limits stand in for missing requests.
  EXPECT_EQ(ps.requests.at("nvidia.com/gpu"), 2000);
  EXPECT_EQ(ps.requests.at("nvidia.com/gpumem"), 3'000'000);
  EXPECT_EQ(ps.requests.at("nvidia.com/gpucores"), 30'000);
  EXPECT_EQ(ps.requests.at("nvidia.com/gpumem-percentage"), 50'000);
}

TEST(ManifestWorkloadTest, ReadsV1beta2PriorityClassRef) {
  const std::string yaml =
      "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: w}\n"
      "spec:\n  queueName: q\n  priority: 7\n"
      "  priorityClassRef: {group: scheduling.k8s.io, kind: PriorityClass, name: urgent}\n"
      "  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c}]}}}]\n";
  auto w = parseWorkload(yaml, "wl.yaml");
  ASSERT_TRUE(w) << w.error().toString();
  EXPECT_EQ(w->workload.name, "default/w");
  EXPECT_EQ(w->workload.priority, 7);
  EXPECT_TRUE(w->workload.priority_class.empty());  // a pod PriorityClass: priority is spec's
  ASSERT_EQ(w->warnings.size(), 1u);
  EXPECT_THAT(w->warnings[0], HasSubstr("pod PriorityClass \"urgent\" is not known to Purser"));
}

TEST(ManifestWorkloadTest, ReadsTheShortFormInYamlAndJson) {
  const std::string yaml =
      "name: w\nnamespace: ns\nqueue: q\npriority: 5\npod_sets:\n"
      "- name: main\n  count: 3\n  min_count: 1\n"
      "  requests: {cpu: 500m, nvidia.com/gpu: 1, nvidia.com/gpumem: 4096, "
      "nvidia.com/gpucores: 25}\n  node_selector: {zone: a}\n";
  const std::string json =
      R"({"name": "w", "namespace": "ns", "queue": "q", "priority": 5, "pod_sets": [
           {"name": "main", "count": 3, "min_count": 1, "node_selector": {"zone": "a"},
            "requests": {"cpu": "500m", "nvidia.com/gpu": 1, "nvidia.com/gpumem": 4096,
                         "nvidia.com/gpucores": 25}}]})";
  for (const std::string& text : {yaml, json}) {
    auto w = parseWorkload(text, "body");
    ASSERT_TRUE(w) << w.error().toString();
    EXPECT_EQ(w->workload.name, "ns/w");
    EXPECT_EQ(w->workload.local_queue, "q");
    EXPECT_EQ(w->workload.priority, 5);
    ASSERT_EQ(w->workload.pod_sets.size(), 1u);
    const PodSet& ps = w->workload.pod_sets[0];
    EXPECT_EQ(ps.count, 3);
    EXPECT_EQ(ps.min_count, 1);
    EXPECT_EQ(ps.requests.at("cpu"), 500);
    EXPECT_EQ(ps.requests.at("nvidia.com/gpu"), 1000);
    EXPECT_EQ(ps.requests.at("nvidia.com/gpumem"), 4'096'000);
    EXPECT_EQ(ps.requests.at("nvidia.com/gpucores"), 25'000);
    EXPECT_EQ(ps.node_selector.at("zone"), "a");
  }
}

TEST(ManifestWorkloadTest, ReadsTopologyRequestsAndGpuTypes) {
  const std::string kueue = R"(apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: w, namespace: ns}
spec:
  queueName: q
  podSets:
    - name: workers
      count: 4
      topologyRequest: {required: rack}
      template:
        metadata:
          annotations: {nvidia.com/use-gputype: "A100, H100", nvidia.com/nouse-gputype: T4}
        spec:
          containers: [{name: c, resources: {requests: {nvidia.com/gpu: 2}}}]
    - name: launcher
      template:
        metadata:
          annotations: {kueue.x-k8s.io/podset-preferred-topology: kubernetes.io/hostname}
        spec:
          containers: [{name: c, resources: {requests: {cpu: 1}}}]
)";
  auto w = parseWorkload(kueue, "wl.yaml");
  ASSERT_TRUE(w) << w.error().toString();
  const auto& sets = w->workload.pod_sets;
  ASSERT_EQ(sets.size(), 2u);
  EXPECT_EQ(sets[0].topology.level, "rack");
  EXPECT_TRUE(sets[0].topology.required);
  EXPECT_EQ(sets[0].use_gpu_types, (std::vector<std::string>{"A100", "H100"}));
  EXPECT_EQ(sets[0].nouse_gpu_types, (std::vector<std::string>{"T4"}));
  EXPECT_EQ(sets[1].topology.level, "kubernetes.io/hostname");
  EXPECT_FALSE(sets[1].topology.required);

  auto s = parseWorkload(
      "name: w\nqueue: q\npod_sets: [{name: m, topology: {preferred: nvlink}, "
      "use_gpu_types: [H100]}]\n",
      "body");
  ASSERT_TRUE(s) << s.error().toString();
  EXPECT_EQ(s->workload.pod_sets[0].topology.level, "nvlink");
  EXPECT_EQ(s->workload.pod_sets[0].use_gpu_types, (std::vector<std::string>{"H100"}));
  auto both = parseWorkload(
      "name: w\nqueue: q\npod_sets: [{name: m, topology: {preferred: rack, required: node}}]\n",
      "body");
  ASSERT_FALSE(both);
  EXPECT_THAT(both.error().toString(), HasSubstr("give required or preferred, not both"));
}

TEST(ManifestWorkloadTest, ReadsAJobSetAndAPyTorchJobAsKueuesIntegrationsDo) {
  // A JobSet: a pod set per replicated Job, of replicas x min(parallelism, completions) pods.
  auto js = parseWorkload(R"(apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: trainer
  namespace: team-a
  labels: {kueue.x-k8s.io/queue-name: user-queue}
  annotations: {purser.dev/serve: "{route: chat, port: 8100, model: llama}"}
spec:
  successPolicy: {operator: All}
  replicatedJobs:
  - name: driver
    template:
      spec:
        template:
          spec:
            containers: [{name: d, image: trainer:1, command: [python, driver.py],
                          resources: {requests: {cpu: "1"}}}]
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 4
        completions: 4
        backoffLimit: 0
        template:
          spec:
            containers: [{name: w, image: trainer:1, resources: {limits: {nvidia.com/gpu: 8}}}]
)",
                          "jobset.yaml");
  ASSERT_TRUE(js) << js.error().toString();
  EXPECT_EQ(js->workload.name, "team-a/trainer");
  EXPECT_EQ(js->workload.local_queue, "user-queue");
  ASSERT_EQ(js->workload.pod_sets.size(), 2u);
  EXPECT_EQ(js->workload.pod_sets[0].name, "driver");
  EXPECT_EQ(js->workload.pod_sets[0].count, 1);
  EXPECT_EQ(js->workload.pod_sets[0].command, (std::vector<std::string>{"python", "driver.py"}));
  EXPECT_EQ(js->workload.pod_sets[1].name, "workers");
  EXPECT_EQ(js->workload.pod_sets[1].count, 8);
  EXPECT_EQ(js->workload.pod_sets[1].requests.at("nvidia.com/gpu"), 8000);
  EXPECT_EQ(js->workload.pod_sets[1].image, "trainer:1");
  ASSERT_TRUE(js->workload.serve.has_value());
  EXPECT_EQ(js->workload.serve->route, "chat");
  EXPECT_EQ(js->workload.serve->port, 8100);
  EXPECT_EQ(js->workload.serve->metrics, "/metrics") << "scraped by default";
  EXPECT_EQ(js->workload.serve->engine, "vllm");

  // A PyTorchJob: a pod set per replica type, in lower case.
  auto pt = parseWorkload(R"(apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: mnist
  labels: {kueue.x-k8s.io/queue-name: user-queue, kueue.x-k8s.io/priority-class: high}
spec:
  runPolicy: {cleanPodPolicy: None}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers: [{name: pytorch, image: mnist:1, resources: {limits: {nvidia.com/gpu: 1}}}]
    Worker:
      replicas: 3
      restartPolicy: OnFailure
      template:
        spec:
          containers: [{name: pytorch, image: mnist:1, resources: {limits: {nvidia.com/gpu: 1}}}]
)",
                          "pytorch.yaml");
  ASSERT_TRUE(pt) << pt.error().toString();
  EXPECT_EQ(pt->workload.priority_class, "high");
  ASSERT_EQ(pt->workload.pod_sets.size(), 2u);
  EXPECT_EQ(pt->workload.pod_sets[0].name, "master");
  EXPECT_EQ(pt->workload.pod_sets[0].count, 1);
  EXPECT_EQ(pt->workload.pod_sets[1].name, "worker");
  EXPECT_EQ(pt->workload.pod_sets[1].count, 3);

  // Without the queue label, or with no replicas to run, they are refused, saying why.
  auto unlabelled = parseWorkload(
      "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: x}\nspec:\n"
      "  pytorchReplicaSpecs: {Worker: {template: {spec: {containers: [{name: c}]}}}}\n",
      "x.yaml");
  ASSERT_FALSE(unlabelled);
  EXPECT_NE(unlabelled.error().toString().find("kueue.x-k8s.io/queue-name"), std::string::npos);
  auto empty = parseWorkload(
      "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: x, labels: "
      "{kueue.x-k8s.io/queue-name: q}}\nspec: {replicatedJobs: []}\n",
      "x.yaml");
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().toString().find("replicatedJobs"), std::string::npos);
}

TEST(ManifestWorkloadTest, ReadsABatchJobAsKueuesJobIntegrationDoes) {
  // Kueue's own sample Job, with a GPU, a WorkloadPriorityClass and partial admission.
  const std::string yaml = R"(apiVersion: batch/v1
kind: Job
metadata:
  generateName: ignored-
  name: sample-job
  namespace: team-a
  labels:
    kueue.x-k8s.io/queue-name: user-queue
    kueue.x-k8s.io/priority-class: high
  annotations:
    kueue.x-k8s.io/job-min-parallelism: "2"
spec:
  parallelism: 3
  completions: 5
  suspend: true
  backoffLimit: 2
  completionMode: Indexed
  template:
    metadata:
      annotations: {kueue.x-k8s.io/podset-required-topology: rack}
    spec:
      nodeSelector: {gpu: h100}
      containers:
      - name: dummy-job
        image: registry.k8s.io/e2e-test-images/agnhost:2.53
        command: ["/bin/sh"]
        args: ["-c", "sleep 30"]
        workingDir: /work
        env:
        - {name: EPOCHS, value: "3"}
        - {name: EMPTY}
        resources:
          requests: {cpu: "1", memory: 200Mi}
          limits: {nvidia.com/gpu: 1}
      restartPolicy: Never
)";
  auto w = parseWorkload(yaml, "job.yaml");
  ASSERT_TRUE(w) << w.error().toString();
  EXPECT_TRUE(w->warnings.empty()) << w->warnings.front();
  EXPECT_TRUE(w->namespace_given);
  const Workload& wl = w->workload;
  EXPECT_EQ(wl.name, "team-a/sample-job");
  EXPECT_EQ(wl.local_queue, "user-queue");
  EXPECT_EQ(wl.priority_class, "high");
  ASSERT_EQ(wl.pod_sets.size(), 1u);
  const PodSet& ps = wl.pod_sets[0];
  EXPECT_EQ(ps.name, "main");
  EXPECT_EQ(ps.count, 3) << "parallelism, as completions is larger";
  EXPECT_EQ(ps.min_count, 2);
  EXPECT_EQ(ps.requests.at("cpu"), 1000);
  EXPECT_EQ(ps.requests.at("nvidia.com/gpu"), 1000);
  EXPECT_EQ(ps.node_selector.at("gpu"), "h100");
  EXPECT_EQ(ps.topology.level, "rack");
  EXPECT_TRUE(ps.topology.required);
  // What its pods run: the first container's command and args, directory and environment.
  EXPECT_EQ(ps.command, (std::vector<std::string>{"/bin/sh", "-c", "sleep 30"}));
  EXPECT_EQ(ps.working_dir, "/work");
  EXPECT_EQ(ps.env, (std::map<std::string, std::string>{{"EMPTY", ""}, {"EPOCHS", "3"}}));

  // Fewer completions than parallelism: that many pods. No parallelism: one.
  const auto count = [](const std::string& spec) {
    auto j = parseWorkload(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: "
        "{kueue.x-k8s.io/queue-name: q}}\nspec:\n" +
            spec + "  template: {spec: {containers: [{name: c}]}}\n",
        "job.yaml");
    return j ? j->workload.pod_sets.at(0).count : -1;
  };
  EXPECT_EQ(count("  parallelism: 4\n  completions: 2\n"), 2);
  EXPECT_EQ(count("  completions: 7\n"), 1);
  EXPECT_EQ(count(""), 1);

  // A pod PriorityClass is not Purser's: said, and the priority stays as it was.
  auto pod_class = parseWorkload(
      "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: "
      "{kueue.x-k8s.io/queue-name: q}}\nspec:\n  template: {spec: {priorityClassName: "
      "system-critical, containers: [{name: c}]}}\n",
      "job.yaml");
  ASSERT_TRUE(pod_class) << pod_class.error().toString();
  ASSERT_EQ(pod_class->warnings.size(), 1u);
  EXPECT_THAT(pod_class->warnings[0], HasSubstr("kueue.x-k8s.io/priority-class"));

  // A variable from the cluster cannot be resolved here: said, and left out. A command that is
  // not a list of strings is an error.
  const std::string head =
      "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: "
      "{kueue.x-k8s.io/queue-name: q}}\nspec:\n  template: {spec: {containers: [{name: c, ";
  auto secret = parseWorkload(
      head + "env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: s, key: k}}}]}]}}\n", "j");
  ASSERT_TRUE(secret) << secret.error().toString();
  EXPECT_TRUE(secret->workload.pod_sets[0].env.empty());
  ASSERT_EQ(secret->warnings.size(), 1u);
  EXPECT_THAT(secret->warnings[0], HasSubstr("\"TOKEN\" comes from the cluster (valueFrom)"));
  auto bad = parseWorkload(head + "command: python}]}}\n", "j");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().toString(),
              HasSubstr("spec.template.spec.containers[0].command: Workload \"default/j\": "
                        "expected a list of strings"));
}

TEST(ManifestWorkloadTest, RejectsJobsKueueWouldNotQueue) {
  const auto errorOf = [](const std::string& text) {
    auto w = parseWorkload(text, "job.yaml");
    return w ? std::string("no error") : w.error().toString();
  };
  const std::string tmpl = "  template: {spec: {containers: [{name: c}]}}\n";
  EXPECT_THAT(errorOf("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n" + tmpl),
              HasSubstr("metadata.labels: Workload \"default/j\": a Job is queued by its "
                        "\"kueue.x-k8s.io/queue-name\" label"));
  EXPECT_THAT(errorOf("apiVersion: batch/v2\nkind: Job\nmetadata: {name: j, labels: "
                      "{kueue.x-k8s.io/queue-name: q}}\nspec:\n" +
                      tmpl),
              HasSubstr("a Job is batch/v1, got \"batch/v2\""));
  EXPECT_THAT(errorOf("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: "
                      "{kueue.x-k8s.io/queue-name: q}, annotations: "
                      "{kueue.x-k8s.io/job-min-parallelism: \"5\"}}\nspec:\n  parallelism: 2\n" +
                      tmpl),
              HasSubstr("must be a whole number from 1 to the Job's 2 pods, got \"5\""));
  EXPECT_THAT(errorOf("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: "
                      "{kueue.x-k8s.io/queue-name: q}}\nspec:\n  parallelism: -1\n" +
                      tmpl),
              HasSubstr("spec.parallelism"));
  EXPECT_THAT(errorOf("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: "
                      "{kueue.x-k8s.io/queue-name: q}}\nspec:\n  paralelism: 2\n" +
                      tmpl),
              HasSubstr("did you mean \"parallelism\"?"));
  EXPECT_THAT(errorOf("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: "
                      "{kueue.x-k8s.io/queue-name: q}}\nspec: {parallelism: 1}\n"),
              HasSubstr("spec.template: Workload \"default/j\": required field is missing"));
}

TEST(ManifestWorkloadTest, ReadsTheMaximumExecutionTimeOfEachShape) {
  const auto limitOf = [](const std::string& text) -> int64_t {
    auto w = parseWorkload(text, "w.yaml");
    return w ? w->workload.max_execution_seconds : -1;
  };
  const std::string tmpl = "  template: {spec: {containers: [{name: c}]}}\n";
  const std::string job =
      "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: "
      "{kueue.x-k8s.io/queue-name: q";
  EXPECT_EQ(limitOf(job + "}}\nspec:\n" + tmpl), 0);
  EXPECT_EQ(limitOf(job + ", kueue.x-k8s.io/max-exec-time-seconds: \"600\"}}\nspec:\n" + tmpl),
            600);
  // The Job's own deadline, when it is the shorter.
  EXPECT_EQ(limitOf(job +
                    ", kueue.x-k8s.io/max-exec-time-seconds: \"600\"}}\nspec:\n"
                    "  activeDeadlineSeconds: 120\n" +
                    tmpl),
            120);
  EXPECT_EQ(limitOf(job + "}}\nspec:\n  activeDeadlineSeconds: 900\n" + tmpl), 900);
  EXPECT_EQ(limitOf("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: {name: w}\n"
                    "spec:\n  queueName: q\n  maximumExecutionTimeSeconds: 3600\n  podSets:\n"
                    "  - name: main\n    count: 1\n"
                    "    template: {spec: {containers: [{name: c}]}}\n"),
            3600);
  EXPECT_EQ(limitOf("{\"name\": \"s\", \"queue\": \"q\", \"max_execution_seconds\": 30, "
                    "\"pod_sets\": [{\"name\": \"main\", \"requests\": {\"cpu\": \"1\"}}]}"),
            30);
  // Nonsense is refused, saying what is expected.
  auto bad = parseWorkload(
      job + ", kueue.x-k8s.io/max-exec-time-seconds: \"soon\"}}\nspec:\n" + tmpl, "w.yaml");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().toString(), HasSubstr("must be a whole number of seconds from 1"));
  EXPECT_FALSE(
      parseWorkload("{\"name\": \"s\", \"queue\": \"q\", \"max_execution_seconds\": 0, "
                    "\"pod_sets\": [{\"name\": \"main\", \"requests\": {\"cpu\": \"1\"}}]}",
                    "w.json"));
}

TEST(ManifestWorkloadTest, KeepsAJobAsJsonForEnginesThatRunTheObject) {
  auto w = parseWorkload(R"(apiVersion: batch/v1
kind: Job
metadata:
  name: sweep
  labels: {kueue.x-k8s.io/queue-name: q, version: "2"}
spec:
  parallelism: 2
  suspend: false
  template:
    spec:
      terminationGracePeriodSeconds: ~
      containers: [{name: c, image: "img:1", args: ["--lr", "0.5", 0.5, yes]}]
)",
                         "job.yaml");
  ASSERT_TRUE(w) << w.error().toString();
  const auto j = nlohmann::json::parse(w->object_json);
  EXPECT_EQ(j["spec"]["parallelism"], 2);
  EXPECT_EQ(j["spec"]["suspend"], false);
  EXPECT_EQ(j["metadata"]["labels"]["version"], "2");  // quoted: a string
  EXPECT_TRUE(j["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].is_null());
  EXPECT_EQ(j["spec"]["template"]["spec"]["containers"][0]["args"],
            nlohmann::json({"--lr", "0.5", 0.5, "yes"}));  // YAML 1.2: yes is a string
  // Other shapes carry none.
  auto s = parseWorkload(
      R"({"name": "s", "queue": "q", "pod_sets": [{"name": "m", "requests": {"cpu": "1"}}]})",
      "s.json");
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->object_json.empty());
}

TEST(ManifestWorkloadTest, RejectsBadWorkloads) {
  const auto errorOfWorkload = [](const std::string& text) {
    auto w = parseWorkload(text, "body");
    return w ? std::string("no error") : w.error().toString();
  };
  EXPECT_THAT(errorOfWorkload("name: w\nqueue: q\npod_sets: [{name: m, requests: "
                              "{nvidia.com/gpu: 0.5}}]\n"),
              HasSubstr("pod_sets[0].requests.nvidia.com/gpu: Workload \"default/w\": an "
                        "extended resource takes a whole number, got \"0.5\""));
  EXPECT_THAT(errorOfWorkload("name: w\nqueue: q\npod_sets: [{name: m, requests: {cpu: -1}}]\n"),
              HasSubstr("may not be negative"));
  EXPECT_THAT(errorOfWorkload("name: w\nqueue: q\npod_sets: [{name: m, count: 2, min_count: 3}]\n"),
              HasSubstr("pod_sets[0].min_count"));
  EXPECT_THAT(errorOfWorkload("name: w\nqueue: q\npod_sets: []\n"),
              HasSubstr("pod_sets: Workload \"default/w\": expected a non-empty list"));
  EXPECT_THAT(errorOfWorkload("name: w\nqueu: q\npod_sets: [{name: m}]\n"),
              HasSubstr("did you mean \"queue\"?"));
  EXPECT_THAT(errorOfWorkload("name: w\nqueue: q\npod_sets: [{name: m}]\n---\nname: x\n"),
              HasSubstr("expected one workload, got 2 documents"));
  EXPECT_THAT(errorOfWorkload("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\n"
                              "metadata: {name: w}\nspec:\n  active: false\n  podSets:\n"
                              "  - {name: main, template: {spec: {containers: []}}}\n"),
              HasSubstr("an inactive Workload cannot be submitted"));
  EXPECT_THAT(errorOfWorkload("{\"name\": \"w\", \"queue\": \"q\", \"pod_sets\": ["),
              HasSubstr("body:1:"));
}

TEST(ManifestWorkloadTest, RefusesWhatNoWorkloadMayAskFor) {
  const WorkloadBounds bounds{.max_pod_sets = 8, .max_pods_per_set = 100, .min_pod_cpu_milli = 1};
  const auto errorOf = [&](const std::string& text) {
    auto w = parseWorkload(text, "body", 128, bounds);
    return w ? std::string("no error") : w.error().toString();
  };
  // Nine pod sets: Kueue takes eight at most.
  std::string nine = "name: w\nqueue: q\npod_sets:\n";
  for (int i = 0; i < 9; ++i) nine += fmt::format("  - {{name: p{}, requests: {{cpu: 1}}}}\n", i);
  EXPECT_THAT(errorOf(nine), HasSubstr("at most 8 pod sets (Kueue's limit); this one has 9"));
  // A Job of 2^31 - 1 pods, as parallelism and completions; a JobSet's replicas times its pods.
  EXPECT_THAT(errorOf("apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\n  labels: "
                      "{kueue.x-k8s.io/queue-name: q}\nspec:\n  parallelism: 2147483647\n"
                      "  completions: 2147483647\n  template: {spec: {containers: [{name: c, "
                      "resources: {requests: {cpu: 1}}}]}}\n"),
              HasSubstr("asks for 2147483647 pods; at most 100"));
  EXPECT_THAT(errorOf("name: w\nqueue: q\npod_sets: [{name: m, count: 101, requests: {cpu: 1}}]\n"),
              HasSubstr("pod set \"m\" asks for 101 pods"));
  EXPECT_EQ(errorOf("name: w\nqueue: q\npod_sets: [{name: m, count: 100, requests: {cpu: 1}}]\n"),
            "no error");
  // Environment names a shell could not use, a newline among them.
  EXPECT_THAT(errorOf("{\"name\": \"w\", \"queue\": \"q\", \"pod_sets\": [{\"name\": \"m\", "
                      "\"requests\": {\"cpu\": 1}, \"env\": {\"A\\nB\": \"x\"}}]}"),
              HasSubstr("\"A\\x0aB\" is not an environment variable's name"));
  EXPECT_THAT(errorOf("name: w\nqueue: q\npod_sets: [{name: m, requests: {cpu: 1}, "
                      "env: {9LIVES: x}}]\n"),
              HasSubstr("\"9LIVES\" is not"));
  // A pod that runs a command holds an executor's slot: it must ask for some CPU.
  EXPECT_THAT(errorOf("name: w\nqueue: q\npod_sets: [{name: m, requests: {cpu: \"0\"}, "
                      "command: [sleep, \"1\"]}]\n"),
              HasSubstr("must request at least 1m of CPU per pod (fleet.min_pod_cpu); it "
                        "requests 0m"));
  EXPECT_EQ(errorOf("name: w\nqueue: q\npod_sets: [{name: m, requests: {nvidia.com/gpu: 1}}]\n"),
            "no error")
      << "a pod set that runs nothing holds quota only";
}

}  // namespace
}  // namespace purser::fleet

namespace purser::fleet {
namespace {

TEST(ManifestWorkloadTest, SaysWhetherTheNamespaceWasGiven) {
  auto bare = parseWorkload("name: w\nqueue: q\npod_sets: [{name: a, requests: {cpu: 1}}]\n", "w");
  ASSERT_TRUE(bare) << bare.error().message;
  EXPECT_FALSE(bare->namespace_given);
  EXPECT_EQ(bare->workload.namespace_, "default");
  auto named = parseWorkload(
      "name: w\nnamespace: ml\nqueue: q\npod_sets: [{name: a, requests: {cpu: 1}}]\n", "w");
  ASSERT_TRUE(named);
  EXPECT_TRUE(named->namespace_given);
  EXPECT_EQ(named->workload.name, "ml/w");
  auto kueue = parseWorkload(
      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: {name: w, namespace: ml}\n"
      "spec:\n  queueName: q\n  podSets:\n    - name: a\n      count: 1\n      template:\n"
      "        spec:\n          containers: [{name: c, resources: {requests: {cpu: 1}}}]\n",
      "w");
  ASSERT_TRUE(kueue) << kueue.error().message;
  EXPECT_TRUE(kueue->namespace_given);
  auto kueue_bare = parseWorkload(
      "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: {name: w}\n"
      "spec:\n  queueName: q\n  podSets:\n    - name: a\n      count: 1\n      template:\n"
      "        spec:\n          containers: [{name: c, resources: {requests: {cpu: 1}}}]\n",
      "w");
  ASSERT_TRUE(kueue_bare) << kueue_bare.error().message;
  EXPECT_FALSE(kueue_bare->namespace_given);
}

}  // namespace
}  // namespace purser::fleet

namespace purser::fleet {
namespace {

// The serve annotation says where its server's metrics are, and which engine writes them.
TEST(ManifestWorkloadTest, AServedModelSaysWhereItsMetricsAreOrThatItHasNone) {
  const auto job = [](const std::string& serve) {
    return parseWorkload(R"(apiVersion: batch/v1
kind: Job
metadata:
  name: server
  namespace: team-a
  labels: {kueue.x-k8s.io/queue-name: user-queue}
  annotations: {purser.dev/serve: ")" +
                             serve + R"("}
spec:
  template:
    spec:
      containers: [{name: s, image: vllm:1, resources: {requests: {cpu: "1"}}}]
)",
                         "job.yaml");
  };
  auto sglang = job("{route: chat, port: 8100, model: m, metrics: /stats, engine: sglang}");
  ASSERT_TRUE(sglang) << sglang.error().toString();
  EXPECT_EQ(sglang->workload.serve->metrics, "/stats");
  EXPECT_EQ(sglang->workload.serve->engine, "sglang");
  auto none = job("{route: chat, port: 8100, model: m, metrics: ''}");
  ASSERT_TRUE(none) << none.error().toString();
  EXPECT_EQ(none->workload.serve->metrics, "");
  auto bad = job("{route: chat, port: 8100, model: m, metrics: stats, engine: triton}");
  ASSERT_FALSE(bad);
  const std::string text = bad.error().toString();
  EXPECT_NE(text.find("expected a path such as /metrics"), std::string::npos) << text;
  EXPECT_NE(text.find("vllm, sglang"), std::string::npos) << text;
}

TEST(ManifestWorkloadTest, AServedModelsHealthAndMetricsArePathsAndNothingMore) {
  const auto serve = [](const std::string& field, const std::string& value) {
    nlohmann::json w = {{"name", "s"},
                        {"queue", "q"},
                        {"serve", {{"route", "chat"}, {"port", 8000}, {"model", "m"}}},
                        {"pod_sets", {{{"name", "r"}, {"requests", {{"cpu", "1"}}}}}}};
    w["serve"][field] = value;
    return parseWorkload(w.dump(), "body");
  };
  for (const char* field : {"health", "metrics"}) {
    EXPECT_TRUE(serve(field, "/v1/health;ok")) << field;
    // A request smuggled after the path, a query, a host, a space, a path past 256 bytes.
    for (const std::string& bad :
         {std::string("/health HTTP/1.1\r\nHost: x\r\n\r\nPOST /sleep"),
          std::string("/health\nGET /"), std::string("/health?x=1"), std::string("//evil:1/"),
          std::string("http://127.0.0.1:9/"), std::string("/a b"), "/" + std::string(256, 'a')}) {
      auto r = serve(field, bad);
      ASSERT_FALSE(r) << field << " " << bad;
      EXPECT_NE(r.error().toString().find(std::string("serve.") + field), std::string::npos)
          << r.error().toString();
    }
  }
}

}  // namespace
}  // namespace purser::fleet
