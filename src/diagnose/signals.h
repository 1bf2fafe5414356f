// Signals: the arithmetic diagnosis does over series — rates of counters, per-interval means of
// histograms, sums across series, and the one question asked of every signal: did it shift
// away from its own baseline, by how much, and when did that begin?
//
// Every function skips NaN (a staleness marker, or a hole left by a counter that went down)
// and asks for enough points before it answers; a series of a few samples answers "no shift".
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "diagnose/case.h"

namespace purser::diagnose {

// A derived signal: points in time order.
struct Points {
  std::vector<TimeMs> t;
  std::vector<double> x;
  size_t size() const { return t.size(); }
  bool empty() const { return t.empty(); }
};

// A gauge as it is.
Points gaugeOf(const Series& s);
// A counter's per-second rate at each sample after the first, over the interval back to the
// newest sample at least `min_span_ms` older (the previous sample when 0; the first sample while
// none is that old). An interval where it went down is NaN. A span of several samples keeps rare
// events (one a second on a 200 ms grid) from reading as lone spikes between zeros.
Points rateOf(const Series& s, TimeMs min_span_ms = 0);
// A histogram's mean observation over each interval: the increase of its _sum over the
// increase of its _count; NaN where nothing was observed.
Points meanOf(const Series& sum, const Series& count);
// The sum of signals at each time any of them has a point (a missing point counts 0).
Points sumOf(const std::vector<Points>& parts);
// num / den at the times both have a point; NaN where den is 0.
Points ratioOf(const Points& num, const Points& den);

// How a signal moved from its baseline (the median of its first quarter, at least three
// points) to its peak (the highest median of three consecutive points after the baseline, so
// one spike is not a peak). `onset` is the first point past the midway mark that is not a lone
// spike; `high` counts points past the midway mark. For a fall (downShift) peak is the lowest.
struct Shift {
  bool valid = false;
  double base = 0;
  double peak = 0;
  double last = 0;  // the median of the last three points
  TimeMs onset = 0;
  int high = 0;
  int points = 0;
  TimeMs from = 0;
  TimeMs to = 0;
  // peak / base, with base floored at `floor` (a baseline of 0 is common).
  double ratio(double floor) const;
};
Shift upShift(const Points& p);
Shift downShift(const Points& p);

double medianOf(std::vector<double> v);  // NaN-free median; NaN when empty
double maxOf(const std::vector<double>& v);
double minOf(const std::vector<double>& v);
// Sum of the finite values.
double totalOf(const std::vector<double>& v);

// Formats a value for a summary: 3 significant digits, no exponent for ordinary magnitudes.
std::string num(double v);

}  // namespace purser::diagnose
