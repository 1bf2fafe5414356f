// bench/routing: routing strategies compared on simulated replicas, in virtual time.
//
// Each replica is the engine `purser sim llm` runs (sim/engine_model.h: continuous batching, a
// paged KV cache, preemption, prefix caching, steps that slow with the batch), driven by a
// discrete-event loop; requests are routed by the gateway's own orderTargets() over real
// Targets, whose scraped facts (queue, KV usage) are refreshed every scrape interval of virtual
// time, as `purser serve` refreshes them — so the cache- and load-aware strategy sees load as
// stale as it would be live, corrected only by Purser's own count of requests in flight.
//
// Workloads (deterministic under the seed):
//   sharegpt    prompt and answer lengths drawn from log-normal shapes like ShareGPT's
//               (median prompt ~180 tokens, answers ~150, long tails), no shared prefixes
//   hot_prefix  32 long shared system prompts (2,000-4,000 tokens; a few used far more than
//               the rest) each followed by a short unique question
// Load is a fraction of capacity, capacity being what least_loaded completes per second when
// overloaded. Reported per strategy: time to first token p50/p90/p99, output tokens per second,
// the replicas' prefix-cache hit rate, requests shed (none: every strategy queues), and the
// routing decision's own cost (real time) with 100 replicas.
//
//   routing_bench [--replicas 8] [--requests 3000] [--seed 42] [--json FILE]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "common/random.h"
#include "gateway/admission.h"
#include "gateway/routing.h"
#include "sim/engine_model.h"

namespace purser {
namespace {

using gateway::Strategy;

constexpr int64_t kMs = 1'000'000;  // nanoseconds
constexpr int64_t kScrapeNs = 1000 * kMs;

struct Req {
  std::string prompt;
  int64_t output = 1;
};

// One token per 4 characters, as the simulator counts.
std::string text(std::mt19937_64& rng, int64_t tokens) {
  static const char* kWords[] = {"gpu ",  "kv ",   "queue ", "cache ", "node ",
                                 "pool ", "team ", "wall ",  "shard",  "rank "};
  std::string out;
  out.reserve(static_cast<size_t>(tokens) * 4);
  while (static_cast<int64_t>(out.size()) < tokens * 4) out += kWords[rng() % 10];
  out.resize(static_cast<size_t>(tokens) * 4);
  return out;
}

int64_t logNormal(std::mt19937_64& rng, double median, double sigma, int64_t lo, int64_t hi) {
  std::lognormal_distribution<double> d(std::log(median), sigma);
  return std::clamp<int64_t>(static_cast<int64_t>(d(rng)), lo, hi);
}

std::vector<Req> workload(const std::string& kind, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Req> out;
  std::vector<std::string> prefixes;
  if (kind == "hot_prefix") {
    for (int i = 0; i < 32; ++i) {
      prefixes.push_back(fmt::format("system {:02} ", i) +
                         text(rng, 2000 + static_cast<int64_t>(rng() % 2000)));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Req r;
    if (kind == "hot_prefix") {
      // Skewed: the first few prompts carry most of the traffic.
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      const size_t which = std::min<size_t>(31, static_cast<size_t>(32 * u * u));
      r.prompt = prefixes[which] + fmt::format(" question {} ", i) + text(rng, 50);
      r.output = logNormal(rng, 100, 0.5, 8, 400);
    } else {
      r.prompt = fmt::format("conversation {} ", i) + text(rng, logNormal(rng, 180, 1.0, 4, 3000));
      r.output = logNormal(rng, 150, 0.9, 4, 1200);
    }
    out.push_back(std::move(r));
  }
  return out;
}

sim::EngineOptions engine() {
  // About an 8B model on one data-centre GPU: 20 ms a decoding step, prompts at 10,000 tokens
  // a second in chunks of 2,048, 64 sequences, 131,072 tokens of KV cache.
  return {.kv_cache_tokens = 131072,
          .block_tokens = 16,
          .max_num_seqs = 64,
          .max_batched_tokens = 2048,
          .prefix_caching = true,
          .decode_step = std::chrono::milliseconds(20),
          .prefill_step = std::chrono::milliseconds(2),
          .prefill_tokens_per_s = 10000,
          .batch_slowdown = 0.01};
}

struct RunResult {
  double ttft_p50_ms = 0, ttft_p90_ms = 0, ttft_p99_ms = 0;
  double output_tokens_per_s = 0;
  double completed_per_s = 0;
  double prefix_hit_rate = 0;
  size_t shed = 0;
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

// Runs `reqs` arriving as a Poisson process of `rate` per second (0: all at once) over
// `replicas` engines routed by `strategy` ("round_robin" is the bench's own baseline).
RunResult run(const std::vector<Req>& reqs, double rate, size_t replicas,
              const std::string& strategy, uint64_t seed) {
  std::vector<sim::EngineModel> engines;
  for (size_t i = 0; i < replicas; ++i) engines.emplace_back(engine());
  gateway::Route route;
  route.alias = "bench";
  route.strategy = strategy == "slo" ? Strategy::kSlo : Strategy::kLeastLoaded;
  for (size_t i = 0; i < replicas; ++i) {
    auto t = std::make_unique<gateway::Target>();
    t->model = fmt::format("r{}", i);
    route.targets.push_back(std::move(t));
  }
  SeededRandom random(seed);
  std::mt19937_64 rng(seed);

  enum Kind { kArrival, kStepEnd, kScrape };
  struct Event {
    int64_t t;
    Kind kind;
    size_t index;  // the request or the replica
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : kind > o.kind; }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  int64_t t = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    events.push({t, kArrival, i});
    if (rate > 0) {
      t += static_cast<int64_t>(std::exponential_distribution<double>(rate)(rng) * 1e9);
    }
  }
  events.push({0, kScrape, 0});

  struct Flight {
    size_t request;
    int64_t arrived;
  };
  std::vector<std::map<sim::SeqId, Flight>> flights(replicas);
  std::vector<bool> stepping(replicas, false);
  std::vector<sim::StepResult> pending(replicas);
  std::vector<double> ttft;
  int64_t output_tokens = 0;
  size_t done = 0;
  int64_t last_finish = 0;
  size_t next_rr = 0;

  const auto startStep = [&](size_t r, int64_t now) {
    if (stepping[r] || !engines[r].hasWork()) return;
    pending[r] = engines[r].step();
    stepping[r] = true;
    events.push({now + std::max<int64_t>(1, pending[r].duration.count()), kStepEnd, r});
  };

  while (!events.empty() && done < reqs.size()) {
    const Event e = events.top();
    events.pop();
    switch (e.kind) {
      case kArrival: {
        const Req& q = reqs[e.index];
        size_t r = 0;
        if (strategy == "round_robin") {
          r = next_rr++ % replicas;
        } else {
          const std::vector<uint64_t> blocks = gateway::prefixBlocks(q.prompt);
          const auto order =
              gateway::orderTargets(route, MonoTime(std::chrono::nanoseconds(e.t)), random, blocks);
          gateway::Target* chosen = order.front();
          if (route.strategy == Strategy::kSlo) chosen->prefixes.insert(blocks);
          r = static_cast<size_t>(std::stoul(chosen->model.substr(1)));
        }
        const sim::SeqSpec spec{
            .prompt_tokens = std::max<int64_t>(1, (static_cast<int64_t>(q.prompt.size()) + 3) / 4),
            .block_hashes = sim::promptBlockHashes(q.prompt, 64),
            .output_tokens = q.output};
        auto id = engines[r].add(spec);
        if (!id) break;
        flights[r][*id] = {e.index, e.t};
        route.targets[r]->health.in_flight.fetch_add(1);
        startStep(r, e.t);
        break;
      }
      case kStepEnd: {
        const size_t r = e.index;
        stepping[r] = false;
        for (const sim::StepEvent& se : pending[r].events) {
          auto it = flights[r].find(se.seq);
          if (it == flights[r].end()) continue;
          if (se.kind == sim::EventKind::kToken) {
            ++output_tokens;
            if (se.index == 0) ttft.push_back(static_cast<double>(e.t - it->second.arrived) / kMs);
          } else if (se.kind == sim::EventKind::kFinished) {
            flights[r].erase(it);
            route.targets[r]->health.in_flight.fetch_sub(1);
            ++done;
            last_finish = e.t;
          }
        }
        startStep(r, e.t);
        break;
      }
      case kScrape: {
        for (size_t r = 0; r < replicas; ++r) {
          const sim::EngineStats s = engines[r].stats();
          route.targets[r]->observed.set(gateway::Condition::kHealthy,
                                         {.queue = static_cast<double>(s.waiting),
                                          .running = static_cast<double>(s.running),
                                          .kv_cache_usage = s.kvUsage()});
        }
        events.push({e.t + kScrapeNs, kScrape, 0});
        break;
      }
    }
  }
  RunResult out;
  out.ttft_p50_ms = percentile(ttft, 0.50);
  out.ttft_p90_ms = percentile(ttft, 0.90);
  out.ttft_p99_ms = percentile(ttft, 0.99);
  const double seconds = static_cast<double>(std::max<int64_t>(1, last_finish)) / 1e9;
  out.output_tokens_per_s = static_cast<double>(output_tokens) / seconds;
  out.completed_per_s = static_cast<double>(done) / seconds;
  uint64_t queries = 0, hits = 0;
  for (const auto& en : engines) {
    queries += en.stats().prefix_queries;
    hits += en.stats().prefix_hits;
  }
  out.prefix_hit_rate = queries ? static_cast<double>(hits) / static_cast<double>(queries) : 0;
  return out;
}

// --- Saturation: requests of three priorities at more than the replicas can serve -----------

struct PriorityResult {
  std::vector<double> ttft_ms;  // of those served, from arrival (waiting in Purser included)
  size_t served = 0, shed = 0, timed_out = 0;
};

struct SaturationResult {
  PriorityResult by[3];  // by Priority's value
  double output_tokens_per_s = 0;
  size_t max_waiting = 0;  // the most that waited in Purser at once
};

// `reqs` arrive at `rate` per second, each with a priority (20 % critical, 50 % standard, 30 %
// sheddable) and one of 4 teams; replicas are scraped every `scrape_ns`. With `queue`, Purser's
// admission (gateway/admission.h, the gateway's own code) holds requests while every replica is
// saturated and sheds sheddable ones; without it every request goes straight to a replica.
SaturationResult saturation(const std::vector<Req>& reqs, double rate, size_t replicas, bool queue,
                            int64_t scrape_ns, Duration max_wait, uint64_t seed) {
  using gateway::AdmissionQueue;
  using gateway::Priority;
  std::vector<sim::EngineModel> engines;
  for (size_t i = 0; i < replicas; ++i) engines.emplace_back(engine());
  gateway::Route route;
  route.alias = "bench";
  route.strategy = Strategy::kSlo;
  for (size_t i = 0; i < replicas; ++i) {
    auto t = std::make_unique<gateway::Target>();
    t->model = fmt::format("r{}", i);
    route.targets.push_back(std::move(t));
  }
  AdmissionQueue waiting(1000);
  SeededRandom random(seed);
  std::mt19937_64 rng(seed + 1);

  enum Kind { kArrival, kStepEnd, kScrape, kDeadline };
  struct Event {
    int64_t t;
    Kind kind;
    size_t index;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : kind > o.kind; }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  std::vector<Priority> priority(reqs.size());
  std::vector<std::string> team(reqs.size());
  std::vector<int64_t> arrived(reqs.size());
  std::vector<uint64_t> ticket(reqs.size(), 0);
  int64_t t = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const int u = static_cast<int>(rng() % 10);
    priority[i] = u < 2 ? Priority::kCritical : u < 7 ? Priority::kStandard : Priority::kSheddable;
    team[i] = fmt::format("team-{}", rng() % 4);
    arrived[i] = t;
    events.push({t, kArrival, i});
    t += static_cast<int64_t>(std::exponential_distribution<double>(rate)(rng) * 1e9);
  }
  events.push({0, kScrape, 0});

  SaturationResult out;
  std::vector<std::map<sim::SeqId, size_t>> flights(replicas);
  std::vector<bool> stepping(replicas, false);
  std::vector<sim::StepResult> pending(replicas);
  int64_t output_tokens = 0, last_finish = 0;
  size_t settled = 0;
  std::vector<std::pair<size_t, gateway::Target*>> dispatched;  // woken by the queue

  const auto index = [&](const gateway::Target* target) {
    return static_cast<size_t>(std::stoul(target->model.substr(1)));
  };
  const auto startStep = [&](size_t r, int64_t now) {
    if (stepping[r] || !engines[r].hasWork()) return;
    pending[r] = engines[r].step();
    stepping[r] = true;
    events.push({now + std::max<int64_t>(1, pending[r].duration.count()), kStepEnd, r});
  };
  // Sent to the first target of the slo order, as the gateway's first try; `counted` is the
  // target the queue already counted it against.
  const auto send = [&](size_t i, gateway::Target* counted, int64_t now) {
    const Req& q = reqs[i];
    const std::vector<uint64_t> blocks = gateway::prefixBlocks(q.prompt);
    gateway::Target* chosen =
        gateway::orderTargets(route, MonoTime(std::chrono::nanoseconds(now)), random, blocks)
            .front();
    chosen->prefixes.insert(blocks);
    if (chosen != counted) {
      chosen->observed.since.fetch_add(1);
      if (counted != nullptr) counted->observed.since.fetch_sub(1);
    }
    chosen->health.in_flight.fetch_add(1);
    const size_t r = index(chosen);
    auto id = engines[r].add(
        {.prompt_tokens = std::max<int64_t>(1, (static_cast<int64_t>(q.prompt.size()) + 3) / 4),
         .block_hashes = sim::promptBlockHashes(q.prompt, 64),
         .output_tokens = q.output});
    if (!id) std::abort();
    flights[r][*id] = i;
    startStep(r, now);
  };
  const auto pump = [&](int64_t now) {
    if (!queue) return;
    gateway::dispatchWaiters(route, waiting, MonoTime(std::chrono::nanoseconds(now)));
    for (const auto& [i, target] : dispatched) send(i, target, now);
    dispatched.clear();
  };

  while (!events.empty() && settled < reqs.size()) {
    const Event e = events.top();
    events.pop();
    switch (e.kind) {
      case kArrival: {
        const size_t i = e.index;
        const MonoTime now(std::chrono::nanoseconds(e.t));
        bool saturated = false;
        if (!queue || (waiting.empty() && gateway::roomiest(route, now, &saturated) != nullptr)) {
          send(i, nullptr, e.t);
          break;
        }
        PriorityResult& pr = out.by[static_cast<size_t>(priority[i])];
        if (priority[i] == Priority::kSheddable) {
          ++pr.shed;
          ++settled;
          break;
        }
        auto id = waiting.push({.priority = priority[i],
                                .team = team[i],
                                .wake = [&, i](AdmissionQueue::Outcome o, gateway::Target* target) {
                                  if (o == AdmissionQueue::Outcome::kDispatched) {
                                    dispatched.emplace_back(i, target);
                                  } else {
                                    ++out.by[static_cast<size_t>(priority[i])].shed;
                                    ++settled;
                                  }
                                }});
        if (!id) {
          ++pr.shed;
          ++settled;
          break;
        }
        ticket[i] = *id;
        out.max_waiting = std::max(out.max_waiting, waiting.size());
        events.push({e.t + std::chrono::duration_cast<std::chrono::nanoseconds>(max_wait).count(),
                     kDeadline, i});
        pump(e.t);
        break;
      }
      case kDeadline:
        if (waiting.remove(ticket[e.index])) {
          ++out.by[static_cast<size_t>(priority[e.index])].timed_out;
          ++settled;
        }
        break;
      case kStepEnd: {
        const size_t r = e.index;
        stepping[r] = false;
        bool finished = false;
        for (const sim::StepEvent& se : pending[r].events) {
          auto it = flights[r].find(se.seq);
          if (it == flights[r].end()) continue;
          const size_t i = it->second;
          if (se.kind == sim::EventKind::kToken) {
            ++output_tokens;
            if (se.index == 0) {
              out.by[static_cast<size_t>(priority[i])].ttft_ms.push_back(
                  static_cast<double>(e.t - arrived[i]) / kMs);
            }
          } else if (se.kind == sim::EventKind::kFinished) {
            flights[r].erase(it);
            route.targets[r]->health.in_flight.fetch_sub(1);
            route.targets[r]->observed.since.fetch_sub(1);
            ++out.by[static_cast<size_t>(priority[i])].served;
            ++settled;
            last_finish = e.t;
            finished = true;
          }
        }
        startStep(r, e.t);
        if (finished) pump(e.t);
        break;
      }
      case kScrape: {
        for (size_t r = 0; r < replicas; ++r) {
          const sim::EngineStats st = engines[r].stats();
          route.targets[r]->observed.set(gateway::Condition::kHealthy,
                                         {.queue = static_cast<double>(st.waiting),
                                          .running = static_cast<double>(st.running),
                                          .kv_cache_usage = st.kvUsage()});
        }
        pump(e.t);
        events.push({e.t + scrape_ns, kScrape, 0});
        break;
      }
    }
  }
  out.output_tokens_per_s = static_cast<double>(output_tokens) /
                            (static_cast<double>(std::max<int64_t>(1, last_finish)) / 1e9);
  return out;
}

// The slo strategy's decision over `n` replicas with scraped facts, in real time.
std::pair<double, double> decisionCost(size_t n, uint64_t seed) {
  gateway::Route route;
  route.strategy = Strategy::kSlo;
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; ++i) {
    auto t = std::make_unique<gateway::Target>();
    t->observed.set(gateway::Condition::kHealthy,
                    {.queue = static_cast<double>(rng() % 8), .kv_cache_usage = 0.5});
    route.targets.push_back(std::move(t));
  }
  const auto reqs = workload("hot_prefix", 64, seed);
  for (size_t i = 0; i < n; ++i) {
    route.targets[i]->prefixes.insert(gateway::prefixBlocks(reqs[i % reqs.size()].prompt));
  }
  SeededRandom random(seed);
  std::vector<double> ns;
  const size_t rounds = 20000;
  ns.reserve(rounds);
  for (size_t i = 0; i < rounds; ++i) {
    const auto& prompt = reqs[i % reqs.size()].prompt;
    const auto a = std::chrono::steady_clock::now();
    const auto blocks = gateway::prefixBlocks(prompt);
    auto order = gateway::orderTargets(route, MonoTime{}, random, blocks);
    const auto b = std::chrono::steady_clock::now();
    if (order.empty()) std::abort();
    ns.push_back(std::chrono::duration<double, std::micro>(b - a).count());
  }
  return {percentile(ns, 0.5), percentile(ns, 0.99)};
}

}  // namespace
}  // namespace purser

int main(int argc, char** argv) {
  using namespace purser;
  size_t replicas = 8, requests = 3000;
  uint64_t seed = 42;
  std::string json_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--replicas")) replicas = std::stoul(argv[i + 1]);
    if (!std::strcmp(argv[i], "--requests")) requests = std::stoul(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seed")) seed = std::stoull(argv[i + 1]);
    if (!std::strcmp(argv[i], "--json")) json_path = argv[i + 1];
  }
  const std::vector<std::string> strategies = {"round_robin", "least_loaded", "slo"};
  std::string json = "{\"replicas\": " + std::to_string(replicas) + ", \"runs\": [";
  bool first = true;
  fmt::print("routing ({} replicas of the simulated engine, {} requests, seed {}; virtual time)\n",
             replicas, requests, seed);
  fmt::print("  {:<11} {:>5} {:<13} {:>9} {:>9} {:>9} {:>10} {:>9} {:>5}\n", "workload", "load",
             "strategy", "ttft p50", "ttft p90", "ttft p99", "out tok/s", "hit rate", "shed");
  for (const std::string kind : {"sharegpt", "hot_prefix"}) {
    const auto reqs = workload(kind, requests, seed);
    // Capacity: what least_loaded completes per second when everything arrives at once.
    const double capacity = run(reqs, 0, replicas, "least_loaded", seed).completed_per_s;
    for (const double load : {0.6, 0.8, 0.95}) {
      for (const auto& s : strategies) {
        const RunResult r = run(reqs, capacity * load, replicas, s, seed);
        fmt::print(
            "  {:<11} {:>4.0f}% {:<13} {:>7.0f}ms {:>7.0f}ms {:>7.0f}ms {:>10.0f} {:>8.1f}% "
            "{:>5}\n",
            kind, load * 100, s, r.ttft_p50_ms, r.ttft_p90_ms, r.ttft_p99_ms, r.output_tokens_per_s,
            r.prefix_hit_rate * 100, r.shed);
        json += fmt::format(
            "{}{{\"workload\": \"{}\", \"load\": {}, \"capacity_per_s\": {:.2f}, \"strategy\": "
            "\"{}\", \"ttft_ms\": {{\"p50\": {:.1f}, \"p90\": {:.1f}, \"p99\": {:.1f}}}, "
            "\"output_tokens_per_s\": {:.1f}, \"prefix_hit_rate\": {:.4f}, \"shed\": {}}}",
            first ? "" : ", ", kind, load, capacity, s, r.ttft_p50_ms, r.ttft_p90_ms, r.ttft_p99_ms,
            r.output_tokens_per_s, r.prefix_hit_rate, r.shed);
        first = false;
      }
    }
  }
  {
    // Saturation: 150 % of capacity, ShareGPT-like lengths, objective TTFT p95 2 s.
    // Three times as many requests, so that most of the run is past the first seconds' build-up.
    const auto reqs = workload("sharegpt", requests * 3, seed);
    const double capacity = run(reqs, 0, replicas, "least_loaded", seed).completed_per_s;
    fmt::print(
        "saturation at 150% of capacity ({} requests, {:.1f} requests/s; 20% critical, "
        "50% standard, 30% sheddable; wait bound 30 s)\n",
        reqs.size(), capacity * 1.5);
    fmt::print("  {:<22} {:<10} {:>7} {:>6} {:>9} {:>9} {:>9} {:>10}\n", "admission", "priority",
               "served", "shed", "timed out", "ttft p50", "ttft p99", "out tok/s");
    json += "], \"saturation\": [";
    bool first_s = true;
    struct Mode {
      const char* name;
      bool queue;
      int64_t scrape_ns;
    };
    for (const Mode m :
         {Mode{"none (straight on)", false, kScrapeNs}, Mode{"purser, scrape 1 s", true, kScrapeNs},
          Mode{"purser, scrape 100 ms", true, 100 * kMs}}) {
      const SaturationResult r = saturation(reqs, capacity * 1.5, replicas, m.queue, m.scrape_ns,
                                            std::chrono::seconds(30), seed);
      const char* names[] = {"sheddable", "standard", "critical"};
      for (int p = 2; p >= 0; --p) {
        const PriorityResult& pr = r.by[p];
        const double p50 = percentile(pr.ttft_ms, 0.5), p99 = percentile(pr.ttft_ms, 0.99);
        fmt::print("  {:<22} {:<10} {:>7} {:>6} {:>9} {:>7.0f}ms {:>7.0f}ms {:>10.0f}\n", m.name,
                   names[p], pr.served, pr.shed, pr.timed_out, p50, p99, r.output_tokens_per_s);
        json += fmt::format(
            "{}{{\"admission\": \"{}\", \"priority\": \"{}\", \"served\": {}, \"shed\": {}, "
            "\"timed_out\": {}, \"ttft_ms\": {{\"p50\": {:.1f}, \"p99\": {:.1f}}}, "
            "\"output_tokens_per_s\": {:.1f}, \"max_waiting\": {}}}",
            first_s ? "" : ", ", m.name, names[p], pr.served, pr.shed, pr.timed_out, p50, p99,
            r.output_tokens_per_s, r.max_waiting);
        first_s = false;
      }
    }
  }
  const auto [p50, p99] = decisionCost(100, seed);
  fmt::print(
      "  slo decision with 100 replicas (real time, prompt hashing included): p50 {:.1f} us, "
      "p99 {:.1f} us\n",
      p50, p99);
  json += fmt::format("], \"decision_us_100_replicas\": {{\"p50\": {:.2f}, \"p99\": {:.2f}}}}}\n",
                      p50, p99);
  if (!json_path.empty()) std::ofstream(json_path) << json;
  return 0;
}
