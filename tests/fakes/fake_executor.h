// An executor whose pods are entries in memory, for the fleet service's parts' unit tests: a pod
// runs until the test ends it, an engine may be made unreachable or full, and every request is
// recorded. Not thread-safe (the parts it serves run on one thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "exec/executor.h"

namespace purser::testing {

class FakeExecutor final : public exec::Executor {
 public:
  // Started pods get handles "pod-1", "pod-2", ... (a pod it was never asked to start runs too,
  // for tests that hand a part a handle directly).
  Result<std::string> start(const exec::PodLaunch& launch) override {
    if (refuse) {
      if (auto error = refuse(launch)) return fail(*error);
    }
    const std::string handle = "pod-" + std::to_string(launches.size() + 1);
    launches.push_back(launch);
    started[handle] = launch;
    return handle;
  }
  Result<exec::PodStatus> status(const std::string& handle) override {
    if (unreachable) return fail(unavailable("the engine cannot be asked"));
    if (lost.contains(handle)) return fail(Error(ErrorCode::kNotFound, "no such pod"));
    if (auto e = ended.find(handle); e != ended.end()) return e->second;
    exec::PodStatus st;
    st.started_at = started_at;
    return st;
  }
  Result<void> stop(const std::string& handle, Duration) override {
    ++stopped[handle];
    return {};
  }
  Result<std::string> logTail(const std::string& handle, size_t max_bytes) override {
    const std::string& log = logs[handle];
    return log.size() <= max_bytes ? log : log.substr(log.size() - max_bytes);
  }
  Result<void> adopt(const exec::Adopted& pod) override {
    adopted.push_back(pod.handle);
    return {};
  }
  void forget(const std::string& handle) override { forgotten.insert(handle); }
  std::optional<std::string> address(const std::string& handle) override {
    if (auto a = addresses.find(handle); a != addresses.end()) return a->second;
    return std::nullopt;
  }

  // Pod `handle` ends: with `exit_code`, or by `signal`, for `reason`.
  void end(const std::string& handle, std::optional<int> exit_code = 0,
           std::optional<int> signal = std::nullopt, std::string reason = "") {
    exec::PodStatus st;
    st.phase = exit_code == 0 && !signal ? exec::PodPhase::kSucceeded : exec::PodPhase::kFailed;
    st.exit_code = exit_code;
    st.signal = signal;
    st.reason = std::move(reason);
    st.started_at = started_at;
    st.finished_at = started_at + runs_for;
    ended[handle] = st;
  }

  // A start this returns an error for fails with it.
  std::function<std::optional<Error>(const exec::PodLaunch&)> refuse;
  bool unreachable = false;                     // status() is kUnavailable
  std::set<std::string> lost;                   // handles status() does not know (kNotFound)
  SystemTime started_at{};                      // when every pod started, as status() says
  Duration runs_for = std::chrono::seconds(1);  // how long a pod ended by end() ran
  std::map<std::string, std::string> logs;
  std::map<std::string, std::string> addresses;  // where a pod can be reached, once it can

  std::vector<exec::PodLaunch> launches;  // every start, in order
  std::map<std::string, exec::PodLaunch> started;
  std::map<std::string, exec::PodStatus> ended;
  std::map<std::string, int> stopped;  // stop() calls per handle
  std::set<std::string> forgotten;
  std::vector<std::string> adopted;
};

}  // namespace purser::testing
