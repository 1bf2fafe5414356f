// The incident world's physics: requests routed to replicas, the engines' queues and KV caches,
// GPUs, DCGM, the fleet and wallets, second by second, written as metric series (simulate()).
#include "sim/incident_world.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <numeric>
#include <utility>

#include "common/logging.h"

namespace purser::sim::incident {

// ---------------------------------------------------------------------------------------------
// The physics.

Regime regimeOf(const Replica& r, double lambda, double prompt, double output, double prefix_hit,
                double slow) {
  // The GPU's time, each second: prompt chunks for arriving requests (`tp` each), and decode
  // steps shared by the B running sequences (each needs `output` of them).
  Regime g;
  double kvs = prompt + 0.5 * output;  // tokens a running sequence holds, on average
  double bkv = 0.98 * r.kv_tokens / std::max(1.0, kvs);
  double tp = prompt * (1 - prefix_hit) * slow / r.prefill_tps;
  double a = r.batch_slowdown;
  auto step = [&](double b) { return r.decode_s * slow * (1 + a * std::max(0.0, b - 1)); };
  double nmax = r.max_num_seqs;
  g.kv_bound = bkv < nmax;
  g.bcap = std::max(1.0, std::min(nmax, bkv));
  g.capacity = 1 / (tp + output * step(g.bcap) / g.bcap);
  if (g.kv_bound) g.capacity *= 0.85;        // recomputation after preemptions
  double rho = std::min(0.95, lambda * tp);  // share of time spent on prompts
  double x = lambda * output * r.decode_s * slow / (1 - rho);
  double b = x * a < 0.999 ? x * (1 - a) / (1 - x * a) : 1e12;
  g.saturated = lambda >= g.capacity * 0.999 || rho >= 0.95 || b > g.bcap;
  g.running = g.saturated ? g.bcap : std::max(0.0, b);
  g.itl = step(std::max(1.0, g.running)) / (1 - rho);
  g.kv = g.running * kvs / r.kv_tokens;
  return g;
}

namespace {

// The share of a lognormal with this mean below each bound.
std::vector<double> lognormalCdf(double mean, double sigma, const std::vector<double>& bounds) {
  std::vector<double> out;
  out.reserve(bounds.size());
  double mu = std::log(std::max(mean, 1e-6)) - sigma * sigma / 2;
  for (double b : bounds) {
    double z = (std::log(b) - mu) / (sigma * std::sqrt(2.0));
    out.push_back(0.5 * std::erfc(-z));
  }
  return out;
}

// Counter state of a histogram: integer counts per bucket, and the sum.
struct HistogramAcc {
  std::vector<double> bounds;
  double count = 0, sum = 0;
  std::vector<double> buckets;  // cumulative, per bound (without +Inf)
  Series count_s, sum_s;
  std::vector<Series> bucket_s;
  double carry = 0;

  void init(const std::vector<double>& b, int samples) {
    bounds = b;
    buckets.assign(b.size(), 0);
    count_s.assign(static_cast<size_t>(samples), 0);
    sum_s.assign(static_cast<size_t>(samples), 0);
    bucket_s.assign(b.size(), Series(static_cast<size_t>(samples), 0));
  }
  void setBase(double n, double mean, double sigma) {
    n = std::floor(n);
    count = n;
    sum = n * mean;
    auto cdf = lognormalCdf(mean, sigma, bounds);
    for (size_t i = 0; i < bounds.size(); ++i) buckets[i] = std::floor(n * cdf[i]);
  }
  // Adds `n` observations (fractional counts carry over) with this mean.
  void observe(double n, double mean, double sigma) {
    carry += n;
    double whole = std::floor(carry);
    carry -= whole;
    if (whole <= 0) return;
    count += whole;
    sum += whole * mean;
    auto cdf = lognormalCdf(mean, sigma, bounds);
    for (size_t i = 0; i < bounds.size(); ++i) buckets[i] += std::floor(whole * cdf[i] + 0.5);
  }
  void record(int k) {
    count_s[static_cast<size_t>(k)] = count;
    sum_s[static_cast<size_t>(k)] = sum;
    for (size_t i = 0; i < bounds.size(); ++i) {
      // Cumulative in `le` as well: never above the next bucket or the count.
      double v = std::min(buckets[i], count);
      if (i > 0) v = std::max(v, bucket_s[i - 1][static_cast<size_t>(k)]);
      bucket_s[i][static_cast<size_t>(k)] = v;
    }
  }
};

std::string fmtBound(double b) {
  std::string s = fmt::format("{}", b);
  if (s.find('.') == std::string::npos && s.find('e') == std::string::npos) s += ".0";
  return s;
}

// A Kubernetes-looking pod suffix, stable for a name.
std::string fnvPod(const std::string& name) {
  static constexpr char kChars[] = "bcdfghjklmnpqrstvwxz2456789";
  uint64_t h = fnv1a(name);
  std::string s;
  for (int i = 0; i < 10; ++i) {
    s.push_back(kChars[h % 27]);
    h /= 27;
    if (i == 5) h = fnv1a(name, h + 7);
  }
  s.insert(s.begin() + 5, '-');
  return s;
}

enum Rank : int {
  kRankRequests = 0,
  kRankUpstream,
  kRankGwTtftBucket,
  kRankGwTtftSum,
  kRankGwTtftCount,
  kRankRunning,
  kRankWaiting,
  kRankKv,
  kRankPreempt,
  kRankPrompt,
  kRankGen,
  kRankPrefixQ,
  kRankPrefixH,
  kRankTtftBucket,
  kRankTtftSum,
  kRankTtftCount,
  kRankItlBucket,
  kRankItlSum,
  kRankItlCount,
  kRankQueueBucket,
  kRankQueueSum,
  kRankQueueCount,
  kRankUtil,
  kRankFbUsed,
  kRankFbFree,
  kRankTemp,
  kRankPower,
  kRankClock,
  kRankXid,
  kRankRemapped,
  kRankNvlink,
  kRankThermal,
  kRankPowerViolation,
  kRankCrc,
  kRankPending,
  kRankQuotaUsed,
  kRankQuotaNominal,
  kRankWallet,
};

void emit(World& w, int rank, std::string name, std::string labels, Fmt f, Series values,
          int first = 0, int last = -1) {
  OutSeries s;
  s.rank = rank;
  s.name = std::move(name);
  s.labels = std::move(labels);
  s.fmt = f;
  s.first = first;
  s.last = last < 0 ? static_cast<int>(values.size()) : last;
  s.values = std::move(values);
  if (s.first < s.last) w.out.push_back(std::move(s));
}

void emitHistogram(World& w, int rank_bucket, const std::string& base, const std::string& labels,
                   const HistogramAcc& h, int first, int last) {
  std::string open = labels.substr(0, labels.size() - 1);  // without the closing brace
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    emit(w, rank_bucket, base + "_bucket", open + ",le=\"" + fmtBound(h.bounds[i]) + "\"}",
         Fmt::kInt, h.bucket_s[i], first, last);
  }
  emit(w, rank_bucket, base + "_bucket", open + ",le=\"+Inf\"}", Fmt::kInt, h.count_s, first, last);
  emit(w, rank_bucket + 1, base + "_sum", labels, Fmt::kFixed3, h.sum_s, first, last);
  emit(w, rank_bucket + 2, base + "_count", labels, Fmt::kInt, h.count_s, first, last);
}

// A counter built from increments: absolute values, and the first sample it exists at (a labelled
// counter that starts at zero appears when it is first incremented).
struct Counter {
  double base = 0;
  Series inc;
  double carry = 0;
  bool integral = true;

  Series values(int* first) const {
    Series v(inc.size(), 0);
    double acc = base, frac = 0;
    *first = -1;
    for (size_t k = 0; k < inc.size(); ++k) {
      if (k > 0) {
        if (integral) {
          frac += inc[k];
          double whole = std::floor(frac);
          frac -= whole;
          acc += whole;
        } else {
          acc += inc[k];
        }
      }
      v[k] = acc;
      if (*first < 0 && acc > 0) *first = static_cast<int>(k);
    }
    return v;
  }
};

struct GatewayKey {
  int route;
  std::string target;
  std::string code;
  bool operator<(const GatewayKey& o) const {
    return std::tie(route, target, code) < std::tie(o.route, o.target, o.code);
  }
};

// Purser's gateway counters as they accumulate, and the failures its log lines narrate.
struct Gateway {
  World& w;
  size_t sz;
  std::map<GatewayKey, Counter> requests;  // ordered: route, then target, then code
  std::map<std::pair<std::string, std::string>, Counter> upstream;  // (target, kind)
  std::vector<std::pair<std::string, std::string>> upstream_order;
  std::map<std::pair<int, int>, Series> provider_ok;  // answered, per (route, provider)

  Counter& req(int route, const std::string& target, const std::string& code) {
    GatewayKey key{route, target, code};
    auto it = requests.find(key);
    if (it == requests.end()) it = requests.emplace(key, Counter{0, Series(sz, 0)}).first;
    return it->second;
  }
  Counter& upc(const std::string& target, const std::string& kind) {
    auto key = std::make_pair(target, kind);
    auto it = upstream.find(key);
    if (it == upstream.end()) {
      it = upstream.emplace(key, Counter{0, Series(sz, 0)}).first;
      upstream_order.push_back(key);
    }
    return it->second;
  }
  void failure(int route, const std::string& target, const std::string& kind, int status, int k,
               double n) {
    for (auto& f : w.failures) {
      if (f.route == route && f.target == target && f.kind == kind && f.status == status) {
        f.count[static_cast<size_t>(k)] += n;
        return;
      }
    }
    Failure f{route, target, kind, status, Series(sz, 0)};
    f.count[static_cast<size_t>(k)] = n;
    w.failures.push_back(std::move(f));
  }
};

// Each route's requests to its targets, with refusals, failures, retries and fallbacks.
void routeRequests(World& w, Rng& rng, Gateway& gw) {
  const int S = w.time.samples;
  const double dt = w.time.step;
  auto sz = static_cast<size_t>(S);
  for (auto& r : w.replicas) r.arrival.assign(sz, 0);
  for (int ri = 0; ri < static_cast<int>(w.routes.size()); ++ri) {
    auto& route = w.routes[static_cast<size_t>(ri)];
    for (const auto& t : route.targets) {
      if (!t.provider) {
        gw.req(ri, w.replicas[static_cast<size_t>(t.index)].name, "200");
      } else {
        gw.req(ri, w.providers[static_cast<size_t>(t.index)].name, "200");
        gw.provider_ok[{ri, t.index}] = Series(sz, 0);
      }
    }
    // Old errors from before the window: counters that exist and do not move.
    if (rng.chance(0.45) && !route.targets.empty()) {
      const auto& t = route.targets[0];
      std::string name = t.provider ? w.providers[static_cast<size_t>(t.index)].name
                                    : w.replicas[static_cast<size_t>(t.index)].name;
      gw.req(ri, name, rng.chance(0.6) ? "502" : "504").base = rng.intIn(3, 60);
    }
    if (rng.chance(0.2)) gw.req(ri, "", "429").base = rng.intIn(50, 4000);
    for (int k = 1; k < S; ++k) {
      auto ks = static_cast<size_t>(k);
      double n = route.rate[ks] * dt;
      double refused = n * route.refused[ks];
      if (refused > 0) {
        gw.req(ri, "", "429").inc[ks] += refused;
        gw.failure(ri, "", "budget", 429, k, refused);
      }
      n -= refused;
      double total_w = 0;
      for (const auto& t : route.targets) {
        if (t.provider) {
          total_w += t.weight[ks];
        } else {
          const auto& rep = w.replicas[static_cast<size_t>(t.index)];
          if (k < rep.down_from) {
            total_w += t.weight[ks] * rep.share[ks];
          }
        }
      }
      double retry_to_fallback = 0;
      for (const auto& t : route.targets) {
        if (!t.provider) {
          auto& rep = w.replicas[static_cast<size_t>(t.index)];
          if (k >= rep.down_from) {
            if (t.weight[ks] <= 0) continue;
            // Down: attempts fail to connect until the target cools down; the gateway probes it
            // again after each cooldown.
            double attempts = k == rep.down_from ? rng.intIn(5, 11) : rng.intIn(1, 4);
            if (total_w <= 0) attempts = std::max(attempts, n * t.weight[ks]);
            gw.upc(rep.name, "connect").inc[ks] += attempts;
            gw.failure(ri, rep.name, "connect", 0, k, attempts);
            if (total_w <= 0) gw.req(ri, rep.name, "502").inc[ks] += n;
            continue;
          }
          double share = total_w > 0 ? t.weight[ks] * rep.share[ks] / total_w : 0;
          double m = n * share;
          double tf = t.timeout_frac[ks], nf = t.notfound_frac[ks];
          // A model name it does not serve is refused at once; the rest reach the engine, and
          // what completes is counted once the engine has been simulated.
          rep.arrival[ks] = m * (1 - nf) / dt;
          if (tf > 0) {
            gw.req(ri, rep.name, "504").inc[ks] += m * tf;
            gw.upc(rep.name, "timeout").inc[ks] += m * tf;
            gw.failure(ri, rep.name, "timeout", 504, k, m * tf);
          }
          if (nf > 0) {
            gw.req(ri, rep.name, "404").inc[ks] += m * nf;
            gw.upc(rep.name, "4xx").inc[ks] += m * nf;
            gw.failure(ri, rep.name, "4xx", 404, k, m * nf);
          }
        } else {
          const auto& p = w.providers[static_cast<size_t>(t.index)];
          double share = total_w > 0 ? t.weight[ks] / total_w : 0;
          double m = n * share;
          double e5 = p.err_5xx[ks], e429 = p.err_429[ks], ec = p.err_connect[ks],
                 et = p.err_timeout[ks];
          double failed = m * std::min(0.98, e5 + e429 + ec + et);
          bool can_retry = route.fallback >= 0 && route.fallback != t.index;
          double retried = can_retry ? failed * 0.7 : 0;
          double final_failed = failed - retried;
          retry_to_fallback += retried;
          auto fail = [&](double share_of, const std::string& kind, const std::string& code,
                          int status) {
            if (share_of <= 0) return;
            double f = failed * share_of / std::max(1e-12, e5 + e429 + ec + et);
            gw.upc(p.name, kind).inc[ks] += f;
            gw.failure(ri, p.name, kind, status, k, f);
            gw.req(ri, p.name, code).inc[ks] +=
                final_failed * share_of / std::max(1e-12, e5 + e429 + ec + et);
          };
          fail(e5, "5xx", "502", p.status_5xx);
          fail(e429, "429", "429", 429);
          fail(ec, "connect", "502", 0);
          fail(et, "timeout", "504", 504);
          double tf = t.timeout_frac[ks], nf = t.notfound_frac[ks];
          double ok = m - failed;
          if (tf > 0) {
            gw.req(ri, p.name, "504").inc[ks] += ok * tf;
            gw.upc(p.name, "timeout").inc[ks] += ok * tf;
            gw.failure(ri, p.name, "timeout", 504, k, ok * tf);
          }
          if (nf > 0) {
            gw.req(ri, p.name, "404").inc[ks] += ok * nf;
            gw.upc(p.name, "4xx").inc[ks] += ok * nf;
            gw.failure(ri, p.name, "4xx", 404, k, ok * nf);
          }
          ok *= (1 - tf - nf);
          gw.req(ri, p.name, "200").inc[ks] += ok;
          gw.provider_ok[{ri, t.index}][ks] += ok;
        }
      }
      if (retry_to_fallback > 0 && route.fallback >= 0) {
        const auto& fb = w.providers[static_cast<size_t>(route.fallback)];
        gw.req(ri, fb.name, "200").inc[ks] += retry_to_fallback;
        gw.provider_ok[{ri, route.fallback}][ks] += retry_to_fallback;
      }
    }
  }
  // Lone errors anyone sees now and then.
  for (const auto& p : w.providers) {
    if (rng.chance(0.6)) gw.upc(p.name, "5xx").base = rng.intIn(20, 400);
    if (rng.chance(0.5)) gw.upc(p.name, "timeout").base = rng.intIn(20, 300);
  }
  for (const auto& r : w.replicas) {
    if (rng.chance(0.4)) gw.upc(r.name, "connect").base = rng.intIn(3, 25);
  }
}

// Each replica's engine: a fluid model of continuous batching, sample by sample.
void runEngines(World& w, Rng& rng) {
  const int S = w.time.samples;
  const double dt = w.time.step;
  auto sz = static_cast<size_t>(S);
  for (auto& r : w.replicas) {
    const auto& route = w.routes[static_cast<size_t>(w.findRoute(r.route))];
    for (Series* s :
         {&r.running, &r.waiting, &r.kv, &r.util, &r.ttft, &r.itl, &r.queue_time, &r.completed,
          &r.abandoned, &r.prompt_tokens, &r.gen_tokens, &r.prefix_queries, &r.prefix_hits,
          &r.preemptions, &r.prompt_tps, &r.gen_tps, &r.prefix_rate}) {
      s->assign(sz, 0);
    }
    double q = 0;
    const int m = 6;
    const double sub = dt / m;
    for (int k = 0; k < S && k < r.down_from; ++k) {
      auto ks = static_cast<size_t>(k);
      double lambda = r.arrival[ks];
      if (k == 0) lambda = r.arrival.size() > 1 ? r.arrival[1] : 0;
      double prompt = route.prompt_len[ks] * r.prompt_scale[ks];
      double output = route.output_len[ks] * r.output_scale[ks];
      double hit = route.prefix_hit / std::max(1.0, std::sqrt(r.prompt_scale[ks]));
      double slow = r.slow[ks];
      Regime g = regimeOf(r, lambda, prompt, output, hit, slow);
      double served_total = 0, preempted = 0, gave_up = 0, b = g.running;
      for (int j = 0; j < m; ++j) {
        double served;
        if (!g.saturated && q < 1e-6) {
          served = lambda;
          b = g.running;
        } else {
          served = std::min(g.capacity, lambda + q / sub);
          if (served >= g.capacity * 0.999) {
            b = g.bcap;
          } else {
            b = regimeOf(r, served, prompt, output, hit, slow).running;
          }
        }
        q += (lambda - served) * sub;
        gave_up += q * sub / r.abandon_s;
        q -= q * sub / r.abandon_s;
        q = std::max(0.0, q);
        served_total += served * sub;
        if (g.kv_bound && b >= g.bcap * 0.97) preempted += r.preempt_per_req * served * sub;
      }
      double kvs = prompt + 0.5 * output;
      double itl = r.decode_s * slow * (1 + r.batch_slowdown * std::max(0.0, b - 1));
      double rho = std::min(0.95, served_total / dt * prompt * (1 - hit) * slow / r.prefill_tps);
      itl /= (1 - rho);
      if (preempted > 0) itl *= 1.15;
      double wait = q > 0.5 ? q / std::max(g.capacity, 1e-6) : 0.002 + 0.01 * b / g.bcap;
      double prefill = prompt * (1 - hit) * slow / r.prefill_tps;
      double recompute = preempted * kvs;
      bool near_full = g.kv_bound && g.saturated;
      double kv = near_full ? rng.range(0.962, 0.996) : std::min(0.95, b * kvs / r.kv_tokens);
      if (!near_full) kv *= rng.jitter(0.04);
      r.running[ks] = std::max(0.0, std::round(b * (near_full ? 1.0 : rng.jitter(0.06))));
      if (g.saturated) r.running[ks] = std::min<double>(r.running[ks], std::floor(g.bcap));
      r.waiting[ks] = std::round(q * rng.jitter(0.03));
      // A burst now and then: a few requests wait for one scrape.
      if (k > 0 && !g.saturated && rng.chance(0.012)) r.waiting[ks] += rng.intIn(1, 3);
      r.kv[ks] = std::clamp(kv, 0.0, 1.0);
      r.ttft[ks] = (wait + prefill + itl + 0.004) * rng.jitter(0.04);
      r.itl[ks] = itl * rng.jitter(0.03);
      r.queue_time[ks] = wait;
      r.completed[ks] = served_total;
      r.abandoned[ks] = gave_up;
      r.prompt_tokens[ks] = served_total * prompt + recompute;
      r.gen_tokens[ks] = served_total * output;
      r.prefix_queries[ks] = served_total * prompt;
      r.prefix_hits[ks] = served_total * prompt * hit;
      r.preemptions[ks] = preempted;
      r.prompt_tps[ks] = (served_total * prompt * (1 - hit) + recompute) / dt;
      r.gen_tps[ks] = served_total * output / dt;
      r.prefix_rate[ks] = std::clamp(hit * rng.jitter(0.12), 0.0, 1.0);
      double busy = std::pow(std::clamp(b / g.bcap, 0.0, 1.0), 0.6);
      r.util[ks] = std::clamp((0.07 + 0.93 * busy) * 100 * rng.jitter(0.04), 1.0, 100.0);
      if (g.saturated) r.util[ks] = std::min(100.0, rng.range(95, 100.5));
    }
  }
}

// What the gateway saw of each replica: answers, and clients that gave up waiting.
void countAnswers(World& w, Gateway& gw) {
  const int S = w.time.samples;
  const double dt = w.time.step;
  for (int ri = 0; ri < static_cast<int>(w.routes.size()); ++ri) {
    const auto& route = w.routes[static_cast<size_t>(ri)];
    for (const auto& t : route.targets) {
      if (t.provider) continue;
      const auto& rep = w.replicas[static_cast<size_t>(t.index)];
      for (int k = 1; k < S && k < rep.down_from; ++k) {
        auto ks = static_cast<size_t>(k);
        double timed_out = rep.arrival[ks] * dt * t.timeout_frac[ks];
        gw.req(ri, rep.name, "200").inc[ks] += std::max(0.0, rep.completed[ks] - timed_out);
        if (rep.abandoned[ks] > 0.5) gw.req(ri, rep.name, "499").inc[ks] += rep.abandoned[ks];
      }
    }
  }
}

// Purser's gateway series.
void emitGateway(World& w, Rng& rng, Gateway& gw) {
  const int S = w.time.samples;
  const double dt = w.time.step;
  auto sz = static_cast<size_t>(S);
  {
    // Requests: in route, target, code order, as a registry would list them.
    for (auto& [key, counter] : gw.requests) {
      double rate0 = counter.inc.size() > 1 ? counter.inc[1] : 0;
      if (counter.base == 0 && rate0 > 0) counter.base = std::floor(rate0 * rng.range(600, 40000));
      int first = 0;
      Series v = counter.values(&first);
      if (first < 0) continue;
      emit(w, kRankRequests, "purser_gateway_requests_total",
           fmt::format("{{route=\"{}\",target=\"{}\",code=\"{}\"}}",
                       w.routes[static_cast<size_t>(key.route)].name, key.target, key.code),
           Fmt::kInt, std::move(v), first);
    }
    std::sort(gw.upstream_order.begin(), gw.upstream_order.end());
    for (const auto& key : gw.upstream_order) {
      auto& counter = gw.upstream[key];
      int first = 0;
      Series v = counter.values(&first);
      if (first < 0) continue;
      emit(w, kRankUpstream, "purser_gateway_upstream_errors_total",
           fmt::format("{{target=\"{}\",kind=\"{}\"}}", key.first, key.second), Fmt::kInt,
           std::move(v), first);
    }
    // TTFT as the gateway sees it, per route and target that answered.
    for (int ri = 0; ri < static_cast<int>(w.routes.size()); ++ri) {
      const auto& route = w.routes[static_cast<size_t>(ri)];
      for (const auto& t : route.targets) {
        HistogramAcc h;
        h.init(w.buckets.gateway_ttft, S);
        std::string target;
        Series n(sz, 0), mean(sz, 0);
        if (!t.provider) {
          const auto& rep = w.replicas[static_cast<size_t>(t.index)];
          target = rep.name;
          double total = 0;
          for (const auto& u : route.targets) {
            if (!u.provider) total += 1;
          }
          (void)total;
          for (int k = 0; k < S; ++k) {
            auto ks = static_cast<size_t>(k);
            if (k >= rep.down_from) continue;
            n[ks] = std::max(0.0, rep.completed[ks] - rep.arrival[ks] * dt * t.timeout_frac[ks]);
            mean[ks] = rep.ttft[ks] + rng.range(0.008, 0.03);
          }
        } else {
          const auto& p = w.providers[static_cast<size_t>(t.index)];
          target = p.name;
          const auto& ok = gw.provider_ok[{ri, t.index}];
          for (int k = 0; k < S; ++k) {
            auto ks = static_cast<size_t>(k);
            n[ks] = ok[ks];
            double trouble = p.err_5xx[ks] + p.err_429[ks] + p.err_timeout[ks] + p.err_connect[ks];
            mean[ks] = p.ttft * (1 + 0.8 * std::min(1.0, trouble)) * rng.jitter(0.06) *
                       (1 + route.prompt_len[ks] / 20000);
          }
        }
        double n1 = sz > 1 ? n[1] : 0;
        if (n1 <= 0 && t.provider) n1 = 0;
        double sigma = t.provider ? 0.55 : 0.5;
        double base = std::floor(n1 * rng.range(600, 40000));
        if (base <= 0 && n1 <= 0) {
          // A fallback that has not been used for a while still has its history.
          base = std::floor(rng.range(0, 8000));
        }
        h.setBase(base, mean[1 < sz ? 1 : 0] > 0 ? mean[1 < sz ? 1 : 0] : 0.5, sigma);
        int first = -1;
        for (int k = 0; k < S; ++k) {
          auto ks = static_cast<size_t>(k);
          if (k > 0 && n[ks] > 0) h.observe(n[ks], mean[ks], sigma);
          h.record(k);
          if (first < 0 && h.count > 0) first = k;
        }
        if (first < 0) continue;
        emitHistogram(w, kRankGwTtftBucket, "purser_gateway_ttft_seconds",
                      fmt::format("{{route=\"{}\",target=\"{}\"}}", route.name, target), h, first,
                      S);
      }
    }
  }
}

// vLLM's series, per replica, until it stops reporting.
void emitEngines(World& w, Rng& rng) {
  const int S = w.time.samples;
  auto sz = static_cast<size_t>(S);
  for (auto& r : w.replicas) {
    int last = std::min(S, r.down_from);
    if (last <= 0) continue;
    std::string labels = fmt::format("{{instance=\"{}\",model_name=\"{}\"}}", r.name, r.model);
    emit(w, kRankRunning, "vllm:num_requests_running", labels, Fmt::kInt, r.running, 0, last);
    emit(w, kRankWaiting, "vllm:num_requests_waiting", labels, Fmt::kInt, r.waiting, 0, last);
    emit(w, kRankKv, "vllm:kv_cache_usage_perc", labels, Fmt::kFixed4, r.kv, 0, last);
    double uptime_steps = rng.range(2000, 80000);  // how long the engine has been up, in steps
    auto counter = [&](const Series& inc, double base) {
      Counter c{std::floor(base), inc};
      int first = 0;
      return c.values(&first);
    };
    double rate0 = r.completed.size() > 1 ? r.completed[1] : r.completed[0];
    r.preemptions0 = rng.chance(0.5) ? 0 : std::floor(rng.range(1, 200));
    emit(w, kRankPreempt, "vllm:num_preemptions_total", labels, Fmt::kInt,
         counter(r.preemptions, r.preemptions0), 0, last);
    emit(w, kRankPrompt, "vllm:prompt_tokens_total", labels, Fmt::kInt,
         counter(r.prompt_tokens, r.prompt_tokens[std::min<size_t>(1, sz - 1)] * uptime_steps), 0,
         last);
    emit(w, kRankGen, "vllm:generation_tokens_total", labels, Fmt::kInt,
         counter(r.gen_tokens, r.gen_tokens[std::min<size_t>(1, sz - 1)] * uptime_steps), 0, last);
    double q0 = r.prefix_queries[std::min<size_t>(1, sz - 1)] * uptime_steps;
    emit(w, kRankPrefixQ, "vllm:prefix_cache_queries_total", labels, Fmt::kInt,
         counter(r.prefix_queries, q0), 0, last);
    emit(w, kRankPrefixH, "vllm:prefix_cache_hits_total", labels, Fmt::kInt,
         counter(r.prefix_hits, q0 * r.prefix_rate[std::min<size_t>(1, sz - 1)]), 0, last);
    HistogramAcc ttft, itl, queue;
    ttft.init(w.buckets.ttft, S);
    itl.init(w.buckets.itl, S);
    queue.init(w.buckets.queue, S);
    size_t k1 = std::min<size_t>(1, sz - 1);
    ttft.setBase(rate0 * uptime_steps, r.ttft[k1], 0.6);
    itl.setBase(r.gen_tokens[k1] * uptime_steps, r.itl[k1], 0.35);
    queue.setBase(rate0 * uptime_steps, std::max(r.queue_time[k1], 0.002), 0.9);
    for (int k = 0; k < last; ++k) {
      auto ks = static_cast<size_t>(k);
      if (k > 0) {
        bool queued = r.queue_time[ks] > 0.5;
        ttft.observe(r.completed[ks], r.ttft[ks], queued ? 0.45 : 0.6);
        itl.observe(r.gen_tokens[ks], r.itl[ks], 0.35);
        queue.observe(r.completed[ks], std::max(r.queue_time[ks], 0.002), queued ? 0.5 : 0.9);
      }
      ttft.record(k);
      itl.record(k);
      queue.record(k);
    }
    emitHistogram(w, kRankTtftBucket, "vllm:time_to_first_token_seconds", labels, ttft, 0, last);
    emitHistogram(w, kRankItlBucket, "vllm:inter_token_latency_seconds", labels, itl, 0, last);
    emitHistogram(w, kRankQueueBucket, "vllm:request_queue_time_seconds", labels, queue, 0, last);
  }
}

// GPUs: what runs on them, then temperature, power, clocks and counters.
void runGpus(World& w, Rng& rng) {
  const int S = w.time.samples;
  const double dt = w.time.step;
  auto sz = static_cast<size_t>(S);
  struct Occupants {
    std::vector<int> replicas, workloads;
  };
  std::vector<std::vector<Occupants>> occ;
  for (const auto& n : w.nodes) occ.emplace_back(n.gpus.size());
  for (int i = 0; i < static_cast<int>(w.replicas.size()); ++i) {
    const auto& r = w.replicas[static_cast<size_t>(i)];
    for (int g : r.gpus)
      occ[static_cast<size_t>(r.node)][static_cast<size_t>(g)].replicas.push_back(i);
  }
  for (int i = 0; i < static_cast<int>(w.workloads.size()); ++i) {
    const auto& wl = w.workloads[static_cast<size_t>(i)];
    if (wl.node < 0) continue;
    for (int g : wl.gpus) {
      occ[static_cast<size_t>(wl.node)][static_cast<size_t>(g)].workloads.push_back(i);
    }
  }
  for (size_t ni = 0; ni < w.nodes.size(); ++ni) {
    auto& node = w.nodes[ni];
    const GpuType& type = gpuTypes()[static_cast<size_t>(node.type)];
    for (size_t gi = 0; gi < node.gpus.size(); ++gi) {
      auto& gpu = node.gpus[gi];
      const auto& o = occ[ni][gi];
      for (Series* s : {&gpu.util, &gpu.fb_used, &gpu.temp, &gpu.power, &gpu.clock,
                        &gpu.thermal_violation, &gpu.power_violation, &gpu.nvlink, &gpu.crc}) {
        s->assign(sz, 0);
      }
      // The exporter's pod mapping: the first occupant.
      if (!o.replicas.empty()) {
        const auto& r = w.replicas[static_cast<size_t>(o.replicas[0])];
        gpu.pod = r.name + "-" + fnvPod(r.name);
        gpu.pod_namespace = "inference";
        gpu.container = "vllm";
      } else if (!o.workloads.empty()) {
        const auto& wl = w.workloads[static_cast<size_t>(o.workloads[0])];
        gpu.pod = wl.name + "-" + fnvPod(wl.ns + wl.name) + "-0";
        gpu.pod_namespace = wl.ns;
        gpu.container = wl.kind == WorkloadKind::kNotebook ? "notebook" : "trainer";
      }
      double temp = 0;
      double tv = gpu.thermal_violation0, pv = gpu.power_violation0, nv = gpu.nvlink0,
             crc = gpu.crc0;
      for (int k = 0; k < S; ++k) {
        auto ks = static_cast<size_t>(k);
        double util = 0, fb = 0, comm = 0;
        bool busy_proc = false;
        for (int ri : o.replicas) {
          const auto& r = w.replicas[static_cast<size_t>(ri)];
          if (k >= r.down_from) continue;
          util += r.util[ks];
          fb += r.mem_util * type.total_mib * rng.jitter(0.002);
          if (r.gpus.size() > 1) comm += 0.8 * r.util[ks] / 100;
          busy_proc = true;
        }
        for (int wi : o.workloads) {
          const auto& wl = w.workloads[static_cast<size_t>(wi)];
          if (wl.state[ks] != kRunning) continue;
          double u = wl.util * wl.util_scale[ks] *
                     (wl.kind == WorkloadKind::kNotebook ? rng.range(0.3, 1.6) : rng.jitter(0.025));
          if (wl.util_scale[ks] < 0.05) u = rng.chance(0.5) ? 0 : rng.range(0, 1.4);
          util += u;
          fb += wl.fb_mib + wl.fb_extra[ks];
          comm += wl.multi_gpu_comm[ks] * u / 100;
          busy_proc = true;
        }
        util += gpu.extra_util[ks];
        fb += gpu.extra_fb[ks];
        if (gpu.fb_override[ks] >= 0) fb = gpu.fb_override[ks];
        // Occasional single-sample blips, as real exporters show.
        if (busy_proc && rng.chance(0.01)) util *= rng.range(0.6, 0.9);
        util = std::clamp(util, 0.0, 100.0);
        fb = std::clamp(fb, 0.0, type.total_mib - 480);
        double clock = util < 2 ? type.idle_clock : type.max_clock;
        if (gpu.clock_cap[ks] > 0 && util >= 2) {
          clock = std::round(gpu.clock_cap[ks] * rng.jitter(0.02) / 15) * 15;
        }
        double target = type.temp_idle + gpu.temp_bias + type.temp_load * util / 100;
        if (gpu.temp_override[ks] > 0) target = gpu.temp_override[ks];
        if (k == 0) {
          temp = target;
        } else {
          temp += (target - temp) * (1 - std::exp(-dt / 45.0));
        }
        double shown_temp = std::round(temp + rng.range(-0.8, 0.8));
        if (rng.chance(0.008)) shown_temp += rng.intIn(2, 5);
        double power;
        if (util < 1) {
          power = type.idle_w * rng.jitter(0.04);
        } else {
          double cr = clock / type.max_clock;
          power = type.idle_w + (type.tdp_w - type.idle_w) * std::pow(util / 100, 1.15) *
                                    std::pow(cr, 1.4) * rng.range(0.9, 1.0);
        }
        power = std::min(power, type.tdp_w * 1.005);
        if (k > 0) {
          tv += gpu.violation_frac[ks] * dt * 1e6 * rng.jitter(0.08);
          if (power > 0.93 * type.tdp_w) pv += rng.range(0.02, 0.25) * dt * 1e6;
          double rate = (comm > 0 ? 2.2e4 * comm : 12.0 * util / 100 + 1) * gpu.nvlink_factor[ks];
          if (!type.nvlink) rate = 0;
          nv += std::floor(rate * dt * rng.jitter(0.06));
          crc += std::floor(gpu.crc_rate[ks] * dt * rng.jitter(0.2));
        }
        gpu.util[ks] = std::round(util);
        gpu.fb_used[ks] = std::round(fb);
        gpu.temp[ks] = shown_temp;
        gpu.power[ks] = power;
        gpu.clock[ks] = clock;
        gpu.thermal_violation[ks] = std::floor(tv);
        gpu.power_violation[ks] = std::floor(pv);
        gpu.nvlink[ks] = nv;
        gpu.crc[ks] = crc;
      }
    }
  }
}

// The DCGM exporter's series, field by field, GPU by GPU.
void emitDcgm(World& w) {
  const int S = w.time.samples;
  auto dcgmLabels = [&](const Node& n, const Gpu& g) {
    std::string s = fmt::format("{{gpu=\"{}\",UUID=\"{}\"", g.index, g.uuid);
    if (w.dcgm.device_labels) {
      s += fmt::format(",device=\"nvidia{}\",modelName=\"{}\"", g.index,
                       gpuTypes()[static_cast<size_t>(n.type)].model_name);
    }
    s += fmt::format(",Hostname=\"{}\"", n.name);
    if (w.dcgm.pod_labels && !g.pod.empty()) {
      s += fmt::format(",container=\"{}\",namespace=\"{}\",pod=\"{}\"", g.container,
                       g.pod_namespace, g.pod);
    }
    s += "}";
    return s;
  };
  auto field = [&](int rank, const char* name, Fmt f, auto get) {
    for (const auto& n : w.nodes) {
      for (const auto& g : n.gpus) {
        Series v = get(n, g);
        emit(w, rank, name, dcgmLabels(n, g), f, std::move(v), 0, std::min(S, g.present_until));
      }
    }
  };
  field(kRankUtil, "DCGM_FI_DEV_GPU_UTIL", Fmt::kInt,
        [](const Node&, const Gpu& g) { return g.util; });
  field(kRankFbUsed, "DCGM_FI_DEV_FB_USED", Fmt::kInt,
        [](const Node&, const Gpu& g) { return g.fb_used; });
  if (w.dcgm.fb_free) {
    field(kRankFbFree, "DCGM_FI_DEV_FB_FREE", Fmt::kInt, [](const Node& n, const Gpu& g) {
      Series v = g.fb_used;
      double total = gpuTypes()[static_cast<size_t>(n.type)].total_mib - 480;
      for (auto& x : v) x = std::max(0.0, total - x);
      return v;
    });
  }
  field(kRankTemp, "DCGM_FI_DEV_GPU_TEMP", Fmt::kInt,
        [](const Node&, const Gpu& g) { return g.temp; });
  field(kRankPower, "DCGM_FI_DEV_POWER_USAGE", Fmt::kFixed1,
        [](const Node&, const Gpu& g) { return g.power; });
  field(kRankClock, "DCGM_FI_DEV_SM_CLOCK", Fmt::kInt,
        [](const Node&, const Gpu& g) { return g.clock; });
  field(kRankXid, "DCGM_FI_DEV_XID_ERRORS", Fmt::kInt, [](const Node&, const Gpu& g) {
    Series v(g.xid.begin(), g.xid.end());
    return v;
  });
  if (w.dcgm.remapped) {
    field(kRankRemapped, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", Fmt::kInt,
          [](const Node&, const Gpu& g) { return g.remapped; });
  }
  if (w.dcgm.nvlink) {
    field(kRankNvlink, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", Fmt::kInt,
          [](const Node&, const Gpu& g) { return g.nvlink; });
  }
  if (w.dcgm.thermal) {
    field(kRankThermal, "DCGM_FI_DEV_THERMAL_VIOLATION", Fmt::kInt,
          [](const Node&, const Gpu& g) { return g.thermal_violation; });
  }
  if (w.dcgm.power_violation) {
    field(kRankPowerViolation, "DCGM_FI_DEV_POWER_VIOLATION", Fmt::kInt,
          [](const Node&, const Gpu& g) { return g.power_violation; });
  }
  if (w.dcgm.crc) {
    field(kRankCrc, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", Fmt::kInt,
          [](const Node&, const Gpu& g) { return g.crc; });
  }
}

// Kueue's accounting, per ClusterQueue.
void emitFleet(World& w) {
  const int S = w.time.samples;
  auto sz = static_cast<size_t>(S);
  for (auto& q : w.queues) {
    q.used.assign(sz, 0);
    q.pending.assign(sz, 0);
    for (const auto& wl : w.workloads) {
      if (wl.queue != q.name) continue;
      for (int k = 0; k < S; ++k) {
        auto ks = static_cast<size_t>(k);
        if (wl.state[ks] == kRunning) q.used[ks] += static_cast<double>(wl.gpus.size());
        if (wl.state[ks] == kPending) q.pending[ks] += 1;
      }
    }
  }
  for (const auto& q : w.queues) {
    emit(w, kRankPending, "purser_fleet_pending_workloads",
         fmt::format("{{cluster_queue=\"{}\"}}", q.name), Fmt::kInt, q.pending);
    std::string ql = fmt::format(
        "{{cluster_queue=\"{}\",flavor=\"{}\",resource=\"nvidia.com/gpu\"}}", q.name, q.flavor);
    emit(w, kRankQuotaUsed, "purser_fleet_quota_used", ql, Fmt::kInt, q.used);
    emit(w, kRankQuotaNominal, "purser_fleet_quota_nominal", ql, Fmt::kInt, w.constant(q.nominal));
  }
}

// The ledger's wallets.
void emitWallets(World& w, Rng& rng) {
  const int S = w.time.samples;
  auto sz = static_cast<size_t>(S);
  std::vector<size_t> order(w.wallets.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return w.wallets[a].scope < w.wallets[b].scope; });
  for (auto& wallet : w.wallets) {
    wallet.ratio.assign(sz, 0);
    double v = wallet.ratio0;
    for (int k = 0; k < S; ++k) {
      if (k > 0) v += wallet.per_step * rng.range(0.4, 1.6);
      if (wallet.exhaust_at >= 0 && k >= wallet.exhaust_at) v = 1.0;
      v = std::min(v, 1.0);
      wallet.ratio[static_cast<size_t>(k)] = v;
    }
  }
  for (size_t i : order) {
    emit(w, kRankWallet, "purser_wallet_spent_ratio",
         fmt::format("{{scope=\"{}\"}}", w.wallets[i].scope), Fmt::kFixed4, w.wallets[i].ratio);
  }
}

}  // namespace

void simulate(World& w) {
  Rng rng = w.rng.fork("simulate");
  Gateway gw{w, static_cast<size_t>(w.time.samples), {}, {}, {}, {}};
  routeRequests(w, rng, gw);
  runEngines(w, rng);
  countAnswers(w, gw);
  emitGateway(w, rng, gw);
  emitEngines(w, rng);
  runGpus(w, rng);
  emitDcgm(w);
  emitFleet(w);
  emitWallets(w, rng);
  std::stable_sort(w.out.begin(), w.out.end(),
                   [](const OutSeries& a, const OutSeries& b) { return a.rank < b.rank; });
}
}  // namespace purser::sim::incident
