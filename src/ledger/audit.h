// The audit log: every admin mutation and every policy denial, as a hash chain in the store.
//
// Each entry's hash covers its own fields and the previous entry's hash, so editing, deleting or
// reordering any entry breaks the chain from that entry on; verify() walks the chain and names
// the first entry that does not check out. Entries are appended inside the caller's write
// transaction, so a change and its audit entry are committed together or not at all.
//
// A chain alone does not stop someone who holds the database from rewriting all of it
// consistently, or from cutting off its newest entries. So the log is anchored outside the
// database (when it is given a key):
//   - every entry carries a MAC, HMAC-SHA256 of its hash under the audit key, which lives in
//     PURSER_AUDIT_KEY or a key file, never in the database: a rewrite without the key cannot
//     produce valid MACs;
//   - an anchor file beside the database records, under a MAC, the newest entry's seq and hash
//     (anchor(), every few seconds and at shutdown): a log that ends before it, or holds another
//     entry at its seq, was truncated or rewritten.
// On the first start with a key the entries already there are sealed (given their MACs) once, and
// an audit entry says so.
//
// Thread-safety: append() runs inside a store write (serialized by the store's single writer);
// verify() and list() are reads and may run anytime; anchor() and open() may be called from any
// thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "common/secret_key.h"
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
  std::string mac;         // hex HMAC-SHA256 of `hash` under the audit key; "" when unkeyed
};

struct AuditVerdict {
  bool ok = true;
  int64_t entries = 0;          // entries checked
  int64_t first_bad_seq = 0;    // when !ok: the first entry that fails
  std::string problem;          // when !ok: what is wrong with it
  bool signed_entries = false;  // the entries' MACs were checked (the log has a key)
  int64_t anchored_seq = 0;     // the newest entry the anchor vouches for (0: none)
};

struct AuditQuery {
  std::string tenant_id;   // empty: all tenants (platform view)
  std::string from;        // RFC 3339, inclusive; empty: the beginning
  std::string to;          // RFC 3339, exclusive; empty: now
  std::string action;      // exact ("key.create") or a prefix ending in '.' ("key."); empty: all
  std::string actor;       // an actor id; empty: all
  int64_t before_seq = 0;  // > 0: only entries numbered below it (the next page, newest first)
  int64_t after_seq = 0;   // > 0: only entries numbered above it
  bool newest_first = false;
  int64_t limit = 1000;
};

class AuditLog {
 public:
  // A plain hash chain: edits are found, a consistent rewrite or a truncation is not.
  explicit AuditLog(const Clock& clock) : clock_(clock) {}
  // Signed with `key` and anchored in `anchor_file` (see above).
  AuditLog(const Clock& clock, const SecretKey& key, std::string anchor_file)
      : clock_(clock), key_(key), anchor_file_(std::move(anchor_file)) {}

  static const std::vector<store::Migration>& migrations();

  // At start, with a key: when there is no anchor yet, seals the entries already written (once)
  // and writes the anchor. Never fails over what it finds in the log; verify() reports that.
  Result<void> open(store::Store& store);

  // Appends `entry` (seq, at, hashes are filled in) inside the write transaction `tx`.
  Result<AuditEntry> append(store::Tx& tx, AuditEntry entry) const;
  Result<std::vector<AuditEntry>> list(store::Store& store, const AuditQuery& query) const;
  Result<AuditVerdict> verify(store::Store& store) const;

  // Moves the anchor to the newest entry (cheap when nothing was appended since). A log whose
  // newest entry is older than the anchor's was truncated: the anchor stays, and the error says
  // so.
  Result<void> anchor(store::Store& store);

  // The hash an entry should have, from its fields and the previous hash.
  static std::string hashOf(const AuditEntry& entry);

 private:
  struct Anchor {
    int64_t sealed_from = 1;  // entries from here on carry MACs
    int64_t seq = 0;
    std::string hash;
  };
  // The newest entry's seq and hash into `a` (left as they are when the log is empty).
  static Result<void> readHead(store::Tx& tx, Anchor& a);
  std::string macOf(std::string_view data) const;
  std::string anchorMac(const Anchor& a) const;
  // The anchor file: nullopt when there is none; an error when it cannot be believed.
  Result<std::optional<Anchor>> readAnchor() const;
  Result<void> writeAnchor(const Anchor& a) const;

  const Clock& clock_;
  std::optional<SecretKey> key_;
  std::string anchor_file_;
  std::mutex mu_;
  int64_t anchored_seq_ = -1;  // what the anchor file says, as last written here; mu_
  int64_t sealed_from_ = 1;    // mu_
};

}  // namespace purser::ledger
