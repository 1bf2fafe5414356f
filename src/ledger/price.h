// Prices and the cost of usage, exact to the nano-unit.
//
// Token prices are per million tokens, per (provider, model). Token counts are disjoint kinds:
// `input` excludes cached input, `output` excludes reasoning, so a request's cost is the sum over
// kinds of count x price / 1,000,000, computed in 128 bits and rounded once. GPU time is priced
// per GPU-hour per flavor; shares of a GPU are counted in thousandths.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/money.h"
#include "common/result.h"

namespace purser::ledger {

struct TokenCounts {
  int64_t input = 0;
  int64_t output = 0;
  int64_t cached_input = 0;
  int64_t cache_write = 0;
  int64_t reasoning = 0;

  int64_t total() const { return input + output + cached_input + cache_write + reasoning; }
  friend bool operator==(const TokenCounts&, const TokenCounts&) = default;
};

struct TokenPrice {
  Money input;  // per million tokens
  Money output;
  Money cached_input;
  Money cache_write;
  Money reasoning;
};

// Cost of `tokens` at `price`. Reservations round up (never under-reserve); settlements round
// half to even. Errors: negative counts or prices, or a total beyond Money's range.
Result<Money> tokenCost(const TokenPrice& price, const TokenCounts& tokens, Rounding rounding);

// Cost of `gpu_milli` thousandths of a GPU for `duration` at `per_gpu_hour`.
Result<Money> gpuCost(Money per_gpu_hour, int64_t gpu_milli, Duration duration, Rounding rounding);

struct ModelPrice {
  std::string provider;
  std::string model;
  TokenPrice price;
};

struct GpuPrice {
  std::string flavor;
  Money per_gpu_hour;
};

// The price list: per (provider, model) token prices and per-flavor GPU-hour prices. Immutable
// once built, so it is shared freely between threads.
class PriceBook {
 public:
  PriceBook() = default;
  PriceBook(std::vector<ModelPrice> models, std::vector<GpuPrice> gpus);

  // The price of `model` from `provider`; with an empty provider, the first listed for the model.
  const TokenPrice* find(std::string_view provider, std::string_view model) const;
  const Money* gpu(std::string_view flavor) const;
  const std::vector<ModelPrice>& models() const { return models_; }
  const std::vector<GpuPrice>& gpus() const { return gpus_; }

 private:
  std::vector<ModelPrice> models_;
  std::vector<GpuPrice> gpus_;
};

}  // namespace purser::ledger
