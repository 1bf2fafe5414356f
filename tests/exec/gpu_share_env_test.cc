// Pods holding a share of a GPU run with the GPU share shim: the environment an executor gives
// them, and the local executor running the fake driver's probe under it (the wall holds in a pod
// exactly as in tests/gpushare), each pod with a region of its own.
#include "exec/gpu_share_env.h"

#include <gtest/gtest.h>
#include <gmock/gmock.h>
#include <sys/stat.h>

#include <fstream>

#include "common/clock.h"
#include "exec/local_executor.h"
#include "fakes/temp_dir.h"

namespace purser::exec {
namespace {

using ::testing::HasSubstr;

TEST(GpuShareEnvTest, ASharesEnvironmentIsRecognised) {
  EXPECT_FALSE(holdsGpuShare({{"CUDA_VISIBLE_DEVICES", "0"}}));
  EXPECT_TRUE(holdsGpuShare({{"CUDA_DEVICE_MEMORY_LIMIT_0", "1024m"}}));
  EXPECT_TRUE(holdsGpuShare({{"CUDA_DEVICE_SM_LIMIT", "30"}}));
  EXPECT_FALSE(holdsGpuShare({{"CUDA_DEVICE_SM_LIMIT", "100"}}));
}

TEST(GpuShareEnvTest, TheShimIsPreloadedFirstAndThePodGetsItsOwnRegion) {
  auto env = withGpuShare({{"CUDA_DEVICE_MEMORY_LIMIT_0", "1024m"},
                           {"LD_PRELOAD", "/opt/mine.so"},
                           {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/someone-elses"}},
                          "/usr/lib/purser/libpurser-gpushare.so", "/tmp/purser-gpushare.region");
  ASSERT_TRUE(env) << env.error().toString();
  EXPECT_EQ(env->at("LD_PRELOAD"), "/usr/lib/purser/libpurser-gpushare.so:/opt/mine.so");
  EXPECT_EQ(env->at("CUDA_DEVICE_MEMORY_SHARED_CACHE"), "/tmp/purser-gpushare.region");
  // A pod without a share is left as it is.
  auto plain = withGpuShare({{"A", "b"}}, "/lib/x.so", "/tmp/r");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->size(), 1u);
  // A share without the shim is refused, saying why.
  auto refused = withGpuShare({{"CUDA_DEVICE_SM_LIMIT", "25"}}, "", "/tmp/r");
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, HasSubstr("libpurser-gpushare.so"));
}

TEST(GpuShareEnvTest, TheShimIsFoundBesideTheProgramOrInItsLibDirectory) {
  testing::TempDir dir;
  ASSERT_EQ(::mkdir(dir.file("bin").c_str(), 0755), 0);
  EXPECT_EQ(findGpuShareLibrary(dir.file("bin/purser")), "");
  ASSERT_EQ(::mkdir(dir.file("lib").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.file("lib/purser").c_str(), 0755), 0);
  std::ofstream(dir.file("lib/purser/libpurser-gpushare.so")) << "x";
  EXPECT_EQ(findGpuShareLibrary(dir.file("bin/purser")),
            dir.file("lib/purser/libpurser-gpushare.so"));
  std::ofstream(dir.file("bin/libpurser-gpushare.so")) << "x";
  EXPECT_EQ(findGpuShareLibrary(dir.file("bin/purser")), dir.file("bin/libpurser-gpushare.so"));
}

class LocalGpuShareTest : public ::testing::Test {
 protected:
  PodLaunch probePod(const std::string& name) {
    PodLaunch p;
    p.workload = "ml/" + name;
    p.pod_set = "main";
    p.argv = {"/bin/sh", "-c",
              std::string("echo region=$CUDA_DEVICE_MEMORY_SHARED_CACHE; exec ") + GPU_PROBE +
                  " fill 64m"};
    p.env = {{"CUDA_DEVICE_MEMORY_LIMIT_0", "1024m"}, {"LD_LIBRARY_PATH", FAKE_DRIVER_DIR}};
    return p;
  }
  testing::TempDir dir;
  ManualClock clock;
};

TEST_F(LocalGpuShareTest, APodsShareIsEnforcedInsideItAndEachPodHasItsOwn) {
  LocalExecutor executor(clock, LocalExecutorOptions{.log_dir = dir.path(),
                                                     .gpu_share_library = GPUSHARE_SHIM});
  std::vector<std::string> handles;
  for (const char* name : {"one", "two"}) {
    auto h = executor.start(probePod(name));
    ASSERT_TRUE(h) << h.error().toString();
    handles.push_back(*h);
  }
  for (const std::string& h : handles) {
    auto done = executor.wait(h);
    ASSERT_TRUE(done) << done.error().toString();
    const std::string log = *executor.logTail(h, 4096);
    // Each pod holds its whole share (a region of its own), and not a byte more.
    EXPECT_THAT(log, HasSubstr("allocated=1073741824 error=2")) << log;
    EXPECT_THAT(log, HasSubstr("region=" + dir.path() + "/" + h + ".gpushare")) << log;
  }
}

TEST_F(LocalGpuShareTest, WithoutTheShimAPodHoldingAShareIsRefused) {
  LocalExecutor executor(clock, LocalExecutorOptions{.log_dir = dir.path()});
  auto h = executor.start(probePod("three"));
  ASSERT_FALSE(h);
  EXPECT_THAT(h.error().message, HasSubstr("could not be enforced"));
  // A pod without a share runs as before.
  PodLaunch plain = probePod("four");
  plain.env.erase("CUDA_DEVICE_MEMORY_LIMIT_0");
  auto ok = executor.start(plain);
  ASSERT_TRUE(ok) << ok.error().toString();
  ASSERT_TRUE(executor.wait(*ok));
  EXPECT_THAT(*executor.logTail(*ok, 4096), HasSubstr("allocated=85496692736"));
}

}  // namespace
}  // namespace purser::exec
