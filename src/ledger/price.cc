#include "ledger/price.h"

#include <fmt/format.h>

namespace purser::ledger {

Result<Money> tokenCost(const TokenPrice& price, const TokenCounts& tokens, Rounding rounding) {
  const std::pair<int64_t, Money> parts[] = {{tokens.input, price.input},
                                             {tokens.output, price.output},
                                             {tokens.cached_input, price.cached_input},
                                             {tokens.cache_write, price.cache_write},
                                             {tokens.reasoning, price.reasoning}};
  __int128 total = 0;  // nano-units x tokens: each term < 2^63 * 2^63, five of them fit in 2^127
  for (const auto& [count, unit] : parts) {
    if (count < 0) return fail(invalidArgument("token counts cannot be negative"));
    if (unit.isNegative()) return fail(invalidArgument("prices cannot be negative"));
    total += static_cast<__int128>(count) * unit.nanos();
  }
  const __int128 nanos = divideRounded(total, 1'000'000, rounding);
  if (nanos > INT64_MAX) return fail(outOfRange("the cost exceeds the largest amount of money"));
  return Money::fromNanos(static_cast<int64_t>(nanos));
}

Result<Money> gpuCost(Money per_gpu_hour, int64_t gpu_milli, Duration duration, Rounding rounding) {
  if (gpu_milli < 0 || duration.count() < 0 || per_gpu_hour.isNegative()) {
    return fail(invalidArgument("GPU share, duration and price cannot be negative"));
  }
  // price x milli x ns / (1000 x 3600e9), exact in 128 bits for any realistic input.
  __int128 num = static_cast<__int128>(per_gpu_hour.nanos()) * gpu_milli;
  const __int128 limit =
      (static_cast<__int128>(1) << 126) / (duration.count() == 0 ? 1 : duration.count());
  if (num > limit) return fail(outOfRange("the GPU cost exceeds the largest amount of money"));
  num *= duration.count();
  const __int128 nanos =
      divideRounded(num, static_cast<__int128>(1000) * 3'600'000'000'000, rounding);
  if (nanos > INT64_MAX)
    return fail(outOfRange("the GPU cost exceeds the largest amount of money"));
  return Money::fromNanos(static_cast<int64_t>(nanos));
}

PriceBook::PriceBook(std::vector<ModelPrice> models, std::vector<GpuPrice> gpus)
    : models_(std::move(models)), gpus_(std::move(gpus)) {}

const TokenPrice* PriceBook::find(std::string_view provider, std::string_view model) const {
  for (const auto& m : models_) {
    if (m.model == model && (provider.empty() || m.provider == provider)) return &m.price;
  }
  return nullptr;
}

const Money* PriceBook::gpu(std::string_view flavor) const {
  for (const auto& g : gpus_) {
    if (g.flavor == flavor) return &g.per_gpu_hour;
  }
  return nullptr;
}

}  // namespace purser::ledger
