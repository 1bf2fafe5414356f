#include "gateway/secrets.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>

#include "fakes/temp_dir.h"
#include "store/sqlite_store.h"

namespace purser::gateway {
namespace {

const std::string kHexKey(64, 'a');

TEST(SealerTest, SealsAndOpensAndDetectsTampering) {
  SeededRandom random(1);
  auto sealer = Sealer::fromHex(kHexKey);
  ASSERT_TRUE(sealer.has_value());
  auto sealed = sealer->seal("sk-live-123", "openai", random);
  ASSERT_TRUE(sealed.has_value());
  EXPECT_EQ(sealed->find("sk-live-123"), std::string::npos);
  EXPECT_EQ(*sealer->unseal(*sealed, "openai"), "sk-live-123");
  auto again = sealer->seal("sk-live-123", "openai", random);
  EXPECT_NE(*again, *sealed) << "a fresh nonce every time";
  EXPECT_FALSE(sealer->unseal(*sealed, "anthropic").has_value()) << "bound to its provider";
  std::string flipped = *sealed;
  flipped[15] ^= 1;
  EXPECT_EQ(sealer->unseal(flipped, "openai").error().code, ErrorCode::kDataLoss);
  auto other = Sealer::fromHex(std::string(64, 'b'));
  EXPECT_FALSE(other->unseal(*sealed, "openai").has_value()) << "another master key";
  EXPECT_FALSE(Sealer::fromHex("abc").has_value());
  EXPECT_FALSE(Sealer::fromHex(std::string(64, 'z')).has_value());
}

TEST(SealerTest, AKeyFileIsCreatedOnceWithOwnerOnlyAccess) {
  testing::TempDir dir;
  SeededRandom random(2);
  const std::string file = dir.file("master.key");
  auto first = Sealer::open(std::nullopt, file, random);
  ASSERT_TRUE(first.has_value()) << first.error().toString();
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto sealed = first->seal("secret", "p", random);
  auto second = Sealer::open(std::nullopt, file, random);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(*second->unseal(*sealed, "p"), "secret") << "the same key is read back";
  auto from_env = Sealer::open(std::string("not hex"), file, random);
  ASSERT_FALSE(from_env.has_value());
  EXPECT_NE(from_env.error().message.find("PURSER_MASTER_KEY"), std::string::npos);
}

TEST(ProviderKeyStoreTest, KeysAreStoredSealedAndLoadedBack) {
  testing::TempDir dir;
  ManualClock clock;
  SeededRandom random(3);
  auto store = store::SqliteStore::open({.path = dir.file("p.db")}, clock);
  ASSERT_TRUE(store.has_value());
  ASSERT_TRUE((*store)->migrate("gateway", ProviderKeyStore::migrations()).has_value());
  ProviderKeyStore keys(**store, *Sealer::fromHex(kHexKey), random, clock);
  ASSERT_TRUE((*store)->write([&](store::Tx& tx) {
    return keys.put(tx, "openai", {"sk-aaa-111", "sk-bbb-222"});
  }));
  ASSERT_TRUE(
      (*store)->write([&](store::Tx& tx) { return keys.put(tx, "openai", {"sk-ccc-333"}); }));
  auto loaded = keys.loadAll();
  ASSERT_TRUE(loaded.has_value()) << loaded.error().toString();
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].second, std::vector<std::string>{"sk-ccc-333"});
  (*store)->close();
  std::ifstream db(dir.file("p.db"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(db)), std::istreambuf_iterator<char>());
  std::ifstream wal(dir.file("p.db-wal"), std::ios::binary);
  const std::string wal_bytes((std::istreambuf_iterator<char>(wal)),
                              std::istreambuf_iterator<char>());
  for (const char* secret : {"sk-aaa-111", "sk-ccc-333"}) {
    EXPECT_EQ(bytes.find(secret), std::string::npos) << "plaintext key in the database";
    EXPECT_EQ(wal_bytes.find(secret), std::string::npos) << "plaintext key in the WAL";
  }
}

}  // namespace
}  // namespace purser::gateway
