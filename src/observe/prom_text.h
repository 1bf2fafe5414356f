// Prometheus text exposition (format 0.0.4) and OpenMetrics 1.0 text, read into plain values.
//
// Purser reads /metrics of the engines it runs (vLLM, SGLang), of DCGM exporters, and the
// excerpts pasted into incident cases. All of them are bytes from outside: parsePrometheusText()
// checks the whole text before it returns anything, refuses it with the 1-based line and what is
// wrong ("line 12: label value is not valid UTF-8"), never throws, and takes time linear in the
// size of the text. Every size it keeps is bounded by ParseLimits; at worst a result holds about
// twelve times `max_bytes` (a label costs 64 bytes for as few as 6 of text), so a scraper that
// wants less memory lowers `max_bytes`.
//
// One reader takes both formats, because the differences that matter to a consumer are few:
// - `# HELP`, `# TYPE`, `# UNIT` describe a family; a second one of the same kind for the same
//   name is an error. Other `#` lines, blank lines and leading or trailing blanks are ignored; a
//   line may end in CRLF.
// - `# EOF` ends the text in every format; after it only one line ending may follow.
// - Values are Go-style floats as Prometheus reads them: decimal with optional exponent, `NaN`,
//   `Inf`/`+Inf`/`-Inf`/`Infinity` (any case; NaN takes no sign). Hex floats are refused.
// - Timestamps become milliseconds. Prometheus 0.0.4 writes integer milliseconds; OpenMetrics
//   writes seconds, maybe with a fraction (digits past the millisecond are truncated, as
//   Prometheus does). With TextFormat::kAuto the text is OpenMetrics when its last line is
//   `# EOF`; otherwise each timestamp decides for itself: an integer of more than 11 digits is
//   milliseconds, anything else (an integer of up to 11 digits, a fraction, an exponent) is
//   seconds. 11 digits of seconds reach the year 5138, 11 digits of milliseconds stop in 1973,
//   so a timestamp of this century reads right either way (incident excerpts use seconds).
// - Exemplars (` # {trace_id="x"} 1.0 [ts]` after the value) are checked for shape and dropped.
// - Label values are UTF-8 with the escapes \\ \" \n; any other escape is an error. HELP text
//   keeps an unknown escape as written (it is prose; a Windows path in it must not fail a scrape).
//
// Thread-safety: pure functions over values; an Exposition is a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace purser::observe {

using Labels = std::vector<std::pair<std::string, std::string>>;

struct Sample {
  std::string name;
  Labels labels;  // sorted by name; no name twice
  double value = 0;
  std::optional<int64_t> timestamp_ms;
  // Index into Exposition::families: the family whose name is `name`, or whose name is `name`
  // less a suffix its type writes (_total, _created, _bucket, _count, _sum, _gcount, _gsum,
  // _info). nullopt when no HELP/TYPE/UNIT line named one.
  std::optional<size_t> family;
};

enum class MetricType {
  kUnknown,  // `untyped`, `unknown`, or no TYPE line
  kCounter,
  kGauge,
  kHistogram,
  kSummary,
  kGaugeHistogram,
  kInfo,
  kStateSet,
};

struct Family {
  std::string name;
  MetricType type = MetricType::kUnknown;
  std::string help;  // escapes decoded
  std::string unit;  // OpenMetrics `# UNIT`; empty when not given
};

struct Exposition {
  std::vector<Family> families;  // in the order their first metadata line appears
  std::vector<Sample> samples;   // in the order of the text

  const Family* familyOf(const Sample& s) const {
    return s.family && *s.family < families.size() ? &families[*s.family] : nullptr;
  }
};

enum class TextFormat {
  kAuto,         // OpenMetrics when the last line is `# EOF`; see the timestamp rule above
  kPrometheus,   // 0.0.4: timestamps are integer milliseconds
  kOpenMetrics,  // 1.0: timestamps are seconds; the text must end with `# EOF`
};

// What one text may hold. A text past a limit is refused whole, with the line that crossed it.
struct ParseLimits {
  size_t max_bytes = 16 * 1024 * 1024;  // the whole text; never more than 2^31 - 2
  size_t max_line_bytes = 64 * 1024;    // one line, without its line ending
  size_t max_samples = 200000;
  size_t max_families = 20000;          // metadata names; each costs more than its line
  size_t max_labels = 64;               // in one label set
  size_t max_label_value_bytes = 4096;  // decoded
  size_t max_name_bytes = 256;          // a metric name, label name or unit
};

// Reads `text`. Errors are kInvalidArgument, with Error::line set and the message starting
// "line N: " (the size of the whole text is checked first and names no line).
Result<Exposition> parsePrometheusText(std::string_view text, const ParseLimits& limits = {},
                                       TextFormat format = TextFormat::kAuto);

// The value of the label `name`, or nullopt.
std::optional<std::string_view> label(const Sample& sample, std::string_view name);

// A sample value or `le`/`quantile` label as Prometheus reads it (see above); nullopt when it is
// not one or does not fit a double.
std::optional<double> parseSampleValue(std::string_view text);

// The (upper bound, cumulative count) pairs of the `<histogram_name>_bucket` samples whose labels
// include every matcher (name, value). A sample without an `le`, or with one that is not a number,
// is skipped, as PromQL skips it. When several series match, their buckets are all returned, and
// histogramQuantile() adds counts of equal bounds: `sum by (le)`.
std::vector<std::pair<double, double>> histogramBuckets(
    const Exposition& exposition, std::string_view histogram_name,
    const std::vector<std::pair<std::string_view, std::string_view>>& matchers = {});

// PromQL's histogram_quantile(q, buckets) over classic buckets (upper bound, cumulative count):
// sorted by bound, equal bounds added together, counts within 1e-12 (relative) of the previous
// one taken as equal and any decrease lifted to the running maximum (non-cumulative or
// inconsistent input), then linear interpolation inside the bucket where rank q * total falls.
// The lowest bucket interpolates from 0 when its bound is positive, else its bound is the answer;
// a rank in the +Inf bucket answers the highest finite bound. NaN when q is NaN, when there are
// fewer than two buckets, when the highest bound is not +Inf, or when the total is 0; -Inf for
// q < 0 and +Inf for q > 1. A bucket with a NaN bound is dropped first (PromQL would sort it
// somewhere arbitrary).
double histogramQuantile(double q, std::vector<std::pair<double, double>> buckets);

}  // namespace purser::observe
