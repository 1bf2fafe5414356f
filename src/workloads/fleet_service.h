// The fleet service: the workloads' life from submission to the end. It owns the admission
// engine and the placer, the workload records and their persistence, the GPU time metered into
// the owners' wallets and the holds taken on them ahead of use, and the executors that run what
// was admitted.
//
// Threading: the service runs on a thread of its own. Everything that reads or changes its state
// runs there, one thing at a time: the API's handlers hand it work with call() and await the
// answer; the service's own timer polls the pods, meters GPU time and re-checks budget holds.
// Store writes go to the store's writer thread in the order they were made; a handler that must
// answer only once its change is durable passes a `Done` that learns when it is.
//
// Life of a workload: see workloads/record.h. Every change of state is an event with a reason
// (fleet_events). GPU time is charged from the moment its pods run to the moment they end, as the
// executor reports them (a workload that runs nothing is charged while it holds its quota).
//
// GPU utilisation: while a workload is charged for GPUs, its placement's GPUs are read every
// second through Deps::gpu_utilisation (fleet/utilisation.h) and their placed, observed and busy
// GPU time accumulated; each metering writes that beside its charge (gpu_utilisation, keyed by
// the usage event's id, in the same transaction). The last ten minutes are kept in memory for
// the "allocated but idle" flag; what was accumulated since the last metering is lost with a
// restart (the charge is not: the next metering charges the whole stretch, with what it observed).
#pragma once

#include <utility>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/clock.h"
#include "common/id.h"
#include "common/result.h"
#include "exec/executor.h"
#include "fleet/engine.h"
#include "fleet/inventory.h"
#include "fleet/utilisation.h"
#include "fleet_io/manifest.h"
#include "http/async.h"
#include "identity/directory.h"
#include "ledger/audit.h"
#include "ledger/budget.h"
#include "ledger/price.h"
#include "store/store.h"
#include "workloads/gpu_meter.h"
#include "workloads/inventory_feed.h"
#include "workloads/pod_runner.h"
#include "workloads/record.h"
#include "workloads/record_writer.h"
#include "workloads/served_routes.h"
#include "workloads/tenancy.h"

namespace purser::workloads {

// What the service uses of the rest of Purser.
struct Deps {
  const Clock& clock;
  IdGenerator& ids;
  store::Store& store;
  identity::Directory& directory;
  // The one door to the wallets: GPU time is held ahead and charged through it.
  ledger::Budget& budget;
  const ledger::PriceBook& prices;
  ledger::AuditLog& audit;
  // Writes the audit entries of budget alerts that charging GPU time raised, inside `tx`.
  AuditAlerts audit_alerts;
  // Where served models' replicas join (none: workloads that serve run, and join nothing).
  ServedRoutes* served = nullptr;
  // How busy the fleet's GPUs are (none: nothing is observed; GPU time is still charged).
  const fleet::GpuUtilisation* gpu_utilisation = nullptr;
};

struct Options {
  fleet::CycleMode mode = fleet::CycleMode::kDrain;
  Duration metering_interval = std::chrono::seconds(60);
  // (file name, text) of the manifests named in the configuration, in order.
  std::vector<std::pair<std::string, std::string>> manifests;
  // The hardware workloads are placed on; empty: admission by quota alone.
  std::vector<fleet::InventoryNode> inventory;
  // Executors whose engines' nodes join the inventory (Kubernetes' Nodes, Slurm's nodes), read at
  // the start and again every `inventory_refresh`. A node named like one before it is left out;
  // a node that is no longer reported while admitted work is placed on it stays, tainted
  // node.kubernetes.io/unreachable:NoSchedule, until that work is gone.
  std::vector<std::string> inventory_from;
  Duration inventory_refresh = std::chrono::seconds(30);
  fleet::placement::Policy policy = fleet::placement::Policy::kDefault;
  uint64_t seed = 1;
  // How long a stopped pod has between the polite signal and the forceful one (Kubernetes'
  // terminationGracePeriodSeconds).
  Duration termination_grace = std::chrono::seconds(30);
  // How often pods are polled (their ends are also noticed when their output ends).
  Duration poll_interval = std::chrono::milliseconds(200);
  // The end of a failed pod's output kept with its workload.
  size_t log_tail_bytes = 4096;
  // ResourceFlavor → the executor its workloads run on (those not listed: "local").
  std::map<std::string, std::string> flavor_executors;
  // Executor → the pods it runs at once, admitted against as quota (executor_slots.h); those
  // not listed are not counted.
  std::map<std::string, int64_t> executor_slots;
  // Replicas sharing the store, one leading the fleet: run inside every write of the fleet, an
  // error once this one no longer leads (so a replica that lost the lead changes nothing). With
  // it, a run is written before its pods are asked to start, under keys that make a second
  // start of them (by the next leader) take them back. Empty: one replica, no fence.
  Fence fence;
  // This installation's id (its database's): keyed starts carry it, so that the files of pods
  // another database started are never taken for this one's.
  std::string installation;
  // The accounts (uid = gid) local pods run as: one per team, from account_uid_base up, made the
  // first time a team's pod starts and kept in fleet_accounts.
  int64_t account_uid_base = 200000;
  int64_t account_uid_count = 65536;
  // What a submitted workload may ask for (pod sets, pods per set, the least CPU per pod).
  fleet::WorkloadBounds bounds;
};

// The fleet's schema, which open() applies (and `purser migrate` applies in PostgreSQL).
const std::vector<store::Migration>& fleetMigrations();

// The executors by name: "local", "slurm", ...
using Executors = std::map<std::string, std::unique_ptr<exec::Executor>>;

// Which stored rows a reader may see: all, one tenant's, or one team's.
struct Visibility {
  std::string tenant_id;  // empty: every tenant
  std::string team_id;    // empty: every team of the tenant
};

// GPU utilisation recorded with one workload's charges (gpu_utilisation rows, summed), in
// GPU-milliseconds.
struct UtilisationRow {
  std::string workload, tenant_id, team_id;
  int64_t gpu_ms = 0;           // charged (the usage events' GPU time)
  int64_t placed_gpu_ms = 0;    // held on the placement's GPUs
  int64_t observed_gpu_ms = 0;  // of that, while the GPU had a reading
  int64_t busy_gpu_ms = 0;      // of that, weighted by the readings
  int64_t last_ms = 0;          // the end of the newest stretch
};

// A ClusterQueue's figures, as last scheduled (for /metrics, read from any thread).
using QueueSnapshot = std::vector<fleet::QueueStatus>;

class FleetService {
 public:
  // Applies the fleet's migrations, reads the configured and the applied manifests and the live
  // workloads from the store, adopts the pods that still run, schedules, and starts the service's
  // thread. `executors` run the pods ("local" for flavors not given another in the options). An
  // invalid manifest is an error naming it.
  static Result<std::unique_ptr<FleetService>> open(Deps deps, Options options,
                                                    Executors executors);
  // Stops the thread (what it was doing finishes; nothing is scheduled after). Pods keep
  // running: the next start adopts them. Idempotent; from any thread but the service's.
  void stop();
  // Stops the thread, then the executors.
  ~FleetService();
  FleetService(const FleetService&) = delete;
  FleetService& operator=(const FleetService&) = delete;

  // Runs fn(*this) on the service's thread and resumes the caller, on its own executor, with
  // what fn returned (or the exception it threw). The result must be default-constructible.
  template <typename F>
  auto call(F fn) {
    return http::runOn(context_.get_executor(),
                       [this, fn = std::move(fn)]() mutable { return fn(*this); });
  }

  // --- On the service's thread only (inside call()) ------------------------------------------

  // Queues a submitted workload (spec.name and namespace_ already Purser's own), schedules, and
  // writes it; kAlreadyExists for a name in use, kInvalidArgument when the engine refuses it (no
  // such queue, no such priority class).
  // Returns the record as it is after scheduling (ended already when its pods could not start).
  Result<Record> submit(Record r, Done done);
  // Ends a live workload: its pods are stopped, its quota released, its GPU time charged; it
  // ends failed with reason Deleted (unless it had ended). Returns its final record. `name` is
  // taken by value: a caller may pass the key of the record it removes.
  Result<Record> remove(std::string name, const std::string& by, Done done);
  // Replaces or adds Kueue objects (merged into what is there) and records them with `audit`;
  // kFailedPrecondition when a live workload would lose its place.
  Result<void> apply(fleet::ManifestSet set, const std::string& text, ledger::AuditEntry audit,
                     Done done);

  const std::map<std::string, Record>& records() const { return records_; }
  const Record* find(const std::string& name) const;
  fleet::Engine& engine() { return *engine_; }
  const fleet::Engine& engine() const { return *engine_; }
  const fleet::Placer* placer() const { return placer_.get(); }
  const fleet::ManifestSet& manifests() const { return base_; }
  // ClusterQueues no longer configured, kept (stopped) until their workloads end.
  const std::set<std::string>& terminating() const { return terminating_; }
  // Whether `r`'s priority is within its tenant's grant (identity::PriorityGrant): its
  // WorkloadPriorityClass one the grant names (when it names any), its priority at most the
  // grant's. kPermissionDenied saying what the grant allows. Platform admins' submissions are
  // not asked.
  Result<void> checkPriorityGrant(const Record& r) const;
  const Options& options() const { return options_; }
  // What an executor sets for pod `index` of pod set `pod_set` beyond the template's env
  // (podEnvironment(), pod_runner.h) on the placer of now.
  std::map<std::string, std::string> admissionEnv(const Record& r, const std::string& pod_set,
                                                  int64_t index) const;

  // Namespaces are per tenant (tenancy.h, its part Tenancy): the tenant a namespace is, and the
  // namespace of a tenant's team inside Purser.
  std::string owningTenant(const std::string& name) const;
  std::string namespaceOf(const std::string& tenant_id, const std::string& name) const;
  // What a tenant sees of a namespace, of "namespace/name" or of a message naming them.
  static std::string shown(std::string text);
  // Makes sure the engine knows namespace `ns` of `tenant_id` (a team created since the start).
  void ensureNamespace(const std::string& ns, const std::string& tenant_id);

  // The latest reading of a GPU of the inventory, when one is known and believed.
  std::optional<fleet::GpuReading> gpuReading(const std::string& node, int gpu_index) const;
  // Reads the GPUs of every workload charged for GPU time and accumulates their utilisation up to
  // now (the service's timer does it every second).
  void sampleUtilisation();
  // A live workload's utilisation while it is charged for GPU time; nullopt otherwise.
  std::optional<LiveUtilisation> utilisationOf(const std::string& name) const;

  // --- From any thread ------------------------------------------------------------------------

  // Something changed on an executor (a pod ended): the pods are polled now, not at the next
  // poll interval.
  void nudge();

  // Ended workloads from the store, newest first (at most `limit`).
  Result<std::vector<Record>> endedRecords(const Visibility& v, size_t limit) const;
  // One workload's stored record (ended ones live only there).
  Result<std::optional<Record>> storedRecord(const std::string& name) const;
  // The newest events (at most 1000), oldest first; of one workload when `workload` is given.
  Result<std::vector<EventRow>> events(const Visibility& v,
                                       const std::optional<std::string>& workload) const;
  // The end of what `pod` wrote (stdout and stderr together).
  Result<std::string> logTail(const PodRun& pod, size_t max_bytes) const;
  // Budget alerts raised since the last call, by tenant, for the caller to post.
  std::vector<std::pair<std::string, std::vector<ledger::Alert>>> takeAlerts();
  QueueSnapshot queueSnapshot() const;
  // What the configuration or the store left to say (a copy: the fleet thread changes it).
  std::vector<std::string> warnings() const;
  // Utilisation recorded with the charges of stretches that ended at or after `from_ms`, summed
  // per workload: the workloads `v` shows, and those named in `also`.
  Result<std::vector<UtilisationRow>> utilisationSince(int64_t from_ms, const Visibility& v,
                                                       const std::vector<std::string>& also) const;

 private:
  struct Built {
    std::unique_ptr<fleet::Engine> engine;
    std::shared_ptr<fleet::Placer> placer;  // none without an inventory
  };
  FleetService(Deps deps, Options options, Executors executors);
  exec::Executor* executorNamed(const std::string& name) const;
  Result<void> load();
  void startThread();

  fleet::World worldOf(const fleet::ManifestSet& set) const;
  Result<Built> rebuild(fleet::World world);
  // The inventory as the feed reads it now (inventory_feed.h), kept nodes included.
  std::vector<fleet::InventoryNode> readInventory();
  void refreshInventory();

  int64_t nowMs() const;
  // GPU time (gpu_time.cc, over gpu_): what `r`'s next stretch costs (while it waits, at the
  // dearest flavor its ClusterQueue offers GPUs in), why its budget holds it, its hold, its
  // metering up to `until_ms`, and whether it is charged for its GPUs now.
  Money costAhead(const Record& r) const;
  std::string budgetHold(const Record& r) const;
  bool holdGpu(Record& r);
  void releaseGpu(Record& r) { gpu_.release(r); }
  void stopForBudget(const std::string& name);
  std::optional<store::TxFn> meter(Record& r, int64_t until_ms);
  bool charging(const Record& r) const;
  void noteEvent(std::string kind, const std::string& workload, std::string cluster_queue,
                 std::string reason, std::string message, std::string by);

  std::optional<store::TxFn> schedule();
  void processEvents(int64_t now, std::vector<std::string>& stops);
  void publishQueues();

  // Runs (pods.cc; their pods are its part PodRunner's, pod_runner.h).
  void startPods(Record& r, int64_t now);
  // The account (uid) the pods of `team_id` run as on this machine, made when it has none.
  Result<int64_t> accountOf(const std::string& team_id);
  void pollPods();
  void endRun(Record& r, bool failed, const std::string& reason, const std::string& message);
  void overtime(int64_t now);
  void takeFound();
  void found(const std::string& executor, const exec::Found& f);

  void tick();
  void arm();
  // ClusterQueues the configured manifests no longer name while live workloads are in them:
  // kept from `before` (what the files said earlier, and what was applied), stopped, and
  // warned about (Kueue's finalizer: a deleted queue goes once its workloads have).
  void keepTerminating(const fleet::ManifestSet& before);
  // Removes the terminating queues no live workload is in any more.
  void endTerminated();

  const Deps d_;
  Options options_;
  Executors executors_;
  std::vector<std::string> warnings_;  // guarded by shared_mu_ (written on the fleet thread)
  InventoryFeed inventory_;  // the nodes: configured, then the executors' (inventory_feed.h)
  std::set<std::string> found_warned_;  // found work that could not be queued, logged once

  fleet::ManifestSet base_;            // configured, then applied objects
  std::set<std::string> terminating_;  // ClusterQueues kept only for their workloads
  std::unique_ptr<fleet::Engine> engine_;
  std::shared_ptr<fleet::Placer> placer_;  // engine_'s inventory; none without one
  std::map<std::string, Record> records_;  // live workloads by name
  int64_t next_seq_ = 1;
  std::map<std::string, int64_t> accounts_;  // team id -> the uid its local pods run as
  uint64_t directory_generation_ = 0;        // the directory's, when it was last looked at
  int64_t last_tick_ms_ = 0;
  std::atomic<bool> closing_{false};
  std::atomic<bool> nudged_{false};           // a nudge is on its way
  std::map<std::string, Record> just_ended_;  // what ended since the last submit()
  RecordWriter writes_;  // records, events and charges to the store, fenced (record_writer.h)
  GpuMeter gpu_;         // GPU time: holds, metering, utilisation (gpu_meter.h)
  Tenancy tenancy_;      // whose namespace is whose (tenancy.h), over the directory and base_
  PodRunner pods_;       // the pods on their executors (pod_runner.h)

  mutable std::mutex shared_mu_;  // what other threads read
  QueueSnapshot queues_;          // shared_mu_ (and warnings_, above)

  boost::asio::io_context context_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      context_.get_executor()};
  boost::asio::steady_timer timer_{context_};
  std::thread thread_;
};

}  // namespace purser::workloads
