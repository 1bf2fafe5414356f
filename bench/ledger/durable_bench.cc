// bench/ledger: durable usage events per second. Each event is a reservation (its write-ahead
// intent) and a settlement (the usage event and its charges), as the gateway makes them.
//
//   journal, batch    the Meter as `ledger.sync: batch` runs it: each record written to the
//                     journal on the caller's thread, synced every 5 ms and materialised into
//                     SQLite in the background (timed until all of it is in SQLite);
//   journal, always   `ledger.sync: always`: each settlement waits for the sync that covers it,
//                     IN_FLIGHT events at once (group commit);
//   baseline          what the ledger did before the journal: two SQLite commits per event
//                     (intent, then event) through the store's group-committing writer, IN_FLIGHT
//                     events at once.
//
//   durable_bench DIR [EVENTS] [IN_FLIGHT]    prints one JSON object
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "ledger/ledger_store.h"
#include "ledger/meter.h"
#include "store/sqlite_store.h"

using namespace purser;

namespace {

std::unique_ptr<store::SqliteStore> openStore(const std::string& path) {
  std::filesystem::remove(path);
  std::filesystem::remove_all(path + ".journal");
  auto s = store::SqliteStore::open({.path = path}, SystemClock::instance());
  if (!s) {
    std::fprintf(stderr, "%s\n", s.error().toString().c_str());
    std::exit(1);
  }
  if (!(*s)->migrate("ledger", ledger::ledgerMigrations())) std::exit(1);
  return std::move(*s);
}

std::unique_ptr<ledger::Meter> openMeter(store::Store& store, ledger::WalletBook& book,
                                         const std::string& journal, ledger::SyncMode mode) {
  ledger::WalletSpec w;
  w.id = "w";
  w.tenant_id = "t";
  w.scope = {ledger::ScopeKind::kTenant, "t"};
  w.limit = Money::max();
  (void)book.put(w);
  auto m = ledger::Meter::open(store, book, SystemClock::instance(), nullptr,
                               {.dir = journal, .sync = mode});
  if (!m) {
    std::fprintf(stderr, "%s\n", m.error().toString().c_str());
    std::exit(1);
  }
  return std::move(*m);
}

double seconds(MonoTime since) {
  return std::chrono::duration<double>(SystemClock::instance().monotonic() - since).count();
}

ledger::UsageEvent event(int n) {
  ledger::UsageEvent e;
  e.id = "e" + std::to_string(n);
  e.tenant_id = "t";
  e.user_id = "u";
  e.key_id = "k";
  e.route = "chat";
  e.provider = "p";
  e.model = "m";
  e.tokens = {120, 16, 0, 0, 0};
  return e;
}

// Runs `start(n, done)` for n in [0, events) with at most `in_flight` outstanding.
double windowed(int events, int in_flight,
                const std::function<void(int, std::function<void()>)>& start) {
  std::mutex mu;
  std::condition_variable cv;
  int started = 0, finished = 0;
  const MonoTime t0 = SystemClock::instance().monotonic();
  std::unique_lock lock(mu);
  while (finished < events) {
    cv.wait(lock, [&] { return started - finished < in_flight || started >= events; });
    if (started >= events) {
      cv.wait(lock, [&] { return finished >= events; });
      break;
    }
    const int n = started++;
    lock.unlock();
    start(n, [&] {
      std::lock_guard g(mu);
      ++finished;
      cv.notify_all();
    });
    lock.lock();
  }
  return events / seconds(t0);
}

double journalBatch(const std::string& dir, int events) {
  auto store = openStore(dir + "/batch.db");
  ledger::WalletBook book(SystemClock::instance());
  auto meter = openMeter(*store, book, dir + "/batch.db.journal", ledger::SyncMode::kBatch);
  const MonoTime t0 = SystemClock::instance().monotonic();
  for (int n = 0; n < events; ++n) {
    ledger::UsageEvent e = event(n);
    if (!meter->reserve(e, {"w"}, Money::fromNanos(1000), std::chrono::minutes(1),
                        {.fresh_id = true})) {
      std::abort();
    }
    e.cost = Money::fromNanos(700);
    if (!meter->settle(e)) std::abort();
  }
  if (!meter->catchUp()) std::abort();  // all of it in SQLite
  const double rate = events / seconds(t0);
  meter->close();
  store->close();
  return rate;
}

double journalAlways(const std::string& dir, int events, int in_flight) {
  auto store = openStore(dir + "/always.db");
  ledger::WalletBook book(SystemClock::instance());
  auto meter = openMeter(*store, book, dir + "/always.db.journal", ledger::SyncMode::kAlways);
  const double rate = windowed(events, in_flight, [&](int n, std::function<void()> done) {
    ledger::UsageEvent e = event(n);
    if (!meter->reserve(e, {"w"}, Money::fromNanos(1000), std::chrono::minutes(1),
                        {.fresh_id = true})) {
      std::abort();
    }
    e.cost = Money::fromNanos(700);
    auto s = meter->settle(e);
    if (!s) std::abort();
    meter->whenDurable(s->journal_sequence, [done](bool ok) {
      if (!ok) std::abort();
      done();
    });
  });
  meter->close();
  store->close();
  return rate;
}

double twoCommits(const std::string& dir, int events, int in_flight) {
  auto store = openStore(dir + "/commits.db");
  const double rate = windowed(events, in_flight, [&](int n, std::function<void()> done) {
    const ledger::UsageEvent e = event(n);
    store->writeAsync(
        [e](store::Tx& tx) -> Result<void> {
          PURSER_TRY(
              tx.exec("INSERT INTO usage_intents (event_id, at_ms, amount_nanos, wallets, event,"
                      " expires_at_ms, external) VALUES ($1, 0, 1000, '[\"w\"]', '{}', 0, 0)",
                      {e.id}));
          return {};
        },
        [&store, e, done](Result<void> r) {
          if (!r) std::abort();
          store->writeAsync(
              [e](store::Tx& tx) -> Result<void> {
                PURSER_TRY(tx.exec(
                    "INSERT INTO usage_events (id, at_ms, tenant_id, team_id, user_id,"
                    " service_account_id, key_id, session_id, route, provider, model,"
                    " input_tokens, output_tokens, cached_input_tokens, cache_write_tokens,"
                    " reasoning_tokens, cost_nanos, latency_ms, ttft_ms, status, estimated,"
                    " recovered) VALUES ($1, 0, 't', '', 'u', '', 'k', '', 'chat', 'p', 'm', 120,"
                    " 16, 0, 0, 0, 700, 0, 0, 200, 0, 0)",
                    {e.id}));
                PURSER_TRY(
                    tx.exec("INSERT INTO wallet_spend (wallet_id, minute, cost_nanos) VALUES"
                            " ('w', 0, 700) ON CONFLICT (wallet_id, minute) DO UPDATE SET"
                            " cost_nanos = cost_nanos + excluded.cost_nanos"));
                PURSER_TRY(tx.exec("DELETE FROM usage_intents WHERE event_id = $1", {e.id}));
                return {};
              },
              [done](Result<void> r2) {
                if (!r2) std::abort();
                done();
              });
        });
  });
  store->close();
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: durable_bench DIR [EVENTS] [IN_FLIGHT]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int events = argc > 2 ? std::atoi(argv[2]) : 20000;
  const int in_flight = argc > 3 ? std::atoi(argv[3]) : 64;
  const double baseline = twoCommits(dir, events, in_flight);
  const double always = journalAlways(dir, events, in_flight);
  const double batch = journalBatch(dir, events);
  std::printf(
      "{\"events_per_s_journal_batch\": %.0f, \"events_per_s_journal_always\": %.0f,"
      " \"events_per_s_two_commits\": %.0f, \"batch_vs_two_commits\": %.1f,"
      " \"always_vs_two_commits\": %.1f, \"in_flight\": %d, \"cores\": %u}\n",
      batch, always, baseline, batch / baseline, always / baseline, in_flight,
      std::thread::hardware_concurrency());
  return 0;
}
