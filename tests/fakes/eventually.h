// eventually(): polls a condition until it holds, bounded by how many times it looks — never by a
// deadline, so a loaded machine only makes a test slower, and a broken build fails it instead of
// hanging it.
//   ASSERT_TRUE(eventually([&] { return get("w")["state"] == "running"; }, {.what = "w runs"}));
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace purser::testing {

struct Polling {
  int attempts = 3000;
  std::chrono::milliseconds pause{10};
  const char* what = "the condition";
};

template <typename F>
::testing::AssertionResult eventually(F&& holds, Polling p = {}) {
  for (int i = 0; i < p.attempts; ++i) {
    if (holds()) return ::testing::AssertionSuccess();
    std::this_thread::sleep_for(p.pause);
  }
  return ::testing::AssertionFailure() << p.what << " did not hold after " << p.attempts
                                       << " looks " << p.pause.count() << " ms apart";
}

}  // namespace purser::testing
