// The fleet service reading its GPUs' utilisation: a workload placed on a GPU of a node,
// utilisation read through a fake GpuUtilisation, time moved by a ManualClock; what its GPUs did
// is recorded beside its GPU charge (gpu_utilisation, keyed by the usage event, in the charge's
// transaction), and it is flagged allocated but idle while its last ten minutes average under
// 10 %. The service's own timer is set far off, so every sample happens when the test says.
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <exception>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>

#include "common/clock.h"
#include "common/id.h"
#include "common/random.h"
#include "fakes/kueue_manifest.h"
#include "fakes/temp_dir.h"
#include "fleet/utilisation.h"
#include "identity/directory.h"
#include "ledger/audit.h"
#include "ledger/meter.h"
#include "ledger/price.h"
#include "ledger/wallet_book.h"
#include "store/sqlite_store.h"
#include "workloads/fleet_service.h"

namespace purser::workloads {
namespace {

// ClusterQueue research: 8 GPUs of h100; its LocalQueue in ml.
const std::string kManifests = [] {
  testing::KueueQueue q;
  q.quota = {{"nvidia.com/gpu", "8"}};
  return q.yaml();
}();

// Readings set by the test, read on the service's thread.
class FakeGpus final : public fleet::GpuUtilisation {
 public:
  explicit FakeGpus(const Clock& clock) : clock_(clock) {}
  void set(const std::string& node, int gpu, double percent) {
    std::lock_guard lock(mu_);
    percent_[{node, gpu}] = percent;
  }
  void clear(const std::string& node, int gpu) {
    std::lock_guard lock(mu_);
    percent_.erase({node, gpu});
  }
  std::optional<fleet::GpuReading> reading(const std::string& node, int gpu) const override {
    std::lock_guard lock(mu_);
    auto it = percent_.find({node, gpu});
    if (it == percent_.end()) return std::nullopt;
    return fleet::GpuReading{it->second, unixMillis(clock_.now())};
  }

 private:
  const Clock& clock_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, double> percent_;
};

// One GPU-ms in the service's unit (milli-GPU-milliseconds).
constexpr int64_t kMilli = 1000;

class FleetUtilisationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open({.path = dir.file("purser.db")}, clock);
    ASSERT_TRUE(s.has_value()) << s.error().toString();
    store = std::move(*s);
    auto m = ledger::Meter::open(*store, wallets, clock, &audit, {.dir = dir.file("journal")});
    ASSERT_TRUE(m.has_value()) << m.error().toString();
    meter = std::move(*m);
    budget = std::make_unique<ledger::Budget>(wallets, *meter, limiter, rate_limits);
    open(&gpus);
  }

  void TearDown() override {
    if (service) service->stop();
    service.reset();
  }

  void open(const fleet::GpuUtilisation* source) {
    Deps deps{clock, ids, *store, directory, *budget, prices, audit, {}, nullptr};
    deps.gpu_utilisation = source;
    Options options;
    options.manifests = {{"fleet.yaml", kManifests}};
    options.metering_interval = std::chrono::hours(24);  // metered when the test ends a workload
    options.poll_interval = std::chrono::hours(24);      // the service's own timer never fires
    fleet::InventoryNode node;
    node.name = "node-1";
    node.cpu_milli = 64'000;
    node.memory_mib = 512 * 1024;
    for (int i = 0; i < 2; ++i) node.gpus.push_back({i, "", "H100", 81'920, 0, -1, false});
    options.inventory = {node};
    options.fence = fence;
    auto opened = FleetService::open(std::move(deps), std::move(options), {});
    ASSERT_TRUE(opened.has_value()) << opened.error().toString();
    service = std::move(*opened);
  }

  // Runs fn on the service's thread (as the API's handlers do) and returns what it returned.
  template <typename F>
  auto onService(F fn) -> std::invoke_result_t<F, FleetService&> {
    using T = std::invoke_result_t<F, FleetService&>;
    boost::asio::io_context ctx;
    auto guard = boost::asio::make_work_guard(ctx);
    std::exception_ptr error;
    T out{};
    boost::asio::co_spawn(ctx, service->call(std::move(fn)), [&](std::exception_ptr e, T value) {
      error = e;
      out = std::move(value);
      guard.reset();
    });
    ctx.run();
    if (error) std::rethrow_exception(error);
    return out;
  }

  // Submits a workload of one whole GPU that runs nothing (it holds its GPU, and is charged for
  // it, from admission until it is deleted); the GPU it was placed on.
  Record gpuWorkload(const std::string& name) {
    Record r;
    r.tenant_id = "tenant-1";
    r.team_id = "team-1";
    r.owner_kind = "user";
    r.owner_id = "user-1";
    r.submitted_ms = unixMillis(clock.now());
    r.spec.name = "ml/" + name;
    r.spec.namespace_ = "ml";
    r.spec.local_queue = "research";
    r.spec.created_ms = r.submitted_ms;
    fleet::PodSet ps;
    ps.name = "main";
    ps.count = 1;
    ps.requests = {{"nvidia.com/gpu", 1000}};
    r.spec.pod_sets = {ps};
    return r;
  }

  int submit(const std::string& name) {
    const Record r = gpuWorkload(name);
    auto durable = std::make_shared<std::promise<Result<void>>>();
    auto admitted = onService([&](FleetService& f) -> std::optional<Record> {
      auto done = f.submit(r, [durable](Result<void> w) { durable->set_value(std::move(w)); });
      return done ? std::optional<Record>(*done) : std::nullopt;
    });
    EXPECT_TRUE(durable->get_future().get().has_value());
    if (!admitted || admitted->state != "admitted" || !admitted->admission) {
      ADD_FAILURE() << name << " was not admitted";
      return -1;
    }
    const auto& placements = admitted->admission->pod_sets.at(0).placements;
    if (placements.size() != 1 || placements[0].gpus.size() != 1 ||
        placements[0].node != "node-1" || placements[0].gpu_milli != 1000) {
      ADD_FAILURE() << name << " was not placed on one whole GPU of node-1";
      return -1;
    }
    return placements[0].gpus[0];
  }

  // `minutes` minutes pass, the GPUs read at the end of each (the service samples every second;
  // a reading holds for the stretch it ends).
  void pass(int minutes) {
    for (int m = 0; m < minutes; ++m) {
      clock.advance(std::chrono::minutes(1));
      onService([](FleetService& f) {
        f.sampleUtilisation();
        return 0;
      });
    }
  }

  std::optional<LiveUtilisation> live(const std::string& name) {
    return onService([name](FleetService& f) { return f.utilisationOf("ml/" + name); });
  }

  // Deletes it (its GPU time charged up to now) once the write is durable.
  void remove(const std::string& name) {
    auto durable = std::make_shared<std::promise<Result<void>>>();
    const bool removed = onService([&](FleetService& f) {
      return f
          .remove("ml/" + name, "test",
                  [durable](Result<void> w) { durable->set_value(std::move(w)); })
          .has_value();
    });
    ASSERT_TRUE(removed);
    ASSERT_TRUE(durable->get_future().get().has_value());
  }

  store::Rows query(const std::string& sql) {
    store::Rows rows;
    auto read = store->read([&](store::Tx& tx) -> Result<void> {
      rows = PURSER_TRY_VALUE(tx.query(sql));
      return {};
    });
    EXPECT_TRUE(read.has_value()) << read.error().toString();
    return rows;
  }

  testing::TempDir dir;
  ManualClock clock;
  SeededRandom random{7};
  IdGenerator ids{clock, random};
  std::unique_ptr<store::SqliteStore> store;
  identity::Directory directory{clock};
  ledger::WalletBook wallets{clock};
  ledger::AuditLog audit{clock};
  std::unique_ptr<ledger::Meter> meter;
  ledger::RateLimiter limiter{clock};
  ledger::RateLimitBook rate_limits;
  std::unique_ptr<ledger::Budget> budget;
  const ledger::PriceBook prices{{}, {{"h100", *Money::parse("3.60")}}};
  FakeGpus gpus{clock};
  std::function<Result<void>(store::Tx&)> fence;  // none: one replica
  std::unique_ptr<FleetService> service;
};

// Replicas sharing a store: once the fence says this replica no longer leads, nothing the fleet
// does reaches the store, and a submission is refused rather than acknowledged.
TEST_F(FleetUtilisationTest, BehindAFenceThatNoLongerHoldsTheFleetWritesNothing) {
  service->stop();
  service.reset();
  std::atomic<bool> leads{true};
  std::atomic<int> checked{0};
  fence = [&](store::Tx&) -> Result<void> {
    ++checked;
    if (leads) return {};
    return fail(Error(ErrorCode::kFailedPrecondition, "this replica no longer leads the fleet"));
  };
  open(&gpus);
  EXPECT_GE(submit("a"), 0);
  EXPECT_GT(checked.load(), 0) << "the fence is checked inside the fleet's writes";
  leads = false;
  const Record r = gpuWorkload("b");
  auto durable = std::make_shared<std::promise<Result<void>>>();
  onService([&](FleetService& f) {
    return f.submit(r, [durable](Result<void> w) { durable->set_value(std::move(w)); }).has_value();
  });
  auto wrote = durable->get_future().get();
  ASSERT_FALSE(wrote.has_value()) << "a fenced-off fleet acknowledged a submission";
  EXPECT_EQ(wrote.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(query("SELECT COUNT(*) FROM fleet_workloads WHERE name = 'ml/b'")[0].getInt(0), 0);
  EXPECT_EQ(query("SELECT COUNT(*) FROM fleet_workloads WHERE name = 'ml/a'")[0].getInt(0), 1);
}

TEST_F(FleetUtilisationTest, BusyAndAllocatedGpuTimeAreRecordedWithTheChargeAndIdlenessFlagged) {
  const int64_t t0 = unixMillis(clock.now());
  const int gpu = submit("train");
  ASSERT_GE(gpu, 0);
  // Its GPU at 50 %; the node's other GPU, which it does not hold, at 90 %.
  gpus.set("node-1", gpu, 50);
  gpus.set("node-1", 1 - gpu, 90);

  pass(1);
  auto now = live("train");
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->unmetered.placed, 60'000 * kMilli);
  EXPECT_EQ(now->unmetered.observed, 60'000 * kMilli);
  EXPECT_DOUBLE_EQ(now->unmetered.busy, 30'000.0 * kMilli) << "its own GPU's reading, not 90 %";
  EXPECT_DOUBLE_EQ(*now->recent.averagePercent(), 50.0);
  EXPECT_FALSE(now->idle);

  // Ten minutes at 2 %: allocated but idle (the window still holds the busy minute: 6.4 %).
  gpus.set("node-1", gpu, 2);
  pass(10);
  now = live("train");
  ASSERT_TRUE(now.has_value());
  EXPECT_NEAR(*now->recent.averagePercent(), (30.0 + 10 * 1.2) / 660 * 100, 1e-9);
  EXPECT_TRUE(now->idle);

  // Busy again for three minutes: no longer idle.
  gpus.set("node-1", gpu, 80);
  pass(3);
  now = live("train");
  ASSERT_TRUE(now.has_value());
  EXPECT_FALSE(now->idle) << *now->recent.averagePercent();

  // A glitching exporter for a minute: nothing believed, the minute is placed but not observed.
  gpus.set("node-1", gpu, std::numeric_limits<double>::quiet_NaN());
  pass(1);
  now = live("train");
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->unmetered.placed, 15 * 60'000 * kMilli);
  EXPECT_EQ(now->unmetered.observed, 14 * 60'000 * kMilli);

  // Deleted: one charge for the fifteen minutes, and beside it (same event) what the GPU did.
  remove("train");
  EXPECT_FALSE(live("train").has_value());
  store::Rows rows = query(
      "SELECT g.workload, g.tenant_id, g.team_id, g.flavor, g.from_ms, g.at_ms, g.gpu_ms, "
      "g.placed_gpu_ms, g.observed_gpu_ms, g.busy_gpu_ms, u.model, u.cost_nanos "
      "FROM gpu_utilisation g JOIN usage_events u ON u.id = g.event_id");
  ASSERT_EQ(rows.size(), 1u);
  const store::Row& row = rows[0];
  EXPECT_EQ(row.getText(0), "ml/train");
  EXPECT_EQ(row.getText(1), "tenant-1");
  EXPECT_EQ(row.getText(2), "team-1");
  EXPECT_EQ(row.getText(3), "h100");
  EXPECT_EQ(row.getInt(4), t0);
  EXPECT_EQ(row.getInt(5), t0 + 15 * 60'000);
  EXPECT_EQ(row.getInt(6), 15 * 60'000) << "one GPU for fifteen minutes";
  EXPECT_EQ(row.getInt(7), 15 * 60'000);
  EXPECT_EQ(row.getInt(8), 14 * 60'000);
  // 1 min at 50 %, 10 at 2 %, 3 at 80 %: 30 s + 12 s + 144 s.
  EXPECT_EQ(row.getInt(9), 186'000);
  EXPECT_EQ(row.getText(10), "gpu-hours");
  // 0.25 GPU-hours at 3.60 an hour.
  EXPECT_EQ(row.getInt(11), Money::parse("0.90")->nanos());

  // The report's reading of the store: the same, summed per workload; and after a restart.
  const auto check = [&] {
    auto stored = service->utilisationSince(t0, {}, {});
    ASSERT_TRUE(stored.has_value()) << stored.error().toString();
    ASSERT_EQ(stored->size(), 1u);
    EXPECT_EQ((*stored)[0].workload, "ml/train");
    EXPECT_EQ((*stored)[0].gpu_ms, 15 * 60'000);
    EXPECT_EQ((*stored)[0].observed_gpu_ms, 14 * 60'000);
    EXPECT_EQ((*stored)[0].busy_gpu_ms, 186'000);
    EXPECT_EQ((*stored)[0].last_ms, t0 + 15 * 60'000);
    // Another team sees none of it; a window after it sees nothing.
    auto other = service->utilisationSince(t0, {"tenant-1", "team-2"}, {});
    ASSERT_TRUE(other.has_value());
    EXPECT_TRUE(other->empty());
    auto later = service->utilisationSince(t0 + 16 * 60'000, {}, {});
    ASSERT_TRUE(later.has_value());
    EXPECT_TRUE(later->empty());
  };
  check();
  service->stop();
  service.reset();
  open(&gpus);
  check();
}

TEST_F(FleetUtilisationTest, WithoutReadingsGpuTimeIsChargedAndNothingIsObserved) {
  service->stop();
  service.reset();
  open(nullptr);  // no exporters
  const int gpu = submit("blind");
  ASSERT_GE(gpu, 0);
  gpus.set("node-1", gpu, 100);  // not a source of this service
  pass(5);
  auto now = live("blind");
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->unmetered.placed, 5 * 60'000 * kMilli);
  EXPECT_EQ(now->unmetered.observed, 0);
  EXPECT_FALSE(now->idle) << "not known to be idle";
  EXPECT_FALSE(
      onService([gpu](FleetService& f) { return f.gpuReading("node-1", gpu).has_value(); }));
  remove("blind");
  store::Rows rows =
      query("SELECT gpu_ms, placed_gpu_ms, observed_gpu_ms, busy_gpu_ms FROM gpu_utilisation");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].getInt(0), 5 * 60'000);
  EXPECT_EQ(rows[0].getInt(1), 5 * 60'000);
  EXPECT_EQ(rows[0].getInt(2), 0);
  EXPECT_EQ(rows[0].getInt(3), 0);
}

}  // namespace
}  // namespace purser::workloads
