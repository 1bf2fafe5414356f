// The Meter over its journal, through a machine crash: the journal's file is cut at a random
// byte after the last sync (and its tail sometimes overwritten with garbage), the memory is gone,
// and the next start replays what is left and recovers. Every settlement acknowledged before the
// sync is in the ledger exactly once; nothing is half-recorded (an event without its charges, a
// charge without its event); no hard wallet is past its limit; memory and disk agree; nothing is
// quarantined.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>

#include "fakes/temp_dir.h"
#include "ledger/ledger_store.h"
#include "ledger/meter.h"
#include "store/sqlite_store.h"

namespace purser::ledger {
namespace {

namespace fs = std::filesystem;

std::vector<WalletSpec> specs() {
  std::vector<WalletSpec> out;
  for (int i = 0; i < 3; ++i) {
    WalletSpec w;
    w.id = "w" + std::to_string(i);
    w.tenant_id = "t";
    w.scope = {ScopeKind::kUser, "u" + std::to_string(i)};
    w.limit = *Money::fromUnits(i == 0 ? 3 : 40);
    w.hard = i != 2;
    out.push_back(w);
  }
  return out;
}

struct Process {
  Process(const std::string& db, const std::string& journal, const Clock& clock, bool first) {
    auto s = store::SqliteStore::open({.path = db}, clock);
    EXPECT_TRUE(s.has_value());
    store = std::move(*s);
    book = std::make_unique<WalletBook>(clock);
    auto m = Meter::open(*store, *book, clock, nullptr, {.dir = journal});
    EXPECT_TRUE(m.has_value()) << m.error().toString();
    meter = std::move(*m);
    for (const auto& spec : specs()) {
      if (first) {
        EXPECT_TRUE(
            store->write([&](store::Tx& tx) { return insertWallet(tx, spec, "now"); }).has_value());
      }
      Money spent;
      EXPECT_TRUE(store
                      ->read([&](store::Tx& tx) -> Result<void> {
                        spent = PURSER_TRY_VALUE(spentSince(tx, spec.id, SystemTime::min()));
                        return {};
                      })
                      .has_value());
      EXPECT_TRUE(book->put(spec, spent).has_value());
    }
  }
  ~Process() {
    if (meter) meter->close();
    if (store) store->close();
  }
  void crash() {
    meter->abandon();
    meter.reset();
    store->close();
  }

  std::unique_ptr<store::SqliteStore> store;
  std::unique_ptr<WalletBook> book;
  std::unique_ptr<Meter> meter;
};

TEST(MeterJournalTest, AMachineCrashLosesOnlySettlementsAfterTheLastSyncAndNeverCorruptsTheLedger) {
  std::mt19937_64 rng(1202);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int synced_settlements = 0;
  for (int round = 0; round < 24; ++round) {
    SCOPED_TRACE(round);
    testing::TempDir dir;
    ManualClock clock;
    const std::string db = dir.file("ledger.db");
    const std::string journal = dir.file("journal");
    std::map<std::string, Money> durable;  // settled before the sync: id -> what it cost
    std::map<std::string, std::vector<std::string>> wallets_of;  // reservation -> its wallets
    {
      Process p(db, journal, clock, /*first=*/true);
      std::vector<std::string> live;
      std::map<std::string, Money> acknowledged;
      const int steps = pick(20, 120);
      const int sync_at = pick(0, steps);
      uint64_t synced_bytes = 0;
      uint64_t last_sequence = 0;
      for (int i = 0; i < steps; ++i) {
        if (i == sync_at) {
          std::promise<bool> synced;
          p.meter->whenDurable(last_sequence, [&](bool ok) { synced.set_value(ok); });
          ASSERT_TRUE(synced.get_future().get());
          durable = acknowledged;
          const auto segs = fs::directory_iterator(journal);
          for (const auto& e : segs) synced_bytes = fs::file_size(e.path());
        }
        if (live.empty() || pick(0, 1) == 0) {
          UsageEvent draft;
          draft.id = "r" + std::to_string(round) + "-" + std::to_string(i);
          draft.tenant_id = "t";
          std::vector<std::string> wallets;
          for (int w = 0; w < 3; ++w) {
            if (pick(0, 1) == 0) wallets.push_back("w" + std::to_string(w));
          }
          auto seq = p.meter->reserve(draft, wallets, Money::fromNanos(pick(1, 90) * 10'000'000),
                                      std::chrono::minutes(5), {.fresh_id = true});
          if (seq) {
            last_sequence = *seq;
            live.push_back(draft.id);
            wallets_of[draft.id] = wallets;
          }
        } else {
          const size_t k = static_cast<size_t>(pick(0, static_cast<int>(live.size()) - 1));
          UsageEvent e;
          e.id = live[k];
          e.tenant_id = "t";
          e.cost = Money::fromNanos(pick(0, 120) * 10'000'000);
          auto s = p.meter->settle(e);
          ASSERT_TRUE(s.has_value()) << s.error().toString();
          last_sequence = s->journal_sequence;
          acknowledged[e.id] = e.cost;
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
      p.crash();
      // The machine goes down: what was not synced may be cut anywhere, or torn.
      for (const auto& e : fs::directory_iterator(journal)) {
        const uint64_t size = fs::file_size(e.path());
        const uint64_t cut =
            std::uniform_int_distribution<uint64_t>(std::min(synced_bytes, size), size)(rng);
        fs::resize_file(e.path(), cut);
        if (pick(0, 2) == 0 && cut < size) {
          std::ofstream tail(e.path(), std::ios::binary | std::ios::app);
          for (uint64_t b = cut; b < size; ++b) tail.put(static_cast<char>(rng()));
        }
      }
    }
    Process after(db, journal, clock, /*first=*/false);
    auto recovered = after.meter->recover();
    ASSERT_TRUE(recovered.has_value()) << recovered.error().toString();
    EXPECT_EQ(recovered->quarantined, 0);
    ASSERT_TRUE(after.meter->catchUp().has_value());
    std::map<std::string, std::pair<int64_t, int64_t>> events;
    std::map<std::string, int64_t> charged;  // wallet -> its spend on disk
    ASSERT_TRUE(after.store
                    ->read([&](store::Tx& tx) -> Result<void> {
                      for (const auto& r : PURSER_TRY_VALUE(tx.query(
                               "SELECT id, cost_nanos, overage_nanos FROM usage_events"))) {
                        events[r.getText(0)] = {r.getInt(1), r.getInt(2)};
                      }
                      for (const auto& r : PURSER_TRY_VALUE(tx.query(
                               "SELECT wallet_id, SUM(cost_nanos) FROM wallet_spend GROUP BY 1"))) {
                        charged[r.getText(0)] = r.getInt(1);
                      }
                      EXPECT_TRUE(PURSER_TRY_VALUE(tx.query("SELECT 1 FROM usage_intents")).empty())
                          << "every in-process intent was resolved";
                      return {};
                    })
                    .has_value());
    for (const auto& [id, cost] : durable) {
      auto it = events.find(id);
      ASSERT_NE(it, events.end()) << "settlement " << id << " was synced and is lost";
      EXPECT_EQ(it->second.first + it->second.second, cost.nanos()) << id;
      ++synced_settlements;
    }
    // What the wallets' spend on disk says is exactly what the recorded events cost them: no
    // charge without its event, no event without its charges.
    std::map<std::string, int64_t> from_events;
    for (const auto& [id, cost] : events) {
      for (const auto& w : wallets_of[id]) from_events[w] += cost.first;
    }
    for (const auto& spec : specs()) {
      EXPECT_EQ(charged[spec.id], from_events[spec.id]) << spec.id;
      auto st = after.book->status(spec.id);
      ASSERT_TRUE(st.has_value());
      EXPECT_EQ(st->spent.nanos(), charged[spec.id]) << spec.id << ": memory and disk disagree";
      if (spec.hard) {
        EXPECT_LE(st->spent, spec.limit) << spec.id << " past its limit";
      }
    }
  }
  RecordProperty("synced_settlements_checked", synced_settlements);
}

}  // namespace
}  // namespace purser::ledger
