// Key hashing: stored hashes from every earlier version must keep matching, so the digest is
// checked against SHA-256's published answers, not only against itself.
#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/id.h"
#include "common/random.h"
#include "identity/keys.h"

namespace purser::identity {
namespace {

TEST(KeysTest, Sha256HexGivesTheStandardDigests) {
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(KeysTest, APresentedKeyFindsItsLookupAndHash) {
  ManualClock clock;
  SeededRandom random(3);
  IdGenerator ids(clock, random);
  const NewKey k = generateKey(ids, random);
  const PresentedKey p = presentedKey(k.secret);
  EXPECT_EQ(p.lookup, k.lookup);
  EXPECT_EQ(p.hash, k.secret_hash);
  EXPECT_NE(presentedKey(k.secret + "x").hash, k.secret_hash);
}

}  // namespace
}  // namespace purser::identity
