#include "common/json.h"

#include <gtest/gtest.h>

namespace purser {
namespace {

TEST(Utf8Test, ValidAndInvalidSequencesAsRfc3629Says) {
  EXPECT_TRUE(isValidUtf8(""));
  EXPECT_TRUE(isValidUtf8("plain ascii"));
  EXPECT_TRUE(
      isValidUtf8("Gr\xc3\xbc\xc3\x9f"
                  "e \xe2\x82\xac \xf0\x9f\x98\x80"));
  for (const std::string bad :
       {std::string("\xff"), std::string("\xc3"), std::string("\xc0\xaf"),
        std::string("\xe0\x80\xaf"), std::string("\xed\xa0\x80"), std::string("\xf4\x90\x80\x80"),
        std::string("\xf8\x88\x80\x80"), std::string("a\x80")}) {
    EXPECT_FALSE(isValidUtf8(bad)) << testing::PrintToString(bad);
  }
  EXPECT_EQ(invalidUtf8At("ab\xff"), 2u);
  EXPECT_EQ(toValidUtf8("a\xff"
                        "b\xc3"),
            "a\xef\xbf\xbd"
            "b\xef\xbf\xbd");
  EXPECT_EQ(toValidUtf8("\xe2\x82\xac"), "\xe2\x82\xac");
}

TEST(JsonTest, WritingInvalidUtf8NeverThrowsAndStaysJson) {
  // Found by a hostile tenant: client bytes copied into JSON output aborted the server.
  const Json j = {{"session", std::string("\xff\xfe")}, {std::string("k\xc3"), 1}};
  const std::string text = writeJson(j);
  EXPECT_TRUE(isValidUtf8(text));
  auto back = parseJson(text);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ((*back)["session"], "\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(JsonTest, NestingIsBoundedBeforeAnythingIsBuilt) {
  // Found by a hostile tenant: a body nested 50,000 deep overflowed the stack.
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  auto r = parseJson(deep, 128);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("nested deeper than the limit of 128"), std::string::npos);
  EXPECT_TRUE(parseJson(std::string(128, '[') + std::string(128, ']'), 128).has_value());
  EXPECT_FALSE(parseJson(std::string(129, '[') + std::string(129, ']'), 128).has_value());
  // Brackets inside strings are text, not nesting.
  EXPECT_TRUE(parseJson("[\"" + std::string(1000, '[') + "\\\"\"]", 2).has_value());
  EXPECT_EQ(jsonNesting(R"({"a":[{"b":"]]]"}]})", 10), 3u);
}

TEST(JsonTest, ParseErrorsAreValidUtf8AndShort) {
  auto r = parseJson("{\"a\": \xff" + std::string(10'000, 'x'));
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(isValidUtf8(r.error().message));
  EXPECT_LT(r.error().message.size(), 400u);
  EXPECT_TRUE(parseJsonOrDiscarded("nope").is_discarded());
}

TEST(JsonTest, IntegersThatDoNotFitAreNotIntegers) {
  // Found by a hostile tenant: alert_at [4294967346] silently became [50].
  EXPECT_EQ(jsonInt(Json::parse("4294967346")), 4294967346);
  EXPECT_EQ(jsonInt(Json::parse("-3")), -3);
  EXPECT_FALSE(jsonInt(Json::parse("18446744073709551615")).has_value());
  EXPECT_FALSE(jsonInt(Json::parse("1.5")).has_value());
  EXPECT_FALSE(jsonInt(Json::parse("\"7\"")).has_value());
}

}  // namespace
}  // namespace purser
