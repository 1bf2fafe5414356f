// The hostile member, end to end: two tenants on one `purser serve` (the embedded default), a
// member key each, and a job of one member that tries everything a workload could do to Purser
// and to the other tenant — read Purser's environment, keys, ledger, configuration and the other
// tenant's logs and files; forge the other tenant's pod's end; kill Purser; work in Purser's data
// directory; outgrow its memory. Every attempt must fail with what the member sees named, and
// Purser and the other tenant's job must go on untouched.
//
// Run twice: Purser as root (each team's pods under an account of their own), and Purser as an
// unprivileged user (pods in user namespaces). PURSER_TEST_BINARY runs the suite against another
// build (to show that it fails against one without the walls).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "fakes/eventually.h"
#include "fakes/kueue_manifest.h"
#include "fakes/temp_dir.h"
#include "integration/fleet_harness.h"

namespace purser {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kAdminKey = "walls-test-admin-key-0123456789abcdef";
constexpr const char* kMasterKey =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
constexpr uid_t kNobody = 65534;

enum class Mode { kRoot, kUnprivileged };

std::string binary() {
  const char* other = std::getenv("PURSER_TEST_BINARY");
  return other != nullptr && *other != '\0' ? other : PURSER_BINARY;
}

// ClusterQueue shared, open to every namespace, with a LocalQueue in each team's.
std::string manifests() {
  testing::KueueQueue q;
  q.flavor = "cpu";
  q.cluster_queue = "shared";
  q.preemption = "withinClusterQueue: LowerPriority";
  q.quota = {{"cpu", "16"}, {"memory", "64Gi"}};
  q.namespaces = {"ml", "research"};
  q.local_queue = "jobs";
  q.priority_classes = {{"low", -10}, {"urgent", 1000}};
  return q.yaml();
}

class WallsTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "starting Purser as root and as another user needs root";
    }
    ::chmod(dir.path().c_str(), 0755);
    testing::writeFile(dir.file("fleet.yaml"), manifests());
    // Routes that fleet workloads may serve only where the test of serving needs them (so that
    // the other tests also run against a build that has no served_by).
    const bool serving =
        std::string(::testing::UnitTest::GetInstance()->current_test_info()->name())
            .starts_with("AMembersModel");
    testing::writeFile(dir.file("purser.yaml"),
                       std::string("listen: 127.0.0.1:0\nthreads: 1\n"
                                   "providers:\n  - {name: upstream, kind: openai, base_url: "
                                   "\"http://127.0.0.1:9\", api_keys: "
                                   "[sk-provider-secret-in-config]}\n") +
                           (serving ? "routes:\n"
                                      "  - {model: chat, targets: [], served_by: [acme]}\n"
                                      "  - {model: theirs, targets: [], served_by: [globex]}\n"
                                      "  - {model: nobodys, targets: []}\n"
                                      "prices:\n  - {provider: fleet, model: liar, "
                                      "input_per_mtok: \"1000.00\", output_per_mtok: "
                                      "\"2000.00\"}\n"
                                    : "") +
                           "fleet:\n  manifests: [fleet.yaml]\n  termination_grace: 1s\n"
                           "  local: {max_pods: 3}\n");
    ::chmod(dir.file("purser.yaml").c_str(), 0600);
    std::string program = binary();
    if (GetParam() == Mode::kUnprivileged) {
      // Everything of this Purser is its user's; its program must be one that user may run.
      std::filesystem::create_directories(dir.file("var"));
      std::filesystem::create_directories(dir.file("bin"));
      std::filesystem::copy_file(program, dir.file("bin/purser"));
      ::chmod(dir.file("bin/purser").c_str(), 0755);
      program = dir.file("bin/purser");
      for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
        ::lchown(e.path().c_str(), kNobody, kNobody);
      }
      ::chown(dir.path().c_str(), kNobody, kNobody);
      server.runAs({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                    "--inh-caps=-all", "--"},
                   program, {std::string("PURSER_MASTER_KEY=") + kMasterKey});
    } else {
      server.runAs({}, program, {std::string("PURSER_MASTER_KEY=") + kMasterKey});
    }
    std::string why;
    ASSERT_TRUE(server.start(&why)) << why;
    alice = member("acme", "ml", "alice");
    bob = member("globex", "research", "bob");
    ASSERT_FALSE(alice.empty());
    ASSERT_FALSE(bob.empty());
  }
  void TearDown() override {
    for (const auto& [team, path] : gates_) {
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
      if (FILE* f = std::fopen(path.c_str(), "w")) std::fclose(f);
    }
    server.stop();
  }

  std::string member(const std::string& tenant, const std::string& team, const std::string& user) {
    server.call("POST", "/api/v1/tenants", kAdminKey, json{{"name", tenant}}.dump());
    server.call("POST", "/api/v1/teams", kAdminKey,
                json{{"name", team}, {"tenant", tenant}}.dump());
    json u = server.call("POST", "/api/v1/users", kAdminKey,
                         json{{"name", user}, {"tenant", tenant}, {"team", team}}.dump());
    json k = server.call(
        "POST", "/api/v1/keys", kAdminKey,
        json{{"name", "laptop"}, {"owner", {{"kind", "user"}, {"id", u["id"]}}}}.dump());
    return k.value("key", "");
  }

  // Submits a job of `ns` running `script`; the answer's status.
  int submit(const std::string& key, const std::string& ns, const std::string& name,
             const std::string& script, const json& extra = json::object()) {
    json ps = {{"name", "main"},
               {"requests", {{"cpu", "1"}, {"memory", "256Mi"}}},
               {"command", {"/bin/sh", "-c", script}}};
    for (const auto& [k, v] : extra.items()) ps[k] = v;
    json w = {{"name", name}, {"namespace", ns}, {"queue", "jobs"}, {"pod_sets", {ps}}};
    int status = 0;
    json out = server.call("POST", "/api/v1/workloads", key, w.dump(), "application/json", &status);
    EXPECT_EQ(status, 201) << out.dump();
    return status;
  }
  json get(const std::string& key, const std::string& ns, const std::string& name) {
    return server.call("GET", "/api/v1/workloads/" + ns + "/" + name, key);
  }
  json waitFor(const std::string& key, const std::string& ns, const std::string& name,
               const std::vector<std::string>& states) {
    json w;
    const std::string what = name + " to reach " + states[0];
    EXPECT_TRUE(testing::eventually(
        [&] {
          w = get(key, ns, name);
          for (const auto& s : states) {
            if (w.is_object() && w.value("state", "") == s) return true;
          }
          return false;
        },
        {.attempts = 3000, .pause = std::chrono::milliseconds(20), .what = what.c_str()}))
        << w.dump();
    return w;
  }
  std::string logs(const std::string& key, const std::string& ns, const std::string& name) {
    json l = server.call("GET", "/api/v1/workloads/" + ns + "/" + name + "/logs", key);
    return l.is_string() ? l.get<std::string>() : l.dump();
  }
  std::string workspace(const std::string& ns) { return dir.file("var/workspaces/" + ns); }
  // A gate the job of `ns` waits for (a file in its workspace), opened at the end at the latest.
  std::string gate(const std::string& ns) {
    gates_[ns] = workspace(ns) + "/gate";
    return "while [ ! -e gate ]; do sleep 0.02; done";
  }
  bool alive() {
    int status = 0;
    server.call("GET", "/api/v1/whoami", alice, "", "application/json", &status);
    return status == 200 && ::kill(server.pid(), 0) == 0;
  }

  testing::TempDir dir;
  testing::FleetServer server{dir, kAdminKey};
  std::string alice, bob;
  std::map<std::string, std::string> gates_;
};

TEST_P(WallsTest, AMembersJobCanReachNothingOfPurserNorOfTheOtherTenant) {
  // Bob's job: a secret in its environment, a log of its own; it waits for its gate.
  ASSERT_EQ(submit(bob, "research", "victim",
                   "echo bob-log-line; " + gate("research") + "; echo bob-finished",
                   {{"env", {{"BOB_TOKEN", "bob-secret-token"}}}}),
            201);
  waitFor(bob, "research", "victim", {"running"});
  const std::string d = dir.file("var");
  const std::string pid = std::to_string(server.pid());
  // Alice's job tries everything, and says what it saw.
  const std::string attack =
      "P=" + pid + "; D=" + d +
      "; "
      "echo \"environ=$(cat /proc/$P/environ 2>&1 | head -c 100)\"; "
      "echo \"anyenv=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | "
      "grep -c -e PURSER_ADMIN_KEY -e PURSER_MASTER_KEY -e BOB_TOKEN)\"; "
      "echo \"cmdline=$(tr -d '\\0' < /proc/1/cmdline)\"; "
      "echo \"auditkey=$(cat $D/audit.key 2>&1 | head -c 100)\"; "
      "echo \"masterkey=$(cat $D/master.key 2>&1 | head -c 100)\"; "
      "echo \"db=$(head -c 15 $D/purser.db 2>&1 | head -c 100)\"; "
      "echo \"config=$(cat " +
      dir.file("purser.yaml") +
      " 2>&1 | head -c 100)\"; "
      "echo \"logs=$(cat $D/pods/*.log 2>&1 | head -c 100)\"; "
      "echo \"forge=$( (echo 'exit 0 0' > $D/pods/research.victim.main.0.exit) 2>&1 | head -c "
      "100)\"; "
      "echo \"theirs=$(ls " +
      workspace("research") +
      " 2>&1 | head -c 100)\"; "
      "echo attack-over";
  ASSERT_EQ(submit(alice, "ml", "attack", attack), 201);
  json done = waitFor(alice, "ml", "attack", {"succeeded", "failed"});
  const std::string seen = logs(alice, "ml", "attack");
  ASSERT_THAT(seen, HasSubstr("attack-over")) << done.dump();
  EXPECT_THAT(seen, HasSubstr("environ=cat: /proc/" + pid + "/environ: No such file"));
  EXPECT_THAT(seen, HasSubstr("anyenv=0\n"));
  EXPECT_THAT(seen, HasSubstr("cmdline=purser-pod-init\n"));
  EXPECT_THAT(seen, HasSubstr("auditkey=cat: " + d + "/audit.key: No such file"));
  EXPECT_THAT(seen, HasSubstr("masterkey=cat: " + d + "/master.key: No such file"));
  EXPECT_THAT(seen, HasSubstr("db=head: cannot open '" + d + "/purser.db'"));
  EXPECT_THAT(seen, HasSubstr("config=cat: " + dir.file("purser.yaml") + ": No such file"));
  EXPECT_THAT(seen, HasSubstr("logs=cat: '" + d + "/pods/*.log': No such file"));
  EXPECT_THAT(seen, HasSubstr("forge=/bin/sh: 1: cannot create " + d + "/pods/"));
  EXPECT_THAT(seen, Not(HasSubstr("sk-provider-secret")));
  EXPECT_THAT(seen, Not(HasSubstr("bob-secret-token")));
  EXPECT_THAT(seen, Not(HasSubstr(kAdminKey)));
  EXPECT_THAT(seen, HasSubstr("theirs=ls: cannot access '" + workspace("research") + "'"));
  // Last, it tries to kill Purser.
  ASSERT_EQ(submit(alice, "ml", "killer", "echo \"kill=$(kill -9 " + pid + " 2>&1)\""), 201);
  waitFor(alice, "ml", "killer", {"succeeded", "failed"});
  EXPECT_THAT(logs(alice, "ml", "killer"), HasSubstr("kill=/bin/sh: 1: kill: No such process"));
  // Purser runs on; Bob's job runs on, its log its own, and ends its own way.
  EXPECT_TRUE(alive());
  EXPECT_EQ(get(bob, "research", "victim").value("state", ""), "running");
  testing::writeFile(gates_["research"], "");
  json victim = waitFor(bob, "research", "victim", {"succeeded", "failed"});
  EXPECT_EQ(victim.value("state", ""), "succeeded") << victim.dump();
  EXPECT_THAT(logs(bob, "research", "victim"), HasSubstr("bob-finished"));
  // What Purser keeps is as it was: the key files are there and Purser's own.
  struct stat st {};
  ASSERT_EQ(::stat((d + "/audit.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, GetParam() == Mode::kRoot ? 0u : kNobody);
  ASSERT_EQ(::stat(d.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u) << "the data directory is Purser's alone";
}

TEST_P(WallsTest, AJobCannotWorkInPursersDataDirectoryNorInAnotherTeamsWorkspace) {
  for (const std::string& where :
       {dir.file("var"), workspace("research"), std::string("/"), std::string("relative")}) {
    const std::string name = "wd" + std::to_string(gates_.size() + where.size());
    ASSERT_EQ(submit(alice, "ml", name, "echo ran; ls", {{"working_dir", where}}), 201);
    json w = waitFor(alice, "ml", name, {"failed", "succeeded"});
    EXPECT_EQ(w.value("state", ""), "failed") << where << ": " << w.dump();
    EXPECT_EQ(w.value("reason", ""), "StartFailed") << w.dump();
    EXPECT_THAT(w.value("message", ""), HasSubstr("workingDir")) << w.dump();
    EXPECT_THAT(logs(alice, "ml", name), Not(HasSubstr("ran")));
  }
  // Its own workspace it may use, and a directory inside it.
  ASSERT_EQ(submit(alice, "ml", "inside", "pwd", {{"working_dir", workspace("ml") + "/runs/1"}}),
            201);
  json w = waitFor(alice, "ml", "inside", {"succeeded", "failed"});
  EXPECT_EQ(w.value("state", ""), "succeeded") << w.dump();
  EXPECT_THAT(logs(alice, "ml", "inside"), HasSubstr(workspace("ml") + "/runs/1"));
  EXPECT_TRUE(alive());
}

TEST_P(WallsTest, AJobOverItsMemoryLimitIsOOMKilledWhileTheOtherTenantAndPurserGoOn) {
  if (GetParam() == Mode::kUnprivileged) {
    GTEST_SKIP() << "an unprivileged Purser has no cgroups of its own here; its pods' memory is "
                    "bounded by RLIMIT_AS instead, which fails allocations rather than killing";
  }
  ASSERT_EQ(submit(bob, "research", "steady", "echo steady; " + gate("research") + "; echo ok"),
            201);
  waitFor(bob, "research", "steady", {"running"});
  ASSERT_EQ(submit(alice, "ml", "hog", "echo start; head -c 500000000 /dev/zero | tail -n 1",
                   {{"limits", {{"memory", "64Mi"}}}}),
            201);
  json hog = waitFor(alice, "ml", "hog", {"failed", "succeeded"});
  EXPECT_EQ(hog.value("state", ""), "failed") << hog.dump();
  EXPECT_EQ(hog.value("reason", ""), "OOMKilled") << hog.dump();
  EXPECT_EQ(hog.value("exit_code", 0), 137) << hog.dump();
  EXPECT_THAT(hog.value("message", ""), HasSubstr("memory limit"));
  EXPECT_TRUE(alive());
  EXPECT_EQ(get(bob, "research", "steady").value("state", ""), "running");
  testing::writeFile(gates_["research"], "");
  EXPECT_EQ(waitFor(bob, "research", "steady", {"succeeded", "failed"}).value("state", ""),
            "succeeded");
}

TEST_P(WallsTest, TheExecutorsSlotsAreQuotaAJobThatCannotStartWaitsInsteadOfChurning) {
  // fleet.local.max_pods is 3. Alice's job holds two slots; Bob's job of two waits, pending, and
  // nothing is started and killed meanwhile.
  ASSERT_EQ(submit(alice, "ml", "holder", gate("ml") + "; echo done", {{"count", 2}}), 201);
  waitFor(alice, "ml", "holder", {"running"});
  ASSERT_EQ(submit(bob, "research", "waiter", "echo ran", {{"count", 2}}), 201);
  json w;
  EXPECT_TRUE(testing::eventually(
      [&] {
        w = get(bob, "research", "waiter");
        return w.value("message", "").find("runs at most 3 pods") != std::string::npos;
      },
      {.attempts = 200,
       .pause = std::chrono::milliseconds(20),
       .what = "research/waiter told the executor's limit"}));
  EXPECT_EQ(w.value("state", ""), "pending") << w.dump();
  EXPECT_THAT(w.value("message", ""), HasSubstr("the local executor runs at most 3 pods at once"));
  // A few polls later, still no pod of it has been started (no files of it in the pods' dir).
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("var/pods"))) {
    files += e.path().filename().string().starts_with("research.waiter") ? 1 : 0;
  }
  EXPECT_EQ(files, 0u) << "a workload that cannot start is never started and stopped";
  // A job that could never run at once is said to be so.
  ASSERT_EQ(submit(bob, "research", "huge", "echo ran", {{"count", 4}}), 201);
  EXPECT_TRUE(testing::eventually(
      [&] {
        w = get(bob, "research", "huge");
        return w.value("message", "").find("never") != std::string::npos;
      },
      {.attempts = 200,
       .pause = std::chrono::milliseconds(20),
       .what = "research/huge told it can never run"}));
  EXPECT_THAT(w.value("message", ""), HasSubstr("can never run at once on the local executor"));
  // Room returns: Bob's job runs.
  testing::writeFile(gates_["ml"], "");
  EXPECT_EQ(waitFor(bob, "research", "waiter", {"succeeded", "failed"}).value("state", ""),
            "succeeded");
}

TEST_P(WallsTest, PriorityIsGrantedPerTenantAndNeverEvictsAnotherTenantsWorkItCouldMatch) {
  const auto grant = [&](const std::string& tenant, int max, const std::string& keys) {
    int status = 0;
    json out = server.call("PUT", "/api/v1/tenants/" + tenant + "/priority", kAdminKey,
                           json{{"max_workload_priority", max}, {"max_key_priority", keys}}.dump(),
                           "application/json", &status);
    EXPECT_EQ(status, 200) << out.dump();
  };
  // A tenant admin of globex, who may not grant itself anything.
  json admin_user = server.call(
      "POST", "/api/v1/users", kAdminKey,
      json{{"name", "gina"}, {"tenant", "globex"}, {"team", "research"}, {"role", "tenant-admin"}}
          .dump());
  const std::string gina =
      server
          .call("POST", "/api/v1/keys", kAdminKey,
                json{{"name", "k"}, {"owner", {{"kind", "user"}, {"id", admin_user["id"]}}}}.dump())
          .value("key", "");
  ASSERT_FALSE(gina.empty());
  int status = 0;
  server.call("PUT", "/api/v1/tenants/globex/priority", gina,
              json{{"max_workload_priority", 1000000}}.dump(), "application/json", &status);
  EXPECT_EQ(status, 403) << "a tenant admin does not grant its own tenant priority";
  // Without a grant: no urgent class for a member, no bare priority for a tenant admin, no
  // critical key.
  json w = {{"name", "jump"},
            {"namespace", "ml"},
            {"queue", "jobs"},
            {"priority_class", "urgent"},
            {"pod_sets", {{{"name", "m"}, {"requests", {{"cpu", "1"}}}}}}};
  json refused =
      server.call("POST", "/api/v1/workloads", alice, w.dump(), "application/json", &status);
  EXPECT_EQ(status, 403) << refused.dump();
  EXPECT_THAT(refused.value("detail", ""),
              HasSubstr("tenant acme's workloads may have priorities up to 0"));
  json bare = {{"name", "vip"},
               {"namespace", "research"},
               {"queue", "jobs"},
               {"priority", 1000},
               {"pod_sets", {{{"name", "m"}, {"requests", {{"cpu", "1"}}}}}}};
  refused =
      server.call("POST", "/api/v1/workloads", gina, bare.dump(), "application/json", &status);
  EXPECT_EQ(status, 403) << refused.dump();
  server.call("POST", "/api/v1/keys", gina,
              json{{"name", "fast"},
                   {"owner", {{"kind", "user"}, {"id", admin_user["id"]}}},
                   {"priority", "critical"}}
                  .dump(),
              "application/json", &status);
  EXPECT_EQ(status, 403) << "no critical keys without the grant";

  // Both tenants granted 1000: Bob's low job fills the shared queue; Alice's urgent one waits,
  // for Bob's tenant could itself run at 1000: it takes no place of his.
  grant("acme", 1000, "standard");
  grant("globex", 1000, "standard");
  ASSERT_EQ(submit(bob, "research", "steady", gate("research") + "; echo ok",
                   {{"requests", {{"cpu", "16"}, {"memory", "256Mi"}}}}),
            201);
  waitFor(bob, "research", "steady", {"running"});
  json urgent = {{"name", "urgent"},
                 {"namespace", "ml"},
                 {"queue", "jobs"},
                 {"priority_class", "urgent"},
                 {"pod_sets",
                  {{{"name", "m"},
                    {"count", 1},
                    {"requests", {{"cpu", "16"}, {"memory", "256Mi"}}},
                    {"command", {"/bin/sh", "-c", "echo urgent ran"}}}}}};
  json sent =
      server.call("POST", "/api/v1/workloads", alice, urgent.dump(), "application/json", &status);
  ASSERT_EQ(status, 201) << sent.dump();
  for (int i = 0; i < 25; ++i) {  // a few admission cycles
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(get(bob, "research", "steady").value("state", ""), "running")
        << "another tenant's urgent work took Bob's place";
  }
  EXPECT_EQ(get(bob, "research", "steady").value("preemptions", 0), 0);
  EXPECT_EQ(get(alice, "ml", "urgent").value("state", ""), "pending");
  // Once Bob's tenant may go no higher than 0, Alice's 1000 is beyond it: now it preempts.
  grant("globex", 0, "standard");
  EXPECT_EQ(waitFor(alice, "ml", "urgent", {"succeeded", "failed"}).value("state", ""),
            "succeeded");
  EXPECT_EQ(get(bob, "research", "steady").value("preemptions", 0), 1)
      << "Bob's job made room for it (and is queued or running again since)";
}

// A model server a member wrote, that answers every chat with usage of zero tokens.
constexpr const char* kLyingReplica = R"PERL(
use IO::Socket::INET;
my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$ENV{PURSER_SERVE_PORT}", Listen => 16,
                              ReuseAddr => 1) or die "listen: $!";
while (my $c = $s->accept) {
  my $head = '';
  while (my $line = <$c>) { $head .= $line; last if $line =~ /^\r?\n$/; }
  my ($len) = $head =~ /Content-Length: *(\d+)/i;
  my $body = '';
  read($c, $body, $len) if $len;
  my $out = $head =~ m{^GET /healthz} ? 'ok' :
    '{"id":"c1","object":"chat.completion","model":"liar","choices":[{"index":0,"message":'
    . '{"role":"assistant","content":"this answer says it cost nothing at all"},'
    . '"finish_reason":"stop"}],"usage":{"prompt_tokens":0,"completion_tokens":0,'
    . '"total_tokens":0}}';
  print $c "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    . length($out) . "\r\nConnection: close\r\n\r\n$out";
  close $c;
}
)PERL";

TEST_P(WallsTest, AMembersModelServesOnlyARouteThatSaysItMayAndIsPricedWhateverItReports) {
  const uint16_t port = testing::freePort();
  const auto served = [&](const std::string& name, const std::string& route) {
    json w = {
        {"name", name},
        {"namespace", "ml"},
        {"queue", "jobs"},
        {"serve", {{"route", route}, {"port", port}, {"model", "liar"}, {"health", "/healthz"}}},
        {"pod_sets",
         {{{"name", "replicas"},
           {"requests", {{"cpu", "1"}, {"memory", "256Mi"}}},
           {"command", {"/usr/bin/perl", "-e", kLyingReplica}}}}}};
    int status = 0;
    json out =
        server.call("POST", "/api/v1/workloads", alice, w.dump(), "application/json", &status);
    return std::make_pair(status, out);
  };
  // Another tenant's route, and a route nobody may serve: refused, saying who may.
  auto [theirs_status, theirs] = served("steal", "theirs");
  EXPECT_EQ(theirs_status, 403) << theirs.dump();
  EXPECT_THAT(theirs.value("detail", ""), HasSubstr("served only by the workloads of globex"));
  auto [nobodys_status, nobodys] = served("squat", "nobodys");
  EXPECT_EQ(nobodys_status, 403) << nobodys.dump();
  EXPECT_THAT(nobodys.value("detail", ""), HasSubstr("served by no workload"));
  // Its own tenant's route: it joins, and the zero it reports is not what its tenant pays.
  auto [ok_status, ok] = served("liar", "chat");
  ASSERT_EQ(ok_status, 201) << ok.dump();
  waitFor(alice, "ml", "liar", {"running"});
  json w;
  ASSERT_TRUE(testing::eventually(
      [&] {
        w = get(alice, "ml", "liar");
        return w["pods"].is_array() && !w["pods"].empty() && w["pods"][0].value("serving", false);
      },
      {.attempts = 3000, .pause = std::chrono::milliseconds(20), .what = "ml/liar serving"}))
      << w.dump();
  int status = 0;
  json answer =
      server.call("POST", "/v1/chat/completions", alice,
                  R"({"model":"chat","max_tokens":50,"messages":[{"role":"user","content":")" +
                      std::string(600, 'x') + R"("}]})",
                  "application/json", &status);
  ASSERT_EQ(status, 200) << answer.dump();
  json usage = server.call("GET", "/api/v1/usage?scope=tenant:acme&limit=10", kAdminKey);
  ASSERT_FALSE(usage["data"].empty()) << usage.dump();
  const json e = usage["data"][0];
  EXPECT_EQ(e.value("provider", ""), "fleet:ml/liar/replicas-0") << e.dump();
  EXPECT_TRUE(e.value("estimated", false)) << e.dump();
  EXPECT_NE(e.value("cost", ""), "0.00") << e.dump();
  // The other tenant sees that a replica serves the route, not whose or what.
  json routes = server.call("GET", "/api/v1/routes", bob);
  std::string seen_by_bob;
  for (const auto& r : routes["data"]) {
    if (r.value("alias", "") != "chat") continue;
    for (const auto& t : r["targets"]) seen_by_bob += t.value("provider", "") + ";";
  }
  EXPECT_EQ(seen_by_bob, "a replica of another tenant;") << routes.dump();
  EXPECT_THAT(routes.dump(), Not(HasSubstr("ml/liar")));
  server.call("DELETE", "/api/v1/workloads/ml/liar", alice);
}

// A route's allow list takes names, as the documentation writes them; a name that matches
// nothing fails the start (it would lock out the tenant it meant).
TEST(RouteAllowTest, AllowNamesTenantsAndTeamsAndANameOfNothingFailsTheStart) {
  testing::TempDir dir;
  testing::FleetServer server{dir, kAdminKey};
  testing::writeFile(dir.file("purser.yaml"), "listen: 127.0.0.1:0\nthreads: 1\n");
  std::string why;
  ASSERT_TRUE(server.start(&why)) << why;
  const std::string key = server.member();  // acme, its team ml, alice
  server.stop();
  const auto start = [&](const std::string& allow) {
    testing::writeFile(dir.file("purser.yaml"),
                       "listen: 127.0.0.1:0\nthreads: 1\nproviders:\n  - {name: up, kind: openai, "
                       "base_url: \"http://127.0.0.1:9/v1\"}\nroutes:\n  - {model: chat, "
                       "targets: [{provider: up, model: m}], allow: " +
                           allow + "}\n");
    std::string err;
    const bool ok = server.start(&err);
    return std::make_pair(ok, err);
  };
  auto [bad, err] = start("{tenants: [acmee]}");
  EXPECT_FALSE(bad);
  EXPECT_THAT(err, HasSubstr("routes[0].allow.tenants: \"acmee\" names no tenant"));
  auto [bad_team, err_team] = start("{teams: [acme/nope]}");
  EXPECT_FALSE(bad_team);
  EXPECT_THAT(err_team, HasSubstr("\"acme/nope\" names no team"));
  for (const std::string& allow :
       {std::string("{tenants: [acme]}"), std::string("{teams: [acme/ml]}"),
        std::string("{teams: [ml]}")}) {
    auto [ok, why_not] = start(allow);
    ASSERT_TRUE(ok) << allow << ": " << why_not;
    // acme's member may use the route (it answers past admission: 502 from the dead upstream).
    int status = 0;
    server.call("POST", "/v1/chat/completions", key,
                R"({"model":"chat","messages":[{"role":"user","content":"hi"}]})",
                "application/json", &status);
    EXPECT_NE(status, 403) << allow;
    EXPECT_NE(status, 404) << allow;
    server.stop();
  }
}

INSTANTIATE_TEST_SUITE_P(Purser, WallsTest, ::testing::Values(Mode::kRoot, Mode::kUnprivileged),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return info.param == Mode::kRoot ? std::string("AsRoot")
                                                            : std::string("Unprivileged");
                         });

}  // namespace
}  // namespace purser
