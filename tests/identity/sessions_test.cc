// Sign-in sessions: tokens, absolute and idle expiry, ending one or a user's all, the uses
// written and read back (a replica keeps the later use), and the store's record.
#include "identity/sessions.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "fakes/temp_dir.h"
#include "store/sqlite_store.h"

namespace purser::identity {
namespace {

using std::chrono::hours;
using std::chrono::minutes;

NewSession made(const std::string& id, const std::string& user, const Clock& clock) {
  return newSession(id, user, SessionKind::kConsole, clock.now(), hours(24), hours(8));
}

TEST(SessionsTest, ATokenIsRandomPrefixedAndOnlyItsHashIsKept) {
  ManualClock clock;
  NewSession a = made("s1", "u1", clock);
  NewSession b = made("s2", "u1", clock);
  EXPECT_TRUE(a.token.starts_with("pss_"));
  EXPECT_EQ(a.token.size(), 4u + 43u);
  EXPECT_NE(a.token, b.token);
  EXPECT_NE(a.session.csrf_token, b.session.csrf_token);
  EXPECT_EQ(a.session.token_hash.size(), 64u);
  EXPECT_EQ(a.session.token_hash.find(a.token.substr(4)), std::string::npos);
  EXPECT_EQ(a.session.expires_at, clock.now() + hours(24));
}

TEST(SessionsTest, UseFindsTheSessionUntilItsIdleTimeoutOrItsExpiry) {
  ManualClock clock;
  SessionBook book;
  NewSession s = made("s1", "u1", clock);
  book.put(s.session);
  EXPECT_EQ(book.use(s.token, clock.now())->user_id, "u1");
  EXPECT_EQ(book.use("pss_unknown", clock.now()).error().code, ErrorCode::kUnauthenticated);
  EXPECT_FALSE(book.use(s.token.substr(0, s.token.size() - 1) + "x", clock.now()).has_value());
  // Used every 7 hours, it lives to its absolute expiry and no further.
  for (int i = 0; i < 3; ++i) {
    clock.advance(hours(7));
    ASSERT_TRUE(book.use(s.token, clock.now()).has_value()) << i;
  }
  clock.advance(hours(3) + minutes(1));  // 24 h and a minute after it began
  auto expired = book.use(s.token, clock.now());
  ASSERT_FALSE(expired.has_value());
  EXPECT_NE(expired.error().message.find("expired"), std::string::npos);
  EXPECT_EQ(book.size(), 0u);

  NewSession idle = made("s2", "u1", clock);
  book.put(idle.session);
  clock.advance(hours(8));
  auto refused = book.use(idle.token, clock.now());
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("unused"), std::string::npos);
}

TEST(SessionsTest, EndingOneOrAUsersAllForgetsThem) {
  ManualClock clock;
  SessionBook book;
  NewSession a = made("a", "u1", clock), b = made("b", "u1", clock), c = made("c", "u2", clock);
  for (const auto* s : {&a, &b, &c}) book.put(s->session);
  book.end("a");
  EXPECT_FALSE(book.use(a.token, clock.now()).has_value());
  EXPECT_TRUE(book.use(b.token, clock.now()).has_value());
  EXPECT_EQ(book.endUser("u1"), std::vector<std::string>{"b"});
  EXPECT_FALSE(book.use(b.token, clock.now()).has_value());
  EXPECT_TRUE(book.use(c.token, clock.now()).has_value());
  EXPECT_FALSE(book.byId("b").has_value());
  EXPECT_EQ(book.byId("c")->user_id, "u2");
}

TEST(SessionsTest, UsesAreWrittenAndAReloadKeepsTheLaterOne) {
  testing::TempDir dir;
  ManualClock clock;
  auto store = store::SqliteStore::open({.path = dir.file("s.db")}, clock);
  ASSERT_TRUE(store.has_value());
  ASSERT_TRUE((*store)->migrate("sessions", sessionMigrations()).has_value());
  SessionBook book;
  NewSession a = made("a", "u1", clock), b = made("b", "u2", clock);
  ASSERT_TRUE((*store)->write([&](store::Tx& tx) -> Result<void> {
    PURSER_TRY(insertSession(tx, a.session));
    return insertSession(tx, b.session);
  }));
  book.load(*loadSessions(**store, clock.now()));
  EXPECT_EQ(book.size(), 2u);
  clock.advance(hours(5));
  ASSERT_TRUE(book.use(a.token, clock.now()).has_value());
  auto uses = book.dirty();
  ASSERT_EQ(uses.size(), 1u);
  EXPECT_TRUE(book.dirty().empty());
  ASSERT_TRUE((*store)->write([&](store::Tx& tx) { return touchSessions(tx, uses); }));
  // Another replica, started now, reads a's use: 5 h later a is still live, b is idle.
  clock.advance(hours(5));
  SessionBook other;
  other.load(*loadSessions(**store, clock.now()));
  EXPECT_TRUE(other.use(a.token, clock.now()).has_value());
  EXPECT_FALSE(other.use(b.token, clock.now()).has_value());
  // A reload keeps the later use this replica saw over an older one in the store.
  SessionBook mine;
  mine.load(*loadSessions(**store, clock.now()));
  ASSERT_TRUE(mine.use(a.token, clock.now()).has_value());
  mine.load(*loadSessions(**store, clock.now()));
  clock.advance(hours(7));
  EXPECT_TRUE(mine.use(a.token, clock.now()).has_value());
  // Ended in the store: not read back, and purged a day later.
  ASSERT_TRUE((*store)->write([&](store::Tx& tx) { return endSession(tx, "a", "now"); }));
  EXPECT_TRUE(loadSessions(**store, clock.now())->empty());
  ASSERT_TRUE(
      (*store)->write([&](store::Tx& tx) { return purgeSessions(tx, clock.now() + hours(48)); }));
  auto rows = (*store)->read([](store::Tx& tx) -> Result<void> {
    auto r = PURSER_TRY_VALUE(tx.query("SELECT COUNT(*) FROM sessions"));
    EXPECT_EQ(r[0].getInt(0), 0);
    return {};
  });
  EXPECT_TRUE(rows.has_value());
}

TEST(SessionsTest, SweepForgetsWhatIsOver) {
  ManualClock clock;
  SessionBook book;
  book.put(made("a", "u1", clock).session);
  clock.advance(hours(1));
  book.put(made("b", "u1", clock).session);
  clock.advance(hours(7) + minutes(30));
  EXPECT_EQ(book.sweep(clock.now()), 1u);
  EXPECT_EQ(book.size(), 1u);
  EXPECT_TRUE(book.byId("b").has_value());
}

}  // namespace
}  // namespace purser::identity
