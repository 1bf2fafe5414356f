// Detectors of the model servers and their routes: KV cache exhaustion, a replica saturated,
// out of memory, traffic shifted between routes. See analysis.h.
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

void Analysis::serving() {
  for (const Deployment& d : c_.inventory.deployments) {
    kvCache(d);
    saturation(d);
    oomDeployment(d);
  }
  routeLevel();
}

auto Analysis::kvCache(const Deployment& d) -> void {
  const Series* kv = engine("vllm:kv_cache_usage_perc", d.name);
  if (kv == nullptr) return;
  Points p = gaugeOf(*kv);
  int full = 0;
  TimeMs first_full = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p.x[i] >= 0.9) {
      if (full++ == 0) first_full = p.t[i];
    }
  }
  if (full < 2) return;
  Shift sh = upShift(p);
  double peak = maxOf(p.x);
  Candidate c;
  Finding& f = c.f;
  f.cause = "kv_cache_exhaustion";
  f.subject = {"deployment", d.name};
  f.onset = first_full;
  f.evidence.push_back(
      metric(*kv, sh,
             fmt::format("{} -> {} ({} samples at 90 % or more)", num(sh.base), num(peak), full)));
  double s = 0.3;
  bool preempting = false;
  if (const Series* pre = engine("vllm:num_preemptions_total", d.name)) {
    Points r = counterRate(*pre);
    Shift ps = upShift(r);
    double inc = counterIncrease(*pre);
    if (ps.valid && inc >= 3 && ps.peak > 0 && ps.ratio(1.0 / 60) >= 3) {
      preempting = true;
      s += 0.3;
      f.evidence.push_back(metric(*pre, ps,
                                  fmt::format("preemptions {}/s -> {}/s, +{} in the window",
                                              num(ps.base), num(ps.peak), num(inc))));
    }
  }
  auto lines = logs(
      d.name, {"PreemptionMode.RECOMPUTE", "not enough KV cache space", "PreemptionMode.SWAP"});
  if (!lines.empty()) {
    s += preempting ? 0.15 : 0.3;
    addLogs(f, lines);
  }
  if (auto lat = replicaLatency(d.name); lat && lat->ratio >= 1.3) {
    s += 0.1;
    f.evidence.push_back(histEvidence(*lat->sum, lat->base, lat->shift, lat->what));
  }
  if (peak >= 0.97) s += 0.05;
  c.strength = std::min(s, 0.95);
  c.affects = {{"route", d.route}};
  f.explanation = fmt::format(
      "The KV cache of {} filled up ({} at its peak) and the engine began preempting running "
      "requests to free blocks, so requests are recomputed and wait; latency rises with it.",
      d.name, num(peak));
  f.next_steps = {
      fmt::format("Check the prompt and output lengths {} is receiving (long contexts fill the "
                  "cache).",
                  d.name),
      "Raise gpu_memory_utilization or the tensor-parallel size, or lower max_num_seqs / "
      "max_model_len for this replica.",
      fmt::format("Add a replica to route {} or shift weight away from {} while it is full.",
                  d.route, d.name)};
  emit(std::move(c));
}

auto Analysis::saturation(const Deployment& d) -> void {
  const Series* waiting = engine("vllm:num_requests_waiting", d.name);
  auto queue = engineHist("vllm:request_queue_time_seconds", d.name);
  Shift ws;
  Shift qs;
  bool wait_up = false;
  bool queue_up = false;
  if (waiting != nullptr) {
    ws = upShift(gaugeOf(*waiting));
    wait_up = ws.valid && ws.peak >= 5 && ws.high >= 3 && ws.peak >= 4 * std::max(ws.base, 1.0);
  }
  if (queue) {
    qs = upShift(queue->first);
    queue_up = qs.valid && qs.peak >= 0.5 && qs.ratio(0.01) >= 4 && qs.high >= 3;
  }
  if (!wait_up && !queue_up) return;
  const Series* kv = engine("vllm:kv_cache_usage_perc", d.name);
  double kv_peak = kv != nullptr ? maxOf(kv->v) : 0;
  Candidate c;
  Finding& f = c.f;
  f.cause = "replica_saturation";
  f.subject = {"deployment", d.name};
  f.onset = wait_up ? ws.onset : qs.onset;
  double s = 0.45;
  if (wait_up) {
    f.evidence.push_back(
        metric(*waiting, ws, fmt::format("requests waiting {} -> {}", num(ws.base), num(ws.peak))));
  }
  if (queue_up) {
    f.evidence.push_back(
        histEvidence(*queue->second, "vllm:request_queue_time_seconds", qs, "queue time"));
  }
  if (wait_up && queue_up) s += 0.2;
  if (const Series* running = engine("vllm:num_requests_running", d.name)) {
    Shift rs = upShift(gaugeOf(*running));
    if (rs.valid) {
      f.evidence.push_back(
          metric(*running, rs,
                 fmt::format("requests running {} -> {} (a ceiling)", num(rs.base), num(rs.peak))));
    }
  }
  // Load: the rate of requests Purser sent it.
  std::vector<Points> rates;
  const Series* any_req = nullptr;
  for (const Series* r : select("purser_gateway_requests_total", {{"target", d.name}})) {
    rates.push_back(rate(*r));
    any_req = r;
  }
  if (any_req != nullptr) {
    Shift ls = upShift(sumOf(rates));
    if (ls.valid && ls.ratio(0.01) >= 1.15) {
      s += 0.1;
      f.evidence.push_back(
          metric(*any_req, ls,
                 fmt::format("requests to {} {}/s -> {}/s", d.name, num(ls.base), num(ls.peak)),
                 "purser_gateway_requests_total"));
      f.evidence.back().labels = {{"target", d.name}};
    }
  }
  if (kv_peak >= 0.9) s *= 0.5;  // a full KV cache is the cause; the queue its effect
  c.strength = s;
  c.affects = {{"route", d.route}};
  f.explanation = fmt::format(
      "{} receives more requests than it can run: requests queue inside the engine ({} "
      "waiting at the peak) while its KV cache has room ({} at most), so capacity, not "
      "memory, is short.",
      d.name, num(ws.valid ? ws.peak : 0), num(kv_peak));
  f.next_steps = {
      fmt::format("Add replicas behind route {} or raise {}'s max_num_seqs if its GPU has "
                  "headroom.",
                  d.route, d.name),
      "Check whether the route's weights send this replica more than its share.",
      "Set a queue limit on the route so excess requests fail fast instead of waiting."};
  emit(std::move(c));
}

auto Analysis::oomDeployment(const Deployment& d) -> void {
  oomObject({"deployment", d.name}, d.name, d.node, d.gpus, {{"route", d.route}});
}

auto Analysis::hasGap(const Series& s) const -> bool {
  for (size_t i = 1; i < s.t.size(); ++i) {
    if (s.t[i] - s.t[i - 1] > 2 * step_ + step_ / 2) return true;
  }
  return !s.t.empty() && s.t.back() < c_.end - 3 * step_;
}

auto Analysis::capacityMiB(const std::string& node) const -> double {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return 0;
  const std::string& type = it->second->gpu_type;
  size_t dash = type.rfind('-');
  if (dash == std::string::npos) return 0;
  double gb = std::atof(type.c_str() + dash + 1);
  return gb > 0 ? gb * 1024 * 0.99 : 0;
}

auto Analysis::routeLevel() -> void {
  routeSaturation();
  std::set<std::string> routes;
  for (const Series* s : named("purser_gateway_requests_total")) {
    if (auto r = s->label("route")) routes.insert(std::string(*r));
  }
  for (const Deployment& d : c_.inventory.deployments) routes.insert(d.route);
  for (const std::string& route : routes) {
    if (!route.empty()) trafficShift(route);
  }
}

auto Analysis::routeSaturation() -> void {
  std::map<std::string, std::vector<const Deployment*>> by_route;
  for (const Deployment& d : c_.inventory.deployments) {
    if (engine("vllm:num_requests_running", d.name) != nullptr) by_route[d.route].push_back(&d);
  }
  for (const auto& [route, replicas] : by_route) {
    if (replicas.size() < 2) continue;
    std::vector<Candidate*> saturated;
    for (const Deployment* d : replicas) {
      for (Candidate& c : out_) {
        if (c.f.cause == "replica_saturation" && c.f.subject == Subject{"deployment", d->name}) {
          saturated.push_back(&c);
        }
      }
    }
    if (saturated.size() != replicas.size()) continue;
    Candidate c;
    Finding& f = c.f;
    f.cause = "replica_saturation";
    f.subject = {"route", route};
    double strength = 0;
    for (Candidate* r : saturated) {
      strength = std::max(strength, r->strength);
      if (f.onset == 0 || r->f.onset < f.onset) f.onset = r->f.onset;
      for (size_t i = 0; i < r->f.evidence.size() && i < 2; ++i) {
        f.evidence.push_back(r->f.evidence[i]);
      }
      r->explained = true;
    }
    c.strength = std::min(strength + 0.05, 0.95);
    c.affects = {{"route", route}};
    for (const Deployment* d : replicas) c.affects.push_back({"deployment", d->name});
    f.explanation = fmt::format(
        "Every replica of route {} ({}) is saturated at once: requests queue in all of them "
        "while their KV caches have room, so the route as a whole is short of capacity.",
        route, replicas.size());
    f.next_steps = {
        fmt::format("Add replicas to route {} (or raise max_num_seqs where the GPUs have "
                    "headroom).",
                    route),
        "Find which callers grew (usage by key for the route) and whether the growth is "
        "expected.",
        "Set a queue limit and priorities on the route so important requests are served "
        "first and the rest fail fast."};
    out_.push_back(std::move(c));
  }
}

auto Analysis::trafficShift(const std::string& route) -> void {
  std::vector<Points> rates;
  const Series* any = nullptr;
  for (const Series* s : select("purser_gateway_requests_total", {{"route", route}})) {
    rates.push_back(rate(*s));
    any = s;
  }
  if (any == nullptr) return;
  Points total = sumOf(rates);
  Shift rate = upShift(total);
  bool rate_up = rate.valid && rate.ratio(0.01) >= 1.3 && rate.high >= 4;
  // Prompt length: prompt tokens over requests, across the route's replicas.
  std::vector<Points> prompt;
  std::vector<Points> reqs;
  const Series* any_prompt = nullptr;
  for (const Deployment& d : c_.inventory.deployments) {
    if (d.route != route) continue;
    const Series* pt = engine("vllm:prompt_tokens_total", d.name);
    const Series* cnt = engine("vllm:time_to_first_token_seconds_count", d.name);
    if (pt == nullptr || cnt == nullptr) continue;
    prompt.push_back(this->rate(*pt));
    reqs.push_back(this->rate(*cnt));
    any_prompt = pt;
  }
  Shift len;
  bool len_up = false;
  if (any_prompt != nullptr) {
    len = upShift(ratioOf(sumOf(prompt), sumOf(reqs)));
    len_up = len.valid && len.ratio(1) >= 1.3 && len.high >= 4;
  }
  if (!rate_up && !len_up) return;
  // Latency on the route.
  std::optional<Latency> lat;
  for (const Deployment& d : c_.inventory.deployments) {
    if (d.route != route) continue;
    auto l = replicaLatency(d.name);
    if (l && (!lat || l->ratio > lat->ratio)) lat = l;
  }
  Candidate c;
  Finding& f = c.f;
  f.cause = "traffic_shift";
  f.subject = {"route", route};
  double s = 0.5;
  if (rate_up) {
    f.evidence.push_back(metric(
        *any, rate,
        fmt::format("requests on route {} {}/s -> {}/s", route, num(rate.base), num(rate.peak)),
        "purser_gateway_requests_total"));
    f.evidence.back().labels = {{"route", route}};
    f.onset = rate.onset;
  }
  if (len_up) {
    f.evidence.push_back(
        metric(*any_prompt, len,
               fmt::format("prompt tokens per request {} -> {}", num(len.base), num(len.peak))));
    f.evidence.back().labels = {};
    if (f.onset == 0 || len.onset < f.onset) f.onset = len.onset;
    s += 0.05;
  }
  if (lat && lat->ratio >= 1.1) {
    if (lat->ratio >= 1.2) s += 0.1;
    f.evidence.push_back(histEvidence(*lat->sum, lat->base, lat->shift, lat->what));
  }
  // The replicas carry it: more requests in flight on each.
  for (const Deployment& d : c_.inventory.deployments) {
    if (d.route != route) continue;
    const Series* running = engine("vllm:num_requests_running", d.name);
    if (running == nullptr) continue;
    Shift rs = upShift(gaugeOf(*running));
    if (rs.valid && rs.ratio(1) >= 1.2) {
      f.evidence.push_back(metric(
          *running, rs,
          fmt::format("requests running on {} {} -> {}", d.name, num(rs.base), num(rs.peak))));
      break;
    }
  }
  c.strength = s;
  f.explanation = fmt::format(
      "Route {} is receiving different traffic: {}{}{}. Nothing in its path shows a fault; "
      "latency follows the load.",
      route,
      rate_up ? fmt::format("requests went from {}/s to {}/s", num(rate.base), num(rate.peak)) : "",
      rate_up && len_up ? " and " : "",
      len_up ? fmt::format("prompts grew from {} to {} tokens", num(len.base), num(len.peak)) : "");
  f.next_steps = {
      "Find which keys or applications sent the new traffic (usage by key for the route).",
      fmt::format("Add capacity to route {} if the new level is expected to stay.", route),
      "Set rate limits or a queue limit for the callers that grew."};
  emit(std::move(c));
}

}  // namespace purser::diagnose
