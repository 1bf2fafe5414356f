#include "identity/denial_log.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace purser::identity {
namespace {

Principal member(const std::string& id) {
  Principal p;
  p.id = id;
  p.key_id = "key-" + id;
  p.tenant_id = "t1";
  p.role = Role::kMember;
  return p;
}

TEST(DenialLogTest, APrincipalWritesItsShareThenOneSummaryPerWindow) {
  // Found by a hostile tenant: a member could write ~1,300 audit entries a second through
  // denied requests.
  ManualClock clock;
  DenialLog log(clock, {.per_window = 3, .window = std::chrono::minutes(1)});
  int written = 0;
  for (int i = 0; i < 1000; ++i) {
    auto d = log.note(member("dana"), i % 2 ? "tenant.create" : "key.create");
    written += d.write ? 1 : 0;
    EXPECT_TRUE(d.summaries.empty());
  }
  EXPECT_EQ(written, 3);
  EXPECT_TRUE(log.closed().empty()) << "the window is not over yet";
  clock.advance(std::chrono::seconds(61));
  auto summaries = log.closed();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].action, "policy.deny.summary");
  EXPECT_EQ(summaries[0].actor, "dana");
  EXPECT_EQ(summaries[0].tenant_id, "t1");
  const auto after = nlohmann::json::parse(summaries[0].after);
  EXPECT_EQ(after["left_out"], 997);
  EXPECT_EQ(after["actions"]["tenant.create"], 499);
  EXPECT_EQ(after["actions"]["key.create"], 498);
  // A new window, a new share.
  EXPECT_TRUE(log.note(member("dana"), "key.create").write);
}

TEST(DenialLogTest, AWindowAlsoClosesAtThePrincipalsNextDenial) {
  ManualClock clock;
  DenialLog log(clock, {.per_window = 1, .window = std::chrono::minutes(1)});
  EXPECT_TRUE(log.note(member("dana"), "a").write);
  EXPECT_FALSE(log.note(member("dana"), "a").write);
  clock.advance(std::chrono::minutes(2));
  auto d = log.note(member("dana"), "a");
  EXPECT_TRUE(d.write);
  ASSERT_EQ(d.summaries.size(), 1u);
  EXPECT_TRUE(log.closed().empty()) << "summarised once";
}

TEST(DenialLogTest, ManyPrincipalsAreBoundedAndNothingIsForgotten) {
  ManualClock clock;
  DenialLog log(clock, {.per_window = 1, .window = std::chrono::minutes(1), .max_principals = 50});
  int64_t left_out = 0;
  for (int i = 0; i < 500; ++i) {
    const auto who = member("p" + std::to_string(i));
    for (int k = 0; k < 2; ++k) {  // the second is left out
      auto d = log.note(who, "a");
      for (const auto& s : d.summaries) {
        left_out += nlohmann::json::parse(s.after)["left_out"].get<int64_t>();
      }
    }
  }
  clock.advance(std::chrono::minutes(2));
  for (const auto& s : log.closed()) {
    left_out += nlohmann::json::parse(s.after)["left_out"].get<int64_t>();
  }
  EXPECT_EQ(left_out, 500) << "every left-out denial is counted in some summary";
}

}  // namespace
}  // namespace purser::identity
