#include "identity/denial_log.h"

#include <algorithm>

#include "common/json.h"

namespace purser::identity {

DenialLog::DenialLog(const Clock& clock, Options options) : clock_(clock), options_(options) {}

void DenialLog::close(const Window& w, SystemTime end, std::vector<ledger::AuditEntry>& out) const {
  int64_t total = 0;
  Json actions = Json::object();
  for (const auto& [action, n] : w.left_out) {
    actions[action] = n;
    total += n;
  }
  if (total == 0) return;
  ledger::AuditEntry e;
  e.tenant_id = w.who.tenant_id;
  e.actor = w.who.id;
  e.actor_role = std::string(roleName(w.who.role));
  e.action = "policy.deny.summary";
  e.target = w.who.key_id.empty() ? "principal:" + w.who.id : "key:" + w.who.key_id;
  e.after = writeJson(Json{{"left_out", total},
                           {"actions", actions},
                           {"from", formatRfc3339(w.start)},
                           {"to", formatRfc3339(end)}});
  out.push_back(std::move(e));
}

DenialLog::Decision DenialLog::note(const Principal& who, std::string_view action) {
  const SystemTime now = clock_.now();
  const std::string id = who.key_id.empty() ? who.id : who.key_id;
  Decision d;
  std::lock_guard lock(mu_);
  auto it = windows_.find(id);
  if (it != windows_.end() && now >= it->second.start + options_.window) {
    close(it->second, now, d.summaries);
    windows_.erase(it);
    it = windows_.end();
  }
  if (it == windows_.end()) {
    if (windows_.size() >= options_.max_principals) {
      // Close the oldest tenth early, so this stays cheap under a flood of new principals.
      std::vector<std::pair<SystemTime, std::string>> oldest;
      for (const auto& [key, w] : windows_) oldest.emplace_back(w.start, key);
      const size_t drop = std::max<size_t>(1, oldest.size() / 10);
      std::partial_sort(oldest.begin(), oldest.begin() + static_cast<std::ptrdiff_t>(drop),
                        oldest.end());
      for (size_t i = 0; i < drop; ++i) {
        auto old = windows_.find(oldest[i].second);
        close(old->second, now, d.summaries);
        windows_.erase(old);
      }
    }
    it = windows_.emplace(id, Window{who, now, 0, {}}).first;
  }
  Window& w = it->second;
  if (++w.seen <= options_.per_window) {
    d.write = true;
  } else {
    ++w.left_out[std::string(action)];
  }
  return d;
}

std::vector<ledger::AuditEntry> DenialLog::entries(const Principal& who, std::string action,
                                                   std::string target, std::string detail) {
  Decision d = note(who, action);
  if (d.write) {
    d.summaries.push_back(auditEntry(who, std::move(action), std::move(target), "",
                                     std::move(detail), who.tenant_id));
  }
  return std::move(d.summaries);
}

std::vector<ledger::AuditEntry> DenialLog::closed() {
  const SystemTime now = clock_.now();
  std::vector<ledger::AuditEntry> out;
  std::lock_guard lock(mu_);
  for (auto it = windows_.begin(); it != windows_.end();) {
    if (now >= it->second.start + options_.window) {
      close(it->second, now, out);
      it = windows_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

ledger::AuditEntry auditEntry(const Principal& who, std::string action, std::string target,
                              std::string before, std::string after, std::string tenant_id) {
  ledger::AuditEntry e;
  e.tenant_id = std::move(tenant_id);
  e.actor = who.id;
  e.actor_role = std::string(roleName(who.role));
  e.action = std::move(action);
  e.target = std::move(target);
  e.before = std::move(before);
  e.after = std::move(after);
  return e;
}

}  // namespace purser::identity
