// Live diagnosis: the pieces that turn Purser's own state into a diagnose::Case — the series
// the observer keeps (model servers, GPUs and Purser's self-scrape), fleet events, audit entries
// and gateway events — and that make an answer fit for a caller who may not see everything.
//
// Everything here is a pure function over values (the store is read under its own lock), so the
// handler in diagnose_api.cc gathers, these assemble, and the engine answers; unit tests drive
// them with a filled SeriesStore and plain rows.
//
// Thread-safety: pure functions; CaseRedactor is a plain value of one request.
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
#include "workloads/fleet_service.h"

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
std::optional<diagnose::Event> fleetEvent(const workloads::EventRow& row);

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

// Hides from a caller what is another tenant's — by the case's structure, never by words of its
// text. Every name in a case has a known kind where it stands: an inventory field (a workload's
// namespace and name, a deployment's route and model server, a team and its tenant), a series'
// label by its key (`tenant`, `team`, `namespace`, `user`, `service_account`, `key`, `wallet`,
// `scope`, `workload`, `route`, `provider`, `deployment`, ...), an event's object and actor. A
// name of another tenant's object of that kind is replaced by a placeholder of its kind
// ("another tenant's team #1", numbered in the order they first appear in the case) before the
// engine reads it, so the answer, built from the case, never holds it; a series whose `tenant`
// label is another tenant's is theirs whole. What the caller may see is never renamed: a name
// allowed for a kind (its own team, a visible route) stays even where another tenant has an
// object of that name, and kinds outside tenancy (nodes, GPUs, shared queues) are never touched.
// An event of another tenant's object keeps its time, kind and reason; its message (free text)
// is not shown. A log line of another tenant's workload is dropped.
class CaseRedactor {
 public:
  enum class Kind {
    kTenant,
    kTeam,
    kNamespace,
    kUser,
    kServiceAccount,
    kKey,
    kWallet,  // a wallet's id
    kWorkload,
    kRoute,
    kProvider,
  };
  // A name the caller may see as `kind`; a foreign one equal to it is not hidden.
  void allow(Kind kind, const std::string& name);
  // A name of another tenant's object of `kind`.
  void hide(Kind kind, const std::string& name);
  // Takes back an allow() (an object first seen as visible that turned out another tenant's).
  void unallow(Kind kind, const std::string& name) { allowed_.erase({kind, name}); }
  bool empty() const { return foreign_.empty(); }

  // Renames what is foreign in `c`, in place.
  void apply(diagnose::Case& c);
  // The placeholder `name` has as `kind` (numbered at its first use), or nullopt when the caller
  // may see it.
  std::optional<std::string> rename(Kind kind, const std::string& name);

 private:
  bool foreign(Kind kind, const std::string& name) const;
  // The placeholder of `name` as `kind`, whether or not the caller may see a name like it.
  std::string placeholder(Kind kind, const std::string& name);
  // "team:ml" (a wallet's scope): its name renamed as its kind says.
  std::optional<std::string> renameScope(const std::string& scope, bool force);
  void renameLabels(diagnose::Labels& labels);

  std::set<std::pair<Kind, std::string>> foreign_;
  std::set<std::pair<Kind, std::string>> allowed_;
  std::map<std::pair<Kind, std::string>, std::string> given_;  // placeholders given so far
  std::map<Kind, int> next_;
};

}  // namespace purser::api
