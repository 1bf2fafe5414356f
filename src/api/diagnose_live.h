// Live diagnosis: the pieces that turn Purser's own state into a diagnose::Case — the series
// the observer keeps (model servers, GPUs and Purser's self-scrape), fleet events, audit entries
// and gateway events — and that make an answer fit for a caller who may not see everything.
//
// Everything here is a pure function over values (the store is read under its own lock), so the
// handler in diagnose_api.cc gathers, these assemble, and the engine answers; unit tests drive
// them with a filled SeriesStore and plain rows.
//
// Thread-safety: pure functions; Redactor is a plain value, const after it is built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/json.h"
#include "diagnose/case.h"
#include "gateway/gateway.h"
#include "identity/directory.h"
#include "ledger/audit.h"
#include "ledger/scope.h"
#include "observe/series.h"
#include "scheduler/fleet_service.h"

namespace purser::api {

struct WindowLimits {
  size_t max_points = 600;         // per series: the grid's step grows to keep within it
  size_t max_series = 20000;       // series taken, in name order
  size_t max_samples = 4'000'000;  // over all series
};

// Every series of `store` with a sample in [from_ms, to_ms]. The samples are put on one grid
// shared by all series — from the oldest sample in the window to `to_ms`, at the store's raw
// interval or wider so that no series has more than max_points — each grid point taking the
// newest sample at or before it within one step (beyond the raw tier, a counter's bucket's last
// value and a gauge's average). One grid keeps series scraped at different moments comparable,
// which is what the engine's sums and ratios need. NaN samples (staleness markers) are skipped.
std::vector<diagnose::Series> seriesInWindow(const observe::SeriesStore& store, int64_t from_ms,
                                             int64_t to_ms, const WindowLimits& limits = {});

// A fleet event as the engine reads it (Kueue's reasons): Admitted, Preempted, Evicted, Pending
// (a workload waiting, "Waiting" in the fleet's rows), Finished with reason Failed or Succeeded.
// nullopt when its time cannot be read.
std::optional<diagnose::Event> fleetEvent(const scheduler::EventRow& row);

// An audit entry the engine can use, or nullopt: route.* and deployment.* changes (object: the
// route or deployment, message: the change), provider.* and fleet.apply, and budget.alert as
// "wallet.alert" (object: the wallet's scope, from `wallet_scope`; message: "... at 100% of its
// limit (hard)"). `actor_name` turns an actor id into a name.
std::optional<diagnose::Event> auditEvent(
    const ledger::AuditEntry& e,
    const std::function<std::optional<std::pair<std::string, bool>>(const std::string&)>&
        wallet_scope,
    const std::function<std::string(const std::string&)>& actor_name);

diagnose::Event gatewayEvent(const gateway::GatewayEvent& e);

// A wallet's scope as Purser's metrics and answers name it: "team:ml", "user:dana",
// "service_account:ci", "key:KEY-NAME", "tenant:acme" (the id when the owner is gone).
std::string walletScopeName(const identity::Directory& directory, const ledger::Scope& scope);

// Hides what a caller may not see: every occurrence (as a whole word: letters, digits, '_', '-'
// and '@' make a word) of a name in `foreign` is replaced with its placeholder, longest names
// first, in every string of the answer (object keys are label names and stay). A name the caller
// may see (allow()) is never hidden, even when something of another tenant has it too.
class Redactor {
 public:
  // A name the caller may see; a foreign name equal to it is not hidden.
  void allow(const std::string& name);
  // A name of something in another tenant, and what to say instead.
  void hide(const std::string& name, const std::string& placeholder);
  bool empty() const { return foreign_.empty(); }

  std::string apply(std::string text) const;
  void apply(Json& value) const;

 private:
  using Order = std::vector<std::pair<std::string, std::string>>;
  Order order() const;  // the names to hide, longest first
  static std::string replace(std::string text, const Order& order);
  static void walk(Json& value, const Order& order);

  std::map<std::string, std::string> foreign_;
  std::set<std::string> allowed_;
};

}  // namespace purser::api
