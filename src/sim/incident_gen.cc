#include "sim/incident_gen.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "sim/incident_story.h"
#include "sim/incident_world.h"

namespace purser::sim {

using namespace incident;

namespace {

Result<Story> nothingWrong(World& w, Rng& rng, const Placement&) {
  Story s;
  std::vector<Question> q;
  for (const auto& route : w.routes) {
    q.push_back({"route", route.name, "slow"});
    q.push_back({"route", route.name, "errors"});
  }
  for (const auto& r : w.replicas) q.push_back({"deployment", r.name, "slow"});
  for (const auto& wl : w.workloads) {
    if (wl.kind == WorkloadKind::kTrain) q.push_back({"workload", wlId(wl), "slow"});
  }
  for (const auto& n : w.nodes) q.push_back({"node", n.name, "any"});
  for (const auto& qu : w.queues) q.push_back({"queue", qu.name, "pending"});
  for (int i = 0; i < 4; ++i) q.push_back({"fleet", "*", "any"});
  // A handful, so the choice stays varied but cheap.
  for (int i = 0; i < 6; ++i) s.questions.push_back(rng.pick(q));
  return s;
}

using Injector = std::function<Result<Story>(World&, Rng&, const Placement&)>;

const std::vector<std::pair<std::string, Injector>>& injectors() {
  static const std::vector<std::pair<std::string, Injector>> kAll = {
      {"kv_cache_exhaustion", kvCacheExhaustion},
      {"replica_saturation", replicaSaturation},
      {"gpu_hardware_fault", gpuHardwareFault},
      {"gpu_thermal_throttle", gpuThermalThrottle},
      {"gpu_memory_oom", gpuMemoryOom},
      {"nvlink_degraded", nvlinkDegraded},
      {"upstream_errors",
       [](World& w, Rng& r, const Placement& p) { return upstreamTrouble(w, r, p, false); }},
      {"upstream_rate_limited",
       [](World& w, Rng& r, const Placement& p) { return upstreamTrouble(w, r, p, true); }},
      {"bad_config_change", badConfigChange},
      {"budget_exhausted", budgetExhausted},
      {"quota_exhausted", quotaExhausted},
      {"preemption_churn", preemptionChurn},
      {"noisy_neighbor", noisyNeighbor},
      {"idle_allocation", idleAllocation},
      {"traffic_shift", trafficShift},
      {"none", nothingWrong},
  };
  return kAll;
}

const Injector* injectorFor(const std::string& cause) {
  for (const auto& [name, fn] : injectors()) {
    if (name == cause) return &fn;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Red herrings: trouble that is harmless, or real but outside what the question covers.

void redHerrings(World& w, Rng& rng, const Question& question, const Claims& scope,
                 const Claims& touched, int onset) {
  Claims outside = scope;
  outside.merge(touched);
  const int S = w.time.samples;
  std::vector<int> kinds = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  for (size_t i = kinds.size(); i > 1; --i) {
    std::swap(kinds[i - 1], kinds[static_cast<size_t>(rng.intIn(0, static_cast<int>(i) - 1))]);
  }
  int want = rng.intIn(2, 4);
  int done = 0;
  for (int kind : kinds) {
    if (done >= want) break;
    switch (kind) {
      case 0: {  // A GPU running hot, below where it throttles.
        std::vector<std::pair<int, int>> gpus;
        for (int n = 0; n < static_cast<int>(w.nodes.size()); ++n) {
          for (int g = 0; g < static_cast<int>(w.nodes[static_cast<size_t>(n)].gpus.size()); ++g) {
            GpuUsers u = usersOf(w, n, g);
            if (touched.gpus.count(gpuId(w, n, g)) || (u.replicas.empty() && u.workloads.empty())) {
              continue;
            }
            gpus.push_back({n, g});
          }
        }
        if (gpus.empty()) break;
        auto [n, g] = rng.pick(gpus);
        double hot = rng.range(76, 82.5);
        int from = rng.chance(0.5) ? 0 : rng.intIn(1, S / 2);
        auto& gpu = w.nodes[static_cast<size_t>(n)].gpus[static_cast<size_t>(g)];
        for (int k = from; k < S; ++k)
          gpu.temp_override[static_cast<size_t>(k)] = hot + rng.range(-1, 1);
        ++done;
        break;
      }
      case 1: {  // A benign XID on a GPU the question does not cover.
        std::vector<std::pair<int, int>> gpus;
        for (int n = 0; n < static_cast<int>(w.nodes.size()); ++n) {
          for (int g = 0; g < static_cast<int>(w.nodes[static_cast<size_t>(n)].gpus.size()); ++g) {
            if (gpuFree(w, n, g, outside)) gpus.push_back({n, g});
          }
        }
        if (gpus.empty()) break;
        auto [n, g] = rng.pick(gpus);
        GpuUsers u = usersOf(w, n, g);
        bool unused = u.replicas.empty() && u.workloads.empty();
        int xid = unused ? rng.pick(std::vector<int>{13, 31, 43, 45})
                         : rng.pick(std::vector<int>{43, 45});
        int k0 = rng.intIn(1, S - 2);
        auto& gpu = w.nodes[static_cast<size_t>(n)].gpus[static_cast<size_t>(g)];
        for (int k = k0; k < S; ++k) gpu.xid[static_cast<size_t>(k)] = xid;
        if (rng.chance(0.7)) kernelXid(w, rng, n, g, xid, timeBefore(w, rng, k0));
        ++done;
        break;
      }
      case 2: {  // A harmless change on the asked route, well before anything happened.
        std::string route =
            question.kind == "route" && w.findRoute(question.name) >= 0
                ? question.name
                : w.routes[static_cast<size_t>(rng.intIn(0, static_cast<int>(w.routes.size()) - 1))]
                      .name;
        int latest = std::max(1, onset - 10);
        int64_t t = w.time.at(rng.intIn(0, std::min(latest, S / 4))) + rng.intIn(0, 29);
        static const std::vector<std::string> kHarmless = {
            "tags: +owner={}", "description: \"{} assistant\" -> \"{} assistant (prod)\"",
            "tags: +cost-center={}", "labels: +tier=gold"};
        std::string team =
            w.teams[static_cast<size_t>(rng.intIn(0, static_cast<int>(w.teams.size()) - 1))].name;
        std::string msg = fmt::format(fmt::runtime(rng.pick(kHarmless)), team, team);
        w.audit(t, "route.update", rng.pick(w.actors), route, msg);
        ++done;
        break;
      }
      case 3: {  // A workload finishing normally (its GPUs go quiet afterwards).
        std::vector<int> cands;
        for (int i = 0; i < static_cast<int>(w.workloads.size()); ++i) {
          const auto& wl = w.workloads[static_cast<size_t>(i)];
          if (wl.node < 0 || touched.workloads.count(wlId(wl)) || !workloadFree(w, wl, touched)) {
            continue;
          }
          if (question.kind == "workload" && question.name == wlId(wl)) continue;
          if (std::all_of(wl.state.begin(), wl.state.end(), [](char s) { return s == kRunning; })) {
            cands.push_back(i);
          }
        }
        if (cands.empty()) break;
        auto& wl = w.workloads[static_cast<size_t>(rng.pick(cands))];
        w.finish(wl, w.time.at(rng.intIn(S / 5, S - 2)) + rng.intIn(0, 29), true);
        ++done;
        break;
      }
      case 4: {  // A wallet crossing its 75 % alert.
        std::vector<int> cands;
        for (int i = 0; i < static_cast<int>(w.wallets.size()); ++i) {
          const auto& wallet = w.wallets[static_cast<size_t>(i)];
          if (wallet.exhaust_at >= 0 || touched.principals.count(wallet.scope)) continue;
          cands.push_back(i);
        }
        if (cands.empty()) break;
        auto& wallet = w.wallets[static_cast<size_t>(rng.pick(cands))];
        int k = rng.intIn(2, S - 2);
        wallet.ratio0 = rng.range(0.72, 0.745);
        wallet.per_step = (0.755 - wallet.ratio0) / k;
        ++done;
        break;
      }
      case 5: {  // A busy, healthy replica on another route.
        std::vector<int> cands = freeReplicas(w, outside);
        if (cands.empty()) break;
        int ri = rng.pick(cands);
        auto& r = w.replicas[static_cast<size_t>(ri)];
        // Longer prompts and answers than its peers get (a tenant's documents), kept well short
        // of what the replica can take.
        double ps = rng.range(1.5, 4.0), os = rng.range(1.2, 2.0);
        for (int tries = 0; tries < 12; ++tries) {
          Regime g = regimeAt(w, ri, S / 2, 1, ps, os);
          if (!g.saturated && g.kv < 0.75 && loadOf(w, ri, S / 2, 1, ps) < 0.75) break;
          ps = 1 + (ps - 1) * 0.7;
          os = 1 + (os - 1) * 0.7;
        }
        for (auto& x : r.prompt_scale) x *= ps;
        for (auto& x : r.output_scale) x *= os;
        ++done;
        break;
      }
      case 6: {  // A lone 5xx from a provider the question covers.
        std::vector<int> cands;
        for (int pi = 0; pi < static_cast<int>(w.providers.size()); ++pi) {
          if (!touched.providers.count(w.providers[static_cast<size_t>(pi)].name))
            cands.push_back(pi);
        }
        if (cands.empty()) break;
        auto& prov = w.providers[static_cast<size_t>(rng.pick(cands))];
        int k = rng.intIn(1, S - 1);
        prov.err_5xx[static_cast<size_t>(k)] =
            std::max(prov.err_5xx[static_cast<size_t>(k)], 0.0005);
        ++done;
        break;
      }
      case 7: {  // One preemption in an unrelated queue, put right soon after.
        std::vector<int> cands = steadyWorkloads(w, outside);
        if (cands.empty()) break;
        auto& wl = w.workloads[static_cast<size_t>(rng.pick(cands))];
        int64_t t = w.time.at(rng.intIn(2, S - 8)) + rng.intIn(0, 29);
        w.preempt(wl, t, "InClusterQueue", "prioritization in the ClusterQueue");
        int64_t back = t + rng.intIn(40, 150);
        w.admit(wl, back, static_cast<int>(back - t));
        ++done;
        break;
      }
      case 8: {  // A light tenant sharing a replica's GPU, too small to matter.
        std::vector<std::pair<int, int>> pairs;
        for (int ri = 0; ri < static_cast<int>(w.replicas.size()); ++ri) {
          const auto& r = w.replicas[static_cast<size_t>(ri)];
          if (r.gpus.size() != 1 || touched.replicas.count(r.name)) continue;
          if (!usersOf(w, r.node, r.gpus[0]).workloads.empty()) continue;
          if (r.down_from < S) continue;
          for (int qi = 0; qi < static_cast<int>(w.queues.size()); ++qi) {
            const auto& q = w.queues[static_cast<size_t>(qi)];
            if (q.flavor == w.typeOf(r.node).flavor && queueFree(w, q, outside)) {
              pairs.push_back({ri, qi});
            }
          }
        }
        if (pairs.empty()) break;
        auto [ri, qi] = rng.pick(pairs);
        auto& r = w.replicas[static_cast<size_t>(ri)];
        Workload wl = newWorkload(w, rng, w.queues[static_cast<size_t>(qi)], WorkloadKind::kBatch);
        wl.node = r.node;
        wl.gpus = r.gpus;
        wl.util = rng.range(2, 7);
        wl.fb_mib = rng.range(1500, 4000);
        wl.logs = false;
        r.mem_util = std::min(r.mem_util, 0.85);
        w.admit(wl, w.time.at(rng.intIn(1, S - 5)) + rng.intIn(0, 29), rng.intIn(1, 30));
        w.workloads.push_back(std::move(wl));
        ++done;
        break;
      }
      default:
        break;
    }
  }
}

bool narrow(const Question& q) { return q.kind != "fleet"; }

}  // namespace

const std::vector<std::string>& incidentCauses() {
  static const std::vector<std::string> kCauses = [] {
    std::vector<std::string> v;
    for (const auto& [name, fn] : injectors()) v.push_back(name);
    return v;
  }();
  return kCauses;
}

Result<std::string> generateIncident(const IncidentSpec& spec) {
  auto known = [] {
    std::string s;
    for (const auto& c : incidentCauses()) s += (s.empty() ? "" : ", ") + c;
    return s;
  };
  const Injector* first = injectorFor(spec.cause);
  if (first == nullptr) {
    return fail(ErrorCode::kInvalidArgument,
                fmt::format("unknown cause \"{}\"; known causes: {}", spec.cause, known()));
  }
  const Injector* second = nullptr;
  if (!spec.second_cause.empty()) {
    second = injectorFor(spec.second_cause);
    if (second == nullptr) {
      return fail(
          ErrorCode::kInvalidArgument,
          fmt::format("unknown second cause \"{}\"; known causes: {}", spec.second_cause, known()));
    }
    if (spec.second_cause == "none") {
      return fail(ErrorCode::kInvalidArgument,
                  "the second cause cannot be none: it is the absence of a fault, not a fault");
    }
    if (spec.second_cause == spec.cause) {
      return fail(ErrorCode::kInvalidArgument,
                  fmt::format("a second {} cannot be told apart from the first: both would leave "
                              "the same signature, so the expected subject would be ambiguous; "
                              "pick a different second cause",
                              spec.cause));
    }
  }
  if (spec.samples < 12 || spec.samples > 5000) {
    return fail(ErrorCode::kInvalidArgument, "samples must be between 12 and 5000");
  }
  if (spec.step_s < 5 || spec.step_s > 600) {
    return fail(ErrorCode::kInvalidArgument, "step_s must be between 5 and 600 seconds");
  }
  if (spec.nodes < 0 || spec.nodes > 2000) {
    return fail(ErrorCode::kInvalidArgument, "nodes must be between 1 and 2000 (0: drawn)");
  }
  if (spec.gpus_per_node < 0 || spec.gpus_per_node > 16) {
    return fail(ErrorCode::kInvalidArgument, "gpus_per_node must be between 1 and 16 (0: drawn)");
  }

  Error last = noPlace(spec.cause);
  for (int attempt = 0; attempt < 16; ++attempt) {
    uint64_t seed =
        fnv1a(fmt::format("{}|{}|{}|{}", spec.cause, spec.second_cause, spec.seed, attempt));
    World w(seed);
    Rng sizes = w.rng.fork("sizes");
    WorldOptions o;
    o.nodes = spec.nodes > 0 ? spec.nodes : sizes.intIn(2, 5) + (second ? 1 : 0);
    o.gpus_per_node = spec.gpus_per_node;
    o.samples = spec.samples;
    o.step_s = spec.step_s;
    buildBackground(w, o);

    const int S = w.time.samples;
    Rng frng = w.rng.fork("fault:" + spec.cause);
    auto placement = [&](Rng& r, const Claims& avoid, bool lasting) {
      Placement p;
      p.onset = static_cast<int>(std::lround(S * r.range(0.25, 0.7)));
      p.onset = std::clamp(p.onset, 2, S - 4);
      p.end = S;
      if (!lasting && r.chance(0.3)) p.end = std::min(S, p.onset + r.intIn(std::max(4, S / 6), S));
      p.avoid = &avoid;
      return p;
    };
    Claims nothing;
    // Faults whose evidence is a change that stays; the others may also end inside the window.
    bool lasting = spec.cause != "upstream_errors" && spec.cause != "upstream_rate_limited" &&
                   spec.cause != "noisy_neighbor" && spec.cause != "gpu_thermal_throttle";
    Placement p1 = placement(frng, nothing, lasting);
    auto story = (*first)(w, frng, p1);
    if (!story) {
      last = story.error();
      continue;
    }
    std::vector<Question> asks;
    for (const auto& q : story->questions) {
      if (!second || narrow(q)) asks.push_back(q);
    }
    if (asks.empty()) {
      last = noPlace("a narrow question for " + spec.cause);
      continue;
    }
    Question question = frng.pick(asks);
    Claims scope = scopeOf(w, question);
    Claims touched = story->touched;
    if (second) {
      Claims avoid = scope;
      avoid.merge(touched);
      Rng srng = w.rng.fork("second:" + spec.second_cause);
      Placement p2 = placement(srng, avoid, true);
      auto story2 = (*second)(w, srng, p2);
      if (!story2) {
        last = story2.error();
        continue;
      }
      touched.merge(story2->touched);
    }
    if (spec.red_herrings) {
      Rng hrng = w.rng.fork("herrings");
      redHerrings(w, hrng, question, scope, touched, p1.onset);
    }
    simulate(w);
    narrate(w);
    std::string name = fmt::format("case-{:08x}", fnv1a(fmt::format("{}", seed)) & 0xffffffffull);
    return render(w, name, question, spec.cause, spec.cause == "none" ? Subject{} : story->subject);
  }
  return fail(ErrorCode::kFailedPrecondition,
              fmt::format("{} (cause {}{}{}, {} nodes): try more nodes or another seed",
                          last.message, spec.cause, spec.second_cause.empty() ? "" : " + ",
                          spec.second_cause, spec.nodes));
}

std::vector<IncidentSpec> incidentSuite() {
  std::vector<IncidentSpec> suite;
  const auto& causes = incidentCauses();
  // Second faults rotate through the others, skipping the cause itself and none.
  std::vector<std::string> faults;
  for (const auto& c : causes) {
    if (c != "none") faults.push_back(c);
  }
  for (size_t ci = 0; ci < causes.size(); ++ci) {
    for (int j = 0; j < 7; ++j) {
      IncidentSpec s;
      s.cause = causes[ci];
      s.seed = 1000 * (ci + 1) + static_cast<uint64_t>(j) * 37 + 11;
      s.red_herrings = true;
      static const int kNodes[] = {0, 2, 3, 0, 4, 5, 4};
      s.nodes = kNodes[j];
      if (j >= 5) {
        size_t k = (ci * 5 + static_cast<size_t>(j) * 3) % faults.size();
        while (faults[k] == s.cause) k = (k + 1) % faults.size();
        s.second_cause = faults[k];
      }
      suite.push_back(s);
    }
  }
  return suite;
}

std::string incidentFileName(size_t index, const IncidentSpec& spec) {
  return fmt::format("{:03}-{}{}{}-s{}.yaml", index, spec.cause,
                     spec.second_cause.empty() ? "" : "+", spec.second_cause, spec.seed);
}

}  // namespace purser::sim
