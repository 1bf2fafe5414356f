#include "identity/identity_store.h"
#include "common/json.h"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace purser::identity {

const std::vector<store::Migration>& identityMigrations() {
  static const std::vector<store::Migration> kMigrations = {
      {1, "tenants, teams, users, service accounts and keys",
       "CREATE TABLE tenants (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
       " created_at TEXT NOT NULL);"
       "CREATE TABLE teams (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL REFERENCES tenants(id),"
       " name TEXT NOT NULL, created_at TEXT NOT NULL, UNIQUE (tenant_id, name));"
       "CREATE TABLE users (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, team_id TEXT NOT NULL,"
       " name TEXT NOT NULL, email TEXT NOT NULL, role TEXT NOT NULL, created_at TEXT NOT NULL,"
       " UNIQUE (tenant_id, name));"
       "CREATE TABLE service_accounts (id TEXT PRIMARY KEY,"
       " tenant_id TEXT NOT NULL REFERENCES tenants(id), team_id TEXT NOT NULL REFERENCES "
       "teams(id),"
       " name TEXT NOT NULL, created_at TEXT NOT NULL, UNIQUE (tenant_id, name));"
       "CREATE TABLE api_keys (id TEXT PRIMARY KEY, lookup TEXT NOT NULL UNIQUE,"
       " owner_kind TEXT NOT NULL, owner_id TEXT NOT NULL, tenant_id TEXT NOT NULL,"
       " team_id TEXT NOT NULL, name TEXT NOT NULL, secret_hash TEXT NOT NULL,"
       " previous_hash TEXT NOT NULL, previous_valid_until TEXT NOT NULL, models TEXT NOT NULL,"
       " expires_at TEXT NOT NULL, rpm INTEGER NOT NULL, tpm INTEGER NOT NULL,"
       " revoked_at TEXT NOT NULL, created_at TEXT NOT NULL)"},
      {2, "keys derived from other keys",
       // The key a key was made with, by the same owner: it lives and dies with it.
       "ALTER TABLE api_keys ADD COLUMN parent_key_id TEXT NOT NULL DEFAULT ''"},
      {3, "key priorities",
       // The most important priority a key's requests may ask for; keys made before it are
       // standard, as they were treated.
       "ALTER TABLE api_keys ADD COLUMN priority TEXT NOT NULL DEFAULT 'standard'"},
      {4, "tenants' priority grants",
       // What priority a tenant's workloads and keys may ask for (JSON); "" is the default grant
       // (workload priorities up to 0, standard keys).
       "ALTER TABLE tenants ADD COLUMN priority_grant TEXT NOT NULL DEFAULT ''"},
      {5, "people who sign in, and disabled users",
       // "ISSUER#SUBJECT" of a user made at sign-in ("" for users an admin made), and when a
       // user was disabled ("" while active).
       "ALTER TABLE users ADD COLUMN subject TEXT NOT NULL DEFAULT '';"
       "ALTER TABLE users ADD COLUMN disabled_at TEXT NOT NULL DEFAULT ''"},
      {6, "MCP tools a key may call",
       // A JSON list of "server/tool" patterns; keys made before it may call none.
       "ALTER TABLE api_keys ADD COLUMN tools TEXT NOT NULL DEFAULT '[]'"},
      {7, "MCP tools granted to teams and tenants",
       // JSON lists of "server/tool" patterns for the keys that have none of their own.
       "ALTER TABLE tenants ADD COLUMN tools TEXT NOT NULL DEFAULT '[]';"
       "ALTER TABLE teams ADD COLUMN tools TEXT NOT NULL DEFAULT '[]'"},
  };
  return kMigrations;
}

std::string grantText(const PriorityGrant& g) {
  const Json j = {{"max_workload_priority", g.max_workload_priority},
                  {"classes", g.classes},
                  {"max_key_priority", std::string(priorityName(g.max_key_priority))}};
  return writeJson(j);
}

Result<PriorityGrant> grantFrom(const std::string& text) {
  PriorityGrant g;
  if (text.empty()) return g;
  const Json j = parseJsonOrDiscarded(text);
  if (!j.is_object() || !j.contains("max_workload_priority") ||
      !j["max_workload_priority"].is_number_integer() || !j.contains("classes") ||
      !j["classes"].is_array() || !j.contains("max_key_priority") ||
      !j["max_key_priority"].is_string()) {
    return fail(Error(ErrorCode::kDataLoss, "a tenant's priority grant is not one"));
  }
  g.max_workload_priority = j["max_workload_priority"].get<int32_t>();
  for (const auto& c : j["classes"]) {
    if (c.is_string()) g.classes.push_back(c.get<std::string>());
  }
  g.max_key_priority = PURSER_TRY_VALUE(parsePriority(j["max_key_priority"].get<std::string>()));
  return g;
}

namespace {

std::string toolsText(const std::vector<std::string>& tools) {
  return writeJson(nlohmann::json(tools));
}

std::vector<std::string> toolsFrom(const std::string& text) {
  std::vector<std::string> out;
  auto tools = parseJsonOrDiscarded(text);
  if (!tools.is_array()) return out;
  for (const auto& t : tools) {
    if (t.is_string()) out.push_back(t.get<std::string>());
  }
  return out;
}

}  // namespace

Result<void> insertTenant(store::Tx& tx, const Tenant& t) {
  PURSER_TRY(
      tx.exec("INSERT INTO tenants (id, name, created_at, priority_grant, tools)"
              " VALUES ($1, $2, $3, $4, $5)",
              {t.id, t.name, t.created_at, grantText(t.grant), toolsText(t.tools)}));
  return {};
}

Result<void> updateTenantTools(store::Tx& tx, const Tenant& t) {
  const int64_t changed = PURSER_TRY_VALUE(
      tx.exec("UPDATE tenants SET tools = $1 WHERE id = $2", {toolsText(t.tools), t.id}));
  if (changed != 1) return fail(Error(ErrorCode::kNotFound, "no such tenant"));
  return {};
}

Result<void> updateTeamTools(store::Tx& tx, const Team& t) {
  const int64_t changed = PURSER_TRY_VALUE(
      tx.exec("UPDATE teams SET tools = $1 WHERE id = $2", {toolsText(t.tools), t.id}));
  if (changed != 1) return fail(Error(ErrorCode::kNotFound, "no such team"));
  return {};
}

Result<void> updateTenantGrant(store::Tx& tx, const Tenant& t) {
  const int64_t changed = PURSER_TRY_VALUE(
      tx.exec("UPDATE tenants SET priority_grant = $1 WHERE id = $2", {grantText(t.grant), t.id}));
  if (changed != 1) return fail(Error(ErrorCode::kNotFound, "no such tenant"));
  return {};
}

Result<void> insertTeam(store::Tx& tx, const Team& t) {
  PURSER_TRY(tx.exec(
      "INSERT INTO teams (id, tenant_id, name, created_at, tools) VALUES ($1, $2, $3, $4, $5)",
      {t.id, t.tenant_id, t.name, t.created_at, toolsText(t.tools)}));
  return {};
}

Result<void> insertUser(store::Tx& tx, const User& u) {
  PURSER_TRY(
      tx.exec("INSERT INTO users (id, tenant_id, team_id, name, email, role, created_at,"
              " subject, disabled_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
              {u.id, u.tenant_id, u.team_id, u.name, u.email, std::string(roleName(u.role)),
               u.created_at, u.subject, u.disabled_at}));
  return {};
}

Result<void> updateUser(store::Tx& tx, const User& u) {
  PURSER_TRY(
      tx.exec("UPDATE users SET tenant_id = $2, team_id = $3, name = $4, email = $5, role = $6,"
              " subject = $7, disabled_at = $8 WHERE id = $1",
              {u.id, u.tenant_id, u.team_id, u.name, u.email, std::string(roleName(u.role)),
               u.subject, u.disabled_at}));
  return {};
}

Result<void> insertServiceAccount(store::Tx& tx, const ServiceAccount& s) {
  PURSER_TRY(
      tx.exec("INSERT INTO service_accounts (id, tenant_id, team_id, name, created_at)"
              " VALUES ($1, $2, $3, $4, $5)",
              {s.id, s.tenant_id, s.team_id, s.name, s.created_at}));
  return {};
}

namespace {

std::vector<store::Value> keyValues(const ApiKey& k) {
  return {k.id,
          k.lookup,
          std::string(ownerKindName(k.owner_kind)),
          k.owner_id,
          k.tenant_id,
          k.team_id,
          k.name,
          k.secret_hash,
          k.previous_hash,
          k.previous_valid_until,
          writeJson(nlohmann::json(k.models)),
          k.expires_at,
          k.rpm,
          k.tpm,
          k.revoked_at,
          k.created_at,
          k.parent_key_id,
          std::string(priorityName(k.priority)),
          writeJson(nlohmann::json(k.tools))};
}

}  // namespace

Result<void> insertKey(store::Tx& tx, const ApiKey& k) {
  PURSER_TRY(
      tx.exec("INSERT INTO api_keys (id, lookup, owner_kind, owner_id, tenant_id, team_id, name,"
              " secret_hash, previous_hash, previous_valid_until, models, expires_at, rpm, tpm,"
              " revoked_at, created_at, parent_key_id, priority, tools)"
              " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,"
              " $17, $18, $19)",
              keyValues(k)));
  return {};
}

Result<void> updateKey(store::Tx& tx, const ApiKey& k) {
  const auto changed = PURSER_TRY_VALUE(
      tx.exec("UPDATE api_keys SET lookup = $2, owner_kind = $3, owner_id = $4, tenant_id = $5,"
              " team_id = $6, name = $7, secret_hash = $8, previous_hash = $9,"
              " previous_valid_until = $10, models = $11, expires_at = $12, rpm = $13, tpm = $14,"
              " revoked_at = $15, created_at = $16, parent_key_id = $17, priority = $18,"
              " tools = $19 WHERE id = $1",
              keyValues(k)));
  if (changed != 1) return fail(Error(ErrorCode::kNotFound, "no such key"));
  return {};
}

Result<Snapshot> loadIdentity(store::Store& store) {
  Snapshot s;
  PURSER_TRY(store.read([&](store::Tx& tx) -> Result<void> {
    for (const auto& r : PURSER_TRY_VALUE(
             tx.query("SELECT id, name, created_at, priority_grant, tools FROM tenants"))) {
      auto grant = grantFrom(r.getText(3));
      if (!grant) {
        spdlog::error("identity: tenant {}'s priority grant is unreadable; it has the default",
                      r.getText(0));
      }
      s.tenants.push_back({r.getText(0), r.getText(1), r.getText(2),
                           grant.value_or(PriorityGrant{}), toolsFrom(r.getText(4))});
    }
    for (const auto& r :
         PURSER_TRY_VALUE(tx.query("SELECT id, tenant_id, name, created_at, tools FROM teams"))) {
      s.teams.push_back(
          {r.getText(0), r.getText(1), r.getText(2), r.getText(3), toolsFrom(r.getText(4))});
    }
    for (const auto& r : PURSER_TRY_VALUE(
             tx.query("SELECT id, tenant_id, team_id, name, email, role, created_at, subject,"
                      " disabled_at FROM users"))) {
      auto role = parseRole(r.getText(5));
      if (!role) return fail(Error(ErrorCode::kDataLoss, "a stored user has an unknown role"));
      s.users.push_back({r.getText(0), r.getText(1), r.getText(2), r.getText(3), r.getText(4),
                         *role, r.getText(6), r.getText(7), r.getText(8)});
    }
    for (const auto& r : PURSER_TRY_VALUE(
             tx.query("SELECT id, tenant_id, team_id, name, created_at FROM service_accounts"))) {
      s.service_accounts.push_back(
          {r.getText(0), r.getText(1), r.getText(2), r.getText(3), r.getText(4)});
    }
    for (const auto& r : PURSER_TRY_VALUE(tx.query(
             "SELECT id, lookup, owner_kind, owner_id, tenant_id, team_id, name, secret_hash,"
             " previous_hash, previous_valid_until, models, expires_at, rpm, tpm, revoked_at,"
             " created_at, parent_key_id, priority, tools FROM api_keys"))) {
      ApiKey k;
      k.id = r.getText(0);
      k.lookup = r.getText(1);
      auto kind = parseOwnerKind(r.getText(2));
      if (!kind) return fail(Error(ErrorCode::kDataLoss, "a stored key has an unknown owner kind"));
      k.owner_kind = *kind;
      k.owner_id = r.getText(3);
      k.tenant_id = r.getText(4);
      k.team_id = r.getText(5);
      k.name = r.getText(6);
      k.secret_hash = r.getText(7);
      k.previous_hash = r.getText(8);
      k.previous_valid_until = r.getText(9);
      auto models = parseJsonOrDiscarded(r.getText(10));
      if (models.is_array()) {
        for (const auto& m : models) {
          if (m.is_string()) k.models.push_back(m.get<std::string>());
        }
      }
      k.expires_at = r.getText(11);
      k.rpm = r.getInt(12);
      k.tpm = r.getInt(13);
      k.revoked_at = r.getText(14);
      k.created_at = r.getText(15);
      k.parent_key_id = r.getText(16);
      // A priority nobody wrote (a hand-edited or damaged database) reads as the default, never
      // as more, and is no reason to refuse to start.
      Result<Priority> priority = fail(invalidArgument("not text"));
      if (const auto* text = std::get_if<std::string>(&r.at(17))) priority = parsePriority(*text);
      if (priority) {
        k.priority = *priority;
      } else {
        spdlog::warn("identity: key {} has an unknown priority; treating it as standard", k.id);
      }
      auto tools = parseJsonOrDiscarded(r.getText(18));
      if (tools.is_array()) {
        for (const auto& t : tools) {
          if (t.is_string()) k.tools.push_back(t.get<std::string>());
        }
      }
      s.keys.push_back(std::move(k));
    }
    return {};
  }));
  return s;
}

Result<void> openDirectory(store::Store& store, Directory& directory) {
  PURSER_TRY(store.migrate("identity", identityMigrations()));
  directory.load(PURSER_TRY_VALUE(loadIdentity(store)));
  return {};
}

}  // namespace purser::identity
