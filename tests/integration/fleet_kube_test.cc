// Workloads on Kubernetes, against a wire-level fake API server (no API server is installable on
// these machines; tests/fakes/fake_kube.h speaks the real paths, objects, resourceVersions and
// watch streams). Shown: each pod becomes a Job created suspended with Kueue's queue-name label,
// then released by a merge patch that un-suspends it and pins it to the placement's node; the
// pod's phases drive the workload's state and its exit code; preemption suspends the Job again;
// a watch that drops resumes from the last resourceVersion it saw, and a 410 Gone forces a
// relist — with no pod's end missed.
#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <thread>

#include "fakes/eventually.h"
#include "fakes/fake_kube.h"
#include "fakes/process.h"
#include "fakes/temp_dir.h"
#include "integration/fleet_harness.h"

namespace purser {
namespace {

using nlohmann::json;

constexpr const char* kAdminKey = "fleet-kube-test-admin-key-0123456789";
constexpr const char* kToken = "kube-token-of-the-purser-service-account";

class FleetKubernetesTest : public ::testing::Test {
 protected:
  // The inventory: one configured node (the Kubernetes section's extra settings: none).
  virtual std::string inventory() const {
    return "  nodes:\n    - {name: gpu-node-1, cpu: 64, memory: 512Gi,\n"
           "       gpus: {count: 8, model: H100-SXM-80GB, memory: 80Gi}}\n";
  }
  virtual std::string kubernetesExtra() const { return ""; }
  // How Purser reaches the API server: its address and a service account's token file.
  virtual std::string connection() {
    return "server: \"http://127.0.0.1:" + std::to_string(kube.port()) +
           "\", token_file: " + dir.file("token");
  }
  virtual void beforeStart() {}
  // Gateway settings (providers, routes, prices) before the fleet's.
  virtual std::string gateway() const { return ""; }

  void SetUp() override {
    testing::writeFile(dir.file("fleet.yaml"), testing::fleetManifests(64));
    testing::writeFile(dir.file("token"), std::string(kToken) + "\n");
    testing::writeFile(dir.file("purser.yaml"),
                       "listen: 127.0.0.1:0\nthreads: 1\n"
                       "gpu_prices:\n  - {flavor: h100, per_gpu_hour: \"3600.00\"}\n" +
                           gateway() +
                           "fleet:\n  manifests: [fleet.yaml]\n  metering_interval: 1s\n" +
                           inventory() + "  kubernetes: {flavors: [h100], " + connection() +
                           kubernetesExtra() + "}\n");
    beforeStart();
    std::string why;
    ASSERT_TRUE(server.start(&why)) << why;
    key = server.member();
    ASSERT_FALSE(key.empty());
  }

  json submit(const std::string& name, int gpus, const std::string& priority_class = "",
              int64_t max_seconds = 0) {
    json w = {{"name", name},
              {"queue", "research"},
              {"pod_sets",
               {{{"name", "main"},
                 {"image", "registry.example/trainer:1"},
                 {"command", {"python", "train.py"}},
                 {"env", {{"EPOCHS", "3"}}},
                 {"requests", {{"cpu", "2"}, {"nvidia.com/gpu", std::to_string(gpus)}}}}}}};
    if (!priority_class.empty()) w["priority_class"] = priority_class;
    if (max_seconds > 0) w["max_execution_seconds"] = max_seconds;
    int status = 0;
    json out = server.call("POST", "/api/v1/workloads", key, w.dump(), "application/json", &status);
    EXPECT_EQ(status, 201) << out.dump();
    return out;
  }
  // The Job the fake holds for workload ml/NAME (waits for it to be created).
  std::string jobOf(const std::string& name) {
    std::string job;
    const std::string what = "a Job created for " + name;
    EXPECT_TRUE(testing::eventually(
        [&] {
          job = kube.jobOfWorkload(name + "-main-0-");
          return !job.empty();
        },
        {.attempts = 3000, .pause = std::chrono::milliseconds(20), .what = what.c_str()}))
        << server.workload(key, name).dump();
    return job;
  }
  // Kills Purser with SIGKILL and starts it again: ml/NAME is still running, its first run.
  void killAndRestart(const std::string& name) {
    EXPECT_EQ(server.kill(), 128 + SIGKILL);
    std::string why;
    ASSERT_TRUE(server.start(&why)) << why;
    // Until the executor's first list of the cluster is in, a busy machine can show the workload
    // "unknown" (its executor not answering yet) for a poll or two; bounded by work.
    json adopted;
    EXPECT_TRUE(testing::eventually(
        [&] {
          adopted = server.workload(key, name);
          return adopted["state"] != "unknown";
        },
        {.attempts = 400,
         .pause = std::chrono::milliseconds(25),
         .what = "the workload known after the restart"}));
    EXPECT_EQ(adopted["state"], "running") << adopted.dump();
    EXPECT_EQ(adopted["runs"], 1);
  }
  // The requests the fake saw for `job`, as "METHOD body".
  std::vector<std::string> calls(const std::string& job) {
    std::vector<std::string> out;
    for (const auto& r : kube.requests()) {
      if (r.target.find("/jobs") == std::string::npos) continue;
      if (r.target.find(job) == std::string::npos && r.body.find(job) == std::string::npos) {
        continue;
      }
      out.push_back(r.method + " " + r.body);
    }
    return out;
  }

  testing::TempDir dir;
  testing::FakeKube kube{kToken};
  testing::FleetServer server{dir, kAdminKey};
  std::string key;
};

// A share of a GPU on Kubernetes is HAMi's to enforce: the Job asks for HAMi's resources, and the
// limit variables are left to HAMi's device plugin.
class FleetKubernetesShareTest : public FleetKubernetesTest {
 protected:
  void beforeStart() override {
    testing::KueueQueue q;
    q.quota = {{"cpu", "64"},
               {"nvidia.com/gpumem", "655360"},
               {"nvidia.com/gpucores", "800"},
               {"nvidia.com/gpu", "8"}};
    testing::writeFile(dir.file("fleet.yaml"), q.yaml());
  }
};

TEST_F(FleetKubernetesShareTest, AShareBecomesHamisResources) {
  json w = {{"name", "notebook"},
            {"queue", "research"},
            {"pod_sets",
             {{{"name", "main"},
               {"image", "registry.example/notebook:1"},
               {"command", {"jupyter", "lab"}},
               {"requests",
                {{"cpu", "2"},
                 {"nvidia.com/gpu", "1"},
                 {"nvidia.com/gpumem", "20480"},
                 {"nvidia.com/gpucores", "30"}}}}}}};
  int status = 0;
  json out = server.call("POST", "/api/v1/workloads", key, w.dump(), "application/json", &status);
  ASSERT_EQ(status, 201) << out.dump();
  const std::string job = jobOf("notebook");
  const auto seen = calls(job);
  ASSERT_GE(seen.size(), 1u);
  const json created = json::parse(seen[0].substr(5));
  const json container = created["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(container["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(container["resources"]["limits"]["nvidia.com/gpumem"], "20480");
  EXPECT_EQ(container["resources"]["limits"]["nvidia.com/gpucores"], "30");
  const std::string env = container["env"].dump();
  EXPECT_EQ(env.find("CUDA_DEVICE_MEMORY_LIMIT"), std::string::npos) << env;
  EXPECT_EQ(env.find("CUDA_DEVICE_SM_LIMIT"), std::string::npos) << env;
  EXPECT_EQ(env.find("LD_PRELOAD"), std::string::npos) << env;  // nothing of Purser's preloaded
}

TEST_F(FleetKubernetesTest, AJobIsCreatedSuspendedReleasedToItsNodeAndFollowedToItsEnd) {
  submit("train", 2, "", 7200);
  const std::string job = jobOf("train");
  server.waitFor(key, "train", "running");
  // Created suspended, labelled as Kueue's queue-name; then un-suspended with the node selector.
  const auto seen = calls(job);
  ASSERT_GE(seen.size(), 2u);
  const json created = json::parse(seen[0].substr(5));
  EXPECT_EQ(seen[0].rfind("POST ", 0), 0u);
  EXPECT_EQ(created["spec"]["suspend"], true);
  EXPECT_EQ(created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "research");
  EXPECT_EQ(created["spec"]["activeDeadlineSeconds"], 7200);
  const json container = created["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(container["image"], "registry.example/trainer:1");
  EXPECT_EQ(container["command"], json({"python", "train.py"}));
  EXPECT_EQ(container["resources"]["limits"]["nvidia.com/gpu"], "2");
  EXPECT_NE(container["env"].dump().find("EPOCHS"), std::string::npos);
  // No service account token reaches the pod (Purser's own credentials never do).
  EXPECT_EQ(created["spec"]["template"]["spec"]["automountServiceAccountToken"], false);
  EXPECT_EQ(seen[1].rfind("PATCH ", 0), 0u);
  const json release = json::parse(seen[1].substr(6));
  EXPECT_EQ(release["spec"]["suspend"], false);
  EXPECT_EQ(release["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"],
            "gpu-node-1");
  // The pod fails with code 3: so does the workload, with the pod's log.
  ASSERT_TRUE(kube.finishPod(job, 3, "loading\nCUDA out of memory\n"));
  json failed = server.waitFor(key, "train", "failed");
  EXPECT_EQ(failed["exit_code"], 3);
  EXPECT_EQ(failed["log_tail"], "loading\nCUDA out of memory\n");
}

TEST_F(FleetKubernetesTest, PreemptionSuspendsTheVictimsJobAndItRunsAgainLater) {
  submit("steady", 4);
  submit("scavenger", 4, "low");
  const std::string steady = jobOf("steady");
  const std::string first = jobOf("scavenger");
  server.waitFor(key, "scavenger", "running");
  submit("urgent", 4, "urgent");
  server.waitFor(key, "scavenger", "evicted");
  // Suspended again, as Kueue does, and its pod deleted by the fake's controller.
  bool suspended = false;
  for (const auto& c : calls(first))
    suspended = suspended || c == R"(PATCH {"spec":{"suspend":true}})";
  EXPECT_TRUE(suspended);
  server.waitFor(key, "urgent", "running");
  // Room returns: a new Job for its second run.
  ASSERT_TRUE(kube.finishPod(steady, 0, "done\n"));
  server.waitFor(key, "steady", "succeeded");
  json again = server.waitFor(key, "scavenger", "running");
  EXPECT_EQ(again["runs"], 2);
}

TEST_F(FleetKubernetesTest, AWatchThatDropsResumesAndA410Relists) {
  submit("a", 1);
  submit("b", 1);
  const std::string a = jobOf("a");
  const std::string b = jobOf("b");
  server.waitFor(key, "a", "running");
  server.waitFor(key, "b", "running");
  // The watch drops; the pod's end happens while no watch is open, and is still seen.
  const int64_t version = kube.lastEventVersion("Pod");
  kube.dropWatches();
  ASSERT_TRUE(kube.finishPod(a, 0, "ok\n"));
  server.waitFor(key, "a", "succeeded");
  size_t lists = 0;
  bool resumed = false;
  for (const auto& r : kube.requests()) {
    if (r.target.rfind("/api/v1/pods", 0) != 0) continue;
    if (r.target.find("watch=1") == std::string::npos) {
      ++lists;
    } else if (r.target.find("resourceVersion=" + std::to_string(version)) != std::string::npos) {
      resumed = true;
    }
  }
  EXPECT_TRUE(resumed) << "the watch resumed from the version it had seen";
  EXPECT_EQ(lists, 1u) << "and did not list again";
  // The versions it knows are forgotten (410 Gone): it lists again, and misses nothing.
  kube.compact();
  kube.dropWatches();
  ASSERT_TRUE(kube.finishPod(b, 0, "ok\n"));
  server.waitFor(key, "b", "succeeded");
  lists = 0;
  for (const auto& r : kube.requests()) {
    if (r.target.rfind("/api/v1/pods", 0) == 0 && r.target.find("watch=1") == std::string::npos) {
      ++lists;
    }
  }
  std::string seen;
  for (const auto& r : kube.requests()) seen += r.method + " " + r.target + "\n";
  EXPECT_EQ(lists, 2u) << "a 410 forces one relist; requests:\n" << seen;
}

TEST_F(FleetKubernetesTest, AKilledPurserAdoptsItsJobsInsteadOfCreatingThemAgain) {
  submit("long", 1);
  const std::string job = jobOf("long");
  json before = server.waitFor(key, "long", "running");
  killAndRestart("long");
  ASSERT_TRUE(kube.finishPod(job, 0, "done\n"));
  json done = server.waitFor(key, "long", "succeeded");
  EXPECT_EQ(done["started_at"], before["started_at"]);
  // One Job was ever created for it.
  int posts = 0;
  for (const auto& r : kube.requests()) posts += r.method == "POST" ? 1 : 0;
  EXPECT_EQ(posts, 1);
}

// A Job as a user writes it for Kueue: the queue-name label, its pods' requests in the template.
json userJob(const std::string& ns, const std::string& name, int parallelism, int gpus,
             bool suspend, const std::string& priority_class = "") {
  json labels = {{"kueue.x-k8s.io/queue-name", "research"}};
  if (!priority_class.empty()) labels["kueue.x-k8s.io/priority-class"] = priority_class;
  return {
      {"apiVersion", "batch/v1"},
      {"kind", "Job"},
      {"metadata", {{"name", name}, {"namespace", ns}, {"labels", labels}}},
      {"spec",
       {{"suspend", suspend},
        {"parallelism", parallelism},
        {"completions", parallelism},
        {"backoffLimit", 0},
        {"template",
         {{"metadata", {{"labels", {{"app", name}}}}},
          {"spec",
           {{"restartPolicy", "Never"},
            {"containers",
             json::array({{{"name", "trainer"},
                           {"image", "registry.example/trainer:2"},
                           {"command", {"torchrun", "train.py"}},
                           {"resources",
                            {{"requests", {{"cpu", "1"}}},
                             {"limits", {{"nvidia.com/gpu", std::to_string(gpus)}}}}}}})}}}}}}}};
}

TEST_F(FleetKubernetesTest, AJobAUserAppliesIsQueuedReleasedAndFollowedByItsOwnStatus) {
  kube.applyJob(userJob("ml", "finetune", 2, 2, true));
  json running = server.waitFor(key, "finetune", "running");
  EXPECT_EQ(running["pods"].size(), 2u) << running.dump();
  EXPECT_EQ(running["found_as"]["object"], "ml/finetune");
  EXPECT_EQ(running["found_as"]["executor"], "kubernetes");
  EXPECT_EQ(running["owner"]["kind"], "kubernetes");
  // Released once, as Kueue releases it: un-suspended, its pods marked as Purser's and sent to
  // the node both were placed on; never created again.
  std::vector<std::string> patches;
  for (const auto& r : kube.requests()) {
    if (r.target.find("/namespaces/ml/jobs/finetune") != std::string::npos) {
      patches.push_back(r.method + " " + r.body);
    }
    EXPECT_NE(r.method, "POST") << r.target;
  }
  ASSERT_EQ(patches.size(), 1u);
  const json release = json::parse(patches[0].substr(6));
  EXPECT_EQ(release["spec"]["suspend"], false);
  EXPECT_EQ(release["spec"]["template"]["metadata"]["labels"]["purser.dev/managed"], "true");
  EXPECT_EQ(release["spec"]["template"]["metadata"]["annotations"]["purser.dev/handle"],
            "ml/finetune");
  EXPECT_EQ(release["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"],
            "gpu-node-1");
  EXPECT_EQ(kube.runningPods("finetune"), 2);
  // Purser is killed: after the restart it is the same workload, still running, not released
  // again and not queued twice.
  killAndRestart("finetune");
  // One pod ends; the Job is not complete until both have.
  ASSERT_TRUE(kube.finishPod("finetune", 0, "epoch 3 done\n"));
  ASSERT_TRUE(kube.finishPod("finetune", 0, "epoch 3 done\n"));
  json done = server.waitFor(key, "finetune", "succeeded");
  EXPECT_EQ(done["exit_code"], 0);
  // Charged for its GPUs' time: a Kubernetes pod's end is known to the second, so a run whose
  // start and end fall in one second is charged nothing, rightly.
  if (done.value("finished_at", "").substr(0, 19) != done.value("started_at", "").substr(0, 19)) {
    EXPECT_NE(done["gpu_charged"], "0.00") << done.dump();
  }
  int named = 0;
  for (const char* target : {"/api/v1/workloads", "/api/v1/workloads?state=finished"}) {
    json list = server.call("GET", target, key);
    ASSERT_TRUE(list["data"].is_array()) << list.dump();
    for (const auto& w : list["data"]) {
      named += w["name"].get<std::string>().find("finetune") != std::string::npos;
    }
  }
  EXPECT_EQ(named, 1);
  EXPECT_TRUE(kube.job("finetune").is_object()) << "a user's Job is theirs: not deleted";
  int releases = 0;
  for (const auto& r : kube.requests()) {
    releases += r.method == "PATCH" && r.target.find("/jobs/finetune") != std::string::npos;
  }
  EXPECT_EQ(releases, 1);
}

TEST_F(FleetKubernetesTest, AnUnadmittedJobIsSuspendedPreemptedLikeAnyAndDeletedEitherWay) {
  submit("steady", 8);
  server.waitFor(key, "steady", "running");
  // A Job of a namespace that is no team's is left alone; one applied running is suspended
  // until it is admitted.
  kube.applyJob(userJob("nobody", "stray", 1, 1, true));
  kube.applyJob(userJob("ml", "eager", 1, 4, false));
  json pending = server.waitFor(key, "eager", "pending");
  bool suspended = false;
  for (const auto& r : kube.requests()) {
    suspended = suspended || (r.target.find("/jobs/eager") != std::string::npos &&
                              r.body == R"({"spec":{"suspend":true}})");
  }
  EXPECT_TRUE(suspended);
  EXPECT_EQ(kube.runningPods("eager"), 0);
  EXPECT_EQ(kube.job("stray")["spec"]["suspend"], true);
  json live = server.call("GET", "/api/v1/workloads", key);
  ASSERT_EQ(live["data"].size(), 2u) << live.dump();  // steady and eager
  // Room: it is admitted and runs.
  server.call("DELETE", "/api/v1/workloads/ml/steady", key);
  server.waitFor(key, "eager", "running");
  EXPECT_EQ(kube.runningPods("eager"), 1);
  // A more urgent Job preempts it: suspended again, its pod gone, the workload requeued.
  kube.applyJob(userJob("ml", "urgent-job", 1, 8, true, "urgent"));
  json evicted = server.waitFor(key, "eager", "evicted");
  EXPECT_EQ(evicted["preemptions"], 1);
  EXPECT_EQ(kube.job("eager")["spec"]["suspend"], true);
  EXPECT_EQ(kube.runningPods("eager"), 0);
  server.waitFor(key, "urgent-job", "running");
  // kubectl delete job: its queued workload ends.
  ASSERT_TRUE(kube.deleteJob("ml", "eager"));
  json deleted = server.waitFor(key, "eager", "failed");
  EXPECT_EQ(deleted["reason"], "Deleted");
  // Deleted through Purser: the Job goes too (or it would be found again).
  int status = 0;
  server.call("DELETE", "/api/v1/workloads/ml/urgent-job", key, "", "application/json", &status);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(
      testing::eventually([&] { return kube.job("urgent-job").is_null(); },
                          {.pause = std::chrono::milliseconds(20), .what = "the Job's deletion"}));
}

TEST_F(FleetKubernetesTest, AUsersJobThatFailsFailsItsWorkloadWithThePodsCode) {
  kube.applyJob(userJob("ml", "broken", 1, 1, true));
  server.waitFor(key, "broken", "running");
  ASSERT_TRUE(kube.finishPod("broken", 2, "Traceback (most recent call last):\nKeyError: 'lr'\n"));
  json failed = server.waitFor(key, "broken", "failed");
  EXPECT_EQ(failed["exit_code"], 2);
  EXPECT_EQ(failed["log_tail"], "Traceback (most recent call last):\nKeyError: 'lr'\n");
  EXPECT_NE(kube.job("broken")["status"]["conditions"].dump().find(R"("type":"Failed")"),
            std::string::npos);
}

// A container asking for `gpus` GPUs, as users write it.
json trainer(int gpus) {
  return {{"name", "trainer"},
          {"image", "registry.example/trainer:2"},
          {"command", {"torchrun", "train.py"}},
          {"resources",
           {{"requests", {{"cpu", "1"}}}, {"limits", {{"nvidia.com/gpu", std::to_string(gpus)}}}}}};
}

// A JobSet's replicated Job: `replicas` Jobs of one pod asking for `gpus` GPUs.
json replicatedJob(const std::string& name, int replicas, int gpus) {
  return {{"name", name},
          {"replicas", replicas},
          {"template",
           {{"spec",
             {{"template",
               {{"spec",
                 {{"restartPolicy", "Never"}, {"containers", json::array({trainer(gpus)})}}}}}}}}}};
}

TEST_F(FleetKubernetesTest, AJobSetAndAPyTorchJobAUserAppliesRunAsOneObjectEach) {
  const json labels = {{"kueue.x-k8s.io/queue-name", "research"}};
  kube.applyJob({{"apiVersion", "jobset.x-k8s.io/v1alpha2"},
                 {"kind", "JobSet"},
                 {"metadata", {{"name", "pretrain"}, {"namespace", "ml"}, {"labels", labels}}},
                 {"spec",
                  {{"suspend", true},
                   {"replicatedJobs", json::array({replicatedJob("leader", 1, 1),
                                                   replicatedJob("workers", 2, 2)})}}}});
  json running = server.waitFor(key, "pretrain", "running");
  EXPECT_EQ(running["pods"].size(), 3u) << running.dump();
  EXPECT_EQ(kube.runningPods("pretrain"), 3);
  // Released whole: un-suspended, every replicated Job's pod template marked as Purser's and sent
  // to its node (the list goes back whole, as a merge patch replaces lists).
  json release;
  for (const auto& r : kube.requests()) {
    if (r.method == "PATCH" && r.target.find("/jobsets/pretrain") != std::string::npos) {
      release = json::parse(r.body);
    }
  }
  ASSERT_TRUE(release.is_object());
  EXPECT_EQ(release["spec"]["suspend"], false);
  ASSERT_EQ(release["spec"]["replicatedJobs"].size(), 2u);
  for (const auto& rj : release["spec"]["replicatedJobs"]) {
    const json t = rj["template"]["spec"]["template"];
    EXPECT_EQ(t["metadata"]["labels"]["purser.dev/managed"], "true") << rj.dump();
    EXPECT_EQ(t["metadata"]["annotations"]["purser.dev/handle"], "jobsets/ml/pretrain");
    EXPECT_EQ(t["spec"]["nodeSelector"]["kubernetes.io/hostname"], "gpu-node-1");
    EXPECT_EQ(t["spec"]["containers"][0]["image"], "registry.example/trainer:2");
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(kube.finishPod("pretrain", 0, "ok\n"));
  server.waitFor(key, "pretrain", "succeeded");
  EXPECT_TRUE(kube.object("pretrain").is_object()) << "a user's JobSet stays theirs";

  // A PyTorchJob: its master and workers; one worker fails, and so does the workload.
  kube.applyJob(
      {{"apiVersion", "kubeflow.org/v1"},
       {"kind", "PyTorchJob"},
       {"metadata", {{"name", "bert"}, {"namespace", "ml"}, {"labels", labels}}},
       {"spec",
        {{"runPolicy", {{"suspend", true}}},
         {"pytorchReplicaSpecs",
          {{"Master",
            {{"replicas", 1},
             {"template", {{"spec", {{"containers", json::array({trainer(1)})}}}}}}},
           {"Worker",
            {{"replicas", 2},
             {"template", {{"spec", {{"containers", json::array({trainer(1)})}}}}}}}}}}}});
  json bert = server.waitFor(key, "bert", "running");
  EXPECT_EQ(bert["pods"].size(), 3u);
  json patch;
  for (const auto& r : kube.requests()) {
    if (r.method == "PATCH" && r.target.find("/pytorchjobs/bert") != std::string::npos) {
      patch = json::parse(r.body);
    }
  }
  ASSERT_TRUE(patch.is_object());
  EXPECT_EQ(patch["spec"]["runPolicy"]["suspend"], false);
  EXPECT_EQ(patch["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
                 ["purser.dev/handle"],
            "pytorchjobs/ml/bert");
  ASSERT_TRUE(kube.finishPod("bert", 1, "NCCL error\n"));
  json failed = server.waitFor(key, "bert", "failed");
  EXPECT_EQ(failed["exit_code"], 1);
  EXPECT_EQ(failed["log_tail"], "NCCL error\n");
}

TEST_F(FleetKubernetesTest, AJobOrJobSetSubmittedToPurserIsCreatedAsItselfOnTheCluster) {
  // A Job as a user writes it for Kueue, handed to Purser's API instead of kubectl.
  json job = userJob("default", "sweep", 2, 1, false);
  job["metadata"].erase("namespace");  // the team's namespace stands in
  int status = 0;
  json submitted =
      server.call("POST", "/api/v1/workloads", key, job.dump(), "application/json", &status);
  ASSERT_EQ(status, 201) << submitted.dump();
  json running = server.waitFor(key, "sweep", "running");
  EXPECT_EQ(running["found_as"]["object"], "ml/sweep");
  // Created once, as itself and suspended, in the team's namespace; then released.
  std::vector<std::string> seen;
  json created;
  for (const auto& r : kube.requests()) {
    if (r.target.find("/jobs") == std::string::npos || r.method == "GET") continue;
    seen.push_back(r.method + " " + r.target);
    if (r.method == "POST") created = json::parse(r.body);
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], "POST /apis/batch/v1/namespaces/ml/jobs");
  EXPECT_EQ(seen[1], "PATCH /apis/batch/v1/namespaces/ml/jobs/sweep");
  EXPECT_EQ(created["spec"]["suspend"], true);
  EXPECT_EQ(created["spec"]["parallelism"], 2);
  EXPECT_EQ(created["spec"]["template"]["spec"]["containers"][0]["command"],
            json({"torchrun", "train.py"}));
  // The template did not ask for a token: it gets none.
  EXPECT_EQ(created["spec"]["template"]["spec"]["automountServiceAccountToken"], false);
  EXPECT_EQ(kube.runningPods("sweep"), 2);
  ASSERT_TRUE(kube.finishPod("sweep", 0, "ok\n"));
  ASSERT_TRUE(kube.finishPod("sweep", 0, "ok\n"));
  server.waitFor(key, "sweep", "succeeded");

  // A JobSet the same way; deleting its workload deletes it.
  json jobset = {
      {"apiVersion", "jobset.x-k8s.io/v1alpha2"},
      {"kind", "JobSet"},
      {"metadata", {{"name", "eval"}, {"labels", {{"kueue.x-k8s.io/queue-name", "research"}}}}},
      {"spec", {{"replicatedJobs", json::array({replicatedJob("shards", 2, 1)})}}}};
  server.call("POST", "/api/v1/workloads", key, jobset.dump(), "application/json", &status);
  ASSERT_EQ(status, 201);
  server.waitFor(key, "eval", "running");
  EXPECT_EQ(kube.runningPods("eval"), 2);
  EXPECT_EQ(kube.object("eval")["spec"]["suspend"], false);
  server.call("DELETE", "/api/v1/workloads/ml/eval", key, "", "application/json", &status);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(testing::eventually(
      [&] { return kube.object("eval").is_null(); },
      {.pause = std::chrono::milliseconds(20), .what = "the eval object's deletion"}));

  // Purser creates objects with its own credentials: a pod template asking for the host is refused
  // (Pod Security baseline), and nothing is created.
  json escape = userJob("default", "escape", 1, 1, false);
  escape["metadata"].erase("namespace");
  escape["spec"]["template"]["spec"]["hostNetwork"] = true;
  json refused = server.call("POST", "/api/v1/workloads", key, escape.dump());
  EXPECT_EQ(refused["state"], "failed") << refused.dump();
  EXPECT_EQ(refused["reason"], "StartFailed");
  EXPECT_NE(refused["message"].get<std::string>().find("spec.hostNetwork"), std::string::npos);
  EXPECT_TRUE(kube.job("escape").is_null());
  json privileged = userJob("default", "root", 1, 1, false);
  privileged["metadata"].erase("namespace");
  privileged["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {
      {"privileged", true}};
  EXPECT_EQ(server.call("POST", "/api/v1/workloads", key, privileged.dump())["reason"],
            "StartFailed");
  EXPECT_TRUE(kube.job("root").is_null());
  // Nor a service account's token, nor a named service account (its permissions are not the
  // team's key's), unless the platform allows it (fleet.kubernetes.service_account_tokens).
  json token = userJob("default", "token", 1, 1, false);
  token["metadata"].erase("namespace");
  token["spec"]["template"]["spec"]["automountServiceAccountToken"] = true;
  json no_token = server.call("POST", "/api/v1/workloads", key, token.dump());
  EXPECT_EQ(no_token["reason"], "StartFailed");
  EXPECT_NE(no_token["message"].get<std::string>().find("service account token"), std::string::npos)
      << no_token.dump();
  EXPECT_TRUE(kube.job("token").is_null());
  json account = userJob("default", "account", 1, 1, false);
  account["metadata"].erase("namespace");
  account["spec"]["template"]["spec"]["serviceAccountName"] = "cluster-admin-sa";
  json no_account = server.call("POST", "/api/v1/workloads", key, account.dump());
  EXPECT_NE(no_account["message"].get<std::string>().find("service account \"cluster-admin-sa\""),
            std::string::npos)
      << no_account.dump();
  EXPECT_TRUE(kube.job("account").is_null());
  // Baseline's finer rules: an unmasked /proc, an unsafe sysctl, an unconfined seccomp profile.
  json proc = userJob("default", "proc", 1, 1, false);
  proc["metadata"].erase("namespace");
  proc["spec"]["template"]["spec"]["securityContext"] = {
      {"sysctls", {{{"name", "kernel.msgmax"}, {"value", "1"}}}}};
  EXPECT_NE(
      server.call("POST", "/api/v1/workloads", key, proc.dump())["message"].get<std::string>().find(
          "sysctl \"kernel.msgmax\""),
      std::string::npos);
  EXPECT_TRUE(kube.job("proc").is_null());
}

// With fleet.kubernetes.pod_security: restricted, templates must meet the "restricted" level, and
// the Jobs Purser writes itself do.
class FleetKubernetesRestrictedTest : public FleetKubernetesTest {
 protected:
  std::string kubernetesExtra() const override { return ", pod_security: restricted"; }
};

TEST_F(FleetKubernetesRestrictedTest, TemplatesMeetTheRestrictedLevelAndPursersOwnJobsDo) {
  // A template baseline lets through but restricted does not: no allowPrivilegeEscalation: false.
  json loose = userJob("default", "loose", 1, 1, false);
  loose["metadata"].erase("namespace");
  json refused = server.call("POST", "/api/v1/workloads", key, loose.dump());
  EXPECT_EQ(refused["reason"], "StartFailed") << refused.dump();
  EXPECT_NE(refused["message"].get<std::string>().find("privilege escalation for container "
                                                       "trainer"),
            std::string::npos)
      << refused.dump();
  EXPECT_NE(refused["message"].get<std::string>().find("restricted level"), std::string::npos);
  EXPECT_TRUE(kube.job("loose").is_null());
  // Root (runAsNonRoot missing), then a hostPath-free but disallowed volume kind.
  json root = userJob("default", "rooted", 1, 1, false);
  root["metadata"].erase("namespace");
  root["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {
      {"allowPrivilegeEscalation", false}, {"capabilities", {{"drop", {"ALL"}}}}};
  EXPECT_NE(
      server.call("POST", "/api/v1/workloads", key, root.dump())["message"].get<std::string>().find(
          "root for container trainer"),
      std::string::npos);
  json nfs = userJob("default", "nfs", 1, 1, false);
  nfs["metadata"].erase("namespace");
  nfs["spec"]["template"]["spec"]["volumes"] = {
      {{"name", "data"}, {"nfs", {{"server", "10.0.0.1"}, {"path", "/"}}}}};
  EXPECT_NE(
      server.call("POST", "/api/v1/workloads", key, nfs.dump())["message"].get<std::string>().find(
          "a nfs volume (data)"),
      std::string::npos);
  // A template that meets it is created.
  json tight = userJob("default", "tight", 1, 1, false);
  tight["metadata"].erase("namespace");
  json& spec = tight["spec"]["template"]["spec"];
  spec["securityContext"] = {{"runAsNonRoot", true},
                             {"runAsUser", 1000},
                             {"seccompProfile", {{"type", "RuntimeDefault"}}}};
  spec["containers"][0]["securityContext"] = {{"allowPrivilegeEscalation", false},
                                              {"capabilities", {{"drop", {"ALL"}}}}};
  spec["volumes"] = {{{"name", "scratch"}, {"emptyDir", json::object()}}};
  int status = 0;
  json accepted =
      server.call("POST", "/api/v1/workloads", key, tight.dump(), "application/json", &status);
  ASSERT_EQ(status, 201) << accepted.dump();
  server.waitFor(key, "tight", "running");
  EXPECT_FALSE(kube.job("tight").is_null());
  // Purser's own Job for a submitted pod set meets the level.
  submit("own", 1);
  const std::string job = jobOf("own");
  const auto seen = calls(job);
  ASSERT_GE(seen.size(), 1u);
  const json created = json::parse(seen[0].substr(5));
  const json pod = created["spec"]["template"]["spec"];
  EXPECT_EQ(pod["securityContext"]["runAsNonRoot"], true);
  EXPECT_EQ(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
  EXPECT_EQ(pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"], false);
  EXPECT_EQ(pod["containers"][0]["securityContext"]["capabilities"]["drop"], json({"ALL"}));
  EXPECT_EQ(pod["automountServiceAccountToken"], false);
}

// A model served from a Kubernetes pod: its pod's IP (the fake's pods are on loopback, where the
// test's own simulated model server stands in for what the pod serves) joins the route.
class FleetKubernetesServeTest : public FleetKubernetesTest {
 protected:
  std::string gateway() const override {
    return "routes:\n  - {model: chat, targets: [], served_by: [acme]}\n"
           "prices:\n  - {provider: fleet, model: sim-small, input_per_mtok: \"1.00\", "
           "output_per_mtok: \"2.00\"}\n";
  }
  void TearDown() override {
    if (model) {
      model->signal(SIGTERM);
      model->wait();
    }
  }
  std::unique_ptr<testing::Process> model;
};

TEST_F(FleetKubernetesServeTest, AServingPodOnKubernetesJoinsTheRouteAtItsPodIp) {
  const uint16_t port = testing::freePort();
  model = std::make_unique<testing::Process>(
      std::vector<std::string>{PURSER_BINARY, "sim", "llm", "--listen",
                               "127.0.0.1:" + std::to_string(port), "--models", "sim-small"});
  ASSERT_TRUE(model->waitForStdout("listening on ").has_value()) << model->err();
  json w = {{"name", "chat-server"},
            {"queue", "research"},
            {"serve",
             {{"route", "chat"}, {"port", port}, {"model", "sim-small"}, {"health", "/healthz"}}},
            {"pod_sets",
             {{{"name", "replicas"},
               {"image", "vllm/vllm-openai:v0.6"},
               {"requests", {{"cpu", "1"}, {"nvidia.com/gpu", "1"}}}}}}};
  int status = 0;
  server.call("POST", "/api/v1/workloads", key, w.dump(), "application/json", &status);
  ASSERT_EQ(status, 201);
  ASSERT_TRUE(server.waitForServing(key, "chat-server", true));
  // The pod's environment told it its port; a request through the gateway reaches it.
  const auto created = calls(kube.jobOfWorkload("chat-server-replicas-0-"));
  ASSERT_FALSE(created.empty());
  const json env =
      json::parse(created[0].substr(5))["spec"]["template"]["spec"]["containers"][0]["env"];
  EXPECT_NE(env.dump().find(R"({"name":"PURSER_SERVE_PORT","value":")" + std::to_string(port)),
            std::string::npos)
      << env.dump();
  server.call("POST", "/v1/chat/completions", key,
              R"({"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":4})",
              "application/json", &status);
  EXPECT_EQ(status, 200);
  const json usage = server.call("GET", "/api/v1/usage?scope=tenant:acme&limit=10", kAdminKey);
  EXPECT_NE(usage.dump().find("fleet:ml/chat-server/replicas-0"), std::string::npos)
      << usage.dump();
}

// The cluster's Nodes as the inventory: read at the start and again as they change.
class FleetKubernetesInventoryTest : public FleetKubernetesTest {
 protected:
  std::string inventory() const override { return "  inventory_refresh: 1s\n"; }
  // Reached through a kubeconfig beside the configuration (its token in a file beside it).
  std::string connection() override {
    std::filesystem::create_directories(dir.file("kube"));
    testing::writeFile(dir.file("kube/token"), std::string(kToken) + "\n");
    testing::writeFile(
        dir.file("kube/config"),
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n"
        "  cluster: {server: \"http://127.0.0.1:" +
            std::to_string(kube.port()) +
            "\"}\ncontexts:\n- name: fake\n  context: {cluster: fake, user: purser}\n"
            "users:\n- name: purser\n  user: {tokenFile: token}\n");
    return "kubeconfig: kube/config";
  }
  std::string kubernetesExtra() const override { return ", inventory: true, gpu_memory: 40Gi"; }
  void beforeStart() override {
    kube.setNode(node("gpu-a", 4, "NVIDIA-H100-80GB-HBM3", "81559", false));
    kube.setNode(node("gpu-cordoned", 8, "NVIDIA-H100-80GB-HBM3", "81559", true));
    kube.setNode(node("cpu-only", 0, "", "", false));
  }
  static json node(const std::string& name, int gpus, const std::string& product,
                   const std::string& memory, bool cordoned) {
    json labels = {{"kubernetes.io/hostname", name}, {"purser.dev/rack", "r1"}};
    if (!product.empty()) labels["nvidia.com/gpu.product"] = product;
    if (!memory.empty()) labels["nvidia.com/gpu.memory"] = memory;
    json allocatable = {{"cpu", "63500m"}, {"memory", "527784672Ki"}, {"pods", "110"}};
    if (gpus > 0) allocatable["nvidia.com/gpu"] = std::to_string(gpus);
    return {{"metadata", {{"name", name}, {"labels", labels}}},
            {"spec", cordoned ? json{{"unschedulable", true}} : json::object()},
            {"status", {{"allocatable", allocatable}, {"capacity", allocatable}}}};
  }
  json nodeNamed(const std::string& name) {
    json nodes = server.call("GET", "/api/v1/fleet/nodes", key);
    for (const auto& n : nodes["data"]) {
      if (n["name"] == name) return n;
    }
    return nullptr;
  }
};

TEST_F(FleetKubernetesInventoryTest, TheClustersNodesAreTheInventoryAndWorkGoesWhereItMayRun) {
  json a = nodeNamed("gpu-a");
  ASSERT_TRUE(a.is_object()) << server.call("GET", "/api/v1/fleet/nodes", key).dump();
  EXPECT_EQ(a["gpu_count"], 4);
  EXPECT_EQ(a["gpu_model"], "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(a["gpus"][0]["memory_mib"], 81559);
  EXPECT_EQ(a["cpu"], "63500m");
  EXPECT_EQ(a["memory_mib"], 527784672 / 1024);
  EXPECT_EQ(a["rack"], "r1");
  json cordoned = nodeNamed("gpu-cordoned");
  ASSERT_TRUE(cordoned.is_object());
  EXPECT_EQ(cordoned["taints"][0]["key"], "node.kubernetes.io/unschedulable");
  EXPECT_EQ(nodeNamed("cpu-only")["gpu_count"], 0);
  // Work lands on the node that takes it, never on the cordoned one.
  submit("first", 4);
  const std::string job = jobOf("first");
  server.waitFor(key, "first", "running");
  const auto seen = calls(job);
  ASSERT_GE(seen.size(), 2u);
  const json release = json::parse(seen[1].substr(6));
  EXPECT_EQ(release["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"], "gpu-a");
  // A second one has quota (8 GPUs) but no node: it waits for one.
  submit("second", 4);
  EXPECT_EQ(server.workload(key, "second")["state"], "pending");
  // A new Node joins (GPU memory unlabelled: the configured 40Gi); the waiting work runs there.
  kube.setNode(node("gpu-b", 4, "", "", false));
  server.waitFor(key, "second", "running");
  json b = nodeNamed("gpu-b");
  ASSERT_TRUE(b.is_object());
  EXPECT_EQ(b["gpu_model"], "gpu");
  EXPECT_EQ(b["gpus"][0]["memory_mib"], 40 * 1024);
  const auto second_calls = calls(jobOf("second"));
  ASSERT_GE(second_calls.size(), 2u);
  EXPECT_EQ(json::parse(second_calls[1].substr(
                6))["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"],
            "gpu-b");
}

}  // namespace
}  // namespace purser
