// The world an incident case describes, and the physics that turns it into evidence.
//
// A World holds what a small GPU fleet behind Purser is made of — nodes and their GPUs, model
// server replicas behind Purser's routes, outside providers, teams with their Kueue ClusterQueues
// and workloads, principals and their wallets — and, per sample, the *drivers* of its behaviour:
// request rates and prompt lengths, per-replica slow-downs, GPU heat and clock caps, outages, XID
// codes, workload lifecycles. incident_gen.cc builds a healthy background with buildBackground(),
// lets faults and red herrings bend the drivers (and add the audit, fleet and kernel lines only
// they know about), then simulate() derives every series from the drivers with one model for all
// — a continuous-batching queue per replica, first-order GPU temperature, Kueue quota accounting,
// Purser's routing with fallback and cooldown — and narrate() writes the log lines a real system
// prints for what happened (vLLM stats and RECOMPUTE lines, training steps, Purser's logfmt
// warnings, cooldown events, wallet alerts). render() writes the case in the format of
// docs/incidents.md.
//
// Internal to purser_sim. Deterministic: every draw comes from Rng streams derived from the
// case's seed, and nothing reads a clock. Not thread-safe: one World per call.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace purser::sim::incident {

using Series = std::vector<double>;

// splitmix64: small, fast and good enough for simulated noise; fork() derives an independent
// stream from a tag so that adding a draw in one part of the world does not shift the others.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  double uniform();                    // [0, 1)
  double range(double lo, double hi);  // [lo, hi)
  int intIn(int lo, int hi);           // [lo, hi], lo <= hi
  bool chance(double p) { return uniform() < p; }
  double normal();            // standard normal
  double jitter(double rel);  // 1 +- rel, uniform
  std::string hex(int digits);
  Rng fork(std::string_view tag) const;
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(intIn(0, static_cast<int>(v.size()) - 1))];
  }

 private:
  uint64_t state_;
};

uint64_t fnv1a(std::string_view text, uint64_t seed = 1469598103934665603ull);

// The sample times of a case: `samples` samples `step` seconds apart from `start` (Unix seconds).
struct TimeAxis {
  int64_t start = 0;
  int step = 30;
  int samples = 41;
  int64_t at(int k) const { return start + static_cast<int64_t>(k) * step; }
  int64_t end() const { return at(samples - 1); }
  // The first sample at or after `t`, clamped to [0, samples].
  int sampleAtOrAfter(int64_t t) const;
};

std::string isoTime(int64_t t);                // 2026-11-20T10:00:00Z
std::string isoTimeMillis(int64_t t, int ms);  // 2026-11-20T10:00:00.123Z
std::string vllmTime(int64_t t);               // 11-20 10:00:00
std::string pyTime(int64_t t, int ms);         // 2026-11-20 10:00:00,123
std::string glogTime(int64_t t, int micros);   // 1120 10:00:00.123456
std::string withThousands(int64_t v);          // 27,535
// A double-quoted YAML scalar that reads back as `text`, whatever it holds.
std::string yamlQuote(std::string_view text);

struct GpuType {
  std::string name;        // inventory gpu_type, e.g. H100-80GB
  std::string flavor;      // Kueue ResourceFlavor, e.g. h100-80gb
  std::string model_name;  // DCGM modelName label
  double total_mib = 81559;
  int max_clock = 1980;
  int idle_clock = 345;
  double idle_w = 70;
  double tdp_w = 700;
  double slowness = 1;  // decode step time relative to an H100
  double kv_scale = 1;  // KV-cache capacity relative to an H100 80GB
  double temp_idle = 30;
  double temp_load = 32;  // degrees above idle at 100 % utilisation
  bool nvlink = true;     // PCIe cards have none: their NVLink counters never move
};
const std::vector<GpuType>& gpuTypes();

struct Gpu {
  int index = 0;
  std::string uuid;
  std::string pci;  // "0000:18:00"
  // Drivers.
  Series temp_override;         // > 0: the temperature it is driven to (a cooling fault)
  Series clock_cap;             // > 0: SM clock while throttled
  Series violation_frac;        // share of each interval spent thermally throttled
  Series extra_util;            // a tenant that is not an occupant (a shared GPU's other user)
  Series extra_fb;              // MiB held by that tenant
  Series fb_override;           // >= 0: FB used, whatever runs (a crash loop reloading weights)
  Series nvlink_factor;         // 1: healthy links
  Series crc_rate;              // NVLink CRC flit errors per second
  Series remapped;              // uncorrectable remapped rows (a gauge that never decreases)
  std::vector<int> xid;         // the exporter's XID_ERRORS: the last XID code, 0 for none
  int present_until = 1 << 30;  // the exporter reports samples [0, present_until)
  double thermal_violation0 = 0, power_violation0 = 0, nvlink0 = 0, crc0 = 0;
  double temp_bias = 0;   // this GPU's own offset (airflow, position in the chassis)
  bool hot_idle = false;  // unused GPUs still reported
  // Outputs.
  Series util, fb_used, temp, power, clock, thermal_violation, power_violation, nvlink, crc;
  // The pod the exporter maps to this GPU, when it maps pods at all.
  std::string pod, pod_namespace, container;
};

struct Node {
  std::string name;
  int type = 0;  // index into gpuTypes()
  std::vector<Gpu> gpus;
  double kernel_uptime = 0;  // seconds at the window's start, for dmesg timestamps
};

struct ModelSpec {
  std::string name;  // model_name label and family, e.g. qwen-32b
  double params_b = 8;
  int tp = 1;               // GPUs per replica
  double decode_s = 0.008;  // one decode step for a lone sequence on an H100
  double batch_slowdown = 0.005;
  double prefill_tps = 25000;  // prompt tokens a second on an H100
  double kv_tokens = 400000;   // KV capacity at gpu_memory_utilization 0.9 on an H100 80GB
};
const std::vector<ModelSpec>& modelSpecs();

struct Replica {
  std::string name, model, route, pool;
  int node = 0;
  std::vector<int> gpus;
  bool v1 = true;                // log format (V1 loggers.py) and whether RECOMPUTE lines exist
  bool prints_recompute = true;  // V0 only: some deployments run at a log level that drops it
  int max_num_seqs = 256;
  double kv_tokens = 400000;
  double decode_s = 0.008, batch_slowdown = 0.005, prefill_tps = 25000;
  double mem_util = 0.9;         // gpu_memory_utilization
  double abandon_s = 120;        // clients give up waiting after about this long
  double preempt_per_req = 0.8;  // preemptions per completed request once the KV cache binds
  int log_every = 4, log_phase = 0;
  int engine_pid = 3000;
  // Drivers, per sample.
  Series share;         // routing weight multiplier of this replica within its route
  Series prompt_scale;  // this replica's prompt length relative to its route's mix
  Series output_scale;
  Series slow;              // >= 1: a throttled, shared or degraded GPU
  int down_from = 1 << 30;  // crashed: no metrics from this sample on, and no traffic served
  // Outputs, per sample (gauges, means over the interval ending at the sample, and increments).
  Series arrival, running, waiting, kv, util, ttft, itl, queue_time;
  Series completed, abandoned, prompt_tokens, gen_tokens, prefix_queries, prefix_hits;
  Series preemptions;
  Series prompt_tps, gen_tps, prefix_rate;
  double preemptions0 = 0;
};

struct Target {
  bool provider = false;
  int index = 0;  // into World::replicas or World::providers
  Series weight;
  Series timeout_frac;   // share of its requests that time out at the gateway
  Series notfound_frac;  // share answered 404 (a model name it does not serve)
};

struct Route {
  std::string name;
  std::vector<Target> targets;
  int fallback = -1;  // provider retried when a target fails
  Series rate;        // requests a second
  Series prompt_len, output_len;
  double prefix_hit = 0.3;
  Series refused;  // share refused by a budget (429, target "")
  double timeout_s = 120;
  std::string requested_model;                  // the model name the route asks its targets for
  std::vector<std::string> refused_principals;  // who is refused, as Purser's log names them
};

struct Provider {
  std::string name;
  double ttft = 0.6;
  Series err_5xx, err_429, err_connect, err_timeout;  // share of attempts failing each way
  int retry_after = 30;
  int status_5xx = 500;
};

enum class WorkloadKind { kTrain, kBatch, kNotebook };

// What a workload is doing at a sample.
enum WorkloadState : char {
  kNotSubmitted = 0,
  kPending = 1,
  kRunning = 2,
  kEnded = 3,  // finished, failed, or evicted and not back
};

struct Workload {
  std::string ns, name, queue;
  int node = -1;  // -1: never admitted
  std::vector<int> gpus;
  WorkloadKind kind = WorkloadKind::kTrain;
  bool titan_logs = true;
  bool logs = true;
  int train_line = 212;
  int log_every = 2, log_phase = 0;
  std::vector<char> state;
  double util = 92, fb_mib = 60000;
  double step_time = 2.0, tokens_per_s = 20000, loss = 2.5, lr = 2.6e-4;
  int64_t step0 = 10000;
  Series util_scale;      // 1: busy as usual; near 0: holding GPUs, doing nothing
  Series fb_extra;        // MiB on top of fb_mib (memory growing towards an OOM)
  Series slow;            // step-time multiplier
  Series multi_gpu_comm;  // NVLink traffic weight (0 for a single GPU)
};

struct ClusterQueue {
  std::string name, team, flavor, cohort;
  int nominal = 8;
  Series used, pending;
};

struct Team {
  std::string name, tenant;
};

// A key or a user that sends requests through routes and spends from wallets.
struct Principal {
  std::string kind;  // "key" or "user"
  std::string name;
  std::string team;
  std::vector<int> routes;
  double share = 0.05;  // of each of its routes' requests
};

struct Wallet {
  std::string scope;  // team:ml, user:dana, key:docs-indexer, tenant:acme
  double ratio0 = 0.3;
  double per_step = 0.0002;
  double limit_usd = 1000;
  std::string period = "monthly";
  int exhaust_at = -1;  // sample at which it reaches 1.0 (a budget running out)
  Series ratio;
};

struct Event {
  int64_t t = 0;
  std::string source, kind, actor, object, reason, message;
};

struct LogLine {
  int64_t t = 0;
  std::string source, line;
};

// What the DCGM exporter of this fleet is configured to export and how it labels it.
struct DcgmStyle {
  bool device_labels = false;  // device="nvidia0", modelName="..."
  bool pod_labels = false;     // pod/namespace/container where the exporter maps them
  bool fb_free = true;
  bool thermal = false, power_violation = false, nvlink = false, crc = false, remapped = false;
};

// vLLM histogram bounds of this fleet's version (a subset of the real ones, as cases keep).
struct Buckets {
  std::vector<double> ttft, itl, queue, gateway_ttft;
};

// How a sample value is written.
enum class Fmt : uint8_t { kInt, kFixed1, kFixed2, kFixed3, kFixed4 };

// One series of the case's metrics block, with absolute values; samples [first, last) exist.
struct OutSeries {
  int rank = 0;  // the family's place in the block
  std::string name;
  std::string labels;  // "{a=\"b\"}", or empty
  Fmt fmt = Fmt::kInt;
  int first = 0, last = 0;
  Series values;
};

// Failed attempts Purser's gateway saw, per interval, for the log lines that narrate them.
struct Failure {
  int route = 0;
  std::string target;
  std::string kind;  // 5xx, 4xx, 429, connect, timeout, budget
  int status = 0;
  Series count;
};

struct World {
  explicit World(uint64_t seed) : rng(seed) {}

  Rng rng;
  TimeAxis time;
  std::vector<Node> nodes;
  std::vector<Replica> replicas;
  std::vector<Route> routes;
  std::vector<Provider> providers;
  std::vector<Workload> workloads;
  std::vector<ClusterQueue> queues;
  std::vector<Team> teams;
  std::vector<Principal> principals;
  std::vector<Wallet> wallets;
  std::vector<std::string> users, actors;
  std::vector<Event> events;
  std::vector<LogLine> logs;
  DcgmStyle dcgm;
  Buckets buckets;
  std::string node_style;
  int workload_serial = 1;
  // Filled by simulate().
  std::vector<OutSeries> out;
  std::vector<Failure> failures;

  int findReplica(std::string_view name) const;
  int findRoute(std::string_view name) const;
  int findProvider(std::string_view name) const;
  int findWorkload(std::string_view ns_name) const;  // "ns/name"
  int findQueue(std::string_view name) const;
  int findWallet(std::string_view scope) const;
  const GpuType& typeOf(int node) const;
  Series constant(double v) const { return Series(static_cast<size_t>(time.samples), v); }
  // Sets `state` of `w` from the first sample at or after `t` on.
  void setState(Workload& w, int64_t t, WorkloadState s);
  // Kueue's event pairs, with the messages Kueue writes.
  void admit(Workload& w, int64_t t, int waited_s);
  void finish(Workload& w, int64_t t, bool succeeded, const std::string& message = "");
  void pend(Workload& w, int64_t t, const std::string& message);
  void preempt(Workload& w, int64_t t, const std::string& reason, const std::string& phrase);
  void audit(int64_t t, const std::string& kind, const std::string& actor,
             const std::string& object, const std::string& message);
  void log(int64_t t, const std::string& source, std::string line);
  // A fresh workload name in the style of the fleet's jobs ("ft-llama-12").
  std::string workloadName(Rng& rng, WorkloadKind kind);
};

struct WorldOptions {
  int nodes = 3;
  int gpus_per_node = 0;  // 0: drawn per node
  int samples = 41;
  int step_s = 30;
  bool want_outside_routes = true;
};

// Fills `w` with a healthy fleet: nodes, replicas, routes, providers, teams, queues, workloads,
// principals, wallets, and harmless background events.
void buildBackground(World& w, const WorldOptions& options);

// The regime of a replica serving `lambda` requests a second of the given mix: how many run,
// what it can complete at most, the inter-token latency, the KV usage, and whether it is
// saturated (arrivals above what it completes) and whether the KV cache is what binds.
struct Regime {
  double running = 0, capacity = 0, itl = 0, kv = 0, bcap = 0;
  bool saturated = false, kv_bound = false;
};
Regime regimeOf(const Replica& r, double lambda, double prompt, double output, double prefix_hit,
                double slow);

// Derives every series from the drivers.
void simulate(World& w);
// Writes the log lines and events that follow from what simulate() derived.
void narrate(World& w);

struct Question {
  std::string kind, name, symptom;
};
struct Subject {
  std::string kind, name;  // empty for cause none
};

std::string render(const World& w, const std::string& case_name, const Question& question,
                   const std::string& cause, const Subject& subject);

}  // namespace purser::sim::incident
