// The audit log: every admin mutation and every policy denial, as a hash chain in the store.
//
// Each entry's hash covers its own fields and the previous entry's hash, so editing, deleting or
// reordering any entry breaks the chain from that entry on; verify() walks the chain and names
// the first entry that does not check out. Entries are appended inside the caller's write
// transaction, so a change and its audit entry are committed together or not at all.
//
// Thread-safety: append() runs inside a store write (serialized by the store's single writer);
// verify() and list() are reads and may run anytime.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "store/store.h"

namespace purser::ledger {

struct AuditEntry {
  int64_t seq = 0;         // 1, 2, 3, ... in chain order
  std::string at;          // RFC 3339 UTC
  std::string tenant_id;   // empty: platform-wide
  std::string actor;       // principal id (or "system")
  std::string actor_role;  // role at the time
  std::string action;      // "tenant.create", "key.revoke", "budget.deny", ...
  std::string target;      // "kind:id"
  std::string before;      // JSON, or empty
  std::string after;       // JSON, or empty
  std::string prev_hash;   // hex SHA-256 of the previous entry ("" for the first)
  std::string hash;        // hex SHA-256 of this entry
};

struct AuditVerdict {
  bool ok = true;
  int64_t entries = 0;        // entries checked
  int64_t first_bad_seq = 0;  // when !ok: the first entry that fails
  std::string problem;        // when !ok: what is wrong with it
};

struct AuditQuery {
  std::string tenant_id;  // empty: all tenants (platform view)
  std::string from;       // RFC 3339, inclusive; empty: the beginning
  std::string to;         // RFC 3339, exclusive; empty: now
  std::string action;     // exact ("key.create") or a prefix ending in '.' ("key."); empty: all
  std::string actor;      // an actor id; empty: all
  bool newest_first = false;
  int64_t limit = 1000;
};

class AuditLog {
 public:
  explicit AuditLog(const Clock& clock) : clock_(clock) {}

  static const std::vector<store::Migration>& migrations();

  // Appends `entry` (seq, at, hashes are filled in) inside the write transaction `tx`.
  Result<AuditEntry> append(store::Tx& tx, AuditEntry entry) const;
  Result<std::vector<AuditEntry>> list(store::Store& store, const AuditQuery& query) const;
  Result<AuditVerdict> verify(store::Store& store) const;

  // The hash an entry should have, from its fields and the previous hash.
  static std::string hashOf(const AuditEntry& entry);

 private:
  const Clock& clock_;
};

}  // namespace purser::ledger
