// The GPU share shim on a real GPU (run by scripts/gpu-check): through the Driver API only, as
// frameworks call it. Prints key=value lines:
//   driver, pointers   the driver's version; whether cuGetProcAddress hands out the same entry
//                      points dlsym does (the shim relies on it to know what it was given)
//   memory             cuMemGetInfo's total and free, and what 64 MiB allocations got until refused
//   busy               a spinning kernel on every SM, launched for about SECONDS seconds: how long
//                      one runs alone, how many ran, and the share of the time the GPU was busy
// Built with the system's cuda.h when there is one (-DPURSER_SYSTEM_CUDA), else with the shim's
// own declarations.
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifdef PURSER_SYSTEM_CUDA
#include <cuda.h>
#else
#include "gpushare/driver_api.h"
#endif

namespace {

void* g_lib = nullptr;

template <typename Fn>
Fn need(const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(g_lib, name));
  if (fn == nullptr) {
    std::printf("error=missing_%s\n", name);
    std::exit(3);
  }
  return fn;
}

double nowSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Spins until `cycles` clock ticks have passed.
const char kSpinPtx[] =
    ".version 6.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    ".visible .entry spin(.param .u64 cycles)\n"
    "{\n"
    "  .reg .pred p;\n"
    "  .reg .u64 start, now, c, d;\n"
    "  ld.param.u64 c, [cycles];\n"
    "  mov.u64 start, %clock64;\n"
    "LOOP:\n"
    "  mov.u64 now, %clock64;\n"
    "  sub.u64 d, now, start;\n"
    "  setp.lt.u64 p, d, c;\n"
    "  @p bra LOOP;\n"
    "  ret;\n"
    "}\n";

}  // namespace

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "all";
  const double seconds = argc > 2 ? std::atof(argv[2]) : 10.0;
  g_lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (g_lib == nullptr) {
    std::printf("error=no_driver\n");
    return 2;
  }
  const CUresult init = need<CUresult (*)(unsigned)>("cuInit")(0);
  if (init != CUDA_SUCCESS) {
    std::printf("init=%d\n", static_cast<int>(init));
    return 4;
  }
  int version = 0;
  need<CUresult (*)(int*)>("cuDriverGetVersion")(&version);
  CUdevice dev = 0;
  need<CUresult (*)(CUdevice*, int)>("cuDeviceGet")(&dev, 0);
  CUcontext ctx = nullptr;
  if (need<CUresult (*)(CUcontext*, unsigned, CUdevice)>("cuCtxCreate_v2")(&ctx, 0, dev) != 0) {
    std::printf("error=no_context\n");
    return 2;
  }
  std::printf("driver=%d\n", version);
  if (std::strcmp(what, "all") == 0 || std::strcmp(what, "memory") == 0) {
    // Whether cuGetProcAddress gives the exported entry points.
    auto proc = reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t, void*)>(
        dlsym(g_lib, "cuGetProcAddress_v2"));
    if (proc != nullptr) {
      void* by_proc = nullptr;
      proc("cuMemAlloc", &by_proc, 12000, 0, nullptr);
      std::printf("pointers=%s\n", by_proc == dlsym(g_lib, "cuMemAlloc_v2") ? "same" : "differ");
    }
    size_t free_bytes = 0, total = 0;
    need<CUresult (*)(size_t*, size_t*)>("cuMemGetInfo_v2")(&free_bytes, &total);
    auto alloc = need<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
    auto release = need<CUresult (*)(CUdeviceptr)>("cuMemFree_v2");
    std::vector<CUdeviceptr> kept;
    CUresult last = CUDA_SUCCESS;
    while (kept.size() < 8192) {
      CUdeviceptr p = 0;
      last = alloc(&p, 64u << 20);
      if (last != CUDA_SUCCESS) break;
      kept.push_back(p);
    }
    std::printf("memory_total=%zu memory_free=%zu allocated=%zu refused_with=%d\n", total,
                free_bytes, kept.size() * (64u << 20), static_cast<int>(last));
    for (CUdeviceptr p : kept) release(p);
  }
  if (std::strcmp(what, "all") == 0 || std::strcmp(what, "busy") == 0) {
    CUmodule module = nullptr;
    CUfunction spin = nullptr;
    if (need<CUresult (*)(CUmodule*, const void*)>("cuModuleLoadData")(&module, kSpinPtx) != 0 ||
        need<CUresult (*)(CUfunction*, CUmodule, const char*)>("cuModuleGetFunction")(
            &spin, module, "spin") != 0) {
      std::printf("error=no_kernel\n");
      return 2;
    }
    int sms = 1;
    need<CUresult (*)(int*, int, CUdevice)>("cuDeviceGetAttribute")(&sms, 16, dev);  // SM count
    auto launch =
        need<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, CUstream, void**, void**)>("cuLaunchKernel");
    auto sync = need<CUresult (*)()>("cuCtxSynchronize");
    unsigned long long cycles = 2'000'000;
    void* args[] = {&cycles};
    // One kernel alone, the median of 20.
    std::vector<double> alone;
    for (int i = 0; i < 21; ++i) {
      const double t0 = nowSeconds();
      launch(spin, static_cast<unsigned>(sms), 1, 1, 32, 1, 1, 0, nullptr, args, nullptr);
      sync();
      alone.push_back(nowSeconds() - t0);
    }
    std::sort(alone.begin(), alone.end());
    const double one = alone[10];
    const long n = static_cast<long>(seconds / one);
    const double t0 = nowSeconds();
    for (long i = 0; i < n; ++i) {
      launch(spin, static_cast<unsigned>(sms), 1, 1, 32, 1, 1, 0, nullptr, args, nullptr);
    }
    sync();
    const double elapsed = nowSeconds() - t0;
    std::printf("busy_kernel_ms=%.3f launched=%ld elapsed_s=%.2f busy=%.1f\n", one * 1e3, n,
                elapsed, 100.0 * one * static_cast<double>(n) / elapsed);
  }
  return 0;
}
