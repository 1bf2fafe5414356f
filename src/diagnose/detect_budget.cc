// Detectors of money: a wallet spent out. See analysis.h.
#include "diagnose/analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

namespace purser::diagnose {

auto Analysis::budgets() -> void {
  std::set<std::string> scopes;
  for (const Series* s : named("purser_wallet_spent_ratio")) {
    if (auto sc = s->label("scope")) scopes.insert(std::string(*sc));
  }
  for (const LogLine& l : c_.logs) {
    if (contains(l.line, "budget exceeded")) {
      if (auto w = logfmtValue(l.line, "wallet")) scopes.insert(*w);
    }
  }
  for (const std::string& scope : scopes) budget(scope);
}

auto Analysis::budget(const std::string& scope) -> void {
  auto subject = scopeSubject(scope);
  if (!subject) return;
  const Series* ratio = one("purser_wallet_spent_ratio", {{"scope", scope}});
  Shift rs;
  bool full = false;
  if (ratio != nullptr) {
    rs = upShift(gaugeOf(*ratio));
    full = maxOf(ratio->v) >= 0.999;
  }
  auto lines = logs("", {"budget exceeded", "budget_exceeded"});
  std::erase_if(lines, [&](const LogLine* l) {
    auto w = logfmtValue(l->line, "wallet");
    return !w || *w != scope;
  });
  const Event* alert = nullptr;
  for (const Event& ev : c_.events) {
    if (ev.kind == "wallet.alert" && ev.object == scope &&
        (contains(ev.message, "100%") || contains(ev.message, "hard"))) {
      alert = &ev;
      break;
    }
  }
  // A hard wallet refuses a request whose worst case does not fit in what is left, so it
  // may stop short of its limit: near it (>= 95 %), requests refused before any upstream
  // that start once it got there say the same as a full wallet.
  const Series* refusals = nullptr;
  Shift refused;
  for (const Series* r : named("purser_gateway_requests_total")) {
    if (!r->label("target").value_or("").empty() || r->label("code").value_or("") != "429") {
      continue;
    }
    Shift qs = upShift(counterRate(*r));
    if (qs.valid && qs.peak > 0 && qs.high >= 3 &&
        (refusals == nullptr || qs.peak > refused.peak)) {
      refusals = r;
      refused = qs;
    }
  }
  bool near = false;
  TimeMs near_at = 0;
  if (!full && ratio != nullptr && refusals != nullptr) {
    for (size_t i = 0; i < ratio->v.size(); ++i) {
      if (ratio->v[i] >= 0.95) {
        near_at = ratio->t[i];
        break;
      }
    }
    near = near_at > 0 && refused.onset >= near_at - 2 * step_;
  }
  if (!full && !near && lines.empty()) return;
  Candidate c;
  Finding& f = c.f;
  f.cause = "budget_exhausted";
  f.subject = *subject;
  double s = 0;
  if (near) {
    s += 0.35;
    f.evidence.push_back(metric(*ratio, rs,
                                fmt::format("wallet {} spent {} -> {} of its limit; what is "
                                            "left is less than a request may cost",
                                            scope, num(rs.base), num(maxOf(ratio->v)))));
    f.onset = near_at;
  }
  if (full) {
    s += 0.45;
    f.evidence.push_back(metric(*ratio, rs,
                                fmt::format("wallet {} spent {} -> {} of its limit", scope,
                                            num(rs.base), num(maxOf(ratio->v)))));
    for (size_t i = 0; i < ratio->v.size(); ++i) {
      if (ratio->v[i] >= 0.999) {
        f.onset = ratio->t[i];
        break;
      }
    }
  }
  std::set<std::string> routes;
  if (!lines.empty()) {
    s += 0.3;
    addLogs(f, lines);
    for (const LogLine* l : lines) {
      if (auto r = logfmtValue(l->line, "route")) routes.insert(*r);
      if (auto t = logfmtValue(l->line, "team")) c.affects.push_back({"team", *t});
      if (auto p = logfmtValue(l->line, "principal")) {
        if (auto ps = scopeSubject(*p)) c.affects.push_back(*ps);
      }
    }
    if (f.onset == 0) f.onset = lines.front()->time;
  }
  // Refusals with no target: requests the gateway turned away before any upstream.
  if (refusals != nullptr) {
    s += 0.1;
    f.evidence.push_back(metric(*refusals, refused,
                                fmt::format("requests refused before any upstream "
                                            "{}/s -> {}/s",
                                            num(refused.base), num(refused.peak))));
    if (lines.empty()) {
      if (auto route = refusals->label("route")) routes.insert(std::string(*route));
    }
  }
  if (alert != nullptr) {
    s += 0.1;
    f.evidence.push_back(event(*alert));
  }
  if (!full && !near && ratio != nullptr) s *= 0.6;  // the metric disagrees with the log
  for (const std::string& r : routes) c.affects.push_back({"route", r});
  c.strength = std::min(s, 0.95);
  f.explanation = fmt::format(
      "The {} wallet {} is spent{}; the gateway refuses its requests with 429 "
      "budget_exceeded while other callers are served.",
      subject->kind, subject->name, alert != nullptr ? fmt::format(" ({})", alert->message) : "");
  f.next_steps = {
      fmt::format("Review {}'s usage for the period (purser usage --{} {}).", scope, subject->kind,
                  subject->name),
      "Raise the limit or top the wallet up if the spend is legitimate; otherwise find the "
      "caller that ran away (a loop, a retry storm).",
      "Consider a soft alert threshold below the hard limit for this wallet."};
  emit(std::move(c));
}

}  // namespace purser::diagnose
