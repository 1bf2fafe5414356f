#include "gateway/routing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace purser::gateway {

namespace {
constexpr int kFailuresBeforeCooldown = 3;
constexpr std::chrono::seconds kFirstCooldown{30};
constexpr std::chrono::minutes kLongestCooldown{5};

std::string withoutTrailingSlash(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

int64_t ns(MonoTime t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

Result<Strategy> parseStrategy(std::string_view name) {
  if (name == "fallback") return Strategy::kFallback;
  if (name == "weighted") return Strategy::kWeighted;
  if (name == "least_latency") return Strategy::kLeastLatency;
  if (name == "least_cost") return Strategy::kLeastCost;
  if (name == "least_loaded") return Strategy::kLeastLoaded;
  if (name == "slo") return Strategy::kSlo;
  return fail(invalidArgument(fmt::format(
      "unknown strategy \"{}\"; expected fallback, weighted, least_latency, least_cost, "
      "least_loaded or slo",
      name)));
}

std::string_view strategyName(Strategy s) {
  switch (s) {
    case Strategy::kFallback:
      return "fallback";
    case Strategy::kWeighted:
      return "weighted";
    case Strategy::kLeastLatency:
      return "least_latency";
    case Strategy::kLeastCost:
      return "least_cost";
    case Strategy::kLeastLoaded:
      return "least_loaded";
    case Strategy::kSlo:
      return "slo";
  }
  return "fallback";
}

Provider::Provider(std::string name, ProviderKind kind, std::string base_url,
                   std::vector<std::string> keys, Duration timeout, Duration connect_timeout,
                   ProviderLimits limits)
    : name_(std::move(name)),
      kind_(kind),
      base_url_(withoutTrailingSlash(std::move(base_url))),
      timeout_(timeout),
      connect_timeout_(connect_timeout),
      limits_(limits),
      keys_(keys),
      configured_keys_(std::move(keys)) {}

std::string Provider::nextKey() {
  std::lock_guard lock(mu_);
  if (keys_.empty()) return {};
  return keys_[next_++ % keys_.size()];
}

void Provider::replaceKeys(std::vector<std::string> keys) {
  std::lock_guard lock(mu_);
  keys_ = std::move(keys);
  replaced_ = true;
  next_ = 0;
}

void Provider::clearReplacedKeys() {
  std::lock_guard lock(mu_);
  keys_ = configured_keys_;
  replaced_ = false;
  next_ = 0;
}

void Provider::setConfiguredKeys(std::vector<std::string> keys) {
  std::lock_guard lock(mu_);
  configured_keys_ = std::move(keys);
  if (!replaced_) {
    keys_ = configured_keys_;
    next_ = 0;
  }
}

bool Provider::keysReplaced() const {
  std::lock_guard lock(mu_);
  return replaced_;
}

size_t Provider::keyCount() const {
  std::lock_guard lock(mu_);
  return keys_.size();
}

bool allowsTenant(const Route& route, const std::string& tenant_id) {
  return route.allow_tenants.empty() ||
         std::find(route.allow_tenants.begin(), route.allow_tenants.end(), tenant_id) !=
             route.allow_tenants.end();
}

bool allowsTeam(const Route& route, const std::string& team_id) {
  return route.allow_teams.empty() || std::find(route.allow_teams.begin(), route.allow_teams.end(),
                                                team_id) != route.allow_teams.end();
}

bool coolingDown(const Target& t, MonoTime now) {
  return t.health.cooldown_until_ns.load(std::memory_order_relaxed) > ns(now);
}

void LatencyWindow::record(MonoTime at, Duration latency) {
  std::lock_guard lock(mu_);
  ring_[next_] = {at, std::chrono::duration<double>(latency).count()};
  next_ = (next_ + 1) % kCapacity;
  size_ = std::min(size_ + 1, kCapacity);
}

std::pair<std::optional<double>, size_t> LatencyWindow::quantile(double q, MonoTime since) const {
  std::vector<double> values;
  {
    std::lock_guard lock(mu_);
    values.reserve(size_);
    for (size_t i = 0; i < size_; ++i) {
      if (ring_[i].first >= since) values.push_back(ring_[i].second);
    }
  }
  if (values.empty()) return {std::nullopt, 0};
  // The nearest rank: the smallest value with at least q of the values at or below it.
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  const size_t k = std::clamp<size_t>(rank, 1, values.size()) - 1;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return {values[k], values.size()};
}

void recordSuccess(Target& t, Duration latency) {
  t.health.consecutive_failures.store(0, std::memory_order_relaxed);
  t.health.cooldown_until_ns.store(0, std::memory_order_relaxed);
  t.health.cooldown_ns.store(0, std::memory_order_relaxed);
  const int64_t us =
      std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::microseconds>(latency).count());
  // Moving average with weight 1/5 for the newest sample; the first sample is taken as it is.
  int64_t old = t.health.ewma_latency_us.load(std::memory_order_relaxed);
  int64_t next;
  do {
    next = old == 0 ? us : old + (us - old) / 5;
  } while (!t.health.ewma_latency_us.compare_exchange_weak(old, next, std::memory_order_relaxed));
}

bool recordFailure(Target& t, MonoTime now) {
  const int failures = t.health.consecutive_failures.fetch_add(1, std::memory_order_relaxed) + 1;
  if (failures < kFailuresBeforeCooldown) return false;
  const int64_t previous = t.health.cooldown_ns.load(std::memory_order_relaxed);
  const int64_t length = std::min<int64_t>(
      previous == 0 ? std::chrono::nanoseconds(kFirstCooldown).count() : previous * 2,
      std::chrono::nanoseconds(kLongestCooldown).count());
  t.health.cooldown_ns.store(length, std::memory_order_relaxed);
  t.health.cooldown_until_ns.store(ns(now) + length, std::memory_order_relaxed);
  t.health.consecutive_failures.store(0, std::memory_order_relaxed);
  return true;
}

void ServedTargets::join(const std::string& id, std::unique_ptr<Provider> provider,
                         std::string model, const ledger::TokenPrice* price,
                         std::string owner_tenant) {
  std::lock_guard lock(mu_);
  Entry& e = entries_[id];
  if (!e.target) {
    e.target = std::make_unique<Target>();
    e.target->vouched = false;  // members' code: its usage is checked, never believed as it is
    e.target->owner_tenant = std::move(owner_tenant);
  }
  // A replica may come back elsewhere (another port after a restart): the new provider serves
  // it; the old one stays alive for any request still holding it.
  e.target->provider = provider.get();
  providers_.push_back(std::move(provider));
  e.target->model = std::move(model);
  e.target->price = price;
  e.serving = true;
  e.joined = ++joins_;
}

void ServedTargets::leave(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it != entries_.end()) it->second.serving = false;
}

int64_t ServedTargets::inFlight(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? 0 : it->second.target->health.in_flight.load();
}

std::vector<Target*> ServedTargets::serving() const {
  std::vector<std::pair<int64_t, Target*>> joined;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, e] : entries_) {
      if (e.serving) joined.emplace_back(e.joined, e.target.get());
    }
  }
  std::sort(joined.begin(), joined.end());
  std::vector<Target*> out;
  for (const auto& [at, t] : joined) out.push_back(t);
  return out;
}

void ReloadedTargets::set(std::vector<Target*> order, std::vector<std::unique_ptr<Target>> added) {
  std::lock_guard lock(mu_);
  for (auto& t : added) added_.push_back(std::move(t));
  lists_.push_back(std::make_unique<std::vector<Target*>>(std::move(order)));
  current_.store(lists_.back().get(), std::memory_order_release);
}

std::vector<Target*> ReloadedTargets::added() const {
  std::lock_guard lock(mu_);
  std::vector<Target*> out;
  out.reserve(added_.size());
  for (const auto& t : added_) out.push_back(t.get());
  return out;
}

std::vector<Target*> configuredTargets(const Route& route) {
  if (route.reloaded) {
    if (const std::vector<Target*>* now = route.reloaded->current()) return *now;
  }
  std::vector<Target*> out;
  out.reserve(route.targets.size());
  for (const auto& t : route.targets) out.push_back(t.get());
  return out;
}

std::vector<Target*> allTargets(const Route& route) {
  std::vector<Target*> out = configuredTargets(route);
  if (route.served) {
    for (Target* t : route.served->serving()) out.push_back(t);
  }
  return out;
}

std::vector<Target*> orderTargets(const Route& route, MonoTime now, Random& random,
                                  std::span<const uint64_t> prompt_blocks) {
  std::vector<Target*> order = allTargets(route);
  switch (route.strategy.load(std::memory_order_relaxed)) {
    case Strategy::kFallback:
      break;
    case Strategy::kWeighted: {
      // Weighted sampling without replacement: the first pick follows the weights exactly.
      std::vector<Target*> rest = order;
      order.clear();
      while (!rest.empty()) {
        int64_t total = 0;
        for (Target* t : rest) {
          total += std::max<int64_t>(t->weight.load(std::memory_order_relaxed), 0);
        }
        size_t pick = 0;
        if (total > 0) {
          int64_t r = static_cast<int64_t>(random.uniform(static_cast<uint64_t>(total)));
          for (size_t i = 0; i < rest.size(); ++i) {
            r -= std::max<int64_t>(rest[i]->weight.load(std::memory_order_relaxed), 0);
            if (r < 0) {
              pick = i;
              break;
            }
          }
        }
        order.push_back(rest[pick]);
        rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(pick));
      }
      break;
    }
    case Strategy::kLeastLatency: {
      // A target not measured yet (a replica that just joined) goes behind every measured one:
      // it has not earned a latency, and reporting none must not win it the traffic.
      const auto latency = [](const Target* t) -> int64_t {
        const int64_t us = t->health.ewma_latency_us.load(std::memory_order_relaxed);
        return us > 0 ? us : INT64_MAX;
      };
      std::stable_sort(order.begin(), order.end(),
                       [&](const Target* a, const Target* b) { return latency(a) < latency(b); });
      break;
    }
    case Strategy::kLeastCost: {
      const auto cost = [](const Target* t) -> __int128 {
        if (t->price == nullptr) return static_cast<__int128>(INT64_MAX) * 2;  // unpriced: last
        return static_cast<__int128>(t->price->input.nanos()) + t->price->output.nanos();
      };
      std::stable_sort(order.begin(), order.end(),
                       [&](const Target* a, const Target* b) { return cost(a) < cost(b); });
      break;
    }
    case Strategy::kLeastLoaded:
      std::stable_sort(order.begin(), order.end(), [](const Target* a, const Target* b) {
        return a->health.in_flight.load(std::memory_order_relaxed) <
               b->health.in_flight.load(std::memory_order_relaxed);
      });
      break;
    case Strategy::kSlo: {
      std::vector<Candidate> candidates(order.size());
      for (size_t i = 0; i < order.size(); ++i) {
        const Target& t = *order[i];
        const double queue = t.observed.queue.load(std::memory_order_relaxed);
        const double kv = t.observed.kv_cache_usage.load(std::memory_order_relaxed);
        candidates[i] = {
            .in_flight = static_cast<double>(t.health.in_flight.load(std::memory_order_relaxed)),
            .queue = queue >= 0 ? std::optional<double>(queue) : std::nullopt,
            .kv_cache = kv >= 0 ? std::optional<double>(kv) : std::nullopt,
            .prefix_matched = prompt_blocks.empty() ? 0 : t.prefixes.match(prompt_blocks)};
      }
      const std::vector<double> scores = affinityScores(candidates, prompt_blocks.size());
      // Equal scores (an idle fleet, a cold prompt) are broken by a random rotation, so that
      // they spread; one draw per decision.
      const size_t n = order.size();
      const size_t offset = n > 1 ? static_cast<size_t>(random.uniform(n)) : 0;
      std::vector<size_t> index(n);
      for (size_t i = 0; i < n; ++i) index[i] = (i + offset) % n;
      std::stable_sort(index.begin(), index.end(),
                       [&](size_t a, size_t b) { return scores[a] > scores[b]; });
      std::vector<Target*> sorted;
      sorted.reserve(n);
      for (size_t i : index) sorted.push_back(order[i]);
      order = std::move(sorted);
      break;
    }
  }
  // Saturated targets after the rest, then those down or cooling down, each still in strategy
  // order: tried only when all else is busy or has failed.
  const auto rank = [&](const Target* t) {
    if (coolingDown(*t, now)) return 2;
    switch (t->observed.condition.load(std::memory_order_relaxed)) {
      case Condition::kDown:
        return 2;
      case Condition::kSaturated:
        return 1;
      default:
        return 0;
    }
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](const Target* a, const Target* b) { return rank(a) < rank(b); });
  return order;
}

std::string_view conditionName(Condition c) {
  switch (c) {
    case Condition::kUnknown:
      return "unknown";
    case Condition::kHealthy:
      return "healthy";
    case Condition::kDegraded:
      return "degraded";
    case Condition::kSaturated:
      return "saturated";
    case Condition::kDown:
      return "down";
  }
  return "unknown";
}

void TargetObserved::set(Condition c, Facts facts) {
  queue.store(facts.queue.value_or(-1), std::memory_order_relaxed);
  kv_cache_usage.store(facts.kv_cache_usage.value_or(-1), std::memory_order_relaxed);
  since.store(0, std::memory_order_relaxed);
  {
    std::lock_guard lock(mu_);
    facts_ = std::move(facts);
  }
  condition.store(c, std::memory_order_relaxed);
}

TargetObserved::Facts TargetObserved::facts() const {
  std::lock_guard lock(mu_);
  return facts_;
}

}  // namespace purser::gateway
