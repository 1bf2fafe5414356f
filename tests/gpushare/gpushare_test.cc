// The GPU share shim in real processes: gpu_probe drives the fake driver (tests/fakes/gpu) the way
// frameworks do, with libpurser-gpushare.so preloaded, as a pod holding a share runs.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "fakes/process.h"
#include "fakes/temp_dir.h"

namespace purser::gpushare {
namespace {

using testing::Process;
using Values = std::map<std::string, std::string>;

constexpr uint64_t kMiB = 1ull << 20;

// "a=1 b=2" -> {a: 1, b: 2}
Values parse(const std::string& line) {
  Values v;
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) v[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return v;
}

uint64_t number(const Values& v, const std::string& key) {
  auto it = v.find(key);
  EXPECT_NE(it, v.end()) << "no " << key;
  return it == v.end() ? 0 : std::stoull(it->second);
}

class GpuShareTest : public ::testing::Test {
 protected:
  // The environment of a pod holding a share: the shim preloaded, its own region file.
  std::vector<std::string> pod(std::vector<std::string> extra = {},
                               const std::string& drivers = FAKE_DRIVER_DIR) const {
    std::vector<std::string> env = {std::string("LD_PRELOAD=") + GPUSHARE_SHIM,
                                    "LD_LIBRARY_PATH=" + drivers,
                                    "CUDA_DEVICE_MEMORY_SHARED_CACHE=" + dir_.file("share")};
    env.insert(env.end(), extra.begin(), extra.end());
    return env;
  }

  std::vector<std::string> capped(std::vector<std::string> extra = {}) const {
    extra.push_back("CUDA_DEVICE_MEMORY_LIMIT_0=1024m");
    return pod(extra);
  }

  // Runs the probe to its end; its one line of results.
  Values probe(const std::vector<std::string>& args, const std::vector<std::string>& env,
               int expect_exit = 0) {
    std::vector<std::string> argv = {GPU_PROBE};
    argv.insert(argv.end(), args.begin(), args.end());
    Process p(argv, {}, env);
    const int rc = p.wait();
    EXPECT_EQ(rc, expect_exit) << p.out() << p.err();
    last_err_ = p.err();
    return parse(p.out());
  }

  std::unique_ptr<Process> start(const std::vector<std::string>& args,
                                 const std::vector<std::string>& env) {
    std::vector<std::string> argv = {GPU_PROBE};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<Process>(argv, std::string(), env);
  }

  testing::TempDir dir_;
  std::string last_err_;
};

TEST_F(GpuShareTest, WithoutALimitTheProgramGetsTheDriversOwnEntryPoints) {
  const Values bare = probe({"symbols"}, {"LD_LIBRARY_PATH=" FAKE_DRIVER_DIR});
  const Values shimmed = probe({"symbols"}, pod());
  ASSERT_FALSE(bare.empty());
  for (const auto& [name, where] : bare) {
    EXPECT_EQ(where, "libcuda.so.1") << name;
    EXPECT_EQ(shimmed.at(name), "libcuda.so.1") << name << ": the shim stood in without a limit";
  }
  const Values info = probe({"info"}, pod());
  EXPECT_EQ(number(info, "total"), 81559 * kMiB);
  EXPECT_EQ(number(info, "free"), 81559 * kMiB);
}

TEST_F(GpuShareTest, AMemoryCapStandsInForMemoryEntriesOnly) {
  const Values v = probe({"symbols"}, capped());
  for (const char* governed :
       {"cuInit", "cuGetProcAddress_v2", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2"}) {
    EXPECT_EQ(v.at(governed), "libpurser-gpushare.so") << governed;
  }
  for (const char* passed : {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuGraphLaunch",
                             "cuDeviceGet", "cuCtxSynchronize"}) {
    EXPECT_EQ(v.at(passed), "libcuda.so.1") << passed;
  }
}

TEST_F(GpuShareTest, TheCapIsExactBySymbolAndThroughCuGetProcAddress) {
  for (const char* via : {"dlsym", "proc"}) {
    SCOPED_TRACE(via);
    const Values info = probe({"--via", via, "info"}, capped());
    EXPECT_EQ(number(info, "total"), 1024 * kMiB);
    EXPECT_EQ(number(info, "free"), 1024 * kMiB);
    const Values fill = probe({"--via", via, "fill", "64m"}, capped());
    EXPECT_EQ(number(fill, "allocated"), 1024 * kMiB);
    EXPECT_EQ(number(fill, "error"), 2u);  // CUDA_ERROR_OUT_OF_MEMORY
    // A chunk that does not divide the cap: everything that fits, not a byte more.
    const Values odd = probe({"--via", via, "fill", "100m"}, capped());
    EXPECT_EQ(number(odd, "allocated"), 1000 * kMiB);
  }
}

TEST_F(GpuShareTest, ProcessesOfOnePodRacingForTheLastBytesGetExactlyTheCap) {
  for (int n : {2, 8}) {
    SCOPED_TRACE(n);
    testing::TempDir dir;
    auto env = pod({"CUDA_DEVICE_MEMORY_LIMIT_0=256m"});
    env[2] = "CUDA_DEVICE_MEMORY_SHARED_CACHE=" + dir.file("share");
    std::vector<std::unique_ptr<Process>> racers;
    for (int i = 0; i < n; ++i) racers.push_back(start({"--hold", "fill", "1m"}, env));
    uint64_t total = 0;
    for (auto& p : racers) {
      const auto line = p->waitForStdout("allocated=");
      ASSERT_TRUE(line.has_value()) << p->err();
      total += number(parse(*line), "allocated");
    }
    // Every process stopped only when refused, and none has freed: the pod holds its cap, not
    // a byte over.
    EXPECT_EQ(total, 256 * kMiB);
    for (auto& p : racers) p->signal(SIGTERM);
    for (auto& p : racers) p->wait();
  }
}

TEST_F(GpuShareTest, AKilledProcessesMemoryReturnsToThePod) {
  auto holder = start({"hold", "1024m"}, capped());
  const auto line = holder->waitForStdout("held=");
  ASSERT_TRUE(line.has_value()) << holder->err();
  ASSERT_EQ(number(parse(*line), "held"), 1024 * kMiB);
  EXPECT_EQ(number(probe({"fill", "64m"}, capped()), "allocated"), 0u);
  holder->signal(SIGKILL);  // no exit handler runs
  holder->wait();
  EXPECT_EQ(number(probe({"fill", "64m"}, capped()), "allocated"), 1024 * kMiB);
}

TEST_F(GpuShareTest, FreedMemoryCanBeTakenAgain) {
  const Values v = probe({"free", "256m", "4"}, capped());
  EXPECT_EQ(number(v, "first"), 1024 * kMiB);
  EXPECT_EQ(number(v, "again"), 1024 * kMiB);
  // A pitched allocation counts what the driver took (rows padded to 512 bytes).
  const Values p = probe({"pitch", "1000", "1000"}, capped());
  EXPECT_EQ(number(p, "result"), 0u);
  EXPECT_EQ(number(p, "pitch"), 1024u);
  EXPECT_EQ(number(p, "used"), 1024u * 1000u);
  EXPECT_EQ(probe({"pitch", "1000", "2000000"}, capped())["result"], "2");
}

TEST_F(GpuShareTest, AsyncAndPoolAllocationsAreCountedAndFreed) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"async", "128m"},
                                             {"--ptsz", "async", "128m"},
                                             {"pool", "128m"},
                                             {"--via", "proc", "--ptsz", "pool", "128m"},
                                             {"--via", "proc", "async", "128m"}}) {
    SCOPED_TRACE(args.back() + " " + args.front());
    const Values v = probe(args, capped());
    EXPECT_EQ(number(v, "allocated"), 1024 * kMiB);
    EXPECT_EQ(number(v, "error"), 2u);
    EXPECT_EQ(number(v, "after_free"), 0u);  // the freed chunk could be taken again
  }
  const Values managed = probe({"managed", "100m"}, capped());
  EXPECT_EQ(number(managed, "allocated"), 1000 * kMiB);
}

TEST_F(GpuShareTest, ArraysCountAgainstTheShareAndAnUnknownFormatIsCountedHigh) {
  for (const char* via : {"dlsym", "proc"}) {
    SCOPED_TRACE(via);
    testing::TempDir dir;
    auto env = capped();
    env[2] = "CUDA_DEVICE_MEMORY_SHARED_CACHE=" + dir.file("share");
    const Values v = probe({"--via", via, "array"}, env);
    EXPECT_EQ(number(v, "arrays"), 16u);  // 64 MiB each under 1024 MiB
    EXPECT_EQ(number(v, "error"), 2u);
    EXPECT_EQ(number(v, "again"), 0u);      // a destroyed array's memory is back
    EXPECT_EQ(number(v, "known3d"), 0u);    // 32 MiB of 8-bit elements
    EXPECT_EQ(number(v, "unknown3d"), 2u);  // a video format counted at 16 bytes an element
  }
}

TEST_F(GpuShareTest, VirtualMemoryOnTheHostPassesThroughAndOnTheDeviceCounts) {
  const Values v = probe({"vmm", "2g"}, capped());
  EXPECT_EQ(number(v, "host"), 0u);       // host memory is not the share's
  EXPECT_EQ(number(v, "untouched"), 1u);  // its property was read, never written
  EXPECT_EQ(number(v, "device"), 2u);     // 2 GiB on the device: past the cap
  EXPECT_EQ(number(v, "small"), 0u);
  EXPECT_EQ(number(v, "release"), 0u);
  EXPECT_EQ(number(v, "again"), 0u);
}

TEST_F(GpuShareTest, AContextsOwnMemoryCountsAgainstTheShare) {
  for (const char* how : {"created", "--primary"}) {
    SCOPED_TRACE(how);
    std::vector<std::string> args = {"fill", "64m"};
    if (std::string(how) == "--primary") args.insert(args.begin(), how);
    testing::TempDir dir;
    auto env = capped({"FAKE_CUDA_CONTEXT_MIB=64"});
    env[2] = "CUDA_DEVICE_MEMORY_SHARED_CACHE=" + dir.file("share");
    EXPECT_EQ(number(probe(args, env), "allocated"), 960 * kMiB);
  }
}

TEST_F(GpuShareTest, NvmlShowsTheShareAndOnlyThePodsDevices) {
  const Values v = probe(
      {"nvml"}, capped({"FAKE_CUDA_DEVICES=3", "CUDA_VISIBLE_DEVICES=GPU-fake-2,GPU-fake-0"}));
  EXPECT_EQ(number(v, "count"), 2u);
  EXPECT_EQ(number(v, "dev0_total"), 1024 * kMiB);  // the share, on the pod's first device
  EXPECT_EQ(number(v, "dev0_used"), 64 * kMiB);     // what the probe took first
  EXPECT_EQ(number(v, "dev0_free"), 960 * kMiB);
  EXPECT_EQ(number(v, "dev1_total"), 81559 * kMiB);  // no cap set for its second
  EXPECT_EQ(number(v, "beyond"), 2u);                // NVML_ERROR_INVALID_ARGUMENT
  EXPECT_EQ(number(v, "uuid0"), 0u);
  EXPECT_EQ(number(v, "uuid1"), 6u);  // NVML_ERROR_NOT_FOUND: not the pod's
  EXPECT_EQ(number(v, "uuid2"), 0u);
  // The device's processes: this one, not another pod's.
  EXPECT_EQ(number(v, "processes"), 1u);
  EXPECT_EQ(v.at("process0"), "self");
  EXPECT_EQ(number(v, "samples"), 1u);  // its utilisation samples too
  EXPECT_EQ(v.at("sample0"), "self");
  // Without a share nothing is hidden: the fake's other process shows.
  const Values bare = probe({"nvml"}, {"LD_LIBRARY_PATH=" FAKE_DRIVER_DIR});
  EXPECT_EQ(number(bare, "processes"), 2u);
  EXPECT_EQ(number(bare, "samples"), 2u);
  // By index the same way.
  const Values i = probe({"nvml"}, capped({"FAKE_CUDA_DEVICES=3", "CUDA_VISIBLE_DEVICES=1"}));
  EXPECT_EQ(number(i, "count"), 1u);
  EXPECT_EQ(number(i, "uuid0"), 6u);
  EXPECT_EQ(number(i, "uuid1"), 0u);
}

// Launches of 0.5 ms each: a loop that would keep the device busy all the time.
void expectThrottled(const Values& v) {
  EXPECT_EQ(number(v, "failed"), 0u);
  EXPECT_EQ(number(v, "launches"), 400u);
  // The wall: never much above the share. (Below it is a slow machine oversleeping; the
  // accuracy is measured by bench/gpushare, not asserted here.)
  EXPECT_LE(std::stod(v.at("util")), 25.0 + 15.0) << v.at("util");
}

TEST_F(GpuShareTest, KernelLaunchesAreThrottledToTheSmLimit) {
  expectThrottled(probe({"launch", "400", "50"}, pod({"CUDA_DEVICE_SM_LIMIT=25"})));
}

TEST_F(GpuShareTest, PerThreadStreamLaunchesAreThrottled) {
  expectThrottled(probe({"--ptsz", "launch", "400", "50"}, pod({"CUDA_DEVICE_SM_LIMIT=25"})));
  expectThrottled(probe({"--via", "proc", "--ptsz", "launch", "400", "50", "ex"},
                        pod({"CUDA_DEVICE_SM_LIMIT=25"})));
}

TEST_F(GpuShareTest, GraphAndCooperativeLaunchesAreThrottled) {
  expectThrottled(probe({"launch", "400", "1", "graph"},
                        pod({"CUDA_DEVICE_SM_LIMIT=25", "FAKE_CUDA_GRAPH_NS=500000"})));
  expectThrottled(probe({"--via", "proc", "--ptsz", "launch", "400", "1", "graph"},
                        pod({"CUDA_DEVICE_SM_LIMIT=25", "FAKE_CUDA_GRAPH_NS=500000"})));
  expectThrottled(probe({"launch", "400", "50", "coop"}, pod({"CUDA_DEVICE_SM_LIMIT=25"})));
}

TEST_F(GpuShareTest, AShareThatCannotBeEnforcedIsRefusedAtInit) {
  Values v = probe({"info"}, capped({"FAKE_CUDA_VERSION=14000"}), 4);
  EXPECT_EQ(number(v, "init"), 801u);  // CUDA_ERROR_NOT_SUPPORTED
  EXPECT_NE(last_err_.find("driver API version 14.0 is not one this shim knows"), std::string::npos)
      << last_err_;
  v = probe({"info"}, pod({"CUDA_DEVICE_MEMORY_LIMIT_0=10q"}), 4);
  EXPECT_EQ(number(v, "init"), 801u);
  EXPECT_NE(last_err_.find("CUDA_DEVICE_MEMORY_LIMIT_0=\"10q\""), std::string::npos) << last_err_;
  // A compute limit needs NVML to measure by; a driver directory without it is refused.
  v = probe({"info"}, pod({"CUDA_DEVICE_SM_LIMIT=50"}, SPARSE_DRIVER_DIR), 4);
  EXPECT_EQ(number(v, "init"), 801u);
  EXPECT_NE(last_err_.find("needs NVML"), std::string::npos) << last_err_;
}

TEST_F(GpuShareTest, ADriverMissingMostEntryPointsDoesNotCrashTheProgram) {
  const Values v = probe({"sparse"}, pod({"CUDA_DEVICE_MEMORY_LIMIT_0=1024m"}, SPARSE_DRIVER_DIR));
  EXPECT_EQ(v.at("alloc"), "null");
  EXPECT_EQ(v.at("proc"), "null");
  EXPECT_EQ(v.at("launch"), "null");
}

// scripts/gpu-check, for the day a GPU is lent, run here against the fake driver so that it
// cannot rot: it builds its program, and the shim holds its allocations to the share.
TEST_F(GpuShareTest, TheRealGpuCheckRunsAgainstTheFakeDriver) {
  std::string build = GPUSHARE_SHIM;
  build = build.substr(0, build.rfind('/'));
  Process p({std::string(PURSER_SOURCE_DIR) + "/scripts/gpu-check", build}, PURSER_SOURCE_DIR,
            {"LD_LIBRARY_PATH=" FAKE_DRIVER_DIR, "SECONDS_PER_RUN=0.2"});
  ASSERT_EQ(p.wait(), 0) << p.out() << p.err();
  const std::string out = p.out();
  const size_t share = out.find("--- a 1024 MiB share");
  ASSERT_NE(share, std::string::npos) << out;
  EXPECT_NE(out.find("allocated=1073741824 refused_with=2", share), std::string::npos) << out;
  EXPECT_NE(out.find("pointers=same"), std::string::npos) << out;
  EXPECT_NE(out.find("--- a 25 % compute share"), std::string::npos) << out;
}

}  // namespace
}  // namespace purser::gpushare
