// The GPU share shim's logic in-process: reading a share from the environment, the pod's shared
// region (reservations, dead processes, the compute bucket) and the compute controller.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <string>

#include "fakes/temp_dir.h"
#include "gpushare/limits.h"
#include "gpushare/share_region.h"
#include "gpushare/throttle.h"

namespace purser::gpushare {
namespace {

Limits limitsOf(const std::map<std::string, std::string>& env) {
  return readLimits([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(GpuShareLimitsTest, SizesAreReadAsHamiCoreWritesThem) {
  uint64_t v = 0;
  EXPECT_TRUE(parseBytes("1024m", &v));
  EXPECT_EQ(v, 1024ull << 20);
  EXPECT_TRUE(parseBytes("2g", &v));
  EXPECT_EQ(v, 2ull << 30);
  EXPECT_TRUE(parseBytes("4096", &v));
  EXPECT_EQ(v, 4096u);
  for (const char* bad :
       {"", "-1m", "1.5g", "12x", "m", "99999999999999999999", "18014398509481984g"}) {
    EXPECT_FALSE(parseBytes(bad, &v)) << bad;
  }
}

TEST(GpuShareLimitsTest, ADeviceOwnLimitWinsAndNoLimitMeansInactive) {
  const Limits none = limitsOf({});
  EXPECT_FALSE(none.active());
  const Limits l = limitsOf({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"},
                             {"CUDA_DEVICE_MEMORY_LIMIT_1", "512m"},
                             {"CUDA_DEVICE_SM_LIMIT", "30"},
                             {"CUDA_DEVICE_SM_LIMIT_2", "100"},
                             {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/run/x"}});
  EXPECT_TRUE(l.active());
  EXPECT_EQ(l.error, "");
  EXPECT_EQ(l.memory[0], 2ull << 30);
  EXPECT_EQ(l.memory[1], 512ull << 20);
  EXPECT_EQ(l.sm_percent[0], 30);
  EXPECT_EQ(l.sm_percent[2], 0);  // 100 % is no throttle at all
  EXPECT_EQ(l.shared_cache, "/run/x");
  EXPECT_FALSE(limitsOf({{"CUDA_DEVICE_SM_LIMIT", "100"}}).active());
}

TEST(GpuShareLimitsTest, AValueThatCannotBeReadIsAnErrorNeverNoLimit) {
  for (const auto& [name, value] :
       std::map<std::string, std::string>{{"CUDA_DEVICE_MEMORY_LIMIT", "lots"},
                                          {"CUDA_DEVICE_MEMORY_LIMIT_3", "0"},
                                          {"CUDA_DEVICE_SM_LIMIT", "150"},
                                          {"CUDA_DEVICE_SM_LIMIT_0", "0"}}) {
    const Limits l = limitsOf({{name, value}});
    EXPECT_TRUE(l.active()) << name;
    EXPECT_NE(l.error.find(name), std::string::npos) << l.error;
  }
}

class ShareRegionTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
  std::string path() const { return dir_.path() + "/share"; }
};

TEST_F(ShareRegionTest, ReservationsStopAtTheCapAndFreesGiveBack) {
  Limits l = limitsOf({{"CUDA_DEVICE_MEMORY_LIMIT_0", "1m"}});
  ShareRegion r;
  std::string error;
  ASSERT_TRUE(r.open(path(), l, &error)) << error;
  EXPECT_TRUE(r.reserve(0, 512 << 10));
  EXPECT_TRUE(r.reserve(0, 512 << 10));
  EXPECT_FALSE(r.reserve(0, 1));
  EXPECT_EQ(r.used(0), 1u << 20);
  r.release(0, 512 << 10);
  EXPECT_TRUE(r.reserve(0, 512 << 10));
  EXPECT_FALSE(r.reserve(0, UINT64_MAX));  // no overflow past the cap
  EXPECT_TRUE(r.reserve(1, 5ull << 30));   // device 1 has no cap
}

TEST_F(ShareRegionTest, AProcessCannotRaiseThePodsCapAndADeadOnesBytesReturn) {
  Limits small = limitsOf({{"CUDA_DEVICE_MEMORY_LIMIT_0", "1m"}});
  Limits big = limitsOf({{"CUDA_DEVICE_MEMORY_LIMIT_0", "1g"}});
  ShareRegion first;
  std::string error;
  ASSERT_TRUE(first.open(path(), small, &error)) << error;
  const pid_t child = fork();
  if (child == 0) {
    ShareRegion mine;
    std::string e;
    // The child brings a larger cap: the pod's stays; it takes all of it and dies holding it.
    if (!mine.open(path(), big, &e) || mine.limit(0) != (1u << 20) || !mine.reserve(0, 1u << 20)) {
      _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The child is gone without giving back: the bytes are returned when they are needed.
  EXPECT_TRUE(first.reserve(0, 1u << 20));
  EXPECT_EQ(first.used(0), 1u << 20);
}

TEST_F(ShareRegionTest, AFileThatIsNotARegionIsRefused) {
  {
    FILE* f = std::fopen(path().c_str(), "w");
    std::fputs("not a region", f);
    std::fclose(f);
  }
  ShareRegion r;
  std::string error;
  EXPECT_FALSE(r.open(path(), limitsOf({{"CUDA_DEVICE_MEMORY_LIMIT", "1m"}}), &error));
  EXPECT_NE(error.find("not one this shim made"), std::string::npos) << error;
}

TEST_F(ShareRegionTest, ARegionPathThatIsALinkIsNotFollowed) {
  // A link planted where the pod's region goes (to a file of Purser's, say) is refused.
  const std::string target = dir_.file("precious");
  std::ofstream(target) << "keep me";
  ASSERT_EQ(::symlink(target.c_str(), path().c_str()), 0);
  ShareRegion r;
  std::string error;
  EXPECT_FALSE(r.open(path(), limitsOf({{"CUDA_DEVICE_MEMORY_LIMIT", "1m"}}), &error));
  EXPECT_NE(error.find("cannot open the shared region"), std::string::npos) << error;
  std::ifstream in(target);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "keep me");
}

TEST_F(ShareRegionTest, ARegionAnotherAccountCouldWriteIsRefusedBeforeItsLockIsAwaited) {
  // Planted where a pod's region goes, writable by anyone (and its lock held, as a hostile
  // tenant would): refused at once, without waiting on that lock or reading what it holds.
  const int fd = ::open(path().c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fchmod(fd, 0666), 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  ShareRegion r;
  std::string error;
  EXPECT_FALSE(r.open(path(), limitsOf({{"CUDA_DEVICE_MEMORY_LIMIT", "1m"}}), &error));
  EXPECT_NE(error.find("not a file of this account's own"), std::string::npos) << error;
  // Another account's file, where the test may make one.
  ASSERT_EQ(::fchmod(fd, 0600), 0);
  ::close(fd);
  if (::geteuid() == 0 && ::chown(path().c_str(), 65534, 65534) == 0) {
    EXPECT_FALSE(r.open(path(), limitsOf({{"CUDA_DEVICE_MEMORY_LIMIT", "1m"}}), &error));
  }
}

TEST_F(ShareRegionTest, TheBucketLetsTheRateThroughAndMakesTheRestWait) {
  ShareRegion r;
  std::string error;
  ASSERT_TRUE(r.open("", limitsOf({{"CUDA_DEVICE_SM_LIMIT", "50"}}), &error)) << error;
  // Unmeasured: everything passes.
  EXPECT_EQ(r.take(0, 1000, 1'000'000'000), 0u);
  ShareRegion::TickClaim claim;
  EXPECT_EQ(r.claimTick(0, 1'000'000'000, kControlPeriodNs, &claim), ShareRegion::Turn::kBaseline);
  EXPECT_EQ(r.claimTick(0, 1'000'000'001, kControlPeriodNs, &claim), ShareRegion::Turn::kNone);
  ASSERT_EQ(r.claimTick(0, 1'100'000'000, kControlPeriodNs, &claim), ShareRegion::Turn::kTune);
  EXPECT_EQ(claim.launched, 0u);
  EXPECT_EQ(claim.npids, 1);
  r.finishTick(0, claim, 100'000);  // 100 units a second
  uint64_t now = 2'000'000'000;
  EXPECT_EQ(r.take(0, 1, now), 0u);  // into debt by one unit
  const uint64_t wait = r.take(0, 1, now);
  EXPECT_GT(wait, 9'000'000u);  // a unit at 100 a second: about 10 ms
  EXPECT_LT(wait, 11'000'000u);
  EXPECT_EQ(r.take(0, 1, now + wait), 0u);
}

TEST(GpuShareThrottleTest, TheRateMovesTowardsTheTargetAndNoFurtherThanTwice) {
  // Unmeasured, saturated at 100 % with 1000 units in 100 ms: half of that for 50 %.
  EXPECT_EQ(retuneRate(0, 100, 1000, 100'000'000, 50), 5'000'000);
  // On target: unchanged.
  EXPECT_EQ(retuneRate(5'000'000, 50, 500, 100'000'000, 50), 5'000'000);
  // Far over: at most halved per window.
  EXPECT_EQ(retuneRate(8'000'000, 100, 800, 100'000'000, 10), 4'000'000);
  // Nothing launched: nothing learnt.
  EXPECT_EQ(retuneRate(7'000, 0, 0, 100'000'000, 50), 7'000);
  // Launched but not seen (lagging samples): loosened, not left unmeasured.
  EXPECT_EQ(retuneRate(0, -1, 10, 100'000'000, 50), 0);
  EXPECT_EQ(retuneRate(2'000, 0, 10, 100'000'000, 50), 4'000);
  // A pod that launched little cannot bank a rate far above what it used.
  EXPECT_EQ(retuneRate(0, 1, 10, 100'000'000, 90), 400'000);
}

}  // namespace
}  // namespace purser::gpushare
