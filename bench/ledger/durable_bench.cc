// bench/ledger: durable usage events per second. Each event is a reservation (write-ahead intent
// committed) and a settlement (event, charges and intent removal committed), as the gateway
// does, with many requests in flight so the store's group commit can batch them. Beside it, the
// baseline: the same writes committed one at a time (one fsync per commit).
//
//   durable_bench DIR [EVENTS] [IN_FLIGHT]    prints one JSON object
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include <future>

#include "ledger/ledger_store.h"
#include "ledger/meter.h"
#include "store/sqlite_store.h"

using namespace purser;

namespace {

std::unique_ptr<store::SqliteStore> openStore(const std::string& path) {
  std::filesystem::remove(path);
  auto s = store::SqliteStore::open({.path = path}, SystemClock::instance());
  if (!s) {
    std::fprintf(stderr, "%s\n", s.error().toString().c_str());
    std::exit(1);
  }
  if (!(*s)->migrate("ledger", ledger::ledgerMigrations())) std::exit(1);
  return std::move(*s);
}

ledger::WalletSpec tenantWallet() {
  ledger::WalletSpec w;
  w.id = "w";
  w.tenant_id = "t";
  w.scope = {ledger::ScopeKind::kTenant, "t"};
  w.limit = Money::max();
  return w;
}

// Group commit: up to `in_flight` events at once, each reserve -> settle through the Meter.
double groupCommit(const std::string& dir, int events, int in_flight) {
  auto store = openStore(dir + "/group.db");
  ledger::WalletBook book(SystemClock::instance());
  (void)book.put(tenantWallet());
  ledger::Meter meter(*store, book, SystemClock::instance());
  std::mutex mu;
  std::condition_variable cv;
  int started = 0, finished = 0, outstanding = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (finished < events) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return outstanding < in_flight || finished >= events; });
    if (started >= events) {
      cv.wait(lock, [&] { return finished >= events; });
      break;
    }
    const int n = started++;
    ++outstanding;
    lock.unlock();
    ledger::UsageEvent e;
    e.id = "e" + std::to_string(n);
    e.tenant_id = "t";
    meter.reserve(e, {"w"}, Money::fromNanos(1000), std::chrono::minutes(1),
                  [&, e](Result<void> r) mutable {
                    if (!r) std::abort();
                    e.cost = Money::fromNanos(700);
                    meter.settle(e, [&](Result<ledger::Settlement> s) {
                      if (!s) std::abort();
                      std::lock_guard done(mu);
                      ++finished;
                      --outstanding;
                      cv.notify_all();
                    });
                  });
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  store->close();
  return events / secs;
}

// Baseline: the same two commits per event, one after another.
double oneAtATime(const std::string& dir, int events) {
  auto store = openStore(dir + "/serial.db");
  ledger::WalletBook book(SystemClock::instance());
  (void)book.put(tenantWallet());
  ledger::Meter meter(*store, book, SystemClock::instance());
  const auto t0 = std::chrono::steady_clock::now();
  for (int n = 0; n < events; ++n) {
    ledger::UsageEvent e;
    e.id = "e" + std::to_string(n);
    e.tenant_id = "t";
    std::promise<void> reserved;
    meter.reserve(e, {"w"}, Money::fromNanos(1000), std::chrono::minutes(1), [&](Result<void> r) {
      if (!r) std::abort();
      reserved.set_value();
    });
    reserved.get_future().wait();
    e.cost = Money::fromNanos(700);
    std::promise<void> settled;
    meter.settle(e, [&](Result<ledger::Settlement> s) {
      if (!s) std::abort();
      settled.set_value();
    });
    settled.get_future().wait();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  store->close();
  return events / secs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: durable_bench DIR [EVENTS] [IN_FLIGHT]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int events = argc > 2 ? std::atoi(argv[2]) : 20000;
  const int in_flight = argc > 3 ? std::atoi(argv[3]) : 256;
  const double serial = oneAtATime(dir, std::max(200, events / 20));
  const double grouped = groupCommit(dir, events, in_flight);
  std::printf(
      "{\"durable_events_per_s_group_commit\": %.0f, \"durable_events_per_s_one_at_a_time\": %.0f,"
      " \"ratio\": %.1f, \"in_flight\": %d, \"cores\": %u}\n",
      grouped, serial, grouped / serial, in_flight, std::thread::hardware_concurrency());
  return 0;
}
