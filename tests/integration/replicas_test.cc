// Several `purser serve` replicas sharing one PostgreSQL (a private server the test starts): a
// client spreads a burst over them against one hard wallet, one replica is killed with SIGKILL
// mid-burst and started again, and the store's account shows the wallet never went past its
// limit, every answered request is recorded once, and no lease is left outstanding.
#include <gtest/gtest.h>
#include <signal.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/json.h"
#include "fakes/eventually.h"
#include "fakes/postgres.h"
#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/serve.h"
#include "fakes/temp_dir.h"
#include "integration/fleet_harness.h"

namespace purser {
namespace {

using testing::Process;

constexpr const char* kAdminKey = "replicas-test-admin-key-0123456789";

int64_t asInt(const std::string& s) {
  try {
    return s.empty() ? 0 : std::stoll(s);
  } catch (const std::exception&) {
    return -1;
  }
}

// `purser sim llm` serving model "m" at once, kept in `sim`; the chat route to it
// (chatRouteConfig), or "" when it did not start (a failure is added, saying why).
std::string startModel(std::unique_ptr<Process>& sim) {
  sim = std::make_unique<Process>(std::vector<std::string>{
      PURSER_BINARY, "sim", "llm", "--listen", "127.0.0.1:0", "--models", "m", "--ttft-ms", "0"});
  auto line = sim->waitForStdout("listening on ");
  if (!line) {
    ADD_FAILURE() << "the simulated model server did not start: " << sim->err();
    return "";
  }
  return testing::chatRouteConfig(testing::portFromListeningLine(*line));
}

TEST(ReplicasTest, ReplicasOnOnePostgresNeverOverspendAHardWalletEvenWhenOneIsKilled) {
  testing::PostgresServer pg;
  if (!pg.available()) GTEST_SKIP() << pg.why();
  ASSERT_TRUE(pg.createDatabase("purser"));
  std::unique_ptr<Process> sim;
  const std::string route = startModel(sim);
  ASSERT_FALSE(route.empty());
  const std::string config =
      fmt::format("store: {{postgres: \"{}\", lease_ttl: 20s}}\n", pg.url("purser")) + route;

  constexpr int kReplicas = 3;
  std::vector<std::unique_ptr<testing::TempDir>> dirs;
  std::vector<testing::Served> served;
  for (int i = 0; i < kReplicas; ++i) dirs.push_back(std::make_unique<testing::TempDir>());
  served.push_back(testing::startServe(PURSER_BINARY, *dirs[0], config, kAdminKey));
  ASSERT_NE(served[0].port, 0) << served[0].process->err();
  // Tenants, keys and wallets are made before the other replicas start, which read them then
  // (changes made later reach other replicas only at their next start for now).
  const testing::Member member = testing::seedMember(served[0].port, kAdminKey);
  ASSERT_FALSE(member.key.empty());
  auto wallet = testing::callJson(
      served[0].port, "POST", "/api/v1/wallets",
      {std::string("Authorization: Bearer ") + kAdminKey},
      writeJson(Json{{"scope", {{"kind", "user"}, {"id", member.user}}}, {"limit", "0.05"}}));
  ASSERT_EQ(wallet.status, 201) << wallet.body;
  const std::string wallet_id = parseJsonOrDiscarded(wallet.body).value("id", "");
  ASSERT_FALSE(wallet_id.empty());
  constexpr int64_t kLimitNanos = 50'000'000;
  // One replica runs the fleet engine; the others do not.
  const std::string follower = config + "fleet: {enabled: false}\n";
  for (int i = 1; i < kReplicas; ++i) {
    served.push_back(testing::startServe(PURSER_BINARY, *dirs[i], follower, kAdminKey));
    ASSERT_NE(served[i].port, 0) << served[i].process->err();
  }
  std::vector<uint16_t> ports;
  for (const auto& s : served) ports.push_back(s.port);

  const std::string chat =
      R"({"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":5})";
  std::atomic<int> ok{0}, budget{0}, other{0};
  std::atomic<bool> killed{false};
  std::mutex kill_mu;
  // Twelve clients spread requests over the replicas until the wallet keeps refusing. With
  // `kill`, replica 1 is killed with SIGKILL once 30 requests were answered.
  const auto burst = [&](bool kill) {
    std::vector<std::thread> clients;
    for (int c = 0; c < 12; ++c) {
      clients.emplace_back([&, c] {
        int refused_in_a_row = 0;
        // Bounded by work: at most 600 requests a client.
        for (int n = 0; n < 600 && refused_in_a_row < 30; ++n) {
          int at = (c + n) % kReplicas;
          if (at == 1 && killed) at = 0;
          auto r = testing::callJson(ports[at], "POST", "/v1/chat/completions",
                                     {"Authorization: Bearer " + member.key}, chat);
          if (r.status == 200) {
            ++ok;
            refused_in_a_row = 0;
          } else if (r.status == 429 && r.body.find("budget") != std::string::npos) {
            ++budget;
            ++refused_in_a_row;
          } else {
            ++other;  // the killed replica's requests in flight
          }
          if (kill && ok >= 30 && !killed) {
            std::lock_guard lock(kill_mu);
            if (!killed) {
              served[1].process->signal(SIGKILL);
              (void)served[1].process->wait();
              killed = true;
            }
          }
        }
      });
    }
    for (auto& t : clients) t.join();
  };
  burst(/*kill=*/true);
  ASSERT_TRUE(killed);
  EXPECT_GT(ok, 30);

  // The killed replica starts again on its own data directory: it replays its journal, adopts its
  // leases and charges what it cut off by the recovery rule. The burst goes on over all three
  // (the slice the killed replica held was out of reach while it was down, until its lease
  // lapsed).
  served[1] = testing::startServe(PURSER_BINARY, *dirs[1], follower, kAdminKey);
  ASSERT_NE(served[1].port, 0) << served[1].process->err();
  ports[1] = served[1].port;
  killed = false;
  burst(/*kill=*/false);
  EXPECT_GT(budget, 0) << "the burst never reached the wallet's limit";
  for (auto& s : served) {
    auto w = testing::callJson(s.port, "GET", "/api/v1/wallets",
                               {std::string("Authorization: Bearer ") + kAdminKey});
    ASSERT_EQ(w.status, 200) << w.body;
    const Json list = parseJsonOrDiscarded(w.body);
    bool seen = false;
    for (const auto& item : list.value("data", Json::array())) {
      if (item.value("id", "") != wallet_id) continue;
      seen = true;
      EXPECT_EQ(item.value("reserved", "?"), "0.00") << w.body;
    }
    EXPECT_TRUE(seen) << w.body;
  }
  for (auto& s : served) {
    s.process->signal(SIGTERM);
    EXPECT_EQ(s.process->wait(), 0) << s.process->err();
  }

  const int64_t spent = asInt(pg.query("purser",
                                       "SELECT COALESCE(SUM(cost_nanos), 0) FROM wallet_spend WHERE"
                                       " wallet_id = '" +
                                           wallet_id + "'"));
  const int64_t answered = asInt(pg.query("purser",
                                          "SELECT COUNT(*) FROM usage_events WHERE status = 200 AND"
                                          " recovered = 0 AND user_id = '" +
                                              member.user + "'"));
  const int64_t over_used =
      asInt(pg.query("purser",
                     "SELECT COALESCE(SUM(used_nanos - granted_nanos), 0) FROM wallet_leases"
                     " WHERE used_nanos > granted_nanos"));
  const int64_t leased =
      asInt(pg.query("purser",
                     "SELECT COALESCE(SUM(granted_nanos - used_nanos), 0) FROM wallet_leases"
                     " WHERE granted_nanos > used_nanos"));
  const int64_t overage =
      asInt(pg.query("purser", "SELECT COALESCE(SUM(overage_nanos), 0) FROM usage_events"));
  fmt::print(stderr,
             "replicas: {} answered, {} refused by the budget, {} other; spent {} of {} nanos\n",
             ok.load(), budget.load(), other.load(), spent, kLimitNanos);
  EXPECT_LE(spent, kLimitNanos) << "the replicas together overspent the hard wallet";
  EXPECT_GT(spent, kLimitNanos * 9 / 10) << "the wallet was not spent to near its limit";
  // Every answered request is recorded, once (the killed replica's from its journal). A request
  // the killed replica finished and journaled just before the kill, whose answer the kill then
  // cut off, is recorded too: the client counted it among the others. So at least every answer,
  // and at most one more for each request the kill cut off.
  EXPECT_GE(answered, ok.load()) << "an answered request was not recorded";
  EXPECT_LE(answered, ok.load() + other.load());
  EXPECT_EQ(over_used, 0);
  EXPECT_EQ(leased, 0) << "every replica gives its free part back when it stops";
  EXPECT_EQ(overage, 0);
}

// A store that hangs (its host frozen: connections open, nothing answers) holds no worker and no
// health check: /healthz and /readyz answer at once throughout, /readyz says the store does not
// answer within seconds, and once the store is back it says so again.
TEST(ReplicasTest, AStoreThatHangsHoldsNoWorkerAndNoHealthCheck) {
  testing::PostgresServer pg;
  if (!pg.available()) GTEST_SKIP() << pg.why();
  ASSERT_TRUE(pg.createDatabase("purser"));
  const std::string config = fmt::format(
      "store: {{postgres: \"{}\", lease_ttl: 60s}}\nfleet: {{enabled: false}}\n", pg.url("purser"));
  testing::TempDir dir;
  testing::Served a = testing::startServe(PURSER_BINARY, dir, config, kAdminKey);
  ASSERT_NE(a.port, 0) << a.process->err();
  const auto readyz = [&] { return testing::callJson(a.port, "GET", "/readyz", {}); };
  testing::RawResponse ready = readyz();
  ASSERT_EQ(ready.status, 200) << ready.body;
  ASSERT_EQ(ready.body.find("degraded"), std::string::npos) << ready.body;
  ASSERT_TRUE(pg.freeze());
  // Every answer comes (a worker waiting on the store would leave the client's read to time out:
  // status 0); within a few checks it says the store does not answer.
  EXPECT_TRUE(testing::eventually(
      [&] {
        ready = readyz();
        EXPECT_NE(ready.status, 0) << "/readyz did not answer while the store hung";
        return ready.status == 0 || ready.body.find("has not answered") != std::string::npos;
      },
      {.attempts = 1000, .what = "/readyz says the store does not answer"}));
  EXPECT_EQ(ready.status, 200) << "degraded, still ready: " << ready.body;
  EXPECT_EQ(testing::callJson(a.port, "GET", "/healthz", {}).status, 200);
  auto metrics = testing::callJson(a.port, "GET", "/metrics", {});
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("purser_store_up 0"), std::string::npos);
  pg.thaw();
  EXPECT_TRUE(testing::eventually(
      [&] {
        ready = readyz();
        return ready.status == 200 && ready.body.find("degraded") == std::string::npos;
      },
      {.attempts = 1000, .what = "/readyz says the store is back"}));
}

// A model request whose hold must ask the store first (its key's rate limit is shared between
// replicas, and this replica holds none of it yet) while the store hangs waits off the workers:
// with one worker, the health check and the model list keep answering meanwhile, and the request
// itself is answered once the store is back. (Before, the worker waited on the store, and every
// connection on it with it.)
TEST(ReplicasTest, ARequestWaitingOnAHungStoreHoldsNoWorker) {
  testing::PostgresServer pg;
  if (!pg.available()) GTEST_SKIP() << pg.why();
  ASSERT_TRUE(pg.createDatabase("purser"));
  std::unique_ptr<Process> sim;
  const std::string route = startModel(sim);
  ASSERT_FALSE(route.empty());
  const std::string config =
      fmt::format("store: {{postgres: \"{}\", lease_ttl: 60s}}\nfleet: {{enabled: false}}\n",
                  pg.url("purser")) +
      route;
  testing::TempDir dir;
  testing::Served a = testing::startServe(PURSER_BINARY, dir, config, kAdminKey, /*threads=*/1);
  ASSERT_NE(a.port, 0) << a.process->err();
  const testing::Member member = testing::seedMember(a.port, kAdminKey);
  auto limited = testing::callJson(
      a.port, "POST", "/api/v1/keys", {std::string("Authorization: Bearer ") + kAdminKey},
      writeJson(Json{
          {"owner", {{"kind", "user"}, {"id", member.user}}}, {"name", "limited"}, {"rpm", 600}}));
  ASSERT_EQ(limited.status, 201) << limited.body;
  const std::string key = parseJsonOrDiscarded(limited.body).value("key", "");
  ASSERT_FALSE(key.empty());
  ASSERT_TRUE(pg.freeze());
  testing::RawResponse waited;
  std::thread waiting([&] {
    waited = testing::callJson(
        a.port, "POST", "/v1/chat/completions", {"Authorization: Bearer " + key},
        R"({"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":5})");
  });
  // Bounded by work: 100 checks, each on a connection of its own (one worker serves them all; the
  // waiting request's client gives up after 20 s, so they must not take that long).
  int answered = 0;
  for (int i = 0; i < 100; ++i) {
    const bool models = i % 2 == 1;
    auto r =
        testing::callJson(a.port, "GET", models ? "/v1/models" : "/healthz",
                          models ? std::vector<std::string>{"Authorization: Bearer " + member.key}
                                 : std::vector<std::string>{});
    if (r.status != 200) {
      ADD_FAILURE() << "check " << i << " got " << r.status << " while a request waited on the "
                    << "store: " << r.body;
      break;
    }
    ++answered;
  }
  EXPECT_EQ(answered, 100);
  pg.thaw();
  waiting.join();
  EXPECT_EQ(waited.status, 200) << waited.body;
}

// The store readers are fair between tenants, end to end: while the store hangs, a platform admin
// floods the audit log; their reads fill only their share of store.read_queue (one runs, a quarter
// of 8 wait, the rest are told 503 at once), and a member of another tenant asking for their usage
// is not refused: it waits its turn, and is answered once the store is back. (With one queue for
// everyone, the flood filled it and the member was told 503.)
TEST(ReplicasTest, AFloodOfOneTenantsReadsLeavesAnotherTenantsReadItsPlace) {
  testing::PostgresServer pg;
  if (!pg.available()) GTEST_SKIP() << pg.why();
  ASSERT_TRUE(pg.createDatabase("purser"));
  const std::string config = fmt::format(
      "store: {{postgres: \"{}\", readers: 1, read_queue: 8}}\nfleet: {{enabled: false}}\n",
      pg.url("purser"));
  testing::TempDir dir;
  testing::Served a = testing::startServe(PURSER_BINARY, dir, config, kAdminKey);
  ASSERT_NE(a.port, 0) << a.process->err();
  const testing::Member member = testing::seedMember(a.port, kAdminKey);
  ASSERT_FALSE(member.key.empty());
  ASSERT_TRUE(pg.freeze());
  constexpr int kFlood = 12;
  std::atomic<int> refused{0}, answered{0};
  std::mutex refusal_mu;
  std::string refusal;  // a refused read's problem, which says why (not "internal error")
  std::vector<std::thread> flood;
  for (int i = 0; i < kFlood; ++i) {
    flood.emplace_back([&] {
      auto r = testing::callJson(a.port, "GET", "/api/v1/audit?limit=1",
                                 {std::string("Authorization: Bearer ") + kAdminKey});
      if (r.status == 503) {
        std::lock_guard lock(refusal_mu);
        refusal = r.body;
      }
      ++(r.status == 503 ? refused : answered);
    });
  }
  // (Expected, not asserted, here and below: the store is thawed and every thread joined first.)
  EXPECT_TRUE(testing::eventually([&] { return refused.load() == kFlood - 3; },
                                  {.attempts = 2000,
                                   .pause = std::chrono::milliseconds(5),
                                   .what = "the flood's reads beyond its share refused"}));
  {
    std::lock_guard lock(refusal_mu);
    EXPECT_NE(refusal.find("reads of yours already wait for its store readers"), std::string::npos)
        << refusal;
  }
  std::atomic<bool> done{false};
  testing::RawResponse mine;
  std::thread reader([&] {
    mine = testing::callJson(a.port, "GET", "/api/v1/usage?scope=user:" + member.user,
                             {"Authorization: Bearer " + member.key});
    done = true;
  });
  // Bounded by work: a hundred round trips to the same server meanwhile, and the member's read is
  // still waiting (a refusal comes back at once: this failed before the queues were per tenant).
  for (int i = 0; i < 100; ++i) {
    const int status = testing::callJson(a.port, "GET", "/healthz", {}).status;
    if (status != 200) {
      ADD_FAILURE() << "/healthz answered " << status << " while the store hung";
      break;
    }
  }
  EXPECT_FALSE(done.load()) << "the member's read was answered while the store hung: "
                            << mine.status << " " << mine.body;
  pg.thaw();
  reader.join();
  for (auto& t : flood) t.join();
  EXPECT_EQ(mine.status, 200) << mine.body;
  EXPECT_EQ(refused.load(), kFlood - 3);
  EXPECT_EQ(answered.load(), 3);
}

TEST(ReplicasTest, WithPostgresDownReplicasServeFromTheirLeasesThenRefuseClearlyAndLoseNothing) {
  testing::PostgresServer pg;
  if (!pg.available()) GTEST_SKIP() << pg.why();
  ASSERT_TRUE(pg.createDatabase("purser"));
  std::unique_ptr<Process> sim;
  const std::string route = startModel(sim);
  ASSERT_FALSE(route.empty());
  const std::string config =
      fmt::format("store: {{postgres: \"{}\", lease_ttl: 60s}}\n", pg.url("purser")) + route;
  testing::TempDir dir_a, dir_b;
  testing::Served a = testing::startServe(PURSER_BINARY, dir_a, config, kAdminKey);
  ASSERT_NE(a.port, 0) << a.process->err();
  const testing::Member member = testing::seedMember(a.port, kAdminKey);
  auto wallet = testing::callJson(
      a.port, "POST", "/api/v1/wallets", {std::string("Authorization: Bearer ") + kAdminKey},
      writeJson(Json{{"scope", {{"kind", "user"}, {"id", member.user}}}, {"limit", "1.00"}}));
  ASSERT_EQ(wallet.status, 201) << wallet.body;
  testing::Served b =
      testing::startServe(PURSER_BINARY, dir_b, config + "fleet: {enabled: false}\n", kAdminKey);
  ASSERT_NE(b.port, 0) << b.process->err();
  const std::string chat =
      R"({"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":5})";
  const auto call = [&](uint16_t port) {
    return testing::callJson(port, "POST", "/v1/chat/completions",
                             {"Authorization: Bearer " + member.key}, chat);
  };
  int answered = 0;
  // Each replica takes a lease.
  for (int i = 0; i < 10; ++i) {
    for (uint16_t port : {a.port, b.port}) {
      auto r = call(port);
      ASSERT_EQ(r.status, 200) << r.body;
      ++answered;
    }
  }
  ASSERT_TRUE(pg.stop(/*immediate=*/true));
  // Still ready (a load balancer keeps both), and says why it is degraded once its store check
  // (every second, off the workers) has seen the store go.
  testing::RawResponse ready;
  EXPECT_TRUE(testing::eventually(
      [&] {
        ready = testing::callJson(a.port, "GET", "/readyz", {});
        return ready.status != 200 || ready.body.find("degraded") != std::string::npos;
      },
      {.attempts = 1000, .what = "/readyz says degraded"}));
  EXPECT_EQ(ready.status, 200) << ready.body;
  EXPECT_NE(ready.body.find("degraded"), std::string::npos) << ready.body;
  // Served from the leases until they run out, then refused with a clear, retryable error.
  int served_down = 0;
  std::string refusal;
  for (int i = 0; i < 5000 && refusal.empty(); ++i) {
    auto r = call(i % 2 == 0 ? a.port : b.port);
    if (r.status == 200) {
      ++served_down;
      ++answered;
    } else {
      EXPECT_EQ(r.status, 503) << r.body;
      refusal = r.body;
    }
  }
  EXPECT_GT(served_down, 0) << "nothing was served from the leases";
  EXPECT_NE(refusal.find("store cannot be reached"), std::string::npos) << refusal;
  // Back up: what was answered meanwhile reaches the store (the journals ship it), and serving
  // goes on.
  ASSERT_TRUE(pg.start());
  bool back = false;
  for (int i = 0; i < 200 && !back; ++i) {
    auto r = call(a.port);
    if (r.status == 200) {
      back = true;
      ++answered;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  EXPECT_TRUE(back) << "replica a did not serve again after PostgreSQL came back";
  for (auto* s : {&a, &b}) {
    s->process->signal(SIGTERM);
    EXPECT_EQ(s->process->wait(), 0) << s->process->err();
  }
  EXPECT_EQ(asInt(pg.query("purser", "SELECT COUNT(*) FROM usage_events WHERE status = 200")),
            answered);
  const int64_t spent =
      asInt(pg.query("purser",
                     "SELECT COALESCE(SUM(cost_nanos), 0) FROM"
                     " wallet_spend WHERE wallet_id = '" +
                         parseJsonOrDiscarded(wallet.body).value("id", "") + "'"));
  EXPECT_LE(spent, 1'000'000'000);
  EXPECT_EQ(asInt(pg.query("purser",
                           "SELECT COALESCE(SUM(used_nanos - granted_nanos), 0) FROM"
                           " wallet_leases WHERE used_nanos > granted_nanos")),
            0);
}

// Two replicas may run the fleet: A leads, B follows and forwards the fleet's API to A. A is
// killed with SIGKILL while workloads run and right after more were submitted; B takes the lead,
// adopts the pods A started, starts what A had not, and no workload starts twice or is lost.
TEST(ReplicasTest, WhenTheFleetLeaderIsKilledAnotherTakesOverAndNoWorkloadStartsTwiceOrIsLost) {
  testing::PostgresServer pg;
  if (!pg.available()) GTEST_SKIP() << pg.why();
  ASSERT_TRUE(pg.createDatabase("purser"));
  // The local pods' logs and the teams' workspaces, both replicas' (a pod notes its start in its
  // team's workspace).
  testing::TempDir shared;
  const std::string starts = shared.file("work/ml/starts.txt");
  const std::string config = fmt::format(
      "store: {{postgres: \"{}\"}}\n"
      "fleet:\n  manifests: [fleet.yaml]\n  leader_check: 200ms\n"
      "  local: {{log_dir: \"{}\", working_dir: \"{}\"}}\n",
      pg.url("purser"), shared.file("pods"), shared.file("work"));
  testing::TempDir dir_a, dir_b;
  for (const auto* d : {&dir_a, &dir_b}) {
    testing::writeFile(d->file("fleet.yaml"), testing::fleetManifests(64));
  }
  testing::Served a = testing::startServe(PURSER_BINARY, dir_a, config, kAdminKey);
  ASSERT_NE(a.port, 0) << a.process->err();
  const testing::Member member = testing::seedMember(a.port, kAdminKey);
  ASSERT_FALSE(member.key.empty());
  testing::Served b = testing::startServe(PURSER_BINARY, dir_b, config, kAdminKey);
  ASSERT_NE(b.port, 0) << b.process->err();
  const auto leads = [](uint16_t port) {
    auto m = testing::callJson(port, "GET", "/metrics", {});
    return m.body.find("\npurser_fleet_leader 1") != std::string::npos;
  };
  EXPECT_TRUE(leads(a.port));
  EXPECT_FALSE(leads(b.port));

  const std::string auth = "Authorization: Bearer " + member.key;
  // Each pod notes its start in the shared file, then runs for a while.
  const auto workload = [&](const std::string& name, int seconds) {
    return writeJson(
        Json{{"name", name},
             {"queue", "research"},
             {"pod_sets",
              {{{"name", "main"},
                {"requests", {{"cpu", "1"}, {"nvidia.com/gpu", "1"}}},
                {"command",
                 {"sh", "-c", fmt::format("echo {} >> starts.txt; sleep {}", name, seconds)}}}}}});
  };
  // Submitted through B: forwarded to A, which leads.
  std::vector<std::string> names;
  for (int i = 0; i < 4; ++i) {
    names.push_back(fmt::format("early-{}", i));
    auto r =
        testing::callJson(b.port, "POST", "/api/v1/workloads", {auth}, workload(names.back(), 4));
    ASSERT_LT(r.status, 300) << r.body;
    EXPECT_EQ(r.header("x-purser-fleet-leader").empty(), false) << "forwarded to the leader";
  }
  const auto state_on = [&](uint16_t port, const std::string& name) {
    auto r = testing::callJson(port, "GET", "/api/v1/workloads/ml/" + name, {auth});
    return parseJsonOrDiscarded(r.body).value("state",
                                              std::string("?(") + std::to_string(r.status) + ")");
  };
  // Bounded by work: at most 400 looks, 25 ms apart; what it saw last (its callers check it).
  const auto until = [&](uint16_t port, const std::string& name, const std::string& want) {
    std::string seen;
    testing::eventually(
        [&] {
          seen = state_on(port, name);
          return seen == want;
        },
        {.attempts = 400, .pause = std::chrono::milliseconds(25), .what = "the state wanted"});
    return seen;
  };
  for (const auto& n : names) ASSERT_EQ(until(a.port, n, "running"), "running") << n;

  // More work goes to A directly, one after another, and A is killed while it comes in: some of
  // it acknowledged, some cut off mid-submission.
  std::atomic<int> acknowledged{0};
  std::vector<std::string> late_acked, late_tried;
  std::thread submitter([&] {
    for (int i = 0; i < 40; ++i) {
      const std::string name = fmt::format("late-{}", i);
      late_tried.push_back(name);
      auto r = testing::callJson(a.port, "POST", "/api/v1/workloads", {auth}, workload(name, 2));
      if (r.status == 0) break;  // A is gone
      if (r.status < 300) {
        late_acked.push_back(name);
        ++acknowledged;
      }
    }
  });
  // (Not checked here: what was acknowledged is, once the submitter is done.)
  testing::eventually([&] { return acknowledged >= 2; },
                      {.attempts = 4000,
                       .pause = std::chrono::milliseconds(1),
                       .what = "two late submissions acknowledged"});
  a.process->signal(SIGKILL);
  (void)a.process->wait();
  submitter.join();
  ASSERT_GE(late_acked.size(), 2u);
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::eventually(
      [&] { return leads(b.port); },
      {.attempts = 2000, .pause = std::chrono::milliseconds(5), .what = "replica B to lead"}))
      << b.process->err();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - killed_at);
  fmt::print(stderr, "fleet fail-over: replica B led {} ms after A was killed\n", took.count());

  // Every acknowledged workload ends, having started once; one cut off mid-submission either
  // is known and does the same, or is unknown and never started.
  for (const auto& n : late_acked) names.push_back(n);
  for (const auto& n : names) EXPECT_EQ(until(b.port, n, "succeeded"), "succeeded") << n;
  std::vector<std::string> unknown;
  for (const auto& n : late_tried) {
    if (std::find(late_acked.begin(), late_acked.end(), n) != late_acked.end()) continue;
    const std::string st = state_on(b.port, n);
    if (st.starts_with("?")) {
      unknown.push_back(n);
    } else {
      EXPECT_EQ(until(b.port, n, "succeeded"), "succeeded") << n;
      names.push_back(n);
    }
  }
  std::map<std::string, int> started;
  {
    std::istringstream lines(testing::readFile(starts));
    for (std::string l; std::getline(lines, l);) ++started[l];
  }
  const auto times = [&](const std::string& n) {
    auto it = started.find(n);
    return it == started.end() ? 0 : it->second;
  };
  for (const auto& n : names) EXPECT_EQ(times(n), 1) << n << " started " << times(n) << " times";
  for (const auto& n : unknown) EXPECT_EQ(times(n), 0) << n << " is unknown yet started";
  EXPECT_EQ(started.size(), names.size()) << "only the workloads known ran";
  fmt::print(stderr,
             "fleet fail-over: {} workloads ran once each ({} acknowledged by A just "
             "before it died), {} cut off unknown\n",
             names.size(), late_acked.size(), unknown.size());

  // A comes back as a follower; B keeps the lead, and A forwards to it.
  a = testing::startServe(PURSER_BINARY, dir_a, config, kAdminKey);
  ASSERT_NE(a.port, 0) << a.process->err();
  EXPECT_FALSE(leads(a.port));
  EXPECT_TRUE(leads(b.port));
  EXPECT_EQ(state_on(a.port, names[0]), "succeeded");
  for (auto* s : {&a, &b}) {
    s->process->signal(SIGTERM);
    EXPECT_EQ(s->process->wait(), 0) << s->process->err();
  }
}

TEST(ReplicasTest, WhatAnAdminChangesOnOneReplicaTakesEffectOnTheOthers) {
  testing::PostgresServer pg;
  if (!pg.available()) GTEST_SKIP() << pg.why();
  ASSERT_TRUE(pg.createDatabase("purser"));
  std::unique_ptr<Process> sim;
  const std::string route = startModel(sim);
  ASSERT_FALSE(route.empty());
  const std::string config = fmt::format("store: {{postgres: \"{}\"}}\n", pg.url("purser")) + route;
  testing::TempDir dir_a, dir_c;
  testing::Served a = testing::startServe(PURSER_BINARY, dir_a, config, kAdminKey);
  ASSERT_NE(a.port, 0) << a.process->err();
  testing::Served c =
      testing::startServe(PURSER_BINARY, dir_c, config + "fleet: {enabled: false}\n", kAdminKey);
  ASSERT_NE(c.port, 0) << c.process->err();
  const std::string chat =
      R"({"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":5})";
  const auto status_on = [&](uint16_t port, const std::string& key) {
    return testing::callJson(port, "POST", "/v1/chat/completions", {"Authorization: Bearer " + key},
                             chat)
        .status;
  };
  // Polls C until `want` (bounded by work: at most 600 tries, 50 ms apart); the tries it took.
  const auto until_on_c = [&](const std::string& key, int want) {
    int tries = -1;
    const bool worked = testing::eventually(
        [&] {
          ++tries;
          return status_on(c.port, key) == want;
        },
        {.attempts = 600, .pause = std::chrono::milliseconds(50), .what = "C's answer wanted"});
    return worked ? tries : -1;
  };
  // Everything made on A, after C started.
  const testing::Member member = testing::seedMember(a.port, kAdminKey);
  ASSERT_FALSE(member.key.empty());
  EXPECT_GE(until_on_c(member.key, 200), 0) << "a key made on A never worked on C";
  auto made = testing::callJson(
      a.port, "POST", "/api/v1/keys", {std::string("Authorization: Bearer ") + kAdminKey},
      writeJson(Json{{"owner", {{"kind", "user"}, {"id", member.user}}}, {"name", "second"}}));
  ASSERT_EQ(made.status, 201) << made.body;
  const Json key = parseJsonOrDiscarded(made.body);
  const std::string secret = key.value("key", "");
  EXPECT_GE(until_on_c(secret, 200), 0);
  // Revoked on A: refused on C.
  auto revoked = testing::callJson(a.port, "DELETE", "/api/v1/keys/" + key.value("id", ""),
                                   {std::string("Authorization: Bearer ") + kAdminKey});
  ASSERT_LT(revoked.status, 300) << revoked.body;
  const int tries = until_on_c(secret, 401);
  EXPECT_GE(tries, 0) << "a key revoked on A was still accepted on C";
  fmt::print(stderr, "replicas: the revoked key was refused on C after {} tries 50 ms apart\n",
             tries);
  EXPECT_EQ(status_on(c.port, member.key), 200) << "the other key still works";
  // A hard wallet of nothing made on A: C refuses the member's requests as over budget.
  auto wallet = testing::callJson(
      a.port, "POST", "/api/v1/wallets", {std::string("Authorization: Bearer ") + kAdminKey},
      writeJson(Json{{"scope", {{"kind", "user"}, {"id", member.user}}}, {"limit", "0"}}));
  ASSERT_EQ(wallet.status, 201) << wallet.body;
  EXPECT_GE(until_on_c(member.key, 429), 0) << "C never enforced the wallet made on A";
  for (auto* s : {&a, &c}) {
    s->process->signal(SIGTERM);
    EXPECT_EQ(s->process->wait(), 0) << s->process->err();
  }
}

}  // namespace
}  // namespace purser
