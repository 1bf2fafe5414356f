#include "http/metrics.h"

#include <fmt/format.h>

#include <cmath>

#include "common/assert.h"

namespace purser::http {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 1; i < bounds_.size(); ++i) PURSER_CHECK(bounds_[i - 1] < bounds_[i]);
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  // The count is the +Inf bucket, so the exposition is always self-consistent.
  s.count = running;
  return s;
}

std::vector<double> latencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

template <typename M>
M& Family<M>::labels(const std::vector<std::string>& values) {
  PURSER_CHECK_MSG(values.size() == label_names_.size(), "wrong number of label values");
  std::lock_guard lock(mu_);
  auto& slot = children_[values];
  if (!slot) slot = factory_();
  return *slot;
}

template <typename M>
void Family<M>::forEach(
    const std::function<void(const std::vector<std::string>&, const M&)>& f) const {
  std::lock_guard lock(mu_);
  for (const auto& [values, child] : children_) f(values, *child);
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

namespace {

bool validName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string escapeLabel(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string escapeHelp(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// `{a="x",b="y"}` with an optional extra label (for histogram buckets), or "" when empty.
std::string labelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     std::string_view extra_name = {}, std::string_view extra_value = {}) {
  if (names.empty() && extra_name.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += fmt::format("{}=\"{}\"", names[i], escapeLabel(values[i]));
  }
  if (!extra_name.empty()) {
    if (!names.empty()) out += ',';
    out += fmt::format("{}=\"{}\"", extra_name, extra_value);
  }
  out += '}';
  return out;
}

}  // namespace

std::string formatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

MetricsRegistry::Entry& MetricsRegistry::entry(const std::string& name, const std::string& help,
                                               Type type, std::vector<std::string> labels,
                                               std::vector<double> bounds) {
  PURSER_CHECK_MSG(validName(name), "invalid metric name");
  for (const auto& l : labels) PURSER_CHECK_MSG(validName(l), "invalid label name");
  std::lock_guard lock(mu_);
  for (auto& e : entries_) {
    if (e->name == name) {
      PURSER_CHECK_MSG(e->type == type, "metric registered twice with different types");
      return *e;
    }
  }
  auto e = std::make_unique<Entry>();
  e->name = name;
  e->help = help;
  e->type = type;
  switch (type) {
    case Type::kCounter:
      e->counters = std::make_unique<Family<Counter>>(std::move(labels),
                                                      [] { return std::make_unique<Counter>(); });
      break;
    case Type::kGauge:
      e->gauges = std::make_unique<Family<Gauge>>(std::move(labels),
                                                  [] { return std::make_unique<Gauge>(); });
      break;
    case Type::kHistogram:
      e->histograms = std::make_unique<Family<Histogram>>(
          std::move(labels), [bounds] { return std::make_unique<Histogram>(bounds); });
      break;
  }
  entries_.push_back(std::move(e));
  return *entries_.back();
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help) {
  return counterFamily(name, help, {}).labels({});
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help) {
  return gaugeFamily(name, help, {}).labels({});
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      std::vector<double> bounds) {
  return histogramFamily(name, help, {}, std::move(bounds)).labels({});
}

Family<Counter>& MetricsRegistry::counterFamily(const std::string& name, const std::string& help,
                                                std::vector<std::string> labels) {
  return *entry(name, help, Type::kCounter, std::move(labels), {}).counters;
}

Family<Gauge>& MetricsRegistry::gaugeFamily(const std::string& name, const std::string& help,
                                            std::vector<std::string> labels) {
  return *entry(name, help, Type::kGauge, std::move(labels), {}).gauges;
}

Family<Histogram>& MetricsRegistry::histogramFamily(const std::string& name,
                                                    const std::string& help,
                                                    std::vector<std::string> labels,
                                                    std::vector<double> bounds) {
  return *entry(name, help, Type::kHistogram, std::move(labels), std::move(bounds)).histograms;
}

void MetricsRegistry::addCollector(std::function<void()> collect) {
  std::lock_guard lock(collect_mu_);
  collectors_.push_back(std::move(collect));
}

std::string MetricsRegistry::render() const {
  {
    std::lock_guard collecting(collect_mu_);
    for (const auto& c : collectors_) c();
  }
  std::string out;
  std::lock_guard lock(mu_);
  for (const auto& e : entries_) {
    const char* type = e->type == Type::kCounter ? "counter"
                       : e->type == Type::kGauge ? "gauge"
                                                 : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", e->name, escapeHelp(e->help), e->name, type);
    switch (e->type) {
      case Type::kCounter:
        e->counters->forEach([&](const auto& values, const Counter& c) {
          out += fmt::format("{}{} {}\n", e->name, labelSet(e->counters->labelNames(), values),
                             c.value());
        });
        break;
      case Type::kGauge:
        e->gauges->forEach([&](const auto& values, const Gauge& g) {
          out += fmt::format("{}{} {}\n", e->name, labelSet(e->gauges->labelNames(), values),
                             formatMetricValue(g.value()));
        });
        break;
      case Type::kHistogram:
        e->histograms->forEach([&](const auto& values, const Histogram& h) {
          const auto& names = e->histograms->labelNames();
          const Histogram::Snapshot s = h.snapshot();
          for (size_t i = 0; i <= s.bounds.size(); ++i) {
            const std::string le =
                i < s.bounds.size() ? formatMetricValue(s.bounds[i]) : std::string("+Inf");
            out += fmt::format("{}_bucket{} {}\n", e->name, labelSet(names, values, "le", le),
                               s.cumulative[i]);
          }
          out += fmt::format("{}_sum{} {}\n", e->name, labelSet(names, values),
                             formatMetricValue(s.sum));
          out += fmt::format("{}_count{} {}\n", e->name, labelSet(names, values), s.count);
        });
        break;
    }
  }
  return out;
}

}  // namespace purser::http
