// What the tests of running workloads share: the Kueue objects they run under, a `purser serve`
// on loopback, requests to its API, a team member to submit as, and waits that poll the API,
// bounded by a count (a hang fails instead of hanging), never by timing.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "fakes/eventually.h"
#include "fakes/kueue_manifest.h"
#include "fakes/process.h"
#include "fakes/raw_client.h"
#include "fakes/temp_dir.h"

namespace purser::testing {

// ResourceFlavor h100; ClusterQueue research (`cpus` CPUs, 8 GPUs, preempting lower priorities
// within it); LocalQueue ml/research; WorkloadPriorityClasses low (-10) and urgent (1000).
inline std::string fleetManifests(int cpus) {
  testing::KueueQueue q;
  q.preemption = "withinClusterQueue: LowerPriority";
  q.quota = {{"cpu", std::to_string(cpus)}, {"nvidia.com/gpu", "8"}};
  q.priority_classes = {{"low", -10}, {"urgent", 1000}};
  return q.yaml();
}

// A loopback port nothing listens on now (for servers that must be told theirs: Slurm's daemons,
// a served model's replica).
inline uint16_t freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A `purser serve` of dir/purser.yaml with its data in dir/var; its port.
class FleetServer {
 public:
  FleetServer(TempDir& dir, std::string admin_key) : dir_(dir), admin_key_(std::move(admin_key)) {}
  ~FleetServer() { stop(); }

  // Starts it; false (with the server's stderr in `why`) when it did not come up.
  bool start(std::string* why = nullptr) {
    std::vector<std::string> argv = prefix_;
    for (const std::string& a :
         {binary_, std::string("serve"), std::string("--config"), dir_.file("purser.yaml"),
          std::string("--data"), dir_.file("var")}) {
      argv.push_back(a);
    }
    std::vector<std::string> env = {"PURSER_ADMIN_KEY=" + admin_key_};
    env.insert(env.end(), env_.begin(), env_.end());
    process_ = std::make_unique<Process>(argv, "", env);
    auto line = process_->waitForStdout("purser: listening on ");
    if (!line) {
      process_->signal(SIGKILL);  // (it has exited, or hung before listening)
      process_->wait();           // all it said, once it has ended
      if (why) *why = process_->err();
      process_.reset();
      return false;
    }
    port_ = static_cast<uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
    return true;
  }
  // SIGTERM (a graceful stop); its exit code. A server that has not exited after a generous
  // bound (it drains, then stops) is a failure, reported with what its threads were doing.
  int stop() {
    if (!process_) return 0;
    process_->signal(SIGTERM);
    const std::string stat = "/proc/" + std::to_string(process_->pid()) + "/stat";
    if (!eventually([&] { return exited(stat); }, {.attempts = 6000,
                                                   .pause = std::chrono::milliseconds(10),
                                                   .what = "purser's exit after SIGTERM"})) {
      Process gdb({"/usr/bin/gdb", "-batch", "-p", std::to_string(process_->pid()), "-ex",
                   "thread apply all bt 25"});
      gdb.wait();
      process_->signal(SIGKILL);
      process_->wait();
      const std::string log = process_->err();
      ADD_FAILURE() << "purser did not stop within 60 s of SIGTERM; its threads:\n"
                    << gdb.out() << gdb.err() << "\nthe end of its log:\n"
                    << log.substr(log.size() > 4000 ? log.size() - 4000 : 0);
    }
    const int code = process_->wait();
    process_.reset();
    return code;
  }
  // Reads its log (stderr) until a line holds `needle`: that line, or nullopt.
  std::optional<std::string> logLine(const std::string& needle) {
    return process_ ? process_->waitForStderr(needle) : std::nullopt;
  }
  // SIGKILL: no chance to clean up; its exit status.
  int kill() {
    process_->signal(SIGKILL);
    const int code = process_->wait();
    process_.reset();
    return code;
  }

  // One request; the answer's body as JSON (a JSON string when it is not JSON; null when none).
  nlohmann::json call(const std::string& method, const std::string& target, const std::string& key,
                      const std::string& body = "", const std::string& type = "application/json",
                      int* status = nullptr) const {
    RawClient c(port_);
    std::string req =
        method + " " + target + " HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + key + "\r\n";
    if (!body.empty()) {
      req +=
          "Content-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    }
    if (!c.send(req + "\r\n" + body)) return nullptr;
    auto r = c.readResponse();
    if (status != nullptr) *status = r ? r->status : 0;
    if (!r) return nullptr;
    nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
    return j.is_discarded() ? nlohmann::json(r->body) : j;
  }

  uint16_t port() const { return port_; }
  pid_t pid() const { return process_ ? process_->pid() : -1; }
  // Runs it as `prefix` says (setpriv, to run it as another user), `binary` instead of this
  // build's, with `env` ("NAME=value") besides its admin key.
  void runAs(std::vector<std::string> prefix, std::string binary,
             std::vector<std::string> env = {}) {
    prefix_ = std::move(prefix);
    binary_ = std::move(binary);
    env_ = std::move(env);
  }

  // Runs the CLI against this server as `key`; its exit code and what it printed.
  std::pair<int, std::string> cli(const std::vector<std::string>& args, const std::string& key) {
    std::vector<std::string> argv = {PURSER_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    Process p(argv, "",
              {"PURSER_SERVER=http://127.0.0.1:" + std::to_string(port_), "PURSER_KEY=" + key});
    const int code = p.wait();
    return {code, p.out() + p.err()};
  }

  // Tenant "acme" (granted workload priorities up to 1000, fleetManifests' "urgent"), its team
  // "ml" and member "alice"; alice's key.
  std::string member() const {
    call("POST", "/api/v1/tenants", admin_key_,
         R"({"name":"acme","priority":{"max_workload_priority":1000}})");
    call("POST", "/api/v1/teams", admin_key_, R"({"name":"ml","tenant":"acme"})");
    nlohmann::json user = call("POST", "/api/v1/users", admin_key_,
                               R"({"name":"alice","tenant":"acme","team":"ml"})");
    nlohmann::json k =
        call("POST", "/api/v1/keys", admin_key_,
             nlohmann::json{{"name", "laptop"}, {"owner", {{"kind", "user"}, {"id", user["id"]}}}}
                 .dump());
    return k.value("key", "");
  }

  nlohmann::json workload(const std::string& key, const std::string& name) const {
    return call("GET", "/api/v1/workloads/ml/" + name, key);
  }
  // Polls ml/NAME until it is in `state`; what it last was (a failure is added when it never
  // got there).
  nlohmann::json waitFor(const std::string& key, const std::string& name,
                         const std::string& state) const {
    nlohmann::json w;
    const std::string what = name + " to become " + state;
    EXPECT_TRUE(eventually(
        [&] {
          w = workload(key, name);
          return w.is_object() && w.value("state", "") == state;
        },
        {.attempts = 3000, .pause = std::chrono::milliseconds(20), .what = what.c_str()}))
        << w.dump();
    return w;
  }
  // Polls ml/NAME until its first pod's `serving` is `want` (a failure is added when it never is).
  ::testing::AssertionResult waitForServing(const std::string& key, const std::string& name,
                                            bool want) const {
    nlohmann::json w;
    const std::string what = name + "'s serving to become " + (want ? "true" : "false");
    ::testing::AssertionResult serving = eventually(
        [&] {
          w = workload(key, name);
          return w.is_object() && w["pods"].is_array() && !w["pods"].empty() &&
                 w["pods"][0].value("serving", !want) == want;
        },
        {.attempts = 3000, .pause = std::chrono::milliseconds(20), .what = what.c_str()});
    EXPECT_TRUE(serving) << w.dump();
    return serving;
  }
  // Polls the log of ml/NAME (pod "SET-INDEX", or the default one) until it holds `text`.
  bool logHolds(const std::string& key, const std::string& name, const std::string& pod,
                const std::string& text) const {
    return eventually(
        [&] {
          nlohmann::json l = call(
              "GET", "/api/v1/workloads/ml/" + name + "/logs" + (pod.empty() ? "" : "?pod=" + pod),
              key);
          return l.is_string() && l.get<std::string>().find(text) != std::string::npos;
        },
        {.attempts = 3000, .pause = std::chrono::milliseconds(20), .what = "the log's text"});
  }

 private:
  // Has the process behind /proc/PID/stat exited (a zombie, or gone)?
  static bool exited(const std::string& stat) {
    const std::string text = readFile(stat);
    const size_t close = text.rfind(')');
    return close == std::string::npos || close + 2 >= text.size() || text[close + 2] == 'Z';
  }

  TempDir& dir_;
  const std::string admin_key_;
  std::unique_ptr<Process> process_;
  uint16_t port_ = 0;
  std::vector<std::string> prefix_;
  std::string binary_ = PURSER_BINARY;
  std::vector<std::string> env_;
};

}  // namespace purser::testing
