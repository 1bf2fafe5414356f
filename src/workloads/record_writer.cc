// RecordWriter: see record_writer.h.
#include "workloads/record_writer.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <utility>

namespace purser::workloads {

WorkloadRow rowOf(Record& r) {
  ++r.version;
  return {r.spec.name, r.state, r.tenant_id, r.team_id, recordText(r), r.seq, r.version};
}

Result<void> writeRow(store::Tx& tx, const WorkloadRow& r, const std::string& at) {
  // A write retried after a failure must not undo a newer one that landed since.
  PURSER_TRY(
      tx.exec("INSERT INTO fleet_workloads (name, seq, version, state, tenant_id, team_id, record, "
              "updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO UPDATE "
              "SET seq = excluded.seq, version = excluded.version, state = excluded.state, "
              "tenant_id = excluded.tenant_id, team_id = excluded.team_id, record = "
              "excluded.record, updated_at = excluded.updated_at WHERE excluded.seq > "
              "fleet_workloads.seq OR (excluded.seq = fleet_workloads.seq AND excluded.version > "
              "fleet_workloads.version)",
              {r.name, r.seq, r.version, r.state, r.tenant_id, r.team_id, r.record, at}));
  return {};
}

std::optional<store::TxFn> RecordWriter::take(std::map<std::string, Record>& live) {
  if (dirty_.empty() && events_.empty() && metering_.empty() && ended_.empty()) {
    return std::nullopt;
  }
  std::vector<WorkloadRow> rows;
  const std::string at = formatRfc3339(clock_.now());
  for (const auto& name : dirty_) {
    auto it = live.find(name);
    if (it != live.end()) rows.push_back(rowOf(it->second));
  }
  for (auto& r : ended_) rows.push_back(rowOf(r));
  dirty_.clear();
  ended_.clear();
  return [rows = std::move(rows), events = std::exchange(events_, {}),
          metering = std::exchange(metering_, {}), at](store::Tx& tx) -> Result<void> {
    for (const auto& m : metering) PURSER_TRY(m(tx));
    for (const auto& r : rows) PURSER_TRY(writeRow(tx, r, at));
    for (const auto& e : events) {
      PURSER_TRY(tx.exec(
          "INSERT INTO fleet_events (at, kind, workload, cluster_queue, reason, message, "
          "by_workload, tenant_id, team_id, by_tenant_id) VALUES ($1, $2, $3, $4, $5, $6, $7, "
          "$8, $9, $10)",
          {e.at, e.kind, e.workload, e.cluster_queue, e.reason, e.message, e.by, e.tenant_id,
           e.team_id, e.by_tenant_id}));
    }
    return {};
  };
}

store::TxFn RecordWriter::fenced(store::TxFn fn) const {
  if (!fence_) return fn;
  return [fence = fence_, fn = std::move(fn)](store::Tx& tx) -> Result<void> {
    PURSER_TRY(fence(tx));
    return fn(tx);
  };
}

void RecordWriter::enqueue(store::TxFn fn, Done done) {
  // The retry keeps the write as it was made: enqueue() puts it behind the fence again.
  auto retry = std::make_shared<store::TxFn>(fn);
  store_.writeAsync(fenced(std::move(fn)), [this, done = std::move(done), retry](Result<void> r) {
    if (!r) {
      spdlog::error("fleet: a state change was not recorded (retrying): {}", r.error().message);
      std::lock_guard lock(mu_);
      retries_.push_back(std::move(*retry));
    }
    if (done) done(std::move(r));
  });
}

Result<void> RecordWriter::writeNow(store::TxFn fn) { return store_.write(fenced(std::move(fn))); }

void RecordWriter::retry() {
  std::vector<store::TxFn> retries;
  {
    std::lock_guard lock(mu_);
    retries.swap(retries_);
  }
  for (auto& fn : retries) enqueue(std::move(fn), nullptr);
}

size_t RecordWriter::failed() const {
  std::lock_guard lock(mu_);
  return retries_.size();
}

}  // namespace purser::workloads
