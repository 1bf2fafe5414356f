#include "server/replication.h"

#include "server/mcp_setup.h"

#include <spdlog/spdlog.h>

#include <set>

#include "identity/identity_store.h"
#include "ledger/ledger_store.h"
#include "store/postgres_store.h"

namespace purser::server {

namespace {

constexpr const char* kChannel = "purser_changes";

std::string triggersSql() {
  std::string sql =
      "CREATE TABLE state_version (id TEXT PRIMARY KEY, version INTEGER NOT NULL);"
      "INSERT INTO state_version (id, version) VALUES ('state', 0);"
      "CREATE FUNCTION purser_state_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$"
      " BEGIN UPDATE state_version SET version = version + 1 WHERE id = 'state';"
      " PERFORM pg_notify('purser_changes', TG_TABLE_NAME); RETURN NULL; END $fn$;";
  for (const char* table : {"tenants", "teams", "users", "service_accounts", "api_keys", "wallets",
                            "rate_limits", "provider_keys"}) {
    sql += std::string("CREATE TRIGGER ") + table +
           "_changed AFTER INSERT OR UPDATE OR DELETE ON " + table +
           " FOR EACH STATEMENT EXECUTE FUNCTION purser_state_changed();";
  }
  return sql;
}

Result<int64_t> version(store::Store& store) {
  int64_t v = 0;
  PURSER_TRY(store.read([&](store::Tx& tx) -> Result<void> {
    auto rows = PURSER_TRY_VALUE(tx.query("SELECT version FROM state_version WHERE id = 'state'"));
    v = rows.empty() ? 0 : rows[0].getInt(0);
    return {};
  }));
  return v;
}

}  // namespace

const std::vector<store::Migration>& changeNoticeMigrations() {
  static const std::vector<store::Migration> kMigrations = {
      {1, "change notices for replicas", triggersSql()},
      // Sign-in sessions: begun and ended, not their use (written every minute, and read at
      // the next reload for whatever other reason).
      {2, "change notices for sign-in sessions",
       "CREATE TRIGGER sessions_changed AFTER INSERT OR DELETE OR UPDATE OF ended_at ON sessions"
       " FOR EACH STATEMENT EXECUTE FUNCTION purser_state_changed();"},
  };
  return kMigrations;
}

Result<void> reloadShared(store::Store& store, const api::Services& s, gateway::Gateway& gateway,
                          gateway::ProviderKeyStore& provider_keys,
                          const std::vector<std::shared_ptr<mcp::Upstream>>& mcp_servers) {
  // Read again if this process changed the directory meanwhile (its write may be missing from
  // the snapshot, and loading it would undo the put until the next notice).
  bool loaded = false;
  for (int attempt = 0; attempt < 20 && !loaded; ++attempt) {
    const uint64_t before = s.directory.generation();
    loaded = s.directory.loadIfUnchanged(PURSER_TRY_VALUE(identity::loadIdentity(store)), before);
  }
  if (!loaded) return fail(unavailable("the directory kept changing while it was read"));
  PURSER_TRY(ledger::loadBooks(store, s.clock, s.wallets, s.rate_limits, /*keep_known=*/true));
  auto stored_keys = PURSER_TRY_VALUE(provider_keys.loadAll());
  applyMcpCredentials(stored_keys, mcp_servers);
  for (auto& [name, keys] : stored_keys) {
    if (auto* p = gateway.provider(name)) p->replaceKeys(std::move(keys));
  }
  if (s.sessions != nullptr) {
    s.sessions->load(PURSER_TRY_VALUE(identity::loadSessions(store, s.clock.now())));
  }
  return {};
}

void watchChanges(std::stop_token stop, const std::string& url, store::Store& store,
                  const std::function<void()>& reload) {
  store::PgListener listener(url, kChannel);
  int64_t seen = version(store).value_or(-1);
  auto last_check = std::chrono::steady_clock::duration::zero();
  bool failing = false;
  while (!stop.stop_requested()) {
    auto notices = listener.wait(std::chrono::milliseconds(200));
    bool changed = notices && !notices->empty();
    if (!notices) {
      if (!failing) {
        spdlog::warn(
            "replicas: not listening for changes from other replicas ({}); checking "
            "every second instead",
            notices.error().message);
      }
      failing = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    } else if (failing) {
      failing = false;
      changed = true;  // a notice may have been missed meanwhile
    }
    // The periodic check: every fifth turn, about a second.
    last_check += std::chrono::milliseconds(200);
    if (!changed && last_check >= std::chrono::seconds(1)) {
      last_check = {};
      auto v = version(store);
      changed = v && *v != seen;
    }
    if (!changed) continue;
    if (auto v = version(store)) seen = *v;
    reload();
  }
}

}  // namespace purser::server
