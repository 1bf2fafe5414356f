// The ledger journal on its own: records reach the store in order and once; a killed process
// loses nothing appended; a machine crash (the file cut at any byte after the last sync, or its
// tail overwritten with garbage) loses only what came after that sync and never stops a start;
// every limit is enforced.
#include "ledger/journal.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <set>

#include "fakes/temp_dir.h"
#include "store/sqlite_store.h"

namespace purser::ledger {
namespace {

namespace fs = std::filesystem;

const std::vector<store::Migration> kTable = {
    {1, "records", "CREATE TABLE records (payload TEXT PRIMARY KEY, pos INTEGER NOT NULL)"}};

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open({.path = dir.file("j.db")}, clock);
    ASSERT_TRUE(s.has_value());
    store = std::move(*s);
    ASSERT_TRUE(store->migrate("test", kTable).has_value());
  }
  void TearDown() override {
    if (journal) journal->close();
    store->close();
  }

  JournalOptions options() { return {.dir = dir.file("journal")}; }

  // Idempotent, as the journal requires: a replayed record is inserted once.
  Journal::Apply apply() {
    return [this](store::Tx& tx, const std::vector<std::string_view>& records,
                  bool /*replaying*/) -> Result<void> {
      if (failing) return fail(unavailable("the store is down"));
      for (std::string_view rec : records) {
        PURSER_TRY(tx.exec(
            "INSERT INTO records (payload, pos) VALUES ($1, (SELECT COUNT(*) FROM records)) ON "
            "CONFLICT (payload) DO NOTHING",
            {std::string(rec)}));
      }
      return {};
    };
  }

  void open(JournalOptions o) {
    auto j = Journal::open(std::move(o), *store, apply());
    ASSERT_TRUE(j.has_value()) << j.error().toString();
    journal = std::move(*j);
  }

  // The payloads in the store, in the order they were applied.
  std::vector<std::string> stored() {
    std::vector<std::string> out;
    EXPECT_TRUE(store
                    ->read([&](store::Tx& tx) -> Result<void> {
                      for (const auto& r :
                           PURSER_TRY_VALUE(tx.query("SELECT payload FROM records ORDER BY pos"))) {
                        out.push_back(r.getText(0));
                      }
                      return {};
                    })
                    .has_value());
    return out;
  }

  static std::string payload(int i) { return "record-" + std::to_string(i); }

  void waitSynced(uint64_t seq) {
    std::promise<bool> p;
    journal->whenSynced(seq, [&](bool ok) { p.set_value(ok); });
    ASSERT_TRUE(p.get_future().get());
  }

  testing::TempDir dir;
  ManualClock clock;
  std::unique_ptr<store::SqliteStore> store;
  std::unique_ptr<Journal> journal;
  std::atomic<bool> failing{false};
};

TEST_F(JournalTest, RecordsReachTheStoreInOrderAndACleanCloseLeavesNothingToReplay) {
  open(options());
  for (int i = 0; i < 500; ++i) {
    auto seq = journal->append(payload(i));
    ASSERT_TRUE(seq.has_value());
    EXPECT_EQ(*seq, static_cast<uint64_t>(i + 1));
  }
  ASSERT_TRUE(journal->catchUp().has_value());
  auto got = stored();
  ASSERT_EQ(got.size(), 500u);
  for (int i = 0; i < 500; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], payload(i));
  EXPECT_GE(journal->syncedThrough(), 500u) << "only synced records are materialised";
  journal->close();
  EXPECT_TRUE(journal->segments().empty());
  EXPECT_FALSE(journal->append("late").has_value()) << "closed";
  journal.reset();
  open(options());
  EXPECT_EQ(journal->replayed().records, 0);
}

TEST_F(JournalTest, AKilledProcessLosesNothingItAppended) {
  failing = true;  // nothing reaches the store before the kill
  open(options());
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(journal->append(payload(i)).has_value());
  journal->abandon();
  journal.reset();
  failing = false;
  open(options());
  EXPECT_EQ(journal->replayed().records, 300);
  EXPECT_EQ(journal->replayed().dropped_bytes, 0);
  auto got = stored();
  ASSERT_EQ(got.size(), 300u);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], payload(i));
  // Sequences go on from where the replay ended, in a new segment.
  auto next = journal->append("after");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, 301u);
}

TEST_F(JournalTest, ReplayingRecordsAlreadyInTheStoreChangesNothing) {
  open(options());
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(journal->append(payload(i)).has_value());
  ASSERT_TRUE(journal->catchUp().has_value());
  journal->abandon();  // applied, but the segment is still there
  journal.reset();
  open(options());
  EXPECT_EQ(journal->replayed().records, 50);
  EXPECT_EQ(stored().size(), 50u);
}

TEST_F(JournalTest, AMachineCrashLosesOnlyWhatCameAfterTheLastSync) {
  // The file is cut at every kind of place after the last sync: between records, inside a
  // header, inside a payload; and the tail is sometimes garbage rather than missing (a torn
  // write). Whatever the cut, the start succeeds, every synced record is there once, and what is
  // there is a prefix of what was appended.
  std::mt19937_64 rng(20261202);
  for (int round = 0; round < 40; ++round) {
    SCOPED_TRACE(round);
    const std::string jdir = dir.file("crash-" + std::to_string(round));
    failing = true;  // the store sees nothing before the crash: the journal alone carries it
    open({.dir = jdir, .sync = SyncMode::kBatch});
    const int synced_count = std::uniform_int_distribution<int>(0, 60)(rng);
    const int total = synced_count + std::uniform_int_distribution<int>(1, 60)(rng);
    uint64_t synced_bytes = 0;
    for (int i = 0; i < total; ++i) {
      // Sizes vary so that cuts land everywhere.
      std::string p = payload(i) + std::string(std::uniform_int_distribution<int>(0, 90)(rng), 'x');
      auto seq = journal->append(p);
      ASSERT_TRUE(seq.has_value());
      if (i + 1 == synced_count) {
        waitSynced(*seq);
        synced_bytes = fs::file_size(journal->segments().back());
      }
    }
    const std::string segment = journal->segments().back();
    journal->abandon();
    journal.reset();
    const uint64_t size = fs::file_size(segment);
    const uint64_t cut = std::uniform_int_distribution<uint64_t>(synced_bytes, size)(rng);
    fs::resize_file(segment, cut);
    if (round % 3 == 0 && cut < size) {
      std::ofstream garbage(segment, std::ios::binary | std::ios::app);
      for (uint64_t b = cut; b < size; ++b) garbage.put(static_cast<char>(rng()));
    }
    failing = false;
    open({.dir = jdir});
    const auto got = stored();
    std::set<std::string> unique(got.begin(), got.end());
    EXPECT_EQ(unique.size(), got.size()) << "a record applied twice";
    ASSERT_GE(got.size(), static_cast<size_t>(synced_count)) << "a synced record was lost";
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(got[i].starts_with(payload(static_cast<int>(i)) + "x") ||
                  got[i] == payload(static_cast<int>(i)))
          << "not a prefix of what was appended: " << got[i];
    }
    EXPECT_LE(got.size(), static_cast<size_t>(total));
    // The journal takes records again, and a second start finds the same.
    ASSERT_TRUE(journal->append("after-" + std::to_string(round)).has_value());
    ASSERT_TRUE(journal->catchUp().has_value());
    journal->close();
    journal.reset();
    ASSERT_TRUE(store
                    ->write([](store::Tx& tx) -> Result<void> {
                      PURSER_TRY(tx.exec("DELETE FROM records"));
                      return {};
                    })
                    .has_value());
  }
}

TEST_F(JournalTest, ACorruptRecordEndsTheReplayThereAndTheStartGoesOn) {
  failing = true;
  open(options());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(journal->append(payload(i)).has_value());
  const std::string segment = journal->segments().back();
  journal->abandon();
  journal.reset();
  // Flip a byte in the 11th record's payload.
  const uint64_t offset =
      10 * (Journal::kHeaderBytes + payload(9).size()) + Journal::kHeaderBytes + 2;
  {
    std::fstream f(segment, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(static_cast<char>(c ^ 0x20));
  }
  failing = false;
  open(options());
  EXPECT_EQ(journal->replayed().records, 10);
  EXPECT_GT(journal->replayed().dropped_bytes, 0);
  EXPECT_EQ(stored().size(), 10u);
}

TEST_F(JournalTest, SegmentsRotateAndGoOnceApplied) {
  failing = true;  // held back: every segment stays until the store has it
  open({.dir = dir.file("journal"), .segment_bytes = 4096});
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(journal->append(payload(i)).has_value());
  const size_t rotated = journal->segments().size();
  EXPECT_GT(rotated, 5u) << "2000 records do not fit in 4 KiB";
  failing = false;
  ASSERT_TRUE(journal->catchUp().has_value());
  EXPECT_EQ(stored().size(), 2000u);
  // The next cycle removes the segments wholly in the store; the one taking appends stays.
  ASSERT_TRUE(journal->append("one more").has_value());
  ASSERT_TRUE(journal->catchUp().has_value());
  ASSERT_TRUE(journal->append("and another").has_value());
  ASSERT_TRUE(journal->catchUp().has_value());
  EXPECT_LE(journal->segments().size(), 2u);
  // Killed now: what is left replays in order, adding nothing twice.
  journal->abandon();
  journal.reset();
  open({.dir = dir.file("journal"), .segment_bytes = 4096});
  auto got = stored();
  ASSERT_EQ(got.size(), 2002u);
  for (int i = 0; i < 2000; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], payload(i));
  EXPECT_EQ(got[2001], "and another");
}

TEST_F(JournalTest, AStoreThatFallsBehindIsWaitedForUpToItsBoundThenRetriedInOrder) {
  failing = true;
  open({.dir = dir.file("journal"), .max_unapplied = 10});
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(journal->append(payload(i)).has_value());
  auto refused = journal->append(payload(10));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnavailable);
  failing = false;  // the store comes back: the batch is tried again
  ASSERT_TRUE(journal->catchUp().has_value());
  ASSERT_TRUE(journal->append(payload(10)).has_value());
  ASSERT_TRUE(journal->catchUp().has_value());
  auto got = stored();
  ASSERT_EQ(got.size(), 11u);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], payload(i));
}

TEST_F(JournalTest, LimitsAndNames) {
  open(options());
  auto big = journal->append(std::string(Journal::kMaxRecordBytes + 1, 'x'));
  ASSERT_FALSE(big.has_value());
  EXPECT_EQ(big.error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(journal->append(std::string(Journal::kMaxRecordBytes, 'x')).has_value());
  EXPECT_TRUE(journal->append("").has_value()) << "an empty record is a record";
  journal->close();
  journal.reset();
  // A stranger in the directory is left alone; the start goes on.
  std::ofstream(dir.file("journal") + "/notes.txt") << "hello";
  std::ofstream(dir.file("journal") + "/journal-zzzzzzzzzzzzzzzz.log") << "hello";
  open(options());
  EXPECT_TRUE(fs::exists(dir.file("journal") + "/notes.txt"));
  EXPECT_FALSE(Journal::open({}, *store, apply()).has_value()) << "a directory is required";
}

TEST_F(JournalTest, AlwaysModeTellsEachWaiterOnceItsRecordIsOnDisk) {
  open({.dir = dir.file("journal"), .sync = SyncMode::kAlways});
  std::vector<std::future<bool>> waits;
  std::vector<std::promise<bool>> promises(100);
  for (int i = 0; i < 100; ++i) {
    auto seq = journal->append(payload(i));
    ASSERT_TRUE(seq.has_value());
    waits.push_back(promises[static_cast<size_t>(i)].get_future());
    journal->whenSynced(
        *seq, [&promises, i](bool ok) { promises[static_cast<size_t>(i)].set_value(ok); });
  }
  for (auto& w : waits) EXPECT_TRUE(w.get());
  EXPECT_GE(journal->syncedThrough(), 100u);
  // A sequence already synced is answered at once, on this thread.
  bool now = false;
  journal->whenSynced(1, [&](bool ok) { now = ok; });
  EXPECT_TRUE(now);
}

TEST_F(JournalTest, WithAnApplyIntervalRecordsWaitForItUnlessAReaderCatchesUp) {
  open({.dir = dir.file("journal"), .clock = &clock, .apply_interval = std::chrono::hours(1)});
  ASSERT_TRUE(journal->append(payload(0)).has_value());
  ASSERT_TRUE(journal->catchUp().has_value());
  EXPECT_EQ(stored(), std::vector<std::string>{payload(0)});
  uint64_t last = 0;
  for (int i = 1; i < 10; ++i) last = *journal->append(payload(i));
  waitSynced(last);
  // On disk, and held back for the interval (the clock does not move): one batch so far.
  EXPECT_EQ(stored().size(), 1u);
  // A reader that must see them has them shipped at once.
  ASSERT_TRUE(journal->catchUp().has_value());
  EXPECT_EQ(stored().size(), 10u);
}

TEST_F(JournalTest, AckAfterStoreAnswersAWaiterOnlyOnceItsRecordIsInTheStore) {
  open({.dir = dir.file("journal"),
        .sync = SyncMode::kAlways,
        .clock = &clock,
        .ack_after_store = true});
  failing = true;  // the store refuses every batch
  auto seq = journal->append(payload(0));
  ASSERT_TRUE(seq.has_value());
  std::promise<bool> told;
  auto answer = told.get_future();
  journal->whenSynced(*seq, [&told](bool ok) { told.set_value(ok); });
  // On disk, but not in the store: the waiter is not answered (bounded look).
  EXPECT_EQ(answer.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  EXPECT_TRUE(stored().empty());
  // The store is back and the back-off is over: the record lands, and then its waiter hears.
  failing = false;
  clock.advance(std::chrono::minutes(1));
  ASSERT_TRUE(journal->append(payload(1)).has_value());  // wakes the materialiser
  EXPECT_TRUE(answer.get());
  EXPECT_FALSE(stored().empty());
  EXPECT_EQ(stored().front(), payload(0));
}

}  // namespace
}  // namespace purser::ledger
