#include "diagnose/signals.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace purser::diagnose {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double med3(double a, double b, double c) {
  return std::max(std::min(a, b), std::min(std::max(a, b), c));
}
}  // namespace

Points gaugeOf(const Series& s) { return Points{s.t, s.v}; }

Points rateOf(const Series& s, TimeMs min_span_ms) {
  Points p;
  size_t from = 0;  // the newest sample at least min_span_ms before i
  for (size_t i = 1; i < s.t.size(); ++i) {
    while (from + 1 < i && s.t[i] - s.t[from + 1] >= min_span_ms) ++from;
    const size_t j = min_span_ms <= 0 ? i - 1 : from;
    double dt = static_cast<double>(s.t[i] - s.t[j]) / 1000.0;
    double dv = s.v[i] - s.v[j];
    p.t.push_back(s.t[i]);
    p.x.push_back(dt > 0 && dv >= 0 && std::isfinite(dv) ? dv / dt : kNaN);
  }
  return p;
}

Points meanOf(const Series& sum, const Series& count) {
  auto at = [&](TimeMs t) -> const double* {
    auto it = std::lower_bound(count.t.begin(), count.t.end(), t);
    if (it == count.t.end() || *it != t) return nullptr;
    return &count.v[static_cast<size_t>(it - count.t.begin())];
  };
  Points p;
  for (size_t i = 1; i < sum.t.size(); ++i) {
    const double* c0 = at(sum.t[i - 1]);
    const double* c1 = at(sum.t[i]);
    if (c0 == nullptr || c1 == nullptr) continue;
    double dc = *c1 - *c0;
    double ds = sum.v[i] - sum.v[i - 1];
    p.t.push_back(sum.t[i]);
    p.x.push_back(dc > 0 && ds >= 0 ? ds / dc : kNaN);
  }
  return p;
}

Points sumOf(const std::vector<Points>& parts) {
  std::map<TimeMs, double> acc;
  for (const Points& p : parts) {
    for (size_t i = 0; i < p.size(); ++i) {
      if (std::isfinite(p.x[i]))
        acc[p.t[i]] += p.x[i];
      else
        acc.try_emplace(p.t[i], 0.0);
    }
  }
  Points out;
  for (const auto& [t, x] : acc) {
    out.t.push_back(t);
    out.x.push_back(x);
  }
  return out;
}

Points ratioOf(const Points& num, const Points& den) {
  Points out;
  size_t j = 0;
  for (size_t i = 0; i < num.size(); ++i) {
    while (j < den.size() && den.t[j] < num.t[i]) ++j;
    if (j >= den.size() || den.t[j] != num.t[i]) continue;
    out.t.push_back(num.t[i]);
    out.x.push_back(den.x[j] > 0 ? num.x[i] / den.x[j] : kNaN);
  }
  return out;
}

double Shift::ratio(double floor) const {
  double b = std::max(std::abs(base), floor);
  return b > 0 ? peak / b : 0;
}

Shift upShift(const Points& p) {
  Shift s;
  std::vector<size_t> idx;
  for (size_t i = 0; i < p.size(); ++i) {
    if (std::isfinite(p.x[i])) idx.push_back(i);
  }
  if (idx.size() < 5) return s;
  size_t nb = std::max<size_t>(3, idx.size() / 4);
  std::vector<double> first;
  for (size_t k = 0; k < nb; ++k) first.push_back(p.x[idx[k]]);
  s.base = medianOf(first);
  auto m3 = [&](size_t k) {
    size_t a = k == 0 ? 0 : k - 1;
    size_t c = k + 1 < idx.size() ? k + 1 : idx.size() - 1;
    return med3(p.x[idx[a]], p.x[idx[k]], p.x[idx[c]]);
  };
  s.peak = s.base;
  for (size_t k = nb; k < idx.size(); ++k) s.peak = std::max(s.peak, m3(k));
  s.last = m3(idx.size() - 1);
  double mid = s.base + (s.peak - s.base) / 2;
  bool found = false;
  for (size_t k = 0; k < idx.size(); ++k) {
    if (p.x[idx[k]] > mid) {
      ++s.high;
      if (!found && m3(k) > mid) {
        s.onset = p.t[idx[k]];
        found = true;
      }
    }
  }
  if (!found) s.onset = p.t[idx.back()];
  s.points = static_cast<int>(idx.size());
  s.from = p.t[idx.front()];
  s.to = p.t[idx.back()];
  s.valid = true;
  return s;
}

Shift downShift(const Points& p) {
  Points neg = p;
  for (double& x : neg.x) x = -x;
  Shift s = upShift(neg);
  s.base = -s.base;
  s.peak = -s.peak;
  s.last = -s.last;
  return s;
}

double medianOf(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  if (v.empty()) return kNaN;
  size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
    m = (m + lower) / 2;
  }
  return m;
}

double maxOf(const std::vector<double>& v) {
  double m = kNaN;
  for (double x : v) {
    if (std::isfinite(x) && !(x <= m)) m = x;
  }
  return m;
}

double minOf(const std::vector<double>& v) {
  double m = kNaN;
  for (double x : v) {
    if (std::isfinite(x) && !(x >= m)) m = x;
  }
  return m;
}

double totalOf(const std::vector<double>& v) {
  double t = 0;
  for (double x : v) {
    if (std::isfinite(x)) t += x;
  }
  return t;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "n/a";
  double a = std::abs(v);
  if (a == 0) return "0";
  if (a >= 1e6 || a < 1e-3) return fmt::format("{:.3g}", v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  if (a >= 1) return fmt::format("{:.2f}", v);
  return fmt::format("{:.3f}", v);
}

}  // namespace purser::diagnose
