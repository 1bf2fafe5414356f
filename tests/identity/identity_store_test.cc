// The identity tables: a key's priority is written and read back, keys stored before priorities
// existed read as standard, and a priority nobody wrote never stops the daemon from starting.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "fakes/temp_dir.h"
#include "identity/identity.h"
#include "identity/identity_store.h"
#include "store/sqlite_store.h"

namespace purser::identity {
namespace {

ApiKey keyNamed(const std::string& id, Priority priority) {
  ApiKey k;
  k.id = id;
  k.lookup = "lookup-" + id;
  k.owner_id = "u1";
  k.tenant_id = "t1";
  k.team_id = "team1";
  k.name = "key " + id;
  k.secret_hash = "hash-" + id;
  k.created_at = "2026-01-01T00:00:00.000Z";
  k.priority = priority;
  return k;
}

// A store in `dir` with every identity migration applied.
Result<std::unique_ptr<store::SqliteStore>> openMigrated(const testing::TempDir& dir,
                                                         const Clock& clock) {
  auto s = PURSER_TRY_VALUE(store::SqliteStore::open({.path = dir.file("i.db")}, clock));
  PURSER_TRY(s->migrate("identity", identityMigrations()));
  return s;
}

std::optional<ApiKey> loaded(store::Store& s, const std::string& id) {
  auto snapshot = loadIdentity(s);
  EXPECT_TRUE(snapshot.has_value()) << snapshot.error().toString();
  if (!snapshot) return std::nullopt;
  for (const auto& k : snapshot->keys) {
    if (k.id == id) return k;
  }
  return std::nullopt;
}

TEST(IdentityStoreTest, PrioritiesAreNamedAndOrderedByImportance) {
  for (const Priority p : {Priority::kSheddable, Priority::kStandard, Priority::kCritical}) {
    auto parsed = parsePriority(priorityName(p));
    ASSERT_TRUE(parsed.has_value()) << priorityName(p);
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(priorityName(Priority::kCritical), "critical");
  EXPECT_EQ(priorityName(Priority::kStandard), "standard");
  EXPECT_EQ(priorityName(Priority::kSheddable), "sheddable");
  EXPECT_GT(Priority::kCritical, Priority::kStandard);
  EXPECT_GT(Priority::kStandard, Priority::kSheddable);
  for (const char* bad : {"", "Critical", "high", "standard ", "0"}) {
    auto parsed = parsePriority(bad);
    ASSERT_FALSE(parsed.has_value()) << bad;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(parsePriority("x").error().message,
            "unknown priority \"x\"; expected critical, standard or sheddable");
}

TEST(IdentityStoreTest, AKeysPriorityRoundTripsThroughInsertAndUpdate) {
  testing::TempDir dir;
  ManualClock clock;
  auto s = openMigrated(dir, clock);
  ASSERT_TRUE(s.has_value());
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) -> Result<void> {
                    PURSER_TRY(insertKey(tx, keyNamed("a", Priority::kCritical)));
                    PURSER_TRY(insertKey(tx, keyNamed("b", Priority::kStandard)));
                    return insertKey(tx, keyNamed("c", Priority::kSheddable));
                  })
                  .has_value());
  for (const auto& [id, priority] : std::vector<std::pair<std::string, Priority>>{
           {"a", Priority::kCritical}, {"b", Priority::kStandard}, {"c", Priority::kSheddable}}) {
    auto k = loaded(**s, id);
    ASSERT_TRUE(k.has_value()) << id;
    EXPECT_EQ(k->priority, priority) << id;
  }
  ApiKey lowered = keyNamed("a", Priority::kSheddable);
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) { return updateKey(tx, lowered); }).has_value());
  auto a = loaded(**s, "a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->priority, Priority::kSheddable);
}

TEST(IdentityStoreTest, KeysStoredBeforePrioritiesExistedAreStandard) {
  testing::TempDir dir;
  ManualClock clock;
  auto s = store::SqliteStore::open({.path = dir.file("i.db")}, clock);
  ASSERT_TRUE(s.has_value());
  const std::vector<store::Migration> all = identityMigrations();
  ASSERT_EQ(all.size(), 7u);
  ASSERT_TRUE((*s)->migrate("identity", {all[0], all[1]}).has_value());
  ASSERT_TRUE(
      (*s)->write([&](store::Tx& tx) -> Result<void> {
            PURSER_TRY(tx.exec(
                "INSERT INTO api_keys (id, lookup, owner_kind, owner_id, tenant_id, team_id, name,"
                " secret_hash, previous_hash, previous_valid_until, models, expires_at, rpm, tpm,"
                " revoked_at, created_at, parent_key_id)"
                " VALUES ('old', 'lookup-old', 'user', 'u1', 't1', 'team1', 'old key', 'h', '',"
                " '', '[]', '', 0, 0, '', '2025-06-01T00:00:00.000Z', '')"));
            return {};
          })
          .has_value());
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) -> Result<void> {
                    PURSER_TRY(
                        tx.exec("INSERT INTO tenants (id, name, created_at) VALUES ('t1', 'acme', "
                                "'2025-06-01T00:00:00.000Z')"));
                    // A user from before sign-in existed: active, made by an admin.
                    PURSER_TRY(tx.exec(
                        "INSERT INTO users (id, tenant_id, team_id, name, email, role, created_at)"
                        " VALUES ('u1', 't1', 'team1', 'dana', '', 'member',"
                        " '2025-06-01T00:00:00.000Z')"));
                    return {};
                  })
                  .has_value());
  auto migrated = (*s)->migrate("identity", all);
  ASSERT_TRUE(migrated.has_value()) << migrated.error().toString();
  EXPECT_EQ(*migrated, 5);
  auto before = loadIdentity(**s);
  ASSERT_TRUE(before.has_value());
  ASSERT_EQ(before->users.size(), 1u);
  EXPECT_EQ(before->users[0].subject, "");
  EXPECT_EQ(before->users[0].disabled_at, "");
  User changed = before->users[0];
  changed.subject = "https://idp.example#dana";
  changed.disabled_at = "2026-01-02T00:00:00.000Z";
  changed.role = Role::kTeamLead;
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) { return updateUser(tx, changed); }).has_value());
  auto again = loadIdentity(**s);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->users[0].subject, "https://idp.example#dana");
  EXPECT_EQ(again->users[0].disabled_at, "2026-01-02T00:00:00.000Z");
  EXPECT_EQ(again->users[0].role, Role::kTeamLead);
  auto k = loaded(**s, "old");
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->priority, Priority::kStandard);
  EXPECT_EQ(k->name, "old key");
  // A tenant made before grants existed has the default one: priorities up to 0, standard keys.
  auto snapshot = loadIdentity(**s);
  ASSERT_TRUE(snapshot.has_value());
  ASSERT_EQ(snapshot->tenants.size(), 1u);
  EXPECT_EQ(snapshot->tenants[0].grant.max_workload_priority, 0);
  EXPECT_TRUE(snapshot->tenants[0].grant.classes.empty());
  EXPECT_EQ(snapshot->tenants[0].grant.max_key_priority, Priority::kStandard);
}

TEST(IdentityStoreTest, ATenantsGrantIsKeptAndAnUnreadableOneIsTheDefault) {
  testing::TempDir dir;
  ManualClock clock;
  auto s = openMigrated(dir, clock);
  Tenant t{"t1", "acme", "2025-06-01T00:00:00.000Z", {}};
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) { return insertTenant(tx, t); }).has_value());
  t.grant = {1000, {"urgent", "low"}, Priority::kCritical};
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) { return updateTenantGrant(tx, t); }).has_value());
  auto snapshot = loadIdentity(**s);
  ASSERT_TRUE(snapshot.has_value());
  EXPECT_EQ(snapshot->tenants.at(0).grant.max_workload_priority, 1000);
  EXPECT_EQ(snapshot->tenants.at(0).grant.classes, (std::vector<std::string>{"urgent", "low"}));
  EXPECT_EQ(snapshot->tenants.at(0).grant.max_key_priority, Priority::kCritical);
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) -> Result<void> {
                    PURSER_TRY(tx.exec("UPDATE tenants SET priority_grant = '{\"max_work'"));
                    return {};
                  })
                  .has_value());
  snapshot = loadIdentity(**s);
  ASSERT_TRUE(snapshot.has_value()) << "an unreadable grant never makes the directory unloadable";
  EXPECT_EQ(snapshot->tenants.at(0).grant.max_workload_priority, 0);
}

TEST(IdentityStoreTest, APriorityNobodyWroteIsReadAsStandard) {
  testing::TempDir dir;
  ManualClock clock;
  auto s = openMigrated(dir, clock);
  ASSERT_TRUE(s.has_value());
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) -> Result<void> {
                    PURSER_TRY(insertKey(tx, keyNamed("word", Priority::kCritical)));
                    PURSER_TRY(insertKey(tx, keyNamed("blob", Priority::kCritical)));
                    PURSER_TRY(insertKey(tx, keyNamed("number", Priority::kCritical)));
                    // A hand-edited or damaged database.
                    PURSER_TRY(
                        tx.exec("UPDATE api_keys SET priority = 'urgent' WHERE id = 'word'"));
                    PURSER_TRY(tx.exec("UPDATE api_keys SET priority = X'00' WHERE id = 'blob'"));
                    PURSER_TRY(tx.exec("UPDATE api_keys SET priority = 2 WHERE id = 'number'"));
                    return {};
                  })
                  .has_value());
  for (const char* id : {"word", "blob", "number"}) {
    auto k = loaded(**s, id);
    ASSERT_TRUE(k.has_value()) << id;
    EXPECT_EQ(k->priority, Priority::kStandard) << id;
  }
}

// Tool grants of tenants and teams are written and read back; a grant nobody wrote (or one
// that is not a list) reads as none and never stops the daemon from starting.
TEST(IdentityStoreTest, ToolGrantsRoundTripAndAnUnreadableOneIsNone) {
  testing::TempDir dir;
  ManualClock clock;
  auto s = openMigrated(dir, clock);
  ASSERT_TRUE(s.has_value());
  Tenant t{"t1", "acme", "2026-01-01T00:00:00.000Z", {}, {"search/*"}};
  Team team{"team1", "t1", "ml", "2026-01-01T00:00:00.000Z", {}};
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) -> Result<void> {
                    PURSER_TRY(insertTenant(tx, t));
                    return insertTeam(tx, team);
                  })
                  .has_value());
  team.tools = {"demo/echo", "other/*"};
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) { return updateTeamTools(tx, team); }).has_value());
  auto snapshot = loadIdentity(**s);
  ASSERT_TRUE(snapshot.has_value()) << snapshot.error().toString();
  ASSERT_EQ(snapshot->tenants.size(), 1u);
  EXPECT_EQ(snapshot->tenants[0].tools, std::vector<std::string>{"search/*"});
  ASSERT_EQ(snapshot->teams.size(), 1u);
  EXPECT_EQ(snapshot->teams[0].tools, (std::vector<std::string>{"demo/echo", "other/*"}));
  Team gone = team;
  gone.id = "nope";
  EXPECT_FALSE((*s)->write([&](store::Tx& tx) { return updateTeamTools(tx, gone); }).has_value());
  ASSERT_TRUE((*s)->write([&](store::Tx& tx) -> Result<void> {
                    PURSER_TRY(tx.exec("UPDATE tenants SET tools = '{\"not\": \"a list\"}'"));
                    PURSER_TRY(tx.exec("UPDATE teams SET tools = 'garbage'"));
                    return {};
                  })
                  .has_value());
  auto again = loadIdentity(**s);
  ASSERT_TRUE(again.has_value()) << again.error().toString();
  EXPECT_TRUE(again->tenants[0].tools.empty());
  EXPECT_TRUE(again->teams[0].tools.empty());
}

}  // namespace
}  // namespace purser::identity
