// Detectors of upstream providers: errors and rate limiting. See analysis.h.
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

auto Analysis::providers() -> void {
  std::set<std::string> targets;
  for (const Series* s : named("purser_gateway_upstream_errors_total")) {
    if (auto t = s->label("target"); t && !t->empty()) targets.insert(std::string(*t));
  }
  for (const std::string& target : targets) {
    if (deployments_.contains(target)) continue;  // a replica failing has a deeper cause
    upstream(target, false);
    upstream(target, true);
  }
}

auto Analysis::upstream(const std::string& target, bool rate_limited) -> void {
  std::vector<const Series*> errors;
  for (const Series* s : select("purser_gateway_upstream_errors_total", {{"target", target}})) {
    auto kind = s->label("kind").value_or("");
    if (rate_limited ? kind == "429" : kind != "429" && kind != "4xx") errors.push_back(s);
  }
  if (errors.empty()) return;
  std::vector<Points> rates;
  double inc = 0;
  for (const Series* e : errors) {
    rates.push_back(counterRate(*e));
    inc += counterIncrease(*e);
  }
  Points total = sumOf(rates);
  Shift es = upShift(total);
  if (!es.valid || inc < 5 || es.high < 3 || es.peak <= 0) return;
  // Errors as a share of the provider's requests.
  std::vector<Points> reqs;
  std::set<std::string> routes;
  for (const Series* r : select("purser_gateway_requests_total", {{"target", target}})) {
    reqs.push_back(rate(*r));
    if (auto rt = r->label("route")) routes.insert(std::string(*rt));
  }
  double req_total = totalOf(sumOf(reqs).x) * static_cast<double>(step_) / 1000;
  auto lines = logs("", rate_limited ? std::initializer_list<std::string_view>{"429"}
                                     : std::initializer_list<std::string_view>{
                                           "upstream error", "upstream connect failed", "status=5",
                                           "connection refused", "timeout"});
  std::erase_if(lines, [&](const LogLine* l) {
    auto t = logfmtValue(l->line, "target");
    if (!t || *t != target) return true;
    if (rate_limited) return !contains(l->line, "status=429");
    return contains(l->line, "status=429") || contains(l->line, "budget");
  });
  Candidate c;
  Finding& f = c.f;
  f.cause = rate_limited ? "upstream_rate_limited" : "upstream_errors";
  f.subject = {"provider", target};
  f.onset = es.onset;
  double s = 0.5;
  f.evidence.push_back(metric(
      *errors.front(), es,
      fmt::format("{} from {} {}/s -> {}/s ({} in the window)", rate_limited ? "429s" : "errors",
                  target, num(es.base), num(es.peak), num(inc))));
  if (errors.size() > 1) f.evidence.back().labels = {{"target", target}};
  if (!lines.empty()) {
    s += 0.2;
    addLogs(f, lines);
  }
  for (const Event& ev : c_.events) {
    if (ev.kind == "target.cooldown" && contains(ev.object, target)) {
      s += 0.1;
      f.evidence.push_back(event(ev));
      break;
    }
  }
  if (req_total > 0 && inc / (req_total + inc) >= 0.02) s += 0.1;
  // Fallback: another target of the same route took more traffic.
  for (const std::string& route : routes) {
    for (const Series* r : select("purser_gateway_requests_total", {{"route", route}})) {
      auto t = r->label("target").value_or("");
      if (t == target || t.empty()) continue;
      Shift fs = upShift(rate(*r));
      if (fs.valid && fs.ratio(0.01) >= 1.5 && std::llabs(fs.onset - es.onset) <= 3 * kMinute) {
        s += 0.05;
        f.evidence.push_back(metric(
            *r, fs, fmt::format("fallback to {} {}/s -> {}/s", t, num(fs.base), num(fs.peak))));
        break;
      }
    }
    c.affects.push_back({"route", route});
  }
  c.strength = std::min(s, 0.95);
  if (rate_limited) {
    f.explanation = fmt::format(
        "Provider {} is rate-limiting Purser (HTTP 429, {} in the window); requests on {} "
        "fail or fall back while its limit resets.",
        target, num(inc), fmt::join(routes, ", "));
    f.next_steps = {
        fmt::format("Check the account's limits at {} (requests and tokens per minute) and "
                    "ask for a raise if the load is expected.",
                    target),
        "Spread the load over more provider keys or regions, or add a fallback target.",
        "Lower the rpm/tpm limits of the keys that drive this route so Purser queues instead "
        "of the provider refusing."};
  } else {
    f.explanation = fmt::format(
        "Provider {} is failing: {} server errors or connection failures in the window, "
        "starting {}; Purser retries and falls back, and requests on {} fail when no fallback "
        "is left.",
        target, num(inc), formatTime(es.onset), fmt::join(routes, ", "));
    f.next_steps = {fmt::format("Check {}'s status page and the error bodies in the gateway "
                                "log.",
                                target),
                    "Move weight to another provider or region until it recovers.",
                    "Keep the cooldown on; check that a fallback target exists for every "
                    "route that uses it."};
  }
  emit(std::move(c));
}

}  // namespace purser::diagnose
