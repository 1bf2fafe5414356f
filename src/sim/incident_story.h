// Stories: the faults of an incident case, told on a World (see incident_world.h).
//
// Each fault is an injector — `Result<Story> fault(World&, Rng&, const Placement&)` — that picks
// the objects it strikes (never one the Placement's `avoid` claims), bends their drivers from the
// onset on, adds the lines only it knows about (kernel XIDs, audit changes, Kueue events, crash
// logs), and returns the answer (`subject`), what it touched, and the questions an operator could
// ask whose scope covers the subject. incident_gen.cc picks a question, keeps a second fault and
// the red herrings out of its scope with Claims, then simulates and renders.
//
// Serving faults live in incident_faults_serving.cc, fleet faults in incident_faults_fleet.cc,
// the claims and shared helpers in incident_story.cc. Internal to purser_sim; deterministic; not
// thread-safe (one World per call).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "sim/incident_world.h"

namespace purser::sim::incident {

// ---------------------------------------------------------------------------------------------
// Claims: the objects a question covers or a fault touches, so that a second fault and the red
// herrings can be kept apart from them.

struct Claims {
  bool everything = false;
  std::set<std::string> nodes;        // nothing may be placed on these nodes
  std::set<std::string> node_faults;  // no node-wide fault on these nodes
  std::set<std::string> gpus;         // "node/index"
  std::set<std::string> replicas, routes, providers, workloads, queues, teams, principals;

  void merge(const Claims& o);
};

std::string gpuId(const World& w, int node, int gpu);  // "node/index"
std::string wlId(const Workload& wl);                  // "namespace/name"
void claimReplica(const World& w, const Replica& r, Claims& c);
void claimWorkload(const World& w, const Workload& wl, Claims& c);
// A queue, its cohort's queues and their workloads.
void claimQueue(const World& w, const ClusterQueue& q, Claims& c);

// Whether a fault may strike the object without touching anything `a` claims.
bool replicaFree(const World& w, const Replica& r, const Claims& a);
bool workloadFree(const World& w, const Workload& wl, const Claims& a);
bool gpuFree(const World& w, int node, int gpu, const Claims& a);
bool nodeFree(const World& w, int node, const Claims& a);
bool routeFree(const World& w, const Route& route, const Claims& a);
bool providerFree(const World& w, int provider, const Claims& a);
bool queueFree(const World& w, const ClusterQueue& q, const Claims& a);

// Everything running on a GPU at some point of the window.
struct GpuUsers {
  std::vector<int> replicas, workloads;
};
GpuUsers usersOf(const World& w, int node, int gpu);

// The objects a question covers.
Claims scopeOf(const World& w, const Question& q);

// ---------------------------------------------------------------------------------------------
// Stories.

struct Placement {
  int onset = 0;  // the first sample that shows the fault
  int end = 0;    // the first sample that no longer does (samples: it lasts to the window's end)
  const Claims* avoid = nullptr;
};

struct Story {
  Subject subject;
  Claims touched;
  std::vector<Question> questions;
};

Error noPlace(const std::string& what);
// An event time inside the interval that ends at sample k.
int64_t timeBefore(const World& w, Rng& rng, int k);
int routeOf(const World& w, const Replica& r);
// A replica's share of its route's arrivals at sample k, as the drivers stand.
double arrivalOf(const World& w, int replica, int k);
// The regime at sample k with the arrivals, prompts, answers and step time scaled.
Regime regimeAt(const World& w, int replica, int k, double rate_scale = 1, double prompt_scale = 1,
                double output_scale = 1, double slow = 1);
// Arrivals over what the replica completes at most.
double loadOf(const World& w, int replica, int k, double rate_scale = 1, double prompt_scale = 1,
              double slow = 1);
// Ramps a driver from 1 to `to` over `ramp` samples from `onset`, holding it until `end`.
void rampTo(Series& s, int onset, int end, int ramp, double to);
std::vector<int> replicasOfRoute(const World& w, int route);
std::vector<int> freeReplicas(const World& w, const Claims& a, int min_route_replicas = 1);
const std::string& nodeNameOf(const World& w, int node);
std::string kernelStamp(const World& w, const Node& n, int64_t t, Rng& rng);  // "[5791656.423048]"
std::string xidMessage(int xid, Rng& rng);
// The NVRM lines dmesg shows for an XID on a GPU.
void kernelXid(World& w, Rng& rng, int node, int gpu, int xid, int64_t t);
// Workloads that run the whole window, alone on their GPUs.
std::vector<int> steadyWorkloads(const World& w, const Claims& a, int min_gpus = 1,
                                 bool train_only = true);
// A workload of `q` not yet submitted, named in the fleet's style.
Workload newWorkload(World& w, Rng& rng, const ClusterQueue& q, WorkloadKind kind);

// The faults of docs/incidents.md §2.
Result<Story> kvCacheExhaustion(World& w, Rng& rng, const Placement& p);
Result<Story> replicaSaturation(World& w, Rng& rng, const Placement& p);
Result<Story> upstreamTrouble(World& w, Rng& rng, const Placement& p, bool rate_limited);
Result<Story> badConfigChange(World& w, Rng& rng, const Placement& p);
Result<Story> budgetExhausted(World& w, Rng& rng, const Placement& p);
Result<Story> trafficShift(World& w, Rng& rng, const Placement& p);
Result<Story> gpuHardwareFault(World& w, Rng& rng, const Placement& p);
Result<Story> gpuThermalThrottle(World& w, Rng& rng, const Placement& p);
Result<Story> gpuMemoryOom(World& w, Rng& rng, const Placement& p);
Result<Story> nvlinkDegraded(World& w, Rng& rng, const Placement& p);
Result<Story> quotaExhausted(World& w, Rng& rng, const Placement& p);
Result<Story> preemptionChurn(World& w, Rng& rng, const Placement& p);
Result<Story> noisyNeighbor(World& w, Rng& rng, const Placement& p);
Result<Story> idleAllocation(World& w, Rng& rng, const Placement& p);

}  // namespace purser::sim::incident
