// SeriesStore: the in-memory time series that scraping writes (model servers, GPU exporters,
// Purser itself) and that routing, SLO health, the console and diagnosis read.
//
// A series is a metric name plus a label set (SeriesKey). Every sample goes into two tiers:
//   - raw: the newest samples, 16 bytes each, in a ring of ceil(raw_retention / raw_interval)
//     points (1 h at 1 s = 3600 points);
//   - rollup: fixed-width buckets (default 1 min) of min, max, sum, count and last, in a ring of
//     ceil(rollup_retention / rollup_ms) buckets (24 h = 1440 buckets, 48 bytes each).
// A query reads raw samples as far back as the raw ring reaches and buckets beyond. Rings hold
// a number of entries, not a span of time: a series with gaps reaches further back.
//
// Memory is bounded by SeriesLimits and reported by memoryBytes(): at most max_series series,
// each at most fullSeriesBytes() plus its key. Rings grow geometrically up to their capacity, so
// a series that lives ten minutes costs ten minutes of samples; an append allocates only while
// its rings are still growing (17 times in a series' life at the default limits), never once
// they are full. When max_series is reached a new series is refused (droppedSeries()); sweep()
// removes series not written for stale_after_ms.
//
// Time is passed in as Unix milliseconds; the store never reads a clock. Timestamps of one
// series must increase: an out-of-order or repeated timestamp is ignored and counted.
//
// NaN is a value: Prometheus writes one as a staleness marker. It is stored and returned as is
// by latest() and by range()'s raw points; every aggregation (rollups, increase, quantiles)
// treats it as "no value" and skips it.
//
// Thread-safety: one writer (the scraper) and many readers (HTTP handlers). Every method may be
// called from any thread: writes (getOrCreate, append*, sweep) hold a std::shared_mutex
// exclusively, reads share it. Reads copy what they return, so nothing handed out refers into
// the store. A SeriesRef is a plain value; using one whose series was swept is detected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/result.h"

namespace purser::observe {

// Label name/value pairs. A SeriesKey keeps them sorted by name.
using Labels = std::vector<std::pair<std::string, std::string>>;

// What identifies a series: metric name and labels, normalised so that the same set in any
// order is the same key. The hash is computed once (FNV-1a 64 of a canonical form) and is stable
// across processes and versions, so it can name a series outside the process; it is not unique,
// so lookups compare the whole key as well.
class SeriesKey {
 public:
  SeriesKey();
  // Sorts labels by name. A label with an empty value is dropped (PromQL treats it as absent);
  // a repeated label name keeps its first value — scraped input is not trusted to be clean.
  SeriesKey(std::string name, Labels labels);

  const std::string& name() const { return name_; }
  const Labels& labels() const { return labels_; }
  uint64_t hash() const { return hash_; }

  // The value of a label, or nullopt when the series does not have it.
  std::optional<std::string_view> label(std::string_view label_name) const;
  // Whether every matcher holds. Matchers are equalities; as in PromQL, an empty value matches
  // a series that does not have the label.
  bool matches(const Labels& matchers) const;
  // name{a="x",b="y"}, with Prometheus escaping; for logs, errors and the console.
  std::string toString() const;
  // Heap bytes the key holds (label vector, strings too long for the small-string buffer).
  size_t heapBytes() const;

  friend bool operator==(const SeriesKey& a, const SeriesKey& b) {
    return a.hash_ == b.hash_ && a.name_ == b.name_ && a.labels_ == b.labels_;
  }
  friend bool operator<(const SeriesKey& a, const SeriesKey& b) {
    return a.name_ != b.name_ ? a.name_ < b.name_ : a.labels_ < b.labels_;
  }

 private:
  std::string name_;
  Labels labels_;
  uint64_t hash_ = 0;
};

struct Point {
  int64_t t_ms = 0;
  double value = 0;
};
static_assert(sizeof(Point) == 16);

// One rollup bucket: the samples with start_ms <= t < start_ms + rollup_ms, NaN left out.
// count == 0 (a bucket of staleness markers only) means "no value": min, max and last are NaN.
struct Rollup {
  int64_t start_ms = 0;
  double min = 0;
  double max = 0;
  double sum = 0;
  double last = 0;
  uint32_t count = 0;

  double avg() const;  // sum / count; NaN when count == 0
};
static_assert(sizeof(Rollup) == 48);

// Which aggregate of a bucket range() reports beyond the raw tier.
enum class RollupValue { kAvg, kLast, kMin, kMax };

// The configuration that bounds memory. A full series holds rawCapacity() points and
// rollupCapacity() buckets; see SeriesStore::fullSeriesBytes().
struct SeriesLimits {
  size_t max_series = 20000;
  int64_t raw_retention_ms = 3'600'000;      // 1 h
  int64_t raw_interval_ms = 1'000;           // the expected scrape interval
  int64_t rollup_ms = 60'000;                // bucket width
  int64_t rollup_retention_ms = 86'400'000;  // 24 h
  int64_t stale_after_ms = 600'000;          // sweep() removes series not written for this long

  size_t rawCapacity() const;     // ceil(raw_retention_ms / raw_interval_ms)
  size_t rollupCapacity() const;  // ceil(rollup_retention_ms / rollup_ms)
};

// Checks limits from configuration; the error names the field that is wrong.
Result<void> validateSeriesLimits(const SeriesLimits& limits);

// A handle for repeated appends to one series without hashing or comparing its key. It stays
// valid until the series is swept; after that, appends through it return kUnknownSeries.
struct SeriesRef {
  uint32_t slot = 0;
  uint32_t generation = 0;  // 0 is never issued: a default SeriesRef refers to nothing
  friend bool operator==(const SeriesRef&, const SeriesRef&) = default;
};

enum class AppendStatus {
  kAppended,
  kOutOfOrder,     // timestamp not after the series' newest: ignored and counted
  kSeriesLimit,    // a new series was refused: max_series reached (counted in droppedSeries())
  kUnknownSeries,  // the SeriesRef's series was swept (or the ref was never issued)
};

struct RefSample {
  SeriesRef ref;
  int64_t t_ms = 0;
  double value = 0;
};

// What range() returns: points in increasing time, every one within [from_ms, to_ms].
// The first rollup_points points come from the rollup tier, one per bucket with a value,
// stamped at the bucket's start (they cover [t_ms, t_ms + rollup_ms)); the rest are raw samples,
// NaN included. The tiers meet at a bucket boundary, so no sample is counted in both.
struct Range {
  std::vector<Point> points;
  size_t rollup_points = 0;
};

// How far back a series' tiers answer, for the console and for tests.
struct SeriesReach {
  size_t raw_points = 0;       // samples held in the raw ring
  int64_t raw_from_ms = 0;     // range() returns raw samples from here on
  size_t rollup_buckets = 0;   // buckets held, including the one being filled
  int64_t rollup_from_ms = 0;  // start of the oldest bucket held
  int64_t newest_ms = 0;       // timestamp of the newest sample
};

class SeriesStore {
 public:
  static Result<std::unique_ptr<SeriesStore>> create(SeriesLimits limits = {});
  ~SeriesStore();
  SeriesStore(const SeriesStore&) = delete;
  SeriesStore& operator=(const SeriesStore&) = delete;

  // --- Writes (exclusive lock). ---

  // The series' handle, creating the series if needed; kResourceExhausted when it would be the
  // (max_series + 1)th series.
  Result<SeriesRef> getOrCreate(const SeriesKey& key);
  // The hot path: no hashing, no key comparison, no allocation once the series' rings are full.
  AppendStatus append(SeriesRef ref, int64_t t_ms, double value);
  // Finds the series by the key's precomputed hash, creating it if needed.
  AppendStatus append(const SeriesKey& key, int64_t t_ms, double value);
  // A whole scrape under one lock acquisition. Returns how many samples were appended.
  size_t appendBatch(std::span<const RefSample> samples);
  // Removes series whose newest sample is older than now_ms - stale_after_ms, and series that
  // were created but never written. Returns how many were removed. Call it from the writer: a
  // series created by getOrCreate() on another thread could be swept before its first append.
  size_t sweep(int64_t now_ms);

  // --- Reads (shared lock). An unknown key reads as an empty series. ---

  std::optional<SeriesRef> find(const SeriesKey& key) const;
  // Keys of the series named `name` that satisfy all matchers, sorted.
  std::vector<SeriesKey> select(std::string_view name, const Labels& matchers) const;
  // The metric names that have at least one series, sorted (for readers that take everything
  // in a window, such as live diagnosis).
  std::vector<std::string> names() const;
  // The newest sample as stored (a NaN value is a staleness marker). Whether it is recent
  // enough is the caller's judgement: compare t_ms with the time it has.
  std::optional<Point> latest(const SeriesKey& key) const;
  // True when the series is unknown, its newest value is NaN, or now_ms - newest > max_age_ms.
  bool isStale(const SeriesKey& key, int64_t now_ms, int64_t max_age_ms) const;
  // Points in [from_ms, to_ms]; see Range. Beyond the raw tier, `value` picks the aggregate
  // (the average by default: right for gauges; use kLast for counters).
  Range range(const SeriesKey& key, int64_t from_ms, int64_t to_ms,
              RollupValue value = RollupValue::kAvg) const;
  // The rollup buckets that overlap [from_ms, to_ms], whether or not raw samples still cover
  // them, the bucket being filled included.
  std::vector<Rollup> rollups(const SeriesKey& key, int64_t from_ms, int64_t to_ms) const;
  // How much a counter grew between its first and last samples in [from_ms, to_ms] (both
  // ends inclusive), NaN samples skipped. A drop is a counter reset: the counter restarted
  // from 0, so the new value is all increase (PromQL's rule). Unlike PromQL's increase(), no
  // extrapolation to the window's edges. Beyond the raw tier the counter is seen once per
  // bucket (its last value, at the bucket's end), so a reset there loses the growth between the
  // previous bucket's last value and the reset. nullopt with fewer than two samples.
  std::optional<double> increase(const SeriesKey& key, int64_t from_ms, int64_t to_ms) const;
  // increase() divided by the seconds between the first and last samples it used (not by the
  // window's length, which without extrapolation would understate a series that began or
  // ended inside the window).
  std::optional<double> rate(const SeriesKey& key, int64_t from_ms, int64_t to_ms) const;
  // PromQL's histogram_quantile(q, sum by (le) (increase(bucket_name{matchers}[window]))):
  // the increase() of every `bucket_name` series matching `matchers` (an `le` matcher is
  // ignored) over [from_ms, to_ms], summed per `le` bound across series, then interpolated
  // linearly within the bucket holding the rank. NaN when nothing matches, there is no +Inf
  // bucket, or there were no observations in the window; -Inf/+Inf for q < 0 / q > 1.
  double histogramQuantileOver(std::string_view bucket_name, const Labels& matchers, double q,
                               int64_t from_ms, int64_t to_ms) const;
  std::optional<SeriesReach> reach(const SeriesKey& key) const;

  // --- Accounting. ---

  size_t seriesCount() const;
  // Bytes held: rings at their allocated capacity, keys, indexes, with an estimate of the
  // allocator's per-allocation overhead. Approximate, but nothing large is left out.
  size_t memoryBytes() const;
  // Series creations refused because max_series was reached (attempts, not distinct keys).
  uint64_t droppedSeries() const;
  // Samples ignored because their timestamp was not after their series' newest.
  uint64_t outOfOrderSamples() const;
  const SeriesLimits& limits() const { return limits_; }

  // Bytes of one series whose rings are full, excluding its key's strings: the figure to size
  // max_series with (about 124 KiB for the default limits).
  static size_t fullSeriesBytes(const SeriesLimits& limits);

 private:
  struct Series;
  struct Slot {
    std::unique_ptr<Series> series;  // null when the slot is free
    uint32_t generation = 1;
  };
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  // The key hash is FNV-1a already; hashing it again would only cost time.
  struct IdentityHash {
    size_t operator()(uint64_t h) const { return static_cast<size_t>(h); }
  };

  explicit SeriesStore(SeriesLimits limits);

  const Series* findLocked(const SeriesKey& key) const;
  std::optional<SeriesRef> findRefLocked(const SeriesKey& key) const;
  Result<SeriesRef> getOrCreateLocked(const SeriesKey& key);
  AppendStatus appendLocked(SeriesRef ref, int64_t t_ms, double value);
  AppendStatus appendToSeries(Series& s, int64_t t_ms, double value);
  void removeLocked(uint32_t slot);
  int64_t rawCut(const Series& s) const;

  const SeriesLimits limits_;
  mutable std::shared_mutex mu_;
  std::vector<Slot> slots_;                                            // guarded by mu_
  std::vector<uint32_t> free_slots_;                                   // guarded by mu_
  size_t live_series_ = 0;                                             // guarded by mu_
  std::unordered_multimap<uint64_t, uint32_t, IdentityHash> by_hash_;  // guarded by mu_
  std::unordered_map<std::string, std::vector<uint32_t>, NameHash, std::equal_to<>>
      by_name_;  // guarded by mu_
  // The same per name and value of the `target` label (the scraper's), so that a query for one
  // target reads its own series, not every target's: name + '\x1f' + target.
  std::unordered_map<std::string, std::vector<uint32_t>, NameHash, std::equal_to<>>
      by_target_;  // guarded by mu_
  // The series a query for `name` under `matchers` must look at.
  const std::vector<uint32_t>* candidatesLocked(std::string_view name,
                                                const Labels& matchers) const;
  uint64_t dropped_series_ = 0;  // guarded by mu_
  uint64_t out_of_order_ = 0;    // guarded by mu_
};

}  // namespace purser::observe
