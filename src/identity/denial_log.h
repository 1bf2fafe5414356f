// DenialLog: every policy denial is audited, but no principal can flood the audit log with them.
// Each principal's first `per_window` denials in a window (a minute by default) are written one by
// one; the rest are counted, and once the window is over one summary entry says how many were
// left out, of which actions. A principal's window closes at its next denial after the window, or
// when closed() is asked (the server does so every second), whichever comes first.
//
// Memory is bounded: past `max_principals` the principals with the oldest windows are closed
// early (their summaries written), so an attacker with many keys cannot grow it without end.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "identity/identity.h"
#include "ledger/audit.h"

namespace purser::identity {

class DenialLog {
 public:
  struct Options {
    size_t per_window = 10;
    Duration window = std::chrono::minutes(1);
    size_t max_principals = 10'000;
  };
  DenialLog(const Clock& clock, Options options);
  explicit DenialLog(const Clock& clock) : DenialLog(clock, Options{}) {}

  struct Decision {
    bool write = false;                         // audit this denial on its own
    std::vector<ledger::AuditEntry> summaries;  // windows that closed, to audit as well
  };
  Decision note(const Principal& who, std::string_view action);
  // What a denial of `who` writes to the audit log (entry `action` on `target`, with `detail`):
  // the denial itself while the principal is within its share (note()), and the summaries of
  // windows that closed.
  std::vector<ledger::AuditEntry> entries(const Principal& who, std::string action,
                                          std::string target, std::string detail);

  // The summaries of every window that is over by now.
  std::vector<ledger::AuditEntry> closed();

 private:
  struct Window {
    Principal who;
    SystemTime start;
    size_t seen = 0;
    std::map<std::string, int64_t> left_out;  // by action
  };
  // The summary of `w` when it left anything out.
  void close(const Window& w, SystemTime end, std::vector<ledger::AuditEntry>& out) const;

  const Clock& clock_;
  const Options options_;
  std::mutex mu_;
  std::unordered_map<std::string, Window> windows_;  // by key id (or principal id); mu_
};

// The audit entry of `who` doing `action` on `target` of `tenant_id` (before and after as JSON
// text, either may be empty).
ledger::AuditEntry auditEntry(const Principal& who, std::string action, std::string target,
                              std::string before, std::string after, std::string tenant_id);

}  // namespace purser::identity
