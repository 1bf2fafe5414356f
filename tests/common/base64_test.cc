#include "common/base64.h"

#include <gtest/gtest.h>

namespace purser {
namespace {

TEST(Base64Test, DecodesTheStandardAlphabetWithPadding) {
  EXPECT_EQ(base64Decode(""), "");
  EXPECT_EQ(base64Decode("Zg=="), "f");
  EXPECT_EQ(base64Decode("Zm8="), "fo");
  EXPECT_EQ(base64Decode("Zm9v"), "foo");
  EXPECT_EQ(base64Decode("Zm9vYmFy"), "foobar");
  EXPECT_EQ(base64Decode("+/+/"), std::string("\xfb\xff\xbf"));
  EXPECT_EQ(base64Decode("AAE="), std::string("\x00\x01", 2));
  // Wrapped lines, as PEM bodies are.
  EXPECT_EQ(base64Decode("Zm9v\nYmFy\r\n"), "foobar");
}

TEST(Base64Test, RefusesWhatIsNotBase64) {
  for (const char* bad :
       {"Zg", "Zg=", "Z===", "====", "Zg==Zg==", "Zm9v!mFy", "Zm9-", "Zm=v", "Zm9 v"}) {
    EXPECT_FALSE(base64Decode(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace purser
