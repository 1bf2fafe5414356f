// The fleet service's entry points for the API, and its reads from the store.
#include "workloads/fleet_service.h"

#include "workloads/fleet_service_parts.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace purser::workloads {

namespace asio = boost::asio;
using fleet::Amount;
using fleet::Workload;

// --- What the API hands in ----------------------------------------------------------------------

Result<Record> FleetService::submit(Record r, Done done) {
  const std::string name = r.spec.name;
  just_ended_.clear();
  if (records_.count(name) != 0) {
    return fail(Error(ErrorCode::kAlreadyExists,
                      fmt::format("a workload named \"{}\" already exists", shown(name))));
  }
  ensureNamespace(r.spec.namespace_, r.tenant_id);
  // A served model joins only a route that says its tenant (or team) may serve it.
  // (A route that is not there yet is waited for: the replicas join once it is configured.)
  if (r.spec.serve && d_.served != nullptr) {
    auto may = d_.served->mayServe(r.spec.serve->route, {r.tenant_id, r.team_id});
    if (!may && may.error().code != ErrorCode::kNotFound) return fail(may.error());
  }
  // The engine checks the queue and the priority class; refused, nothing has changed.
  PURSER_TRY(engine_->submit(r.spec));
  r.seq = next_seq_++;
  records_[name] = std::move(r);
  writes_.changed(name);
  noteEvent("Submitted", name, "", "", "", "");
  auto write = schedule();
  if (write) {
    writes_.enqueue(std::move(*write), std::move(done));
  } else if (done) {
    done({});
  }
  if (const Record* live = find(name)) return *live;
  // It ended at once (its pods could not start).
  return just_ended_.at(name);
}

Result<Record> FleetService::remove(std::string name, const std::string& by, Done done) {
  auto it = records_.find(name);
  if (it == records_.end()) return fail(Error(ErrorCode::kNotFound, "no such workload"));
  Record& r = it->second;
  const int64_t now = nowMs();
  if (auto tx = meter(r, now)) writes_.metered(std::move(*tx));
  gpu_.forget(name);
  releaseGpu(r);
  pods_.stop(r, "Deleted", now);
  if (!r.external.empty()) {
    // Work found on an engine is deleted there too (or it would be found again).
    if (exec::Executor* e = executorNamed(pods_.executorFor(r))) {
      e->discard(r.external.substr(r.external.find(':') + 1));
    }
  }
  const std::string queue = r.admission ? r.admission->cluster_queue : "";
  (void)engine_->finish(name);
  r.state = "failed";
  r.reason = "Deleted";
  r.message = fmt::format("deleted by {}", by);
  r.finished_ms = now;
  noteEvent("Finished", name, queue, "Deleted", r.message, "");
  Record out = r;
  writes_.ended(std::move(r));
  records_.erase(it);
  writes_.forget(name);
  auto write = schedule();
  if (write) {
    writes_.enqueue(std::move(*write), std::move(done));
  } else if (done) {
    done({});
  }
  return out;
}

Result<void> FleetService::apply(fleet::ManifestSet set, const std::string& text,
                                 ledger::AuditEntry audit, Done done) {
  fleet::ManifestSet merged = base_;
  // A terminating queue applied again is configured again (as applied).
  std::set<std::string> again;
  for (const auto& q : set.cluster_queues) {
    if (terminating_.contains(q.name)) again.insert(q.name);
  }
  merge(merged, std::move(set));
  // Nothing changes unless the new objects hold every live workload where it is.
  Built fresh = PURSER_TRY_VALUE(rebuild(worldOf(merged)));
  base_ = std::move(merged);
  for (const std::string& cq : again) {
    terminating_.erase(cq);
    std::lock_guard lock(shared_mu_);
    std::erase_if(warnings_, [&](const std::string& w) {
      return w.starts_with("ClusterQueue " + cq + " is no longer in the manifests");
    });
  }
  engine_ = std::move(fresh.engine);
  placer_ = std::move(fresh.placer);
  for (const auto& [name, r] : records_) writes_.changed(name);
  auto changes = schedule();
  const std::string at = formatRfc3339(d_.clock.now());
  const ledger::AuditLog& log = d_.audit;
  writes_.enqueue(
      [changes = std::move(changes), text, at, audit = std::move(audit),
       &log](store::Tx& tx) -> Result<void> {
        PURSER_TRY(tx.exec(
            "INSERT INTO fleet_manifests (applied_at, actor, file, text) VALUES ($1, $2, $3, $4)",
            {at, audit.actor, std::string("fleet apply"), text}));
        PURSER_TRY(log.append(tx, audit));
        if (changes) PURSER_TRY((*changes)(tx));
        return {};
      },
      std::move(done));
  return {};
}

// --- Reads from the store
// -------------------------------------------------------------------------

namespace {

// The SQL condition restricting rows to `v`, and its parameters.
std::string visibilitySql(const Visibility& v, std::vector<store::Value>& params) {
  std::string sql;
  if (!v.tenant_id.empty()) {
    params.emplace_back(v.tenant_id);
    sql += fmt::format(" AND tenant_id = ${}", params.size());
  }
  if (!v.team_id.empty()) {
    params.emplace_back(v.team_id);
    sql += fmt::format(" AND team_id = ${}", params.size());
  }
  return sql;
}

}  // namespace

Result<std::vector<Record>> FleetService::endedRecords(const Visibility& v, size_t limit) const {
  std::vector<store::Value> params;
  const std::string sql =
      "SELECT record FROM fleet_workloads WHERE state IN ('finished', 'succeeded', 'failed')" +
      visibilitySql(v, params) + fmt::format(" ORDER BY seq DESC LIMIT {}", limit);
  store::Rows rows;
  PURSER_TRY(d_.store.read([&](store::Tx& tx) -> Result<void> {
    rows = PURSER_TRY_VALUE(tx.query(sql, params));
    return {};
  }));
  std::vector<Record> out;
  for (const auto& row : rows) {
    if (auto r = recordFrom(row.getText(0))) out.push_back(std::move(*r));
  }
  return out;
}

Result<std::optional<Record>> FleetService::storedRecord(const std::string& name) const {
  store::Rows rows;
  PURSER_TRY(d_.store.read([&](store::Tx& tx) -> Result<void> {
    rows = PURSER_TRY_VALUE(tx.query("SELECT record FROM fleet_workloads WHERE name = $1", {name}));
    return {};
  }));
  if (rows.empty()) return std::optional<Record>();
  return std::optional<Record>(PURSER_TRY_VALUE(recordFrom(rows[0].getText(0))));
}

Result<std::vector<EventRow>> FleetService::events(
    const Visibility& v, const std::optional<std::string>& workload) const {
  std::vector<store::Value> params;
  std::string sql =
      "SELECT at, kind, workload, cluster_queue, reason, message, by_workload, tenant_id, "
      "team_id, by_tenant_id FROM fleet_events WHERE 1 = 1" +
      visibilitySql(v, params);
  if (workload) {
    params.emplace_back(*workload);
    sql += fmt::format(" AND workload = ${}", params.size());
  }
  store::Rows rows;
  PURSER_TRY(d_.store.read([&](store::Tx& tx) -> Result<void> {
    rows = PURSER_TRY_VALUE(tx.query(sql + " ORDER BY id DESC LIMIT 1000", params));
    return {};
  }));
  std::vector<EventRow> out;
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    const auto& row = *it;
    out.push_back({row.getText(0), row.getText(1), row.getText(2), row.getText(3), row.getText(4),
                   row.getText(5), row.getText(6), row.getText(7), row.getText(8), row.getText(9)});
  }
  return out;
}

Result<std::vector<UtilisationRow>> FleetService::utilisationSince(
    int64_t from_ms, const Visibility& v, const std::vector<std::string>& also) const {
  std::vector<store::Value> params = {from_ms};
  // The rows `v` shows (its conditions joined by AND), or those of the workloads in `also`.
  std::string shown = "1 = 1" + visibilitySql(v, params);
  std::string named;
  for (const auto& name : also) {
    params.emplace_back(name);
    named += fmt::format("{}${}", named.empty() ? "" : ", ", params.size());
  }
  const std::string sql =
      "SELECT workload, tenant_id, team_id, SUM(gpu_ms), SUM(placed_gpu_ms), "
      "SUM(observed_gpu_ms), SUM(busy_gpu_ms), MAX(at_ms) FROM gpu_utilisation WHERE at_ms >= $1 "
      "AND ((" +
      shown + ")" + (named.empty() ? std::string() : " OR workload IN (" + named + ")") +
      ") GROUP BY workload, tenant_id, team_id ORDER BY workload";
  store::Rows rows;
  PURSER_TRY(d_.store.read([&](store::Tx& tx) -> Result<void> {
    rows = PURSER_TRY_VALUE(tx.query(sql, params));
    return {};
  }));
  std::vector<UtilisationRow> out;
  for (const auto& row : rows) {
    out.push_back({row.getText(0), row.getText(1), row.getText(2), row.getInt(3), row.getInt(4),
                   row.getInt(5), row.getInt(6), row.getInt(7)});
  }
  return out;
}

Result<std::string> FleetService::logTail(const PodRun& pod, size_t max_bytes) const {
  exec::Executor* executor = executorNamed(pod.executor);
  if (executor == nullptr) {
    return fail(Error(ErrorCode::kNotFound,
                      fmt::format("executor \"{}\" is not configured here", pod.executor)));
  }
  return executor->logTail(pod.handle, max_bytes);
}

exec::Executor* FleetService::executorNamed(const std::string& name) const {
  auto it = executors_.find(name.empty() ? "local" : name);
  return it == executors_.end() ? nullptr : it->second.get();
}

}  // namespace purser::workloads
