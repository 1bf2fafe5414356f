// Workloads on a real Slurm cluster: the test starts its own one-node cluster (munged,
// slurmctld, slurmd from Debian's slurm-wlm, with Gres=gpu:h100:8 backed by device nodes in a
// temporary directory), and a `purser serve` whose flavor h100 runs on it, its inventory read
// from `scontrol show node`. Shown: a workload's pods become batch jobs squeue lists, on the node
// Purser placed them on, see the GPUs Slurm bound (SLURM_JOB_GPUS,
// CUDA_VISIBLE_DEVICES), end succeeded or failed with their exit codes; a preempted one's job is
// signalled and cancelled and the workload requeued; and a Purser killed with SIGKILL adopts the
// jobs still running instead of submitting them again.
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
    testing::writeFile(dir.file("fleet.yaml"), testing::fleetManifests(8));
    // 3600.00 per GPU-hour: one GPU-second costs 1.00.
    testing::writeFile(dir.file("purser.yaml"),
                       "listen: 127.0.0.1:0\nthreads: 1\n"
                       "gpu_prices:\n  - {flavor: h100, per_gpu_hour: \"3600.00\"}\n"
                       "fleet:\n  manifests: [fleet.yaml]\n  metering_interval: 1s\n"
                       "  termination_grace: 30s\n  inventory_refresh: 1s\n"
                       "  slurm: {flavors: [h100], gres_type: h100, conf: " +
                           conf + ", log_dir: " + dir.file("jobs") +
                           ", inventory: true, gpu_memory: 80Gi}\n");
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
    for (int i = 0; i < 600; ++i) {
      if (slurmTool(conf, {which("sinfo"), "-h", "-o", "%t"}).find("idle") != std::string::npos) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "the Slurm cluster did not come up: " << testing::readFile(dir.file("slurm/ctld.log"))
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
  bool gone = false;
  for (int i = 0; i < 600 && !gone; ++i) {
    gone = queue().find("ml.scavenger") == std::string::npos;  // squeue lists live jobs only
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone) << queue();
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

}  // namespace
}  // namespace purser
