#include "ledger/audit.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/crypto.h"
#include "common/json.h"

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
      {2, "audit entries signed with a key kept outside the database",
       "ALTER TABLE audit_log ADD COLUMN mac TEXT NOT NULL DEFAULT ''"},
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
  return crypto::sha256Hex(data);
}

namespace {

constexpr const char* kColumns =
    "seq, at, tenant_id, actor, actor_role, action, target, before, after, prev_hash, hash, mac";

// Compares without leaking where two MACs differ.
bool sameMac(std::string_view a, std::string_view b) { return crypto::constantTimeEquals(a, b); }

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
  e.mac = r.getText(11);
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
  entry.mac = key_ ? macOf(entry.hash) : std::string();
  PURSER_TRY(
      tx.exec(fmt::format("INSERT INTO audit_log ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, "
                          "$8, $9, $10, $11, $12)",
                          kColumns),
              {entry.seq, entry.at, entry.tenant_id, entry.actor, entry.actor_role, entry.action,
               entry.target, entry.before, entry.after, entry.prev_hash, entry.hash, entry.mac}));
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
    if (q.before_seq > 0) {
      params.emplace_back(q.before_seq);
      sql += fmt::format(" AND seq < ${}", params.size());
    }
    if (q.after_seq > 0) {
      params.emplace_back(q.after_seq);
      sql += fmt::format(" AND seq > ${}", params.size());
    }
    sql += fmt::format(" ORDER BY seq{} LIMIT {}", q.newest_first ? " DESC" : "",
                       std::max<int64_t>(1, q.limit));
    auto rows = PURSER_TRY_VALUE(tx.query(sql, params));
    for (const auto& r : rows) out.push_back(fromRow(r));
    return {};
  }));
  return out;
}

Result<void> AuditLog::readHead(store::Tx& tx, Anchor& a) {
  auto head =
      PURSER_TRY_VALUE(tx.query("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1"));
  if (!head.empty()) {
    a.seq = head[0].getInt(0);
    a.hash = head[0].getText(1);
  }
  return {};
}

std::string AuditLog::macOf(std::string_view data) const {
  return crypto::hmacSha256Hex(
      std::string_view(reinterpret_cast<const char*>(key_->data()), key_->size()), data);
}

std::string AuditLog::anchorMac(const Anchor& a) const {
  return macOf(fmt::format("purser-audit-anchor|{}|{}|{}", a.sealed_from, a.seq, a.hash));
}

Result<std::optional<AuditLog::Anchor>> AuditLog::readAnchor() const {
  std::ifstream in(anchor_file_);
  if (!in) return std::optional<Anchor>();
  std::stringstream text;
  text << in.rdbuf();
  const Json j = parseJsonOrDiscarded(text.str());
  const auto bad = [&] {
    return fail(Error(ErrorCode::kDataLoss,
                      fmt::format("the audit anchor \"{}\" was altered (its signature does not "
                                  "match); the log cannot be vouched for",
                                  anchor_file_)));
  };
  if (!j.is_object() || !jsonInt(j.value("sealed_from", Json())) ||
      !jsonInt(j.value("seq", Json())) || !j.value("hash", Json()).is_string() ||
      !j.value("mac", Json()).is_string()) {
    return bad();
  }
  Anchor a;
  a.sealed_from = *jsonInt(j["sealed_from"]);
  a.seq = *jsonInt(j["seq"]);
  a.hash = j["hash"].get<std::string>();
  if (!sameMac(j["mac"].get<std::string>(), anchorMac(a))) return bad();
  return std::optional<Anchor>(a);
}

Result<void> AuditLog::writeAnchor(const Anchor& a) const {
  const std::string text = writeJson(Json{{"version", 1},
                                          {"sealed_from", a.sealed_from},
                                          {"seq", a.seq},
                                          {"hash", a.hash},
                                          {"at", formatRfc3339(clock_.now())},
                                          {"mac", anchorMac(a)}}) +
                           "\n";
  // Written beside, then renamed over: the anchor is always whole.
  const std::string tmp = anchor_file_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return fail(unavailable(fmt::format("cannot write \"{}\"", tmp)));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), anchor_file_.c_str()) != 0) {
    return fail(unavailable(fmt::format("cannot write the audit anchor \"{}\"", anchor_file_)));
  }
  return {};
}

Result<void> AuditLog::open(store::Store& store) {
  if (!key_) return {};
  auto existing = readAnchor();
  if (!existing) {
    spdlog::error("audit: {}", existing.error().message);
    return {};  // verify() reports it; the anchor is not replaced
  }
  std::lock_guard lock(mu_);
  if (*existing) {
    anchored_seq_ = (*existing)->seq;
    sealed_from_ = (*existing)->sealed_from;
    return {};
  }
  // The first start with a key: the entries written before get their MACs now, once. A log that
  // already has signed entries but no anchor lost its anchor: nothing is sealed again (that would
  // launder a rewrite); verify() reports it.
  bool signed_before = false;
  PURSER_TRY(store.read([&](store::Tx& tx) -> Result<void> {
    signed_before =
        !PURSER_TRY_VALUE(tx.query("SELECT 1 FROM audit_log WHERE mac <> '' LIMIT 1")).empty();
    return {};
  }));
  if (signed_before) {
    spdlog::error(
        "audit: the anchor \"{}\" is missing though the log is signed; `purser audit "
        "verify` reports it",
        anchor_file_);
    return {};
  }
  int64_t sealed = 0;
  Anchor a;
  PURSER_TRY(store.write([&](store::Tx& tx) -> Result<void> {
    auto rows = PURSER_TRY_VALUE(tx.query("SELECT seq, hash FROM audit_log ORDER BY seq"));
    for (const auto& r : rows) {
      PURSER_TRY(tx.exec("UPDATE audit_log SET mac = $2 WHERE seq = $1",
                         {r.getInt(0), macOf(r.getText(1))}));
      ++sealed;
    }
    if (sealed > 0) {
      AuditEntry e;
      e.actor = "system";
      e.actor_role = "system";
      e.action = "audit.sealed";
      e.target = "audit";
      e.after = writeJson(Json{{"entries", sealed}});
      PURSER_TRY(append(tx, e));
    }
    PURSER_TRY(readHead(tx, a));
    return {};
  }));
  if (sealed > 0) {
    spdlog::warn("audit: signed the {} entries written before the log had a key", sealed);
  }
  PURSER_TRY(writeAnchor(a));
  anchored_seq_ = a.seq;
  sealed_from_ = a.sealed_from;
  return {};
}

Result<void> AuditLog::anchor(store::Store& store) {
  if (!key_) return {};
  Anchor a;
  PURSER_TRY(store.read([&](store::Tx& tx) { return readHead(tx, a); }));
  std::lock_guard lock(mu_);
  if (a.seq == anchored_seq_) return {};
  if (a.seq < anchored_seq_) {
    return fail(Error(ErrorCode::kDataLoss,
                      fmt::format("the audit log ends at entry {} but its anchor vouches for "
                                  "entry {}: its newest entries were removed",
                                  a.seq, anchored_seq_)));
  }
  a.sealed_from = sealed_from_;
  PURSER_TRY(writeAnchor(a));
  anchored_seq_ = a.seq;
  return {};
}

Result<AuditVerdict> AuditLog::verify(store::Store& store) const {
  AuditVerdict v;
  v.signed_entries = key_.has_value();
  std::optional<Anchor> anchor;
  if (key_) {
    auto read = readAnchor();
    if (!read) {
      v.ok = false;
      v.problem = read.error().message;
      return v;
    }
    anchor = *read;
    if (!anchor) {
      v.ok = false;
      v.problem = fmt::format(
          "the audit anchor \"{}\" is missing: removed newest entries could not be noticed",
          anchor_file_);
      return v;
    }
    v.anchored_seq = anchor->seq;
  }
  const int64_t sealed_from = anchor ? anchor->sealed_from : 1;
  int64_t last_seq = 0;
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
        } else if (key_ && e.seq >= sealed_from && !sameMac(e.mac, macOf(e.hash))) {
          problem =
              "its signature does not match: the entry was written or rewritten without the "
              "audit key";
        } else if (anchor && e.seq == anchor->seq && e.hash != anchor->hash) {
          problem = "it is not the entry the anchor vouches for (the log was rewritten)";
        }
        if (!problem.empty()) {
          v.ok = false;
          if (v.first_bad_seq == 0) v.first_bad_seq = e.seq;
          v.problem = problem;
          return {};
        }
        ++v.entries;
        after = e.seq;
        last_seq = e.seq;
        prev_hash = e.hash;
      }
    }
  }));
  if (v.ok && anchor && last_seq < anchor->seq) {
    v.ok = false;
    v.first_bad_seq = last_seq + 1;
    v.problem = fmt::format(
        "the log ends at entry {} but its anchor vouches for entry {}: its newest entries were "
        "removed",
        last_seq, anchor->seq);
  }
  return v;
}

}  // namespace purser::ledger
