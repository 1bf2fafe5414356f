// libpurser-gpushare.so: preloaded into a pod that holds a share of a GPU, it makes the share a
// wall inside the process. It stands between the program and the CUDA driver (libcuda.so.1) and
// NVML (libnvidia-ml.so.1):
//   - resolution: dlsym, dlvsym, cuGetProcAddress(_v2) and the exported entry points themselves
//     hand out the shim's entry for what it governs, the driver's own for everything else;
//   - memory: every allocation path is reserved against the pod's cap in the shared region
//     before the driver is asked (share_region.h), and given back when freed or when it fails;
//   - compute: launches draw on the pod's allowance (throttle.h) when CUDA_DEVICE_SM_LIMIT < 100;
//   - visibility: memory queries report the share, NVML lists only the pod's devices.
// Without any limit in the environment the shim hands out the driver's own entries: the program
// calls the driver directly and nothing is changed. A share it cannot enforce (a limit it cannot
// read, a region it cannot map, a driver version it does not know, a compute limit without NVML)
// is refused at cuInit with a message on standard error, and every governed call fails after.
//
// The C ABI is the driver's: no C++ exception leaves an exported function (each body is
// noexcept; allocation failures in the shim's own books refuse the driver call).
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include "gpushare/driver_api.h"
#include "gpushare/elf_symbols.h"
#include "gpushare/limits.h"
#include "gpushare/share_region.h"
#include "gpushare/throttle.h"

#define PURSER_EXPORT extern "C" __attribute__((visibility("default")))

namespace purser::gpushare {
namespace {

// ---- What the shim governs ---------------------------------------------------------------------

enum class Kind { kControl, kMemory, kLaunch, kNvml };

// One governed entry point: its exported name, the name cuGetProcAddress knows it by, the CUDA
// version from which cuGetProcAddress hands out this version of it, and whether it is the
// per-thread-default-stream variant.
struct Entry {
  const char* name;
  const char* base;
  int since;
  bool per_thread;
  Kind kind;
};

// Keep in step with the exported functions below: the table's index is the function's id.
#define PURSER_ENTRIES(X)                                                             \
  X(cuInit, "cuInit", 0, false, kControl)                                             \
  X(cuGetProcAddress, "cuGetProcAddress", 0, false, kControl)                         \
  X(cuGetProcAddress_v2, "cuGetProcAddress", 12000, false, kControl)                  \
  X(cuMemAlloc, "cuMemAlloc", 0, false, kMemory)                                      \
  X(cuMemAlloc_v2, "cuMemAlloc", 3020, false, kMemory)                                \
  X(cuMemAllocPitch, "cuMemAllocPitch", 0, false, kMemory)                            \
  X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, false, kMemory)                      \
  X(cuMemAllocManaged, "cuMemAllocManaged", 0, false, kMemory)                        \
  X(cuMemFree, "cuMemFree", 0, false, kMemory)                                        \
  X(cuMemFree_v2, "cuMemFree", 3020, false, kMemory)                                  \
  X(cuMemAllocAsync, "cuMemAllocAsync", 0, false, kMemory)                            \
  X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 0, true, kMemory)                        \
  X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 0, false, kMemory)            \
  X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 0, true, kMemory)        \
  X(cuMemFreeAsync, "cuMemFreeAsync", 0, false, kMemory)                              \
  X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 0, true, kMemory)                          \
  X(cuMemCreate, "cuMemCreate", 0, false, kMemory)                                    \
  X(cuMemRelease, "cuMemRelease", 0, false, kMemory)                                  \
  X(cuArrayCreate_v2, "cuArrayCreate", 3020, false, kMemory)                          \
  X(cuArray3DCreate_v2, "cuArray3DCreate", 3020, false, kMemory)                      \
  X(cuArrayDestroy, "cuArrayDestroy", 0, false, kMemory)                              \
  X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 0, false, kMemory)              \
  X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 0, false, kMemory)            \
  X(cuMemGetInfo, "cuMemGetInfo", 0, false, kMemory)                                  \
  X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, false, kMemory)                            \
  X(cuCtxCreate_v2, "cuCtxCreate", 3020, false, kMemory)                              \
  X(cuCtxCreate_v3, "cuCtxCreate", 11040, false, kMemory)                             \
  X(cuCtxCreate_v4, "cuCtxCreate", 12050, false, kMemory)                             \
  X(cuCtxDestroy_v2, "cuCtxDestroy", 4000, false, kMemory)                            \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 0, false, kMemory)          \
  X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, false, kMemory) \
  X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, false, kMemory)     \
  X(cuLaunchKernel, "cuLaunchKernel", 0, false, kLaunch)                              \
  X(cuLaunchKernel_ptsz, "cuLaunchKernel", 0, true, kLaunch)                          \
  X(cuLaunchKernelEx, "cuLaunchKernelEx", 0, false, kLaunch)                          \
  X(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 0, true, kLaunch)                      \
  X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 0, false, kLaunch)        \
  X(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 0, true, kLaunch)    \
  X(cuGraphLaunch, "cuGraphLaunch", 0, false, kLaunch)                                \
  X(cuGraphLaunch_ptsz, "cuGraphLaunch", 0, true, kLaunch)                            \
  X(cuLaunch, "cuLaunch", 0, false, kLaunch)                                          \
  X(cuLaunchGrid, "cuLaunchGrid", 0, false, kLaunch)                                  \
  X(cuLaunchGridAsync, "cuLaunchGridAsync", 0, false, kLaunch)                        \
  X(nvmlDeviceGetCount, "", 0, false, kNvml)                                          \
  X(nvmlDeviceGetCount_v2, "", 0, false, kNvml)                                       \
  X(nvmlDeviceGetHandleByIndex, "", 0, false, kNvml)                                  \
  X(nvmlDeviceGetHandleByIndex_v2, "", 0, false, kNvml)                               \
  X(nvmlDeviceGetHandleByUUID, "", 0, false, kNvml)                                   \
  X(nvmlDeviceGetHandleByPciBusId_v2, "", 0, false, kNvml)                            \
  X(nvmlDeviceGetComputeRunningProcesses, "", 0, false, kNvml)                        \
  X(nvmlDeviceGetComputeRunningProcesses_v2, "", 0, false, kNvml)                     \
  X(nvmlDeviceGetComputeRunningProcesses_v3, "", 0, false, kNvml)                     \
  X(nvmlDeviceGetGraphicsRunningProcesses, "", 0, false, kNvml)                       \
  X(nvmlDeviceGetGraphicsRunningProcesses_v2, "", 0, false, kNvml)                    \
  X(nvmlDeviceGetGraphicsRunningProcesses_v3, "", 0, false, kNvml)                    \
  X(nvmlDeviceGetProcessUtilization, "", 0, false, kNvml)                             \
  X(nvmlDeviceGetMemoryInfo, "", 0, false, kNvml)                                     \
  X(nvmlDeviceGetMemoryInfo_v2, "", 0, false, kNvml)

enum Id {
#define PURSER_ID(name, base, since, pt, kind) k_##name,
  PURSER_ENTRIES(PURSER_ID)
#undef PURSER_ID
      kEntryCount
};

constexpr Entry kEntries[kEntryCount] = {
#define PURSER_ENTRY(name, base, since, pt, kind) {#name, base, since, pt, Kind::kind},
    PURSER_ENTRIES(PURSER_ENTRY)
#undef PURSER_ENTRY
};

void* g_wrapper[kEntryCount];  // the shim's own entry for each id (filled at load)
void* g_real[kEntryCount];     // the driver's, found when first handed out or first needed

// Helper functions the shim calls on the driver and NVML itself, found the same way.
enum Helper {
  kCtxGetDevice,
  kDriverGetVersion,
  kNvmlInit,
  kNvmlGetHandleByIndex,
  kNvmlGetMemory,
  kNvmlProcessUtil,
  kNvmlUtilRates,
  kHelperCount
};
constexpr const char* kHelperNames[kHelperCount] = {"cuCtxGetDevice",
                                                    "cuDriverGetVersion",
                                                    "nvmlInit_v2",
                                                    "nvmlDeviceGetHandleByIndex_v2",
                                                    "nvmlDeviceGetMemoryInfo",
                                                    "nvmlDeviceGetProcessUtilization",
                                                    "nvmlDeviceGetUtilizationRates"};
void* g_helper[kHelperCount];

// ---- The state of this process -----------------------------------------------------------------

using DlsymFn = void* (*)(void*, const char*);
using DlvsymFn = void* (*)(void*, const char*, const char*);
DlsymFn g_dlsym = nullptr;
DlvsymFn g_dlvsym = nullptr;
const struct link_map* g_self = nullptr;

Limits* g_limits = nullptr;  // made at start (no global constructors: the shim runs before them)
bool g_memory = false;       // a memory cap is set: memory entries are governed
bool g_compute = false;      // a compute cap is set: launch entries are governed
bool g_active = false;
std::atomic<bool> g_refused{false};
std::string* g_refusal = nullptr;  // why, written at cuInit
ShareRegion g_region;
pthread_once_t g_once = PTHREAD_ONCE_INIT;

void* g_cuda = nullptr;  // handles of the real libraries, when found
void* g_nvml = nullptr;

// What this process allocated, to give back on free.
struct Held {
  int device;
  uint64_t bytes;
};
std::mutex* g_books_mu = nullptr;
std::unordered_map<CUdeviceptr, Held>* g_pointers = nullptr;  // guarded by g_books_mu
std::unordered_map<CUmemGenericAllocationHandle, Held>* g_handles = nullptr;  // ditto
std::unordered_map<void*, Held>* g_arrays = nullptr;        // CUarray and CUmipmappedArray; ditto
std::unordered_map<CUcontext, Held>* g_contexts = nullptr;  // ditto
int g_primary_refs[kMaxDevices];                            // ditto
uint64_t g_primary_bytes[kMaxDevices];                      // ditto

// The pod's devices as NVML numbers them (CUDA_VISIBLE_DEVICES, by index or UUID).
std::once_flag* g_visible_once = nullptr;
nvmlDevice_t g_visible[kMaxDevices];
int g_visible_count = -1;  // -1: not known (NVML not reachable)

// How deep this thread is in the shim's governed calls. A driver or NVML that calls its own
// exported entry points (through the PLT, where the shim's stand first) re-enters the shim: the
// inner call is the driver's business, passed straight through, so nothing is counted twice and
// nothing waits on itself.
__attribute__((tls_model("initial-exec"))) thread_local int t_depth = 0;
struct Inside {
  const bool outer;
  Inside() : outer(t_depth++ == 0) {}
  ~Inside() { --t_depth; }
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;
};

void say(const char* what) {
  // One write, no stdio: async-signal-safe and unbuffered.
  std::string line = std::string("purser-gpushare: ") + what + "\n";
  ssize_t rc = ::write(2, line.data(), line.size());
  (void)rc;
}

void refuse(std::string why) {
  if (g_refused.exchange(true)) return;
  g_refusal = new (std::nothrow) std::string(std::move(why));
}

uint64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// ---- Finding the real symbols ------------------------------------------------------------------

// The C library's dlsym and dlvsym, found in the objects loaded besides this one.
void findDlsym() {
  g_self = objectOf(reinterpret_cast<const void*>(&findDlsym));
  const struct link_map* head = g_self;
  while (head != nullptr && head->l_prev != nullptr) head = head->l_prev;
  for (const struct link_map* lm = head; lm != nullptr; lm = lm->l_next) {
    if (lm == g_self) continue;
    bool ifunc = false;
    if (g_dlsym == nullptr) g_dlsym = reinterpret_cast<DlsymFn>(definedIn(lm, "dlsym", &ifunc));
    if (g_dlvsym == nullptr) {
      g_dlvsym = reinterpret_cast<DlvsymFn>(definedIn(lm, "dlvsym", &ifunc));
    }
  }
}

bool ours(const void* p) {
  for (void* w : g_wrapper) {
    if (w == p) return true;
  }
  return false;
}

// dlsym(RTLD_NEXT, name) on behalf of `caller`: the first object loaded after the caller's that
// defines the name, asked of the dynamic linker so that versions and indirect functions resolve
// as they would have.
void* nextAfter(const void* caller, const char* name, const char* version) {
  const struct link_map* from = objectOf(caller);
  if (from == nullptr) return nullptr;
  for (const struct link_map* lm = from->l_next; lm != nullptr; lm = lm->l_next) {
    bool ifunc = false;
    if (definedIn(lm, name, &ifunc) == nullptr) continue;
    void* handle = const_cast<struct link_map*>(lm);  // glibc's handles are its link maps
    return version == nullptr ? g_dlsym(handle, name) : g_dlvsym(handle, name, version);
  }
  return nullptr;
}

void* libraryHandle(Kind kind, bool load) {
  void** slot = kind == Kind::kNvml ? &g_nvml : &g_cuda;
  if (void* h = __atomic_load_n(slot, __ATOMIC_ACQUIRE)) return h;
  const char* soname = kind == Kind::kNvml ? "libnvidia-ml.so.1" : "libcuda.so.1";
  void* found = ::dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
  if (found == nullptr && load) found = ::dlopen(soname, RTLD_LAZY);
  if (found != nullptr) __atomic_store_n(slot, found, __ATOMIC_RELEASE);
  return found;
}

void ensureStarted();

void* resolve(const char* name, Kind kind, bool load) {
  ensureStarted();
  // After this object in the global scope (a program linked against the driver), else in the
  // driver the program opened itself.
  void* p = g_dlsym != nullptr ? g_dlsym(RTLD_NEXT, name) : nullptr;
  if (p == nullptr || ours(p)) {
    void* h = libraryHandle(kind, load);
    p = h != nullptr ? g_dlsym(h, name) : nullptr;
  }
  return ours(p) ? nullptr : p;
}

template <typename Fn>
Fn real(Id id) {
  void* p = __atomic_load_n(&g_real[id], __ATOMIC_ACQUIRE);
  if (p == nullptr) {
    p = resolve(kEntries[id].name, kEntries[id].kind, false);
    if (p != nullptr) __atomic_store_n(&g_real[id], p, __ATOMIC_RELEASE);
  }
  return reinterpret_cast<Fn>(p);
}

template <typename Fn>
Fn helper(Helper h) {
  void* p = __atomic_load_n(&g_helper[h], __ATOMIC_ACQUIRE);
  if (p == nullptr) {
    const Kind kind = h >= kNvmlInit ? Kind::kNvml : Kind::kControl;
    p = resolve(kHelperNames[h], kind, kind == Kind::kNvml);
    if (p != nullptr) __atomic_store_n(&g_helper[h], p, __ATOMIC_RELEASE);
  }
  return reinterpret_cast<Fn>(p);
}

int entryOf(const char* name) {
  if (name == nullptr ||
      !((name[0] == 'c' && name[1] == 'u') || std::strncmp(name, "nvml", 4) == 0)) {
    return -1;
  }
  for (int i = 0; i < kEntryCount; ++i) {
    if (std::strcmp(kEntries[i].name, name) == 0) return i;
  }
  return -1;
}

bool governs(Kind kind) {
  switch (kind) {
    case Kind::kControl:
      return g_active;
    case Kind::kMemory:
      return g_memory || g_refused.load(std::memory_order_relaxed);
    case Kind::kLaunch:
      return g_compute || g_refused.load(std::memory_order_relaxed);
    case Kind::kNvml:
      return g_active;
  }
  return false;
}

// What a program is handed for `name` when the loader found `p`.
void* govern(int id, void* p, void* handle) {
  if (p == nullptr || id < 0 || !governs(kEntries[id].kind) || ours(p)) return p;
  void* expected = nullptr;
  __atomic_compare_exchange_n(&g_real[id], &expected, p, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  if (handle != RTLD_DEFAULT && handle != RTLD_NEXT) {
    void* none = nullptr;  // the library the program opened, for the shim's own lookups
    __atomic_compare_exchange_n(kEntries[id].kind == Kind::kNvml ? &g_nvml : &g_cuda, &none, handle,
                                false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
  return g_wrapper[id];
}

// What cuGetProcAddress's caller is handed for `symbol` when the driver gave `p`: the entry whose
// exported address is `p`, else the version the driver would give for (cuda_version, flags).
void* governProc(const char* symbol, void* p, int cuda_version, cuuint64_t flags) {
  if (p == nullptr || symbol == nullptr || !g_active || ours(p)) return p;
  int chosen = -1;
  void* h = libraryHandle(Kind::kControl, false);
  for (int i = 0; i < kEntryCount; ++i) {
    if (std::strcmp(kEntries[i].base, symbol) != 0) continue;
    if (h != nullptr && g_dlsym(h, kEntries[i].name) == p) {
      chosen = i;
      break;
    }
  }
  if (chosen < 0) {
    const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    for (int i = 0; i < kEntryCount; ++i) {
      const Entry& e = kEntries[i];
      if (std::strcmp(e.base, symbol) != 0 || e.since > cuda_version) continue;
      if (e.per_thread && !per_thread) continue;
      if (chosen < 0 || e.since > kEntries[chosen].since || (e.per_thread && per_thread)) {
        chosen = i;
      }
    }
  }
  return chosen < 0 ? p : govern(chosen, p, nullptr);
}

// ---- Start --------------------------------------------------------------------------------------

void atforkChild() {
  g_region.forgetSlotAfterFork();
  if (g_books_mu != nullptr) {
    new (g_books_mu) std::mutex();  // another thread may have held it at fork()
    g_pointers->clear();
    g_handles->clear();
    g_arrays->clear();
    g_contexts->clear();
    std::memset(g_primary_refs, 0, sizeof g_primary_refs);
    std::memset(g_primary_bytes, 0, sizeof g_primary_bytes);
  }
}

void fillWrappers();

void start() {
  fillWrappers();
  findDlsym();
  try {
    g_limits = new Limits(readLimits([](const char* name) { return ::getenv(name); }));
  } catch (...) {
    say("out of memory while starting");
    std::abort();
  }
  g_active = g_limits->active();
  if (!g_active) return;
  g_memory = g_limits->limitsMemory();
  g_compute = g_limits->limitsCompute();
  try {
    g_books_mu = new std::mutex();
    g_pointers = new std::unordered_map<CUdeviceptr, Held>();
    g_handles = new std::unordered_map<CUmemGenericAllocationHandle, Held>();
    g_arrays = new std::unordered_map<void*, Held>();
    g_contexts = new std::unordered_map<CUcontext, Held>();
    g_visible_once = new std::once_flag();
  } catch (...) {
    say("out of memory while starting");
    std::abort();  // a share that cannot be kept must not run unlimited
  }
  pthread_atfork(nullptr, nullptr, atforkChild);
  if (!g_limits->error.empty()) {
    refuse(g_limits->error);
    return;
  }
  if (g_dlsym == nullptr || g_dlvsym == nullptr) {
    refuse("the C library's dlsym cannot be found, so the driver cannot be governed");
    return;
  }
  std::string error;
  try {
    if (!g_region.open(g_limits->shared_cache, *g_limits, &error)) refuse(error);
  } catch (...) {
    refuse("out of memory while opening the shared region");
  }
}

void ensureStarted() { pthread_once(&g_once, start); }

__attribute__((constructor)) void onLoad() { ensureStarted(); }

// ---- Devices -----------------------------------------------------------------------------------

int currentDevice() {
  auto get = helper<CUresult (*)(CUdevice*)>(kCtxGetDevice);
  CUdevice d = -1;
  if (get == nullptr || get(&d) != CUDA_SUCCESS || d < 0 || d >= kMaxDevices) return -1;
  return d;
}

bool nvmlReady() {
  static std::atomic<int> state{0};  // 0 unknown, 1 ready, 2 not reachable
  int s = state.load(std::memory_order_acquire);
  if (s == 0) {
    auto init = helper<nvmlReturn_t (*)()>(kNvmlInit);
    s = init != nullptr && init() == NVML_SUCCESS ? 1 : 2;
    state.store(s, std::memory_order_release);
  }
  return s == 1;
}

// The pod's devices in CUDA's order, as NVML handles.
void findVisible() {
  if (!nvmlReady()) return;
  auto by_index = helper<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(kNvmlGetHandleByIndex);
  auto by_uuid = real<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(k_nvmlDeviceGetHandleByUUID);
  auto count_fn = real<nvmlReturn_t (*)(unsigned*)>(k_nvmlDeviceGetCount_v2);
  if (by_uuid == nullptr) {
    by_uuid = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(
        resolve("nvmlDeviceGetHandleByUUID", Kind::kNvml, true));
  }
  if (count_fn == nullptr) {
    count_fn = reinterpret_cast<nvmlReturn_t (*)(unsigned*)>(
        resolve("nvmlDeviceGetCount_v2", Kind::kNvml, true));
  }
  unsigned total = 0;
  if (by_index == nullptr || count_fn == nullptr || count_fn(&total) != NVML_SUCCESS) return;
  int n = 0;
  const char* list = ::getenv("CUDA_VISIBLE_DEVICES");
  if (list == nullptr) {
    for (unsigned i = 0; i < total && n < kMaxDevices; ++i) {
      if (by_index(i, &g_visible[n]) == NVML_SUCCESS) ++n;
    }
  } else {
    // As CUDA reads it: a comma-separated list, ending at the first entry that names no device.
    const char* p = list;
    while (*p != '\0' && n < kMaxDevices) {
      const char* end = std::strchr(p, ',');
      std::string item(p, end == nullptr ? std::strlen(p) : static_cast<size_t>(end - p));
      while (!item.empty() && item.front() == ' ') item.erase(0, 1);
      nvmlDevice_t d = nullptr;
      bool ok = false;
      if (!item.empty() && item[0] >= '0' && item[0] <= '9') {
        char* stop = nullptr;
        const unsigned long i = std::strtoul(item.c_str(), &stop, 10);
        ok = *stop == '\0' && i < total && by_index(static_cast<unsigned>(i), &d) == NVML_SUCCESS;
      } else if (by_uuid != nullptr && !item.empty()) {
        ok = by_uuid(item.c_str(), &d) == NVML_SUCCESS;
      }
      if (!ok) break;
      g_visible[n++] = d;
      if (end == nullptr) break;
      p = end + 1;
    }
  }
  g_visible_count = n;
}

__attribute__((tls_model("initial-exec"))) thread_local bool t_finding = false;

int visibleCount() {
  if (t_finding) return -1;  // NVML asking itself while the shim looks: pass it through
  std::call_once(*g_visible_once, [] {
    t_finding = true;
    findVisible();
    t_finding = false;
  });
  return g_visible_count;
}

// The CUDA ordinal of an NVML device, or -1 when it is not one of the pod's.
int ordinalOf(nvmlDevice_t d) {
  const int n = visibleCount();
  for (int i = 0; i < n; ++i) {
    if (g_visible[i] == d) return i;
  }
  return -1;
}

// The device's used memory as NVML counts it; false without NVML.
bool nvmlUsed(int ordinal, uint64_t* used) {
  if (visibleCount() <= ordinal || ordinal < 0) return false;
  auto get = helper<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(kNvmlGetMemory);
  nvmlMemory_t m{};
  if (get == nullptr || get(g_visible[ordinal], &m) != NVML_SUCCESS) return false;
  *used = m.used;
  return true;
}

// ---- Memory ------------------------------------------------------------------------------------

bool memoryOpen() { return !g_refused.load(std::memory_order_relaxed); }

// Reserves `bytes` on the current device for an allocation the driver is about to make; the
// device, or -1 with `*refusal` set when it must not be made.
int reserveCurrent(uint64_t bytes, CUresult* refusal) {
  if (!memoryOpen()) {
    *refusal = CUDA_ERROR_NOT_SUPPORTED;
    return -1;
  }
  const int d = currentDevice();
  if (d < 0) {
    *refusal = CUDA_ERROR_INVALID_CONTEXT;
    return -1;
  }
  if (!g_region.reserve(d, bytes)) {
    *refusal = CUDA_ERROR_OUT_OF_MEMORY;
    return -1;
  }
  return d;
}

// Books what was taken, to give back later; a book that cannot grow leaves the bytes charged to
// this process until it exits (never the other way).
template <typename Key>
void keep(std::unordered_map<Key, Held>* book, Key key, Held held) {
  try {
    std::lock_guard<std::mutex> lock(*g_books_mu);
    (*book)[key] = held;
  } catch (...) {
  }
}

void remember(CUdeviceptr p, int device, uint64_t bytes) {
  keep(g_pointers, p, Held{device, bytes});
}

// Gives back what `book` holds for `key`: a freed pointer, a released handle, a destroyed context.
template <typename Key>
void giveBack(std::unordered_map<Key, Held>* book, Key key) {
  if (book == nullptr) return;
  Held h{-1, 0};
  {
    std::lock_guard<std::mutex> lock(*g_books_mu);
    auto it = book->find(key);
    if (it == book->end()) return;
    h = it->second;
    book->erase(it);
  }
  g_region.release(h.device, h.bytes);
}

void forget(CUdeviceptr p) { giveBack(g_pointers, p); }

template <typename Alloc>
CUresult allocate(CUdeviceptr* dptr, uint64_t bytes, Alloc&& alloc) {
  const Inside inside;
  if (!inside.outer || dptr == nullptr || bytes == 0) return alloc();  // the driver's own answer
  CUresult refusal = CUDA_SUCCESS;
  const int d = reserveCurrent(bytes, &refusal);
  if (d < 0) return refusal;
  const CUresult r = alloc();
  if (r != CUDA_SUCCESS) {
    g_region.release(d, bytes);
    return r;
  }
  remember(*dptr, d, bytes);
  return r;
}

// A context's own memory, measured as what the device lost while it was made, less what the
// pod's processes allocated meanwhile (NVML's count of used memory; 0 without NVML).
struct ContextMeter {
  int device;
  bool measured = false;
  uint64_t before = 0;
  uint64_t pod_before = 0;
  explicit ContextMeter(int d) : device(d) {
    if (d >= 0) {
      measured = nvmlUsed(d, &before);
      pod_before = g_region.used(d);
    }
  }
  uint64_t taken() const {
    uint64_t after = 0;
    if (device < 0 || !measured || !nvmlUsed(device, &after)) return 0;
    const uint64_t pod_after = g_region.used(device);
    const uint64_t pod_delta = pod_after > pod_before ? pod_after - pod_before : 0;
    if (after <= before + pod_delta) return 0;
    return after - before - pod_delta;
  }
};

void chargeContext(CUcontext ctx, int device, uint64_t bytes) {
  if (bytes == 0) return;
  g_region.charge(device, bytes);
  keep(g_contexts, ctx, Held{device, bytes});
}

// ---- Compute -----------------------------------------------------------------------------------

// The pod's utilisation of `ordinal` since NVML's sample `*seen_us`, in percent; -1 if unknown.
double podUtilisation(int ordinal, uint64_t* seen_us, const int32_t* pids, int npids) {
  if (visibleCount() <= ordinal || ordinal < 0) return -1;
  auto samples_fn = helper<nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessUtilizationSample_t*,
                                            unsigned*, unsigned long long)>(kNvmlProcessUtil);
  if (samples_fn != nullptr) {
    nvmlProcessUtilizationSample_t s[256];
    unsigned n = 256;
    if (samples_fn(g_visible[ordinal], s, &n, *seen_us) == NVML_SUCCESS) {
      double sum = 0;
      bool any = false;
      for (int k = 0; k < npids; ++k) {
        double pid_sum = 0;
        int pid_n = 0;
        for (unsigned i = 0; i < n && i < 256; ++i) {
          if (static_cast<int32_t>(s[i].pid) != pids[k] || s[i].timeStamp <= *seen_us) continue;
          pid_sum += s[i].smUtil;
          ++pid_n;
        }
        if (pid_n > 0) {
          sum += pid_sum / pid_n;
          any = true;
        }
      }
      for (unsigned i = 0; i < n && i < 256; ++i) {
        if (s[i].timeStamp > *seen_us) *seen_us = s[i].timeStamp;
      }
      if (any) return sum;
    }
  }
  // No sample names the pod's processes (another PID namespace than NVML's): the whole device's
  // utilisation, which can only throttle the pod more than its share, never less.
  auto rates = helper<nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*)>(kNvmlUtilRates);
  nvmlUtilization_t u{};
  if (rates == nullptr || rates(g_visible[ordinal], &u) != NVML_SUCCESS) return -1;
  return u.gpu;
}

// Waits until the pod may launch `cost` more on the current device.
CUresult throttle(uint64_t cost) {
  if (!g_compute || t_depth > 1) return CUDA_SUCCESS;
  if (g_refused.load(std::memory_order_relaxed)) return CUDA_ERROR_NOT_SUPPORTED;
  const int d = currentDevice();
  if (d < 0 || g_limits->sm_percent[d] == 0) return CUDA_SUCCESS;
  if (cost == 0) cost = 1;
  for (;;) {
    const uint64_t now = nowNs();
    ShareRegion::TickClaim claim;
    const ShareRegion::Turn turn = g_region.claimTick(d, now, kControlPeriodNs, &claim);
    if (turn != ShareRegion::Turn::kNone) {
      const double util = podUtilisation(d, &claim.nvml_seen_us, claim.pids, claim.npids);
      g_region.finishTick(d, claim,
                          turn == ShareRegion::Turn::kBaseline
                              ? claim.rate_milli
                              : retuneRate(claim.rate_milli, util, claim.launched, claim.window_ns,
                                           g_limits->sm_percent[d]));
    }
    const uint64_t wait = g_region.take(d, cost, now);
    if (wait == 0) return CUDA_SUCCESS;
    const uint64_t nap = wait < 10'000'000 ? wait : 10'000'000;
    timespec ts{static_cast<time_t>(nap / 1'000'000'000), static_cast<long>(nap % 1'000'000'000)};
    nanosleep(&ts, nullptr);
  }
}

}  // namespace
}  // namespace purser::gpushare

using namespace purser::gpushare;  // NOLINT: the exported C functions below

// ---- Resolution --------------------------------------------------------------------------------

PURSER_EXPORT void* dlsym(void* handle, const char* name) noexcept {
  ensureStarted();
  if (g_dlsym == nullptr) return nullptr;
  void* p = handle == RTLD_NEXT ? nextAfter(__builtin_return_address(0), name, nullptr)
                                : g_dlsym(handle, name);
  return g_active ? govern(entryOf(name), p, handle) : p;
}

PURSER_EXPORT void* dlvsym(void* handle, const char* name, const char* version) noexcept {
  ensureStarted();
  if (g_dlvsym == nullptr) return nullptr;
  void* p = handle == RTLD_NEXT ? nextAfter(__builtin_return_address(0), name, version)
                                : g_dlvsym(handle, name, version);
  return g_active ? govern(entryOf(name), p, handle) : p;
}

PURSER_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                        cuuint64_t flags) noexcept {
  auto fn = real<CUresult (*)(const char*, void**, int, cuuint64_t)>(k_cuGetProcAddress);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = fn(symbol, pfn, cuda_version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = governProc(symbol, *pfn, cuda_version, flags);
  return r;
}

PURSER_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                           cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* status) noexcept {
  auto fn =
      real<CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*)>(
          k_cuGetProcAddress_v2);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = fn(symbol, pfn, cuda_version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = governProc(symbol, *pfn, cuda_version, flags);
  return r;
}

PURSER_EXPORT CUresult cuInit(unsigned int flags) noexcept {
  ensureStarted();
  auto fn = real<CUresult (*)(unsigned)>(k_cuInit);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = fn(flags);
  if (r != CUDA_SUCCESS || !g_active) return r;
  int version = 0;
  auto get_version = helper<CUresult (*)(int*)>(kDriverGetVersion);
  if (!g_refused.load() && (get_version == nullptr || get_version(&version) != CUDA_SUCCESS)) {
    refuse("the driver does not say its version, so the share cannot be enforced");
  } else if (!g_refused.load() && (version < 11000 || version >= 14000)) {
    refuse("driver API version " + std::to_string(version / 1000) + "." +
           std::to_string(version % 1000 / 10) +
           " is not one this shim knows (11.0 to 13.x); the share cannot be enforced");
  } else if (!g_refused.load() && g_compute && !nvmlReady()) {
    refuse(
        "CUDA_DEVICE_SM_LIMIT needs NVML (libnvidia-ml.so.1) to measure utilisation, and it "
        "cannot be loaded");
  }
  if (g_refused.load()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      say(((g_refusal != nullptr ? *g_refusal : std::string("the share cannot be enforced")) +
           "; refusing the GPU")
              .c_str());
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return r;
}

// ---- Memory ------------------------------------------------------------------------------------

// The legacy 32-bit entries (CUDA before 3.2) are not counted: under a cap they are refused.
PURSER_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1*, unsigned int) noexcept {
  return CUDA_ERROR_NOT_SUPPORTED;
}
PURSER_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1*, unsigned int*, unsigned int, unsigned int,
                                       unsigned int) noexcept {
  return CUDA_ERROR_NOT_SUPPORTED;
}
PURSER_EXPORT CUresult cuMemFree(CUdeviceptr_v1) noexcept { return CUDA_ERROR_NOT_SUPPORTED; }

PURSER_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) noexcept {
  auto fn = real<CUresult (*)(CUdeviceptr*, size_t)>(k_cuMemAlloc_v2);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  return allocate(dptr, bytes, [&] { return fn(dptr, bytes); });
}

PURSER_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                          size_t height, unsigned int element) noexcept {
  auto fn =
      real<CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned)>(k_cuMemAllocPitch_v2);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const Inside inside;
  if (!inside.outer || dptr == nullptr || pitch == nullptr || width == 0 || height == 0) {
    return fn(dptr, pitch, width, height, element);
  }
  // The pitch is known only after: reserve the widest the driver pads a row to (512 bytes), then
  // keep what it took.
  const uint64_t row = (static_cast<uint64_t>(width) + 511) / 512 * 512;
  if (height > UINT64_MAX / row) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t bound = row * height;
  CUresult refusal = CUDA_SUCCESS;
  const int d = reserveCurrent(bound, &refusal);
  if (d < 0) return refusal;
  const CUresult r = fn(dptr, pitch, width, height, element);
  if (r != CUDA_SUCCESS) {
    g_region.release(d, bound);
    return r;
  }
  const uint64_t taken = static_cast<uint64_t>(*pitch) * height;
  if (taken > bound) {
    // Wider than any pitch a driver pads to: take the rest too, or give the memory back.
    if (!g_region.reserve(d, taken - bound)) {
      real<CUresult (*)(CUdeviceptr)>(k_cuMemFree_v2)(*dptr);
      g_region.release(d, bound);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  } else {
    g_region.release(d, bound - taken);
  }
  remember(*dptr, d, taken);
  return r;
}

PURSER_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes,
                                         unsigned int flags) noexcept {
  auto fn = real<CUresult (*)(CUdeviceptr*, size_t, unsigned)>(k_cuMemAllocManaged);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  return allocate(dptr, bytes, [&] { return fn(dptr, bytes, flags); });
}

PURSER_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) noexcept {
  auto fn = real<CUresult (*)(CUdeviceptr)>(k_cuMemFree_v2);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = fn(p);
  if (r == CUDA_SUCCESS && g_pointers != nullptr) forget(p);
  return r;
}

namespace {
template <Id kId>
CUresult allocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) noexcept {
  auto fn = real<CUresult (*)(CUdeviceptr*, size_t, CUstream)>(kId);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  return allocate(dptr, bytes, [&] { return fn(dptr, bytes, stream); });
}
template <Id kId>
CUresult allocFromPool(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                       CUstream stream) noexcept {
  auto fn = real<CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream)>(kId);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  return allocate(dptr, bytes, [&] { return fn(dptr, bytes, pool, stream); });
}
template <Id kId>
CUresult freeAsync(CUdeviceptr p, CUstream stream) noexcept {
  auto fn = real<CUresult (*)(CUdeviceptr, CUstream)>(kId);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = fn(p, stream);
  if (r == CUDA_SUCCESS && g_pointers != nullptr) forget(p);
  return r;
}
}  // namespace

PURSER_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* d, size_t n, CUstream s) noexcept {
  return allocAsync<k_cuMemAllocAsync>(d, n, s);
}
PURSER_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* d, size_t n, CUstream s) noexcept {
  return allocAsync<k_cuMemAllocAsync_ptsz>(d, n, s);
}
PURSER_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* d, size_t n, CUmemoryPool p,
                                               CUstream s) noexcept {
  return allocFromPool<k_cuMemAllocFromPoolAsync>(d, n, p, s);
}
PURSER_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* d, size_t n, CUmemoryPool p,
                                                    CUstream s) noexcept {
  return allocFromPool<k_cuMemAllocFromPoolAsync_ptsz>(d, n, p, s);
}
PURSER_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) noexcept {
  return freeAsync<k_cuMemFreeAsync>(p, s);
}
PURSER_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) noexcept {
  return freeAsync<k_cuMemFreeAsync_ptsz>(p, s);
}

PURSER_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                                   const CUmemAllocationProp* prop,
                                   unsigned long long flags) noexcept {
  auto fn = real<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                              unsigned long long)>(k_cuMemCreate);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  // Only memory on a device is the share's; host and NUMA locations pass through untouched (the
  // property is read, never written).
  const Inside inside;
  if (!inside.outer || handle == nullptr || prop == nullptr || bytes == 0 ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return fn(handle, bytes, prop, flags);
  }
  if (!memoryOpen()) return CUDA_ERROR_NOT_SUPPORTED;
  const int d = prop->location.id;
  if (d < 0 || d >= kMaxDevices) return fn(handle, bytes, prop, flags);  // the driver refuses it
  if (!g_region.reserve(d, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = fn(handle, bytes, prop, flags);
  if (r != CUDA_SUCCESS) {
    g_region.release(d, bytes);
    return r;
  }
  keep(g_handles, *handle, Held{d, bytes});
  return r;
}

PURSER_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) noexcept {
  auto fn = real<CUresult (*)(CUmemGenericAllocationHandle)>(k_cuMemRelease);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = fn(handle);
  if (r == CUDA_SUCCESS) giveBack(g_handles, handle);
  return r;
}

// ---- Arrays: counted at their elements' size (the driver's padding is not seen) -----------------

namespace {
// Bytes of one element of `format` per channel; a format not known here (video, compressed,
// normalised ones) is counted at 16, more than any takes: over, never under.
uint64_t elementBytes(int format) {
  switch (format) {
    case 0x01:
    case 0x08:
      return 1;
    case 0x02:
    case 0x09:
    case 0x10:
      return 2;
    case 0x03:
    case 0x0a:
    case 0x20:
      return 4;
    default:
      return 16;
  }
}

// Width x height x depth x channels x element, saturating (a hostile size is refused, not wrapped).
uint64_t arrayBytes(size_t w, size_t h, size_t d, unsigned channels, int format) {
  uint64_t n = elementBytes(format) * (channels == 0 ? 1 : channels);
  for (uint64_t dim : {uint64_t{w}, uint64_t{h == 0 ? 1 : h}, uint64_t{d == 0 ? 1 : d}}) {
    if (dim != 0 && n > UINT64_MAX / dim) return UINT64_MAX;
    n *= dim;
  }
  return n;
}

template <typename Handle, typename Create>
CUresult createArray(Handle* handle, uint64_t bytes, Create&& create) {
  const Inside inside;
  if (!inside.outer || handle == nullptr || bytes == 0) return create();
  CUresult refusal = CUDA_SUCCESS;
  const int d = reserveCurrent(bytes, &refusal);
  if (d < 0) return refusal;
  const CUresult r = create();
  if (r != CUDA_SUCCESS) {
    g_region.release(d, bytes);
    return r;
  }
  keep(g_arrays, static_cast<void*>(*handle), Held{d, bytes});
  return r;
}
}  // namespace

PURSER_EXPORT CUresult cuArrayCreate_v2(CUarray* array,
                                        const CUDA_ARRAY_DESCRIPTOR* desc) noexcept {
  auto fn = real<CUresult (*)(CUarray*, const CUDA_ARRAY_DESCRIPTOR*)>(k_cuArrayCreate_v2);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const uint64_t bytes =
      desc == nullptr ? 0
                      : arrayBytes(desc->Width, desc->Height, 1, desc->NumChannels, desc->Format);
  return createArray(array, bytes, [&] { return fn(array, desc); });
}

PURSER_EXPORT CUresult cuArray3DCreate_v2(CUarray* array,
                                          const CUDA_ARRAY3D_DESCRIPTOR* desc) noexcept {
  auto fn = real<CUresult (*)(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*)>(k_cuArray3DCreate_v2);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const uint64_t bytes = desc == nullptr ? 0
                                         : arrayBytes(desc->Width, desc->Height, desc->Depth,
                                                      desc->NumChannels, desc->Format);
  return createArray(array, bytes, [&] { return fn(array, desc); });
}

PURSER_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* array,
                                              const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                              unsigned int levels) noexcept {
  auto fn = real<CUresult (*)(CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*, unsigned)>(
      k_cuMipmappedArrayCreate);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  uint64_t bytes = 0;
  if (desc != nullptr) {
    // Every level, each half the last in every dimension (at least one).
    size_t w = desc->Width, h = desc->Height, d = desc->Depth;
    for (unsigned l = 0; l < (levels == 0 ? 1 : levels) && l < 64; ++l) {
      const uint64_t level = arrayBytes(w, h, d, desc->NumChannels, desc->Format);
      bytes = level > UINT64_MAX - bytes ? UINT64_MAX : bytes + level;
      w = w > 1 ? w / 2 : 1;
      h = h > 1 ? h / 2 : h;
      d = d > 1 ? d / 2 : d;
    }
  }
  return createArray(array, bytes, [&] { return fn(array, desc, levels); });
}

PURSER_EXPORT CUresult cuArrayDestroy(CUarray array) noexcept {
  auto fn = real<CUresult (*)(CUarray)>(k_cuArrayDestroy);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = fn(array);
  if (r == CUDA_SUCCESS) giveBack(g_arrays, static_cast<void*>(array));
  return r;
}

PURSER_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray array) noexcept {
  auto fn = real<CUresult (*)(CUmipmappedArray)>(k_cuMipmappedArrayDestroy);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = fn(array);
  if (r == CUDA_SUCCESS) giveBack(g_arrays, static_cast<void*>(array));
  return r;
}

namespace {
// The share as the device's memory: the cap as the total, what the pod has not used as free
// (never more than the device really has free).
void shareInfo(size_t* free_bytes, size_t* total_bytes) {
  const int d = currentDevice();
  if (d < 0 || free_bytes == nullptr || total_bytes == nullptr) return;
  const uint64_t cap = g_region.limit(d);
  if (cap == 0) return;
  const uint64_t used = g_region.used(d);
  const uint64_t left = used >= cap ? 0 : cap - used;
  *free_bytes = static_cast<size_t>(left < *free_bytes ? left : *free_bytes);
  *total_bytes = static_cast<size_t>(cap);
}
}  // namespace

PURSER_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) noexcept {
  auto fn = real<CUresult (*)(size_t*, size_t*)>(k_cuMemGetInfo_v2);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const Inside inside;
  const CUresult r = fn(free_bytes, total_bytes);
  if (inside.outer && r == CUDA_SUCCESS && g_memory) shareInfo(free_bytes, total_bytes);
  return r;
}

PURSER_EXPORT CUresult cuMemGetInfo(unsigned int* free_bytes, unsigned int* total_bytes) noexcept {
  auto fn = real<CUresult (*)(size_t*, size_t*)>(k_cuMemGetInfo_v2);
  if (fn == nullptr || free_bytes == nullptr || total_bytes == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t f = 0;
  size_t t = 0;
  const CUresult r = cuMemGetInfo_v2(&f, &t);
  *free_bytes = static_cast<unsigned>(f > 0xffffffffu ? 0xffffffffu : f);
  *total_bytes = static_cast<unsigned>(t > 0xffffffffu ? 0xffffffffu : t);
  return r;
}

// ---- Contexts: their own memory counts against the share ----------------------------------------

namespace {
template <typename Create>
CUresult createContext(CUcontext* ctx, CUdevice dev, Create&& create) {
  const Inside inside;
  const ContextMeter meter(inside.outer && dev >= 0 && dev < kMaxDevices && g_memory ? dev : -1);
  const CUresult r = create();
  if (r == CUDA_SUCCESS && ctx != nullptr) chargeContext(*ctx, meter.device, meter.taken());
  return r;
}
}  // namespace

PURSER_EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice dev) noexcept {
  auto fn = real<CUresult (*)(CUcontext*, unsigned, CUdevice)>(k_cuCtxCreate_v2);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  return createContext(ctx, dev, [&] { return fn(ctx, flags, dev); });
}

PURSER_EXPORT CUresult cuCtxCreate_v3(CUcontext* ctx, void* params, int nparams, unsigned int flags,
                                      CUdevice dev) noexcept {
  auto fn = real<CUresult (*)(CUcontext*, void*, int, unsigned, CUdevice)>(k_cuCtxCreate_v3);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  return createContext(ctx, dev, [&] { return fn(ctx, params, nparams, flags, dev); });
}

PURSER_EXPORT CUresult cuCtxCreate_v4(CUcontext* ctx, void* params, unsigned int flags,
                                      CUdevice dev) noexcept {
  auto fn = real<CUresult (*)(CUcontext*, void*, unsigned, CUdevice)>(k_cuCtxCreate_v4);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  return createContext(ctx, dev, [&] { return fn(ctx, params, flags, dev); });
}

PURSER_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) noexcept {
  auto fn = real<CUresult (*)(CUcontext)>(k_cuCtxDestroy_v2);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = fn(ctx);
  if (r == CUDA_SUCCESS) giveBack(g_contexts, ctx);
  return r;
}

PURSER_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) noexcept {
  auto fn = real<CUresult (*)(CUcontext*, CUdevice)>(k_cuDevicePrimaryCtxRetain);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const Inside inside;
  const bool counted =
      inside.outer && g_memory && dev >= 0 && dev < kMaxDevices && g_books_mu != nullptr;
  bool first = false;
  if (counted) {
    std::lock_guard<std::mutex> lock(*g_books_mu);
    first = g_primary_refs[dev] == 0;
  }
  const ContextMeter meter(first ? dev : -1);
  const CUresult r = fn(ctx, dev);
  if (r == CUDA_SUCCESS && counted) {
    const uint64_t bytes = meter.taken();
    std::lock_guard<std::mutex> lock(*g_books_mu);
    if (g_primary_refs[dev]++ == 0 && bytes > 0) {
      g_primary_bytes[dev] = bytes;
      g_region.charge(dev, bytes);
    }
  }
  return r;
}

namespace {
void dropPrimary(CUdevice dev, bool reset) {
  if (!g_memory || dev < 0 || dev >= kMaxDevices || g_books_mu == nullptr) return;
  uint64_t give = 0;
  {
    std::lock_guard<std::mutex> lock(*g_books_mu);
    if (g_primary_refs[dev] > 0) --g_primary_refs[dev];
    if (reset) g_primary_refs[dev] = 0;
    if (g_primary_refs[dev] == 0) std::swap(give, g_primary_bytes[dev]);
  }
  if (give > 0) g_region.release(dev, give);
}
}  // namespace

PURSER_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) noexcept {
  auto fn = real<CUresult (*)(CUdevice)>(k_cuDevicePrimaryCtxRelease_v2);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = fn(dev);
  if (r == CUDA_SUCCESS) dropPrimary(dev, false);
  return r;
}

PURSER_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) noexcept {
  auto fn = real<CUresult (*)(CUdevice)>(k_cuDevicePrimaryCtxReset_v2);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = fn(dev);
  if (r == CUDA_SUCCESS) dropPrimary(dev, true);
  return r;
}

// ---- Launches
// ------------------------------------------------------------------------------------

namespace {
uint64_t blocks(unsigned x, unsigned y, unsigned z) { return static_cast<uint64_t>(x) * y * z; }

template <Id kId>
CUresult launchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                      unsigned bz, unsigned shared, CUstream s, void** params,
                      void** extra) noexcept {
  auto fn = real<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void**, void**)>(kId);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const Inside inside;
  const CUresult t = throttle(blocks(gx, gy, gz));
  if (t != CUDA_SUCCESS) return t;
  return fn(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

template <Id kId>
CUresult launchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                        void** extra) noexcept {
  auto fn = real<CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**)>(kId);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const Inside inside;
  if (config != nullptr) {
    const CUresult t = throttle(blocks(config->gridDimX, config->gridDimY, config->gridDimZ));
    if (t != CUDA_SUCCESS) return t;
  }
  return fn(config, f, params, extra);
}

template <Id kId>
CUresult launchCooperative(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned shared, CUstream s,
                           void** params) noexcept {
  auto fn = real<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void**)>(kId);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const Inside inside;
  const CUresult t = throttle(blocks(gx, gy, gz));
  if (t != CUDA_SUCCESS) return t;
  return fn(f, gx, gy, gz, bx, by, bz, shared, s, params);
}

template <Id kId>
CUresult graphLaunch(CUgraphExec g, CUstream s) noexcept {
  auto fn = real<CUresult (*)(CUgraphExec, CUstream)>(kId);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const Inside inside;
  const CUresult t = throttle(1);
  if (t != CUDA_SUCCESS) return t;
  return fn(g, s);
}
}  // namespace

PURSER_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                      unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                      CUstream s, void** params, void** extra) noexcept {
  return launchKernel<k_cuLaunchKernel>(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}
PURSER_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                           unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                           CUstream s, void** params, void** extra) noexcept {
  return launchKernel<k_cuLaunchKernel_ptsz>(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}
PURSER_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params,
                                        void** extra) noexcept {
  return launchKernelEx<k_cuLaunchKernelEx>(c, f, params, extra);
}
PURSER_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** params,
                                             void** extra) noexcept {
  return launchKernelEx<k_cuLaunchKernelEx_ptsz>(c, f, params, extra);
}
PURSER_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy,
                                                 unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                                 unsigned shared, CUstream s,
                                                 void** params) noexcept {
  return launchCooperative<k_cuLaunchCooperativeKernel>(f, gx, gy, gz, bx, by, bz, shared, s,
                                                        params);
}
PURSER_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                      unsigned gz, unsigned bx, unsigned by,
                                                      unsigned bz, unsigned shared, CUstream s,
                                                      void** params) noexcept {
  return launchCooperative<k_cuLaunchCooperativeKernel_ptsz>(f, gx, gy, gz, bx, by, bz, shared, s,
                                                             params);
}
PURSER_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) noexcept {
  return graphLaunch<k_cuGraphLaunch>(g, s);
}
PURSER_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) noexcept {
  return graphLaunch<k_cuGraphLaunch_ptsz>(g, s);
}
PURSER_EXPORT CUresult cuLaunch(CUfunction f) noexcept {
  auto fn = real<CUresult (*)(CUfunction)>(k_cuLaunch);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const Inside inside;
  const CUresult t = throttle(1);
  return t != CUDA_SUCCESS ? t : fn(f);
}
PURSER_EXPORT CUresult cuLaunchGrid(CUfunction f, int w, int h) noexcept {
  auto fn = real<CUresult (*)(CUfunction, int, int)>(k_cuLaunchGrid);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const Inside inside;
  const CUresult t = throttle(w > 0 && h > 0 ? static_cast<uint64_t>(w) * h : 1);
  return t != CUDA_SUCCESS ? t : fn(f, w, h);
}
PURSER_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s) noexcept {
  auto fn = real<CUresult (*)(CUfunction, int, int, CUstream)>(k_cuLaunchGridAsync);
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  const Inside inside;
  const CUresult t = throttle(w > 0 && h > 0 ? static_cast<uint64_t>(w) * h : 1);
  return t != CUDA_SUCCESS ? t : fn(f, w, h, s);
}

// ---- NVML: the pod's devices, and its share as their memory -------------------------------------

PURSER_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) noexcept {
  auto fn = real<nvmlReturn_t (*)(unsigned*)>(k_nvmlDeviceGetCount_v2);
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const Inside inside;
  const nvmlReturn_t r = fn(count);
  if (inside.outer && r == NVML_SUCCESS && g_active && count != nullptr && visibleCount() >= 0) {
    *count = static_cast<unsigned>(visibleCount());
  }
  return r;
}

PURSER_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) noexcept {
  auto fn = real<nvmlReturn_t (*)(unsigned*)>(k_nvmlDeviceGetCount);
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const Inside inside;
  const nvmlReturn_t r = fn(count);
  if (inside.outer && r == NVML_SUCCESS && g_active && count != nullptr && visibleCount() >= 0) {
    *count = static_cast<unsigned>(visibleCount());
  }
  return r;
}

namespace {
template <Id kId>
nvmlReturn_t handleByIndex(unsigned index, nvmlDevice_t* device) noexcept {
  auto fn = real<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(kId);
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const Inside inside;
  if (!inside.outer || !g_active || visibleCount() < 0) return fn(index, device);
  if (device == nullptr || index >= static_cast<unsigned>(visibleCount())) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = g_visible[index];
  return NVML_SUCCESS;
}

nvmlReturn_t onlyVisible(nvmlReturn_t r, nvmlDevice_t* device) {
  if (r != NVML_SUCCESS || !g_active || device == nullptr || visibleCount() < 0) return r;
  return ordinalOf(*device) < 0 ? NVML_ERROR_NOT_FOUND : r;
}

void shareMemory(nvmlDevice_t device, unsigned long long* total, unsigned long long* free_bytes,
                 unsigned long long* used) {
  if (!g_memory) return;
  const int d = ordinalOf(device);
  if (d < 0) return;
  const uint64_t cap = g_region.limit(d);
  if (cap == 0) return;
  const uint64_t mine = g_region.used(d);
  const uint64_t shown = mine > cap ? cap : mine;
  *total = cap;
  *used = shown;
  const uint64_t left = cap - shown;
  if (left < *free_bytes) *free_bytes = left;
}
}  // namespace

PURSER_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index,
                                                         nvmlDevice_t* device) noexcept {
  return handleByIndex<k_nvmlDeviceGetHandleByIndex_v2>(index, device);
}
PURSER_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index,
                                                      nvmlDevice_t* device) noexcept {
  return handleByIndex<k_nvmlDeviceGetHandleByIndex>(index, device);
}
PURSER_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid,
                                                     nvmlDevice_t* device) noexcept {
  auto fn = real<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(k_nvmlDeviceGetHandleByUUID);
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const Inside inside;
  const nvmlReturn_t r = fn(uuid, device);
  return inside.outer ? onlyVisible(r, device) : r;
}
PURSER_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus,
                                                            nvmlDevice_t* device) noexcept {
  auto fn = real<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(k_nvmlDeviceGetHandleByPciBusId_v2);
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const Inside inside;
  const nvmlReturn_t r = fn(bus, device);
  return inside.outer ? onlyVisible(r, device) : r;
}
PURSER_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
                                                   nvmlMemory_t* memory) noexcept {
  auto fn = real<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(k_nvmlDeviceGetMemoryInfo);
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const Inside inside;
  const nvmlReturn_t r = fn(device, memory);
  if (inside.outer && r == NVML_SUCCESS && memory != nullptr) {
    shareMemory(device, &memory->total, &memory->free, &memory->used);
  }
  return r;
}
PURSER_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                      nvmlMemory_v2_t* memory) noexcept {
  auto fn = real<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*)>(k_nvmlDeviceGetMemoryInfo_v2);
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const Inside inside;
  const nvmlReturn_t r = fn(device, memory);
  if (inside.outer && r == NVML_SUCCESS && memory != nullptr) {
    shareMemory(device, &memory->total, &memory->free, &memory->used);
  }
  return r;
}

// The processes on a device: only the pod's own (another pod's pids and memory are not this
// pod's to see). NVML numbers processes as the host does; where the pod runs in a PID namespace of
// its own, none match and the list is empty, as in a container.
namespace {
template <typename Info>
nvmlReturn_t onlyPodsProcesses(nvmlReturn_t r, unsigned* count, Info* infos) {
  if (r != NVML_SUCCESS || !g_active || count == nullptr || infos == nullptr) return r;
  int32_t pids[256];
  const int n = g_region.pids(pids, 256);
  unsigned kept = 0;
  for (unsigned i = 0; i < *count; ++i) {
    bool ours = false;
    for (int k = 0; k < n && !ours; ++k) ours = static_cast<int32_t>(infos[i].pid) == pids[k];
    if (ours) infos[kept++] = infos[i];
  }
  *count = kept;
  return r;
}

template <Id kId, typename Info>
nvmlReturn_t runningProcesses(nvmlDevice_t device, unsigned* count, Info* infos) noexcept {
  auto fn = real<nvmlReturn_t (*)(nvmlDevice_t, unsigned*, Info*)>(kId);
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const Inside inside;
  const nvmlReturn_t r = fn(device, count, infos);
  return inside.outer ? onlyPodsProcesses(r, count, infos) : r;
}
}  // namespace

PURSER_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(
    nvmlDevice_t device, unsigned* count, nvmlProcessInfo_v1_t* infos) noexcept {
  return runningProcesses<k_nvmlDeviceGetComputeRunningProcesses>(device, count, infos);
}
PURSER_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(
    nvmlDevice_t device, unsigned* count, nvmlProcessInfo_v2_t* infos) noexcept {
  return runningProcesses<k_nvmlDeviceGetComputeRunningProcesses_v2>(device, count, infos);
}
PURSER_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t device, unsigned* count, nvmlProcessInfo_v2_t* infos) noexcept {
  return runningProcesses<k_nvmlDeviceGetComputeRunningProcesses_v3>(device, count, infos);
}
PURSER_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(
    nvmlDevice_t device, unsigned* count, nvmlProcessInfo_v1_t* infos) noexcept {
  return runningProcesses<k_nvmlDeviceGetGraphicsRunningProcesses>(device, count, infos);
}
PURSER_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(
    nvmlDevice_t device, unsigned* count, nvmlProcessInfo_v2_t* infos) noexcept {
  return runningProcesses<k_nvmlDeviceGetGraphicsRunningProcesses_v2>(device, count, infos);
}
PURSER_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(
    nvmlDevice_t device, unsigned* count, nvmlProcessInfo_v2_t* infos) noexcept {
  return runningProcesses<k_nvmlDeviceGetGraphicsRunningProcesses_v3>(device, count, infos);
}

// Utilisation samples: the pod's processes' only, as with the lists above.
PURSER_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                           nvmlProcessUtilizationSample_t* samples,
                                                           unsigned* count,
                                                           unsigned long long last_seen) noexcept {
  auto fn = real<nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned*,
                                  unsigned long long)>(k_nvmlDeviceGetProcessUtilization);
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  const Inside inside;
  const nvmlReturn_t r = fn(device, samples, count, last_seen);
  return inside.outer ? onlyPodsProcesses(r, count, samples) : r;
}

// ---- The table of the shim's own entries --------------------------------------------------------

namespace purser::gpushare {
namespace {
void fillWrappers() {
#define PURSER_WRAPPER(name, base, since, pt, kind) \
  g_wrapper[k_##name] = reinterpret_cast<void*>(&::name);
  PURSER_ENTRIES(PURSER_WRAPPER)
#undef PURSER_WRAPPER
}

// A process that ends gives its bytes back at once, rather than when the next one looks.
__attribute__((destructor)) void onUnload() {
  if (g_active) g_region.leave();
}
}  // namespace
}  // namespace purser::gpushare
