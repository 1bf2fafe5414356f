// Records: the governance write path. A domain describes a change to the durable record as a
// value (identity's inserts, a wallet, a charge's write, a sealed provider key) and Records
// commits it together with its audit entries, in one transaction: both or neither. It also
// answers the audit log's reads. The REST layer hands changes here and never sees a transaction
// (docs/architecture.md, "Four layers in every domain").
//
// Thread-safety: every method may be called from any thread; commit() runs on the store's writer
// thread and calls `done` there.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "ledger/audit.h"
#include "ledger/wallet_book.h"
#include "store/store.h"

namespace purser::ledger {

// One change to the durable record, applied inside a Records transaction.
using Change = store::TxFn;

// `fn(tx, args...)` as a Change; the arguments are kept by value until it runs.
template <typename Fn, typename... Args>
Change change(Fn fn, Args... args) {
  return [fn, ... args = std::move(args)](store::Tx& tx) -> Result<void> {
    auto r = fn(tx, args...);
    if (!r) return fail(std::move(r.error()));
    return {};
  };
}

class Records {
 public:
  Records(store::Store& store, const AuditLog& audit) : store_(store), audit_(audit) {}
  Records(const Records&) = delete;
  Records& operator=(const Records&) = delete;

  // Commits `changes` in order, then appends `entries` to the audit log, in one transaction;
  // `done` is called once it is durable (or failed, with nothing written).
  void commit(std::vector<Change> changes, std::vector<AuditEntry> entries,
              std::function<void(Result<void>)> done);
  // The same, waiting on the calling thread (start-up, before any worker runs).
  Result<void> commitNow(std::vector<Change> changes, std::vector<AuditEntry> entries);

  // The audit log's entries matching `query`, and the verdict on its chain.
  Result<std::vector<AuditEntry>> audit(const AuditQuery& query) const;
  Result<AuditVerdict> verifyAudit() const;

 private:
  store::TxFn transaction(std::vector<Change> changes, std::vector<AuditEntry> entries) const;

  store::Store& store_;
  const AuditLog& audit_;
};

// The audit entries of budget alerts: one "budget.alert" on each alert's wallet, by `actor`.
std::vector<AuditEntry> alertEntries(const std::vector<Alert>& alerts, const std::string& tenant_id,
                                     const std::string& actor, const std::string& actor_role);

// Budget alerts leave the ledger here: the server posts them to the configured webhook (best
// effort; their audit entries are the record). A seam: tests hand in a recorder.
class AlertSink {
 public:
  virtual ~AlertSink() = default;
  // Never blocks; may be called from any thread.
  virtual void post(const std::string& tenant_id, const std::vector<Alert>& alerts) = 0;
};

}  // namespace purser::ledger
