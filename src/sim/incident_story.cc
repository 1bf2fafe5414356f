#include "sim/incident_story.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace purser::sim::incident {

void Claims::merge(const Claims& o) {
  everything = everything || o.everything;
  using Set = std::set<std::string>;
  const std::pair<Set*, const Set*> pairs[] = {
      {&nodes, &o.nodes},          {&node_faults, &o.node_faults}, {&gpus, &o.gpus},
      {&replicas, &o.replicas},    {&routes, &o.routes},           {&providers, &o.providers},
      {&workloads, &o.workloads},  {&queues, &o.queues},           {&teams, &o.teams},
      {&principals, &o.principals}};
  for (const auto& [mine, theirs] : pairs) mine->insert(theirs->begin(), theirs->end());
}

std::string gpuId(const World& w, int node, int gpu) {
  return fmt::format("{}/{}", w.nodes[static_cast<size_t>(node)].name, gpu);
}

std::string wlId(const Workload& wl) { return wl.ns + "/" + wl.name; }

void claimReplica(const World& w, const Replica& r, Claims& c) {
  c.replicas.insert(r.name);
  c.node_faults.insert(w.nodes[static_cast<size_t>(r.node)].name);
  for (int g : r.gpus) c.gpus.insert(gpuId(w, r.node, g));
}

void claimWorkload(const World& w, const Workload& wl, Claims& c) {
  c.workloads.insert(wlId(wl));
  if (wl.node >= 0) {
    c.node_faults.insert(w.nodes[static_cast<size_t>(wl.node)].name);
    for (int g : wl.gpus) c.gpus.insert(gpuId(w, wl.node, g));
  }
}

void claimQueue(const World& w, const ClusterQueue& q, Claims& c) {
  c.queues.insert(q.name);
  for (const auto& o : w.queues) {
    if (o.cohort == q.cohort) c.queues.insert(o.name);
  }
  for (const auto& wl : w.workloads) {
    if (wl.queue == q.name) claimWorkload(w, wl, c);
  }
}

bool replicaFree(const World& w, const Replica& r, const Claims& a) {
  if (a.everything || a.replicas.count(r.name) || a.routes.count(r.route) ||
      a.nodes.count(w.nodes[static_cast<size_t>(r.node)].name)) {
    return false;
  }
  for (int g : r.gpus) {
    if (a.gpus.count(gpuId(w, r.node, g))) return false;
  }
  return true;
}

bool workloadFree(const World& w, const Workload& wl, const Claims& a) {
  if (a.everything || a.workloads.count(wlId(wl)) || a.queues.count(wl.queue) ||
      a.teams.count(wl.ns)) {
    return false;
  }
  if (wl.node >= 0) {
    if (a.nodes.count(w.nodes[static_cast<size_t>(wl.node)].name)) return false;
    for (int g : wl.gpus) {
      if (a.gpus.count(gpuId(w, wl.node, g))) return false;
    }
  }
  return true;
}

GpuUsers usersOf(const World& w, int node, int gpu) {
  GpuUsers u;
  for (int i = 0; i < static_cast<int>(w.replicas.size()); ++i) {
    const auto& r = w.replicas[static_cast<size_t>(i)];
    if (r.node == node && std::count(r.gpus.begin(), r.gpus.end(), gpu)) u.replicas.push_back(i);
  }
  for (int i = 0; i < static_cast<int>(w.workloads.size()); ++i) {
    const auto& wl = w.workloads[static_cast<size_t>(i)];
    if (wl.node == node && std::count(wl.gpus.begin(), wl.gpus.end(), gpu)) {
      u.workloads.push_back(i);
    }
  }
  return u;
}

bool gpuFree(const World& w, int node, int gpu, const Claims& a) {
  if (a.everything || a.nodes.count(w.nodes[static_cast<size_t>(node)].name) ||
      a.gpus.count(gpuId(w, node, gpu))) {
    return false;
  }
  GpuUsers u = usersOf(w, node, gpu);
  for (int r : u.replicas) {
    if (!replicaFree(w, w.replicas[static_cast<size_t>(r)], a)) return false;
  }
  for (int i : u.workloads) {
    if (!workloadFree(w, w.workloads[static_cast<size_t>(i)], a)) return false;
  }
  return true;
}

bool nodeFree(const World& w, int node, const Claims& a) {
  const auto& n = w.nodes[static_cast<size_t>(node)];
  if (a.everything || a.nodes.count(n.name) || a.node_faults.count(n.name)) return false;
  for (int g = 0; g < static_cast<int>(n.gpus.size()); ++g) {
    if (!gpuFree(w, node, g, a)) return false;
  }
  return true;
}

bool routeFree(const World& w, const Route& route, const Claims& a) {
  if (a.everything || a.routes.count(route.name)) return false;
  for (const auto& t : route.targets) {
    if (!t.provider && !replicaFree(w, w.replicas[static_cast<size_t>(t.index)], a)) return false;
  }
  return true;
}

bool providerFree(const World& w, int p, const Claims& a) {
  const auto& name = w.providers[static_cast<size_t>(p)].name;
  if (a.everything || a.providers.count(name)) return false;
  for (const auto& route : w.routes) {
    for (const auto& t : route.targets) {
      if (t.provider && t.index == p && a.routes.count(route.name)) return false;
    }
  }
  return true;
}

bool queueFree(const World& w, const ClusterQueue& q, const Claims& a) {
  if (a.everything || a.queues.count(q.name) || a.teams.count(q.team)) return false;
  for (const auto& o : w.queues) {
    if (o.cohort == q.cohort && a.queues.count(o.name)) return false;
  }
  for (const auto& wl : w.workloads) {
    if (wl.queue == q.name && !workloadFree(w, wl, a)) return false;
  }
  return true;
}

// The objects a question covers.
Claims scopeOf(const World& w, const Question& q) {
  Claims c;
  if (q.kind == "fleet") {
    c.everything = true;
    return c;
  }
  if (q.kind == "route") {
    c.routes.insert(q.name);
    int ri = w.findRoute(q.name);
    if (ri >= 0) {
      for (const auto& t : w.routes[static_cast<size_t>(ri)].targets) {
        if (t.provider) {
          c.providers.insert(w.providers[static_cast<size_t>(t.index)].name);
        } else {
          claimReplica(w, w.replicas[static_cast<size_t>(t.index)], c);
        }
      }
      for (const auto& p : w.principals) {
        if (std::count(p.routes.begin(), p.routes.end(), ri)) {
          c.principals.insert(p.kind + ":" + p.name);
        }
      }
    }
  } else if (q.kind == "deployment") {
    int ri = w.findReplica(q.name);
    if (ri >= 0) {
      claimReplica(w, w.replicas[static_cast<size_t>(ri)], c);
      c.routes.insert(w.replicas[static_cast<size_t>(ri)].route);
    }
  } else if (q.kind == "workload") {
    int wi = w.findWorkload(q.name);
    if (wi >= 0) {
      const auto& wl = w.workloads[static_cast<size_t>(wi)];
      claimWorkload(w, wl, c);
      int qi = w.findQueue(wl.queue);
      if (qi >= 0) claimQueue(w, w.queues[static_cast<size_t>(qi)], c);
    }
  } else if (q.kind == "queue") {
    int qi = w.findQueue(q.name);
    if (qi >= 0) {
      claimQueue(w, w.queues[static_cast<size_t>(qi)], c);
      c.teams.insert(w.queues[static_cast<size_t>(qi)].team);
    }
  } else if (q.kind == "team") {
    c.teams.insert(q.name);
    c.principals.insert("team:" + q.name);
    for (const auto& qu : w.queues) {
      if (qu.team == q.name) claimQueue(w, qu, c);
    }
    for (const auto& p : w.principals) {
      if (p.team == q.name) c.principals.insert(p.kind + ":" + p.name);
    }
  } else if (q.kind == "user") {
    c.principals.insert("user:" + q.name);
    for (const auto& p : w.principals) {
      if (p.kind == "user" && p.name == q.name) {
        c.teams.insert(p.team);
        c.principals.insert("team:" + p.team);
      }
    }
  } else if (q.kind == "node") {
    c.nodes.insert(q.name);
    c.node_faults.insert(q.name);
    for (int ni = 0; ni < static_cast<int>(w.nodes.size()); ++ni) {
      if (w.nodes[static_cast<size_t>(ni)].name != q.name) continue;
      for (const auto& r : w.replicas) {
        if (r.node == ni) claimReplica(w, r, c);
      }
      for (const auto& wl : w.workloads) {
        if (wl.node == ni) claimWorkload(w, wl, c);
      }
    }
  }
  return c;
}

Error noPlace(const std::string& what) {
  return Error(ErrorCode::kFailedPrecondition, "no place for " + what);
}

// An event time inside the interval that ends at sample k.
int64_t timeBefore(const World& w, Rng& rng, int k) {
  return w.time.at(std::max(0, k - 1)) + rng.intIn(1, w.time.step - 1);
}

int routeOf(const World& w, const Replica& r) { return w.findRoute(r.route); }

// A replica's share of its route's arrivals at sample k, if nothing changed.
double arrivalOf(const World& w, int replica, int k) {
  const auto& r = w.replicas[static_cast<size_t>(replica)];
  const auto& route = w.routes[static_cast<size_t>(routeOf(w, r))];
  auto ks = static_cast<size_t>(k);
  double total = 0, mine = 0;
  for (const auto& t : route.targets) {
    double wt =
        t.weight[ks] * (t.provider ? 1.0 : w.replicas[static_cast<size_t>(t.index)].share[ks]);
    total += wt;
    if (!t.provider && t.index == replica) mine = wt;
  }
  return total > 0 ? route.rate[ks] * mine / total : 0;
}

Regime regimeAt(const World& w, int replica, int k, double rate_scale, double prompt_scale,
                double output_scale, double slow) {
  const auto& r = w.replicas[static_cast<size_t>(replica)];
  const auto& route = w.routes[static_cast<size_t>(routeOf(w, r))];
  auto ks = static_cast<size_t>(k);
  return regimeOf(r, arrivalOf(w, replica, k) * rate_scale, route.prompt_len[ks] * prompt_scale,
                  route.output_len[ks] * output_scale,
                  route.prefix_hit / std::max(1.0, std::sqrt(prompt_scale)), slow);
}

// The load of a replica: arrivals over what it completes at most.
double loadOf(const World& w, int replica, int k, double rate_scale, double prompt_scale,
              double slow) {
  Regime g = regimeAt(w, replica, k, rate_scale, prompt_scale, 1, slow);
  return arrivalOf(w, replica, k) * rate_scale / std::max(1e-9, g.capacity);
}

// Ramps a driver from 1 to `to` over `ramp` samples from `onset`, holding it until `end`.
void rampTo(Series& s, int onset, int end, int ramp, double to) {
  for (int k = onset; k < end && k < static_cast<int>(s.size()); ++k) {
    double f = std::min(1.0, static_cast<double>(k - onset + 1) / std::max(1, ramp));
    s[static_cast<size_t>(k)] *= 1 + (to - 1) * f;
  }
}

std::vector<int> replicasOfRoute(const World& w, int route) {
  std::vector<int> out;
  for (const auto& t : w.routes[static_cast<size_t>(route)].targets) {
    if (!t.provider) out.push_back(t.index);
  }
  return out;
}

std::vector<int> freeReplicas(const World& w, const Claims& a, int min_route_replicas) {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(w.replicas.size()); ++i) {
    const auto& r = w.replicas[static_cast<size_t>(i)];
    if (!replicaFree(w, r, a)) continue;
    if (static_cast<int>(replicasOfRoute(w, routeOf(w, r)).size()) < min_route_replicas) continue;
    out.push_back(i);
  }
  return out;
}

const std::string& nodeNameOf(const World& w, int node) {
  return w.nodes[static_cast<size_t>(node)].name;
}

std::string kernelStamp(const World& w, const Node& n, int64_t t, Rng& rng) {
  double up = n.kernel_uptime + static_cast<double>(t - w.time.start) + rng.uniform();
  return fmt::format("[{:.6f}]", up);
}

std::string xidMessage(int xid, Rng& rng) {
  switch (xid) {
    case 48:
      return fmt::format(
          "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
          "partition {}, subpartition {}.",
          rng.intIn(0, 11), rng.intIn(0, 1));
    case 63:
      return fmt::format(
          "Row Remapper: New row (0x{:016x}) was marked for remapping, reset gpu to activate.",
          rng.next() & 0xffffffffull);
    case 64:
      return fmt::format(
          "Row Remapper: Failed to mark row (0x{:016x}) for remapping, no remapping resources "
          "left.",
          rng.next() & 0xffffffffull);
    case 74:
      return fmt::format(
          "NVLink: fatal error detected on link {}(0x0, 0x0, 0x{:x}, 0x0, 0x0, 0x0, 0x0)",
          rng.intIn(0, 17), 1u << rng.intIn(8, 20));
    case 79:
      return "GPU has fallen off the bus.";
    case 94:
      return "Contained: SM (0x1). RST: No, D-RST: No";
    case 95:
      return "Uncontained: FBHUB. RST: Yes, D-RST: No";
    case 13:
      return fmt::format(
          "Graphics SM Warp Exception on (GPC {}, TPC {}, SM {}): Out Of Range Address",
          rng.intIn(0, 7), rng.intIn(0, 8), rng.intIn(0, 1));
    case 31:
      return fmt::format(
          "Ch {:08x}, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{} faulted @ "
          "0x7f{}_{}. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
          rng.intIn(8, 64), rng.intIn(0, 15), rng.hex(2), rng.hex(8));
    default:
      return fmt::format("Ch {:08x}", rng.intIn(8, 64));
  }
}

void kernelXid(World& w, Rng& rng, int node, int gpu, int xid, int64_t t) {
  const auto& n = w.nodes[static_cast<size_t>(node)];
  const auto& g = n.gpus[static_cast<size_t>(gpu)];
  std::string pid = xid == 95 ? "pid='<unknown>', name=<unknown>"
                              : fmt::format("pid={}, name={}", rng.intIn(1000, 99999),
                                            rng.chance(0.7) ? "python3" : "python");
  if (xid == 79) {
    w.log(t, n.name,
          fmt::format("{} NVRM: GPU at PCI:{}: {}", kernelStamp(w, n, t, rng), g.pci, g.uuid));
    w.log(t, n.name,
          fmt::format("{} NVRM: GPU Board Serial Number: {}", kernelStamp(w, n, t, rng),
                      1560000000000 + rng.intIn(0, 99999999)));
  }
  w.log(t, n.name,
        fmt::format("{} NVRM: Xid (PCI:{}): {}, {}, {}", kernelStamp(w, n, t, rng), g.pci, xid, pid,
                    xidMessage(xid, rng)));
  if (xid == 79) {
    w.log(t, n.name,
          fmt::format("{} NVRM: GPU {}.0: GPU has fallen off the bus.", kernelStamp(w, n, t, rng),
                      g.pci));
  }
}

// Training workloads that run for the whole window.
std::vector<int> steadyWorkloads(const World& w, const Claims& a, int min_gpus, bool train_only) {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(w.workloads.size()); ++i) {
    const auto& wl = w.workloads[static_cast<size_t>(i)];
    if (wl.node < 0 || static_cast<int>(wl.gpus.size()) < min_gpus) continue;
    if (train_only && wl.kind != WorkloadKind::kTrain) continue;
    bool steady =
        std::all_of(wl.state.begin(), wl.state.end(), [](char s) { return s == kRunning; });
    if (!steady || !workloadFree(w, wl, a)) continue;
    // Not sharing its GPUs with anything else.
    bool alone = true;
    for (int g : wl.gpus) {
      GpuUsers u = usersOf(w, wl.node, g);
      alone = alone && u.replicas.empty() && u.workloads.size() == 1;
    }
    if (alone) out.push_back(i);
  }
  return out;
}

Workload newWorkload(World& w, Rng& rng, const ClusterQueue& q, WorkloadKind kind) {
  Workload wl;
  wl.kind = kind;
  wl.ns = q.team;
  wl.queue = q.name;
  do {
    wl.name = w.workloadName(rng, kind);
  } while (w.findWorkload(wl.ns + "/" + wl.name) >= 0);
  wl.titan_logs = rng.chance(0.5);
  wl.logs = kind == WorkloadKind::kTrain;
  wl.train_line = rng.pick(std::vector<int>{212, 218, 230});
  wl.log_every = rng.pick(std::vector<int>{1, 2, 3});
  wl.log_phase = rng.intIn(0, wl.log_every - 1);
  wl.util = kind == WorkloadKind::kTrain ? rng.range(82, 98) : rng.range(55, 92);
  wl.step_time = rng.range(0.7, 3.2);
  wl.tokens_per_s = rng.range(3000, 90000);
  wl.loss = rng.range(2.1, 3.3);
  wl.lr = rng.range(2.3e-4, 3.0e-4);
  wl.step0 = rng.intIn(500, 40000);
  wl.state.assign(static_cast<size_t>(w.time.samples), kNotSubmitted);
  wl.util_scale = w.constant(1);
  wl.fb_extra = w.constant(0);
  wl.slow = w.constant(1);
  wl.multi_gpu_comm = w.constant(0);
  return wl;
}

}  // namespace purser::sim::incident
