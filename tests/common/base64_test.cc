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

TEST(Base64UrlTest, RoundTripsWithoutPaddingAndTheUrlAlphabet) {
  // RFC 4648 section 10's vectors, padding dropped.
  EXPECT_EQ(base64UrlEncode(""), "");
  EXPECT_EQ(base64UrlEncode("f"), "Zg");
  EXPECT_EQ(base64UrlEncode("fo"), "Zm8");
  EXPECT_EQ(base64UrlEncode("foo"), "Zm9v");
  EXPECT_EQ(base64UrlEncode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64UrlEncode("\xfb\xff\xbf"), "-_-_");
  EXPECT_EQ(base64UrlDecode("-_-_"), "\xfb\xff\xbf");
  EXPECT_EQ(base64UrlDecode("Zm8"), "fo");
  EXPECT_EQ(base64UrlDecode("Zm8="), "fo");
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n < all.size(); n += 37) {
    EXPECT_EQ(base64UrlDecode(base64UrlEncode(all.substr(0, n))), all.substr(0, n));
  }
}

TEST(Base64Test, EncodesWithPaddingAndRoundTrips) {
  EXPECT_EQ(base64Encode(""), "");
  EXPECT_EQ(base64Encode("f"), "Zg==");
  EXPECT_EQ(base64Encode("fo"), "Zm8=");
  EXPECT_EQ(base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(base64Encode("\xfb\xff\xbf"), "+/+/");
  EXPECT_EQ(base64Decode(base64Encode("client:s3cret%")), "client:s3cret%");
}

TEST(Base64UrlTest, OtherCharactersAndImpossibleLengthsAreRefused) {
  EXPECT_FALSE(base64UrlDecode("+/+/").has_value());  // the standard alphabet
  EXPECT_FALSE(base64UrlDecode("Zm9v\nYmFy").has_value());
  EXPECT_FALSE(base64UrlDecode("Zm9vY").has_value());  // a remainder of one character
  EXPECT_FALSE(base64UrlDecode("Zm=8").has_value());
  EXPECT_FALSE(base64UrlDecode(std::string("Zm\0v", 4)).has_value());
}

}  // namespace
}  // namespace purser
