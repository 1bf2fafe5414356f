// A fake CUDA driver (libcuda.so.1) for testing the GPU share shim without a GPU. It exports the
// documented Driver API entry points the shim governs, with the documented signatures, over
// devices that exist only in this process:
//   FAKE_CUDA_DEVICES       how many devices (default 1)
//   FAKE_CUDA_MEMORY_MIB    memory per device (default 81559, an 80 GiB card)
//   FAKE_CUDA_CONTEXT_MIB   what a context takes of its device's memory (default 0)
//   FAKE_CUDA_VERSION       what cuDriverGetVersion says (default 12040)
//   FAKE_CUDA_NS_PER_BLOCK  how long a kernel runs per block of its grid (default 10000)
//   FAKE_CUDA_GRAPH_NS      how long a graph launch runs (default 1000000)
// Kernels run one after another on a timeline per device: a launch returns at once unless more
// than 2 ms of work is queued (a full launch queue), when it waits; synchronising waits for the
// timeline. Utilisation is the share of wall time the timeline was busy; the fake NVML reports it.
// Built with FAKE_CUDA_SPARSE, it is a driver that has almost nothing: cuInit, cuDriverGetVersion,
// cuDeviceGet(Count), cuCtxCreate_v2 and cuCtxGetDevice.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "gpushare/driver_api.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxDevices = 16;

uint64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

[[maybe_unused]] void sleepUntil(uint64_t t) {
  for (uint64_t now = nowNs(); now < t; now = nowNs()) {
    const uint64_t d = t - now;
    timespec ts{static_cast<time_t>(d / 1'000'000'000), static_cast<long>(d % 1'000'000'000)};
    nanosleep(&ts, nullptr);
  }
}

uint64_t envNumber(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

struct Device {
  uint64_t memory = 0;
  uint64_t used = 0;
  uint64_t busy_until = 0;
  std::deque<std::pair<uint64_t, uint64_t>> busy;  // merged [start, end) of run kernels
};

struct Context {
  int device;
};

struct Driver {
  std::mutex mu;
  bool initialised = false;
  int devices = 1;
  uint64_t context_bytes = 0;
  int version = 12040;
  uint64_t ns_per_block = 10000;
  uint64_t graph_ns = 1'000'000;
  Device device[kMaxDevices];
  std::unordered_map<CUdeviceptr, std::pair<int, uint64_t>> pointers;
  std::unordered_map<CUmemGenericAllocationHandle, std::pair<int, uint64_t>> handles;
  CUdeviceptr next_pointer = 0x7f0000000000ull;
  CUmemGenericAllocationHandle next_handle = 1;
  Context primary[kMaxDevices];
  int primary_refs[kMaxDevices] = {};
  std::atomic<uint64_t> launches{0};

  Driver() {
    devices = static_cast<int>(std::clamp<uint64_t>(envNumber("FAKE_CUDA_DEVICES", 1), 1, 16));
    const uint64_t mib = envNumber("FAKE_CUDA_MEMORY_MIB", 81559);
    context_bytes = envNumber("FAKE_CUDA_CONTEXT_MIB", 0) << 20;
    version = static_cast<int>(envNumber("FAKE_CUDA_VERSION", 12040));
    ns_per_block = envNumber("FAKE_CUDA_NS_PER_BLOCK", 10000);
    graph_ns = envNumber("FAKE_CUDA_GRAPH_NS", 1'000'000);
    for (int i = 0; i < kMaxDevices; ++i) {
      device[i].memory = mib << 20;
      primary[i].device = i;
    }
  }
};

Driver& driver() {
  static Driver* d = new Driver();
  return *d;
}

thread_local Context* t_current = nullptr;

CUresult currentDevice(int* d) {
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *d = t_current->device;
  return CUDA_SUCCESS;
}

#ifndef FAKE_CUDA_SPARSE
CUresult allocOn(int d, CUdeviceptr* p, uint64_t bytes) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& drv = driver();
  std::lock_guard<std::mutex> lock(drv.mu);
  Device& dev = drv.device[d];
  if (bytes > dev.memory - dev.used) return CUDA_ERROR_OUT_OF_MEMORY;
  dev.used += bytes;
  *p = drv.next_pointer;
  drv.next_pointer += (bytes + 0xfff) & ~0xfffull;
  drv.pointers[*p] = {d, bytes};
  return CUDA_SUCCESS;
}

CUresult alloc(CUdeviceptr* p, uint64_t bytes) {
  int d = 0;
  if (CUresult r = currentDevice(&d); r != CUDA_SUCCESS) return r;
  return allocOn(d, p, bytes);
}

CUresult release(CUdeviceptr p) {
  Driver& drv = driver();
  std::lock_guard<std::mutex> lock(drv.mu);
  auto it = drv.pointers.find(p);
  if (it == drv.pointers.end()) return CUDA_ERROR_INVALID_VALUE;
  drv.device[it->second.first].used -= it->second.second;
  drv.pointers.erase(it);
  return CUDA_SUCCESS;
}

// Puts `ns` of work on the current device's timeline.
CUresult run(uint64_t ns) {
  int d = 0;
  if (CUresult r = currentDevice(&d); r != CUDA_SUCCESS) return r;
  Driver& drv = driver();
  drv.launches.fetch_add(1);
  uint64_t wait_until = 0;
  {
    std::lock_guard<std::mutex> lock(drv.mu);
    Device& dev = drv.device[d];
    const uint64_t now = nowNs();
    const uint64_t start = std::max(now, dev.busy_until);
    dev.busy_until = start + ns;
    if (!dev.busy.empty() && dev.busy.back().second >= start) {
      dev.busy.back().second = dev.busy_until;
    } else {
      dev.busy.emplace_back(start, dev.busy_until);
    }
    while (dev.busy.size() > 100000) dev.busy.pop_front();
    if (dev.busy_until > now + 2'000'000) wait_until = dev.busy_until - 2'000'000;
  }
  if (wait_until != 0) sleepUntil(wait_until);
  return CUDA_SUCCESS;
}
#endif

}  // namespace

// ---- Test-only: what the fake device saw --------------------------------------------------------

// Nanoseconds device `d` was busy within [from, to) (CLOCK_MONOTONIC).
FAKE_EXPORT uint64_t fakeCudaBusyNs(int d, uint64_t from, uint64_t to) {
  if (d < 0 || d >= kMaxDevices) return 0;
  Driver& drv = driver();
  std::lock_guard<std::mutex> lock(drv.mu);
  uint64_t sum = 0;
  for (const auto& [a, b] : drv.device[d].busy) {
    const uint64_t lo = std::max(a, from);
    const uint64_t hi = std::min(b, to);
    if (hi > lo) sum += hi - lo;
  }
  return sum;
}
FAKE_EXPORT uint64_t fakeCudaUsedBytes(int d) {
  if (d < 0 || d >= kMaxDevices) return 0;
  Driver& drv = driver();
  std::lock_guard<std::mutex> lock(drv.mu);
  return drv.device[d].used;
}
FAKE_EXPORT uint64_t fakeCudaLaunches() { return driver().launches.load(); }
FAKE_EXPORT uint64_t fakeCudaNowNs() { return nowNs(); }

// ---- Initialisation, devices, contexts
// -----------------------------------------------------------

FAKE_EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  driver().initialised = true;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDriverGetVersion(int* v) {
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *v = driver().version;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetCount(int* n) {
  if (!driver().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *n = driver().devices;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (!driver().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= driver().devices) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int, CUdevice d) {
  Driver& drv = driver();
  if (!drv.initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (d < 0 || d >= drv.devices) return CUDA_ERROR_INVALID_DEVICE;
  {
    std::lock_guard<std::mutex> lock(drv.mu);
    if (drv.context_bytes > drv.device[d].memory - drv.device[d].used) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    drv.device[d].used += drv.context_bytes;
  }
  auto* c = new Context{d};
  t_current = c;
  *ctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* d) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int dev = 0;
  if (CUresult r = currentDevice(&dev); r != CUDA_SUCCESS) return r;
  *d = dev;
  return CUDA_SUCCESS;
}

#ifndef FAKE_CUDA_SPARSE
FAKE_EXPORT CUresult cuCtxCreate_v3(CUcontext* ctx, void*, int, unsigned int flags, CUdevice d) {
  return cuCtxCreate_v2(ctx, flags, d);
}
FAKE_EXPORT CUresult cuCtxCreate_v4(CUcontext* ctx, void*, unsigned int flags, CUdevice d) {
  return cuCtxCreate_v2(ctx, flags, d);
}
FAKE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  auto* c = reinterpret_cast<Context*>(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Driver& drv = driver();
  {
    std::lock_guard<std::mutex> lock(drv.mu);
    drv.device[c->device].used -= drv.context_bytes;
  }
  if (t_current == c) t_current = nullptr;
  delete c;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  t_current = reinterpret_cast<Context*>(ctx);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = reinterpret_cast<CUcontext>(t_current);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice d) {
  Driver& drv = driver();
  if (!drv.initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (d < 0 || d >= drv.devices) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(drv.mu);
  if (drv.primary_refs[d]++ == 0) drv.device[d].used += drv.context_bytes;
  *ctx = reinterpret_cast<CUcontext>(&drv.primary[d]);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  Driver& drv = driver();
  if (d < 0 || d >= drv.devices) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(drv.mu);
  if (drv.primary_refs[d] == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--drv.primary_refs[d] == 0) drv.device[d].used -= drv.context_bytes;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
  Driver& drv = driver();
  if (d < 0 || d >= drv.devices) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(drv.mu);
  if (drv.primary_refs[d] > 0) drv.device[d].used -= drv.context_bytes;
  drv.primary_refs[d] = 0;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxSynchronize() {
  int d = 0;
  if (CUresult r = currentDevice(&d); r != CUDA_SUCCESS) return r;
  uint64_t until;
  {
    std::lock_guard<std::mutex> lock(driver().mu);
    until = driver().device[d].busy_until;
  }
  sleepUntil(until);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamSynchronize(CUstream) { return cuCtxSynchronize(); }

// ---- Memory ------------------------------------------------------------------------------------

FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  int d = 0;
  if (CUresult r = currentDevice(&d); r != CUDA_SUCCESS) return r;
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(driver().mu);
  const Device& dev = driver().device[d];
  *free_bytes = dev.memory - dev.used;
  *total_bytes = dev.memory;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemGetInfo(unsigned int* free_bytes, unsigned int* total_bytes) {
  size_t f = 0, t = 0;
  const CUresult r = cuMemGetInfo_v2(&f, &t);
  if (r == CUDA_SUCCESS) {
    *free_bytes = static_cast<unsigned>(std::min<size_t>(f, 0xffffffffu));
    *total_bytes = static_cast<unsigned>(std::min<size_t>(t, 0xffffffffu));
  }
  return r;
}
FAKE_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1* p, unsigned int bytes) {
  CUdeviceptr wide = 0;
  const CUresult r = alloc(&wide, bytes);
  if (r == CUDA_SUCCESS) *p = static_cast<CUdeviceptr_v1>(wide);  // truncated, as the ABI was
  return r;
}
FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) { return alloc(p, bytes); }
FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t width, size_t height,
                                        unsigned int element) {
  if (pitch == nullptr || (element != 4 && element != 8 && element != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t row = (width + 511) / 512 * 512;
  const CUresult r = alloc(p, static_cast<uint64_t>(row) * height);
  if (r == CUDA_SUCCESS) *pitch = row;
  return r;
}
FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* p, size_t bytes, unsigned int) {
  return alloc(p, bytes);
}
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return release(p); }
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, size_t bytes, CUstream) {
  return alloc(p, bytes);
}
FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* p, size_t bytes, CUstream) {
  return alloc(p, bytes);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t bytes, CUmemoryPool, CUstream) {
  return alloc(p, bytes);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* p, size_t bytes, CUmemoryPool,
                                                  CUstream) {
  return alloc(p, bytes);
}
FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream) { return release(p); }
FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream) { return release(p); }
FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* h, size_t bytes,
                                 const CUmemAllocationProp* prop, unsigned long long) {
  if (h == nullptr || prop == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& drv = driver();
  int d = -1;  // host memory: not the device's
  if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (prop->location.id < 0 || prop->location.id >= drv.devices) return CUDA_ERROR_INVALID_DEVICE;
    d = prop->location.id;
  } else if (prop->location.type < CU_MEM_LOCATION_TYPE_HOST ||
             prop->location.type > CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(drv.mu);
  if (d >= 0) {
    if (bytes > drv.device[d].memory - drv.device[d].used) return CUDA_ERROR_OUT_OF_MEMORY;
    drv.device[d].used += bytes;
  }
  *h = drv.next_handle++;
  drv.handles[*h] = {d, bytes};
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  Driver& drv = driver();
  std::lock_guard<std::mutex> lock(drv.mu);
  auto it = drv.handles.find(h);
  if (it == drv.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  if (it->second.first >= 0) drv.device[it->second.first].used -= it->second.second;
  drv.handles.erase(it);
  return CUDA_SUCCESS;
}

// ---- Arrays: device memory of their elements' size
// ------------------------------------------------

namespace {
uint64_t fakeArrayBytes(size_t w, size_t h, size_t d, unsigned channels, int format) {
  const uint64_t element = format == 0x01 || format == 0x08                     ? 1
                           : format == 0x02 || format == 0x09 || format == 0x10 ? 2
                                                                                : 4;
  return element * (channels == 0 ? 1 : channels) * w * (h == 0 ? 1 : h) * (d == 0 ? 1 : d);
}
template <typename Handle>
CUresult makeArray(Handle* out, uint64_t bytes) {
  int d = 0;
  if (CUresult r = currentDevice(&d); r != CUDA_SUCCESS) return r;
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  if (CUresult r = allocOn(d, &p, bytes); r != CUDA_SUCCESS) return r;
  *out = reinterpret_cast<Handle>(p);
  return CUDA_SUCCESS;
}
}  // namespace

FAKE_EXPORT CUresult cuArrayCreate_v2(CUarray* a, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return makeArray(a,
                   fakeArrayBytes(desc->Width, desc->Height, 1, desc->NumChannels, desc->Format));
}
FAKE_EXPORT CUresult cuArray3DCreate_v2(CUarray* a, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return makeArray(
      a, fakeArrayBytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels, desc->Format));
}
FAKE_EXPORT CUresult cuArrayDestroy(CUarray a) { return release(reinterpret_cast<CUdeviceptr>(a)); }

// ---- Modules (what scripts/gpu_check loads; the fake runs any function the same way) ------------

FAKE_EXPORT CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  if (m == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static int module;
  *m = reinterpret_cast<CUmodule>(&module);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  if (f == nullptr || m == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static int function;
  *f = reinterpret_cast<CUfunction>(&function);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetAttribute(int* value, int attribute, CUdevice d) {
  if (value == nullptr || d < 0 || d >= driver().devices) return CUDA_ERROR_INVALID_VALUE;
  *value = attribute == 16 ? 132 : 0;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: an H100's
  return CUDA_SUCCESS;
}

// ---- Launches
// ------------------------------------------------------------------------------------

namespace {
uint64_t kernelNs(unsigned gx, unsigned gy, unsigned gz) {
  return static_cast<uint64_t>(gx) * gy * gz * driver().ns_per_block;
}
}  // namespace

FAKE_EXPORT CUresult cuLaunchKernel(CUfunction, unsigned gx, unsigned gy, unsigned gz, unsigned,
                                    unsigned, unsigned, unsigned, CUstream, void**, void**) {
  return run(kernelNs(gx, gy, gz));
}
FAKE_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                         unsigned bx, unsigned by, unsigned bz, unsigned sm,
                                         CUstream s, void** p, void** e) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, sm, s, p, e);
}
FAKE_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction, void**, void**) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return run(kernelNs(c->gridDimX, c->gridDimY, c->gridDimZ));
}
FAKE_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** p,
                                           void** e) {
  return cuLaunchKernelEx(c, f, p, e);
}
FAKE_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction, unsigned gx, unsigned gy, unsigned gz,
                                               unsigned, unsigned, unsigned, unsigned, CUstream,
                                               void**) {
  return run(kernelNs(gx, gy, gz));
}
FAKE_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                    unsigned gz, unsigned bx, unsigned by,
                                                    unsigned bz, unsigned sm, CUstream s,
                                                    void** p) {
  return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, sm, s, p);
}
FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec, CUstream) { return run(driver().graph_ns); }
FAKE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) { return cuGraphLaunch(g, s); }

// ---- cuGetProcAddress: the version of an entry point a given CUDA version asks for --------------

namespace {
struct Proc {
  const char* base;
  int since;
  bool per_thread;
  void* fn;
};
#define FAKE_PROC(base, since, pt, fn) \
  { base, since, pt, reinterpret_cast<void*>(&fn) }
const Proc kProcs[] = {
    FAKE_PROC("cuInit", 0, false, cuInit),
    FAKE_PROC("cuDriverGetVersion", 0, false, cuDriverGetVersion),
    FAKE_PROC("cuDeviceGet", 0, false, cuDeviceGet),
    FAKE_PROC("cuDeviceGetCount", 0, false, cuDeviceGetCount),
    FAKE_PROC("cuCtxCreate", 3020, false, cuCtxCreate_v2),
    FAKE_PROC("cuCtxCreate", 11040, false, cuCtxCreate_v3),
    FAKE_PROC("cuCtxCreate", 12050, false, cuCtxCreate_v4),
    FAKE_PROC("cuCtxDestroy", 4000, false, cuCtxDestroy_v2),
    FAKE_PROC("cuCtxGetDevice", 0, false, cuCtxGetDevice),
    FAKE_PROC("cuCtxSetCurrent", 0, false, cuCtxSetCurrent),
    FAKE_PROC("cuCtxSynchronize", 0, false, cuCtxSynchronize),
    FAKE_PROC("cuDevicePrimaryCtxRetain", 0, false, cuDevicePrimaryCtxRetain),
    FAKE_PROC("cuDevicePrimaryCtxRelease", 11000, false, cuDevicePrimaryCtxRelease_v2),
    FAKE_PROC("cuDevicePrimaryCtxReset", 11000, false, cuDevicePrimaryCtxReset_v2),
    FAKE_PROC("cuMemGetInfo", 0, false, cuMemGetInfo),
    FAKE_PROC("cuMemGetInfo", 3020, false, cuMemGetInfo_v2),
    FAKE_PROC("cuMemAlloc", 0, false, cuMemAlloc),
    FAKE_PROC("cuMemAlloc", 3020, false, cuMemAlloc_v2),
    FAKE_PROC("cuMemAllocPitch", 3020, false, cuMemAllocPitch_v2),
    FAKE_PROC("cuMemAllocManaged", 0, false, cuMemAllocManaged),
    FAKE_PROC("cuMemFree", 3020, false, cuMemFree_v2),
    FAKE_PROC("cuMemAllocAsync", 11020, false, cuMemAllocAsync),
    FAKE_PROC("cuMemAllocAsync", 11020, true, cuMemAllocAsync_ptsz),
    FAKE_PROC("cuMemAllocFromPoolAsync", 11020, false, cuMemAllocFromPoolAsync),
    FAKE_PROC("cuMemAllocFromPoolAsync", 11020, true, cuMemAllocFromPoolAsync_ptsz),
    FAKE_PROC("cuMemFreeAsync", 11020, false, cuMemFreeAsync),
    FAKE_PROC("cuMemFreeAsync", 11020, true, cuMemFreeAsync_ptsz),
    FAKE_PROC("cuMemCreate", 10020, false, cuMemCreate),
    FAKE_PROC("cuArrayCreate", 3020, false, cuArrayCreate_v2),
    FAKE_PROC("cuArray3DCreate", 3020, false, cuArray3DCreate_v2),
    FAKE_PROC("cuArrayDestroy", 0, false, cuArrayDestroy),
    FAKE_PROC("cuMemRelease", 10020, false, cuMemRelease),
    FAKE_PROC("cuLaunchKernel", 4000, false, cuLaunchKernel),
    FAKE_PROC("cuLaunchKernel", 7000, true, cuLaunchKernel_ptsz),
    FAKE_PROC("cuLaunchKernelEx", 11060, false, cuLaunchKernelEx),
    FAKE_PROC("cuLaunchKernelEx", 11060, true, cuLaunchKernelEx_ptsz),
    FAKE_PROC("cuLaunchCooperativeKernel", 9000, false, cuLaunchCooperativeKernel),
    FAKE_PROC("cuLaunchCooperativeKernel", 9000, true, cuLaunchCooperativeKernel_ptsz),
    FAKE_PROC("cuGraphLaunch", 10000, false, cuGraphLaunch),
    FAKE_PROC("cuGraphLaunch", 10000, true, cuGraphLaunch_ptsz),
    FAKE_PROC("cuStreamSynchronize", 0, false, cuStreamSynchronize),
};
#undef FAKE_PROC

void* lookupProc(const char* symbol, int version, cuuint64_t flags, int* status);
}  // namespace

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int st = CU_GET_PROC_ADDRESS_SUCCESS;
  *pfn = lookupProc(symbol, version, flags, &st);
  if (status != nullptr) *status = st;
  return *pfn == nullptr ? CUDA_ERROR_NOT_FOUND : CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                      cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}

namespace {
void* lookupProc(const char* symbol, int version, cuuint64_t flags, int* status) {
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
    return version >= 12000 ? reinterpret_cast<void*>(&cuGetProcAddress_v2)
                            : reinterpret_cast<void*>(&cuGetProcAddress);
  }
  const Proc* best = nullptr;
  bool known = false;
  for (const Proc& p : kProcs) {
    if (std::strcmp(p.base, symbol) != 0) continue;
    known = true;
    if (p.since > version || (p.per_thread && !per_thread)) continue;
    if (best == nullptr || p.since > best->since || (p.per_thread && !best->per_thread)) best = &p;
  }
  *status = best != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS
            : known         ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return best != nullptr ? best->fn : nullptr;
}
}  // namespace
#endif  // FAKE_CUDA_SPARSE
