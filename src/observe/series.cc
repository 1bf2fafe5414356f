#include "observe/series.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <mutex>

#include "common/hash.h"

namespace purser::observe {

namespace {

std::string targetIndexKey(std::string_view name, std::string_view target) {
  std::string key;
  key.reserve(name.size() + 1 + target.size());
  key.append(name);
  key.push_back('\x1f');
  key.append(target);
  return key;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kMinTime = std::numeric_limits<int64_t>::min();

// A ring larger than this is a configuration mistake (4M points is 64 MiB for one series).
constexpr size_t kMaxRingCapacity = size_t{1} << 22;
// First allocation of a ring; it then doubles up to its capacity.
constexpr size_t kInitialRingCapacity = 16;
// What the allocator adds to each allocation, for memoryBytes() (glibc: about 16 bytes).
constexpr size_t kAllocOverhead = 16;

int64_t floorTo(int64_t t, int64_t width) {
  int64_t r = t % width;
  if (r < 0) r += width;
  return t - r;
}

int64_t ceilTo(int64_t t, int64_t width) {
  int64_t f = floorTo(t, width);
  return f == t ? t : f + width;
}

size_t ceilDiv(int64_t a, int64_t b) { return static_cast<size_t>(a / b + (a % b != 0 ? 1 : 0)); }

// Whether the string's characters live outside the object (past the small-string buffer).
bool onHeap(const std::string& s) {
  auto self = reinterpret_cast<uintptr_t>(&s);
  auto data = reinterpret_cast<uintptr_t>(s.data());
  return data < self || data >= self + sizeof(std::string);
}

size_t stringHeapBytes(const std::string& s) {
  return onHeap(s) ? s.capacity() + 1 + kAllocOverhead : 0;
}

// A fixed-capacity ring, oldest first. Storage grows geometrically until it reaches the
// capacity, then the oldest element is overwritten: a series that is short-lived stays small, a
// long-lived one costs exactly its capacity.
template <typename T>
class Ring {
 public:
  explicit Ring(size_t capacity) : capacity_(capacity) {}

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Whether anything was overwritten: the ring no longer reaches back to its first element.
  bool evicted() const { return evicted_; }

  const T& operator[](size_t i) const {
    size_t j = head_ + i;
    if (j >= capacity_) j -= capacity_;
    return buf_[j];
  }
  const T& back() const { return (*this)[size_ - 1]; }
  T& back() { return const_cast<T&>(std::as_const(*this)[size_ - 1]); }

  void push(const T& v) {
    if (size_ < capacity_) {  // still growing; head_ stays 0 until the ring is full
      if (buf_.size() == buf_.capacity()) {
        buf_.reserve(std::min(capacity_, std::max(kInitialRingCapacity, buf_.capacity() * 2)));
      }
      buf_.push_back(v);
      ++size_;
      return;
    }
    buf_[head_] = v;
    head_ = head_ + 1 == capacity_ ? 0 : head_ + 1;
    evicted_ = true;
  }

  // The first index whose element does not satisfy `before` (which must hold for a prefix).
  template <typename Pred>
  size_t partitionPoint(Pred before) const {
    size_t lo = 0;
    size_t hi = size_;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (before((*this)[mid])) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  size_t heapBytes() const {
    return buf_.capacity() == 0 ? 0 : buf_.capacity() * sizeof(T) + kAllocOverhead;
  }

 private:
  std::vector<T> buf_;
  size_t capacity_;
  size_t head_ = 0;  // index in buf_ of the oldest element
  size_t size_ = 0;
  bool evicted_ = false;
};

// What increase() and rate() need from a walk over a counter's samples.
struct CounterWindow {
  double increase = 0;
  int64_t first_ms = 0;
  int64_t last_ms = 0;
  size_t samples = 0;
};

struct LeBucket {
  double upper;
  double count;
};

// An `le` label: "0.25", "1e3", "+Inf". Returns nullopt for anything else.
std::optional<double> parseLe(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || std::isnan(v)) return std::nullopt;
  return v;
}

// PromQL's bucketQuantile (promql/quantile.go) for classic cumulative buckets. A private copy:
// the exposition parser has a similar helper and the two will be merged.
double bucketQuantile(double q, std::vector<LeBucket> buckets) {
  if (std::isnan(q)) return kNaN;
  if (q < 0) return -kInf;
  if (q > 1) return kInf;
  if (buckets.empty()) return kNaN;
  std::sort(buckets.begin(), buckets.end(),
            [](const LeBucket& a, const LeBucket& b) { return a.upper < b.upper; });
  if (buckets.back().upper != kInf) return kNaN;
  // Equal bounds (the same `le` spelt "1" and "1.0") are one bucket.
  size_t n = 0;
  for (const LeBucket& b : buckets) {
    if (n > 0 && buckets[n - 1].upper == b.upper) {
      buckets[n - 1].count += b.count;
    } else {
      buckets[n++] = b;
    }
  }
  buckets.resize(n);
  // Cumulative counts never fall with the bound, but bucket series sampled at slightly
  // different instants can make them appear to; PromQL lifts each to the running maximum.
  for (size_t i = 1; i < n; ++i)
    buckets[i].count = std::max(buckets[i].count, buckets[i - 1].count);
  if (n < 2) return kNaN;
  double observations = buckets[n - 1].count;
  if (observations == 0) return kNaN;
  double rank = q * observations;
  size_t b = 0;
  while (b < n - 1 && buckets[b].count < rank) ++b;
  if (b == n - 1) return buckets[n - 2].upper;  // the rank is in +Inf: the highest finite bound
  if (b == 0 && buckets[0].upper <= 0) return buckets[0].upper;
  double start = 0;
  double end = buckets[b].upper;
  double count = buckets[b].count;
  if (b > 0) {
    start = buckets[b - 1].upper;
    count -= buckets[b - 1].count;
    rank -= buckets[b - 1].count;
  }
  return start + (end - start) * (rank / count);
}

void appendEscaped(std::string& out, std::string_view value) {
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SeriesKey

SeriesKey::SeriesKey() : SeriesKey(std::string(), Labels()) {}

SeriesKey::SeriesKey(std::string name, Labels labels)
    : name_(std::move(name)), labels_(std::move(labels)) {
  std::erase_if(labels_, [](const auto& l) { return l.second.empty(); });
  std::stable_sort(labels_.begin(), labels_.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  labels_.erase(std::unique(labels_.begin(), labels_.end(),
                            [](const auto& a, const auto& b) { return a.first == b.first; }),
                labels_.end());
  // Separators that cannot be confused with each other, so {a="b,c"} and {a="b",c=...} differ
  // in the common case; a collision is still possible and is resolved by comparing keys.
  std::string canonical = name_;
  for (const auto& [k, v] : labels_) {
    canonical += '\xff';
    canonical += k;
    canonical += '\xfe';
    canonical += v;
  }
  hash_ = fnv1a64(canonical);
}

std::optional<std::string_view> SeriesKey::label(std::string_view label_name) const {
  auto it = std::lower_bound(labels_.begin(), labels_.end(), label_name,
                             [](const auto& l, std::string_view n) { return l.first < n; });
  if (it == labels_.end() || it->first != label_name) return std::nullopt;
  return std::string_view(it->second);
}

bool SeriesKey::matches(const Labels& matchers) const {
  for (const auto& [k, v] : matchers) {
    std::optional<std::string_view> have = label(k);
    if (v.empty() ? have.has_value() : (!have || *have != v)) return false;
  }
  return true;
}

std::string SeriesKey::toString() const {
  std::string out = name_;
  if (labels_.empty()) return out;
  out += '{';
  for (size_t i = 0; i < labels_.size(); ++i) {
    if (i > 0) out += ',';
    out += labels_[i].first;
    out += "=\"";
    appendEscaped(out, labels_[i].second);
    out += '"';
  }
  out += '}';
  return out;
}

size_t SeriesKey::heapBytes() const {
  size_t bytes = stringHeapBytes(name_);
  if (labels_.capacity() > 0) {
    bytes += labels_.capacity() * sizeof(Labels::value_type) + kAllocOverhead;
  }
  for (const auto& [k, v] : labels_) bytes += stringHeapBytes(k) + stringHeapBytes(v);
  return bytes;
}

double Rollup::avg() const { return count == 0 ? kNaN : sum / count; }

// ---------------------------------------------------------------------------------------------
// SeriesLimits

size_t SeriesLimits::rawCapacity() const { return ceilDiv(raw_retention_ms, raw_interval_ms); }
size_t SeriesLimits::rollupCapacity() const { return ceilDiv(rollup_retention_ms, rollup_ms); }

Result<void> validateSeriesLimits(const SeriesLimits& l) {
  auto bad = [](std::string_view field, std::string msg) {
    return fail(invalidArgument(std::move(msg)).withField(field));
  };
  if (l.max_series == 0) return bad("max_series", "must be at least 1");
  if (l.raw_interval_ms <= 0) return bad("raw_interval", "must be positive");
  if (l.raw_retention_ms < l.raw_interval_ms) {
    return bad("raw_retention", "must be at least raw_interval");
  }
  if (l.rollup_ms <= 0) return bad("rollup", "must be positive");
  if (l.rollup_retention_ms < l.rollup_ms) {
    return bad("rollup_retention", "must be at least one rollup bucket");
  }
  if (l.stale_after_ms <= 0) return bad("stale_after", "must be positive");
  if (l.rawCapacity() > kMaxRingCapacity) {
    return bad("raw_retention", "holds " + std::to_string(l.rawCapacity()) +
                                    " points per series; at most " +
                                    std::to_string(kMaxRingCapacity) +
                                    " (shorten raw_retention or lengthen raw_interval)");
  }
  if (l.rollupCapacity() > kMaxRingCapacity) {
    return bad("rollup_retention", "holds " + std::to_string(l.rollupCapacity()) +
                                       " buckets per series; at most " +
                                       std::to_string(kMaxRingCapacity) +
                                       " (shorten rollup_retention or widen rollup)");
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// SeriesStore

struct SeriesStore::Series {
  Series(SeriesKey k, const SeriesLimits& l)
      : key(std::move(k)), raw(l.rawCapacity()), rollup(l.rollupCapacity()) {}

  SeriesKey key;
  Ring<Point> raw;
  Ring<Rollup> rollup;  // every sample goes here too, the newest bucket being filled
};

namespace {

// Walks a series' counter samples in [from_ms, to_ms]: bucket `last` values (stamped at the
// bucket's end) before `cut`, raw samples from `cut` on, NaN skipped.
template <typename SeriesT>
CounterWindow counterWindow(const SeriesT& s, int64_t cut, int64_t rollup_ms, int64_t from_ms,
                            int64_t to_ms) {
  CounterWindow w;
  double prev = 0;
  auto take = [&](int64_t t, double v) {
    if (std::isnan(v)) return;
    if (w.samples == 0) {
      w.first_ms = t;
    } else {
      w.increase += v >= prev ? v - prev : v;  // a drop is a reset from 0
    }
    prev = v;
    w.last_ms = t;
    ++w.samples;
  };
  if (from_ms > to_ms) return w;
  if (cut > from_ms) {
    size_t i = s.rollup.partitionPoint(
        [&](const Rollup& b) { return b.start_ms + rollup_ms - 1 < from_ms; });
    for (; i < s.rollup.size(); ++i) {
      const Rollup& b = s.rollup[i];
      int64_t t = b.start_ms + rollup_ms - 1;
      if (b.start_ms >= cut || t > to_ms) break;
      if (b.count > 0) take(t, b.last);
    }
  }
  int64_t raw_from = std::max(from_ms, cut);
  size_t i = s.raw.partitionPoint([&](const Point& p) { return p.t_ms < raw_from; });
  for (; i < s.raw.size() && s.raw[i].t_ms <= to_ms; ++i) take(s.raw[i].t_ms, s.raw[i].value);
  return w;
}

double pick(const Rollup& b, RollupValue value) {
  switch (value) {
    case RollupValue::kAvg:
      return b.avg();
    case RollupValue::kLast:
      return b.last;
    case RollupValue::kMin:
      return b.min;
    case RollupValue::kMax:
      return b.max;
  }
  return kNaN;
}

}  // namespace

Result<std::unique_ptr<SeriesStore>> SeriesStore::create(SeriesLimits limits) {
  PURSER_TRY(validateSeriesLimits(limits));
  return std::unique_ptr<SeriesStore>(new SeriesStore(limits));
}

SeriesStore::SeriesStore(SeriesLimits limits) : limits_(limits) {}

SeriesStore::~SeriesStore() = default;

size_t SeriesStore::fullSeriesBytes(const SeriesLimits& limits) {
  return sizeof(Series) + kAllocOverhead + limits.rawCapacity() * sizeof(Point) +
         limits.rollupCapacity() * sizeof(Rollup) + 2 * kAllocOverhead;
}

// Where raw samples start answering. Before the raw ring first overwrites, it holds the whole
// series. After, its oldest bucket may have lost samples to the ring, so the switch is at the
// first bucket boundary at or after the oldest raw sample: that bucket and everything before
// come from rollups, everything after from raw, and no sample is in both.
int64_t SeriesStore::rawCut(const Series& s) const {
  if (!s.raw.evicted()) return kMinTime;
  return ceilTo(s.raw[0].t_ms, limits_.rollup_ms);
}

const SeriesStore::Series* SeriesStore::findLocked(const SeriesKey& key) const {
  std::optional<SeriesRef> ref = findRefLocked(key);
  return ref ? slots_[ref->slot].series.get() : nullptr;
}

std::optional<SeriesRef> SeriesStore::findRefLocked(const SeriesKey& key) const {
  auto [it, end] = by_hash_.equal_range(key.hash());
  for (; it != end; ++it) {
    const Slot& slot = slots_[it->second];
    if (slot.series->key == key) return SeriesRef{it->second, slot.generation};
  }
  return std::nullopt;
}

Result<SeriesRef> SeriesStore::getOrCreate(const SeriesKey& key) {
  std::unique_lock lock(mu_);
  return getOrCreateLocked(key);
}

Result<SeriesRef> SeriesStore::getOrCreateLocked(const SeriesKey& key) {
  if (std::optional<SeriesRef> ref = findRefLocked(key)) return *ref;
  if (live_series_ >= limits_.max_series) {
    ++dropped_series_;
    return fail(ErrorCode::kResourceExhausted,
                "series limit reached: " + key.toString() + " not stored; the store holds " +
                    std::to_string(limits_.max_series) +
                    " series (raise max_series, or scrape fewer metrics or labels)");
  }
  uint32_t index;
  if (!free_slots_.empty()) {
    index = free_slots_.back();
    free_slots_.pop_back();
  } else {
    index = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[index];
  slot.series = std::make_unique<Series>(key, limits_);
  by_hash_.emplace(key.hash(), index);
  auto named = by_name_.find(key.name());
  if (named == by_name_.end()) named = by_name_.emplace(key.name(), std::vector<uint32_t>()).first;
  named->second.push_back(index);
  if (auto target = key.label("target")) {
    by_target_[targetIndexKey(key.name(), *target)].push_back(index);
  }
  ++live_series_;
  return SeriesRef{index, slot.generation};
}

AppendStatus SeriesStore::append(SeriesRef ref, int64_t t_ms, double value) {
  std::unique_lock lock(mu_);
  return appendLocked(ref, t_ms, value);
}

AppendStatus SeriesStore::append(const SeriesKey& key, int64_t t_ms, double value) {
  std::unique_lock lock(mu_);
  Result<SeriesRef> ref = getOrCreateLocked(key);
  if (!ref) return AppendStatus::kSeriesLimit;
  return appendLocked(*ref, t_ms, value);
}

size_t SeriesStore::appendBatch(std::span<const RefSample> samples) {
  std::unique_lock lock(mu_);
  size_t appended = 0;
  for (const RefSample& s : samples) {
    if (appendLocked(s.ref, s.t_ms, s.value) == AppendStatus::kAppended) ++appended;
  }
  return appended;
}

AppendStatus SeriesStore::appendLocked(SeriesRef ref, int64_t t_ms, double value) {
  if (ref.slot >= slots_.size()) return AppendStatus::kUnknownSeries;
  Slot& slot = slots_[ref.slot];
  if (slot.generation != ref.generation || !slot.series) return AppendStatus::kUnknownSeries;
  return appendToSeries(*slot.series, t_ms, value);
}

AppendStatus SeriesStore::appendToSeries(Series& s, int64_t t_ms, double value) {
  if (!s.raw.empty() && t_ms <= s.raw.back().t_ms) {
    ++out_of_order_;
    return AppendStatus::kOutOfOrder;
  }
  s.raw.push(Point{t_ms, value});
  int64_t start = floorTo(t_ms, limits_.rollup_ms);
  if (s.rollup.empty() || s.rollup.back().start_ms != start) {
    s.rollup.push(Rollup{start, kNaN, kNaN, 0, kNaN, 0});
  }
  if (std::isnan(value)) return AppendStatus::kAppended;
  Rollup& b = s.rollup.back();
  if (b.count == 0) {
    b.min = value;
    b.max = value;
  } else {
    b.min = std::min(b.min, value);
    b.max = std::max(b.max, value);
  }
  b.sum += value;
  b.last = value;
  ++b.count;
  return AppendStatus::kAppended;
}

size_t SeriesStore::sweep(int64_t now_ms) {
  std::unique_lock lock(mu_);
  size_t removed = 0;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    const Series* s = slots_[i].series.get();
    if (s == nullptr) continue;
    if (s->raw.empty() || now_ms - s->raw.back().t_ms > limits_.stale_after_ms) {
      removeLocked(i);
      ++removed;
    }
  }
  return removed;
}

void SeriesStore::removeLocked(uint32_t index) {
  Slot& slot = slots_[index];
  const SeriesKey& key = slot.series->key;
  auto [it, end] = by_hash_.equal_range(key.hash());
  for (; it != end; ++it) {
    if (it->second == index) {
      by_hash_.erase(it);
      break;
    }
  }
  auto named = by_name_.find(key.name());
  if (named != by_name_.end()) {
    std::erase(named->second, index);
    if (named->second.empty()) by_name_.erase(named);
  }
  if (auto target = key.label("target")) {
    auto it = by_target_.find(targetIndexKey(key.name(), *target));
    if (it != by_target_.end()) {
      std::erase(it->second, index);
      if (it->second.empty()) by_target_.erase(it);
    }
  }
  slot.series.reset();
  // A ref to the old series must not write into the next one that takes the slot.
  if (++slot.generation == 0) slot.generation = 1;
  free_slots_.push_back(index);
  --live_series_;
}

std::optional<SeriesRef> SeriesStore::find(const SeriesKey& key) const {
  std::shared_lock lock(mu_);
  return findRefLocked(key);
}

const std::vector<uint32_t>* SeriesStore::candidatesLocked(std::string_view name,
                                                           const Labels& matchers) const {
  for (const auto& [k, v] : matchers) {
    if (k != "target" || v.empty()) continue;
    auto it = by_target_.find(targetIndexKey(name, v));
    return it == by_target_.end() ? nullptr : &it->second;
  }
  auto named = by_name_.find(name);
  return named == by_name_.end() ? nullptr : &named->second;
}

std::vector<SeriesKey> SeriesStore::select(std::string_view name, const Labels& matchers) const {
  std::vector<SeriesKey> keys;
  {
    std::shared_lock lock(mu_);
    const std::vector<uint32_t>* candidates = candidatesLocked(name, matchers);
    if (candidates == nullptr) return keys;
    for (uint32_t index : *candidates) {
      const SeriesKey& key = slots_[index].series->key;
      if (key.matches(matchers)) keys.push_back(key);
    }
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::vector<std::string> SeriesStore::names() const {
  std::vector<std::string> out;
  {
    std::shared_lock lock(mu_);
    out.reserve(by_name_.size());
    for (const auto& [name, slots] : by_name_) {
      if (!slots.empty()) out.push_back(name);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<Point> SeriesStore::latest(const SeriesKey& key) const {
  std::shared_lock lock(mu_);
  const Series* s = findLocked(key);
  if (s == nullptr || s->raw.empty()) return std::nullopt;
  return s->raw.back();
}

bool SeriesStore::isStale(const SeriesKey& key, int64_t now_ms, int64_t max_age_ms) const {
  std::optional<Point> p = latest(key);
  return !p || std::isnan(p->value) || now_ms - p->t_ms > max_age_ms;
}

Range SeriesStore::range(const SeriesKey& key, int64_t from_ms, int64_t to_ms,
                         RollupValue value) const {
  Range out;
  if (from_ms > to_ms) return out;
  std::shared_lock lock(mu_);
  const Series* s = findLocked(key);
  if (s == nullptr) return out;
  int64_t cut = rawCut(*s);
  if (cut > from_ms) {
    size_t i = s->rollup.partitionPoint([&](const Rollup& b) { return b.start_ms < from_ms; });
    for (; i < s->rollup.size(); ++i) {
      const Rollup& b = s->rollup[i];
      if (b.start_ms >= cut || b.start_ms > to_ms) break;
      if (b.count > 0) out.points.push_back(Point{b.start_ms, pick(b, value)});
    }
    out.rollup_points = out.points.size();
  }
  int64_t raw_from = std::max(from_ms, cut);
  size_t i = s->raw.partitionPoint([&](const Point& p) { return p.t_ms < raw_from; });
  for (; i < s->raw.size() && s->raw[i].t_ms <= to_ms; ++i) out.points.push_back(s->raw[i]);
  return out;
}

std::vector<Rollup> SeriesStore::rollups(const SeriesKey& key, int64_t from_ms,
                                         int64_t to_ms) const {
  std::vector<Rollup> out;
  if (from_ms > to_ms) return out;
  std::shared_lock lock(mu_);
  const Series* s = findLocked(key);
  if (s == nullptr) return out;
  size_t i = s->rollup.partitionPoint(
      [&](const Rollup& b) { return b.start_ms + limits_.rollup_ms <= from_ms; });
  for (; i < s->rollup.size() && s->rollup[i].start_ms <= to_ms; ++i) {
    out.push_back(s->rollup[i]);
  }
  return out;
}

std::optional<double> SeriesStore::increase(const SeriesKey& key, int64_t from_ms,
                                            int64_t to_ms) const {
  std::shared_lock lock(mu_);
  const Series* s = findLocked(key);
  if (s == nullptr) return std::nullopt;
  CounterWindow w = counterWindow(*s, rawCut(*s), limits_.rollup_ms, from_ms, to_ms);
  if (w.samples < 2) return std::nullopt;
  return w.increase;
}

std::optional<double> SeriesStore::rate(const SeriesKey& key, int64_t from_ms,
                                        int64_t to_ms) const {
  std::shared_lock lock(mu_);
  const Series* s = findLocked(key);
  if (s == nullptr) return std::nullopt;
  CounterWindow w = counterWindow(*s, rawCut(*s), limits_.rollup_ms, from_ms, to_ms);
  if (w.samples < 2) return std::nullopt;  // also guarantees last_ms > first_ms
  return w.increase / (static_cast<double>(w.last_ms - w.first_ms) / 1000.0);
}

double SeriesStore::histogramQuantileOver(std::string_view bucket_name, const Labels& matchers,
                                          double q, int64_t from_ms, int64_t to_ms) const {
  std::vector<LeBucket> buckets;
  {
    std::shared_lock lock(mu_);
    const std::vector<uint32_t>* candidates = candidatesLocked(bucket_name, matchers);
    if (candidates == nullptr) return kNaN;
    for (uint32_t index : *candidates) {
      const Series& s = *slots_[index].series;
      std::optional<std::string_view> le = s.key.label("le");
      if (!le) continue;
      bool match = true;
      for (const auto& [k, v] : matchers) {
        if (k == "le") continue;
        std::optional<std::string_view> have = s.key.label(k);
        if (v.empty() ? have.has_value() : (!have || *have != v)) {
          match = false;
          break;
        }
      }
      if (!match) continue;
      std::optional<double> upper = parseLe(*le);
      if (!upper) continue;
      CounterWindow w = counterWindow(s, rawCut(s), limits_.rollup_ms, from_ms, to_ms);
      if (w.samples < 2) continue;
      buckets.push_back(LeBucket{*upper, w.increase});
    }
  }
  return bucketQuantile(q, std::move(buckets));
}

std::optional<SeriesReach> SeriesStore::reach(const SeriesKey& key) const {
  std::shared_lock lock(mu_);
  const Series* s = findLocked(key);
  if (s == nullptr || s->raw.empty()) return std::nullopt;
  SeriesReach r;
  r.raw_points = s->raw.size();
  r.raw_from_ms = std::max(s->raw[0].t_ms, rawCut(*s));
  r.rollup_buckets = s->rollup.size();
  r.rollup_from_ms = s->rollup[0].start_ms;
  r.newest_ms = s->raw.back().t_ms;
  return r;
}

size_t SeriesStore::seriesCount() const {
  std::shared_lock lock(mu_);
  return live_series_;
}

size_t SeriesStore::memoryBytes() const {
  std::shared_lock lock(mu_);
  size_t bytes = sizeof(SeriesStore);
  bytes += slots_.capacity() * sizeof(Slot) + free_slots_.capacity() * sizeof(uint32_t);
  for (const Slot& slot : slots_) {
    const Series* s = slot.series.get();
    if (s == nullptr) continue;
    bytes += sizeof(Series) + kAllocOverhead + s->raw.heapBytes() + s->rollup.heapBytes() +
             s->key.heapBytes();
  }
  // Hash tables: a bucket array plus one node per entry (next pointer, value, cached hash).
  constexpr size_t kNodeExtra = 2 * sizeof(void*) + kAllocOverhead;
  bytes += by_hash_.bucket_count() * sizeof(void*) +
           by_hash_.size() * (sizeof(decltype(by_hash_)::value_type) + kNodeExtra);
  for (const auto* index : {&by_name_, &by_target_}) {
    bytes += index->bucket_count() * sizeof(void*);
    for (const auto& [name, indexes] : *index) {
      bytes += sizeof(decltype(by_name_)::value_type) + kNodeExtra + stringHeapBytes(name) +
               indexes.capacity() * sizeof(uint32_t) + kAllocOverhead;
    }
  }
  return bytes;
}

uint64_t SeriesStore::droppedSeries() const {
  std::shared_lock lock(mu_);
  return dropped_series_;
}

uint64_t SeriesStore::outOfOrderSamples() const {
  std::shared_lock lock(mu_);
  return out_of_order_;
}

}  // namespace purser::observe
