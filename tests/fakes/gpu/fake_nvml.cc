// A fake NVML (libnvidia-ml.so.1) over the fake CUDA driver's devices (fake_cuda.cc, same
// FAKE_CUDA_* variables). Memory used and utilisation are read from the fake driver when the
// process has loaded it (its test-only exports), else they are zero. Devices are named
// GPU-fake-<index> and sit on bus 0000:<index+1>:00.0.
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpushare/driver_api.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct FakeDevice {
  int index;
};
FakeDevice g_devices[16] = {{0}, {1}, {2},  {3},  {4},  {5},  {6},  {7},
                            {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};
bool g_initialised = false;

unsigned deviceCount() {
  const char* v = std::getenv("FAKE_CUDA_DEVICES");
  const unsigned long n = v != nullptr ? std::strtoul(v, nullptr, 10) : 1;
  return n < 1 ? 1 : n > 16 ? 16 : static_cast<unsigned>(n);
}

unsigned long long memoryBytes() {
  const char* v = std::getenv("FAKE_CUDA_MEMORY_MIB");
  return (v != nullptr ? std::strtoull(v, nullptr, 10) : 81559ull) << 20;
}

template <typename Fn>
Fn fromDriver(const char* name) {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  return h != nullptr ? reinterpret_cast<Fn>(dlsym(h, name)) : nullptr;
}

int indexOf(nvmlDevice_t d) {
  auto* f = reinterpret_cast<FakeDevice*>(d);
  if (f < g_devices || f >= g_devices + deviceCount()) return -1;
  return f->index;
}

// The device's utilisation over (from_us, now], in percent.
unsigned busyPercent(int index, uint64_t from_ns, uint64_t now_ns) {
  auto busy = fromDriver<uint64_t (*)(int, uint64_t, uint64_t)>("fakeCudaBusyNs");
  if (busy == nullptr || now_ns <= from_ns) return 0;
  return static_cast<unsigned>(busy(index, from_ns, now_ns) * 100 / (now_ns - from_ns));
}

uint64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

FAKE_EXPORT nvmlReturn_t nvmlInit_v2() {
  g_initialised = true;
  return NVML_SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlInit() { return nvmlInit_v2(); }
FAKE_EXPORT nvmlReturn_t nvmlShutdown() { return NVML_SUCCESS; }

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  if (!g_initialised) return NVML_ERROR_UNINITIALIZED;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = deviceCount();
  return NVML_SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned* count) {
  return nvmlDeviceGetCount_v2(count);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* d) {
  if (!g_initialised) return NVML_ERROR_UNINITIALIZED;
  if (d == nullptr || index >= deviceCount()) return NVML_ERROR_INVALID_ARGUMENT;
  *d = reinterpret_cast<nvmlDevice_t>(&g_devices[index]);
  return NVML_SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, nvmlDevice_t* d) {
  return nvmlDeviceGetHandleByIndex_v2(index, d);
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* d) {
  if (!g_initialised) return NVML_ERROR_UNINITIALIZED;
  if (uuid == nullptr || d == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < deviceCount(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "GPU-fake-%u", i);
    if (std::strcmp(name, uuid) == 0) return nvmlDeviceGetHandleByIndex_v2(i, d);
  }
  return NVML_ERROR_NOT_FOUND;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvmlDevice_t* d) {
  if (!g_initialised) return NVML_ERROR_UNINITIALIZED;
  if (bus == nullptr || d == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < deviceCount(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "0000:%02x:00.0", i + 1);
    if (std::strcmp(name, bus) == 0) return nvmlDeviceGetHandleByIndex_v2(i, d);
  }
  return NVML_ERROR_NOT_FOUND;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* out, unsigned length) {
  const int i = indexOf(d);
  if (i < 0 || out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::snprintf(out, length, "GPU-fake-%d", i) >= static_cast<int>(length)) {
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  const int i = indexOf(d);
  if (i < 0 || m == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  auto used = fromDriver<uint64_t (*)(int)>("fakeCudaUsedBytes");
  m->total = memoryBytes();
  m->used = used != nullptr ? used(i) : 0;
  m->free = m->total - m->used;
  return NVML_SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t* m) {
  if (m == nullptr || m->version != PURSER_NVML_MEMORY_V2) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlMemory_t v1{};
  const nvmlReturn_t r = nvmlDeviceGetMemoryInfo(d, &v1);
  if (r != NVML_SUCCESS) return r;
  m->total = v1.total;
  m->reserved = 0;
  m->free = v1.free;
  m->used = v1.used;
  return NVML_SUCCESS;
}

// Two processes on every device: this one (with what it allocated) and pid 1, another pod's.
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned* count,
                                                                 nvmlProcessInfo_v2_t* infos) {
  const int i = indexOf(d);
  if (i < 0 || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (infos == nullptr || *count < 2) {
    *count = 2;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  auto used = fromDriver<uint64_t (*)(int)>("fakeCudaUsedBytes");
  infos[0] = {static_cast<unsigned>(getpid()), used != nullptr ? used(i) : 0, 0, 0};
  infos[1] = {1, 4ull << 30, 0, 0};
  *count = 2;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* u) {
  const int i = indexOf(d);
  if (i < 0 || u == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const uint64_t now = nowNs();
  u->gpu = busyPercent(i, now > 200'000'000 ? now - 200'000'000 : 0, now);
  u->memory = 0;
  return NVML_SUCCESS;
}

// A sample for this process — its utilisation since `last_seen_us` (at most the last second) —
// and one for pid 1, another pod's.
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d,
                                                         nvmlProcessUtilizationSample_t* samples,
                                                         unsigned* count,
                                                         unsigned long long last_seen_us) {
  const int i = indexOf(d);
  if (i < 0 || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (samples == nullptr || *count < 2) {
    *count = 2;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  const uint64_t now = nowNs();
  uint64_t from = last_seen_us * 1000;
  if (from == 0 || from >= now || now - from > 1'000'000'000) from = now - 1'000'000'000;
  samples[0] = {static_cast<unsigned>(getpid()), now / 1000, busyPercent(i, from, now), 0, 0, 0};
  samples[1] = {1, now / 1000, 50, 0, 0, 0};
  *count = 2;
  return NVML_SUCCESS;
}
