// Micro-benchmarks of hot-path pieces, each beside a baseline that does comparable work with
// the standard library, so bench/run can report ratios from one run.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <unordered_map>

#include "common/money.h"
#include "common/quantity.h"
#include "http/router.h"

namespace {

const char* const kAmounts[] = {"12.50", "0.000002", "9999.999999999", "-3.25", "0.15"};

void BM_MoneyParse(benchmark::State& state) {
  size_t i = 0;
  for (auto _ : state) {
    auto m = purser::Money::parse(kAmounts[i++ % 5]);
    benchmark::DoNotOptimize(m);
  }
}
BENCHMARK(BM_MoneyParse);

// Baseline: strtod parses the same text into an (inexact) double.
void BM_BaselineStrtod(benchmark::State& state) {
  size_t i = 0;
  for (auto _ : state) {
    double d = std::strtod(kAmounts[i++ % 5], nullptr);
    benchmark::DoNotOptimize(d);
  }
}
BENCHMARK(BM_BaselineStrtod);

const char* const kQuantities[] = {"500m", "2Gi", "1.5", "16Mi", "1e3"};

void BM_QuantityParse(benchmark::State& state) {
  size_t i = 0;
  for (auto _ : state) {
    auto q = purser::Quantity::parse(kQuantities[i++ % 5]);
    benchmark::DoNotOptimize(q);
  }
}
BENCHMARK(BM_QuantityParse);

purser::http::Router& router() {
  static purser::http::Router r = [] {
    purser::http::Router router;
    const char* paths[] = {
        "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models",
        "/v1/messages",         "/healthz",        "/readyz",        "/metrics"};
    for (const char* p : paths) {
      (void)router.add(purser::http::Method::kPost, p,
                       [](purser::http::Request&) { return purser::http::Response{}; });
    }
    (void)router.add(purser::http::Method::kGet, "/api/v1/keys/{id}",
                     [](purser::http::Request&) { return purser::http::Response{}; });
    return router;
  }();
  return r;
}

void BM_RouterMatchExact(benchmark::State& state) {
  purser::http::Request req;
  req.method = purser::http::Method::kPost;
  req.target = "/v1/chat/completions";
  for (auto _ : state) {
    auto m = router().match(req);
    benchmark::DoNotOptimize(m.route);
  }
}
BENCHMARK(BM_RouterMatchExact);

// Baseline: one hash lookup of the same path.
void BM_BaselineHashLookup(benchmark::State& state) {
  std::unordered_map<std::string, int> table = {
      {"/v1/chat/completions", 1}, {"/v1/models", 2}, {"/v1/embeddings", 3}, {"/healthz", 4}};
  const std::string path = "/v1/chat/completions";
  for (auto _ : state) {
    auto it = table.find(path);
    benchmark::DoNotOptimize(it);
  }
}
BENCHMARK(BM_BaselineHashLookup);

void BM_RouterMatchParam(benchmark::State& state) {
  purser::http::Request req;
  req.method = purser::http::Method::kGet;
  req.target = "/api/v1/keys/01jb5k9w1g6v5r0q3c2m8x7t4e";
  for (auto _ : state) {
    auto m = router().match(req);
    benchmark::DoNotOptimize(m.route);
  }
}
BENCHMARK(BM_RouterMatchParam);

}  // namespace

BENCHMARK_MAIN();
