#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace purser {
namespace {

// Bit by bit, straight from the definition.
uint32_t reference(std::string_view data) {
  uint32_t c = 0xFFFFFFFF;
  for (unsigned char b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? (c >> 1) ^ 0x82F63B78 : c >> 1;
  }
  return ~c;
}

TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the standard check value
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
}

TEST(Crc32cTest, EveryPathAgreesWithTheDefinitionAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::string buf(300, '\0');
  for (auto& ch : buf) ch = static_cast<char>(rng());
  for (size_t start = 0; start < 9; ++start) {
    for (size_t len = 0; len + start <= buf.size(); len += 7) {
      const std::string_view d(buf.data() + start, len);
      const uint32_t want = reference(d);
      ASSERT_EQ(crc32c(d), want) << start << "+" << len;
      ASSERT_EQ(crc32cPortable(d), want) << start << "+" << len;
    }
  }
}

TEST(Crc32cTest, ContinuesAcrossPieces) {
  const std::string s = "the ledger's journal records, checksummed";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    const std::string_view v(s);
    EXPECT_EQ(crc32c(v.substr(cut), crc32c(v.substr(0, cut))), crc32c(s)) << cut;
    EXPECT_EQ(crc32cPortable(v.substr(cut), crc32cPortable(v.substr(0, cut))), crc32c(s)) << cut;
  }
}

TEST(Crc32cTest, ASingleFlippedBitChangesIt) {
  std::string s(64, 'a');
  const uint32_t base = crc32c(s);
  for (size_t i = 0; i < s.size() * 8; ++i) {
    std::string t = s;
    t[i / 8] = static_cast<char>(t[i / 8] ^ (1 << (i % 8)));
    EXPECT_NE(crc32c(t), base) << "bit " << i;
  }
}

}  // namespace
}  // namespace purser
