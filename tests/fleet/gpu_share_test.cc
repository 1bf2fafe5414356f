// HAMi-style GPU requests: reading them, the share of a GPU they take, and the environment an
// executor sets for HAMi-core.
#include <gtest/gtest.h>

#include "fleet/gpu_share.h"

namespace purser::fleet {
namespace {

TEST(GpuShareTest, ReadsHamiRequests) {
  auto whole = gpuRequestOf({{"nvidia.com/gpu", 2000}, {"cpu", 4000}});
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->count, 2);
  EXPECT_TRUE(whole->whole());
  auto share = gpuRequestOf(
      {{"nvidia.com/gpu", 1000}, {"nvidia.com/gpumem", 4096000}, {"nvidia.com/gpucores", 30000}});
  ASSERT_TRUE(share);
  EXPECT_EQ(share->memory_mib, 4096);
  EXPECT_EQ(share->cores_percent, 30);
  EXPECT_FALSE(share->whole());
}

TEST(GpuShareTest, RefusesWhatHamiWouldNot) {
  const auto errorOf = [](const Resources& r) {
    auto g = gpuRequestOf(r);
    return g ? std::string() : g.error().message;
  };
  EXPECT_EQ(errorOf({{"nvidia.com/gpu", 1000},
                     {"nvidia.com/gpumem", 1024000},
                     {"nvidia.com/gpumem-percentage", 50000}}),
            "give nvidia.com/gpumem or nvidia.com/gpumem-percentage, not both");
  EXPECT_EQ(errorOf({{"nvidia.com/gpu", 1000}, {"nvidia.com/gpucores", 150000}}),
            "nvidia.com/gpucores must be from 1 to 100, got 150");
  EXPECT_EQ(errorOf({{"nvidia.com/gpu", 500}}),
            "nvidia.com/gpu must be a whole number of 0 or more");
  EXPECT_EQ(errorOf({{"nvidia.com/gpumem", 1024000}}),
            "a share of a GPU (nvidia.com/gpumem, nvidia.com/gpumem-percentage or "
            "nvidia.com/gpucores) needs nvidia.com/gpu: how many GPUs");
}

TEST(GpuShareTest, TheShareIsOfTheGpusMemoryWithComputeKeptApart) {
  GpuRequest whole{1, 0, 0, 0};
  EXPECT_EQ(*shareMilli(whole, 16384), 1000);
  GpuRequest memory{1, 4096, 0, 0};
  EXPECT_EQ(*shareMilli(memory, 16384), 250);
  GpuRequest odd{1, 1000, 0, 0};
  EXPECT_EQ(*shareMilli(odd, 16384), 62);  // 61.04, rounded up
  GpuRequest compute{1, 4096, 0, 40};
  EXPECT_EQ(*shareMilli(compute, 16384), 250);  // its 40 % of compute is a budget of its own
  GpuRequest percent{1, 0, 30, 10};
  EXPECT_EQ(*shareMilli(percent, 16384), 300);
  GpuRequest cores_only{1, 0, 0, 25};
  EXPECT_EQ(*shareMilli(cores_only, 16384), 1000);  // no memory named: all of it, as in HAMi
  auto too_big = shareMilli({1, 32768, 0, 0}, 16384);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().message, "asks for 32768 MiB of GPU memory; the GPU has 16384 MiB");
}

TEST(GpuShareTest, TellsTheExecutorWhatToSet) {
  using Env = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(executorEnv({2, 0, 0, 0}, {{0, ""}, {3, ""}}, 81920),
            (Env{{"CUDA_VISIBLE_DEVICES", "0,3"}}));
  EXPECT_EQ(executorEnv({1, 0, 0, 0}, {{1, "GPU-aaaa"}}, 81920),
            (Env{{"CUDA_VISIBLE_DEVICES", "GPU-aaaa"}}));
  EXPECT_EQ(executorEnv({1, 8192, 0, 25}, {{2, "GPU-bbbb"}}, 81920),
            (Env{{"CUDA_VISIBLE_DEVICES", "GPU-bbbb"},
                 {"CUDA_DEVICE_MEMORY_LIMIT", "8192m"},
                 {"CUDA_DEVICE_MEMORY_LIMIT_0", "8192m"},
                 {"CUDA_DEVICE_SM_LIMIT", "25"}}));
  // A memory percentage becomes MiB of the GPU it landed on.
  EXPECT_EQ(executorEnv({1, 0, 50, 0}, {{0, ""}}, 40960),
            (Env{{"CUDA_VISIBLE_DEVICES", "0"},
                 {"CUDA_DEVICE_MEMORY_LIMIT", "20480m"},
                 {"CUDA_DEVICE_MEMORY_LIMIT_0", "20480m"}}));
}

}  // namespace
}  // namespace purser::fleet
