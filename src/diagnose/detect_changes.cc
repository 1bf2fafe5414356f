// Detectors of changes: a configuration change that changed behaviour. See analysis.h.
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

auto Analysis::behaviourChange(const Event& ev) -> bool {
  if (ev.source != "audit") return false;
  std::string_view kind = ev.kind;
  if (!(kind.starts_with("route.") || kind.starts_with("deployment.") ||
        kind.starts_with("provider.") || kind.starts_with("target.") ||
        kind.starts_with("model."))) {
    return false;
  }
  // The changed field is named before the first colon ("timeout: 60s -> 3s"). Tags, labels,
  // descriptions and owners change nothing a request meets; anything else may.
  std::string_view m = ev.message;
  size_t colon = m.find(':');
  std::string_view field = colon == std::string_view::npos ? m : m.substr(0, colon);
  while (!field.empty() && (field.front() == ' ' || field.front() == '"')) field.remove_prefix(1);
  static constexpr std::string_view kCosmetic[] = {"tags",         "tag",         "labels",
                                                   "label",        "description", "owner",
                                                   "display_name", "comment",     "annotations"};
  for (std::string_view c : kCosmetic) {
    if (field == c) return false;
  }
  return true;
}

auto Analysis::configChanges() -> void {
  for (const Event& ev : c_.events) {
    if (!behaviourChange(ev)) continue;
    std::string object = ev.object;
    Subject subject;
    std::string route;
    if (deployments_.contains(object)) {
      subject = {"deployment", object};
      route = deployments_.at(object)->route;
    } else {
      subject = {"route", object};
      route = object;
    }
    // What changed after it, within a few minutes: another finding touching the object, or
    // the traffic split of its route.
    Candidate c;
    Finding& f = c.f;
    f.cause = "bad_config_change";
    f.subject = subject;
    f.onset = ev.time;
    f.evidence.push_back(event(ev));
    double s = 0;
    for (const Candidate& other : out_) {
      if (other.f.cause == "bad_config_change" || other.f.onset < ev.time - kMinute ||
          other.f.onset > ev.time + 8 * kMinute) {
        continue;
      }
      bool touches = other.f.subject == subject ||
                     (!route.empty() && other.f.subject == Subject{"route", route});
      for (const Subject& a : other.affects) {
        if (a == subject || (!route.empty() && a == Subject{"route", route})) touches = true;
      }
      if (!touches) continue;
      s = std::max(s, 0.75);
      for (const Evidence& e : other.f.evidence) {
        if (f.evidence.size() >= 4) break;
        f.evidence.push_back(e);
      }
    }
    // The route's own answers changed right after it: more of them fail, or they are slower.
    auto near = [&](TimeMs onset) {
      return onset >= ev.time - step_ - 1000 && onset <= ev.time + 5 * kMinute;
    };
    {
      std::vector<Points> failed;
      const Series* shown = nullptr;
      for (const Series* r : select("purser_gateway_requests_total", {{"route", route}})) {
        std::string_view code = r->label("code").value_or("");
        if (code.empty() || code.front() == '2' || code == "429" || code == "499") continue;
        failed.push_back(counterRate(*r));
        if (shown == nullptr || counterIncrease(*r) > counterIncrease(*shown)) shown = r;
      }
      Shift fs = upShift(sumOf(failed));
      if (shown != nullptr && fs.valid && fs.peak > 0 && fs.high >= 3 && fs.ratio(1.0 / 60) >= 3 &&
          near(fs.onset)) {
        s = std::max(s, 0.75);
        f.evidence.push_back(metric(*shown, fs,
                                    fmt::format("failed requests on {} {}/s -> {}/s after the "
                                                "change",
                                                route, num(fs.base), num(fs.peak))));
      }
      for (const Deployment& d : c_.inventory.deployments) {
        if (d.route != route) continue;
        for (const Series* e :
             select("purser_gateway_upstream_errors_total", {{"target", d.name}})) {
          Shift es = upShift(counterRate(*e));
          if (es.valid && es.peak > 0 && es.high >= 3 && counterIncrease(*e) >= 5 &&
              near(es.onset)) {
            s = std::max(s, 0.7);
            if (f.evidence.size() < 4) {
              f.evidence.push_back(metric(
                  *e, es,
                  fmt::format("{} errors from {} {}/s -> {}/s", e->label("kind").value_or(""),
                              d.name, num(es.base), num(es.peak))));
            }
            break;
          }
        }
      }
      for (const Event& cool : c_.events) {
        if (cool.kind == "target.cooldown" && cool.object.starts_with(route + "/") &&
            cool.time >= ev.time - step_ && cool.time <= ev.time + 5 * kMinute) {
          if (s > 0) f.evidence.push_back(event(cool));
          break;
        }
      }
    }
    // The split of the route's traffic across its targets moved right after the change.
    for (const Series* r : select("purser_gateway_requests_total", {{"route", route}})) {
      Points split = rate(*r);
      Shift down = downShift(split);
      Shift up = upShift(split);
      bool moved = false;
      Shift used;
      if (down.valid && down.base > 0 && down.peak <= 0.4 * down.base &&
          std::llabs(down.onset - ev.time) <= 3 * kMinute) {
        moved = true;
        used = down;
      } else if (up.valid && up.ratio(0.01) >= 2 && std::llabs(up.onset - ev.time) <= 3 * kMinute) {
        moved = true;
        used = up;
      }
      if (moved) {
        s = std::max(s, 0.6) + 0.1;
        f.evidence.push_back(
            metric(*r, used,
                   fmt::format("requests to {} {}/s -> {}/s after the change",
                               r->label("target").value_or(""), num(used.base), num(used.peak))));
        break;
      }
    }
    if (s == 0) continue;
    c.strength = std::min(s + 0.1, 0.95);
    c.affects = {{"route", route}};
    for (const Deployment& d : c_.inventory.deployments) {
      if (d.route == route) c.affects.push_back({"deployment", d.name});
    }
    f.explanation = fmt::format(
        "{} changed {} {} at {} (\"{}\"), and its behaviour changed within minutes after; the "
        "change is the likely cause and what followed its effect.",
        ev.actor.empty() ? "Someone" : ev.actor, subject.kind, object, formatTime(ev.time),
        ev.message);
    f.next_steps = {
        fmt::format("Review the change to {} in the audit log and roll it back if it was not "
                    "intended.",
                    object),
        "Compare the route's targets, weights and limits before and after the change.",
        "Require review for route changes, or stage them with a canary weight."};
    // The findings it explains rank below it.
    for (Candidate& other : out_) {
      if (other.f.cause == "bad_config_change") continue;
      if (other.f.onset < ev.time - kMinute || other.f.onset > ev.time + 8 * kMinute) continue;
      bool touches = other.f.subject == subject;
      for (const Subject& a : other.affects) {
        if (a == subject || (!route.empty() && a == Subject{"route", route})) touches = true;
      }
      if (touches) other.explained = true;
    }
    emit(std::move(c));
  }
}

}  // namespace purser::diagnose
