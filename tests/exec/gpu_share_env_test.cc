// Pods holding a share of a GPU run with the GPU share shim: the environment an executor gives
// them, and the local executor running the fake driver's probe under it (the wall holds in a pod
// exactly as in tests/gpushare), each pod with a region of its own.
#include "exec/gpu_share_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "common/clock.h"
#include "exec/local_executor.h"
#include "exec/slurm_executor.h"
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

TEST(GpuShareEnvTest, OnKubernetesAShareBecomesHamisResources) {
  const HamiShare h = hamiShareOf({{"CUDA_VISIBLE_DEVICES", "GPU-1a2b,GPU-3c4d"},
                                   {"CUDA_DEVICE_MEMORY_LIMIT", "20480m"},
                                   {"CUDA_DEVICE_MEMORY_LIMIT_0", "20480m"},
                                   {"CUDA_DEVICE_SM_LIMIT", "30"}});
  EXPECT_TRUE(h.held);
  EXPECT_EQ(h.memory_mib, 20480);
  EXPECT_EQ(h.cores_percent, 30);
  EXPECT_EQ(h.uuids, "GPU-1a2b,GPU-3c4d");
  // Indices are not UUIDs: HAMi is not told to pin them.
  const HamiShare by_index =
      hamiShareOf({{"CUDA_VISIBLE_DEVICES", "0"}, {"CUDA_DEVICE_SM_LIMIT", "50"}});
  EXPECT_TRUE(by_index.held);
  EXPECT_EQ(by_index.memory_mib, 0);
  EXPECT_EQ(by_index.uuids, "");
  EXPECT_FALSE(hamiShareOf({{"CUDA_VISIBLE_DEVICES", "GPU-1a2b"}}).held);
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
  LocalExecutor executor(
      clock, LocalExecutorOptions{.log_dir = dir.path(), .gpu_share_library = GPUSHARE_SHIM});
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

// A Slurm job holding a share: the script Purser submits runs the probe under the shim, its region
// on the node's own disk. The `sbatch` here runs the script at once, as a one-node cluster would.
TEST_F(LocalGpuShareTest, ASlurmJobsShareIsEnforcedWithARegionOnTheNode) {
  ASSERT_EQ(::mkdir(dir.file("bin").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.file("node-tmp").c_str(), 0777), 0);
  ASSERT_EQ(::mkdir(dir.file("jobs").c_str(), 0711), 0);
  std::ofstream(dir.file("bin/sbatch"))
      << "#!/bin/sh\n"
         "for a; do case \"$a\" in --output=*) out=${a#--output=};; esac; script=$a; done\n"
         "TMPDIR="
      << dir.file("node-tmp")
      << " SLURM_JOB_ID=42 /bin/sh \"$script\" >\"$out\" 2>&1\n"
         "echo 42\n";
  ASSERT_EQ(::chmod(dir.file("bin/sbatch").c_str(), 0755), 0);
  SlurmExecutorOptions options;
  options.log_dir = dir.file("jobs");
  options.bin_dir = dir.file("bin");
  options.accounts["ml"] = {"nobody", 65534, 65534};
  options.gpu_share_library = GPUSHARE_SHIM;
  SlurmExecutor executor(clock, options);
  PodLaunch pod = probePod("slurm");
  pod.team = "ml";
  pod.working_dir = dir.file("jobs");
  auto h = executor.start(pod);
  ASSERT_TRUE(h) << h.error().toString();
  const std::string log = *executor.logTail(*h, 4096);
  // On the node's disk, named by the job and a token another tenant cannot guess.
  EXPECT_THAT(log, ::testing::MatchesRegex("(.|\n)*region=" + dir.file("node-tmp") +
                                           "/purser-gpushare-42-[0-9a-f]{16}\n(.|\n)*"))
      << log;
  EXPECT_THAT(log, HasSubstr("allocated=1073741824 error=2")) << log;
  // Without the shim the job is refused before anything is submitted.
  options.gpu_share_library.clear();
  SlurmExecutor without(clock, options);
  auto refused = without.start(pod);
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, HasSubstr("could not be enforced"));
}

}  // namespace
}  // namespace purser::exec
