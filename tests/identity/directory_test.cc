// The directory in memory: loading, lookups, key chains, and every way authenticate() refuses a
// key, with a manual clock for expiry and rotation grace.
#include "identity/directory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/id.h"
#include "common/random.h"
#include "identity/keys.h"

namespace purser::identity {
namespace {

// A tenant "acme" with team "ml", member "dana" (a key), service account "bot" (a key) and a
// platform admin (a key), loaded from a snapshot.
class DirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tenant = {ids.next(), "acme", now()};
    team = {ids.next(), tenant.id, "ml", now()};
    dana = {ids.next(), tenant.id, team.id, "dana", "dana@example.com", Role::kMember, now()};
    admin = {ids.next(), "", "", "admin", "", Role::kPlatformAdmin, now()};
    bot = {ids.next(), tenant.id, team.id, "bot", now()};
    dana_key = issue(OwnerKind::kUser, dana.id);
    bot_key = issue(OwnerKind::kServiceAccount, bot.id);
    admin_key = issue(OwnerKind::kUser, admin.id);
    directory.load(snapshot());
  }

  std::string now() const { return formatRfc3339(clock.now()); }

  struct Issued {
    ApiKey key;
    std::string secret;  // what a client presents
  };

  // A new key of `owner_id`, not yet in the directory.
  Issued issue(OwnerKind kind, const std::string& owner_id, const std::string& parent = "") {
    const NewKey n = generateKey(ids, random);
    ApiKey k;
    k.id = n.id;
    k.lookup = n.lookup;
    k.secret_hash = n.secret_hash;
    k.owner_kind = kind;
    k.owner_id = owner_id;
    k.tenant_id = owner_id == admin.id ? "" : tenant.id;
    k.team_id = owner_id == admin.id ? "" : team.id;
    k.name = "key";
    k.created_at = now();
    k.parent_key_id = parent;
    return {k, n.secret};
  }

  Snapshot snapshot() const {
    return {{tenant}, {team}, {dana, admin}, {bot}, {dana_key.key, bot_key.key, admin_key.key}};
  }

  // Why a key is refused; nullopt when it is accepted. authenticate() must say the same.
  std::optional<KeyRefusal> refusal(std::string_view presented) const {
    auto checked = directory.verify(presented);
    auto who = directory.authenticate(presented);
    EXPECT_EQ(checked.has_value(), who.has_value());
    if (checked) return std::nullopt;
    EXPECT_EQ(checked.error().message, keyRefusalMessage(checked.error().reason));
    if (!who) {
      EXPECT_EQ(who.error().code, ErrorCode::kUnauthenticated);
      EXPECT_EQ(who.error().message, checked.error().message);
    }
    return checked.error().reason;
  }

  ManualClock clock;
  SeededRandom random{11};
  IdGenerator ids{clock, random};
  Directory directory{clock};
  Tenant tenant;
  Team team;
  User dana, admin;
  ServiceAccount bot;
  Issued dana_key, bot_key, admin_key;
};

TEST_F(DirectoryTest, AValidKeyIsItsOwner) {
  auto who = directory.authenticate(dana_key.secret);
  ASSERT_TRUE(who.has_value()) << who.error().toString();
  EXPECT_EQ(who->kind, OwnerKind::kUser);
  EXPECT_EQ(who->id, dana.id);
  EXPECT_EQ(who->name, "dana");
  EXPECT_EQ(who->tenant_id, tenant.id);
  EXPECT_EQ(who->team_id, team.id);
  EXPECT_EQ(who->role, Role::kMember);
  EXPECT_EQ(who->key_id, dana_key.key.id);
  EXPECT_EQ(who->key_chain, std::vector<std::string>{dana_key.key.id});

  auto b = directory.authenticate(bot_key.secret);
  ASSERT_TRUE(b.has_value()) << b.error().toString();
  EXPECT_EQ(b->kind, OwnerKind::kServiceAccount);
  EXPECT_EQ(b->id, bot.id);
  EXPECT_EQ(b->name, "bot");
  EXPECT_EQ(b->role, Role::kServiceAccount);

  auto a = directory.authenticate(admin_key.secret);
  ASSERT_TRUE(a.has_value()) << a.error().toString();
  EXPECT_EQ(a->role, Role::kPlatformAdmin);
  EXPECT_TRUE(a->tenant_id.empty());
}

TEST_F(DirectoryTest, AKeyInAnyOtherFormatIsFoundByItsHash) {
  const NewKey external = externalKey("a-bootstrap-key-of-the-operators-choosing");
  ApiKey k = dana_key.key;
  k.id = ids.next();
  k.lookup = external.lookup;
  k.secret_hash = external.secret_hash;
  directory.put(k);
  auto who = directory.authenticate("a-bootstrap-key-of-the-operators-choosing");
  ASSERT_TRUE(who.has_value()) << who.error().toString();
  EXPECT_EQ(who->key_id, k.id);
  EXPECT_EQ(refusal("a-bootstrap-key-of-the-operators-choosinG"), KeyRefusal::kUnknown);
}

// The words people see: the admin API answers them as they are and the gateway quotes all but
// kUnknown's, so they change only on purpose.
TEST(KeyRefusalTest, EachRefusalHasItsMessage) {
  const std::vector<std::pair<KeyRefusal, std::string_view>> table = {
      {KeyRefusal::kMissing, "no API key was given"},
      {KeyRefusal::kUnknown, "invalid API key"},
      {KeyRefusal::kRevoked, "this API key was revoked"},
      {KeyRefusal::kExpired, "this API key has expired"},
      {KeyRefusal::kParentRevoked, "this API key was revoked (with the key it was made with)"},
      {KeyRefusal::kParentExpired, "this API key has expired (with the key it was made with)"},
  };
  for (const auto& [reason, message] : table) EXPECT_EQ(keyRefusalMessage(reason), message);
}

TEST_F(DirectoryTest, NoKeyIsRefusedAsMissing) { EXPECT_EQ(refusal(""), KeyRefusal::kMissing); }

TEST_F(DirectoryTest, UnknownKeysAndWrongSecretsAreRefusedAlike) {
  // Unknown id, a known id with the wrong secret, and text that is no key at all.
  const Issued stranger = issue(OwnerKind::kUser, dana.id);
  std::string wrong_secret = dana_key.secret;
  wrong_secret.back() = wrong_secret.back() == 'a' ? 'b' : 'a';
  for (const std::string& presented : {stranger.secret, wrong_secret, std::string("hello")}) {
    EXPECT_EQ(refusal(presented), KeyRefusal::kUnknown) << presented;
  }
}

TEST_F(DirectoryTest, ARevokedKeyIsRefused) {
  ApiKey k = dana_key.key;
  k.revoked_at = now();
  directory.put(k);
  EXPECT_EQ(refusal(dana_key.secret), KeyRefusal::kRevoked);
  // A wrong secret for a revoked key says nothing of the revocation.
  EXPECT_EQ(refusal(dana_key.secret + "x"), KeyRefusal::kUnknown);
}

TEST_F(DirectoryTest, AKeyExpiresAtItsExpiryTime) {
  ApiKey k = dana_key.key;
  k.expires_at = formatRfc3339(clock.now() + std::chrono::hours(1));
  directory.put(k);
  clock.advance(std::chrono::hours(1) - std::chrono::milliseconds(1));
  EXPECT_EQ(refusal(dana_key.secret), std::nullopt);
  clock.advance(std::chrono::milliseconds(1));
  EXPECT_EQ(refusal(dana_key.secret), KeyRefusal::kExpired);
}

TEST_F(DirectoryTest, ARotatedKeysPreviousSecretWorksUntilItsGraceEnds) {
  const NewKey fresh = regenerateSecret(dana_key.key.id, random);
  ApiKey k = dana_key.key;
  k.previous_hash = k.secret_hash;
  k.previous_valid_until = formatRfc3339(clock.now() + std::chrono::minutes(10));
  k.secret_hash = fresh.secret_hash;
  directory.put(k);
  EXPECT_EQ(refusal(fresh.secret), std::nullopt);
  EXPECT_EQ(refusal(dana_key.secret), std::nullopt);
  clock.advance(std::chrono::minutes(10));
  EXPECT_EQ(refusal(dana_key.secret), KeyRefusal::kUnknown);
  EXPECT_EQ(refusal(fresh.secret), std::nullopt);
}

TEST_F(DirectoryTest, AKeyWhoseOwnerIsGoneIsRefused) {
  Snapshot s = snapshot();
  s.users = {admin};           // dana is gone
  s.service_accounts.clear();  // and so is bot
  directory.load(s);
  EXPECT_EQ(refusal(dana_key.secret), KeyRefusal::kUnknown);
  EXPECT_EQ(refusal(bot_key.secret), KeyRefusal::kUnknown);
  EXPECT_EQ(refusal(admin_key.secret), std::nullopt);
}

// dana's key, a key derived from it, and one derived from that.
class DerivedKeyTest : public DirectoryTest {
 protected:
  void SetUp() override {
    DirectoryTest::SetUp();
    child = issue(OwnerKind::kUser, dana.id, dana_key.key.id);
    grandchild = issue(OwnerKind::kUser, dana.id, child.key.id);
    directory.put(child.key);
    directory.put(grandchild.key);
  }
  Issued child, grandchild;
};

TEST_F(DerivedKeyTest, ADerivedKeyCarriesItsChainNearestFirst) {
  auto who = directory.authenticate(grandchild.secret);
  ASSERT_TRUE(who.has_value()) << who.error().toString();
  EXPECT_EQ(who->key_id, grandchild.key.id);
  EXPECT_EQ(who->key_chain,
            (std::vector<std::string>{grandchild.key.id, child.key.id, dana_key.key.id}));
}

TEST_F(DerivedKeyTest, ADerivedKeyFallsWithAnyKeyAboveIt) {
  ApiKey root = dana_key.key;
  root.revoked_at = now();
  directory.put(root);
  EXPECT_EQ(refusal(grandchild.secret), KeyRefusal::kParentRevoked);
  EXPECT_EQ(refusal(child.secret), KeyRefusal::kParentRevoked);

  root.revoked_at.clear();
  directory.put(root);
  ApiKey middle = child.key;
  middle.expires_at = formatRfc3339(clock.now() + std::chrono::minutes(1));
  directory.put(middle);
  EXPECT_EQ(refusal(grandchild.secret), std::nullopt);
  clock.advance(std::chrono::minutes(1));
  EXPECT_EQ(refusal(grandchild.secret), KeyRefusal::kParentExpired);
  EXPECT_EQ(refusal(child.secret), KeyRefusal::kExpired);
  EXPECT_EQ(refusal(dana_key.secret), std::nullopt);
}

TEST_F(DerivedKeyTest, ADerivedKeyWhoseParentIsGoneIsRefused) {
  Snapshot s = snapshot();
  s.keys = {grandchild.key, dana_key.key};  // the key it was made with is gone
  directory.load(s);
  EXPECT_EQ(refusal(grandchild.secret), KeyRefusal::kUnknown);
  EXPECT_EQ(refusal(dana_key.secret), std::nullopt);
}

TEST_F(DerivedKeyTest, KeyChainIsNearestFirstAndEmptyForAnUnknownKey) {
  const auto chain = directory.keyChain(grandchild.key.id);
  ASSERT_EQ(chain.size(), 3u);
  EXPECT_EQ(chain[0].id, grandchild.key.id);
  EXPECT_EQ(chain[1].id, child.key.id);
  EXPECT_EQ(chain[2].id, dana_key.key.id);
  ASSERT_EQ(directory.keyChain(dana_key.key.id).size(), 1u);
  EXPECT_TRUE(directory.keyChain("no-such-key").empty());
}

TEST_F(DerivedKeyTest, KeyChainStopsOnACycle) {
  // Never made through the API; a damaged store must still not hang a lookup.
  ApiKey a = dana_key.key;
  a.parent_key_id = grandchild.key.id;
  directory.put(a);
  EXPECT_LE(directory.keyChain(grandchild.key.id).size(), kMaxKeyDepth + 1);
}

TEST_F(DerivedKeyTest, DerivedKeysAreFoundTransitively) {
  const Issued sibling = issue(OwnerKind::kUser, dana.id, dana_key.key.id);
  directory.put(sibling.key);
  std::vector<std::string> expected = {child.key.id, grandchild.key.id, sibling.key.id};
  std::sort(expected.begin(), expected.end());
  std::vector<std::string> found;
  for (const auto& k : directory.derivedKeys(dana_key.key.id)) found.push_back(k.id);
  EXPECT_EQ(found, expected);
  found.clear();
  for (const auto& k : directory.derivedKeys(child.key.id)) found.push_back(k.id);
  EXPECT_EQ(found, std::vector<std::string>{grandchild.key.id});
  EXPECT_TRUE(directory.derivedKeys(grandchild.key.id).empty());
  EXPECT_TRUE(directory.derivedKeys(bot_key.key.id).empty());
  EXPECT_TRUE(directory.derivedKeys("no-such-key").empty());
}

TEST_F(DirectoryTest, PutUpdatesWhatLookupsAndAuthenticationSee) {
  ASSERT_EQ(refusal(dana_key.secret), std::nullopt);
  ApiKey revoked = dana_key.key;
  revoked.revoked_at = now();
  directory.put(revoked);
  EXPECT_EQ(refusal(dana_key.secret), KeyRefusal::kRevoked);
  EXPECT_EQ(directory.key(dana_key.key.id)->revoked_at, revoked.revoked_at);

  User renamed = dana;
  renamed.name = "dana2";
  directory.put(renamed);
  EXPECT_EQ(directory.user(dana.id)->name, "dana2");
  EXPECT_EQ(directory.authenticate(bot_key.secret)->name, "bot");

  const Issued added = issue(OwnerKind::kUser, dana.id);
  EXPECT_EQ(refusal(added.secret), KeyRefusal::kUnknown);
  directory.put(added.key);
  EXPECT_EQ(directory.authenticate(added.secret)->name, "dana2");
  EXPECT_EQ(directory.keyCount(), 4u);
}

TEST_F(DirectoryTest, LoadReplacesEverything) {
  directory.load({});
  EXPECT_EQ(directory.keyCount(), 0u);
  EXPECT_FALSE(directory.tenant(tenant.id));
  EXPECT_TRUE(directory.users().empty());
  EXPECT_EQ(refusal(dana_key.secret), KeyRefusal::kUnknown);
}

TEST_F(DirectoryTest, LookupsByIdAndByName) {
  EXPECT_EQ(directory.tenant(tenant.id)->name, "acme");
  EXPECT_EQ(directory.tenantByName("acme")->id, tenant.id);
  EXPECT_FALSE(directory.tenantByName("other"));
  EXPECT_EQ(directory.team(team.id)->name, "ml");
  EXPECT_EQ(directory.teamByName(tenant.id, "ml")->id, team.id);
  EXPECT_FALSE(directory.teamByName("another-tenant", "ml"));
  EXPECT_EQ(directory.serviceAccount(bot.id)->name, "bot");
  EXPECT_FALSE(directory.user(bot.id));
  EXPECT_FALSE(directory.key("no-such-key"));
}

TEST_F(DirectoryTest, NameTakenIsPerTenantAndPerKind) {
  EXPECT_TRUE(directory.nameTaken(OwnerKind::kUser, tenant.id, "dana"));
  EXPECT_FALSE(directory.nameTaken(OwnerKind::kUser, "another-tenant", "dana"));
  EXPECT_FALSE(directory.nameTaken(OwnerKind::kServiceAccount, tenant.id, "dana"));
  EXPECT_TRUE(directory.nameTaken(OwnerKind::kServiceAccount, tenant.id, "bot"));
  EXPECT_FALSE(directory.nameTaken(OwnerKind::kUser, tenant.id, "bot"));
  // Platform admins belong to no tenant.
  EXPECT_TRUE(directory.nameTaken(OwnerKind::kUser, "", "admin"));
}

TEST_F(DirectoryTest, CollectionsAreSortedById) {
  // Put in descending order of id.
  std::vector<Tenant> tenants;
  for (int i = 0; i < 5; ++i) tenants.push_back({ids.next(), "t" + std::to_string(i), now()});
  for (auto it = tenants.rbegin(); it != tenants.rend(); ++it) directory.put(*it);
  std::vector<Issued> keys;
  for (int i = 0; i < 5; ++i) keys.push_back(issue(OwnerKind::kUser, dana.id));
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) directory.put(it->key);

  const auto all_tenants = directory.tenants();
  ASSERT_EQ(all_tenants.size(), 6u);
  EXPECT_TRUE(std::is_sorted(all_tenants.begin(), all_tenants.end(),
                             [](const Tenant& a, const Tenant& b) { return a.id < b.id; }));
  const auto all_keys = directory.keys();
  ASSERT_EQ(all_keys.size(), 8u);
  EXPECT_TRUE(std::is_sorted(all_keys.begin(), all_keys.end(),
                             [](const ApiKey& a, const ApiKey& b) { return a.id < b.id; }));
  EXPECT_EQ(directory.users().size(), 2u);
  EXPECT_EQ(directory.teams().size(), 1u);
  EXPECT_EQ(directory.serviceAccounts().size(), 1u);
}

// Readers authenticate while a writer adds keys and then revokes one. Every answer a reader gets
// is one the directory held at some moment: a stable key always authenticates as its owner; a key
// being added is unknown until it is there and known after; the key being revoked, once seen
// revoked, stays revoked. At the end every added key authenticates and the revoked one does not.
TEST_F(DirectoryTest, ConcurrentAuthenticationSeesEachPutWhole) {
  constexpr int kAdded = 200;
  constexpr int kReaders = 4;
  std::vector<Issued> added;
  for (int i = 0; i < kAdded; ++i) added.push_back(issue(OwnerKind::kServiceAccount, bot.id));
  ApiKey revoked = dana_key.key;
  revoked.revoked_at = now();

  std::atomic<bool> done{false};
  std::atomic<int> started{0}, wrong{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      bool seen_revoked = false;
      std::vector<bool> seen(kAdded, false);
      ++started;
      for (int round = 0; !done.load() || round < 2; ++round) {
        auto stable = directory.authenticate(bot_key.secret);
        if (!stable || stable->id != bot.id || stable->key_id != bot_key.key.id) ++wrong;
        auto d = directory.verify(dana_key.secret);
        if (d) {
          if (seen_revoked || d->id != dana.id) ++wrong;
        } else if (d.error().reason == KeyRefusal::kRevoked) {
          seen_revoked = true;
        } else {
          ++wrong;
        }
        for (int i = r; i < kAdded; i += kReaders) {
          auto a = directory.verify(added[static_cast<size_t>(i)].secret);
          if (a) {
            if (a->id != bot.id || a->key_id != added[static_cast<size_t>(i)].key.id) ++wrong;
            seen[static_cast<size_t>(i)] = true;
          } else if (seen[static_cast<size_t>(i)] || a.error().reason != KeyRefusal::kUnknown) {
            ++wrong;
          }
        }
      }
    });
  }
  while (started.load() < kReaders) std::this_thread::yield();  // the puts race the readers
  for (const auto& k : added) directory.put(k.key);
  directory.put(revoked);
  done = true;
  for (auto& t : readers) t.join();

  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(refusal(dana_key.secret), KeyRefusal::kRevoked);
  for (const auto& k : added) EXPECT_EQ(refusal(k.secret), std::nullopt);
  EXPECT_EQ(directory.keyCount(), 3u + kAdded);
}

// Mutual TLS: a client certificate mapped (tls.clients) to a service account's key stands for
// that key, and falls with it.
TEST_F(DirectoryTest, AMappedClientCertificateStandsForItsServiceAccountsKey) {
  directory.setCertificateBindings({{"CN=bot,O=Acme", "acme", "bot", ""}});
  auto who = directory.verifyCertificate("CN=bot,O=Acme");
  ASSERT_TRUE(who.has_value()) << who.error().message;
  EXPECT_EQ(who->kind, OwnerKind::kServiceAccount);
  EXPECT_EQ(who->id, bot.id);
  EXPECT_EQ(who->key_id, bot_key.key.id);
  EXPECT_EQ(who->role, Role::kServiceAccount);
  EXPECT_EQ(who->tenant_id, tenant.id);

  // Another subject, or none, is not mapped.
  auto other = directory.verifyCertificate("CN=bot,O=Evil");
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().reason, KeyRefusal::kMissing);
  EXPECT_NE(other.error().message.find("\"CN=bot,O=Evil\" is not mapped"), std::string::npos);
  EXPECT_FALSE(directory.verifyCertificate("").has_value());

  // Found again (from the cache) as long as nothing changed; remapped at once when the
  // bindings change.
  EXPECT_EQ(directory.verifyCertificate("CN=bot,O=Acme")->key_id, bot_key.key.id);
  directory.setCertificateBindings({{"CN=bot,O=Acme", "acme", "nobody", ""}});
  EXPECT_FALSE(directory.verifyCertificate("CN=bot,O=Acme").has_value());
  directory.setCertificateBindings({{"CN=bot,O=Acme", "acme", "bot", ""}});
  EXPECT_TRUE(directory.verifyCertificate("CN=bot,O=Acme").has_value());

  // The key's revocation ends the certificate's access.
  ApiKey revoked = bot_key.key;
  revoked.revoked_at = now();
  directory.put(revoked);
  auto after = directory.verifyCertificate("CN=bot,O=Acme");
  ASSERT_FALSE(after.has_value());
  EXPECT_EQ(after.error().reason, KeyRefusal::kUnknown);
  EXPECT_NE(after.error().message.find("has 0 active keys"), std::string::npos)
      << after.error().message;
}

TEST_F(DirectoryTest, ACertificateOfAnAccountWithSeveralKeysMustNameOne) {
  Issued second = issue(OwnerKind::kServiceAccount, bot.id);
  second.key.name = "mtls";
  directory.put(second.key);
  directory.setCertificateBindings(
      {{"CN=bot", "acme", "bot", ""}, {"CN=bot-mtls", "acme", "bot", "mtls"}});
  auto ambiguous = directory.verifyCertificate("CN=bot");
  ASSERT_FALSE(ambiguous.has_value());
  EXPECT_NE(ambiguous.error().message.find("has 2 active keys; tls.clients must name"),
            std::string::npos)
      << ambiguous.error().message;
  auto named = directory.verifyCertificate("CN=bot-mtls");
  ASSERT_TRUE(named.has_value()) << named.error().message;
  EXPECT_EQ(named->key_id, second.key.id);

  // A named key that expired is refused as expired.
  clock.advance(std::chrono::hours(1));
  second.key.expires_at = now();
  directory.put(second.key);
  auto expired = directory.verifyCertificate("CN=bot-mtls");
  ASSERT_FALSE(expired.has_value());
  EXPECT_EQ(expired.error().reason, KeyRefusal::kExpired);
}

TEST_F(DirectoryTest, ACertificateMappedToAnAccountThatDoesNotExistIsRefused) {
  directory.setCertificateBindings({{"CN=a", "acme", "nobody", ""},
                                    {"CN=b", "globex", "bot", ""},
                                    {"CN=c", "acme", "dana", ""}});
  for (const char* subject : {"CN=a", "CN=b", "CN=c"}) {
    auto who = directory.verifyCertificate(subject);
    ASSERT_FALSE(who.has_value()) << subject;
    EXPECT_EQ(who.error().reason, KeyRefusal::kUnknown);
    EXPECT_NE(who.error().message.find("does not exist"), std::string::npos) << who.error().message;
  }
}

// A key's own tools win; a key without any takes its team's grant, and a team without one its
// tenant's; nothing granted anywhere is nothing.
TEST_F(DirectoryTest, AKeysToolsAreItsOwnElseItsTeamsElseItsTenants) {
  directory.load(snapshot());
  ApiKey k = dana_key.key;
  EXPECT_TRUE(directory.toolsOf(k).empty());
  Tenant t = tenant;
  t.tools = {"search/*"};
  directory.put(t);
  EXPECT_EQ(directory.toolsOf(k), std::vector<std::string>{"search/*"});
  Team tm = team;
  tm.tools = {"demo/echo"};
  directory.put(tm);
  EXPECT_EQ(directory.toolsOf(k), std::vector<std::string>{"demo/echo"});
  k.tools = {"demo/secret"};
  EXPECT_EQ(directory.toolsOf(k), std::vector<std::string>{"demo/secret"});
  // A key of another team of the tenant gets only the tenant's.
  ApiKey elsewhere = dana_key.key;
  elsewhere.team_id = "another-team";
  EXPECT_EQ(directory.toolsOf(elsewhere), std::vector<std::string>{"search/*"});
}

}  // namespace
}  // namespace purser::identity
