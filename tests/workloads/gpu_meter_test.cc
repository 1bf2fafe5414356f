// GpuMeter, the fleet service's GPU time in money, on its own (no service, no thread): a record
// admitted on GPUs, a real wallet book and meter over SQLite, time given by the test. What the
// next stretch costs, when a hard wallet holds a workload back, holds and their release, metering
// (the charge, its write, its alerts), and the GPUs' utilisation read through a fake source.
#include "workloads/gpu_meter.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <memory>

#include "common/random.h"
#include "fakes/temp_dir.h"
#include "ledger/audit.h"
#include "ledger/ledger_store.h"
#include "store/sqlite_store.h"
#include "workloads/fleet_service.h"

namespace purser::workloads {
namespace {

constexpr int64_t kStart = 1'800'000'000'000;  // Unix ms

// Readings the test sets: (node, gpu) -> percent.
class FakeGpus final : public fleet::GpuUtilisation {
 public:
  std::optional<fleet::GpuReading> reading(const std::string& node, int gpu) const override {
    auto it = percent.find({node, gpu});
    if (it == percent.end()) return std::nullopt;
    return fleet::GpuReading{it->second, kStart};
  }
  std::map<std::pair<std::string, int>, double> percent;
};

class GpuMeterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open({.path = dir.file("fleet.db")}, clock);
    ASSERT_TRUE(s.has_value()) << s.error().toString();
    store = std::move(*s);
    ASSERT_TRUE(store->migrate("ledger", ledger::ledgerMigrations()).has_value());
    ASSERT_TRUE(store->migrate("audit", ledger::AuditLog::migrations()).has_value());
    ASSERT_TRUE(store->migrate("fleet", fleetMigrations()).has_value());
    auto m = ledger::Meter::open(*store, wallets, clock, &audit, {.dir = dir.file("journal")});
    ASSERT_TRUE(m.has_value()) << m.error().toString();
    ledger_meter = std::move(*m);
    budget = std::make_unique<ledger::Budget>(wallets, *ledger_meter, limiter, rate_limits);
    gpu = std::make_unique<GpuMeter>(
        GpuMeter::Deps{clock, ids, directory, *budget, prices,
                       [this](store::Tx&, const std::vector<ledger::Alert>& alerts,
                              const std::string& tenant) -> Result<void> {
                         audited.emplace_back(tenant, alerts.size());
                         return {};
                       },
                       &gpus},
        std::chrono::seconds(60));
  }

  // ml/train of tenant t-1, team ml, user u-1: `gpus` whole GPUs of h100 on node n1.
  Record admitted(int gpus_wanted = 1) {
    Record r;
    r.spec.name = "ml/train";
    fleet::PodSet ps;
    ps.name = "main";
    ps.count = 1;
    ps.requests["nvidia.com/gpu"] = 1000 * gpus_wanted;
    r.spec.pod_sets.push_back(ps);
    r.tenant_id = "t-1";
    r.team_id = "ml";
    r.owner_kind = "user";
    r.owner_id = "u-1";
    r.state = "running";
    fleet::PodSetAssignment a;
    a.name = "main";
    a.count = 1;
    a.flavors["nvidia.com/gpu"] = "h100";
    a.usage["nvidia.com/gpu"] = 1000 * gpus_wanted;
    fleet::PodPlacement p{"n1", {}, 1000};
    for (int i = 0; i < gpus_wanted; ++i) p.gpus.push_back(i);
    a.placements.push_back(p);
    r.admission = fleet::Admission{"research", {a}};
    r.metered_until_ms = kStart;
    return r;
  }

  void wallet(const std::string& id, const char* limit, std::vector<int> alert_at = {}) {
    ledger::WalletSpec w;
    w.id = id;
    w.tenant_id = "t-1";
    w.scope = {ledger::ScopeKind::kTeam, "ml"};
    w.limit = *Money::parse(limit);
    w.alert_at = std::move(alert_at);
    ASSERT_TRUE(wallets.put(w).has_value());
  }

  std::string spent(const std::string& id) { return wallets.status(id)->spent.toString(); }
  std::string reserved(const std::string& id) { return wallets.status(id)->reserved.toString(); }

  testing::TempDir dir;
  ManualClock clock{SystemTime(std::chrono::milliseconds(kStart))};
  SeededRandom random{3};
  IdGenerator ids{clock, random};
  std::unique_ptr<store::SqliteStore> store;
  identity::Directory directory{clock};
  ledger::WalletBook wallets{clock};
  ledger::AuditLog audit{clock};
  std::unique_ptr<ledger::Meter> ledger_meter;
  ledger::RateLimiter limiter{clock};
  ledger::RateLimitBook rate_limits;
  std::unique_ptr<ledger::Budget> budget;
  // $3.60 per GPU-hour on h100, $7.20 on b200, a100 unpriced.
  const ledger::PriceBook prices{
      {}, {{"h100", *Money::parse("3.60")}, {"b200", *Money::parse("7.20")}}};
  FakeGpus gpus;
  std::vector<std::pair<std::string, size_t>> audited;  // (tenant, alerts) per audited charge
  std::unique_ptr<GpuMeter> gpu;
};

TEST_F(GpuMeterTest, TheNextStretchCostsItsFlavorsPriceOrWhileWaitingTheDearestOffered) {
  EXPECT_EQ(gpu->lookahead(), std::chrono::milliseconds(122'000));  // 2 × 60 s + 2 s
  Record r = admitted(2);
  // 2 GPUs × 122 s at $3.60 an hour.
  EXPECT_EQ(gpu->lookaheadCost(r, {}).toString(), "0.244");
  // Waiting: at the dearest priced flavor its queue offers (an unpriced one counts nothing).
  r.state = "pending";
  r.admission.reset();
  EXPECT_EQ(gpu->lookaheadCost(r, {"a100", "h100", "b200"}).toString(), "0.488");
  EXPECT_TRUE(gpu->lookaheadCost(r, {"a100"}).isZero());
  EXPECT_TRUE(gpu->lookaheadCost(r, {}).isZero());
}

TEST_F(GpuMeterTest, AHardWalletThatCannotHoldTheNextStretchHoldsTheWorkloadBack) {
  wallet("w-ml", "0.10");
  Record r = admitted();
  const Money need = gpu->lookaheadCost(r, {});  // 0.122
  const std::string why = gpu->budgetHold(r, need);
  EXPECT_NE(why.find("wallet w-ml (team ml) has 0.10 of 0.10 left"), std::string::npos) << why;
  EXPECT_NE(why.find("next 122 s of GPU time cost 0.122"), std::string::npos) << why;
  EXPECT_FALSE(gpu->hold(r, need));
  EXPECT_TRUE(gpu->holdOf(r.spec.name).empty());
  EXPECT_EQ(reserved("w-ml"), "0.00");
  // Work without GPUs, or without a tenant, is never held back.
  Record cpu = admitted();
  cpu.spec.pod_sets[0].requests.clear();
  EXPECT_TRUE(gpu->budgetHold(cpu, need).empty());
  EXPECT_TRUE(gpu->hold(cpu, need));
}

TEST_F(GpuMeterTest, AHoldIsTakenOnTheChainReplacedAtTheNextAndReleased) {
  wallet("w-ml", "10.00");
  Record r = admitted();
  const Money need = gpu->lookaheadCost(r, {});
  EXPECT_TRUE(gpu->budgetHold(r, need).empty());
  ASSERT_TRUE(gpu->hold(r, need));
  EXPECT_FALSE(gpu->holdOf(r.spec.name).empty());
  EXPECT_EQ(reserved("w-ml"), "0.122");
  const std::string first = gpu->holdOf(r.spec.name);
  ASSERT_TRUE(gpu->hold(r, need));  // the next stretch replaces the last one's hold
  EXPECT_NE(gpu->holdOf(r.spec.name), first);
  EXPECT_EQ(reserved("w-ml"), "0.122");
  gpu->release(r);
  EXPECT_TRUE(gpu->holdOf(r.spec.name).empty());
  EXPECT_EQ(reserved("w-ml"), "0.00");
}

// Holds go through the ledger's Budget like a model request's, but nothing is journaled for them:
// a process killed while a workload holds GPU time leaves nothing for the next start to charge
// (the fleet takes a new hold at its first metering), and a meter dropped gives its holds back.
TEST_F(GpuMeterTest, AHoldIsNeverJournaledAndGoesWithItsMeter) {
  wallet("w-ml", "10.00");
  Record r = admitted();
  ASSERT_TRUE(gpu->hold(r, gpu->lookaheadCost(r, {})));
  EXPECT_EQ(reserved("w-ml"), "0.122");
  gpu.reset();
  EXPECT_EQ(reserved("w-ml"), "0.00");
  gpu = std::make_unique<GpuMeter>(GpuMeter::Deps{clock, ids, directory, *budget, prices, {}},
                                   std::chrono::seconds(60));
  ASSERT_TRUE(gpu->hold(r, gpu->lookaheadCost(r, {})));
  ledger_meter->abandon();
  ledger::WalletBook fresh(clock);
  auto reopened = ledger::Meter::open(*store, fresh, clock, &audit, {.dir = dir.file("journal")});
  ASSERT_TRUE(reopened.has_value()) << reopened.error().toString();
  auto recovery = (*reopened)->recover();
  ASSERT_TRUE(recovery.has_value()) << recovery.error().toString();
  EXPECT_EQ(recovery->charged, 0);
  EXPECT_EQ(recovery->quarantined, 0);
  EXPECT_EQ(fresh.outstanding(), 0u);
  gpu.reset();  // its hold goes back to the old book, which the old meter still serves
  EXPECT_EQ(reserved("w-ml"), "0.00");
}

TEST_F(GpuMeterTest, MeteringChargesTheStretchAndItsWriteRecordsIt) {
  wallet("w-ml", "10.00");
  Record r = admitted(2);
  ASSERT_TRUE(gpu->hold(r, gpu->lookaheadCost(r, {})));
  // 60 s on 2 GPUs at $3.60 an hour: $0.12, and the hold is gone (the caller takes the next).
  auto write = gpu->meter(r, kStart + 60'000, /*awaiting_pods=*/false);
  ASSERT_TRUE(write.has_value());
  EXPECT_EQ(spent("w-ml"), "0.12");
  EXPECT_EQ(reserved("w-ml"), "0.00");
  EXPECT_EQ(r.charged.toString(), "0.12");
  EXPECT_EQ(r.metered_until_ms, kStart + 60'000);
  ASSERT_TRUE(store->write(*write).has_value());
  auto rows = store->read([&](store::Tx& tx) -> Result<void> {
    auto got = PURSER_TRY_VALUE(tx.query(
        "SELECT workload, tenant_id, flavor, from_ms, at_ms, gpu_ms FROM gpu_utilisation"));
    EXPECT_EQ(got.size(), 1u);
    if (got.size() == 1) {
      EXPECT_EQ(got[0].getText(0), "ml/train");
      EXPECT_EQ(got[0].getText(1), "t-1");
      EXPECT_EQ(got[0].getText(2), "h100");
      EXPECT_EQ(got[0].getInt(3), kStart);
      EXPECT_EQ(got[0].getInt(4), kStart + 60'000);
      EXPECT_EQ(got[0].getInt(5), 120'000);  // 2 GPUs × 60 s
    }
    return {};
  });
  ASSERT_TRUE(rows.has_value());
  // Nothing elapsed: nothing to charge.
  EXPECT_FALSE(gpu->meter(r, kStart + 60'000, false).has_value());
  EXPECT_EQ(spent("w-ml"), "0.12");
}

TEST_F(GpuMeterTest, PodsNotYetRunningAreNotChargedForTheWait) {
  wallet("w-ml", "10.00");
  Record r = admitted();
  r.state = "admitted";
  EXPECT_FALSE(gpu->meter(r, kStart + 30'000, /*awaiting_pods=*/true).has_value());
  EXPECT_EQ(r.metered_until_ms, kStart + 30'000);  // the wait is skipped
  EXPECT_EQ(spent("w-ml"), "0.00");
  r.state = "running";
  ASSERT_TRUE(gpu->meter(r, kStart + 90'000, false).has_value());
  EXPECT_EQ(spent("w-ml"), "0.06");  // 60 s of one GPU
}

TEST_F(GpuMeterTest, AChargeThatCrossesAThresholdRaisesAnAlertAuditedWithIt) {
  wallet("w-ml", "0.10", {50});
  Record r = admitted();
  auto write = gpu->meter(r, kStart + 60'000, false);  // $0.06 of $0.10: past 50 %
  ASSERT_TRUE(write.has_value());
  const auto alerts = gpu->takeAlerts();
  ASSERT_EQ(alerts.size(), 1u);
  EXPECT_EQ(alerts[0].first, "t-1");
  ASSERT_EQ(alerts[0].second.size(), 1u);
  EXPECT_EQ(alerts[0].second[0].wallet_id, "w-ml");
  EXPECT_EQ(alerts[0].second[0].threshold, 50);
  EXPECT_TRUE(gpu->takeAlerts().empty()) << "handed over once";
  EXPECT_TRUE(audited.empty()) << "audited in the write, not before";
  ASSERT_TRUE(store->write(*write).has_value());
  ASSERT_EQ(audited.size(), 1u);
  EXPECT_EQ(audited[0], (std::pair<std::string, size_t>{"t-1", 1}));
}

TEST_F(GpuMeterTest, UtilisationIsSampledFromTheGpusItHoldsAndRecordedWithTheCharge) {
  wallet("w-ml", "10.00");
  Record r = admitted(2);
  std::map<std::string, Record> records{{r.spec.name, r}};
  gpus.percent[{"n1", 0}] = 100;  // GPU 1 has no reading
  const auto charged = [](const Record&) { return true; };
  gpu->sampleAll(records, charged, kStart + 10'000);
  LiveUtilisation u = gpu->utilisation("ml/train", kStart + 10'000);
  EXPECT_EQ(u.unmetered.placed, 2 * 1000 * 10'000);
  EXPECT_EQ(u.unmetered.observed, 1000 * 10'000);
  EXPECT_DOUBLE_EQ(u.unmetered.busy, 1000.0 * 10'000);
  // Metering records what was sampled and starts again from nothing.
  auto write = gpu->meter(r, kStart + 10'000, false);
  ASSERT_TRUE(write.has_value());
  ASSERT_TRUE(store->write(*write).has_value());
  EXPECT_EQ(gpu->utilisation("ml/train", kStart + 10'000).unmetered.placed, 0);
  auto rows = store->read([&](store::Tx& tx) -> Result<void> {
    auto got = PURSER_TRY_VALUE(
        tx.query("SELECT placed_gpu_ms, observed_gpu_ms, busy_gpu_ms FROM gpu_utilisation"));
    EXPECT_EQ(got.size(), 1u);
    if (got.size() == 1) {
      EXPECT_EQ(got[0].getInt(0), 20'000);
      EXPECT_EQ(got[0].getInt(1), 10'000);
      EXPECT_EQ(got[0].getInt(2), 10'000);
    }
    return {};
  });
  ASSERT_TRUE(rows.has_value());
  // A workload no longer charged is forgotten at the next pass.
  gpu->sampleAll(
      records, [](const Record&) { return false; }, kStart + 20'000);
  EXPECT_EQ(gpu->utilisation("ml/train", kStart + 20'000).recent.placed, 0);
}

TEST_F(GpuMeterTest, ReadingsThatAreNotBelievedAreNoReadings) {
  gpus.percent[{"n1", 0}] = std::numeric_limits<double>::quiet_NaN();
  gpus.percent[{"n1", 1}] = 250;
  EXPECT_FALSE(gpu->reading("n1", 0).has_value());
  ASSERT_TRUE(gpu->reading("n1", 1).has_value());
  EXPECT_EQ(gpu->reading("n1", 1)->util_percent, 100);  // above 100 is 100
  EXPECT_FALSE(gpu->reading("n2", 0).has_value());
}

}  // namespace
}  // namespace purser::workloads
