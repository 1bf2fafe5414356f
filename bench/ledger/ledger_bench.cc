// bench/ledger: reserve + settle on WalletBook (a chain of three wallets, as a user's request
// has: tenant, team, user), on 1 and 2 threads, beside a baseline that does the least any
// correct implementation must: three mutex-guarded additions and three subtractions.
#include <benchmark/benchmark.h>

#include <atomic>
#include <mutex>
#include <string>

#include "ledger/wallet_book.h"

namespace {

using purser::Money;
using namespace purser::ledger;

WalletBook& book() {
  static purser::ManualClock clock;
  static WalletBook* b = [] {
    auto* w = new WalletBook(clock);  // lives for the whole run
    for (const char* id : {"tenant", "team", "user"}) {
      WalletSpec s;
      s.id = id;
      s.tenant_id = "t";
      s.scope = {ScopeKind::kTenant, id};
      s.limit = Money::max();
      (void)w->put(s);
    }
    return w;
  }();
  return *b;
}

std::atomic<uint64_t> g_next{0};

void BM_ReserveSettle(benchmark::State& state) {
  WalletBook& b = book();
  const std::vector<std::string> chain = {"tenant", "team", "user"};
  const Money amount = Money::fromNanos(1'000'000);
  for (auto _ : state) {
    const std::string id = std::to_string(g_next.fetch_add(1));
    if (!b.reserve({id, chain, amount})) state.SkipWithError("reserve failed");
    if (!b.settle(id, Money::fromNanos(600'000))) state.SkipWithError("settle failed");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ReserveSettle)->Threads(1)->Threads(2)->UseRealTime();

std::mutex g_mu;
int64_t g_wallets[3];

void BM_BaselineMutexArithmetic(benchmark::State& state) {
  for (auto _ : state) {
    {
      std::lock_guard lock(g_mu);
      for (auto& w : g_wallets) w += 1'000'000;
    }
    {
      std::lock_guard lock(g_mu);
      for (auto& w : g_wallets) w -= 400'000;
    }
    benchmark::DoNotOptimize(g_wallets);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BaselineMutexArithmetic)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
