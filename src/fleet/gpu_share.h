// A pod's GPU request as HAMi spells it (nvidia.com/gpu, nvidia.com/gpumem,
// nvidia.com/gpumem-percentage, nvidia.com/gpucores), what share of a GPU it takes for placement,
// and the environment an executor sets so HAMi-core holds the pod to it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "fleet/model.h"

namespace purser::fleet {

struct GpuRequest {
  int count = 0;           // GPUs (vGPUs), each on a distinct physical GPU
  int64_t memory_mib = 0;  // per GPU; 0 with memory_percent 0: the whole memory
  int memory_percent = 0;  // per GPU, 1..100; exclusive with memory_mib
  int cores_percent = 0;   // per GPU, 1..100; 0: no limit on its compute
  bool whole() const { return memory_mib == 0 && memory_percent == 0 && cores_percent == 0; }
};

// From per-pod requests in milli-units (model.h). Errors name the resource: memory in both MiB
// and percent, percentages outside 1..100, fractions of a GPU count or of a MiB, or shares
// without nvidia.com/gpu.
Result<GpuRequest> gpuRequestOf(const Resources& per_pod);

// The share of one GPU's memory (of `gpu_memory_mib`) the request takes, in thousandths: 1000
// for a whole GPU, and, as in HAMi, for a share that names no memory. Its compute
// (cores_percent) is a second budget of the GPU, kept apart. Errors when it asks for more
// memory than the GPU has.
Result<int64_t> shareMilli(const GpuRequest& request, int64_t gpu_memory_mib);

struct AssignedGpu {
  int index = 0;     // on the node
  std::string uuid;  // empty: unknown (indices are used)
};

// What an executor exports for a pod placed on `gpus`: CUDA_VISIBLE_DEVICES (UUIDs when all
// are known, else indices) and, for shares, HAMi-core's CUDA_DEVICE_MEMORY_LIMIT (per visible
// device, CUDA_DEVICE_MEMORY_LIMIT_<k>, in MiB as "<n>m") and CUDA_DEVICE_SM_LIMIT (percent).
std::vector<std::pair<std::string, std::string>> executorEnv(const GpuRequest& request,
                                                             const std::vector<AssignedGpu>& gpus,
                                                             int64_t gpu_memory_mib);

}  // namespace purser::fleet
