// The money's invariants under random interleavings, over a real SQLite store: reserve, settle
// (any amount: below the hold, above it, after its lease ended, twice), release, expire, a
// graceful restart, and a crash that cuts off in-process work. After every step:
//   - no hard wallet has been charged past its limit, in memory or on disk;
//   - what is held equals what is outstanding (nothing is reserved once nothing is);
//   - every acknowledged settlement is on disk exactly once, and what it did not charge is its
//     overage (cost + overage = what the caller said it cost);
//   - the intents on disk are exactly the holds still live.
// Cases and steps are bounded by count, not time; PURSER_PROPERTY_CASES raises the count for
// long runs (make test-long).
#include <gtest/gtest.h>

#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "fakes/temp_dir.h"
#include "ledger/ledger_store.h"
#include "ledger/meter.h"
#include "store/sqlite_store.h"

namespace purser {
// Money in failure messages as "1.50", not bytes.
inline void PrintTo(const Money& m, std::ostream* os) { *os << m.toString(); }
}  // namespace purser

namespace purser::ledger {
namespace {

struct Hold {
  std::vector<std::string> wallets;
  Money amount;
  bool external = false;
};

struct Acknowledged {
  Money cost;  // what the caller said it cost
};

int casesFromEnv(int fallback) {
  const char* v = std::getenv("PURSER_PROPERTY_CASES");
  if (v == nullptr) return fallback;
  const int n = std::atoi(v);
  return n > 0 ? n : fallback;
}

class MoneyModel {
 public:
  MoneyModel(uint64_t seed, const std::string& path, const std::string& journal)
      : rng_(seed), path_(path), journal_(journal) {
    std::uniform_int_distribution<int64_t> limit(1, 6);
    for (int i = 0; i < 4; ++i) {
      WalletSpec w;
      w.id = "w" + std::to_string(i);
      w.tenant_id = "t";
      w.scope = {ScopeKind::kUser, "u" + std::to_string(i)};
      w.limit = *Money::fromUnits(limit(rng_));
      w.hard = i != 3;  // w3 is soft
      w.alert_at = {};
      specs_.push_back(w);
    }
    open(/*first=*/true);
  }

  ~MoneyModel() {
    if (meter_) meter_->close();
    if (store_) store_->close();
  }

  int steps() const { return steps_; }

  void step() {
    ++steps_;
    const int op = pick(0, 99);
    if (op < 33) {
      reserve();
    } else if (op < 63) {
      settle();
    } else if (op < 70) {
      chargeAfterwards();
    } else if (op < 78) {
      release();
    } else if (op < 90) {
      clock_.advance(std::chrono::seconds(pick(0, 40)));
      for (const auto& id : meter_->expireLeases()) {
        ASSERT_TRUE(live_.contains(id)) << id;
        expired_.insert(id);
        live_.erase(id);
      }
    } else if (op < 95) {
      restart(/*crash=*/false);
    } else {
      restart(/*crash=*/true);
    }
  }

  void check() {
    // Reads of the store see the journal once it has caught up.
    ASSERT_TRUE(meter_->catchUp().has_value());
    std::map<std::string, Money> held;
    for (const auto& [id, h] : live_) {
      for (const auto& w : h.wallets) held[w] = *held[w].add(h.amount);
    }
    for (const auto& spec : specs_) {
      auto st = book_->status(spec.id);
      ASSERT_TRUE(st.has_value());
      if (spec.hard) {
        EXPECT_LE(st->spent, spec.limit) << spec.id << " charged past its limit in memory";
      }
      EXPECT_EQ(st->reserved, held[spec.id]) << spec.id << " holds what is not outstanding";
      Money on_disk;
      ASSERT_TRUE(store_
                      ->read([&](store::Tx& tx) -> Result<void> {
                        on_disk = PURSER_TRY_VALUE(spentSince(tx, spec.id, SystemTime::min()));
                        return {};
                      })
                      .has_value());
      EXPECT_EQ(on_disk, st->spent) << spec.id << ": memory and disk disagree";
      if (spec.hard) {
        EXPECT_LE(on_disk, spec.limit) << spec.id << " charged past its limit";
      }
    }
    EXPECT_EQ(book_->outstanding(), live_.size());
    std::map<std::string, std::pair<int64_t, int64_t>> events;  // id -> (cost, overage)
    std::set<std::string> intents;
    ASSERT_TRUE(
        store_
            ->read([&](store::Tx& tx) -> Result<void> {
              for (const auto& r : PURSER_TRY_VALUE(
                       tx.query("SELECT id, cost_nanos, overage_nanos FROM usage_events"))) {
                EXPECT_TRUE(
                    events.emplace(r.getText(0), std::pair{r.getInt(1), r.getInt(2)}).second)
                    << "event " << r.getText(0) << " twice";
              }
              for (const auto& r :
                   PURSER_TRY_VALUE(tx.query("SELECT event_id FROM usage_intents"))) {
                intents.insert(r.getText(0));
              }
              return {};
            })
            .has_value());
    for (const auto& [id, ack] : acknowledged_) {
      auto it = events.find(id);
      ASSERT_NE(it, events.end()) << "acknowledged event " << id << " is lost";
      EXPECT_EQ(it->second.first + it->second.second, ack.cost.nanos())
          << id << ": cost and overage must add up to what it cost";
    }
    std::set<std::string> live_ids;
    for (const auto& [id, h] : live_) live_ids.insert(id);
    EXPECT_EQ(intents, live_ids) << "intents on disk are the live holds";
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  Money money(int64_t max_cents) {
    return Money::fromNanos(std::uniform_int_distribution<int64_t>(0, max_cents)(rng_) *
                            10'000'000);
  }

  void open(bool first) {
    auto s = store::SqliteStore::open({.path = path_}, clock_);
    ASSERT_TRUE(s.has_value()) << s.error().toString();
    store_ = std::move(*s);
    ASSERT_TRUE(store_->migrate("ledger", ledgerMigrations()).has_value());
    ASSERT_TRUE(store_->migrate("audit", AuditLog::migrations()).has_value());
    book_ = std::make_unique<WalletBook>(clock_);
    auto m = Meter::open(*store_, *book_, clock_, &audit_, {.dir = journal_});
    ASSERT_TRUE(m.has_value()) << m.error().toString();
    meter_ = std::move(*m);
    for (const auto& spec : specs_) {
      if (first) {
        ASSERT_TRUE(store_->write([&](store::Tx& tx) { return insertWallet(tx, spec, "now"); })
                        .has_value());
      }
      Money spent;
      ASSERT_TRUE(store_
                      ->read([&](store::Tx& tx) -> Result<void> {
                        spent = PURSER_TRY_VALUE(spentSince(tx, spec.id, SystemTime::min()));
                        return {};
                      })
                      .has_value());
      ASSERT_TRUE(book_->put(spec, spent).has_value());
    }
  }

  void reserve() {
    std::string id;
    const bool reuse = !acknowledged_.empty() && pick(0, 9) == 0;
    if (reuse) {
      auto it = acknowledged_.begin();
      std::advance(it, pick(0, static_cast<int>(acknowledged_.size()) - 1));
      id = it->first;
    } else {
      id = "e" + std::to_string(next_id_++);
    }
    Hold h;
    for (const auto& spec : specs_) {
      if (pick(0, 1) == 0) h.wallets.push_back(spec.id);
    }
    h.amount = money(300);
    h.external = pick(0, 1) == 0;
    UsageEvent draft;
    draft.id = id;
    draft.tenant_id = "t";
    auto r = meter_->reserve(draft, h.wallets, h.amount, std::chrono::seconds(pick(1, 60)),
                             {.external = h.external});
    if (reuse) {
      EXPECT_FALSE(r.has_value()) << "an acknowledged id " << id << " was reserved again";
      return;
    }
    if (r) live_.emplace(id, std::move(h));
  }

  void settle() {
    std::vector<std::string> candidates;
    if (!expired_.empty() && pick(0, 1) == 0) {
      // Late settlements, after the room their hold gave back may have been taken.
      for (const auto& id : expired_) candidates.push_back(id);
    } else {
      for (const auto& [id, h] : live_) candidates.push_back(id);
      for (const auto& id : expired_) candidates.push_back(id);
      for (const auto& [id, a] : acknowledged_) candidates.push_back(id);  // a retried settle
    }
    if (candidates.empty()) return;
    const std::string id =
        candidates[static_cast<size_t>(pick(0, static_cast<int>(candidates.size()) - 1))];
    UsageEvent e;
    e.id = id;
    e.tenant_id = "t";
    e.cost = money(600);  // up to twice the largest hold
    auto r = meter_->settle(e);
    if (!r) {
      // Only a reservation this process never knew may be refused (an expiry it forgot at a
      // restart).
      EXPECT_EQ(r.error().code, ErrorCode::kNotFound) << r.error().toString();
      EXPECT_FALSE(live_.contains(id)) << "a live hold could not be settled";
      expired_.erase(id);
      return;
    }
    if (r->duplicate) {
      EXPECT_TRUE(acknowledged_.contains(id)) << id;
      return;
    }
    EXPECT_FALSE(acknowledged_.contains(id)) << id << " charged twice";
    EXPECT_EQ(*r->charged.add(r->overage), e.cost);
    live_.erase(id);
    expired_.erase(id);
    acknowledged_[id] = {e.cost};
  }

  // Usage known only after it ran (GPU time): charged without a hold, recorded with the
  // caller's own write.
  void chargeAfterwards() {
    UsageEvent e;
    e.id = "g" + std::to_string(next_id_++);
    e.tenant_id = "t";
    e.cost = money(300);
    std::vector<std::string> wallets;
    for (const auto& spec : specs_) {
      if (pick(0, 1) == 0) wallets.push_back(spec.id);
    }
    auto charged = meter_->charge(e, wallets);
    ASSERT_TRUE(charged.has_value()) << charged.error().toString();
    EXPECT_EQ(*charged->charged.add(charged->overage), e.cost);
    ASSERT_TRUE(store_->write(charged->write).has_value());
    acknowledged_[e.id] = {e.cost};
  }

  void release() {
    if (live_.empty()) return;
    auto it = live_.begin();
    std::advance(it, pick(0, static_cast<int>(live_.size()) - 1));
    EXPECT_TRUE(meter_->release(it->first).has_value());
    live_.erase(it);
  }

  // A graceful restart drains in-process work first; a crash leaves it to recovery.
  void restart(bool crash) {
    if (!crash) {
      for (auto it = live_.begin(); it != live_.end();) {
        if (it->second.external) {
          ++it;
          continue;
        }
        EXPECT_TRUE(meter_->release(it->first).has_value());
        it = live_.erase(it);
      }
    }
    // A crash kills the process: what the journal holds stays in its files, unapplied.
    if (crash) {
      meter_->abandon();
    } else {
      meter_->close();
    }
    store_->close();
    meter_.reset();
    book_.reset();
    store_.reset();
    expired_.clear();  // a new process remembers no expired lease
    open(/*first=*/false);
    auto recovered = meter_->recover();
    ASSERT_TRUE(recovered.has_value()) << recovered.error().toString();
    EXPECT_EQ(recovered->quarantined, 0);
    std::set<std::string> restored;
    for (const auto& r : recovered->reservations) restored.insert(r.draft.id);
    for (auto it = live_.begin(); it != live_.end();) {
      if (restored.contains(it->first)) {
        ++it;
        continue;
      }
      // In-process work cut off by the crash is charged by the recovery rule (a recorded event,
      // not a settlement anyone was told of); an external hold that no longer fits is too.
      EXPECT_TRUE(crash || it->second.external) << it->first;
      it = live_.erase(it);
    }
  }

  std::mt19937_64 rng_;
  std::string path_;
  std::string journal_;
  ManualClock clock_;
  AuditLog audit_{clock_};
  std::vector<WalletSpec> specs_;
  std::unique_ptr<store::SqliteStore> store_;
  std::unique_ptr<WalletBook> book_;
  std::unique_ptr<Meter> meter_;
  std::map<std::string, Hold> live_;
  std::set<std::string> expired_;
  std::map<std::string, Acknowledged> acknowledged_;
  int next_id_ = 0;
  int steps_ = 0;
};

TEST(MoneyPropertyTest, NoInterleavingOverspendsLosesOrDoubleCharges) {
  const int cases = casesFromEnv(16);
  int steps = 0;
  for (int c = 0; c < cases; ++c) {
    testing::TempDir dir;
    MoneyModel model(static_cast<uint64_t>(c) + 1, dir.file("ledger.db"), dir.file("journal"));
    for (int i = 0; i < 150; ++i) {
      model.step();
      model.check();
      if (HasFatalFailure() || HasNonfatalFailure()) {
        FAIL() << "case " << c << " (seed " << c + 1 << "), step " << i;
      }
    }
    steps += model.steps();
  }
  RecordProperty("steps", steps);
  std::printf("money property: %d cases, %d steps, 0 violations\n", cases, steps);
}

}  // namespace
}  // namespace purser::ledger
