#include "ledger/usage_record.h"

#include <gtest/gtest.h>

#include <random>

namespace purser::ledger {
namespace {

UsageEvent sample() {
  UsageEvent e;
  e.id = "evt-1";
  e.at = SystemTime(std::chrono::milliseconds(1'780'000'000'123));
  e.tenant_id = "t";
  e.team_id = "team";
  e.user_id = "u";
  e.service_account_id = "";
  e.key_id = "k";
  e.session_id = "s\xc3\xa9";
  e.route = "chat";
  e.provider = "p";
  e.model = "m";
  e.tokens = {120, 16, 7, 3, -1};
  e.cost = Money::fromNanos(1'234'567'890);
  e.overage = Money::fromNanos(-5);
  e.latency_ms = 1234;
  e.ttft_ms = 56;
  e.status = 429;
  e.estimated = true;
  e.recovered = false;
  return e;
}

TEST(UsageRecordTest, EachKindRoundTrips) {
  std::string bytes;
  encodeRecord(UsageRecord{sample(), {"w1", "w2"}}, bytes);
  auto u = decodeRecord(bytes);
  ASSERT_TRUE(u.has_value()) << u.error().toString();
  const auto& us = std::get<UsageRecord>(*u);
  const UsageEvent want = sample();
  EXPECT_EQ(us.event.id, want.id);
  EXPECT_EQ(us.event.at, want.at);
  EXPECT_EQ(us.event.session_id, want.session_id);
  EXPECT_EQ(us.event.tokens, want.tokens);
  EXPECT_EQ(us.event.cost, want.cost);
  EXPECT_EQ(us.event.overage, want.overage);
  EXPECT_EQ(us.event.latency_ms, 1234);
  EXPECT_EQ(us.event.ttft_ms, 56);
  EXPECT_EQ(us.event.status, 429);
  EXPECT_TRUE(us.event.estimated);
  EXPECT_FALSE(us.event.recovered);
  EXPECT_EQ(us.wallets, (std::vector<std::string>{"w1", "w2"}));

  IntentRecord in;
  in.draft = sample();
  in.wallets = {"w"};
  in.amount = Money::fromNanos(INT64_MAX);
  in.at_ms = 10;
  in.expires_ms = INT64_MIN;
  in.external = true;
  in.token_estimate = 500;
  bytes.clear();
  encodeRecord(in, bytes);
  auto i = decodeRecord(bytes);
  ASSERT_TRUE(i.has_value());
  const auto& got = std::get<IntentRecord>(*i);
  EXPECT_EQ(got.draft.id, "evt-1");
  EXPECT_EQ(got.amount, in.amount);
  EXPECT_EQ(got.expires_ms, INT64_MIN);
  EXPECT_TRUE(got.external);
  EXPECT_EQ(got.token_estimate, 500);

  bytes.clear();
  encodeRecord(ReleaseRecord{{"a", "b", ""}}, bytes);
  auto r = decodeRecord(bytes);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(std::get<ReleaseRecord>(*r).ids, (std::vector<std::string>{"a", "b", ""}));
}

TEST(UsageRecordTest, EveryTruncationAndUnknownKindIsAClearError) {
  std::string bytes;
  encodeRecord(UsageRecord{sample(), {"w1"}}, bytes);
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto d = decodeRecord(std::string_view(bytes).substr(0, n));
    EXPECT_FALSE(d.has_value()) << n;
  }
  auto extra = decodeRecord(bytes + "x");
  ASSERT_FALSE(extra.has_value());
  EXPECT_NE(extra.error().message.find("past its end"), std::string::npos);
  auto unknown = decodeRecord("Zjunk");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_NE(unknown.error().message.find("unknown"), std::string::npos);
}

TEST(UsageRecordTest, RandomBytesNeverCrashOrOverread) {
  std::mt19937 rng(15);
  for (int i = 0; i < 20000; ++i) {
    std::string b(static_cast<size_t>(rng() % 64), '\0');
    for (auto& c : b) c = static_cast<char>(rng());
    if (!b.empty() && i % 3 == 0) b[0] = "IUR"[i % 3];
    (void)decodeRecord(b);
  }
  // A list length far past the bytes there are is refused before anything is allocated.
  std::string huge = "R";
  huge += "\xff\xff\xff\xff\x0f";
  EXPECT_FALSE(decodeRecord(huge).has_value());
}

}  // namespace
}  // namespace purser::ledger
