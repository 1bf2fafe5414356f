// RecordWriter, the fleet service's writes, on its own (no service, no thread of its own) over a
// real SQLite store with the fleet's schema: one pass's changes in one transaction, charges
// included; a retried write never undoing a newer one; the fence refusing a replica that no longer
// leads, and what it refused written once it leads again.
#include "workloads/record_writer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>

#include "fakes/temp_dir.h"
#include "store/sqlite_store.h"
#include "workloads/fleet_service.h"

namespace purser::workloads {
namespace {

class RecordWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open({.path = dir.file("fleet.db")}, clock);
    ASSERT_TRUE(s.has_value()) << s.error().toString();
    store = std::move(*s);
    ASSERT_TRUE(store->migrate("fleet", fleetMigrations()).has_value());
    writer = std::make_unique<RecordWriter>(*store, clock, [this](store::Tx&) -> Result<void> {
      if (leads) return {};
      return fail(Error(ErrorCode::kFailedPrecondition, "this replica no longer leads"));
    });
  }

  Record& live(const std::string& name, const std::string& state = "pending") {
    Record& r = records[name];
    r.spec.name = name;
    r.state = state;
    r.tenant_id = "t-1";
    r.seq = static_cast<int64_t>(records.size());
    return r;
  }

  // (state, version) of `name` as stored; ("", 0) when it has no row.
  std::pair<std::string, int64_t> stored(const std::string& name) {
    std::pair<std::string, int64_t> out{"", 0};
    auto read = store->read([&](store::Tx& tx) -> Result<void> {
      auto rows = PURSER_TRY_VALUE(
          tx.query("SELECT state, version FROM fleet_workloads WHERE name = $1", {name}));
      if (!rows.empty()) out = {rows[0].getText(0), rows[0].getInt(1)};
      return {};
    });
    EXPECT_TRUE(read.has_value());
    return out;
  }

  int64_t events() {
    int64_t n = -1;
    auto read = store->read([&](store::Tx& tx) -> Result<void> {
      auto rows = PURSER_TRY_VALUE(tx.query("SELECT COUNT(*) FROM fleet_events", {}));
      n = rows[0].getInt(0);
      return {};
    });
    EXPECT_TRUE(read.has_value());
    return n;
  }

  // Queues fn and waits for its outcome (writes land in the order they were queued, so every
  // write queued before it has landed too).
  Result<void> enqueueAndWait(store::TxFn fn) {
    std::promise<Result<void>> landed;
    auto future = landed.get_future();
    writer->enqueue(std::move(fn), [&landed](Result<void> r) { landed.set_value(std::move(r)); });
    return future.get();
  }

  testing::TempDir dir;
  ManualClock clock;
  std::unique_ptr<store::SqliteStore> store;
  std::atomic<bool> leads{true};
  std::unique_ptr<RecordWriter> writer;
  std::map<std::string, Record> records;
};

TEST_F(RecordWriterTest, APassIsOneWriteOfItsRecordsEventsAndChargesOrNone) {
  EXPECT_FALSE(writer->take(records).has_value()) << "nothing noted, nothing to write";
  live("ml/a");
  live("ml/b");
  live("ml/gone");
  writer->changed("ml/a");
  writer->changed("ml/b");
  writer->changed("ml/gone");
  writer->forget("ml/gone");  // it ended: written below as ended, not as live
  Record ended = records["ml/gone"];
  ended.state = "succeeded";
  records.erase("ml/gone");
  writer->ended(ended);
  writer->event(
      {"2026-01-01T00:00:00Z", "Admitted", "ml/a", "q", "QuotaReserved", "", "", "t-1", "", ""});
  // A charge that fails takes the whole pass with it: no state is recorded without its charge.
  writer->metered([](store::Tx&) -> Result<void> { return fail(unavailable("disk full")); });
  auto write = writer->take(records);
  ASSERT_TRUE(write.has_value());
  EXPECT_FALSE(writer->take(records).has_value()) << "taken: noted again from empty";
  EXPECT_FALSE(store->write(*write).has_value());
  EXPECT_EQ(stored("ml/a").first, "");
  EXPECT_EQ(events(), 0);

  int charged = 0;
  writer->changed("ml/a");
  writer->changed("ml/b");
  writer->ended(ended);
  writer->event(
      {"2026-01-01T00:00:00Z", "Admitted", "ml/a", "q", "QuotaReserved", "", "", "t-1", "", ""});
  writer->metered([&charged](store::Tx&) -> Result<void> {
    ++charged;
    return {};
  });
  write = writer->take(records);
  ASSERT_TRUE(write.has_value());
  ASSERT_TRUE(store->write(*write).has_value());
  EXPECT_EQ(charged, 1);
  EXPECT_EQ(stored("ml/a").first, "pending");
  EXPECT_EQ(stored("ml/b").first, "pending");
  EXPECT_EQ(stored("ml/gone").first, "succeeded");
  EXPECT_EQ(events(), 1);
}

TEST_F(RecordWriterTest, AWriteRetriedLateNeverUndoesANewerOne) {
  Record& r = live("ml/a");
  writer->changed("ml/a");
  auto older = writer->take(records);
  r.state = "running";
  writer->changed("ml/a");
  auto newer = writer->take(records);
  ASSERT_TRUE(older && newer);
  ASSERT_TRUE(store->write(*newer).has_value());
  ASSERT_TRUE(store->write(*older).has_value());  // a retry landing after the newer write
  EXPECT_EQ(stored("ml/a"), (std::pair<std::string, int64_t>{"running", r.version}));
}

// Replicas sharing the store: a write made while this replica does not lead is refused by the
// fence, kept, and written by a retry once it leads again; writeNow() is fenced too.
TEST_F(RecordWriterTest, TheFenceRefusesAReplicaThatDoesNotLeadAndARetryWritesItLater) {
  live("ml/a", "admitted");
  leads = false;
  writer->changed("ml/a");
  auto write = writer->take(records);
  ASSERT_TRUE(write.has_value());
  auto refused = enqueueAndWait(*write);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(writer->failed(), 1u);
  EXPECT_FALSE(writer->writeNow([](store::Tx&) -> Result<void> { return {}; }).has_value());
  EXPECT_EQ(stored("ml/a").first, "");

  leads = true;
  writer->retry();
  EXPECT_EQ(writer->failed(), 0u);
  ASSERT_TRUE(enqueueAndWait([](store::Tx&) -> Result<void> { return {}; }).has_value());
  EXPECT_EQ(stored("ml/a").first, "admitted");
  EXPECT_EQ(writer->failed(), 0u);
}

}  // namespace
}  // namespace purser::workloads
