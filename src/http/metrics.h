// A small metrics registry with Prometheus text exposition (format 0.0.4).
//
// Counters, gauges and histograms, alone or in families with labels. Updating a metric is
// lock-free (relaxed atomics); looking up a labelled child takes the family's mutex, so hot paths
// look children up once and keep the reference (children live as long as the registry).
// Registration normally happens at start-up; render() may run concurrently with updates.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace purser::http {

class Counter {
 public:
  void inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  void sub(double v) { value_.fetch_sub(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `bounds` are the upper bounds of the buckets, strictly increasing; +Inf is implicit.
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1
  std::atomic<double> sum_{0};
  std::atomic<uint64_t> count_{0};
};

// Latency buckets in seconds, from 0.5 ms to 60 s.
std::vector<double> latencyBuckets();

template <typename M>
class Family {
 public:
  using Factory = std::function<std::unique_ptr<M>()>;
  Family(std::vector<std::string> label_names, Factory factory)
      : label_names_(std::move(label_names)), factory_(std::move(factory)) {}

  // The child for these label values (in the order of the label names); created on first use.
  M& labels(const std::vector<std::string>& values);
  const std::vector<std::string>& labelNames() const { return label_names_; }
  // Visits every child with its label values, in sorted order.
  void forEach(const std::function<void(const std::vector<std::string>&, const M&)>& f) const;

 private:
  std::vector<std::string> label_names_;
  Factory factory_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> children_;  // guarded by mu_
};

class MetricsRegistry {
 public:
  Counter& counter(const std::string& name, const std::string& help);
  Gauge& gauge(const std::string& name, const std::string& help);
  Histogram& histogram(const std::string& name, const std::string& help,
                       std::vector<double> bounds);
  Family<Counter>& counterFamily(const std::string& name, const std::string& help,
                                 std::vector<std::string> labels);
  Family<Gauge>& gaugeFamily(const std::string& name, const std::string& help,
                             std::vector<std::string> labels);
  Family<Histogram>& histogramFamily(const std::string& name, const std::string& help,
                                     std::vector<std::string> labels, std::vector<double> bounds);

  // Runs before every render(): sets gauges that are snapshots of other state (wallets, queues).
  // Collectors run on the scraping thread, one render at a time; they must not render.
  void addCollector(std::function<void()> collect);

  // Prometheus text exposition of everything registered, in registration order.
  std::string render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Entry {
    std::string name;
    std::string help;
    Type type;
    std::unique_ptr<Family<Counter>> counters;
    std::unique_ptr<Family<Gauge>> gauges;
    std::unique_ptr<Family<Histogram>> histograms;
  };
  Entry& entry(const std::string& name, const std::string& help, Type type,
               std::vector<std::string> labels, std::vector<double> bounds);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;    // guarded by mu_
  mutable std::mutex collect_mu_;                  // one collection at a time
  std::vector<std::function<void()>> collectors_;  // guarded by collect_mu_
};

// Prometheus number formatting ("+Inf", "0.005", "12").
std::string formatMetricValue(double v);

}  // namespace purser::http
