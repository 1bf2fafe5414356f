// Sign-in sessions: what a person who signed in through the identity provider holds instead of
// an API key. The console's is the `purser_session` cookie; the CLI's (`purser login --oidc`) is
// a bearer token. Either is "pss_" and 43 base64url characters (256 random bits); only its
// SHA-256 is kept, in the store (the record every replica reads) and in the SessionBook here
// (what authenticating a request reads, never waiting on the store).
//
// A session ends when signed out, when its user is disabled, at its absolute expiry, or when
// unused for its idle timeout. Use is noted in memory and written to the store now and then
// (SessionBook::dirty), so a request never waits on a write; replicas each keep the latest use
// they saw or read.
//
// Thread-safety: SessionBook's methods may be called concurrently (one mutex).
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "store/store.h"

namespace purser::identity {

inline constexpr std::string_view kSessionTokenPrefix = "pss_";
inline constexpr std::string_view kSessionCookie = "purser_session";

enum class SessionKind { kConsole, kCli };
std::string_view sessionKindName(SessionKind kind);  // "console", "cli"

struct Session {
  std::string id;          // public: audit entries and listings name it
  std::string token_hash;  // SHA-256 hex of the token
  std::string user_id;
  // The console's CSRF token (synchronizer token): state-changing requests made with the cookie
  // must send it as the X-Purser-CSRF header.
  std::string csrf_token;
  SessionKind kind = SessionKind::kConsole;
  SystemTime created_at;
  SystemTime expires_at;  // absolute
  Duration idle_timeout{};
  SystemTime last_seen;
};

// A new session's token and record (the token is shown once: the cookie or the CLI's answer).
struct NewSession {
  std::string token;
  Session session;
};
NewSession newSession(std::string id, std::string user_id, SessionKind kind, SystemTime now,
                      Duration max_age, Duration idle_timeout);

// Why a presented token is not a session (the same "not signed in" for unknown and ended ones).
enum class SessionRefusal { kUnknown, kExpired, kIdle };

class SessionBook {
 public:
  // Replaces what is held with `sessions` (the store's live ones), keeping the later use of
  // each that both know.
  void load(std::vector<Session> sessions);
  void put(const Session& s);
  // The session a token stands for, its use noted at `now`; refused (and forgotten) when past
  // its expiry or idle timeout.
  Result<Session> use(std::string_view token, SystemTime now);
  std::optional<Session> byId(const std::string& id) const;
  void end(const std::string& id);
  // Forgets every session of `user_id`; returns their ids.
  std::vector<std::string> endUser(const std::string& user_id);
  // Sessions used since the last call, with that use (to write to the store).
  std::vector<std::pair<std::string, SystemTime>> dirty();
  // Forgets the sessions past expiry or idle at `now`; returns how many.
  size_t sweep(SystemTime now);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, Session> by_hash_;     // guarded by mu_
  std::unordered_map<std::string, std::string> by_id_;   // id -> token hash; guarded by mu_
  std::unordered_map<std::string, SystemTime> touched_;  // id -> last use; guarded by mu_
};

// The store's side. Rows stay after a session ends (ended_at set) until purged, so an ended
// session is never read back in as live.
const std::vector<store::Migration>& sessionMigrations();
Result<void> insertSession(store::Tx& tx, const Session& s);
Result<void> endSession(store::Tx& tx, const std::string& id, const std::string& at);
Result<void> endUserSessions(store::Tx& tx, const std::string& user_id, const std::string& at);
Result<void> touchSessions(store::Tx& tx,
                           const std::vector<std::pair<std::string, SystemTime>>& uses);
// Deletes rows that ended or expired before `before`.
Result<void> purgeSessions(store::Tx& tx, SystemTime before);
// The sessions live at `now`.
Result<std::vector<Session>> loadSessions(store::Store& store, SystemTime now);

}  // namespace purser::identity
