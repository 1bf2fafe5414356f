// Workloads on a real Slurm cluster: the test starts its own one-node cluster (munged,
// slurmctld, slurmd from Debian's slurm-wlm, with Gres=gpu:h100:8 backed by device nodes in a
// temporary directory), and a `purser serve` whose flavor h100 runs on it, its inventory read
// from `scontrol show node`. Shown: a workload's pods become batch jobs squeue lists, on the node
// Purser placed them on, see the GPUs Slurm bound (SLURM_JOB_GPUS,
// CUDA_VISIBLE_DEVICES), end succeeded or failed with their exit codes; a preempted one's job is
// signalled and cancelled and the workload requeued; and a Purser killed with SIGKILL adopts the
// jobs still running instead of submitting them again. And the walls: each team's jobs run as
// its own Unix account (ml as nobody, research as daemon), in a directory of its own; a hostile
// member's job reads nothing of the other tenant's or of Purser's, and a log swapped for a link
// gives nothing through the API.
//
// Needs root (slurmd) and the Slurm packages (scripts/setup installs them); skipped, saying why,
// without either.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <thread>

#include "common/money.h"
#include "fakes/eventually.h"
#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/temp_dir.h"
#include "integration/fleet_harness.h"

namespace purser {
namespace {

using nlohmann::json;
using testing::Process;

constexpr const char* kAdminKey = "fleet-slurm-test-admin-key-0123456789";

std::string which(const std::string& program) {
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/bin"}) {
    const std::string path = std::string(dir) + "/" + program;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return {};
}

// Runs a Slurm client tool against the test's cluster and returns what it printed.
std::string slurmTool(const std::string& conf, std::vector<std::string> argv) {
  Process p(argv, "", {"SLURM_CONF=" + conf});
  p.wait();
  return p.out();
}

class FleetSlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "slurmd needs root; this test runs as another user";
    for (const char* tool : {"munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue"}) {
      if (which(tool).empty()) {
        GTEST_SKIP() << tool << " is not installed (scripts/setup installs slurm-wlm and munge)";
      }
    }
    startCluster();
    if (HasFatalFailure() || IsSkipped()) return;
    testing::writeFile(dir.file("fleet.yaml"),
                       testing::fleetManifests(8) +
                           "---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\n"
                           "metadata: {namespace: research, name: research}\n"
                           "spec: {clusterQueue: research}\n");
    // 3600.00 per GPU-hour: one GPU-second costs 1.00.
    testing::writeFile(
        dir.file("purser.yaml"),
        "listen: 127.0.0.1:0\nthreads: 1\n"
        "gpu_prices:\n  - {flavor: h100, per_gpu_hour: \"3600.00\"}\n"
        "fleet:\n  manifests: [fleet.yaml]\n  metering_interval: 1s\n"
        "  termination_grace: 30s\n  inventory_refresh: 1s\n"
        "  slurm: {flavors: [h100], gres_type: h100, conf: " +
            conf + ", log_dir: " + dir.file("jobs") +
            ", inventory: true, gpu_memory: 80Gi, accounts: {ml: nobody, research: daemon}}\n");
    // The jobs run as nobody: the gates they wait for must be where nobody can see them.
    ::chmod(dir.path().c_str(), 0755);
    std::filesystem::create_directories(dir.file("jobs"));
    std::filesystem::create_directories(dir.file("gates"));
    std::string why;
    ASSERT_TRUE(server.start(&why)) << why;
    key = server.member();
  }
  void TearDown() override {
    for (const char* g : {"a", "b", "c", "d", "e"}) {
      testing::writeFile(dir.file(std::string("gates/") + g), "");
    }
    server.stop();
    if (!conf.empty()) {
      slurmTool(conf, {which("scancel"), "--user=root"});
      slurmTool(conf, {which("scontrol"), "shutdown"});
    }
    for (auto* p : {&slurmd, &slurmctld}) {
      if (*p) {
        (*p)->signal(SIGTERM);
        (*p)->wait();
      }
    }
    if (munge_pid > 0) ::kill(munge_pid, SIGTERM);
  }

  void startCluster() {
    const std::string root = dir.file("slurm");
    for (const char* d : {"", "/state", "/spool", "/dev"}) {
      std::filesystem::create_directories(root + d);
    }
    // Eight "GPUs": character devices Slurm accepts as device files (nothing opens them).
    for (int i = 0; i < 8; ++i) {
      const std::string dev = root + "/dev/gpu" + std::to_string(i);
      if (::mknod(dev.c_str(), S_IFCHR | 0600, makedev(195, i)) != 0) {
        GTEST_SKIP() << "cannot make device nodes for Slurm's GPUs here: " << strerror(errno);
      }
    }
    std::string munge_key(1024, '\0');
    for (size_t i = 0; i < munge_key.size(); ++i) munge_key[i] = static_cast<char>(i * 7 + 3);
    testing::writeFile(root + "/munge.key", munge_key);
    ::chmod((root + "/munge.key").c_str(), 0400);
    Process munged({which("munged"), "--force", "--socket=" + root + "/munge.sock",
                    "--key-file=" + root + "/munge.key", "--pid-file=" + root + "/munged.pid",
                    "--log-file=" + root + "/munged.log", "--seed-file=" + root + "/munged.seed"});
    ASSERT_EQ(munged.wait(), 0) << munged.err();  // it forks into the background
    munge_pid = std::stoi(testing::readFile(root + "/munged.pid"));
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    conf = root + "/slurm.conf";
    testing::writeFile(
        conf,
        fmt::format("ClusterName=purser\nSlurmctldHost={0}(127.0.0.1)\nSlurmctldPort={1}\n"
                    "SlurmdPort={2}\nAuthType=auth/munge\nAuthInfo=socket={3}/munge.sock\n"
                    "CredType=cred/munge\nStateSaveLocation={3}/state\nSlurmdSpoolDir={3}/spool\n"
                    "SlurmctldPidFile={3}/ctld.pid\nSlurmdPidFile={3}/d.pid\n"
                    "SlurmctldLogFile={3}/ctld.log\nSlurmdLogFile={3}/d.log\nSlurmUser=root\n"
                    "SlurmdUser=root\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
                    "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
                    "SchedulerType=sched/backfill\nReturnToService=2\nGresTypes=gpu\n"
                    "JobAcctGatherType=jobacct_gather/none\n"
                    "AccountingStorageType=accounting_storage/none\nMpiDefault=none\n"
                    "SlurmdParameters=config_overrides\nMinJobAge=600\nKillWait=5\n"
                    "NodeName={0} NodeAddr=127.0.0.1 CPUs=8 RealMemory=4000 Gres=gpu:h100:8 "
                    "State=UNKNOWN\nPartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE "
                    "State=UP\n",
                    host, testing::freePort(), testing::freePort(), root));
    testing::writeFile(
        root + "/gres.conf",
        fmt::format("NodeName={} Name=gpu Type=h100 File={}/dev/gpu[0-7]\n", host, root));
    slurmctld = std::make_unique<Process>(
        std::vector<std::string>{which("slurmctld"), "-D", "-i", "-f", conf}, "",
        std::vector<std::string>{"SLURM_CONF=" + conf});
    slurmd = std::make_unique<Process>(std::vector<std::string>{which("slurmd"), "-D", "-f", conf},
                                       "", std::vector<std::string>{"SLURM_CONF=" + conf});
    // Up once the node is idle (bounded by a count).
    ASSERT_TRUE(testing::eventually(
        [&] {
          return slurmTool(conf, {which("sinfo"), "-h", "-o", "%t"}).find("idle") !=
                 std::string::npos;
        },
        {.attempts = 600, .pause = std::chrono::milliseconds(50), .what = "the Slurm node idle"}))
        << "the Slurm cluster did not come up: " << testing::readFile(dir.file("slurm/ctld.log"))
        << testing::readFile(dir.file("slurm/d.log"));
  }

  json call(const std::string& method, const std::string& target, const std::string& as,
            const std::string& body = "") {
    return server.call(method, target, as, body);
  }
  json submit(const std::string& name, int gpus, const std::string& gate, int code = 0,
              const std::string& priority_class = "", int64_t max_seconds = 0) {
    const std::string script =
        "trap 'echo stopping; exit 143' TERM; "
        "echo \"gpus=$SLURM_JOB_GPUS cuda=$CUDA_VISIBLE_DEVICES of $PURSER_WORKLOAD\"; "
        "while [ ! -e '" +
        dir.file("gates/" + gate) + "' ]; do sleep 0.05; done; exit " + std::to_string(code);
    json w = {{"name", name},
              {"queue", "research"},
              {"pod_sets",
               {{{"name", "main"},
                 {"requests", {{"cpu", "1"}, {"nvidia.com/gpu", std::to_string(gpus)}}},
                 {"command", {"/bin/sh", "-c", script}}}}}};
    if (!priority_class.empty()) w["priority_class"] = priority_class;
    if (max_seconds > 0) w["max_execution_seconds"] = max_seconds;
    return call("POST", "/api/v1/workloads", key, w.dump());
  }
  void open(const std::string& gate) { testing::writeFile(dir.file("gates/" + gate), ""); }
  json get(const std::string& name) { return server.workload(key, name); }
  json waitFor(const std::string& name, const std::string& state) {
    return server.waitFor(key, name, state);
  }
  bool logHolds(const std::string& name, const std::string& text) {
    return server.logHolds(key, name, "", text);
  }
  // Slurm's jobs by name, as squeue lists them.
  std::string queue() { return slurmTool(conf, {which("squeue"), "-h", "-o", "%j %T"}); }
  static Money money(const json& v) { return *Money::parse(v.get<std::string>()); }

  testing::TempDir dir;
  std::string conf;
  int munge_pid = 0;
  std::unique_ptr<Process> slurmctld, slurmd;
  testing::FleetServer server{dir, kAdminKey};
  std::string key;
};

TEST_F(FleetSlurmTest, WorkloadsRunAsBatchJobsWithTheGpusSlurmBinds) {
  // The inventory is Slurm's node, as scontrol shows it.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  json nodes = call("GET", "/api/v1/fleet/nodes", key);
  ASSERT_EQ(nodes["data"].size(), 1u) << nodes.dump();
  const json node = nodes["data"][0];
  EXPECT_EQ(node["name"], host);
  EXPECT_EQ(node["gpu_count"], 8);
  EXPECT_EQ(node["gpu_model"], "h100");
  EXPECT_EQ(node["gpus"][0]["memory_mib"], 80 * 1024);
  EXPECT_EQ(node["cpu"], "8");
  EXPECT_EQ(node["memory_mib"], 4000);
  EXPECT_EQ(node["labels"]["slurm.schedmd.com/partition"], "gpu");
  submit("train", 2, "a", 0, "", 5400);
  json running = waitFor("train", "running");
  ASSERT_EQ(running["pods"].size(), 1u);
  // squeue sees the pod's job, asked for on the node Purser placed it on, and the job sees the
  // GPUs Slurm gave it.
  EXPECT_NE(queue().find("ml.train.main.0"), std::string::npos) << queue();
  const std::string requested = slurmTool(conf, {which("squeue"), "-h", "-o", "%j %n %l"});
  // Its node, and its time limit from the workload's maximum execution time.
  EXPECT_NE(requested.find(" " + std::string(host) + " 1:30:00\n"), std::string::npos) << requested;
  EXPECT_TRUE(logHolds("train", "gpus=0,1 cuda=0,1 of ml/train"))
      << call("GET", "/api/v1/workloads/ml/train/logs", key).dump();
  // Its GPU time is charged while it runs (metering_interval: 1s). Seen before the job is let end:
  // Slurm's times are whole seconds, so a job let end at once may start and end in one second,
  // and then its run is charged nothing (this failed half the runs on an idle machine).
  EXPECT_TRUE(testing::eventually(
      [&] {
        const json w = call("GET", "/api/v1/workloads/ml/train", key);
        return w.is_object() && w["gpu_charged"].is_string() && money(w["gpu_charged"]) > Money();
      },
      {.attempts = 500, .pause = std::chrono::milliseconds(20), .what = "a charge while it runs"}));
  open("a");
  json done = waitFor("train", "succeeded");
  EXPECT_EQ(done["exit_code"], 0);
  EXPECT_GT(money(done["gpu_charged"]), Money());

  // A failing command: the job fails, and so does the workload, with the job's exit code.
  open("b");
  submit("broken", 1, "b", 4);
  json failed = waitFor("broken", "failed");
  EXPECT_EQ(failed["exit_code"], 4) << failed.dump();
  EXPECT_EQ(failed["reason"], "PodFailed");
}

TEST_F(FleetSlurmTest, APreemptedWorkloadsJobIsSignalledCancelledAndRequeued) {
  submit("steady", 4, "a");
  submit("scavenger", 4, "c", 0, "low");
  waitFor("steady", "running");
  waitFor("scavenger", "running");
  ASSERT_TRUE(logHolds("scavenger", "of ml/scavenger"));
  submit("urgent", 4, "d", 0, "urgent");
  json evicted = waitFor("scavenger", "evicted");
  EXPECT_EQ(evicted["preemptions"], 1);
  // The batch script got SIGTERM (its trap ran) and its job left the queue.
  EXPECT_TRUE(logHolds("scavenger", "stopping"));
  // (squeue lists live jobs only.)
  EXPECT_TRUE(testing::eventually([&] { return queue().find("ml.scavenger") == std::string::npos; },
                                  {.attempts = 600,
                                   .pause = std::chrono::milliseconds(50),
                                   .what = "the scavenger's job leaving the queue"}))
      << queue();
  waitFor("urgent", "running");
  // Room returns: it runs again, as a new job.
  open("a");
  json again = waitFor("scavenger", "running");
  EXPECT_EQ(again["runs"], 2);
  open("c");
  open("d");
  waitFor("scavenger", "succeeded");
  waitFor("urgent", "succeeded");
}

TEST_F(FleetSlurmTest, AKilledPurserAdoptsItsJobsInsteadOfSubmittingThemAgain) {
  submit("long", 1, "e");
  json before = waitFor("long", "running");
  ASSERT_TRUE(logHolds("long", "of ml/long"));
  EXPECT_EQ(server.kill(), 128 + SIGKILL);
  std::string why;
  ASSERT_TRUE(server.start(&why)) << why;
  json adopted = get("long");
  EXPECT_EQ(adopted["state"], "running") << adopted.dump();
  EXPECT_EQ(adopted["runs"], 1);
  // One job in Slurm for it, not two.
  const std::string q = queue();
  EXPECT_EQ(q.find("ml.long.main.0"), q.rfind("ml.long.main.0")) << q;
  // Slurm's controller goes away: the workload is unknown (its quota still held), and running
  // again once the controller is back (with its saved state; the job ran on meanwhile).
  slurmctld->signal(SIGTERM);
  slurmctld->wait();
  json lost = waitFor("long", "unknown");
  EXPECT_EQ(lost["reason"], "ExecutorUnreachable") << lost.dump();
  slurmctld =
      std::make_unique<Process>(std::vector<std::string>{which("slurmctld"), "-D", "-f", conf}, "",
                                std::vector<std::string>{"SLURM_CONF=" + conf});
  waitFor("long", "running");
  open("e");
  json done = waitFor("long", "succeeded");
  EXPECT_GT(money(done["gpu_charged"]), Money());
}

TEST_F(FleetSlurmTest, AMembersJobRunsAsItsTeamsAccountAndReachesNothingOfAnotherTeamsOrPursers) {
  // Bob, of another tenant, and his team's job: a secret in its environment (so in its batch
  // script), a log line; it waits for its gate.
  call("POST", "/api/v1/tenants", kAdminKey, R"({"name":"globex"})");
  call("POST", "/api/v1/teams", kAdminKey, R"({"name":"research","tenant":"globex"})");
  json user = call("POST", "/api/v1/users", kAdminKey,
                   R"({"name":"bob","tenant":"globex","team":"research"})");
  const std::string bob =
      call("POST", "/api/v1/keys", kAdminKey,
           json{{"name", "laptop"}, {"owner", {{"kind", "user"}, {"id", user["id"]}}}}.dump())
          .value("key", "");
  ASSERT_FALSE(bob.empty());
  const auto job = [](const std::string& ns, const std::string& name, const std::string& script,
                      const json& env) {
    return json{{"name", name},
                {"namespace", ns},
                {"queue", "research"},
                {"pod_sets",
                 {{{"name", "main"},
                   {"requests", {{"cpu", "1"}}},
                   {"env", env},
                   {"command", {"/bin/sh", "-c", script}}}}}}
        .dump();
  };
  const auto state = [&](const std::string& as, const std::string& ns, const std::string& name,
                         const std::string& want) {
    json w;
    const std::string what = ns + "/" + name + " " + want;
    EXPECT_TRUE(testing::eventually(
        [&] {
          w = call("GET", "/api/v1/workloads/" + ns + "/" + name, as);
          return w.value("state", "") == want;
        },
        {.attempts = 3000, .pause = std::chrono::milliseconds(20), .what = what.c_str()}))
        << w.dump();
    return w;
  };
  const auto logs = [&](const std::string& as, const std::string& ns, const std::string& name) {
    json l = call("GET", "/api/v1/workloads/" + ns + "/" + name + "/logs", as);
    return l.is_string() ? l.get<std::string>() : l.dump();
  };
  int status = 0;
  json victim =
      server.call("POST", "/api/v1/workloads", bob,
                  job("research", "victim",
                      "echo \"bob-log-line uid=$(id -u)\"; while [ ! -e '" + dir.file("gates/a") +
                          "' ]; do sleep 0.05; done; echo bob-finished",
                      {{"BOB_TOKEN", "bob-secret-token"}}),
                  "application/json", &status);
  ASSERT_EQ(status, 201) << victim.dump();
  state(bob, "research", "victim", "running");
  EXPECT_TRUE(testing::eventually(
      [&] { return logs(bob, "research", "victim").find("bob-log-line") != std::string::npos; },
      {.attempts = 600,
       .pause = std::chrono::milliseconds(20),
       .what = "bob's line in research/victim's log"}));
  EXPECT_NE(logs(bob, "research", "victim").find("bob-log-line uid=1\n"), std::string::npos)
      << "research's jobs run as daemon";
  // Alice's job: who it runs as, and everything it can try on the shared log directory and
  // Purser's data directory.
  const std::string jobs = dir.file("jobs"), data = dir.file("var");
  const std::string attack =
      "echo \"uid=$(id -u)\"; echo \"pwd=$(pwd)\"; "
      "echo \"list=$(ls " +
      jobs +
      " 2>&1 | head -c 200)\"; "
      "echo \"theirs=$(ls " +
      jobs +
      "/research 2>&1 | head -c 200)\"; "
      "echo \"script=$(cat " +
      jobs +
      "/research/*.sh 2>&1 | head -c 200)\"; "
      "echo \"log=$(cat " +
      jobs +
      "/research/*.log 2>&1 | head -c 200)\"; "
      "echo \"auditkey=$(cat " +
      data +
      "/audit.key 2>&1 | head -c 200)\"; "
      "echo \"db=$(head -c 15 " +
      data +
      "/purser.db 2>&1 | head -c 200)\"; "
      "echo \"plant=$( (echo x > " +
      jobs +
      "/research/planted) 2>&1 | head -c 200)\"; "
      "echo attack-over";
  call("POST", "/api/v1/workloads", key, job("ml", "attack", attack, json::object()));
  json attacked = state(key, "ml", "attack", "succeeded");
  const std::string seen = logs(key, "ml", "attack");
  ASSERT_NE(seen.find("attack-over"), std::string::npos) << attacked.dump() << seen;
  EXPECT_NE(seen.find("uid=65534\n"), std::string::npos) << seen;
  EXPECT_NE(seen.find("pwd=" + jobs + "/ml\n"), std::string::npos) << seen;
  EXPECT_NE(seen.find("list=ls: cannot open directory '" + jobs + "': Permission denied"),
            std::string::npos)
      << seen;
  EXPECT_NE(seen.find("theirs=ls: cannot open directory '" + jobs +
                      "/research': Permission "
                      "denied"),
            std::string::npos)
      << seen;
  EXPECT_NE(seen.find("script=cat: '" + jobs + "/research/*.sh': Permission denied"),
            std::string::npos)
      << seen;
  EXPECT_NE(seen.find("log=cat: '" + jobs + "/research/*.log': Permission denied"),
            std::string::npos)
      << seen;
  EXPECT_NE(seen.find("auditkey=cat: " + data + "/audit.key: Permission denied"), std::string::npos)
      << seen;
  EXPECT_NE(seen.find("db=head: cannot open '" + data +
                      "/purser.db' for reading: Permission "
                      "denied"),
            std::string::npos)
      << seen;
  EXPECT_NE(seen.find("plant=/bin/sh: 1: cannot create " + jobs +
                      "/research/planted: Permission "
                      "denied"),
            std::string::npos)
      << seen;
  EXPECT_EQ(seen.find("bob-secret-token"), std::string::npos);
  EXPECT_EQ(seen.find("bob-log-line"), std::string::npos);
  // A job that swaps its own log for a link to Purser's audit key (and to Bob's log): Purser reads
  // logs without following links, so the API gives nothing of either.
  const std::string swap =
      "echo before-swap; rm -f \"$SLURM_JOB_NAME.log\"; "
      "ln -s " +
      data + "/audit.key \"$SLURM_JOB_NAME.log\"; echo \"swapped=$?\" >&2";
  call("POST", "/api/v1/workloads", key, job("ml", "swap", swap, json::object()));
  state(key, "ml", "swap", "succeeded");
  const std::string swapped = logs(key, "ml", "swap");
  const std::string audit_key = testing::readFile(data + "/audit.key");
  ASSERT_FALSE(audit_key.empty());
  EXPECT_EQ(swapped.find(audit_key.substr(0, 16)), std::string::npos) << swapped;
  EXPECT_EQ(swapped.find("before-swap"), std::string::npos) << "its log is now a link: not read";
  // Bob's job went on, its log its own; Purser too.
  EXPECT_EQ(call("GET", "/api/v1/workloads/research/victim", bob).value("state", ""), "running");
  open("a");
  state(bob, "research", "victim", "succeeded");
  EXPECT_NE(logs(bob, "research", "victim").find("bob-finished"), std::string::npos);
  // What a team's directory is: its account's alone.
  struct stat st {};
  ASSERT_EQ(::stat((jobs + "/research").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1u);
  EXPECT_EQ(st.st_mode & 077, 0u);
}

}  // namespace
}  // namespace purser
