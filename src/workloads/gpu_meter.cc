// GpuMeter: see gpu_meter.h.
#include "workloads/gpu_meter.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "identity/payer.h"

namespace purser::workloads {

GpuMeter::GpuMeter(Deps deps, Duration metering_interval)
    : d_(std::move(deps)), metering_interval_(metering_interval) {}

ledger::Charged GpuMeter::payerOf(const Record& r) const {
  ledger::Charged c;
  c.tenant_id = r.tenant_id;
  c.team_id = r.team_id;
  (r.owner_kind == "service_account" ? c.service_account_id : c.user_id) = r.owner_id;
  // A workload submitted with a derived key is charged to the keys above it too.
  return identity::payerOf(std::move(c), r.key_id, d_.directory).charged;
}

std::chrono::milliseconds GpuMeter::lookahead() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(metering_interval_) * 2 +
         std::chrono::seconds(2);
}

Money GpuMeter::lookaheadCost(const Record& r, const std::vector<std::string>& offered) const {
  Money total;
  const auto add = [&](const Money* price, fleet::Amount gpu_milli) {
    if (price == nullptr || gpu_milli <= 0) return;
    auto part = ledger::gpuCost(*price, gpu_milli, lookahead(), Rounding::kCeil);
    total = total.add(part.value_or(Money::max())).value_or(Money::max());
  };
  if (holdsQuota(r.state) && r.admission) {
    for (const auto& ps : r.admission->pod_sets) {
      auto use = ps.usage.find(kGpu);
      auto f = ps.flavors.find(kGpu);
      if (use != ps.usage.end() && f != ps.flavors.end())
        add(d_.prices.gpu(f->second), use->second);
    }
    return total;
  }
  fleet::Amount gpu_milli = 0;
  for (const auto& ps : r.spec.pod_sets) {
    auto g = ps.requests.find(kGpu);
    if (g != ps.requests.end()) gpu_milli += g->second * ps.count;
  }
  if (gpu_milli == 0) return total;
  const Money* dearest = nullptr;
  for (const auto& flavor : offered) {
    const Money* price = d_.prices.gpu(flavor);
    if (price != nullptr && (dearest == nullptr || *dearest < *price)) dearest = price;
  }
  add(dearest, gpu_milli);
  return total;
}

std::string GpuMeter::budgetHold(const Record& r, Money need) const {
  if (r.tenant_id.empty() || !requestsGpu(r.spec)) return {};
  auto st = d_.budget.shortfall(payerOf(r), kGpuModel, need);
  if (!st) return {};
  return fmt::format(
      "the GPU budget is used up: wallet {} ({} {}) has {} of {} left{}, and this workload's "
      "next {} s of GPU time cost {}; it waits until the wallet is raised or its period resets",
      st->spec.id, ledger::scopeKindName(st->spec.scope.kind), st->spec.scope.id,
      st->remaining.toString(), st->spec.limit.toString(),
      st->spec.period == ledger::Period::kNone
          ? std::string()
          : fmt::format(" until {}", formatRfc3339(st->window.end)),
      lookahead().count() / 1000, need.toString());
}

bool GpuMeter::hold(const Record& r, Money need) {
  release(r);
  if (r.tenant_id.empty() || !requestsGpu(r.spec) || need.isZero()) return true;
  auto held = d_.budget.holdAhead(payerOf(r), kGpuModel,
                                  fmt::format("gpu-hold:{}:{}", r.spec.name, ++hold_seq_), need,
                                  lookahead() * 3);
  if (!held) {
    if (held.error().code == ErrorCode::kResourceExhausted) return false;
    spdlog::error("fleet: GPU time of {} not held: {}", r.spec.name, held.error().message);
    return true;  // not the budget's doing: metering still charges what runs
  }
  holds_.insert_or_assign(r.spec.name, std::move(*held));
  return true;
}

std::string GpuMeter::holdOf(const std::string& name) const {
  auto it = holds_.find(name);
  return it == holds_.end() ? std::string() : it->second.id();
}

std::optional<store::TxFn> GpuMeter::meter(Record& r, int64_t now_ms, bool awaiting_pods) {
  if (!holdsQuota(r.state) || !r.admission) return std::nullopt;
  release(r);  // the elapsed stretch is charged below; the caller holds the next
  if (awaiting_pods) {
    r.metered_until_ms = std::max(r.metered_until_ms, now_ms);
    sampling_.erase(r.spec.name);
    return std::nullopt;
  }
  const int64_t elapsed = now_ms - r.metered_until_ms;
  if (elapsed <= 0) return std::nullopt;
  // Its GPUs' utilisation up to the end of the stretch, recorded with the charge below (and kept
  // for the next attempt when this one charges nothing).
  sample(r, now_ms, percentNow());
  Money cost;
  fleet::Amount gpu_milli = 0;
  std::string flavor;
  for (const auto& ps : r.admission->pod_sets) {
    auto use = ps.usage.find(kGpu);
    if (use == ps.usage.end() || use->second <= 0) continue;
    auto f = ps.flavors.find(kGpu);
    if (f == ps.flavors.end()) continue;
    gpu_milli += use->second;
    if (flavor.empty()) flavor = f->second;
    const Money* price = d_.prices.gpu(f->second);
    if (price == nullptr) continue;
    auto part = ledger::gpuCost(*price, use->second, std::chrono::milliseconds(elapsed),
                                Rounding::kHalfEven);
    if (!part) {
      // Left unmetered: the next attempt charges the whole stretch.
      spdlog::error("fleet: GPU time of {} not priced: {}", r.spec.name, part.error().message);
      return std::nullopt;
    }
    cost = cost.add(*part).value_or(Money::max());
  }
  if (gpu_milli == 0 || r.tenant_id.empty()) {
    r.metered_until_ms = now_ms;  // nothing to charge, or nobody to charge it to
    if (auto it = sampling_.find(r.spec.name); it != sampling_.end()) it->second.unmetered = {};
    return std::nullopt;
  }
  ledger::UsageEvent e;
  e.id = d_.ids.next();
  e.at = SystemTime(std::chrono::milliseconds(now_ms));
  e.tenant_id = r.tenant_id;
  e.team_id = r.team_id;
  if (r.owner_kind == "service_account") {
    e.service_account_id = r.owner_id;
  } else {
    e.user_id = r.owner_id;
  }
  e.key_id = r.key_id;
  e.session_id = shownText(r.spec.name);
  e.route = flavor;
  e.provider = "fleet";
  e.model = kGpuModel;
  e.cost = cost;
  e.latency_ms = elapsed;
  e.status = 200;
  auto charged = d_.budget.charge(payerOf(r), kGpuModel, e);
  if (!charged) {
    spdlog::error("fleet: GPU time of {} not charged: {}", r.spec.name, charged.error().message);
    return std::nullopt;
  }
  // What its GPUs did in the stretch, in GPU-milliseconds, beside the GPU-hours charged.
  fleet::GpuTime used;
  if (auto it = sampling_.find(r.spec.name); it != sampling_.end()) {
    used = std::exchange(it->second.unmetered, {});
  }
  const auto gpuMs = [](double milli_ms) -> int64_t {
    if (!std::isfinite(milli_ms) || milli_ms <= 0) return 0;
    return static_cast<int64_t>(std::llround(milli_ms / 1000.0));
  };
  const int64_t placed_ms = gpuMs(static_cast<double>(used.placed));
  const int64_t observed_ms =
      std::min<int64_t>(gpuMs(static_cast<double>(used.observed)), placed_ms);
  const int64_t busy_ms = std::min<int64_t>(gpuMs(used.busy), observed_ms);
  store::TxFn write =
      [charge = std::move(charged->write), event_id = e.id, workload = r.spec.name,
       tenant = r.tenant_id, team = r.team_id, flavor, from_ms = r.metered_until_ms, now_ms,
       gpu_ms = gpuMs(static_cast<double>(gpu_milli) * static_cast<double>(elapsed)), placed_ms,
       observed_ms, busy_ms](store::Tx& tx) -> Result<void> {
    PURSER_TRY(charge(tx));
    PURSER_TRY(tx.exec(
        "INSERT INTO gpu_utilisation (event_id, workload, tenant_id, team_id, flavor, from_ms, "
        "at_ms, gpu_ms, placed_gpu_ms, observed_gpu_ms, busy_gpu_ms) VALUES ($1, $2, $3, $4, $5, "
        "$6, $7, $8, $9, $10, $11) ON CONFLICT (event_id) DO NOTHING",
        {event_id, workload, tenant, team, flavor, from_ms, now_ms, gpu_ms, placed_ms, observed_ms,
         busy_ms}));
    return {};
  };
  r.metered_until_ms = now_ms;
  r.charged = r.charged.add(charged->charged).value_or(Money::max());
  if (charged->alerts.empty()) return write;
  {
    std::lock_guard lock(alerts_mu_);
    alerts_.emplace_back(r.tenant_id, charged->alerts);
  }
  return [write = std::move(write), alerts = charged->alerts, tenant = r.tenant_id,
          audit = d_.audit_alerts](store::Tx& tx) -> Result<void> {
    PURSER_TRY(write(tx));
    return audit ? audit(tx, alerts, tenant) : Result<void>{};
  };
}

fleet::PercentOf GpuMeter::percentNow() const {
  if (d_.gpu_utilisation == nullptr) return nullptr;
  using Key = std::pair<std::string, int>;
  auto cache = std::make_shared<std::map<Key, std::optional<double>>>();
  const fleet::GpuUtilisation* source = d_.gpu_utilisation;
  return [cache, source](const std::string& node, int gpu) -> std::optional<double> {
    Key key(node, gpu);
    if (auto it = cache->find(key); it != cache->end()) return it->second;
    std::optional<double> percent;
    if (auto reading = source->reading(node, gpu)) {
      percent = fleet::usablePercent(reading->util_percent);
    }
    cache->emplace(std::move(key), percent);
    return percent;
  };
}

std::optional<fleet::GpuReading> GpuMeter::reading(const std::string& node, int gpu_index) const {
  if (d_.gpu_utilisation == nullptr) return std::nullopt;
  auto reading = d_.gpu_utilisation->reading(node, gpu_index);
  if (!reading) return std::nullopt;
  auto usable = fleet::usablePercent(reading->util_percent);
  if (!usable) return std::nullopt;
  reading->util_percent = *usable;
  return reading;
}

void GpuMeter::sample(const Record& r, int64_t until_ms, const fleet::PercentOf& percent) {
  Sampling& s = sampling_[r.spec.name];
  const int64_t from = std::max(s.sampled_ms, r.metered_until_ms);
  if (until_ms <= from || !r.admission) return;
  std::vector<fleet::PodPlacement> placed;
  for (const auto& ps : r.admission->pod_sets) {
    placed.insert(placed.end(), ps.placements.begin(), ps.placements.end());
  }
  // Each stretch is read at its end: a reading holds from the sample before it (a second, at the
  // service's pace) to this one.
  const fleet::GpuTime t = fleet::gpuTimeOf(placed, until_ms - from, percent);
  s.unmetered += t;
  s.recent.add(until_ms, t);
  s.sampled_ms = until_ms;
}

void GpuMeter::sampleAll(const std::map<std::string, Record>& records,
                         const std::function<bool(const Record&)>& charged, int64_t now_ms) {
  for (auto it = sampling_.begin(); it != sampling_.end();) {
    auto r = records.find(it->first);
    if (r == records.end() || !charged(r->second)) {
      it = sampling_.erase(it);
    } else {
      ++it;
    }
  }
  const fleet::PercentOf percent = percentNow();
  for (const auto& [name, r] : records) {
    if (charged(r)) sample(r, now_ms, percent);
  }
}

LiveUtilisation GpuMeter::utilisation(const std::string& name, int64_t now_ms) const {
  LiveUtilisation out;
  if (auto it = sampling_.find(name); it != sampling_.end()) {
    out.unmetered = it->second.unmetered;
    out.recent = it->second.recent.over(now_ms);
  }
  out.idle = fleet::isIdle(out.recent);
  return out;
}

std::vector<std::pair<std::string, std::vector<ledger::Alert>>> GpuMeter::takeAlerts() {
  std::lock_guard lock(alerts_mu_);
  return std::exchange(alerts_, {});
}

}  // namespace purser::workloads
