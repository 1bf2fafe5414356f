// Serving faults: what goes wrong between a request and its answer — a replica's KV cache or
// capacity, an outside provider, a route's configuration, a budget, the traffic itself.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "sim/incident_story.h"

namespace purser::sim::incident {

// kv_cache_exhaustion: long-context requests pinned to one replica (session affinity) until the
// KV cache, not max_num_seqs, bounds its batch: usage near 1, preemptions (and, on V0 engines
// that log them, RECOMPUTE warnings), a queue, TTFT and ITL up. Its peers stay healthy.
Result<Story> kvCacheExhaustion(World& w, Rng& rng, const Placement& p) {
  auto candidates = freeReplicas(w, *p.avoid);
  if (candidates.empty()) return std::unexpected(noPlace("a replica whose KV cache fills"));
  int ri = rng.pick(candidates);
  auto& r = w.replicas[static_cast<size_t>(ri)];
  // Long-context requests pinned to this replica (session affinity): its prompts and answers
  // grow until the KV cache, not max_num_seqs, bounds the batch, and the queue builds behind it.
  double ps = rng.range(2.5, 5.0), os = rng.range(1.0, 1.6);
  auto bound = [&] {
    Regime g = regimeAt(w, ri, p.onset, 1, ps, os);
    return g.kv_bound && g.saturated && arrivalOf(w, ri, p.onset) > g.capacity * 1.1;
  };
  for (int tries = 0; tries < 40 && !bound(); ++tries) {
    if (ps < 14 && (tries % 3 != 2 || os >= 4)) {
      ps *= 1.2;
    } else if (os < 4) {
      os *= 1.2;
    } else {
      break;
    }
  }
  if (!bound()) return std::unexpected(noPlace("a replica whose KV cache can fill"));
  int ramp = rng.intIn(1, 3);
  rampTo(r.prompt_scale, p.onset, p.end, ramp, ps);
  rampTo(r.output_scale, p.onset, p.end, ramp, os);
  Story s;
  s.subject = {"deployment", r.name};
  claimReplica(w, r, s.touched);
  s.touched.routes.insert(r.route);
  s.questions = {{"route", r.route, "slow"}, {"deployment", r.name, "slow"}, {"fleet", "*", "any"}};
  return s;
}

namespace {

// Lowers max_num_seqs until the KV cache can never be what binds at the given mix.
void capBySeqs(World& w, int ri, int k, double prompt_scale) {
  auto& r = w.replicas[static_cast<size_t>(ri)];
  const auto& route = w.routes[static_cast<size_t>(routeOf(w, r))];
  auto ks = static_cast<size_t>(k);
  double kvs = route.prompt_len[ks] * prompt_scale * 1.2 + 0.5 * route.output_len[ks] * 1.2;
  int most = static_cast<int>(0.7 * r.kv_tokens / kvs);
  if (most >= 16) most -= most % 8;  // operators pick round numbers
  r.max_num_seqs = std::max(8, std::min(r.max_num_seqs, most));
}

}  // namespace

// replica_saturation: the route's traffic grows past what one replica (a smaller max_num_seqs, a
// slower GPU) or all of them complete: running pinned at max_num_seqs, waiting and queue time
// climbing, KV usage well below full, clients giving up (499).
Result<Story> replicaSaturation(World& w, Rng& rng, const Placement& p) {
  auto candidates = freeReplicas(w, *p.avoid);
  if (candidates.empty()) return std::unexpected(noPlace("a replica that saturates"));
  int ri = rng.pick(candidates);
  int route_i = routeOf(w, w.replicas[static_cast<size_t>(ri)]);
  auto& route = w.routes[static_cast<size_t>(route_i)];
  auto peers = replicasOfRoute(w, route_i);
  bool whole_route = peers.size() >= 2 && rng.chance(0.3);
  for (int pi : peers) capBySeqs(w, pi, p.onset, 1.0);
  double f = rng.range(1.4, 2.4);
  if (whole_route) {
    // Every replica of the route is short of capacity: the route's traffic grew past them all.
    double least = 1e9;
    for (int pi : peers) least = std::min(least, loadOf(w, pi, p.onset));
    f = std::max(f, rng.range(1.2, 1.7) / std::max(1e-6, least));
  } else {
    // One replica is smaller than its peers (another max_num_seqs, a slower GPU): when the
    // route's traffic grows it saturates while the others absorb their share.
    double peer_load = 0;
    for (int pi : peers) {
      if (pi != ri) peer_load = std::max(peer_load, loadOf(w, pi, p.onset));
    }
    if (peer_load > 0) f = std::min(f, 0.78 / peer_load);
    f = std::max(f, 1.25);
    auto& r = w.replicas[static_cast<size_t>(ri)];
    static const std::vector<int> kSeqs = {512, 384, 256, 192, 128, 96, 64,
                                           48,  32,  24,  16,  12,  8,  4};
    for (int seqs : kSeqs) {
      if (loadOf(w, ri, p.onset, f) >= 1.2) break;
      r.max_num_seqs = std::min(r.max_num_seqs, seqs);
    }
    if (loadOf(w, ri, p.onset, f) < 1.2) {
      return std::unexpected(noPlace("a replica short of capacity"));
    }
    // Before the onset it must still keep up.
    if (loadOf(w, ri, 0) > 0.85) {
      return std::unexpected(noPlace("a replica that keeps up before the onset"));
    }
  }
  int ramp = rng.intIn(1, 4);
  rampTo(route.rate, p.onset, p.end, ramp, f);
  Story s;
  const auto& r = w.replicas[static_cast<size_t>(ri)];
  if (whole_route) {
    s.subject = {"route", route.name};
    for (int pi : peers) claimReplica(w, w.replicas[static_cast<size_t>(pi)], s.touched);
    s.questions = {{"route", route.name, "slow"}, {"fleet", "*", "any"}};
  } else {
    s.subject = {"deployment", r.name};
    claimReplica(w, r, s.touched);
    s.questions = {
        {"route", route.name, "slow"}, {"deployment", r.name, "slow"}, {"fleet", "*", "any"}};
  }
  s.touched.routes.insert(route.name);
  return s;
}

namespace {

struct ProviderRoute {
  int route;
  int provider;
};

// Routes whose primary target is an outside provider nothing in `avoid` depends on.
std::vector<ProviderRoute> providerRoutes(const World& w, const Claims& a) {
  std::vector<ProviderRoute> out;
  for (int ri = 0; ri < static_cast<int>(w.routes.size()); ++ri) {
    const auto& route = w.routes[static_cast<size_t>(ri)];
    if (route.targets.empty() || !route.targets[0].provider) continue;
    if (!routeFree(w, route, a)) continue;
    int p = route.targets[0].index;
    if (!providerFree(w, p, a)) continue;
    // Its trouble must not show on a route the question covers through another door.
    bool shared_with_avoided = false;
    for (const auto& other : w.routes) {
      for (const auto& t : other.targets) {
        if (t.provider && t.index == p && a.routes.count(other.name)) shared_with_avoided = true;
      }
    }
    if (!shared_with_avoided) out.push_back({ri, p});
  }
  return out;
}

}  // namespace

// upstream_errors / upstream_rate_limited: an outside provider that is a route's primary fails a
// share of attempts (5xx, connect or timeout) or answers 429 with Retry-After; Purser retries on
// the route's fallback, cools the target down, and logs each failure.
Result<Story> upstreamTrouble(World& w, Rng& rng, const Placement& p, bool rate_limited) {
  auto candidates = providerRoutes(w, *p.avoid);
  if (candidates.empty()) return std::unexpected(noPlace("an outside provider in trouble"));
  ProviderRoute pr = rng.pick(candidates);
  auto& prov = w.providers[static_cast<size_t>(pr.provider)];
  auto& route = w.routes[static_cast<size_t>(pr.route)];
  double share = rng.range(0.2, 0.85);
  Series* target = nullptr;
  if (rate_limited) {
    target = &prov.err_429;
    prov.retry_after = rng.pick(std::vector<int>{5, 10, 20, 30, 60});
  } else {
    double r = rng.uniform();
    target = r < 0.6 ? &prov.err_5xx : r < 0.8 ? &prov.err_connect : &prov.err_timeout;
    prov.status_5xx = rng.pick(std::vector<int>{500, 502, 503});
  }
  int ramp = rng.intIn(1, 3);
  for (int k = p.onset; k < p.end; ++k) {
    double f = std::min(1.0, static_cast<double>(k - p.onset + 1) / ramp);
    (*target)[static_cast<size_t>(k)] = std::min(0.95, share * f * rng.jitter(0.15));
  }
  Story s;
  s.subject = {"provider", prov.name};
  s.touched.providers.insert(prov.name);
  s.touched.routes.insert(route.name);
  s.questions = {{"route", route.name, "errors"}, {"fleet", "*", "any"}};
  if (rate_limited && route.fallback >= 0) s.questions.push_back({"route", route.name, "slow"});
  return s;
}

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

// The share of requests that last longer than `limit` seconds at the replica's current pace.
double shareOver(const World& w, int ri, int k, double limit) {
  const auto& r = w.replicas[static_cast<size_t>(ri)];
  const auto& route = w.routes[static_cast<size_t>(routeOf(w, r))];
  Regime g = regimeAt(w, ri, k);
  double mean = route.prompt_len[static_cast<size_t>(k)] / r.prefill_tps +
                route.output_len[static_cast<size_t>(k)] * g.itl;
  double sigma = 0.8;
  double mu = std::log(mean) - sigma * sigma / 2;
  return 0.5 * std::erfc((std::log(limit) - mu) / (sigma * std::sqrt(2.0)));
}

}  // namespace

// bad_config_change: an audit route.update (targets removed, weights moved, a timeout cut, a
// model renamed) or deployment.update shortly before behaviour changes: one replica saturating,
// timeouts, or 404s.
Result<Story> badConfigChange(World& w, Rng& rng, const Placement& p) {
  std::vector<int> routes;
  for (int ri = 0; ri < static_cast<int>(w.routes.size()); ++ri) {
    if (routeFree(w, w.routes[static_cast<size_t>(ri)], *p.avoid) &&
        !replicasOfRoute(w, ri).empty()) {
      routes.push_back(ri);
    }
  }
  if (routes.empty()) return std::unexpected(noPlace("a route to misconfigure"));
  int ri = rng.pick(routes);
  auto& route = w.routes[static_cast<size_t>(ri)];
  auto reps = replicasOfRoute(w, ri);
  std::string actor = rng.pick(w.actors);
  // The change lands shortly before its effect: the audit event in the interval before onset,
  // sometimes a minute or two earlier.
  int64_t t_audit = timeBefore(w, rng, p.onset) - (rng.chance(0.4) ? rng.intIn(30, 150) : 0);
  Story s;
  s.touched.routes.insert(route.name);
  for (int r : reps) claimReplica(w, w.replicas[static_cast<size_t>(r)], s.touched);
  double v = rng.uniform();
  std::vector<std::string> names;
  for (int r : reps) names.push_back(w.replicas[static_cast<size_t>(r)].name);
  if (reps.size() >= 2 && v < 0.45) {
    // Traffic concentrated on one replica: targets removed or weights moved.
    int keep = rng.intIn(0, static_cast<int>(reps.size()) - 1);
    int keep_ri = reps[static_cast<size_t>(keep)];
    if (rng.chance(0.7)) capBySeqs(w, keep_ri, p.onset, 1.0);
    // The route must be busy enough that one replica cannot carry it alone.
    double sum_load = 0, max_load = 0;
    for (int r : reps) {
      double l = loadOf(w, r, p.onset);
      sum_load += l;
      max_load = std::max(max_load, l);
    }
    double scale = std::max(1.0, rng.range(1.25, 1.8) / std::max(1e-6, sum_load));
    scale = std::min(scale, 0.78 / std::max(1e-6, max_load));
    for (auto& x : route.rate) x *= scale;
    if (loadOf(w, keep_ri, p.onset) * static_cast<double>(reps.size()) < 1.15) {
      // Equal weights today; the kept replica would take them all.
      return std::unexpected(noPlace("a route busy enough to misroute"));
    }
    bool remove = rng.chance(0.55);
    std::vector<std::string> kept_names = {names[static_cast<size_t>(keep)]};
    for (size_t i = 0; i < reps.size(); ++i) {
      if (static_cast<int>(i) == keep) continue;
      auto& t = route.targets[i];
      for (int k = p.onset; k < w.time.samples; ++k) {
        t.weight[static_cast<size_t>(k)] =
            remove ? 0.0 : 0.1 / static_cast<double>(reps.size() - 1);
      }
      if (remove && rng.chance(0.4)) {
        w.replicas[static_cast<size_t>(reps[i])].down_from =
            std::min(w.time.samples, p.onset + rng.intIn(1, 4));
      }
    }
    if (remove) {
      w.audit(t_audit, "route.update", actor, route.name,
              fmt::format("targets: [{}] -> [{}]", joined(names), joined(kept_names)));
    } else {
      std::string before, after;
      for (size_t i = 0; i < reps.size(); ++i) {
        before += (i ? "/" : "") + std::to_string(100 / reps.size());
        after += (i ? "/" : "") +
                 std::to_string(static_cast<int>(i) == keep ? 90 : 10 / (reps.size() - 1));
      }
      w.audit(t_audit, "route.update", actor, route.name,
              fmt::format("weights {} -> {} ({})", before, after, joined(names)));
    }
    s.subject = {"route", route.name};
    s.questions = {{"route", route.name, "slow"}, {"fleet", "*", "any"}};
    return s;
  }
  if (v < 0.65) {
    // A timeout far below how long answers take.
    double limit = rng.pick(std::vector<double>{3, 5, 8, 10, 15});
    double share = 0;
    for (int r : reps) share = std::max(share, shareOver(w, r, p.onset, limit));
    if (share < 0.05) {
      limit = 2;
      for (int r : reps) share = std::max(share, shareOver(w, r, p.onset, limit));
    }
    share = std::clamp(share, 0.05, 0.7);
    w.audit(t_audit, "route.update", actor, route.name,
            fmt::format("timeout: {}s -> {}s", static_cast<int>(route.timeout_s),
                        static_cast<int>(limit)));
    route.timeout_s = limit;
    for (auto& t : route.targets) {
      for (int k = p.onset; k < w.time.samples; ++k) {
        t.timeout_frac[static_cast<size_t>(k)] = share * rng.jitter(0.1);
      }
    }
    s.subject = {"route", route.name};
    s.questions = {{"route", route.name, "errors"}, {"fleet", "*", "any"}};
    return s;
  }
  if (v < 0.82) {
    // A model name the targets do not serve.
    std::string before = route.requested_model.empty() ? "default" : route.requested_model;
    std::string after =
        before + rng.pick(std::vector<std::string>{"-instruct", "-chat", "-v2", "-latest"});
    w.audit(t_audit, "route.update", actor, route.name,
            fmt::format("model: {} -> {}", before, after));
    route.requested_model = after;
    double share = rng.range(0.85, 1.0);
    for (auto& t : route.targets) {
      if (t.provider) continue;
      for (int k = p.onset; k < w.time.samples; ++k) {
        t.notfound_frac[static_cast<size_t>(k)] = share;
      }
    }
    s.subject = {"route", route.name};
    s.questions = {{"route", route.name, "errors"}, {"fleet", "*", "any"}};
    return s;
  }
  // One deployment's gateway settings: a timeout only it gets.
  size_t which = static_cast<size_t>(rng.intIn(0, static_cast<int>(reps.size()) - 1));
  int rep_i = reps[which];
  auto& rep = w.replicas[static_cast<size_t>(rep_i)];
  double limit = rng.pick(std::vector<double>{2, 3, 5});
  double share = std::clamp(shareOver(w, rep_i, p.onset, limit), 0.08, 0.7);
  w.audit(t_audit, "deployment.update", actor, rep.name,
          fmt::format("request_timeout: {}s -> {}s", static_cast<int>(route.timeout_s),
                      static_cast<int>(limit)));
  for (auto& t : route.targets) {
    if (t.provider || t.index != rep_i) continue;
    for (int k = p.onset; k < w.time.samples; ++k) {
      t.timeout_frac[static_cast<size_t>(k)] = share * rng.jitter(0.1);
    }
  }
  route.timeout_s = limit;
  s.subject = {"deployment", rep.name};
  s.questions = {
      {"route", route.name, "errors"}, {"deployment", rep.name, "errors"}, {"fleet", "*", "any"}};
  return s;
}

namespace {

std::string principalTag(const Principal& p, const std::string& wallet) {
  if (p.kind == "key") {
    return fmt::format("principal=service_account:{} team={} key={} wallet={}", p.name, p.team,
                       p.name, wallet);
  }
  return fmt::format("principal=user:{} team={} wallet={}", p.name, p.team, wallet);
}

}  // namespace

// budget_exhausted: a key's, user's or team's wallet reaches its limit at the onset; from then on
// the gateway refuses its requests (429, target "") on the routes it uses, logs "budget
// exceeded" for that principal only, and the ledger raises its hard alert.
Result<Story> budgetExhausted(World& w, Rng& rng, const Placement& p) {
  const Claims& a = *p.avoid;
  auto principalFree = [&](const Principal& pr) {
    if (a.everything || a.principals.count(pr.kind + ":" + pr.name) || a.teams.count(pr.team) ||
        a.principals.count("team:" + pr.team)) {
      return false;
    }
    for (int r : pr.routes) {
      if (a.routes.count(w.routes[static_cast<size_t>(r)].name)) return false;
    }
    return !pr.routes.empty();
  };
  std::vector<int> candidates;
  for (int i = 0; i < static_cast<int>(w.principals.size()); ++i) {
    if (principalFree(w.principals[static_cast<size_t>(i)])) candidates.push_back(i);
  }
  if (candidates.empty()) return std::unexpected(noPlace("a principal whose budget runs out"));
  const Principal& who = w.principals[static_cast<size_t>(rng.pick(candidates))];
  bool team_wallet = rng.chance(0.25);
  // Everyone who spends from the exhausted wallet is refused.
  std::vector<const Principal*> refused;
  std::string scope;
  if (team_wallet) {
    scope = "team:" + who.team;
    for (const auto& pr : w.principals) {
      if (pr.team == who.team) {
        if (!principalFree(pr)) return std::unexpected(noPlace("a team wallet apart"));
        refused.push_back(&pr);
      }
    }
  } else {
    scope = who.kind + ":" + who.name;
    refused.push_back(&who);
  }
  int wi = w.findWallet(scope);
  if (wi < 0) {
    Wallet wallet;
    wallet.scope = scope;
    wallet.limit_usd = rng.pick(std::vector<double>{100, 200, 500, 800});
    wallet.period = rng.chance(0.6) ? "daily" : "monthly";
    w.wallets.push_back(wallet);
    wi = static_cast<int>(w.wallets.size()) - 1;
  }
  auto& wallet = w.wallets[static_cast<size_t>(wi)];
  wallet.ratio0 = rng.range(0.82, 0.97);
  wallet.per_step = (1.0 - wallet.ratio0) / std::max(1, p.onset) * rng.range(0.9, 1.05);
  wallet.exhaust_at = p.onset;
  std::set<int> routes;
  for (const Principal* pr : refused) {
    for (int r : pr->routes) {
      auto& route = w.routes[static_cast<size_t>(r)];
      routes.insert(r);
      for (int k = p.onset; k < w.time.samples; ++k) {
        route.refused[static_cast<size_t>(k)] =
            std::min(0.9, route.refused[static_cast<size_t>(k)] + pr->share * rng.jitter(0.1));
      }
      route.refused_principals.push_back(principalTag(*pr, scope));
    }
  }
  Story s;
  s.touched.principals.insert(scope);
  for (const Principal* pr : refused) s.touched.principals.insert(pr->kind + ":" + pr->name);
  for (int r : routes) {
    s.touched.routes.insert(w.routes[static_cast<size_t>(r)].name);
    s.questions.push_back({"route", w.routes[static_cast<size_t>(r)].name, "errors"});
  }
  if (team_wallet) {
    s.subject = {"team", who.team};
    s.touched.teams.insert(who.team);
    s.questions.push_back({"team", who.team, "over_budget"});
  } else {
    s.subject = {who.kind, who.name};
    s.questions.push_back({"team", who.team, "over_budget"});
    if (who.kind == "user") s.questions.push_back({"user", who.name, "over_budget"});
  }
  s.questions.push_back({"fleet", "*", "any"});
  return s;
}

// traffic_shift: a route's request rate or prompt length steps up with no fault anywhere; every
// replica keeps up (no queue, no errors), latency rises moderately.
Result<Story> trafficShift(World& w, Rng& rng, const Placement& p) {
  std::vector<int> routes;
  for (int ri = 0; ri < static_cast<int>(w.routes.size()); ++ri) {
    if (routeFree(w, w.routes[static_cast<size_t>(ri)], *p.avoid) &&
        !replicasOfRoute(w, ri).empty()) {
      routes.push_back(ri);
    }
  }
  if (routes.empty()) return std::unexpected(noPlace("a route whose traffic changes"));
  int ri = rng.pick(routes);
  auto& route = w.routes[static_cast<size_t>(ri)];
  auto reps = replicasOfRoute(w, ri);
  // Room to grow: the route runs light before the shift.
  double max_load = 0;
  for (int r : reps) max_load = std::max(max_load, loadOf(w, r, p.onset));
  if (max_load > 0.3) {
    for (auto& x : route.rate) x *= 0.3 / max_load;
  }
  bool longer = rng.chance(0.45);
  double f = longer ? rng.range(1.6, 3.0) : rng.range(1.5, 2.4);
  for (int tries = 0; tries < 20; ++tries) {
    bool fine = true;
    for (int r : reps) {
      Regime g = longer ? regimeAt(w, r, p.onset, 1, f) : regimeAt(w, r, p.onset, f);
      double load = longer ? loadOf(w, r, p.onset, 1, f) : loadOf(w, r, p.onset, f);
      fine = fine && !g.saturated && load < 0.75 && g.kv < 0.7;
    }
    if (fine) break;
    f = 1 + (f - 1) * 0.85;
  }
  if (f < 1.3) return std::unexpected(noPlace("a route with room for more traffic"));
  int ramp = rng.intIn(1, 3);
  rampTo(longer ? route.prompt_len : route.rate, p.onset, p.end, ramp, f);
  Story s;
  s.subject = {"route", route.name};
  s.touched.routes.insert(route.name);
  for (int r : reps) claimReplica(w, w.replicas[static_cast<size_t>(r)], s.touched);
  s.questions = {{"route", route.name, "slow"}};
  return s;
}

}  // namespace purser::sim::incident
