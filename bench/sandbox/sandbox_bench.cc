// What the local pod's wall costs at start: the time from asking for a pod to its program having
// been exec'd (LocalExecutor::start returns once the exec closed its error pipe), per pod, p50 and
// p99 of N starts of /bin/true, beside a plain fork + exec of the same program (with the same
// error-pipe handshake) in the same run:
//
//   plain      fork, exec /bin/true, the exec seen through a CLOEXEC pipe
//   none       the executor without isolation (supervisor, init, pod; log and exit files)
//   accounts   Purser as root: namespaces, the view, a team's account
//   +cgroups   as accounts, with the pod's memory, cpu and pids groups made, joined and removed
//   userns     Purser as an unprivileged user (run in a child that drops to nobody): user
//              namespaces
//
//   sandbox_bench [N]   (default 200; needs root for accounts and userns)
// Prints one JSON object.
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/clock.h"
#include "exec/cgroups.h"
#include "exec/local_executor.h"
#include "exec/sandbox.h"

namespace {

using Clock = std::chrono::steady_clock;
using purser::exec::Isolation;
using purser::exec::LocalExecutor;
using purser::exec::LocalExecutorOptions;
using purser::exec::PodCgroups;
using purser::exec::PodLaunch;

struct Stats {
  double p50_ms = 0, p99_ms = 0, mean_ms = 0;
};

Stats statsOf(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  Stats s;
  if (ms.empty()) return s;
  s.p50_ms = ms[ms.size() / 2];
  s.p99_ms = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  double sum = 0;
  for (double v : ms) sum += v;
  s.mean_ms = sum / static_cast<double>(ms.size());
  return s;
}

double since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::vector<double> plainForks(int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    const auto t = Clock::now();
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) std::abort();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      const int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 1);
      char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
      ::execv("/bin/true", argv);
      const int e = errno;
      (void)!::write(p[1], &e, sizeof e);
      ::_exit(127);
    }
    ::close(p[1]);
    int e = 0;
    while (::read(p[0], &e, sizeof e) < 0 && errno == EINTR) {
    }
    ::close(p[0]);
    out.push_back(since(t));
    int st = 0;
    ::waitpid(pid, &st, 0);
  }
  return out;
}

// N starts of /bin/true on an executor of `isolation`; each pod waited for before the next.
std::vector<double> executorStarts(int n, Isolation isolation, bool cgroups,
                                   const std::string& dir) {
  purser::ManualClock clock;
  LocalExecutorOptions o;
  o.log_dir = dir + "/logs";
  o.workspace_root = dir + "/work";
  o.isolation = isolation;
  if (cgroups) o.cgroups = PodCgroups::detect();
  std::filesystem::create_directories(o.log_dir);
  std::filesystem::create_directories(o.workspace_root);
  LocalExecutor executor(clock, o);
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    PodLaunch pod;
    pod.workload = "bench/start";
    pod.pod_set = "main";
    pod.index = i;
    pod.argv = {"/bin/true"};
    pod.team = "bench";
    pod.uid = 200000;
    pod.memory_bytes = cgroups ? (64 << 20) : 0;
    pod.cpu_limit_milli = cgroups ? 1000 : 0;
    const auto t = Clock::now();
    auto h = executor.start(pod);
    const double ms = since(t);
    if (!h) {
      std::fprintf(stderr, "sandbox_bench: %s: %s\n", purser::exec::isolationName(isolation),
                   h.error().message.c_str());
      return {};
    }
    out.push_back(ms);
    (void)executor.wait(*h);
    executor.forget(*h);
  }
  return out;
}

std::string json(const char* name, const Stats& s, double plain_p50) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "\"%s\": {\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"mean_ms\": %.3f, "
                "\"p50_vs_plain\": %.2f}",
                name, s.p50_ms, s.p99_ms, s.mean_ms, plain_p50 > 0 ? s.p50_ms / plain_p50 : 0.0);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200;
  char tmpl[] = "/tmp/sandbox-bench-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const Stats plain = statsOf(plainForks(n));
  std::vector<std::string> parts = {json("plain", plain, plain.p50_ms)};
  parts.push_back(json("none", statsOf(executorStarts(n, Isolation::kNone, false, dir + "/none")),
                       plain.p50_ms));
  if (::geteuid() == 0) {
    parts.push_back(json("accounts",
                         statsOf(executorStarts(n, Isolation::kAccounts, false, dir + "/acc")),
                         plain.p50_ms));
    if (PodCgroups::detect().version() != PodCgroups::Version::kNone) {
      parts.push_back(json("accounts_cgroups",
                           statsOf(executorStarts(n, Isolation::kAccounts, true, dir + "/cg")),
                           plain.p50_ms));
    }
    // Unprivileged: in a child that drops to nobody, reporting through a pipe.
    const std::string udir = dir + "/userns";
    std::filesystem::create_directories(udir);
    ::chown(udir.c_str(), 65534, 65534);
    ::chmod(dir.c_str(), 0755);
    int p[2];
    if (::pipe(p) == 0) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(p[0]);
        if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
            ::setresuid(65534, 65534, 65534) != 0) {
          ::_exit(1);
        }
        const Stats s = statsOf(executorStarts(n, Isolation::kUserNamespace, false, udir));
        (void)!::write(p[1], &s, sizeof s);
        ::_exit(0);
      }
      ::close(p[1]);
      Stats s;
      if (::read(p[0], &s, sizeof s) == static_cast<ssize_t>(sizeof s)) {
        parts.push_back(json("userns", s, plain.p50_ms));
      }
      ::close(p[0]);
      int st = 0;
      ::waitpid(pid, &st, 0);
    }
  }
  std::filesystem::remove_all(dir);
  std::printf("{\"starts\": %d", n);
  for (const auto& part : parts) std::printf(", %s", part.c_str());
  std::printf("}\n");
  return 0;
}
