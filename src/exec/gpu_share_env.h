// What an executor does for a pod that holds a share of a GPU (CUDA_DEVICE_MEMORY_LIMIT* or
// CUDA_DEVICE_SM_LIMIT below 100 in its environment, as the placer writes them): on the local and
// Slurm executors the share is enforced inside the pod's processes by Purser's shim,
// libpurser-gpushare.so (src/gpushare), preloaded ahead of anything the pod preloads itself, with
// a region file of the pod's own through which its processes share the cap. On Kubernetes the
// cluster's HAMi enforces it: the share becomes HAMi's resources (see kubernetes_executor.cc).
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/result.h"

namespace purser::exec {

inline constexpr const char* kGpuShareLibrary = "libpurser-gpushare.so";

// Whether the environment asks for a share the shim enforces.
bool holdsGpuShare(const std::map<std::string, std::string>& env);

// The environment with the shim preloaded first (the pod's own LD_PRELOAD kept after it) and its
// region at `region` (a value the pod set is replaced: two pods must never share one). Fails when
// the pod holds a share and `library` is empty: the share would be a promise without a wall.
Result<std::map<std::string, std::string>> withGpuShare(std::map<std::string, std::string> env,
                                                        const std::string& library,
                                                        const std::string& region);

// A pod's share as HAMi's resources on Kubernetes: nvidia.com/gpumem (MiB, from
// CUDA_DEVICE_MEMORY_LIMIT), nvidia.com/gpucores (percent, from CUDA_DEVICE_SM_LIMIT below 100),
// and the GPUs Purser placed it on for the annotation nvidia.com/use-gpuuuid (when
// CUDA_VISIBLE_DEVICES names them by UUID).
struct HamiShare {
  bool held = false;
  int64_t memory_mib = 0;
  int cores_percent = 0;
  std::string uuids;
};
HamiShare hamiShareOf(const std::map<std::string, std::string>& env);

// Where the shim is installed for the program at `program`: beside it, or in ../lib/purser;
// "" when in neither.
std::string findGpuShareLibrary(const std::string& program);

}  // namespace purser::exec
