// Narration's input: secrets scrubbed, the findings bounded, the console's points left out.
#include "diagnose_live/narrate.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace purser::diagnose_live {
namespace {

using nlohmann::json;

TEST(Narration, SecretsAreScrubbedAndTheInputIsBounded) {
  EXPECT_EQ(scrubSecrets("key pk-01JC2XYZABCDEFGHJKMNPQRSTV-s3cr3tvaluehere leaked"),
            "key [secret] leaked");
  EXPECT_EQ(scrubSecrets("header Authorization: Bearer abc.def-123 sent"),
            "header Authorization: Bearer [secret] sent");
  EXPECT_EQ(scrubSecrets("sk-proj-aaaaaaaaaaaaaaaaaaaaaaaa"), "[secret]");
  EXPECT_EQ(scrubSecrets("task-7 and pk-short stay"), "task-7 and pk-short stay");
  json answer = {{"question", {{"kind", "fleet"}}}, {"findings", json::array()}};
  for (int i = 0; i < 9; ++i) {
    json f = {{"cause", "none"}, {"evidence", json::array()}};
    for (int e = 0; e < 12; ++e) {
      f["evidence"].push_back({{"kind", "metric"}, {"points", {1, 2, 3}}, {"summary", "x"}});
    }
    answer["findings"].push_back(f);
  }
  const json in = parseJsonOrDiscarded(narrationInput(answer));
  ASSERT_EQ(in["findings"].size(), 5u);
  EXPECT_EQ(in["findings"][0]["evidence"].size(), 8u);
  EXPECT_FALSE(in["findings"][0]["evidence"][0].contains("points"));
}

}  // namespace
}  // namespace purser::diagnose_live
