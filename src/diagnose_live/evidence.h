// Evidence for live diagnosis: Purser's own state as the engine reads it — the series the
// observer keeps (model servers, GPUs and Purser's self-scrape) on one grid, fleet events, audit
// entries and gateway events as diagnose::Events. The Investigator (investigator.h) gathers the
// state and assembles the case from these; unit tests drive them with a filled SeriesStore and
// plain rows.
//
// Thread-safety: pure functions over values (the series store is read under its own lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "diagnose/case.h"
#include "gateway/gateway.h"
#include "ledger/audit.h"
#include "observe/series.h"
#include "workloads/record_writer.h"

namespace purser::diagnose_live {

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

}  // namespace purser::diagnose_live
