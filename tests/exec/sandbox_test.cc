// The local pod's wall, attacked from inside by real pods: who a pod runs as, what it can see and
// write (its workspace, the system read-only, nothing of Purser's or of another team's), where it
// may work, and the limits its cgroups hold it to. These need root (the executor's isolation
// under root: a team's account and namespaces of its own); elsewhere they are skipped, saying so.
// Waits are for the pods' own ends, bounded by their work.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "exec/cgroups.h"
#include "exec/command.h"
#include "exec/local_executor.h"
#include "exec/sandbox.h"
#include "fakes/temp_dir.h"

namespace purser::exec {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kUid = 200123;
constexpr int64_t kOtherUid = 200124;

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the accounts isolation needs Purser to run as root";
    for (const char* d : {"logs", "work", "data", "shared", "shared/secret"}) {
      std::filesystem::create_directories(dir.file(d));
    }
    ::chmod(dir.file("logs").c_str(), 0700);
    testing::writeFile(dir.file("data/purser.db"), "the ledger");
    testing::writeFile(dir.file("shared/readme"), "for every pod");
    testing::writeFile(dir.file("shared/secret/master.key"), "not for pods");
    // The shared directory and its parents must be passable by a team's account.
    ::chmod(dir.path().c_str(), 0755);
    ::chmod(dir.file("shared").c_str(), 0755);
    ::chmod(dir.file("shared/readme").c_str(), 0644);
    options.log_dir = dir.file("logs");
    options.max_log_bytes = 64 * 1024;
    options.isolation = Isolation::kAccounts;
    options.workspace_root = dir.file("work");
    options.sandbox.read_only_paths = {dir.file("shared")};
    options.sandbox.hidden_paths = {dir.file("logs"), dir.file("data"), dir.file("work"),
                                    dir.file("shared/secret")};
    options.sandbox.self_binary = PURSER_BINARY;
    std::filesystem::create_directories(dir.file("logs/.view"));
    if (auto ok = probeSandbox(Isolation::kAccounts, options.sandbox, dir.file("logs/.view"));
        !ok) {
      GTEST_SKIP() << "this kernel refuses the pods' namespaces: " << ok.error().message;
    }
  }
  void open(PodCgroups cgroups = PodCgroups()) {
    options.cgroups = std::move(cgroups);
    executor = std::make_unique<LocalExecutor>(clock, options);
  }
  PodLaunch shell(const std::string& script, const std::string& team = "ml",
                  int64_t uid = kUid) {
    PodLaunch p;
    p.workload = team + "/probe";
    p.pod_set = "main";
    p.argv = {"/bin/sh", "-c", script};
    p.team = team;
    p.uid = uid;
    return p;
  }
  // Runs `p` to its end; what it printed.
  std::string run(const PodLaunch& p, PodStatus* status = nullptr) {
    auto h = executor->start(p);
    EXPECT_TRUE(h.has_value()) << h.error().toString();
    if (!h) return "";
    auto done = executor->wait(*h);
    EXPECT_TRUE(done.has_value());
    if (status != nullptr && done) *status = *done;
    return executor->logTail(*h, 1 << 16).value_or("");
  }

  testing::TempDir dir;
  ManualClock clock;
  LocalExecutorOptions options;
  std::unique_ptr<LocalExecutor> executor;
};

TEST_F(SandboxTest, APodRunsAsItsTeamsAccountWithNoPrivilegeLeft) {
  open();
  PodStatus st;
  const std::string out = run(shell("id -u; id -G; grep -E '^(NoNewPrivs|CapEff|CapBnd):' "
                                    "/proc/self/status; hostname"),
                              &st);
  EXPECT_EQ(st.phase, PodPhase::kSucceeded) << out;
  EXPECT_EQ(out,
            "200123\n200123\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n"
            "NoNewPrivs:\t1\nprobe-main-0\n");
}

TEST_F(SandboxTest, APodSeesItsWorkspaceAndTheSystemButNothingOfPurserOrOfOtherTeams) {
  open();
  // Another team's workspace, with something in it.
  const std::string theirs = *executor->workspaceOf("research", kOtherUid);
  testing::writeFile(theirs + "/notes", "theirs");
  const std::string d = dir.path();
  const std::string script =
      "echo pwd=$(pwd); "
      "echo logs=$(ls " + d + "/logs 2>&1 | head -c 100 | tr '\\n' ' '); "
      "echo data=$(cat " + d + "/data/purser.db 2>&1 | head -c 100); "
      "echo shared=$(cat " + d + "/shared/readme); "
      "echo secret=$(ls -A " + d + "/shared/secret | wc -l); "
      "echo work=$(ls -A " + d + "/work | tr '\\n' ' '); "
      "echo theirs=$(cat " + theirs + "/notes 2>&1 | head -c 100); "
      "echo pid1=$(tr '\\0' ' ' < /proc/1/cmdline); "
      "echo env1=$(cat /proc/1/environ 2>/dev/null | wc -c); "
      "echo procs=$(ls /proc | grep -c '^[0-9]'); "
      "echo tester=$(test -e /proc/" + std::to_string(::getpid()) + "/environ && echo seen || echo unseen); "
      "echo cgroups=$(ls -A /sys/fs/cgroup | wc -l); "
      "echo usr=$(touch /usr/x 2>&1 | grep -c 'Read-only'); "
      "echo tmp=$(echo t > /tmp/t && cat /tmp/t); "
      "echo mine=$(echo m > mine && stat -c %u mine); "
      "echo purser=$(test -x " PURSER_BINARY " && echo runnable)";
  const std::string out = run(shell(script));
  const std::string home = dir.file("work/ml");
  EXPECT_THAT(out, HasSubstr("pwd=" + home + "\n"));
  EXPECT_THAT(out, HasSubstr("logs=ls: cannot access"));
  EXPECT_THAT(out, HasSubstr("data=cat: " + d + "/data/purser.db: No such file"));
  EXPECT_THAT(out, HasSubstr("shared=for every pod\n"));
  EXPECT_THAT(out, HasSubstr("secret=0\n"));
  EXPECT_THAT(out, HasSubstr("work=ml\n"));
  EXPECT_THAT(out, HasSubstr("theirs=cat: " + theirs + "/notes: No such file"));
  EXPECT_THAT(out, HasSubstr("pid1=purser-pod-init\n"));
  EXPECT_THAT(out, HasSubstr("env1=0\n"));
  EXPECT_THAT(out, HasSubstr("tester=unseen\n"));
  EXPECT_THAT(out, HasSubstr("cgroups=0\n"));
  EXPECT_THAT(out, HasSubstr("usr=1\n"));
  EXPECT_THAT(out, HasSubstr("tmp=t\n"));
  EXPECT_THAT(out, HasSubstr("mine=200123\n"));
  EXPECT_THAT(out, HasSubstr("purser=runnable\n"));
  // Its own processes only: its init, its shell and what the shell runs.
  const size_t at = out.find("procs=");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_LE(std::stoi(out.substr(at + 6)), 5) << out;
  // What it wrote is in its team's workspace, its account's; the workspace is the team's alone.
  struct stat st {};
  ASSERT_EQ(::stat((home + "/mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, static_cast<uid_t>(kUid));
  ASSERT_EQ(::stat(home.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, static_cast<uid_t>(kUid));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(SandboxTest, AWorkingDirectoryMustLieInsideTheTeamsWorkspaceReachedWithoutALink) {
  open();
  const std::string home = dir.file("work/ml");
  for (const std::string& bad : {std::string("/etc"), std::string("relative/dir"),
                                 home + "/../research", dir.file("data"), dir.file("work")}) {
    PodLaunch p = shell("echo ran");
    p.working_dir = bad;
    auto h = executor->start(p);
    ASSERT_FALSE(h.has_value()) << bad;
    EXPECT_EQ(h.error().field, "workingDir") << h.error().toString();
  }
  // A pod leaves a link to Purser's data in its workspace; a later pod cannot work through it.
  PodStatus st;
  run(shell("ln -s " + dir.file("data") + " " + home + "/link"), &st);
  ASSERT_EQ(st.phase, PodPhase::kSucceeded);
  PodLaunch through = shell("ls");
  through.working_dir = home + "/link";
  auto refused = executor->start(through);
  ASSERT_FALSE(refused.has_value());
  EXPECT_THAT(refused.error().message, HasSubstr("not a directory"));
  // A directory inside that is not there yet is made, the team's.
  PodLaunch deeper = shell("pwd");
  deeper.working_dir = home + "/runs/7";
  EXPECT_EQ(run(deeper), home + "/runs/7\n");
  struct stat sb {};
  ASSERT_EQ(::stat((home + "/runs/7").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_uid, static_cast<uid_t>(kUid));
}

TEST_F(SandboxTest, APodsLogIsReadWithoutFollowingALink) {
  open();
  PodStatus st;
  auto h = executor->start(shell("echo hello"));
  ASSERT_TRUE(h);
  ASSERT_TRUE(executor->wait(*h));
  EXPECT_EQ(*executor->logTail(*h, 100), "hello\n");
  // Were its log swapped for a link (by anything), the link is not followed.
  const std::string log = dir.file("logs/" + *h + ".log");
  ::unlink(log.c_str());
  ASSERT_EQ(::symlink(dir.file("data/purser.db").c_str(), log.c_str()), 0);
  EXPECT_EQ(executor->logTail(*h, 100).value_or(""), "");
  EXPECT_EQ(fileTail(log, 100), "");
}

TEST_F(SandboxTest, APodOverItsMemoryLimitIsOOMKilledWhileItsNeighbourGoesOn) {
  PodCgroups cgroups = PodCgroups::detect();
  if (!cgroups.hasMemory()) GTEST_SKIP() << "no memory cgroup here: " << cgroups.describe();
  open(std::move(cgroups));
  PodLaunch hog = shell("echo allocating; head -c 1000000000 /dev/zero | tail -n 1 | wc -c");
  hog.memory_limit_bytes = 64 << 20;
  PodLaunch neighbour = shell(
      "echo waiting; while [ ! -e gate ]; do sleep 0.02; done; echo done", "research", kOtherUid);
  neighbour.memory_bytes = 64 << 20;
  auto n = executor->start(neighbour);
  ASSERT_TRUE(n) << n.error().toString();
  PodStatus st;
  const std::string out = run(hog, &st);
  EXPECT_EQ(st.phase, PodPhase::kFailed) << out;
  EXPECT_EQ(st.reason, "OOMKilled") << out;
  EXPECT_EQ(st.exit_code, 137);
  // The neighbour was untouched: it goes on and ends its own way.
  EXPECT_EQ(executor->status(*n)->phase, PodPhase::kRunning);
  testing::writeFile(*executor->workspaceOf("research", kOtherUid) + "/gate", "");
  auto done = executor->wait(*n);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->phase, PodPhase::kSucceeded);
  EXPECT_EQ(done->reason, "");
}

TEST_F(SandboxTest, ACpuCapThrottlesAPodThatSpins) {
  PodCgroups cgroups = PodCgroups::detect();
  if (!cgroups.hasCpu()) GTEST_SKIP() << "no cpu cgroup here: " << cgroups.describe();
  const std::string parent = cgroups.cpuParent();
  const bool v2 = cgroups.version() == PodCgroups::Version::kV2;
  open(std::move(cgroups));
  PodLaunch spin = shell("while :; do :; done");
  spin.cpu_limit_milli = 100;
  auto h = executor->start(spin);
  ASSERT_TRUE(h) << h.error().toString();
  const std::string group = parent + "/" + cgroupNameOf(*h);
  EXPECT_EQ(testing::readFile(group + (v2 ? "/cpu.max" : "/cpu.cfs_quota_us")),
            v2 ? "10000 100000\n" : "10000\n");
  // It tries to take a whole CPU; the kernel holds it back (throttled periods), however long
  // that takes on a busy machine.
  int64_t throttled = 0;
  for (int i = 0; i < 20'000 && throttled == 0; ++i) {
    std::istringstream stat(testing::readFile(group + "/cpu.stat"));
    std::string key;
    int64_t value = 0;
    while (stat >> key >> value) {
      if (key == "nr_throttled") throttled = value;
    }
    if (throttled == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(throttled, 0);
  ASSERT_TRUE(executor->stop(*h, Duration::zero()));
  ASSERT_TRUE(executor->wait(*h));
}

TEST_F(SandboxTest, APodCannotRunMoreProcessesThanItsCap) {
  PodCgroups cgroups = PodCgroups::detect();
  if (!cgroups.hasPids()) GTEST_SKIP() << "no pids cgroup here: " << cgroups.describe();
  options.pids_limit = 8;
  open(std::move(cgroups));
  // Forks until the kernel says no (or 50 did), then says how many it got.
  PodStatus st;
  const std::string out =
      run(shell("exec perl -e 'my $n = 0; for (1..50) { my $p = fork; last unless defined $p; "
                "if ($p == 0) { sleep 30; exit 0 } $n++ } print \"forked $n\\n\"'"),
          &st);
  EXPECT_THAT(out, HasSubstr("forked "));
  const int forked = std::stoi(out.substr(out.find("forked ") + 7));
  EXPECT_GT(forked, 0);
  EXPECT_LT(forked, 8) << out;  // with init and perl itself, at most 8 at once
}

TEST_F(SandboxTest, LocalPodsAreRefusedWhenTheirIsolationIsNotPossible) {
  options.refused = "this kernel allows neither (write fleet.local.isolation: none to run pods "
                    "unisolated)";
  open();
  auto h = executor->start(shell("echo ran"));
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_THAT(h.error().message, HasSubstr("fleet.local.isolation: none"));
}

TEST(SandboxPlanTest, TheViewShowsTheSystemReadOnlyAndHidesWhatPurserKeepsBeneathIt) {
  SandboxOptions o;
  o.system_paths = {"/usr", "/etc"};
  o.read_only_paths = {"/etc/ssl", "/opt/models"};
  o.hidden_paths = {"/etc/purser", "/opt/models"};
  o.shared_devices = {};
  const SandboxPlan plan = SandboxPlan::make(Isolation::kAccounts, o, "/base", "/srv/work", "/srv/work/ml",
                                             {}, 7, 7, "h", 1 << 20);
  const std::vector<std::string> view = plan.describe();
  auto has = [&](const std::string& line) {
    return std::find(view.begin(), view.end(), line) != view.end();
  };
  EXPECT_TRUE(has("bind-ro /usr"));
  EXPECT_TRUE(has("bind-ro /etc"));
  EXPECT_FALSE(has("bind-ro /etc/ssl")) << "shown already, beneath /etc";
  EXPECT_FALSE(has("bind-ro /opt/models")) << "a hidden path is never shown";
  EXPECT_EQ(has("hide /etc/purser"), std::filesystem::exists("/etc/purser"));
  EXPECT_TRUE(has("tmpfs /tmp"));
  EXPECT_TRUE(has("proc /proc"));
  EXPECT_TRUE(has("bind-rw /srv/work/ml"));
  EXPECT_EQ(plan.uid(), 7u);
}

TEST(PodCgroupsTest, V2GroupsGetTheirLimitsAndControllersArePassedDown) {
  testing::TempDir dir;
  const std::string root = dir.file("cg");
  std::filesystem::create_directories(root + "/svc");
  testing::writeFile(root + "/svc/cgroup.controllers", "cpuset cpu io memory pids\n");
  testing::writeFile(root + "/svc/cgroup.subtree_control", "");
  testing::writeFile(dir.file("self"), "0::/svc\n");
  testing::writeFile(dir.file("mountinfo"),
                     "30 1 0:26 / " + root + " rw,nosuid - cgroup2 cgroup2 rw\n");
  // What the kernel would show in a new group, as files.
  std::filesystem::create_directories(root + "/svc/purser-pods");
  testing::writeFile(root + "/svc/purser-pods/cgroup.subtree_control", "");
  const PodCgroups c = PodCgroups::detect(dir.file("self"), dir.file("mountinfo"));
  ASSERT_EQ(c.version(), PodCgroups::Version::kV2) << c.describe();
  EXPECT_EQ(c.describe(), "cgroup v2 (memory, cpu, pids)");
  EXPECT_EQ(testing::readFile(root + "/svc/cgroup.subtree_control"), "+memory +cpu +pids");
  const std::string pod = root + "/svc/purser-pods/ml.train.main.0";
  std::filesystem::create_directories(pod);
  for (const char* f : {"memory.max", "memory.swap.max", "memory.oom.group", "cpu.max",
                        "pids.max", "cgroup.procs"}) {
    testing::writeFile(pod + "/" + f, "");
  }
  auto g = c.create("ml.train.main.0", PodLimits{64 << 20, 1500, 100});
  ASSERT_TRUE(g) << g.error().toString();
  EXPECT_EQ(testing::readFile(pod + "/memory.max"), "67108864");
  EXPECT_EQ(testing::readFile(pod + "/memory.swap.max"), "0");
  EXPECT_EQ(testing::readFile(pod + "/memory.oom.group"), "1");
  EXPECT_EQ(testing::readFile(pod + "/cpu.max"), "150000 100000");
  EXPECT_EQ(testing::readFile(pod + "/pids.max"), "100");
  EXPECT_EQ(g->procs, std::vector<std::string>{pod + "/cgroup.procs"});
  testing::writeFile(pod + "/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n");
  EXPECT_EQ(PodCgroups::oomKills(*g), 1);
}

TEST(PodCgroupsTest, V1UsesEachHierarchyPurserMayWriteAndNoneOtherwise) {
  testing::TempDir dir;
  const std::string mem = dir.file("memory"), cpu = dir.file("cpu");
  std::filesystem::create_directories(mem + "/box");
  std::filesystem::create_directories(cpu);
  testing::writeFile(dir.file("self"), "4:memory:/box\n1:cpu:/\n8:pids:/\n0::/\n");
  testing::writeFile(dir.file("mountinfo"),
                     "40 1 0:30 / " + mem + " rw - cgroup cgroup rw,memory\n"
                     "41 1 0:31 / " + cpu + " rw - cgroup cgroup rw,cpu\n");
  const PodCgroups c = PodCgroups::detect(dir.file("self"), dir.file("mountinfo"));
  ASSERT_EQ(c.version(), PodCgroups::Version::kV1) << c.describe();
  EXPECT_EQ(c.describe(), "cgroup v1 (memory, cpu)");
  EXPECT_EQ(c.memoryParent(), mem + "/box/purser-pods");
  EXPECT_EQ(c.cpuParent(), cpu + "/purser-pods");
  const PodCgroups none = PodCgroups::detect(dir.file("self"), dir.file("nothing"));
  EXPECT_EQ(none.version(), PodCgroups::Version::kNone);
}

}  // namespace
}  // namespace purser::exec
