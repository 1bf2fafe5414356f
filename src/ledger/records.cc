// Records: see records.h.
#include "ledger/records.h"

#include "common/json.h"

namespace purser::ledger {

store::TxFn Records::transaction(std::vector<Change> changes,
                                 std::vector<AuditEntry> entries) const {
  return [this, changes = std::move(changes),
          entries = std::move(entries)](store::Tx& tx) -> Result<void> {
    for (const Change& c : changes) PURSER_TRY(c(tx));
    for (const AuditEntry& e : entries) PURSER_TRY(audit_.append(tx, e));
    return {};
  };
}

void Records::commit(std::vector<Change> changes, std::vector<AuditEntry> entries,
                     std::function<void(Result<void>)> done) {
  store_.writeAsync(transaction(std::move(changes), std::move(entries)), std::move(done));
}

Result<void> Records::commitNow(std::vector<Change> changes, std::vector<AuditEntry> entries) {
  return store_.write(transaction(std::move(changes), std::move(entries)));
}

Result<std::vector<AuditEntry>> Records::audit(const AuditQuery& query) const {
  return audit_.list(store_, query);
}

Result<AuditVerdict> Records::verifyAudit() const { return audit_.verify(store_); }

std::vector<AuditEntry> alertEntries(const std::vector<Alert>& alerts, const std::string& tenant_id,
                                     const std::string& actor, const std::string& actor_role) {
  std::vector<AuditEntry> out;
  out.reserve(alerts.size());
  for (const Alert& a : alerts) {
    AuditEntry e;
    e.tenant_id = tenant_id;
    e.actor = actor;
    e.actor_role = actor_role;
    e.action = "budget.alert";
    e.target = "wallet:" + a.wallet_id;
    e.after = writeJson(Json{
        {"threshold", a.threshold}, {"spent", a.spent.toString()}, {"limit", a.limit.toString()}});
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace purser::ledger
