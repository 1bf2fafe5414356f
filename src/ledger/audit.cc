#include "ledger/audit.h"

#include <fmt/format.h>
#include <openssl/evp.h>

namespace purser::ledger {

const std::vector<store::Migration>& AuditLog::migrations() {
  static const std::vector<store::Migration> kMigrations = {
      {1, "audit log",
       "CREATE TABLE audit_log ("
       " seq INTEGER PRIMARY KEY, at TEXT NOT NULL, tenant_id TEXT NOT NULL,"
       " actor TEXT NOT NULL, actor_role TEXT NOT NULL, action TEXT NOT NULL,"
       " target TEXT NOT NULL, before TEXT NOT NULL, after TEXT NOT NULL,"
       " prev_hash TEXT NOT NULL, hash TEXT NOT NULL);"
       "CREATE INDEX audit_log_tenant_at ON audit_log (tenant_id, at)"},
  };
  return kMigrations;
}

std::string AuditLog::hashOf(const AuditEntry& e) {
  // Length-prefixed fields: no two different entries serialize alike.
  std::string data;
  const auto put = [&data](std::string_view field) {
    data += std::to_string(field.size());
    data += ':';
    data += field;
  };
  put(std::to_string(e.seq));
  put(e.at);
  put(e.tenant_id);
  put(e.actor);
  put(e.actor_role);
  put(e.action);
  put(e.target);
  put(e.before);
  put(e.after);
  put(e.prev_hash);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr);
  std::string hex;
  hex.reserve(size * 2);
  for (unsigned int i = 0; i < size; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

namespace {

constexpr const char* kColumns =
    "seq, at, tenant_id, actor, actor_role, action, target, before, after, prev_hash, hash";

AuditEntry fromRow(const store::Row& r) {
  AuditEntry e;
  e.seq = r.getInt(0);
  e.at = r.getText(1);
  e.tenant_id = r.getText(2);
  e.actor = r.getText(3);
  e.actor_role = r.getText(4);
  e.action = r.getText(5);
  e.target = r.getText(6);
  e.before = r.getText(7);
  e.after = r.getText(8);
  e.prev_hash = r.getText(9);
  e.hash = r.getText(10);
  return e;
}

}  // namespace

Result<AuditEntry> AuditLog::append(store::Tx& tx, AuditEntry entry) const {
  auto last =
      PURSER_TRY_VALUE(tx.query("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1"));
  entry.seq = last.empty() ? 1 : last[0].getInt(0) + 1;
  entry.prev_hash = last.empty() ? "" : last[0].getText(1);
  entry.at = formatRfc3339(clock_.now());
  entry.hash = hashOf(entry);
  PURSER_TRY(
      tx.exec(fmt::format("INSERT INTO audit_log ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, "
                          "$8, $9, $10, $11)",
                          kColumns),
              {entry.seq, entry.at, entry.tenant_id, entry.actor, entry.actor_role, entry.action,
               entry.target, entry.before, entry.after, entry.prev_hash, entry.hash}));
  return entry;
}

Result<std::vector<AuditEntry>> AuditLog::list(store::Store& store, const AuditQuery& q) const {
  std::vector<AuditEntry> out;
  PURSER_TRY(store.read([&](store::Tx& tx) -> Result<void> {
    const std::string to = q.to.empty() ? std::string("9999") : q.to;
    std::string sql = fmt::format("SELECT {} FROM audit_log WHERE at >= $1 AND at < $2", kColumns);
    std::vector<store::Value> params = {q.from, to};
    const auto bind = [&](std::string_view clause, std::string value) {
      params.emplace_back(std::move(value));
      sql += fmt::format(" AND {} ${}", clause, params.size());
    };
    if (!q.tenant_id.empty()) bind("tenant_id =", q.tenant_id);
    if (q.action.ends_with('.')) {
      // A prefix: [prefix, prefix with its last character raised), which uses the ordering of
      // the text rather than LIKE's wildcards.
      std::string upper = q.action;
      upper.back() = static_cast<char>(upper.back() + 1);
      bind("action >=", q.action);
      bind("action <", upper);
    } else if (!q.action.empty()) {
      bind("action =", q.action);
    }
    if (!q.actor.empty()) bind("actor =", q.actor);
    sql += fmt::format(" ORDER BY seq{} LIMIT {}", q.newest_first ? " DESC" : "",
                       std::max<int64_t>(1, q.limit));
    auto rows = PURSER_TRY_VALUE(tx.query(sql, params));
    for (const auto& r : rows) out.push_back(fromRow(r));
    return {};
  }));
  return out;
}

Result<AuditVerdict> AuditLog::verify(store::Store& store) const {
  AuditVerdict v;
  PURSER_TRY(store.read([&](store::Tx& tx) -> Result<void> {
    // In pages, so a long log is checked in bounded memory.
    int64_t after = 0;
    std::string prev_hash;
    for (;;) {
      auto rows = PURSER_TRY_VALUE(tx.query(
          fmt::format("SELECT {} FROM audit_log WHERE seq > $1 ORDER BY seq LIMIT 1000", kColumns),
          {after}));
      if (rows.empty()) return {};
      for (const auto& r : rows) {
        const AuditEntry e = fromRow(r);
        const int64_t expected_seq = after + 1;
        std::string problem;
        if (e.seq != expected_seq) {
          problem = fmt::format("entry {} is missing (the next entry is {})", expected_seq, e.seq);
          v.first_bad_seq = expected_seq;
        } else if (e.prev_hash != prev_hash) {
          problem = "its link to the previous entry is broken (deleted or reordered entries)";
        } else if (hashOf(e) != e.hash) {
          problem = "its contents do not match its hash (the entry was edited)";
        }
        if (!problem.empty()) {
          v.ok = false;
          if (v.first_bad_seq == 0) v.first_bad_seq = e.seq;
          v.problem = problem;
          return {};
        }
        ++v.entries;
        after = e.seq;
        prev_hash = e.hash;
      }
    }
  }));
  return v;
}

}  // namespace purser::ledger
