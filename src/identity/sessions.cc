#include "identity/sessions.h"

#include <algorithm>

#include "identity/id_token.h"
#include "identity/keys.h"

namespace purser::identity {

namespace {

int64_t millis(SystemTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
SystemTime fromMillis(int64_t ms) { return SystemTime(std::chrono::milliseconds(ms)); }

bool live(const Session& s, SystemTime now) {
  return now < s.expires_at && now - s.last_seen < s.idle_timeout;
}

}  // namespace

std::string_view sessionKindName(SessionKind kind) {
  return kind == SessionKind::kCli ? "cli" : "console";
}

NewSession newSession(std::string id, std::string user_id, SessionKind kind, SystemTime now,
                      Duration max_age, Duration idle_timeout) {
  NewSession out;
  out.token = std::string(kSessionTokenPrefix) + randomToken();
  Session& s = out.session;
  s.id = std::move(id);
  s.token_hash = sha256Hex(out.token);
  s.user_id = std::move(user_id);
  s.csrf_token = randomToken();
  s.kind = kind;
  s.created_at = now;
  s.expires_at = now + max_age;
  s.idle_timeout = idle_timeout;
  s.last_seen = now;
  return out;
}

void SessionBook::load(std::vector<Session> sessions) {
  std::lock_guard lock(mu_);
  std::unordered_map<std::string, Session> by_hash;
  std::unordered_map<std::string, std::string> by_id;
  for (auto& s : sessions) {
    if (auto known = by_hash_.find(s.token_hash); known != by_hash_.end()) {
      s.last_seen = std::max(s.last_seen, known->second.last_seen);
    }
    by_id[s.id] = s.token_hash;
    by_hash[s.token_hash] = std::move(s);
  }
  by_hash_ = std::move(by_hash);
  by_id_ = std::move(by_id);
  std::erase_if(touched_, [&](const auto& e) { return by_id_.count(e.first) == 0; });
}

void SessionBook::put(const Session& s) {
  std::lock_guard lock(mu_);
  by_hash_[s.token_hash] = s;
  by_id_[s.id] = s.token_hash;
}

Result<Session> SessionBook::use(std::string_view token, SystemTime now) {
  const std::string hash = sha256Hex(token);
  std::lock_guard lock(mu_);
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) {
    return fail(Error(ErrorCode::kUnauthenticated, "not signed in (no such session)"));
  }
  Session& s = it->second;
  if (!live(s, now)) {
    const bool idle = now < s.expires_at;
    by_id_.erase(s.id);
    touched_.erase(s.id);
    by_hash_.erase(it);
    return fail(Error(ErrorCode::kUnauthenticated,
                      idle ? "the session ended after a while unused; sign in again"
                           : "the session has expired; sign in again"));
  }
  s.last_seen = std::max(s.last_seen, now);
  touched_[s.id] = s.last_seen;
  return s;
}

std::optional<Session> SessionBook::byId(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return by_hash_.at(it->second);
}

void SessionBook::end(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  by_hash_.erase(it->second);
  touched_.erase(id);
  by_id_.erase(it);
}

std::vector<std::string> SessionBook::endUser(const std::string& user_id) {
  std::lock_guard lock(mu_);
  std::vector<std::string> ended;
  for (auto it = by_hash_.begin(); it != by_hash_.end();) {
    if (it->second.user_id == user_id) {
      ended.push_back(it->second.id);
      by_id_.erase(it->second.id);
      touched_.erase(it->second.id);
      it = by_hash_.erase(it);
    } else {
      ++it;
    }
  }
  return ended;
}

std::vector<std::pair<std::string, SystemTime>> SessionBook::dirty() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, SystemTime>> out(touched_.begin(), touched_.end());
  touched_.clear();
  return out;
}

size_t SessionBook::sweep(SystemTime now) {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (auto it = by_hash_.begin(); it != by_hash_.end();) {
    if (!live(it->second, now)) {
      by_id_.erase(it->second.id);
      touched_.erase(it->second.id);
      it = by_hash_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

size_t SessionBook::size() const {
  std::lock_guard lock(mu_);
  return by_hash_.size();
}

const std::vector<store::Migration>& sessionMigrations() {
  static const std::vector<store::Migration> kMigrations = {
      {1, "sign-in sessions",
       // Times in milliseconds since the epoch; ended_at 0 while live.
       "CREATE TABLE sessions (id TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE,"
       " user_id TEXT NOT NULL, csrf_token TEXT NOT NULL, kind TEXT NOT NULL,"
       " created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,"
       " idle_timeout_ms INTEGER NOT NULL, last_seen INTEGER NOT NULL,"
       " ended_at TEXT NOT NULL DEFAULT '');"
       "CREATE INDEX sessions_user ON sessions (user_id)"},
  };
  return kMigrations;
}

Result<void> insertSession(store::Tx& tx, const Session& s) {
  PURSER_TRY(tx.exec(
      "INSERT INTO sessions (id, token_hash, user_id, csrf_token, kind, created_at, expires_at,"
      " idle_timeout_ms, last_seen) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
      {s.id, s.token_hash, s.user_id, s.csrf_token, std::string(sessionKindName(s.kind)),
       millis(s.created_at), millis(s.expires_at),
       static_cast<int64_t>(
           std::chrono::duration_cast<std::chrono::milliseconds>(s.idle_timeout).count()),
       millis(s.last_seen)}));
  return {};
}

Result<void> endSession(store::Tx& tx, const std::string& id, const std::string& at) {
  PURSER_TRY(
      tx.exec("UPDATE sessions SET ended_at = $2 WHERE id = $1 AND ended_at = ''", {id, at}));
  return {};
}

Result<void> endUserSessions(store::Tx& tx, const std::string& user_id, const std::string& at) {
  PURSER_TRY(tx.exec("UPDATE sessions SET ended_at = $2 WHERE user_id = $1 AND ended_at = ''",
                     {user_id, at}));
  return {};
}

Result<void> touchSessions(store::Tx& tx,
                           const std::vector<std::pair<std::string, SystemTime>>& uses) {
  for (const auto& [id, at] : uses) {
    PURSER_TRY(tx.exec("UPDATE sessions SET last_seen = $2 WHERE id = $1 AND last_seen < $2",
                       {id, millis(at)}));
  }
  return {};
}

Result<void> purgeSessions(store::Tx& tx, SystemTime before) {
  PURSER_TRY(
      tx.exec("DELETE FROM sessions WHERE expires_at < $1 OR (ended_at <> '' AND"
              " last_seen < $1)",
              {millis(before)}));
  return {};
}

Result<std::vector<Session>> loadSessions(store::Store& store, SystemTime now) {
  std::vector<Session> out;
  PURSER_TRY(store.read([&](store::Tx& tx) -> Result<void> {
    auto rows = PURSER_TRY_VALUE(
        tx.query("SELECT id, token_hash, user_id, csrf_token, kind, created_at, expires_at,"
                 " idle_timeout_ms, last_seen FROM sessions WHERE ended_at = '' AND"
                 " expires_at > $1",
                 {millis(now)}));
    for (const auto& r : rows) {
      Session s;
      s.id = r.getText(0);
      s.token_hash = r.getText(1);
      s.user_id = r.getText(2);
      s.csrf_token = r.getText(3);
      s.kind = r.getText(4) == "cli" ? SessionKind::kCli : SessionKind::kConsole;
      s.created_at = fromMillis(r.getInt(5));
      s.expires_at = fromMillis(r.getInt(6));
      s.idle_timeout = std::chrono::milliseconds(r.getInt(7));
      s.last_seen = fromMillis(r.getInt(8));
      if (live(s, now)) out.push_back(std::move(s));
    }
    return {};
  }));
  return out;
}

}  // namespace purser::identity
