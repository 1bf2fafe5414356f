// A program that drives a CUDA driver the way frameworks do — dlopen("libcuda.so.1"), then dlsym
// or cuGetProcAddress — never through the CUDA runtime. The GPU share tests run it under the shim
// with the fake driver (and scripts/gpu-check can run it on a real one). It prints one line of
// key=value results per command.
//
//   gpu_probe [--via dlsym|proc] [--version N] [--ptsz] [--device N] [--primary] [--hold]
//             COMMAND [ARGS]
// Commands: info | fill CHUNK | hold BYTES | free CHUNK N | async CHUNK | pool CHUNK |
//           managed CHUNK | vmm BYTES | pitch WIDTH HEIGHT | launch N GRID [graph|ex|coop] |
//           symbols | nvml | sparse
#include <dlfcn.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpushare/driver_api.h"

namespace {

struct Options {
  bool via_proc = false;
  int version = 12040;
  bool ptsz = false;
  int device = 0;
  bool primary = false;
  bool hold = false;
};
Options g_opt;
void* g_lib = nullptr;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "gpu_probe: %s\n", what);
  std::exit(2);
}

uint64_t parseSize(const char* s) {
  char* end = nullptr;
  uint64_t v = std::strtoull(s, &end, 10);
  if (*end == 'k') v <<= 10;
  if (*end == 'm') v <<= 20;
  if (*end == 'g') v <<= 30;
  return v;
}

uint64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

// An entry point, looked up as the options say: `name` for dlsym, `base` for cuGetProcAddress.
void* entry(const char* name, const char* base) {
  if (!g_opt.via_proc) return dlsym(g_lib, name);
  static GetProc get = reinterpret_cast<GetProc>(dlsym(g_lib, "cuGetProcAddress_v2"));
  if (get == nullptr) return nullptr;
  void* p = nullptr;
  CUdriverProcAddressQueryResult st = 0;
  const cuuint64_t flags =
      g_opt.ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
  // The entry's signature is that of the version asked for: cuCtxCreate's is _v2's up to 11.4.
  const int version = std::strcmp(base, "cuCtxCreate") == 0 ? 3020 : g_opt.version;
  if (get(base, &p, version, flags, &st) != CUDA_SUCCESS) return nullptr;
  return p;
}

template <typename Fn>
Fn need(const char* name, const char* base) {
  auto fn = reinterpret_cast<Fn>(entry(name, base));
  if (fn == nullptr) {
    std::fprintf(stderr, "gpu_probe: the driver has no %s\n", name);
    std::exit(3);
  }
  return fn;
}

// cuInit, a device and a context made current; exits with the driver's error on failure.
void start() {
  g_lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (g_lib == nullptr) die(dlerror());
  const CUresult r = need<CUresult (*)(unsigned)>("cuInit", "cuInit")(0);
  if (r != CUDA_SUCCESS) {
    std::printf("init=%d\n", r);
    std::exit(4);
  }
  CUdevice dev = 0;
  if (need<CUresult (*)(CUdevice*, int)>("cuDeviceGet", "cuDeviceGet")(&dev, g_opt.device) != 0) {
    die("cuDeviceGet failed");
  }
  CUcontext ctx = nullptr;
  if (g_opt.primary) {
    if (need<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain",
                                                 "cuDevicePrimaryCtxRetain")(&ctx, dev) != 0 ||
        need<CUresult (*)(CUcontext)>("cuCtxSetCurrent", "cuCtxSetCurrent")(ctx) != 0) {
      die("the primary context cannot be made current");
    }
  } else if (need<CUresult (*)(CUcontext*, unsigned, CUdevice)>("cuCtxCreate_v2", "cuCtxCreate")(
                 &ctx, 0, dev) != 0) {
    die("cuCtxCreate_v2 failed");
  }
}

void holdIfAsked() {
  if (!g_opt.hold) return;
  std::printf("holding\n");
  std::fflush(stdout);
  for (;;) pause();
}

using Alloc = CUresult (*)(CUdeviceptr*, size_t);
using Free = CUresult (*)(CUdeviceptr);

// Allocates `chunk` at a time with `alloc` until refused.
template <typename F>
void fill(uint64_t chunk, F&& alloc, std::vector<CUdeviceptr>* kept, uint64_t* total, int* error) {
  *total = 0;
  for (;;) {
    CUdeviceptr p = 0;
    const CUresult r = alloc(&p, chunk);
    if (r != CUDA_SUCCESS) {
      *error = r;
      return;
    }
    kept->push_back(p);
    *total += chunk;
  }
}

int info() {
  start();
  auto get = need<CUresult (*)(size_t*, size_t*)>("cuMemGetInfo_v2", "cuMemGetInfo");
  size_t f = 0, t = 0;
  const CUresult r = get(&f, &t);
  std::printf("result=%d total=%zu free=%zu\n", r, t, f);
  return 0;
}

int fillCommand(uint64_t chunk) {
  start();
  auto alloc = need<Alloc>("cuMemAlloc_v2", "cuMemAlloc");
  std::vector<CUdeviceptr> kept;
  uint64_t total = 0;
  int error = 0;
  fill(chunk, alloc, &kept, &total, &error);
  std::printf("allocated=%llu error=%d chunks=%zu\n", static_cast<unsigned long long>(total), error,
              kept.size());
  std::fflush(stdout);
  holdIfAsked();
  return 0;
}

int holdCommand(uint64_t bytes) {
  start();
  CUdeviceptr p = 0;
  const CUresult r = need<Alloc>("cuMemAlloc_v2", "cuMemAlloc")(&p, bytes);
  std::printf("held=%llu error=%d\n", r == 0 ? static_cast<unsigned long long>(bytes) : 0ull, r);
  std::fflush(stdout);
  g_opt.hold = true;
  holdIfAsked();
  return 0;
}

int freeCommand(uint64_t chunk, int n) {
  start();
  auto alloc = need<Alloc>("cuMemAlloc_v2", "cuMemAlloc");
  auto release = need<Free>("cuMemFree_v2", "cuMemFree");
  uint64_t first = 0, again = 0;
  for (int round = 0; round < 2; ++round) {
    std::vector<CUdeviceptr> kept;
    for (int i = 0; i < n; ++i) {
      CUdeviceptr p = 0;
      if (alloc(&p, chunk) != CUDA_SUCCESS) break;
      kept.push_back(p);
      (round == 0 ? first : again) += chunk;
    }
    for (CUdeviceptr p : kept) release(p);
  }
  std::printf("first=%llu again=%llu\n", static_cast<unsigned long long>(first),
              static_cast<unsigned long long>(again));
  return 0;
}

int asyncCommand(uint64_t chunk, bool pool) {
  start();
  using AllocAsync = CUresult (*)(CUdeviceptr*, size_t, CUstream);
  using AllocPool = CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
  using FreeAsync = CUresult (*)(CUdeviceptr, CUstream);
  const char* alloc_name =
      pool ? (g_opt.ptsz ? "cuMemAllocFromPoolAsync_ptsz" : "cuMemAllocFromPoolAsync")
           : (g_opt.ptsz ? "cuMemAllocAsync_ptsz" : "cuMemAllocAsync");
  auto free_async =
      need<FreeAsync>(g_opt.ptsz ? "cuMemFreeAsync_ptsz" : "cuMemFreeAsync", "cuMemFreeAsync");
  AllocAsync plain = nullptr;
  AllocPool from_pool = nullptr;
  if (pool) {
    from_pool = need<AllocPool>(alloc_name, "cuMemAllocFromPoolAsync");
  } else {
    plain = need<AllocAsync>(alloc_name, "cuMemAllocAsync");
  }
  auto alloc = [&](CUdeviceptr* p, size_t n) {
    return pool ? from_pool(p, n, nullptr, nullptr) : plain(p, n, nullptr);
  };
  std::vector<CUdeviceptr> kept;
  uint64_t total = 0;
  int error = 0;
  fill(chunk, alloc, &kept, &total, &error);
  int after_free = -1;
  if (!kept.empty() && free_async(kept.back(), nullptr) == CUDA_SUCCESS) {
    CUdeviceptr p = 0;
    after_free = alloc(&p, chunk);
  }
  std::printf("allocated=%llu error=%d after_free=%d\n", static_cast<unsigned long long>(total),
              error, after_free);
  return 0;
}

int managedCommand(uint64_t chunk) {
  start();
  auto managed =
      need<CUresult (*)(CUdeviceptr*, size_t, unsigned)>("cuMemAllocManaged", "cuMemAllocManaged");
  std::vector<CUdeviceptr> kept;
  uint64_t total = 0;
  int error = 0;
  fill(
      chunk, [&](CUdeviceptr* p, size_t n) { return managed(p, n, 1); }, &kept, &total, &error);
  std::printf("allocated=%llu error=%d\n", static_cast<unsigned long long>(total), error);
  return 0;
}

int vmmCommand(uint64_t bytes) {
  start();
  auto create = need<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                                  unsigned long long)>("cuMemCreate", "cuMemCreate");
  auto release = need<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease", "cuMemRelease");
  // The property sits at the very end of a page that ends where nothing is mapped: a shim that
  // read or wrote past it would fault here.
  const long page = sysconf(_SC_PAGESIZE);
  auto* pages = static_cast<char*>(aligned_alloc(page, 2 * page));
  auto* prop = reinterpret_cast<CUmemAllocationProp*>(pages + page - sizeof(CUmemAllocationProp));
  std::memset(prop, 0, sizeof *prop);
  prop->type = 1;
  prop->location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  prop->location.id = 0;
  const CUmemAllocationProp before = *prop;
  CUmemGenericAllocationHandle host = 0, dev = 0;
  const CUresult host_r = create(&host, bytes, prop, 0);
  const bool untouched = std::memcmp(&before, prop, sizeof before) == 0;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = g_opt.device;
  const CUresult dev_r = create(&dev, bytes, prop, 0);
  // Device memory within the cap, released and taken again.
  CUmemGenericAllocationHandle small = 0;
  const CUresult small_r = create(&small, bytes / 4, prop, 0);
  const CUresult release_r = small_r == 0 ? release(small) : -1;
  const CUresult again_r = create(&small, bytes / 4, prop, 0);
  std::printf("host=%d untouched=%d device=%d small=%d release=%d again=%d\n", host_r,
              untouched ? 1 : 0, dev_r, small_r, release_r, again_r);
  return 0;
}

// 2D arrays of 4096 x 4096 floats (64 MiB) until refused; one destroyed, one more made; and a 3D
// array of a format the shim does not know (counted at more than it takes).
int arrayCommand() {
  start();
  auto create = need<CUresult (*)(CUarray*, const CUDA_ARRAY_DESCRIPTOR*)>("cuArrayCreate_v2",
                                                                           "cuArrayCreate");
  auto create3d = need<CUresult (*)(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*)>("cuArray3DCreate_v2",
                                                                               "cuArray3DCreate");
  auto destroy = need<CUresult (*)(CUarray)>("cuArrayDestroy", "cuArrayDestroy");
  CUDA_ARRAY_DESCRIPTOR d{4096, 4096, 0x20, 1};
  std::vector<CUarray> kept;
  CUresult last = CUDA_SUCCESS;
  for (;;) {
    CUarray a = nullptr;
    last = create(&a, &d);
    if (last != CUDA_SUCCESS) break;
    kept.push_back(a);
  }
  const size_t filled = kept.size();
  int again = -1;
  if (!kept.empty() && destroy(kept.back()) == CUDA_SUCCESS) {
    kept.pop_back();
    CUarray a = nullptr;
    again = create(&a, &d);
    if (again == CUDA_SUCCESS) kept.push_back(a);
  }
  for (CUarray a : kept) destroy(a);
  // A known format is counted at its size: 1024 x 1024 x 32 bytes, 32 MiB.
  CUDA_ARRAY3D_DESCRIPTOR v{1024, 1024, 32, 0x01, 1, 0};
  CUarray small = nullptr;
  const CUresult known = create3d(&small, &v);
  if (known == CUDA_SUCCESS) destroy(small);
  v.Format = 0xb0;  // a video format
  v.Depth = 96;     // counted at 16 bytes an element, 1.5 GiB: past the cap
  const CUresult unknown = create3d(&small, &v);
  std::printf("arrays=%zu error=%d again=%d known3d=%d unknown3d=%d\n", filled, last, again, known,
              unknown);
  return 0;
}

int pitchCommand(uint64_t width, uint64_t height) {
  start();
  auto pitch_fn = need<CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned)>(
      "cuMemAllocPitch_v2", "cuMemAllocPitch");
  auto get = need<CUresult (*)(size_t*, size_t*)>("cuMemGetInfo_v2", "cuMemGetInfo");
  CUdeviceptr p = 0;
  size_t pitch = 0;
  const CUresult r = pitch_fn(&p, &pitch, width, height, 4);
  size_t f = 0, t = 0;
  get(&f, &t);
  std::printf("result=%d pitch=%zu used=%zu\n", r, pitch, t - f);
  return 0;
}

int launchCommand(int n, unsigned grid, const char* kind) {
  start();
  using Kernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void**, void**);
  using Graph = CUresult (*)(CUgraphExec, CUstream);
  using Ex = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
  using Coop = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**);
  const bool pt = g_opt.ptsz;
  const std::string k = kind;
  Kernel kernel = nullptr;
  Graph graph = nullptr;
  Ex ex = nullptr;
  Coop coop = nullptr;
  if (k == "graph") {
    graph = need<Graph>(pt ? "cuGraphLaunch_ptsz" : "cuGraphLaunch", "cuGraphLaunch");
  } else if (k == "ex") {
    ex = need<Ex>(pt ? "cuLaunchKernelEx_ptsz" : "cuLaunchKernelEx", "cuLaunchKernelEx");
  } else if (k == "coop") {
    coop = need<Coop>(pt ? "cuLaunchCooperativeKernel_ptsz" : "cuLaunchCooperativeKernel",
                      "cuLaunchCooperativeKernel");
  } else {
    kernel = need<Kernel>(pt ? "cuLaunchKernel_ptsz" : "cuLaunchKernel", "cuLaunchKernel");
  }
  auto sync = need<CUresult (*)()>("cuCtxSynchronize", "cuCtxSynchronize");
  auto busy =
      reinterpret_cast<uint64_t (*)(int, uint64_t, uint64_t)>(dlsym(g_lib, "fakeCudaBusyNs"));
  const uint64_t t0 = nowNs();
  int failed = 0;
  for (int i = 0; i < n; ++i) {
    CUresult r;
    if (graph != nullptr) {
      r = graph(nullptr, nullptr);
    } else if (ex != nullptr) {
      CUlaunchConfig c{};
      c.gridDimX = grid;
      c.gridDimY = c.gridDimZ = c.blockDimX = c.blockDimY = c.blockDimZ = 1;
      r = ex(&c, nullptr, nullptr, nullptr);
    } else if (coop != nullptr) {
      r = coop(nullptr, grid, 1, 1, 1, 1, 1, 0, nullptr, nullptr);
    } else {
      r = kernel(nullptr, grid, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
    }
    if (r != CUDA_SUCCESS) ++failed;
  }
  sync();
  const uint64_t t1 = nowNs();
  const uint64_t b = busy != nullptr ? busy(g_opt.device, t0, t1) : 0;
  std::printf("launches=%d failed=%d elapsed_ns=%llu busy_ns=%llu util=%.1f\n", n, failed,
              static_cast<unsigned long long>(t1 - t0), static_cast<unsigned long long>(b),
              100.0 * static_cast<double>(b) / static_cast<double>(t1 - t0));
  return 0;
}

// Where dlsym's answer for each entry lies: the driver, the shim, or nowhere.
int symbolsCommand() {
  g_lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (g_lib == nullptr) die(dlerror());
  const char* names[] = {
      "cuInit",         "cuGetProcAddress_v2", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2",
      "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuGraphLaunch", "cuDeviceGet",  "cuCtxSynchronize"};
  for (const char* name : names) {
    void* p = dlsym(g_lib, name);
    Dl_info info{};
    const char* where = "null";
    if (p != nullptr && dladdr(p, &info) != 0 && info.dli_fname != nullptr) {
      where = std::strrchr(info.dli_fname, '/') ? std::strrchr(info.dli_fname, '/') + 1
                                                : info.dli_fname;
    }
    std::printf("%s=%s ", name, where);
  }
  std::printf("\n");
  return 0;
}

int nvmlCommand() {
  // 64 MiB of the first device taken first, as a program would before asking.
  start();
  CUdeviceptr p = 0;
  need<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2", "cuMemAlloc")(&p, 64u << 20);
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) die(dlerror());
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(nvml, "nvmlInit_v2"));
  auto count_fn =
      reinterpret_cast<nvmlReturn_t (*)(unsigned*)>(dlsym(nvml, "nvmlDeviceGetCount_v2"));
  auto by_index = reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(
      dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  auto by_uuid = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(
      dlsym(nvml, "nvmlDeviceGetHandleByUUID"));
  auto memory = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*)>(
      dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2"));
  if (init == nullptr || count_fn == nullptr || by_index == nullptr || memory == nullptr) {
    die("NVML lacks an entry point");
  }
  init();
  unsigned n = 0;
  count_fn(&n);
  std::printf("count=%u", n);
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t d = nullptr;
    nvmlMemory_v2_t m{};
    m.version = PURSER_NVML_MEMORY_V2;
    if (by_index(i, &d) != NVML_SUCCESS || memory(d, &m) != NVML_SUCCESS) continue;
    std::printf(" dev%u_total=%llu dev%u_free=%llu dev%u_used=%llu", i, m.total, i, m.free, i,
                m.used);
  }
  nvmlDevice_t d = nullptr;
  std::printf(" beyond=%d", by_index(n, &d));
  // The processes on the first device, after this one allocated (when it can).
  auto processes =
      reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned*, nvmlProcessInfo_v2_t*)>(
          dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3"));
  if (processes != nullptr && n > 0 && by_index(0, &d) == NVML_SUCCESS) {
    nvmlProcessInfo_v2_t infos[8];
    unsigned count = 8;
    const nvmlReturn_t r = processes(d, &count, infos);
    std::printf(" processes=%u", r == NVML_SUCCESS ? count : 0);
    for (unsigned k = 0; k < count && r == NVML_SUCCESS; ++k) {
      std::printf(" process%u=%s", k,
                  infos[k].pid == static_cast<unsigned>(getpid()) ? "self" : "other");
    }
  }
  // The utilisation samples of the first device.
  auto samples_fn = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessUtilizationSample_t*,
                                                      unsigned*, unsigned long long)>(
      dlsym(nvml, "nvmlDeviceGetProcessUtilization"));
  if (samples_fn != nullptr && n > 0 && by_index(0, &d) == NVML_SUCCESS) {
    nvmlProcessUtilizationSample_t s[8];
    unsigned count = 8;
    const nvmlReturn_t r = samples_fn(d, s, &count, 0);
    std::printf(" samples=%u", r == NVML_SUCCESS ? count : 0);
    for (unsigned k = 0; k < count && r == NVML_SUCCESS; ++k) {
      std::printf(" sample%u=%s", k,
                  s[k].pid == static_cast<unsigned>(getpid()) ? "self" : "other");
    }
  }
  // The devices by name: which of the card's answer.
  for (unsigned i = 0; i < 4; ++i) {
    char uuid[32];
    std::snprintf(uuid, sizeof uuid, "GPU-fake-%u", i);
    std::printf(" uuid%u=%d", i, by_uuid(uuid, &d));
  }
  std::printf("\n");
  return 0;
}

// A driver with almost nothing: the program asks for what is missing and must be told so.
int sparseCommand() {
  start();
  void* alloc = dlsym(g_lib, "cuMemAlloc_v2");
  void* proc = dlsym(g_lib, "cuGetProcAddress_v2");
  void* launch = dlsym(g_lib, "cuLaunchKernel");
  std::printf("ok alloc=%s proc=%s launch=%s\n", alloc ? "found" : "null", proc ? "found" : "null",
              launch ? "found" : "null");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int i = 1;
  for (; i < argc && std::strncmp(argv[i], "--", 2) == 0; ++i) {
    const std::string o = argv[i];
    if (o == "--via" && i + 1 < argc) {
      g_opt.via_proc = std::strcmp(argv[++i], "proc") == 0;
    } else if (o == "--version" && i + 1 < argc) {
      g_opt.version = std::atoi(argv[++i]);
    } else if (o == "--device" && i + 1 < argc) {
      g_opt.device = std::atoi(argv[++i]);
    } else if (o == "--ptsz") {
      g_opt.ptsz = true;
    } else if (o == "--primary") {
      g_opt.primary = true;
    } else if (o == "--hold") {
      g_opt.hold = true;
    } else {
      die("unknown option");
    }
  }
  if (i >= argc) die("usage: gpu_probe [options] COMMAND [ARGS]");
  const std::string cmd = argv[i];
  auto arg = [&](int k) -> const char* {
    if (i + k >= argc) die("missing argument");
    return argv[i + k];
  };
  if (cmd == "info") return info();
  if (cmd == "fill") return fillCommand(parseSize(arg(1)));
  if (cmd == "hold") return holdCommand(parseSize(arg(1)));
  if (cmd == "free") return freeCommand(parseSize(arg(1)), std::atoi(arg(2)));
  if (cmd == "async") return asyncCommand(parseSize(arg(1)), false);
  if (cmd == "pool") return asyncCommand(parseSize(arg(1)), true);
  if (cmd == "managed") return managedCommand(parseSize(arg(1)));
  if (cmd == "vmm") return vmmCommand(parseSize(arg(1)));
  if (cmd == "array") return arrayCommand();
  if (cmd == "pitch") return pitchCommand(parseSize(arg(1)), parseSize(arg(2)));
  if (cmd == "launch") {
    return launchCommand(std::atoi(arg(1)), static_cast<unsigned>(std::atoi(arg(2))),
                         i + 3 < argc ? argv[i + 3] : "kernel");
  }
  if (cmd == "symbols") return symbolsCommand();
  if (cmd == "nvml") return nvmlCommand();
  if (cmd == "sparse") return sparseCommand();
  die("unknown command");
}
