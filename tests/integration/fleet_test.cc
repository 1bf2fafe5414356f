// The fleet in a real `purser serve`, driven by the real CLI: Kueue manifests from the
// configuration and from `purser fleet apply`, workloads submitted, admitted, explained, deleted
// and found again after a restart; bad input refused with nothing changed; GPU time metered into
// the team's wallets and a team with an exhausted hard GPU wallet held back.
#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <thread>

#include "common/money.h"
#include "fakes/eventually.h"
#include "fakes/kueue_manifest.h"
#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/temp_dir.h"

namespace purser {
namespace {

using nlohmann::json;
using testing::Process;

constexpr const char* kAdminKey = "fleet-test-admin-key-0123456789";

// ClusterQueue research (cohort gpus, 64 CPUs and 8 GPUs of h100 it may not lend beyond), its
// LocalQueue in ml, and WorkloadPriorityClass urgent.
const std::string kManifests = [] {
  testing::KueueQueue q;
  q.cohort = "gpus";
  q.preemption = "withinClusterQueue: LowerPriority, reclaimWithinCohort: Any";
  q.quota = {{"cpu", "64"}, {"nvidia.com/gpu", "8, borrowingLimit: 0"}};
  q.priority_classes = {{"urgent", 1000}};
  return q.yaml();
}();

constexpr const char* kTrain = R"(apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: NAME}
spec:
  queueName: research
  podSets:
    - name: workers
      count: 4
      template:
        spec:
          containers:
            - name: trainer
              resources:
                requests: {cpu: "8", nvidia.com/gpu: "GPUS"}
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
    text.replace(at, from.size(), to);
    at += to.size();
  }
  return text;
}

class FleetServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::writeFile(dir.file("fleet.yaml"), kManifests);
    testing::writeFile(dir.file("purser.yaml"),
                       "listen: 127.0.0.1:0\nthreads: 1\n"
                       "gpu_prices:\n  - {flavor: h100, per_gpu_hour: \"3600.00\"}\n"
                       "fleet:\n  manifests: [fleet.yaml]\n  metering_interval: 1s\n");
    start();
  }
  void TearDown() override { stop(); }

  void start() {
    server = std::make_unique<Process>(
        std::vector<std::string>{PURSER_BINARY, "serve", "--config", dir.file("purser.yaml"),
                                 "--data", dir.file("var")},
        "", std::vector<std::string>{std::string("PURSER_ADMIN_KEY=") + kAdminKey});
    auto line = server->waitForStdout("purser: listening on ");
    ASSERT_TRUE(line.has_value()) << server->err();
    url = line->substr(line->find("http"));
  }
  void stop() {
    if (!server) return;
    server->signal(SIGTERM);
    EXPECT_EQ(server->wait(), 0);
    server.reset();
  }

  struct Run {
    int code;
    std::string out, err;
  };
  Run cli(std::vector<std::string> args, const std::string& key = kAdminKey) {
    std::vector<std::string> argv = {PURSER_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    Process p(argv, "", {"PURSER_SERVER=" + url, "PURSER_KEY=" + key});
    const int code = p.wait();
    return {code, p.out(), p.err()};
  }
  json cliJson(std::vector<std::string> args, const std::string& key = kAdminKey) {
    args.push_back("-o");
    args.push_back("json");
    Run r = cli(args, key);
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out, nullptr, false);
  }

  // A tenant "acme" with team "ml" and a member; returns the member's key and the team's id.
  std::pair<std::string, std::string> member() {
    EXPECT_EQ(cli({"tenants", "create", "acme", "--max-priority", "1000"}).code, 0);
    json team = cliJson({"teams", "create", "ml", "--tenant", "acme"});
    json user = cliJson({"users", "create", "alice", "--tenant", "acme", "--team", "ml"});
    json key = cliJson(
        {"keys", "create", "--name", "laptop", "--owner", "user:" + user["id"].get<std::string>()});
    return {key["key"].get<std::string>(), team["id"].get<std::string>()};
  }

  std::string workloadFile(const std::string& name, int gpus) {
    const std::string path = dir.file(name + ".yaml");
    testing::writeFile(path, replace(replace(kTrain, "NAME", name), "GPUS", std::to_string(gpus)));
    return path;
  }

  json workload(const std::string& name, const std::string& key) {
    return cliJson({"workloads", "get", name}, key);
  }

  testing::TempDir dir;
  std::unique_ptr<Process> server;
  std::string url;
};

TEST_F(FleetServeTest, AcceptsABatchJobWithKueuesQueueLabel) {
  // What a team already writes for Kueue, submitted as it is.
  const auto [key, team] = member();
  const std::string path = dir.file("job.yaml");
  testing::writeFile(path, R"(apiVersion: batch/v1
kind: Job
metadata:
  name: finetune
  labels: {kueue.x-k8s.io/queue-name: research, kueue.x-k8s.io/priority-class: urgent}
spec:
  parallelism: 2
  completions: 2
  suspend: true
  template:
    spec:
      containers:
        - name: trainer
          image: trainer:1
          command: [sleep]
          args: ["300"]
          env: [{name: WANDB_KEY, value: not-for-the-view}]
          resources:
            requests: {cpu: "4"}
            limits: {nvidia.com/gpu: 2}
      restartPolicy: Never
)");
  Run submitted = cli({"submit", "-f", path}, key);
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  json job = workload("ml/finetune", key);
  EXPECT_EQ(job["state"], "running") << job.dump();
  EXPECT_EQ(job["priority"], 1000);
  ASSERT_EQ(job["admission"]["pod_sets"].size(), 1u);
  EXPECT_EQ(job["admission"]["pod_sets"][0]["name"], "main");
  EXPECT_EQ(job["admission"]["pod_sets"][0]["usage"]["nvidia.com/gpu"], "4");
  // What it runs is kept, through a restart: the command, and the names of its variables only.
  stop();
  start();
  job = workload("ml/finetune", key);
  EXPECT_EQ(job["state"], "running");
  EXPECT_EQ(job["runs"], 1);
  EXPECT_EQ(job["pod_sets"][0]["command"], json({"sleep", "300"}));
  EXPECT_EQ(job["pod_sets"][0]["env"], json({"WANDB_KEY"}));
  EXPECT_EQ(job.dump().find("not-for-the-view"), std::string::npos);
  // Without -o json, `workloads get` shows the same object a field a line, not the list's row.
  Run shown = cli({"workloads", "get", "ml/finetune"}, key);
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_NE(shown.out.find("Name: ml/finetune\n"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("Command: sleep, 300\n"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("Env: WANDB_KEY\n"), std::string::npos) << shown.out;
  EXPECT_EQ(shown.out.find("not-for-the-view"), std::string::npos) << shown.out;
  // Without the label Kueue would not queue it, and neither does Purser.
  testing::writeFile(path, R"(apiVersion: batch/v1
kind: Job
metadata: {name: stray}
spec:
  template: {spec: {containers: [{name: c}]}}
)");
  Run stray = cli({"submit", "-f", path}, key);
  EXPECT_NE(stray.code, 0);
  EXPECT_NE(stray.err.find("kueue.x-k8s.io/queue-name"), std::string::npos) << stray.err;
  // Deleting it stops its pods (sleep ends at the polite signal).
  ASSERT_EQ(cli({"workloads", "delete", "ml/finetune"}, key).code, 0);
  json deleted = workload("ml/finetune", key);
  EXPECT_EQ(deleted["state"], "failed");
  EXPECT_EQ(deleted["pods"][0]["phase"], "stopped");
}

TEST_F(FleetServeTest, AdmitsExplainsReleasesAndSurvivesARestart) {
  const auto [key, team] = member();
  Run first = cli({"submit", "-f", workloadFile("train-1", 2)}, key);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.out.find("ml/train-1"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("admitted"), std::string::npos) << first.out;
  ASSERT_EQ(cli({"submit", "-f", workloadFile("train-2", 1)}, key).code, 0);

  json one = workload("ml/train-1", key);
  EXPECT_EQ(one["state"], "admitted");
  EXPECT_EQ(one["admission"]["cluster_queue"], "research");
  EXPECT_EQ(one["admission"]["pod_sets"][0]["flavors"]["nvidia.com/gpu"], "h100");
  EXPECT_EQ(one["admission"]["pod_sets"][0]["usage"]["nvidia.com/gpu"], "8");
  json two = workload("ml/train-2", key);
  EXPECT_EQ(two["state"], "pending");
  EXPECT_EQ(two["reason"], "WaitingForQuota");

  // Why, in words: what it asks for, what the queue has, and why preemption cannot help.
  Run why = cli({"why", "ml/train-2"}, key);
  ASSERT_EQ(why.code, 0) << why.err;
  EXPECT_NE(why.out.find("asks for 4 nvidia.com/gpu; ClusterQueue research has 8 in use of its "
                         "nominal 8, can use 0 now"),
            std::string::npos)
      << why.out;
  EXPECT_NE(why.out.find("preemption cannot help"), std::string::npos) << why.out;

  json queues = cliJson({"queues"});
  ASSERT_EQ(queues["data"].size(), 1u);
  EXPECT_EQ(queues["data"][0]["pending"], 1);
  EXPECT_EQ(queues["data"][0]["admitted"], 1);
  bool saw_gpu = false;
  for (const auto& r : queues["data"][0]["resources"]) {
    if (r["resource"] != "nvidia.com/gpu") continue;
    saw_gpu = true;
    EXPECT_EQ(r["nominal"], "8");
    EXPECT_EQ(r["usage"], "8");
    EXPECT_EQ(r["borrowed"], "0");
  }
  EXPECT_TRUE(saw_gpu);
  // The same on /metrics, for dashboards and `purser diagnose`.
  testing::RawClient scrape(testing::portFromListeningLine("listening on " + url));
  ASSERT_TRUE(scrape.send("GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"));
  const auto metrics = scrape.readResponse();
  ASSERT_TRUE(metrics.has_value());
  for (const std::string line :
       {"purser_fleet_pending_workloads{cluster_queue=\"research\"} 1",
        "purser_fleet_admitted_workloads{cluster_queue=\"research\"} 1",
        "purser_fleet_quota_used{cluster_queue=\"research\",flavor=\"h100\",resource=\"nvidia.com/"
        "gpu\"} 8",
        "purser_fleet_quota_nominal{cluster_queue=\"research\",flavor=\"h100\",resource=\"nvidia."
        "com/gpu\"} 8"}) {
    EXPECT_NE(metrics->body.find(line), std::string::npos) << line << "\n" << metrics->body;
  }

  // Deleting the first releases its quota: the second is admitted at once.
  Run del = cli({"workloads", "delete", "ml/train-1"}, key);
  ASSERT_EQ(del.code, 0) << del.err;
  EXPECT_EQ(workload("ml/train-2", key)["state"], "admitted");
  json events = cliJson({"fleet", "events"});
  std::vector<std::string> kinds;
  for (const auto& e : events["data"]) {
    kinds.push_back(e["kind"].get<std::string>() + " " + e["workload"].get<std::string>());
  }
  const std::vector<std::string> expected = {"Submitted ml/train-1", "Admitted ml/train-1",
                                             "Submitted ml/train-2", "Finished ml/train-1",
                                             "Admitted ml/train-2"};
  EXPECT_EQ(kinds, expected);

  // A restart finds the admitted workload with its quota, and the finished one in the record.
  stop();
  start();
  json after = workload("ml/train-2", key);
  EXPECT_EQ(after["state"], "admitted");
  EXPECT_EQ(after["admission"]["pod_sets"][0]["usage"]["nvidia.com/gpu"], "4");
  // A deleted workload ended before it finished its work: failed, by deletion.
  json deleted = workload("ml/train-1", key);
  EXPECT_EQ(deleted["state"], "failed");
  EXPECT_EQ(deleted["reason"], "Deleted");
  json active = cliJson({"workloads"}, key);
  ASSERT_EQ(active["data"].size(), 1u);
  EXPECT_EQ(active["data"][0]["name"], "ml/train-2");
  // Its quota is held: a workload needing the whole queue waits.
  ASSERT_EQ(cli({"submit", "-f", workloadFile("train-3", 2)}, key).code, 0);
  EXPECT_EQ(workload("ml/train-3", key)["state"], "pending");
  // A workload's priority is its priority class's value, as the queue orders it.
  const std::string urgent = dir.file("urgent.yaml");
  testing::writeFile(urgent,
                     "name: hot\nqueue: research\npriority_class: urgent\n"
                     "pod_sets: [{name: a, requests: {cpu: 1}}]\n");
  ASSERT_EQ(cli({"submit", "-f", urgent}, key).code, 0);
  const json hot = workload("ml/hot", key);
  EXPECT_EQ(hot["priority"], 1000);
  EXPECT_EQ(hot["priority_class"], "urgent");
}

TEST_F(FleetServeTest, BadInputIsRefusedAndChangesNothing) {
  const auto [key, team] = member();
  ASSERT_EQ(cli({"submit", "-f", workloadFile("keep", 2)}, key).code, 0);
  const json before = cliJson({"queues"});

  const std::string missing_queue = dir.file("missing-queue.yaml");
  testing::writeFile(missing_queue,
                     "name: lost\nqueue: nowhere\npod_sets: [{name: a, requests: {cpu: 1}}]\n");
  Run lost = cli({"submit", "-f", missing_queue}, key);
  EXPECT_EQ(lost.code, 1);
  EXPECT_NE(lost.err.find("nowhere"), std::string::npos) << lost.err;

  const std::string missing_class = dir.file("missing-class.yaml");
  testing::writeFile(missing_class,
                     "name: vip\nqueue: research\npriority_class: gold\n"
                     "pod_sets: [{name: a, requests: {cpu: 1}}]\n");
  Run vip = cli({"submit", "-f", missing_class}, key);
  EXPECT_EQ(vip.code, 1);
  EXPECT_NE(vip.err.find("gold"), std::string::npos) << vip.err;

  const std::string negative = dir.file("negative.yaml");
  testing::writeFile(
      negative, "name: neg\nqueue: research\npod_sets: [{name: a, requests: {cpu: \"-1\"}}]\n");
  Run neg = cli({"submit", "-f", negative}, key);
  EXPECT_EQ(neg.code, 1);
  EXPECT_NE(neg.err.find("400"), std::string::npos) << neg.err;

  // Another team's namespace is not a member's to use.
  const std::string elsewhere = dir.file("elsewhere.yaml");
  testing::writeFile(elsewhere,
                     "name: x\nnamespace: prod\nqueue: research\n"
                     "pod_sets: [{name: a, requests: {cpu: 1}}]\n");
  Run other = cli({"submit", "-f", elsewhere}, key);
  EXPECT_EQ(other.code, 1);
  EXPECT_NE(other.err.find("403"), std::string::npos) << other.err;

  // Manifests: an unknown flavor, a cohort cycle, a flavor not listing every covered resource.
  const std::string unknown_flavor = dir.file("unknown-flavor.yaml");
  testing::writeFile(unknown_flavor, replace(kManifests, "- name: h100", "- name: b200"));
  Run flavor = cli({"fleet", "apply", "-f", unknown_flavor});
  EXPECT_EQ(flavor.code, 1);
  EXPECT_NE(flavor.err.find("b200"), std::string::npos) << flavor.err;

  const std::string cycle = dir.file("cycle.yaml");
  testing::writeFile(cycle,
                     "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {name: a}\n"
                     "spec: {parent: b}\n---\n"
                     "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {name: b}\n"
                     "spec: {parent: a}\n");
  Run cyc = cli({"fleet", "apply", "-f", cycle});
  EXPECT_EQ(cyc.code, 1);
  EXPECT_NE(cyc.err.find("cycle"), std::string::npos) << cyc.err;

  const std::string uncovered = dir.file("uncovered.yaml");
  testing::writeFile(uncovered,
                     replace(kManifests, "            - {name: cpu, nominalQuota: 64}\n", ""));
  Run unc = cli({"fleet", "apply", "-f", uncovered});
  EXPECT_EQ(unc.code, 1);
  EXPECT_NE(unc.err.find("cpu"), std::string::npos) << unc.err;

  // Only platform admins change the fleet.
  Run denied = cli({"fleet", "apply", "-f", dir.file("fleet.yaml")}, key);
  EXPECT_EQ(denied.code, 1);
  EXPECT_NE(denied.err.find("403"), std::string::npos) << denied.err;

  // Nothing moved: the admitted workload is where it was, the queues read the same.
  EXPECT_EQ(cliJson({"queues"}), before);
  json list = cliJson({"workloads"}, key);
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["name"], "ml/keep");
  EXPECT_EQ(list["data"][0]["state"], "admitted");

  // A valid apply adds a queue and keeps the admitted workload.
  const std::string more = dir.file("more.yaml");
  testing::writeFile(more, replace(replace(kManifests, "name: research}", "name: batch}"),
                                   "{clusterQueue: research}", "{clusterQueue: batch}"));
  Run applied = cli({"fleet", "apply", "-f", more});
  ASSERT_EQ(applied.code, 0) << applied.err;
  EXPECT_EQ(cliJson({"queues"})["data"].size(), 2u);
  EXPECT_EQ(workload("ml/keep", key)["state"], "admitted");
}

// GPU time is held ahead on the wallets (two metering intervals and two seconds) and charged as
// it is used; when a hard wallet can no longer hold what is ahead, the workload goes back to its
// queue, held, and the wallet is never overrun.
TEST_F(FleetServeTest, GpuTimeIsHeldAheadAndAHardWalletIsNeverOverrun) {
  // Metering every 5 s: a hold covers 12 s ahead.
  stop();
  testing::writeFile(dir.file("purser.yaml"),
                     "listen: 127.0.0.1:0\nthreads: 1\n"
                     "gpu_prices:\n  - {flavor: h100, per_gpu_hour: \"3600.00\"}\n"
                     "fleet:\n  manifests: [fleet.yaml]\n  metering_interval: 5s\n");
  start();
  const auto [key, team] = member();
  // 3600.00 per GPU-hour is 1.00 per GPU-second. "burn" has 4 GPUs: 4.00 a second, and a hold
  // of 12 s costs 48.00. The wallet has 60.00: one hold; after the first metering (20.00 or
  // more), not another.
  ASSERT_EQ(cli({"wallets", "create", "--scope", "team:" + team, "--limit", "60.00", "--model",
                 "gpu-hours", "--alert-at", "10,90"})
                .code,
            0);
  ASSERT_EQ(cli({"submit", "-f", workloadFile("burn", 1)}, key).code, 0);
  ASSERT_EQ(workload("ml/burn", key)["state"], "admitted");
  json wallets = cliJson({"wallets", "list"});
  if (wallets["data"][0]["reserved"] != "48.00") {
    // On a slow (or busy) machine the first metering, 5 s in, may have come before this look:
    // the hold was then charged and not taken again.
    EXPECT_NE(wallets["data"][0]["spent"], "0.00") << wallets.dump();
  }
  // At the first metering the wallet cannot hold the next 48.00: "burn" is sent back, held.
  json burn;
  ASSERT_TRUE(testing::eventually(
      [&] {
        burn = workload("ml/burn", key);
        return burn["state"] == "suspended";
      },
      {.attempts = 150, .pause = std::chrono::milliseconds(100), .what = "ml/burn suspended"}))
      << burn.dump();
  EXPECT_EQ(burn["reason"], "BudgetExhausted") << burn.dump();
  EXPECT_EQ(burn["preemptions"], 0);
  EXPECT_NE(burn["gpu_charged"], "0.00");
  wallets = cliJson({"wallets", "list"});
  const Money spent = *Money::parse(wallets["data"][0]["spent"].get<std::string>());
  EXPECT_LE(spent, *Money::parse("60.00")) << wallets.dump();
  EXPECT_EQ(wallets["data"][0]["reserved"], "0.00") << wallets.dump();
  json spend = cliJson({"spend", "--scope", "team:" + team, "--group-by", "model"});
  ASSERT_EQ(spend["data"].size(), 1u) << spend.dump();
  EXPECT_EQ(spend["data"][0]["group"], "gpu-hours");
  EXPECT_EQ(spend["data"][0]["cost"], burn["gpu_charged"]);
  bool stopped = false;
  const json events = cliJson({"fleet", "events", "--workload", "ml/burn"});
  for (const auto& e : events["data"]) {
    stopped = stopped || (e["kind"] == "Evicted" && e["reason"] == "BudgetExhausted");
  }
  EXPECT_TRUE(stopped);

  // A new GPU workload is held with a reason naming the budget; CPU-only work is not.
  ASSERT_EQ(cli({"submit", "-f", workloadFile("next", 1)}, key).code, 0);
  json next = workload("ml/next", key);
  EXPECT_EQ(next["state"], "suspended");
  EXPECT_EQ(next["reason"], "BudgetExhausted") << next.dump();
  Run why = cli({"why", "ml/next"}, key);
  EXPECT_NE(why.out.find("the GPU budget is used up"), std::string::npos) << why.out;
  EXPECT_NE(why.out.find("next 12 s of GPU time cost 48.00"), std::string::npos) << why.out;
  const std::string cpu_only = dir.file("cpu-only.yaml");
  testing::writeFile(cpu_only,
                     "name: etl\nqueue: research\npod_sets: [{name: a, requests: {cpu: 2}}]\n");
  ASSERT_EQ(cli({"submit", "-f", cpu_only}, key).code, 0);
  EXPECT_EQ(workload("ml/etl", key)["state"], "admitted");

  // The thresholds the GPU charges crossed are in the audit log.
  Run audit = cli({"audit", "list"});
  EXPECT_NE(audit.out.find("budget.alert"), std::string::npos) << audit.out;

  // Deleting it ends it; what it was charged stays on its record.
  ASSERT_EQ(cli({"workloads", "delete", "ml/burn"}, key).code, 0);
  json burned = workload("ml/burn", key);
  EXPECT_EQ(burned["state"], "failed");
  EXPECT_EQ(burned["reason"], "Deleted");
  EXPECT_EQ(burned["gpu_charged"], burn["gpu_charged"]);
}

TEST_F(FleetServeTest, TenantsAndTeamsDoNotSeeOrMoveEachOthersWork) {
  const auto [key, team] = member();
  ASSERT_EQ(cli({"submit", "-f", workloadFile("mine", 1)}, key).code, 0);
  // Another tenant's member, in a team of another name.
  ASSERT_EQ(cli({"tenants", "create", "globex"}).code, 0);
  ASSERT_EQ(cli({"teams", "create", "vision", "--tenant", "globex"}).code, 0);
  json other = cliJson({"users", "create", "bob", "--tenant", "globex", "--team", "vision"});
  const std::string bob = cliJson({"keys", "create", "--name", "k", "--owner",
                                   "user:" + other["id"].get<std::string>()})["key"];
  EXPECT_TRUE(cliJson({"workloads"}, bob)["data"].empty());
  EXPECT_TRUE(cliJson({"fleet", "events"}, bob)["data"].empty());
  Run peek = cli({"workloads", "get", "ml/mine"}, bob);
  EXPECT_EQ(peek.code, 1);
  EXPECT_NE(peek.err.find("404"), std::string::npos) << peek.err;
  Run steal = cli({"workloads", "delete", "ml/mine"}, bob);
  EXPECT_EQ(steal.code, 1);
  EXPECT_EQ(workload("ml/mine", key)["state"], "admitted");
  Run why = cli({"why", "ml/mine"}, bob);
  EXPECT_EQ(why.code, 1);

  // A member sets no bare priority; a priority class is the way.
  const std::string bare = dir.file("bare.yaml");
  testing::writeFile(bare,
                     "name: vip\nqueue: research\npriority: 1000000\n"
                     "pod_sets: [{name: a, requests: {cpu: 1}}]\n");
  Run vip = cli({"submit", "-f", bare}, key);
  EXPECT_EQ(vip.code, 1);
  EXPECT_NE(vip.err.find("403"), std::string::npos) << vip.err;

  // Another tenant's team of the same name is another namespace: this tenant goes on as before
  // and is told nothing of it.
  ASSERT_EQ(cli({"teams", "create", "ml", "--tenant", "globex"}).code, 0);
  Run more = cli({"submit", "-f", workloadFile("more", 1)}, key);
  EXPECT_EQ(more.code, 0) << more.err;
  EXPECT_EQ(more.out.find("globex"), std::string::npos) << more.out;
}

TEST_F(FleetServeTest, AnInvalidManifestStopsTheServerWithItsLine) {
  stop();
  testing::writeFile(dir.file("fleet.yaml"),
                     replace(kManifests, "nominalQuota: 64", "nominalQuota: -64"));
  Process bad(
      {PURSER_BINARY, "serve", "--config", dir.file("purser.yaml"), "--data", dir.file("var2")}, "",
      {std::string("PURSER_ADMIN_KEY=") + kAdminKey});
  EXPECT_NE(bad.wait(), 0);
  EXPECT_NE(bad.err().find("fleet.yaml:"), std::string::npos) << bad.err();
  EXPECT_NE(bad.err().find("nominalQuota"), std::string::npos) << bad.err();
}

// Two 4-GPU nodes (NVLink pairs {0,1} and {2,3}) under a queue with quota for 16: admission waits
// for real room, says when a request can never fit, carries each pod's GPUs, and keeps them
// across a restart.
TEST_F(FleetServeTest, PlacesOnDeclaredNodesAndAdmitsOnlyWhatFits) {
  stop();
  // HAMi's GPU memory is a resource like any other to Kueue: the queue covers it.
  std::string manifests = replace(kManifests, "nominalQuota: 64}", "nominalQuota: 256}");
  manifests = replace(manifests, "nominalQuota: 8,", "nominalQuota: 16,");
  manifests =
      replace(manifests, "[cpu, nvidia.com/gpu]", "[cpu, nvidia.com/gpumem, nvidia.com/gpu]");
  manifests = replace(manifests, "            - {name: nvidia.com/gpu,",
                      "            - {name: nvidia.com/gpumem, nominalQuota: 655360}\n"
                      "            - {name: nvidia.com/gpu,");
  testing::writeFile(dir.file("fleet.yaml"), manifests);
  testing::writeFile(dir.file("purser.yaml"),
                     "listen: 127.0.0.1:0\nthreads: 1\n"
                     "fleet:\n  manifests: [fleet.yaml]\n"
                     "  placement: {policy: default, seed: 7}\n"
                     "  nodes:\n"
                     "    - name: dgx\n      count: 2\n      cpu: 64\n      memory: 512Gi\n"
                     "      rack: r1\n"
                     "      gpus: {count: 4, model: H100-SXM-80GB, memory: 80Gi,\n"
                     "             nvlink_domains: [[0, 1], [2, 3]], numa: [0, 0, 1, 1]}\n");
  start();
  const auto [key, team] = member();
  const auto submit = [&](const std::string& name, const std::string& yaml) {
    const std::string path = dir.file(name + ".yaml");
    testing::writeFile(path, replace(yaml, "NAME", name));
    Run r = cli({"submit", "-f", path}, key);
    EXPECT_EQ(r.code, 0) << r.err;
  };
  const std::string gang = R"(apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: NAME}
spec:
  queueName: research
  podSets:
    - name: workers
      count: 2
      topologyRequest: {required: kubernetes.io/hostname}
      template:
        spec:
          containers:
            - name: trainer
              resources:
                requests: {cpu: "8", nvidia.com/gpu: "GPUS"}
)";
  // A gang of two 2-GPU pods that must share a node.
  submit("gang", replace(gang, "GPUS", "2"));
  json g = workload("ml/gang", key);
  ASSERT_EQ(g["state"], "admitted") << g.dump();
  const json& pods = g["admission"]["pod_sets"][0]["placements"];
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0]["node"], pods[1]["node"]);
  // Each pod's pair of GPUs is one NVLink pair.
  for (const auto& p : pods) {
    ASSERT_EQ(p["gpus"].size(), 2u);
    EXPECT_EQ(p["gpus"][0].get<int>() / 2, p["gpus"][1].get<int>() / 2) << p.dump();
    EXPECT_EQ(p["env"]["CUDA_VISIBLE_DEVICES"], std::to_string(p["gpus"][0].get<int>()) + "," +
                                                    std::to_string(p["gpus"][1].get<int>()));
  }
  const std::string busy = pods[0]["node"];

  // Five GPUs in one pod: quota allows it, no node ever could.
  submit("huge", replace(replace(gang, "count: 2", "count: 1"), "GPUS", "5"));
  json huge = workload("ml/huge", key);
  EXPECT_EQ(huge["state"], "pending");
  EXPECT_EQ(huge["reason"], "NeverFits");
  EXPECT_NE(huge["message"].get<std::string>().find("2 are too small for one pod"),
            std::string::npos)
      << huge["message"];
  Run why = cli({"why", "ml/huge"}, key);
  EXPECT_NE(why.out.find("NeverFits"), std::string::npos) << why.out;

  // A HAMi share: a quarter of an 80 GiB GPU, with HAMi-core's limit for the executor.
  const std::string share = R"(apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: NAME}
spec:
  queueName: research
  podSets:
    - name: main
      count: 1
      template:
        spec:
          containers:
            - name: notebook
              resources:
                limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "20480"}
)";
  submit("notebook", share);
  json nb = workload("ml/notebook", key);
  ASSERT_EQ(nb["state"], "admitted") << nb.dump();
  const json& nbp = nb["admission"]["pod_sets"][0]["placements"][0];
  EXPECT_NE(nbp["node"], busy);
  EXPECT_EQ(nbp["gpu_milli"], 250);
  EXPECT_EQ(nbp["env"]["CUDA_DEVICE_MEMORY_LIMIT"], "20480m");

  // Four whole GPUs: quota is there (4 + 1 + 4 of 16), but the share holds one of the free node's
  // GPUs, so it waits for room, saying so.
  submit("four", replace(replace(gang, "count: 2", "count: 1"), "GPUS", "4"));
  json four = workload("ml/four", key);
  EXPECT_EQ(four["state"], "pending");
  EXPECT_EQ(four["reason"], "WaitingForPlacement");
  EXPECT_NE(four["message"].get<std::string>().find("does not fit in what is free now"),
            std::string::npos)
      << four["message"];

  // The node map shows the share on its GPU.
  json nodes = cliJson({"fleet", "nodes"});
  ASSERT_EQ(nodes["data"].size(), 2u);
  EXPECT_EQ(nodes["policy"], "default");
  int64_t shared = 0;
  for (const auto& n : nodes["data"]) {
    for (const auto& gpu : n["gpus"]) {
      for (const auto& sh : gpu["shares"]) {
        if (sh["workload"] == "ml/notebook") shared += sh["gpu_milli"].get<int64_t>();
      }
    }
  }
  EXPECT_EQ(shared, 250);

  // The share leaves: the 4-GPU workload is admitted on that node.
  ASSERT_EQ(cli({"workloads", "delete", "ml/notebook"}, key).code, 0);
  four = workload("ml/four", key);
  ASSERT_EQ(four["state"], "admitted") << four.dump();
  EXPECT_EQ(four["admission"]["pod_sets"][0]["placements"][0]["node"], nbp["node"]);

  // After a restart the placements hold: another 2-GPU pod finds no room.
  stop();
  start();
  four = workload("ml/four", key);
  EXPECT_EQ(four["admission"]["pod_sets"][0]["placements"][0]["gpus"].size(), 4u);
  submit("late", replace(replace(gang, "count: 2", "count: 1"), "GPUS", "2"));
  EXPECT_EQ(workload("ml/late", key)["reason"], "WaitingForPlacement");
  Run table = cli({"fleet", "nodes"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("H100-SXM-80GB"), std::string::npos) << table.out;
}

TEST_F(FleetServeTest, ABadInventoryStopsTheServerNamingTheField) {
  stop();
  testing::writeFile(
      dir.file("purser.yaml"),
      "listen: 127.0.0.1:0\nfleet:\n  nodes:\n"
      "    - {name: n1, cpu: \"-4\", gpus: {count: 2, model: A100, memory: 40Gi}}\n");
  Process bad(
      {PURSER_BINARY, "serve", "--config", dir.file("purser.yaml"), "--data", dir.file("var3")}, "",
      {std::string("PURSER_ADMIN_KEY=") + kAdminKey});
  EXPECT_NE(bad.wait(), 0);
  EXPECT_NE(bad.err().find("fleet.nodes[0].cpu"), std::string::npos) << bad.err();
}

}  // namespace
}  // namespace purser
