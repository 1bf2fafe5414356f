#include "observe/self_scrape.h"

#include <algorithm>

#include "observe/prom_text.h"

namespace purser::observe {

namespace {

constexpr std::string_view kSuffixes[] = {"_total", "_bucket", "_count", "_sum", "_created"};

// The family a sample belongs to: its metadata's name, else its name less a suffix a counter or
// histogram writes.
std::string_view familyName(const Exposition& e, const Sample& s) {
  if (const Family* f = e.familyOf(s)) return f->name;
  return s.name;
}

bool counterLike(const Exposition& e, const Sample& s) {
  if (const Family* f = e.familyOf(s)) {
    if (f->type == MetricType::kCounter || f->type == MetricType::kHistogram ||
        f->type == MetricType::kSummary) {
      return s.name != f->name || f->type == MetricType::kCounter;
    }
    if (f->type == MetricType::kGauge) return false;
  }
  return std::any_of(std::begin(kSuffixes), std::end(kSuffixes),
                     [&](std::string_view suffix) { return s.name.ends_with(suffix); });
}

}  // namespace

std::vector<std::string> SelfScrape::diagnosedFamilies() {
  return {"purser_gateway_requests_total",  "purser_gateway_upstream_errors_total",
          "purser_gateway_ttft_seconds",    "purser_gateway_queue_waiting",
          "purser_gateway_shed_total",      "purser_wallet_spent_ratio",
          "purser_fleet_pending_workloads", "purser_fleet_quota_used",
          "purser_fleet_quota_nominal"};
}

SelfScrape::SelfScrape(SeriesStore& store, const http::MetricsRegistry& registry)
    : SelfScrape(store, registry, Options{}) {}

SelfScrape::SelfScrape(SeriesStore& store, const http::MetricsRegistry& registry, Options options)
    : store_(store), registry_(registry), options_(std::move(options)) {}

bool SelfScrape::kept(std::string_view family) const {
  for (const std::string& f : options_.families) {
    // A counter's family may be named with or without `_total` (the text's TYPE line decides).
    if (family == f) return true;
    if (f.ends_with("_total") && family == std::string_view(f).substr(0, f.size() - 6)) {
      return true;
    }
  }
  return false;
}

Result<size_t> SelfScrape::sample(int64_t now_ms) { return sampleText(registry_.render(), now_ms); }

Result<size_t> SelfScrape::sampleText(std::string_view text, int64_t now_ms) {
  Exposition e = PURSER_TRY_VALUE(parsePrometheusText(text, {}, TextFormat::kPrometheus));
  if (!times_.empty() && now_ms <= times_.back()) return size_t{0};  // time must go forward
  size_t appended = 0, seen = 0;
  for (const Sample& s : e.samples) {
    if (!kept(familyName(e, s))) continue;
    if (++seen > options_.max_samples) break;
    SeriesKey key(s.name, s.labels);
    if (counterLike(e, s) && !store_.find(key)) {
      // New: it was 0 at every earlier sample of this process.
      for (int64_t t : times_) {
        if (store_.append(key, t, 0.0) == AppendStatus::kAppended) ++appended;
      }
    }
    if (store_.append(key, now_ms, s.value) == AppendStatus::kAppended) ++appended;
  }
  times_.push_back(now_ms);
  const size_t capacity = std::max<size_t>(1, store_.limits().rawCapacity());
  while (times_.size() > capacity) times_.pop_front();
  return appended;
}

}  // namespace purser::observe
