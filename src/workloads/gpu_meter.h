// GpuMeter: the fleet service's GPU time in money — a part of FleetService (fleet_service.h) that
// runs on its thread, testable without one.
//
//   - Holds: before a GPU workload runs, and again at every metering, its next stretch of GPU time
//     (two metering intervals and some slack: lookahead()) is held on its payer's wallet chain for
//     the model "gpu-hours" (wallets without a model count it too); a hard wallet that cannot
//     hold it stops the workload (budgetHold() says why, in words a member reads).
//   - Metering: the GPU-seconds used since the last metering are charged to the chain at the
//     flavor's price per GPU-hour, as a usage event. Holds and charges both go through the
//     ledger's Budget (budget.h), the one door to the wallets that model requests use too; the
//     write it returns records the event and the stretch's utilisation, and audits the budget
//     alerts the charge raised (takeAlerts() hands them to whoever posts them).
//   - Utilisation: the GPUs a charged workload holds are read (the DCGM exporters) about every
//     second; what they did is recorded beside each charge and kept for the idle test.
//
// Not thread-safe except takeAlerts(): the fleet service's thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/id.h"
#include "common/money.h"
#include "fleet/utilisation.h"
#include "identity/directory.h"
#include "ledger/budget.h"
#include "ledger/price.h"
#include "store/store.h"
#include "workloads/record.h"

namespace purser::workloads {

// What the fleet's GPU time is metered as in the ledger (wallets scoped to it count only it).
inline constexpr const char* kGpuModel = "gpu-hours";
// The resource GPUs are asked for by.
inline constexpr const char* kGpu = "nvidia.com/gpu";

inline bool requestsGpu(const fleet::Workload& w) {
  for (const auto& ps : w.pod_sets) {
    auto it = ps.requests.find(kGpu);
    if (it != ps.requests.end() && it->second > 0) return true;
  }
  return false;
}

// What a live workload's GPUs did lately, in milli-GPU-milliseconds.
struct LiveUtilisation {
  fleet::GpuTime unmetered;  // since its last metering (not recorded yet)
  fleet::GpuTime recent;     // over the idle window (fleet::kIdleWindowMs)
  bool idle = false;         // fleet::isIdle(recent)
};

// Writes the audit entries of budget alerts a charge raised, inside the charge's transaction.
using AuditAlerts =
    std::function<Result<void>(store::Tx&, const std::vector<ledger::Alert>&, const std::string&)>;

class GpuMeter {
 public:
  struct Deps {
    const Clock& clock;
    IdGenerator& ids;
    const identity::Directory& directory;
    ledger::Budget& budget;
    const ledger::PriceBook& prices;
    AuditAlerts audit_alerts;                                // none: alerts are not audited
    const fleet::GpuUtilisation* gpu_utilisation = nullptr;  // none: nothing is observed
  };
  GpuMeter(Deps deps, Duration metering_interval);

  // How far ahead GPU time is held: two metering intervals and two seconds of slack, so the hold
  // taken at one metering covers everything up to the next.
  std::chrono::milliseconds lookahead() const;
  // What `r`'s GPUs cost over the lookahead: at its admitted flavors' prices while it holds
  // quota; while it waits, at the dearest priced of `offered` (the flavors its ClusterQueue
  // offers GPUs in). Zero when nothing is priced.
  Money lookaheadCost(const Record& r, const std::vector<std::string>& offered) const;
  // Why a GPU workload of `r`'s payer may not start (or go on): a hard wallet of its chain that
  // cannot hold `need`. Empty when it may.
  std::string budgetHold(const Record& r, Money need) const;
  // Holds `need` for `r` on its chain (replacing its hold); false when a hard wallet cannot. A
  // hold the ledger fails to take for another reason is logged and not counted against the
  // workload: metering still charges what runs.
  bool hold(const Record& r, Money need);
  void release(const Record& r) { holds_.erase(r.spec.name); }
  // The id of the hold `name` has (in memory; a restart takes a new one at the first metering),
  // empty when it has none.
  std::string holdOf(const std::string& name) const;

  // Charges `r`'s GPU time from r.metered_until_ms up to `now_ms` and moves it on; the returned
  // write records the charge (nullopt: nothing to write). Its hold is released first (the caller
  // holds the next stretch). `awaiting_pods`: admitted, its pods not yet running here — GPU time
  // is charged from the moment they run, so the stretch until now is skipped.
  std::optional<store::TxFn> meter(Record& r, int64_t now_ms, bool awaiting_pods);

  // Readings for one pass, each GPU read once (null without a source).
  fleet::PercentOf percentNow() const;
  // The latest reading of a GPU of the inventory, when one is known and believed.
  std::optional<fleet::GpuReading> reading(const std::string& node, int gpu_index) const;
  // Accumulates `r`'s GPU time from its last sample (or metering) up to `until_ms`.
  void sample(const Record& r, int64_t until_ms, const fleet::PercentOf& percent);
  // Forgets what was sampled of `name` (its pods stopped; it is no longer charged).
  void forget(const std::string& name) { sampling_.erase(name); }
  // Forgets every workload `charged` no longer says is charged, then samples the others up to
  // `now_ms`.
  void sampleAll(const std::map<std::string, Record>& records,
                 const std::function<bool(const Record&)>& charged, int64_t now_ms);
  // What `name`'s GPUs did lately (zeros when nothing was sampled).
  LiveUtilisation utilisation(const std::string& name, int64_t now_ms) const;

  // Budget alerts raised since the last call, by tenant. From any thread.
  std::vector<std::pair<std::string, std::vector<ledger::Alert>>> takeAlerts();

  // Who pays for `r`: its owner, team and tenant, and the keys above the key it came with.
  ledger::Charged payerOf(const Record& r) const;

 private:
  struct Sampling {
    int64_t sampled_ms = 0;    // accumulated up to here
    fleet::GpuTime unmetered;  // since the last metering
    fleet::RecentUtilisation recent;
  };

  const Deps d_;
  const Duration metering_interval_;
  int64_t hold_seq_ = 0;                       // holds taken
  std::map<std::string, ledger::Hold> holds_;  // by workload: its next stretch's
  std::map<std::string, Sampling> sampling_;   // by workload, while charged
  std::mutex alerts_mu_;
  std::vector<std::pair<std::string, std::vector<ledger::Alert>>> alerts_;  // alerts_mu_
};

}  // namespace purser::workloads
