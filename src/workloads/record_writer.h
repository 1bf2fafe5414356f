// RecordWriter: the fleet service's writes to the store — a part of FleetService
// (fleet_service.h) that runs on its thread, testable without one.
//
//   - A pass notes what it changed: live records by name (changed), records that ended (ended),
//     events (event) and the writes of GPU time charged (metered). take() makes them one write —
//     charges, rows and events in one transaction, so a charge is never recorded without the
//     state it was charged for, nor the other way round.
//   - Every write goes behind the fence (replicas sharing the store: a write of a replica that no
//     longer leads fails), and writes are queued to the store's writer in the order they were made.
//   - A queued write that fails is kept and queued again by retry() (the service's tick, every
//     second); a newer write of the same workload wins over it (rows carry a version), and its
//     charges and events go with it.
//
// Thread-safety: the fleet service's thread calls everything; the store's writer thread hands
// failed writes back (retries_ is guarded by mu_).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "store/store.h"
#include "workloads/record.h"

namespace purser::workloads {

// A fleet event as stored (fleet_events) and read back.
struct EventRow {
  std::string at, kind, workload, cluster_queue, reason, message, by, tenant_id, team_id,
      by_tenant_id;
};

// A workload's row as one write records it.
struct WorkloadRow {
  std::string name, state, tenant_id, team_id, record;
  int64_t seq, version;
};

// `r`'s row; bumps its version, so that a write retried later never undoes this one.
WorkloadRow rowOf(Record& r);
// Writes `row` unless the store has a newer version of it.
Result<void> writeRow(store::Tx& tx, const WorkloadRow& row, const std::string& at);

// Learns whether a write is durable.
using Done = std::function<void(Result<void>)>;
// Fails a write of a replica that no longer leads the fleet (none: one replica).
using Fence = std::function<Result<void>(store::Tx&)>;

class RecordWriter {
 public:
  RecordWriter(store::Store& store, const Clock& clock, Fence fence)
      : store_(store), clock_(clock), fence_(std::move(fence)) {}

  void changed(const std::string& name) { dirty_.insert(name); }
  // `name` is no longer live (it ended, noted with ended()): its row is not written as changed.
  void forget(const std::string& name) { dirty_.erase(name); }
  void ended(Record r) { ended_.push_back(std::move(r)); }
  void event(EventRow e) { events_.push_back(std::move(e)); }
  void metered(store::TxFn charge) { metering_.push_back(std::move(charge)); }

  // The write of everything noted since the last take(), the changed records read from `live`
  // (nullopt: nothing was noted).
  std::optional<store::TxFn> take(std::map<std::string, Record>& live);

  // `fn` behind the fence.
  store::TxFn fenced(store::TxFn fn) const;
  // Queues `fn` (fenced) to the store's writer; `done`, when given, learns when it is durable. A
  // failed write is kept for retry().
  void enqueue(store::TxFn fn, Done done);
  // Writes `fn` (fenced) now, waiting for it: the start, and a run recorded before its pods start.
  Result<void> writeNow(store::TxFn fn);
  // Queues again every write that failed since the last retry().
  void retry();
  // Failed writes waiting for retry().
  size_t failed() const;

 private:
  store::Store& store_;
  const Clock& clock_;
  const Fence fence_;
  std::set<std::string> dirty_;        // live records to write
  std::vector<Record> ended_;          // ended records to write
  std::vector<EventRow> events_;       // events to write
  std::vector<store::TxFn> metering_;  // charges to write
  mutable std::mutex mu_;
  std::vector<store::TxFn> retries_;  // guarded by mu_
};

}  // namespace purser::workloads
