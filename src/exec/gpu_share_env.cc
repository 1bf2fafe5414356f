#include "exec/gpu_share_env.h"

#include <fmt/format.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

namespace purser::exec {

bool holdsGpuShare(const std::map<std::string, std::string>& env) {
  for (const auto& [k, v] : env) {
    if (k.starts_with("CUDA_DEVICE_MEMORY_LIMIT") && !v.empty()) return true;
    if (k.starts_with("CUDA_DEVICE_SM_LIMIT") && !v.empty() && v != "100") return true;
  }
  return false;
}

Result<std::map<std::string, std::string>> withGpuShare(std::map<std::string, std::string> env,
                                                        const std::string& library,
                                                        const std::string& region) {
  if (!holdsGpuShare(env)) return env;
  if (library.empty()) {
    return fail(Error(
        ErrorCode::kFailedPrecondition,
        fmt::format("this pod holds a share of a GPU, and the GPU share library ({}) is not "
                    "installed beside purser: the share could not be enforced, so the pod is not "
                    "started",
                    kGpuShareLibrary)));
  }
  std::string& preload = env["LD_PRELOAD"];
  preload = preload.empty() ? library : library + ":" + preload;
  env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = region;
  return env;
}

HamiShare hamiShareOf(const std::map<std::string, std::string>& env) {
  HamiShare h;
  h.held = holdsGpuShare(env);
  if (!h.held) return h;
  auto number = [](const std::string& v) -> int64_t {
    int64_t n = 0;
    size_t i = 0;
    for (; i < v.size() && v[i] >= '0' && v[i] <= '9' && n < (int64_t{1} << 40); ++i) {
      n = n * 10 + (v[i] - '0');
    }
    return i == 0 ? 0 : n;
  };
  if (auto it = env.find("CUDA_DEVICE_MEMORY_LIMIT");
      it != env.end() && it->second.ends_with("m")) {
    h.memory_mib = number(it->second);
  }
  if (auto it = env.find("CUDA_DEVICE_SM_LIMIT"); it != env.end()) {
    const int64_t p = number(it->second);
    if (p > 0 && p < 100) h.cores_percent = static_cast<int>(p);
  }
  if (auto it = env.find("CUDA_VISIBLE_DEVICES");
      it != env.end() && it->second.starts_with("GPU-")) {
    h.uuids = it->second;
  }
  return h;
}

std::string findGpuShareLibrary(const std::string& program) {
  const size_t slash = program.rfind('/');
  if (slash == std::string::npos) return {};
  const std::string dir = program.substr(0, slash);
  for (const std::string& candidate :
       {dir + "/" + kGpuShareLibrary, dir + "/../lib/purser/" + kGpuShareLibrary}) {
    char resolved[PATH_MAX];
    if (::access(candidate.c_str(), R_OK) == 0 && ::realpath(candidate.c_str(), resolved)) {
      return resolved;
    }
  }
  return {};
}

}  // namespace purser::exec
