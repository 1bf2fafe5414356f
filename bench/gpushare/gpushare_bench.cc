// What the GPU share shim costs per call, against the fake driver (whose calls do almost no work,
// so the shim's own cost is what shows): a launch, an allocation and its free, a memory query and
// a cuGetProcAddress lookup. bench/gpushare/run.sh runs this program without the shim (the direct
// call), with the shim and no limit, with a memory cap, and with a compute cap, in the same run.
// Prints one JSON object: nanoseconds per call, median of 7 rounds.
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gpushare/driver_api.h"

namespace {

uint64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

template <typename F>
double perCall(int n, F&& f) {
  std::vector<double> rounds;
  for (int r = 0; r < 7; ++r) {
    const uint64_t t0 = nowNs();
    for (int i = 0; i < n; ++i) f();
    rounds.push_back(static_cast<double>(nowNs() - t0) / n);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[3];
}

template <typename Fn>
Fn need(void* lib, const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (fn == nullptr) {
    std::fprintf(stderr, "gpushare_bench: the driver has no %s\n", name);
    std::exit(2);
  }
  return fn;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "gpushare_bench: %s\n", dlerror());
    return 2;
  }
  need<CUresult (*)(unsigned)>(lib, "cuInit")(0);
  CUcontext ctx = nullptr;
  if (need<CUresult (*)(CUcontext*, unsigned, CUdevice)>(lib, "cuCtxCreate_v2")(&ctx, 0, 0) != 0) {
    std::fprintf(stderr, "gpushare_bench: no context\n");
    return 2;
  }
  auto launch =
      need<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CUstream, void**, void**)>(lib, "cuLaunchKernel");
  auto alloc = need<CUresult (*)(CUdeviceptr*, size_t)>(lib, "cuMemAlloc_v2");
  auto release = need<CUresult (*)(CUdeviceptr)>(lib, "cuMemFree_v2");
  auto info = need<CUresult (*)(size_t*, size_t*)>(lib, "cuMemGetInfo_v2");
  auto proc =
      need<CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*)>(
          lib, "cuGetProcAddress_v2");
  const double launch_ns =
      perCall(n, [&] { launch(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr); });
  const double alloc_ns = perCall(n / 4, [&] {
    CUdeviceptr p = 0;
    alloc(&p, 1 << 20);
    release(p);
  });
  const double info_ns = perCall(n, [&] {
    size_t f = 0, t = 0;
    info(&f, &t);
  });
  const double proc_ns = perCall(n / 4, [&] {
    void* p = nullptr;
    CUdriverProcAddressQueryResult st = 0;
    proc("cuMemAlloc", &p, 12040, 0, &st);
  });
  std::printf(
      "{\"launch_ns\": %.1f, \"alloc_free_ns\": %.1f, \"mem_get_info_ns\": %.1f, "
      "\"get_proc_address_ns\": %.1f}\n",
      launch_ns, alloc_ns, info_ns, proc_ns);
  return 0;
}
