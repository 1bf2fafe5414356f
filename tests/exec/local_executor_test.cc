// The local executor with real child processes: environment, exit codes, output to a bounded
// log, stopping a whole process group politely and then forcefully, and refusals that change
// nothing. Waits are for the processes' own ends (bounded by their work), never for time.
#include "exec/local_executor.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "fakes/eventually.h"
#include "fakes/temp_dir.h"

namespace purser::exec {
namespace {

using ::testing::HasSubstr;

// Processes of a group that are still alive (zombies, already dead and waiting for whoever
// adopted them to reap them, do not count), from /proc.
int liveInGroup(pid_t group) {
  int live = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    // pid (comm) state ppid pgrp ...: comm may hold spaces, so read after its closing ')'.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state = 0;
    long ppid = 0, pgrp = 0;
    rest >> state >> ppid >> pgrp;
    if (pgrp == group && state != 'Z' && state != 'X') ++live;
  }
  return live;
}

// Waits for a killed group to be gone: SIGKILL cannot be refused, so this ends; the bound only
// turns a broken kill into a failure instead of a hang.
::testing::AssertionResult goneEventually(pid_t group) {
  return testing::eventually([&] { return liveInGroup(group) == 0; },
                             {.attempts = 10'000,
                              .pause = std::chrono::milliseconds(1),
                              .what = "the killed group's end"});
}

void writeGate(const std::string& path) { std::ofstream(path) << "go\n"; }

class LocalExecutorTest : public ::testing::Test {
 protected:
  PodLaunch shell(const std::string& script) {
    PodLaunch p;
    p.workload = "ml/train";
    p.pod_set = "workers";
    p.argv = {"/bin/sh", "-c", script};
    return p;
  }
  std::string started(const PodLaunch& p) {
    auto h = executor->start(p);
    EXPECT_TRUE(h.has_value()) << h.error().toString();
    return h.value_or("");
  }

  testing::TempDir dir;
  ManualClock clock;
  std::unique_ptr<LocalExecutor> executor = std::make_unique<LocalExecutor>(
      clock, LocalExecutorOptions{.log_dir = dir.path(), .max_log_bytes = 64 * 1024});
};

TEST_F(LocalExecutorTest, RunsThePodWithItsEnvironmentAndNothingElseOfPurser) {
  ::setenv("PURSER_TEST_SECRET", "not for pods", 1);
  PodLaunch p = shell(
      "echo \"gpus=$CUDA_VISIBLE_DEVICES who=$PURSER_WORKLOAD "
      "secret=${PURSER_TEST_SECRET:-none} dir=$(pwd)\"");
  p.env = {{"CUDA_VISIBLE_DEVICES", "2,3"}, {"PURSER_WORKLOAD", "ml/train"}};
  p.working_dir = dir.path();
  const std::string h = started(p);
  auto done = executor->wait(h);
  ASSERT_TRUE(done) << done.error().toString();
  EXPECT_EQ(done->phase, PodPhase::kSucceeded);
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_TRUE(done->finished_at.has_value());
  EXPECT_EQ(*executor->logTail(h, 4096), "gpus=2,3 who=ml/train secret=none dir=" +
                                             std::filesystem::canonical(dir.path()).string() +
                                             "\n");
  ::unsetenv("PURSER_TEST_SECRET");
}

TEST_F(LocalExecutorTest, ANonZeroExitFailsWithItsCodeAndTheLogKeepsTheReason) {
  const std::string h =
      started(shell("echo 'loading data'; echo 'CUDA out of memory' >&2; exit 3"));
  auto done = executor->wait(h);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->phase, PodPhase::kFailed);
  EXPECT_EQ(done->exit_code, 3);
  EXPECT_EQ(*executor->logTail(h, 19), "CUDA out of memory\n");
  EXPECT_THAT(*executor->logTail(h, 4096), HasSubstr("loading data"));
}

TEST_F(LocalExecutorTest, StoppingSendsTermToTheWholeGroupAndAPodThatHandlesItEndsItsWay) {
  // The pod and a child of its own; both must go.
  const std::string h = started(
      shell("trap 'echo stopping; kill $child; exit 0' TERM; sleep 300 & child=$!; echo ready; "
            "while :; do sleep 1; done"));
  // Up: its first line is out.
  ASSERT_TRUE(testing::eventually(
      [&] { return executor->logTail(h, 64).value_or("").find("ready") != std::string::npos; },
      {.what = "the pod's line \"ready\""}));
  ASSERT_TRUE(executor->stop(h, std::chrono::seconds(30)));
  // Still stopping, or already ended (its trap may exit before this is asked): never running on
  // as if nothing had been asked.
  auto now = executor->status(h);
  ASSERT_TRUE(now);
  EXPECT_TRUE(now->stopping || now->phase != PodPhase::kRunning);
  auto done = executor->wait(h);
  ASSERT_TRUE(done);
  EXPECT_THAT(*executor->logTail(h, 4096), HasSubstr("stopping"));
  EXPECT_TRUE(goneEventually(*executor->processGroup(h))) << "nothing of the group is left";
}

TEST_F(LocalExecutorTest, APodThatIgnoresTermIsKilledOnceTheGraceHasPassed) {
  const std::string h = started(shell("trap '' TERM; echo ready; while :; do sleep 1; done"));
  ASSERT_TRUE(testing::eventually(
      [&] { return executor->logTail(h, 64).value_or("").find("ready") != std::string::npos; },
      {.what = "the pod's line \"ready\""}));
  ASSERT_TRUE(executor->stop(h, std::chrono::seconds(30)));
  // Within its grace it keeps running (its own loop goes on; nothing here waits on time).
  EXPECT_EQ(executor->status(h)->phase, PodPhase::kRunning);
  clock.advance(std::chrono::seconds(31));
  ASSERT_TRUE(executor->status(h));  // the grace is over: SIGKILL
  auto done = executor->wait(h);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->phase, PodPhase::kFailed);
  EXPECT_EQ(done->signal, SIGKILL);
  EXPECT_FALSE(done->exit_code.has_value());
  EXPECT_TRUE(executor->stop(h, std::chrono::seconds(1))) << "stopping an ended pod is no error";
}

TEST_F(LocalExecutorTest, APodStartsWithNoSignalIgnoredOrBlockedWhateverPurserDoes) {
  // Purser (here, the test) ignoring SIGTERM and blocking SIGINT must not leave pods deaf to
  // them: the polite stop still stops a pod that never asked to ignore it.
  struct sigaction ignore {
  }, before{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGTERM, &ignore, &before);
  sigset_t blocked, previous;
  ::sigemptyset(&blocked);
  ::sigaddset(&blocked, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &blocked, &previous);
  const std::string h = started(shell("echo ready; while :; do sleep 1; done"));
  ::sigaction(SIGTERM, &before, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ASSERT_TRUE(testing::eventually(
      [&] { return executor->logTail(h, 64).value_or("").find("ready") != std::string::npos; },
      {.what = "the pod's line \"ready\""}));
  ASSERT_TRUE(executor->stop(h, std::chrono::seconds(30)));
  auto done = executor->wait(h);  // no clock advance: only SIGTERM can end it
  ASSERT_TRUE(done);
  EXPECT_EQ(done->signal, SIGTERM);
}

TEST_F(LocalExecutorTest, OutputPastTheBoundRollsOverAndKeepsTheEnd) {
  // About 1 MiB of output against a 64 KiB bound.
  const std::string h = started(shell(
      "i=0; while [ $i -lt 16000 ]; do echo \"line $i of the pod's output, padded to length\"; "
      "i=$((i+1)); done; echo last-line"));
  auto done = executor->wait(h);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->phase, PodPhase::kSucceeded);
  struct stat now {
  }, before{};
  ASSERT_EQ(::stat(dir.file(h + ".log").c_str(), &now), 0);
  ASSERT_EQ(::stat(dir.file(h + ".log.1").c_str(), &before), 0);
  EXPECT_LE(now.st_size, 64 * 1024);
  EXPECT_LE(before.st_size, 64 * 1024);
  EXPECT_THAT(*executor->logTail(h, 100), HasSubstr("last-line\n"));
  EXPECT_THAT(*executor->logTail(h, 100'000), HasSubstr("line 15999 of"));
}

TEST_F(LocalExecutorTest, LimitsAreSetOnThePodsProcesses) {
  executor = std::make_unique<LocalExecutor>(
      clock,
      LocalExecutorOptions{
          .log_dir = dir.path(), .max_memory_bytes = uint64_t{1} << 30, .max_cpu_seconds = 600});
  const std::string h = started(shell("echo \"$(ulimit -v) $(ulimit -t)\""));
  ASSERT_TRUE(executor->wait(h));
  EXPECT_EQ(*executor->logTail(h, 100), "1048576 600\n");
}

TEST_F(LocalExecutorTest, WhatCannotRunIsRefusedAndLeavesNothing) {
  PodLaunch missing = shell("");
  missing.argv = {"no-such-program-anywhere", "--flag"};
  auto r = executor->start(missing);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message,
              HasSubstr("cannot run \"no-such-program-anywhere\": No such file or directory"));
  PodLaunch bad_dir = shell("true");
  bad_dir.working_dir = dir.file("nowhere");
  EXPECT_THAT(executor->start(bad_dir).error().message, HasSubstr("is not a directory"));
  PodLaunch empty;
  EXPECT_EQ(executor->start(empty).error().field, "command");
  PodLaunch nul = shell("true");
  nul.argv.push_back(std::string("a\0b", 3));
  EXPECT_FALSE(executor->start(nul));
  PodLaunch bad_env = shell("true");
  bad_env.env = {{"A=B", "c"}};
  EXPECT_EQ(executor->start(bad_env).error().field, "env");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "no log was left behind";
  EXPECT_EQ(executor->status("ml.train.workers.0.99").error().code, ErrorCode::kNotFound);
}

TEST_F(LocalExecutorTest, WhatAPodLeavesRunningGoesWithIt) {
  // Its output pipe is held by what it left, so its end also waits for them to go.
  const std::string h = started(shell("sleep 300 & echo started a helper; exit 0"));
  auto done = executor->wait(h);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->phase, PodPhase::kSucceeded);
  EXPECT_TRUE(goneEventually(*executor->processGroup(h)));
}

TEST_F(LocalExecutorTest, AtMostMaxPodsRunAndAnEndIsToldAtOnce) {
  std::atomic<int> told{0};
  executor = std::make_unique<LocalExecutor>(
      clock,
      LocalExecutorOptions{.log_dir = dir.path(), .max_pods = 1, .on_change = [&told] { ++told; }});
  const std::string gate = dir.file("gate");
  const std::string h =
      started(shell("while [ ! -e '" + gate + "' ]; do sleep 0.02; done; echo done"));
  auto full = executor->start(shell("true"));
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().code, ErrorCode::kResourceExhausted);
  EXPECT_THAT(full.error().message, HasSubstr("at most 1 pods"));
  writeGate(gate);
  // The watcher tells of the end without anyone polling the executor (bounded by looks at the
  // count, not by a time; the pod itself looks for the gate every 20 ms).
  EXPECT_TRUE(testing::eventually([&] { return told.load() >= 1; },
                                  {.what = "the watcher told of the pod's end"}));
  ASSERT_TRUE(executor->wait(h));
  // Ended, there is room again; once forgotten, its handle is unknown but its log stays.
  const std::string next = started(shell("echo next"));
  ASSERT_TRUE(executor->wait(next));
  executor->forget(h);
  EXPECT_EQ(executor->status(h).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(*executor->logTail(h, 100), "done\n");
}

TEST_F(LocalExecutorTest, ClosingTheExecutorEndsWhatStillRunsWhenAskedTo) {
  executor = std::make_unique<LocalExecutor>(
      clock, LocalExecutorOptions{.log_dir = dir.path(), .stop_on_close = true});
  const std::string h = started(shell("sleep 300 & echo ready; while :; do sleep 1; done"));
  ASSERT_TRUE(testing::eventually(
      [&] { return executor->logTail(h, 64).value_or("").find("ready") != std::string::npos; },
      {.what = "the pod's line \"ready\""}));
  const pid_t group = *executor->processGroup(h);
  ASSERT_GE(liveInGroup(group), 1);
  executor.reset();
  EXPECT_TRUE(goneEventually(group));
}

TEST_F(LocalExecutorTest, APodOutlivesItsExecutorAndANewOneAdoptsItWithItsOutputAndItsEnd) {
  // The pod waits for a file, so it is still running when its first executor goes away (as
  // when Purser is killed) and ends only once the test lets it.
  const std::string gate = dir.file("gate");
  const std::string h = started(
      shell("echo before; while [ ! -e '" + gate + "' ]; do sleep 0.05; done; echo after; exit 7"));
  ASSERT_TRUE(testing::eventually(
      [&] { return executor->logTail(h, 64).value_or("").find("before") != std::string::npos; },
      {.what = "the pod's line \"before\""}));
  const auto id = executor->identity(h);
  ASSERT_TRUE(id.has_value());
  const SystemTime started_at = executor->status(h)->started_at;
  executor.reset();  // the default: pods keep running
  ASSERT_GE(liveInGroup(static_cast<pid_t>(id->first)), 1) << "the pod outlived its executor";

  LocalExecutor next(clock, LocalExecutorOptions{.log_dir = dir.path()});
  EXPECT_EQ(next.status(h).error().code, ErrorCode::kNotFound) << "unknown until adopted";
  ASSERT_TRUE(next.adopt(Adopted{h, id->first, id->second, started_at}));
  EXPECT_EQ(next.status(h)->phase, PodPhase::kRunning);
  writeGate(gate);
  auto done = next.wait(h);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->phase, PodPhase::kFailed);
  EXPECT_EQ(done->exit_code, 7) << "its exit code survives the restart";
  EXPECT_TRUE(done->finished_at.has_value());
  EXPECT_EQ(*next.logTail(h, 4096), "before\nafter\n");
  EXPECT_TRUE(goneEventually(static_cast<pid_t>(id->first)));

  // Adopting a pod whose process is gone (or whose pid now names another process) reports it
  // ended, not running.
  ASSERT_TRUE(next.adopt(Adopted{"ml.train.workers.0.1-1", id->first, id->second, started_at}));
  EXPECT_EQ(next.status("ml.train.workers.0.1-1")->phase, PodPhase::kFailed);
  EXPECT_FALSE(next.adopt(Adopted{"../escape", 42, 0, started_at}));
}

TEST_F(LocalExecutorTest, AKeyedStartMadeAgainByAnotherExecutorTakesThePodBackInsteadOfASecond) {
  // The pod counts its starts in a file and waits for a gate, so it still runs when its first
  // executor goes away (a fleet leader killed) and a second executor starts it under the same key.
  const std::string gate = dir.file("gate");
  const std::string count = dir.file("starts");
  PodLaunch p = shell("echo started >> '" + count + "'; while [ ! -e '" + gate +
                      "' ]; do sleep 0.05; done; exit 3");
  p.key = "12-1";
  const std::string h = started(p);
  EXPECT_EQ(h, "ml.train.workers.0.k12-1") << "a keyed start's handle is made from its key";
  EXPECT_EQ(started(p), h) << "the same executor knows the key already";
  ASSERT_TRUE(testing::eventually([&] { return !testing::readFile(count).empty(); },
                                  {.what = "the pod's first count"}));
  const auto id = executor->identity(h);
  ASSERT_TRUE(id.has_value());
  executor.reset();  // killed: the pod keeps running

  LocalExecutor next(clock, LocalExecutorOptions{.log_dir = dir.path()});
  auto again = next.start(p);
  ASSERT_TRUE(again.has_value()) << again.error().toString();
  EXPECT_EQ(*again, h);
  EXPECT_EQ(next.identity(h)->first, id->first) << "the same process group, taken back";
  EXPECT_EQ(next.status(h)->phase, PodPhase::kRunning);
  writeGate(gate);
  auto done = next.wait(h);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->exit_code, 3);
  EXPECT_EQ(testing::readFile(count), "started\n") << "started once";

  // Another key is another pod; an unkeyed start never collides with a keyed one.
  PodLaunch other = p;
  other.key = "12-2";
  other.argv = {"/bin/true"};
  const std::string h2 = *next.start(other);
  EXPECT_NE(h2, h);
  EXPECT_EQ(next.wait(h2)->phase, PodPhase::kSucceeded);
}

}  // namespace
}  // namespace purser::exec

namespace purser::exec {
namespace {

// An ended pod's files stay while they may be read (`purser logs` of an ended workload), and go
// once older than the retention; a file that is not a regular one (a link) is never followed.
TEST(LocalExecutorFilesTest, EndedPodsFilesGoOnceOlderThanTheRetention) {
  testing::TempDir dir, outside;
  ManualClock clock(std::chrono::system_clock::now());
  LocalExecutor executor(clock, LocalExecutorOptions{.log_dir = dir.path(),
                                                     .file_retention = std::chrono::hours(24 * 7)});
  // Files of a pod that ended eight days ago (by their times), and a link among them.
  const auto age = [](const std::string& path, int days, int flags = 0) {
    const timespec old{::time(nullptr) - days * 86400, 0};
    const timespec times[2] = {old, old};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, flags), 0) << path;
  };
  for (const char* f : {"ml.old.main.0.1.log", "ml.old.main.0.1.exit", "ml.old.main.0.1.pid"}) {
    testing::writeFile(dir.file(f), "x");
    age(dir.file(f), 8);
  }
  testing::writeFile(outside.file("precious"), "keep");
  ASSERT_EQ(::symlink(outside.file("precious").c_str(), dir.file("evil.log").c_str()), 0);
  age(dir.file("evil.log"), 30, AT_SYMLINK_NOFOLLOW);
  // ... of a pod whose ended files are swept (its exit file is old): its other files go, the link
  // is left (a link in the log directory is not a file Purser wrote).
  testing::writeFile(dir.file("evil.exit"), "exit 0 0");
  age(dir.file("evil.exit"), 30);
  // A pod that may still run (no exit file yet): its pid file is how a restart takes it back.
  for (const char* f : {"ml.live.main.0.1.log", "ml.live.main.0.1.pid"}) {
    testing::writeFile(dir.file(f), "x");
    age(dir.file(f), 30);
  }
  testing::writeFile(dir.file("notes.txt"), "not a pod's");
  age(dir.file("notes.txt"), 30);

  PodLaunch p;
  p.workload = "ml/train";
  p.pod_set = "main";
  p.argv = {"/bin/sh", "-c", "echo done"};
  auto h = executor.start(p);
  ASSERT_TRUE(h.has_value()) << h.error().toString();
  ASSERT_TRUE(executor.wait(*h).has_value());
  executor.forget(*h);  // a pod ends: what ended long ago goes, what just ended stays
  EXPECT_FALSE(std::filesystem::exists(dir.file("ml.old.main.0.1.log")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("ml.old.main.0.1.exit")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("ml.old.main.0.1.pid")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("evil.exit"))) << "the pod's files were swept";
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("evil.log")));
  EXPECT_EQ(testing::readFile(outside.file("precious")), "keep");
  EXPECT_TRUE(std::filesystem::exists(dir.file("notes.txt")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("ml.live.main.0.1.pid")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("ml.live.main.0.1.log")));
  EXPECT_EQ(*executor.logTail(*h, 100), "done\n");
  // Eight days on, the next end takes the pod's files too.
  clock.advance(std::chrono::hours(24 * 8));
  executor.forget("ml.other");
  EXPECT_FALSE(executor.logTail(*h, 100).has_value());
  EXPECT_FALSE(std::filesystem::exists(dir.file(*h + ".log")));
  EXPECT_FALSE(std::filesystem::exists(dir.file(*h + ".exit")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("ml.live.main.0.1.pid")));
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("evil.log")));
}

}  // namespace
}  // namespace purser::exec
