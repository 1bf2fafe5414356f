#include "common/id.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

namespace purser {
namespace {

TEST(IdTest, IdsAreValidSortableAndCarryTheirTime) {
  ManualClock clock;
  SeededRandom random(42);
  IdGenerator ids(clock, random);
  std::vector<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    seen.push_back(ids.next());
    if (i % 100 == 0) clock.advance(std::chrono::milliseconds(3));
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    ASSERT_TRUE(isValidId(seen[i])) << seen[i];
    if (i > 0) {
      EXPECT_LT(seen[i - 1], seen[i]) << "ids must sort in creation order, also within one ms";
    }
  }
  EXPECT_EQ(*idMillis(seen.back()), unixMillis(clock.now()));
}

TEST(IdTest, StaysOrderedWhenTheWallClockStepsBack) {
  ManualClock clock;
  SeededRandom random(1);
  IdGenerator ids(clock, random);
  const std::string first = ids.next();
  clock.setNow(clock.now() - std::chrono::seconds(10));
  EXPECT_LT(first, ids.next());
}

TEST(IdTest, UniqueAcrossThreads) {
  IdGenerator ids(SystemClock::instance(), SystemRandom::instance());
  std::vector<std::vector<std::string>> per_thread(4);
  std::vector<std::thread> threads;
  for (auto& out : per_thread) {
    threads.emplace_back([&ids, &out] {
      for (int i = 0; i < 2000; ++i) out.push_back(ids.next());
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> all;
  for (const auto& v : per_thread) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), 8000u);
}

TEST(IdTest, RejectsMalformedIds) {
  EXPECT_FALSE(isValidId(""));
  EXPECT_FALSE(isValidId("01h"));
  EXPECT_FALSE(isValidId("0123456789abcdefghjkmnpqru"));  // 'u' is not in the alphabet
  EXPECT_FALSE(isValidId("8zzzzzzzzzzzzzzzzzzzzzzzzz"));  // more than 128 bits
  EXPECT_FALSE(idMillis("not-an-id").has_value());
}

}  // namespace
}  // namespace purser
