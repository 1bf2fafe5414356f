#include "fleet/gpu_share.h"

#include <fmt/format.h>

#include <algorithm>

namespace purser::fleet {

namespace {

constexpr const char* kGpu = "nvidia.com/gpu";
constexpr const char* kMemory = "nvidia.com/gpumem";
constexpr const char* kMemoryPercent = "nvidia.com/gpumem-percentage";
constexpr const char* kCores = "nvidia.com/gpucores";

// A whole number from milli-units, or an error naming the resource.
Result<int64_t> whole(const Resources& r, const char* name) {
  auto it = r.find(name);
  if (it == r.end()) return int64_t{0};
  if (it->second < 0 || it->second % 1000 != 0) {
    return fail(invalidArgument(fmt::format("{} must be a whole number of 0 or more", name))
                    .withField(name));
  }
  return it->second / 1000;
}

Result<int> percent(const Resources& r, const char* name) {
  const int64_t v = PURSER_TRY_VALUE(whole(r, name));
  if (r.count(name) != 0 && (v < 1 || v > 100)) {
    return fail(
        invalidArgument(fmt::format("{} must be from 1 to 100, got {}", name, v)).withField(name));
  }
  return static_cast<int>(v);
}

}  // namespace

Result<GpuRequest> gpuRequestOf(const Resources& per_pod) {
  GpuRequest g;
  const int64_t count = PURSER_TRY_VALUE(whole(per_pod, kGpu));
  if (count > 64) {
    return fail(invalidArgument(fmt::format("{}: at most 64 GPUs per pod, got {}", kGpu, count))
                    .withField(kGpu));
  }
  g.count = static_cast<int>(count);
  g.memory_mib = PURSER_TRY_VALUE(whole(per_pod, kMemory));
  g.memory_percent = PURSER_TRY_VALUE(percent(per_pod, kMemoryPercent));
  g.cores_percent = PURSER_TRY_VALUE(percent(per_pod, kCores));
  if (g.memory_mib > 0 && g.memory_percent > 0) {
    return fail(invalidArgument(fmt::format("give {} or {}, not both", kMemory, kMemoryPercent))
                    .withField(kMemoryPercent));
  }
  if (g.count == 0 && !g.whole()) {
    return fail(
        invalidArgument(fmt::format("a share of a GPU ({}, {} or {}) needs {}: how many GPUs",
                                    kMemory, kMemoryPercent, kCores, kGpu))
            .withField(kGpu));
  }
  return g;
}

Result<int64_t> shareMilli(const GpuRequest& g, int64_t gpu_memory_mib) {
  if (g.whole()) return int64_t{1000};
  int64_t memory = 1000;  // HAMi: without gpumem or gpumem-percentage, all of the memory
  if (g.memory_percent > 0) memory = g.memory_percent * 10;
  if (g.memory_mib > 0) {
    if (gpu_memory_mib <= 0 || g.memory_mib > gpu_memory_mib) {
      return fail(invalidArgument(fmt::format("asks for {} MiB of GPU memory; the GPU has {} MiB",
                                              g.memory_mib, gpu_memory_mib))
                      .withField(kMemory));
    }
    memory = (g.memory_mib * 1000 + gpu_memory_mib - 1) / gpu_memory_mib;  // rounded up
  }
  return std::clamp<int64_t>(memory, 1, 1000);
}

std::vector<std::pair<std::string, std::string>> executorEnv(const GpuRequest& g,
                                                             const std::vector<AssignedGpu>& gpus,
                                                             int64_t gpu_memory_mib) {
  std::vector<std::pair<std::string, std::string>> env;
  const bool uuids = !gpus.empty() && std::all_of(gpus.begin(), gpus.end(),
                                                  [](const auto& d) { return !d.uuid.empty(); });
  std::string visible;
  for (const auto& d : gpus) {
    if (!visible.empty()) visible += ',';
    visible += uuids ? d.uuid : std::to_string(d.index);
  }
  env.emplace_back("CUDA_VISIBLE_DEVICES", visible);
  if (g.whole()) return env;
  int64_t limit = g.memory_mib;
  if (limit == 0) {
    limit = g.memory_percent > 0 ? gpu_memory_mib * g.memory_percent / 100 : gpu_memory_mib;
  }
  if (limit > 0) {
    env.emplace_back("CUDA_DEVICE_MEMORY_LIMIT", fmt::format("{}m", limit));
    for (size_t k = 0; k < gpus.size(); ++k) {
      env.emplace_back(fmt::format("CUDA_DEVICE_MEMORY_LIMIT_{}", k), fmt::format("{}m", limit));
    }
  }
  if (g.cores_percent > 0)
    env.emplace_back("CUDA_DEVICE_SM_LIMIT", std::to_string(g.cores_percent));
  return env;
}

}  // namespace purser::fleet
