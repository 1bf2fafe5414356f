// The healthy background of an incident case: a fleet built from the seed — nodes and GPUs,
// routes and their replicas, outside providers, teams with queues and workloads, principals and
// wallets, and the harmless events any fleet shows.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "sim/incident_world.h"

namespace purser::sim::incident {

namespace {

const std::vector<std::string> kTeams = {"ml",       "research", "speech",    "support", "vision",
                                         "robotics", "data",     "analytics", "risk",    "search",
                                         "platform", "apps",     "legal-ai",  "growth"};
const std::vector<std::string> kTenants = {"acme", "globex", "initech", "hooli", "umbrella"};
const std::vector<std::string> kUsers = {"alice", "bob",  "dana",  "eve",  "farid", "ines",
                                         "kai",   "lena", "mo",    "nora", "omar",  "sara",
                                         "tomas", "jon",  "priya", "yuki", "chen",  "maya"};
const std::vector<std::string> kKeys = {"batch-summarizer", "support-agent", "docs-indexer",
                                        "ci-nightly",       "crm-sync",      "ticket-triage",
                                        "slack-bot",        "eval-runner",   "web-frontend",
                                        "etl-nightly",      "mobile-app",    "report-builder"};
const std::vector<std::string> kRoutes = {
    "chat-default", "chat-fast", "code-assist",   "rag-answer",    "summarize",   "support-bot",
    "doc-qa",       "extract",   "translate",     "search-answer", "agent-large", "classify",
    "sql-helper",   "triage",    "meeting-notes", "email-draft"};
const std::vector<std::string> kProviders = {"openai",     "anthropic", "azure-eu",
                                             "bedrock-us", "together",  "vertex-eu"};

std::vector<std::string> shuffled(Rng& rng, std::vector<std::string> v) {
  for (size_t i = v.size(); i > 1; --i) {
    std::swap(v[i - 1], v[static_cast<size_t>(rng.intIn(0, static_cast<int>(i) - 1))]);
  }
  return v;
}

std::string nodeName(const std::string& style, int i, const std::string& type_prefix, Rng& rng,
                     int base) {
  int n = base + i;
  if (style == "worker-gpu") return fmt::format("worker-gpu-{}", n);
  if (style == "gpu-node") return fmt::format("gpu-node-{:02}", n);
  if (style == "gn") return fmt::format("gn-{}{:02}", static_cast<char>('a' + base % 6), n);
  if (style == "ip") return fmt::format("ip-10-0-{}-{}", rng.intIn(1, 254), rng.intIn(1, 254));
  if (style == "typed") return fmt::format("{}-{:02}", type_prefix, n);
  if (style == "dgx") return fmt::format("dgx-{:03}", n);
  return fmt::format("gpu-{}", n);
}

std::string typePrefix(const GpuType& t) {
  std::string p;
  for (char c : t.flavor) {
    if (c == '-') break;
    p.push_back(c);
  }
  return p;
}

}  // namespace

std::string World::workloadName(Rng& r, WorkloadKind kind) {
  static const std::vector<std::string> kTrain = {"train",       "ft-llama", "rl-ppo",
                                                  "rl-dpo",      "rl-grpo",  "sft-llama",
                                                  "sft-mistral", "pretrain", "distill"};
  static const std::vector<std::string> kBatch = {"eval", "caption", "embed-batch", "transcribe"};
  int n = workload_serial + r.intIn(1, 9);
  workload_serial = n;
  if (kind == WorkloadKind::kNotebook) return "notebook-" + r.pick(kUsers);
  if (kind == WorkloadKind::kBatch) {
    if (r.chance(0.2)) return r.chance(0.5) ? "bench-mmlu" : "bench-humaneval";
    return fmt::format("{}-{}", r.pick(kBatch), n);
  }
  return fmt::format("{}-{}", r.pick(kTrain), n);
}

// ---------------------------------------------------------------------------------------------
// The background.

namespace {

struct Slot {
  int node;
  int gpu;
};

// Free GPUs, node by node, lowest index first.
struct FreeGpus {
  std::vector<std::vector<bool>> used;

  explicit FreeGpus(const World& w) {
    for (const auto& n : w.nodes) used.emplace_back(n.gpus.size(), false);
  }
  int freeOn(int node) const {
    int c = 0;
    for (bool u : used[static_cast<size_t>(node)]) c += u ? 0 : 1;
    return c;
  }
  // `count` GPUs on one node (contiguous when possible), or empty.
  std::vector<int> take(int node, int count) {
    auto& u = used[static_cast<size_t>(node)];
    int n = static_cast<int>(u.size());
    for (int start = 0; start + count <= n; start += count) {
      bool ok = true;
      for (int i = start; i < start + count; ++i) ok = ok && !u[static_cast<size_t>(i)];
      if (ok) {
        std::vector<int> g;
        for (int i = start; i < start + count; ++i) {
          u[static_cast<size_t>(i)] = true;
          g.push_back(i);
        }
        return g;
      }
    }
    if (freeOn(node) < count) return {};
    std::vector<int> g;
    for (int i = 0; i < n && static_cast<int>(g.size()) < count; ++i) {
      if (!u[static_cast<size_t>(i)]) {
        u[static_cast<size_t>(i)] = true;
        g.push_back(i);
      }
    }
    return g;
  }
};

std::string gpuUuid(Rng& rng) {
  return fmt::format("GPU-{}-{}-{}-{}-{}", rng.hex(8), rng.hex(4), rng.hex(4), rng.hex(4),
                     rng.hex(12));
}

const std::vector<std::string> kPciBuses8 = {"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"};
const std::vector<std::string> kPciBuses4 = {"07", "0f", "47", "4e"};

double capacityOf(const Replica& r, double prompt, double output, double hit) {
  return regimeOf(r, 0.0, prompt, output, hit, 1.0).capacity;
}

}  // namespace

void buildBackground(World& w, const WorldOptions& o) {
  Rng rng = w.rng.fork("background");
  Rng names = w.rng.fork("names");
  auto& time = w.time;
  time.samples = o.samples;
  time.step = o.step_s;
  // A window start drawn from the seed: a day of 2026, on a five-minute boundary.
  int64_t jan1 = 1767225600;  // 2026-01-01T00:00:00Z
  time.start = jan1 + static_cast<int64_t>(rng.intIn(0, 340)) * 86400 +
               static_cast<int64_t>(rng.intIn(0, 287)) * 300;

  // Exporter and engine versions.
  w.dcgm.device_labels = rng.chance(0.35);
  w.dcgm.pod_labels = rng.chance(0.4);
  w.dcgm.fb_free = rng.chance(0.7);
  w.dcgm.thermal = rng.chance(0.55);
  w.dcgm.power_violation = rng.chance(0.5);
  w.dcgm.nvlink = rng.chance(0.45);
  w.dcgm.crc = w.dcgm.nvlink && rng.chance(0.7);
  w.dcgm.remapped = rng.chance(0.5);
  if (o.nodes * std::max(4, o.gpus_per_node) > 200) {
    // A large fleet's exporters are configured lean; faults still turn on the fields they need.
    w.dcgm.thermal = w.dcgm.power_violation = w.dcgm.nvlink = w.dcgm.crc = false;
    w.dcgm.remapped = false;
    w.dcgm.fb_free = false;
  }
  if (rng.chance(0.5)) {
    w.buckets.ttft = {0.25, 1.0, 5.0};
    w.buckets.itl = {0.025, 0.05, 0.1};
    w.buckets.queue = {1.0, 10.0};
    w.buckets.gateway_ttft = {0.5, 1.0, 5.0};
  } else {
    w.buckets.ttft = {0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};
    w.buckets.itl = {0.01, 0.025, 0.05, 0.1, 0.25};
    w.buckets.queue = {0.3, 1.0, 5.0, 15.0, 60.0};
    w.buckets.gateway_ttft = {0.25, 0.5, 1.0, 2.5, 5.0, 10.0};
  }

  // Nodes.
  static const std::vector<std::string> kStyles = {"worker-gpu", "gpu-node", "gn", "ip",
                                                   "typed",      "dgx",      "gpu"};
  w.node_style = rng.pick(kStyles);
  int base = rng.intIn(1, 12);
  for (int i = 0; i < o.nodes; ++i) {
    Node n;
    double r = rng.uniform();
    n.type = i == 0 ? (rng.chance(0.8) ? 0 : 1) : (r < 0.6 ? 0 : r < 0.75 ? 1 : r < 0.9 ? 2 : 3);
    const GpuType& type = gpuTypes()[static_cast<size_t>(n.type)];
    int gpus = o.gpus_per_node > 0 ? o.gpus_per_node
               : n.type == 3       ? (rng.chance(0.5) ? 2 : 4)
                                   : (rng.chance(0.55) ? 4 : 8);
    n.name = nodeName(w.node_style, i, typePrefix(type), names, base);
    n.kernel_uptime = rng.range(2e5, 8e6);
    const auto& buses = gpus <= 4 ? kPciBuses4 : kPciBuses8;
    for (int g = 0; g < gpus; ++g) {
      Gpu gpu;
      gpu.index = g;
      gpu.uuid = gpuUuid(names);
      gpu.pci = g < static_cast<int>(buses.size()) ? "0000:" + buses[static_cast<size_t>(g)] + ":00"
                                                   : fmt::format("0000:{:02x}:00", 0x10 + g * 3);
      gpu.temp_bias = rng.range(-2.5, 3.0);
      gpu.thermal_violation0 = rng.chance(0.3) ? std::floor(rng.range(1e6, 5e7)) : 0;
      gpu.power_violation0 = rng.chance(0.6) ? std::floor(rng.range(1e7, 3e11)) : 0;
      gpu.nvlink0 = type.nvlink ? std::floor(rng.range(2e9, 1.2e11)) : 0;
      gpu.crc0 = rng.chance(0.1) ? rng.intIn(1, 40) : 0;
      gpu.temp_override = w.constant(0);
      gpu.clock_cap = w.constant(0);
      gpu.violation_frac = w.constant(0);
      gpu.extra_util = w.constant(0);
      gpu.extra_fb = w.constant(0);
      gpu.fb_override = w.constant(-1);
      gpu.nvlink_factor = w.constant(1);
      gpu.crc_rate = w.constant(0);
      gpu.remapped = w.constant(0);
      gpu.xid.assign(static_cast<size_t>(time.samples), 0);
      n.gpus.push_back(std::move(gpu));
    }
    w.nodes.push_back(std::move(n));
  }
  int total_gpus = 0;
  for (const auto& n : w.nodes) total_gpus += static_cast<int>(n.gpus.size());
  FreeGpus free(w);

  // Teams, people, keys.
  auto team_names = shuffled(rng, kTeams);
  int team_count = std::clamp(2 + total_gpus / 10, 2, 5) + rng.intIn(0, 1);
  if (total_gpus > 200) team_count = static_cast<int>(kTeams.size());
  team_count = std::min<int>(team_count, static_cast<int>(kTeams.size()));
  auto tenants = shuffled(rng, kTenants);
  int tenant_count = rng.intIn(1, 3);
  for (int i = 0; i < team_count; ++i) {
    w.teams.push_back({team_names[static_cast<size_t>(i)],
                       tenants[static_cast<size_t>(rng.intIn(0, tenant_count - 1))]});
  }
  auto users = shuffled(rng, kUsers);
  int user_count = std::min<int>(static_cast<int>(users.size()), 3 + team_count);
  w.users.assign(users.begin(), users.begin() + user_count);
  w.actors = {users[static_cast<size_t>(user_count % users.size())],
              users[static_cast<size_t>((user_count + 1) % users.size())], w.users[0],
              "svc-gitops"};

  // Serving: routes with replicas of one model each.
  auto route_names = shuffled(rng, kRoutes);
  size_t next_route = 0;
  auto provider_names = shuffled(rng, kProviders);
  int provider_count = std::min<int>(static_cast<int>(kProviders.size()), rng.intIn(3, 5));
  for (int i = 0; i < provider_count; ++i) {
    Provider p;
    p.name = provider_names[static_cast<size_t>(i)];
    p.ttft = rng.range(0.35, 0.95);
    p.err_5xx = w.constant(0);
    p.err_429 = w.constant(0);
    p.err_connect = w.constant(0);
    p.err_timeout = w.constant(0);
    p.retry_after = rng.pick(std::vector<int>{10, 20, 30, 60});
    w.providers.push_back(std::move(p));
  }
  static const std::vector<std::string> kReplicaStyles = {"vllm-{m}-{a}", "{m}-{a}", "{m}-{n}"};
  static const std::vector<std::string> kPoolStyles = {"{m}-pool", "vllm-{x}", "vllm-{f}"};
  std::string replica_style = rng.pick(kReplicaStyles);
  std::string pool_style = rng.pick(kPoolStyles);
  int serving_gpus = std::max(2, static_cast<int>(std::lround(total_gpus * rng.range(0.25, 0.4))));
  int route_count =
      std::clamp(1 + serving_gpus / 3, 1, total_gpus > 200 ? 12 : (serving_gpus >= 4 ? 4 : 2));
  std::map<std::string, int> model_serial;
  std::vector<int> used_models;
  auto makeReplicaName = [&](const std::string& model) {
    int n = model_serial[model]++;
    std::string s = replica_style;
    auto put = [&](const std::string& key, const std::string& value) {
      auto pos = s.find(key);
      if (pos != std::string::npos) s.replace(pos, key.size(), value);
    };
    put("{m}", model);
    put("{a}", n < 26 ? std::string(1, static_cast<char>('a' + n)) : fmt::format("a{}", n));
    put("{n}", std::to_string(n + 1));
    return s;
  };
  int placed_serving = 0;
  for (int r = 0; r < route_count && next_route < route_names.size(); ++r) {
    // Pick a model that fits the fleet: 70b needs two big GPUs on one node.
    int model = rng.intIn(0, static_cast<int>(modelSpecs().size()) - 1);
    const ModelSpec& spec = modelSpecs()[static_cast<size_t>(model)];
    Route route;
    route.name = route_names[next_route++];
    int want =
        std::max(1, (serving_gpus - placed_serving) / std::max(1, route_count - r) / spec.tp);
    want = std::clamp(want, 1, total_gpus > 200 ? 8 : 3);
    if (r == 0) want = std::max(want, 2);
    std::string pool = pool_style;
    {
      std::string family = spec.name.substr(0, spec.name.find('-'));
      auto pos = pool.find("{m}");
      if (pos != std::string::npos) pool.replace(pos, 3, spec.name);
      pos = pool.find("{x}");
      if (pos != std::string::npos)
        pool.replace(pos, 3, std::string(1, static_cast<char>('a' + r)));
      pos = pool.find("{f}");
      if (pos != std::string::npos) pool.replace(pos, 3, family);
    }
    bool v1 = rng.chance(0.6);
    int max_seqs = rng.pick(std::vector<int>{64, 128, 128, 256, 256});
    double mem_util = rng.pick(std::vector<double>{0.85, 0.9, 0.9, 0.92});
    for (int i = 0; i < want; ++i) {
      // First fit, preferring the node with the most free GPUs of a type that holds the model.
      int best = -1;
      for (int n = 0; n < static_cast<int>(w.nodes.size()); ++n) {
        const GpuType& t = w.typeOf(n);
        if (t.total_mib < 60000 && spec.params_b > 10) continue;
        if (free.freeOn(n) < spec.tp + (i == 0 ? 0 : 0)) continue;
        if (best < 0 || free.freeOn(n) > free.freeOn(best) + 1) best = n;
      }
      if (best < 0) break;
      Replica rep;
      rep.model = spec.name;
      rep.name = makeReplicaName(spec.name);
      rep.route = route.name;
      rep.pool = pool;
      rep.node = best;
      rep.gpus = free.take(best, spec.tp);
      const GpuType& t = w.typeOf(best);
      rep.v1 = v1;
      rep.prints_recompute = rng.chance(0.75);
      rep.max_num_seqs = max_seqs;
      rep.mem_util = mem_util;
      rep.decode_s = spec.decode_s * t.slowness * rng.jitter(0.05);
      rep.batch_slowdown = spec.batch_slowdown * rng.jitter(0.1);
      rep.prefill_tps = spec.prefill_tps / t.slowness * rng.jitter(0.05);
      rep.kv_tokens = spec.kv_tokens * t.kv_scale * (mem_util / 0.9) * rng.jitter(0.03);
      rep.abandon_s = rng.range(90, 240);
      rep.preempt_per_req = rng.range(0.5, 1.8);
      rep.log_every = rng.pick(std::vector<int>{2, 4, 4, 6});
      rep.log_phase = rng.intIn(0, rep.log_every - 1);
      rep.engine_pid = rng.intIn(1200, 9000);
      rep.share = w.constant(1);
      rep.prompt_scale = w.constant(1);
      rep.output_scale = w.constant(1);
      rep.slow = w.constant(1);
      Target target;
      target.provider = false;
      target.index = static_cast<int>(w.replicas.size());
      target.weight = w.constant(1);
      target.timeout_frac = w.constant(0);
      target.notfound_frac = w.constant(0);
      route.targets.push_back(std::move(target));
      w.replicas.push_back(std::move(rep));
      placed_serving += spec.tp;
    }
    if (route.targets.empty()) {
      --next_route;
      continue;
    }
    route.prefix_hit = rng.range(0.08, 0.55);
    double prompt = rng.range(250, 2600), output = rng.range(90, 550);
    route.prompt_len = w.constant(prompt);
    route.output_len = w.constant(output);
    // A rate that keeps every replica comfortably below what it completes.
    // The gateway spreads requests evenly, so the smallest replica sets how much the route takes.
    double least = 1e18;
    for (const auto& t : route.targets) {
      least = std::min(least, capacityOf(w.replicas[static_cast<size_t>(t.index)], prompt, output,
                                         route.prefix_hit));
    }
    double base_rate = least * static_cast<double>(route.targets.size()) * rng.range(0.15, 0.42);
    if (rng.chance(0.6)) route.fallback = rng.intIn(0, provider_count - 1);
    if (route.fallback >= 0) {
      Target fb;
      fb.provider = true;
      fb.index = route.fallback;
      fb.weight = w.constant(rng.range(0.002, 0.01) * static_cast<double>(route.targets.size()));
      fb.timeout_frac = w.constant(0);
      fb.notfound_frac = w.constant(0);
      route.targets.push_back(std::move(fb));
    }
    route.rate = w.constant(base_rate);
    route.timeout_s = rng.pick(std::vector<double>{60, 120, 120, 300});
    w.routes.push_back(std::move(route));
  }
  // Routes served by outside providers only, each with its own primary.
  int outside = o.want_outside_routes ? rng.intIn(2, 3) : 1;
  for (int i = 0; i < outside && next_route < route_names.size(); ++i) {
    Route route;
    route.name = route_names[next_route++];
    int primary = i % provider_count;
    Target t;
    t.provider = true;
    t.index = primary;
    t.weight = w.constant(1);
    t.timeout_frac = w.constant(0);
    t.notfound_frac = w.constant(0);
    route.targets.push_back(std::move(t));
    int fallback = (primary + 1 + rng.intIn(0, provider_count - 2)) % provider_count;
    if (fallback != primary && rng.chance(0.85)) {
      route.fallback = fallback;
      Target fb;
      fb.provider = true;
      fb.index = fallback;
      fb.weight = w.constant(rng.range(0.002, 0.01));
      fb.timeout_frac = w.constant(0);
      fb.notfound_frac = w.constant(0);
      route.targets.push_back(std::move(fb));
    }
    route.prefix_hit = 0;
    route.prompt_len = w.constant(rng.range(300, 3000));
    route.output_len = w.constant(rng.range(100, 700));
    route.rate = w.constant(rng.range(0.3, 6.0) * (total_gpus > 200 ? 10 : 1));
    route.timeout_s = 120;
    w.routes.push_back(std::move(route));
  }
  for (auto& route : w.routes) {
    route.refused = w.constant(0);
    route.requested_model = route.targets[0].provider
                                ? ""
                                : w.replicas[static_cast<size_t>(route.targets[0].index)].model;
    // A slow daily swell and some minute-to-minute noise.
    double phase = rng.range(0, 2 * M_PI), amp = rng.range(0.02, 0.1);
    for (int k = 0; k < time.samples; ++k) {
      route.rate[static_cast<size_t>(k)] *=
          (1 + amp * std::sin(phase + k * time.step / 3600.0 * 2 * M_PI)) * rng.jitter(0.06);
      route.prompt_len[static_cast<size_t>(k)] *= rng.jitter(0.05);
      route.output_len[static_cast<size_t>(k)] *= rng.jitter(0.05);
    }
  }

  // Queues and workloads.
  static const std::vector<std::string> kQueueStyles = {"{t}-cq", "{t}-queue", "team-{t}"};
  std::string queue_style = rng.pick(kQueueStyles);
  int cohort_count = std::max(1, (team_count + 1) / 2);  // pairs of teams lend to each other
  for (size_t i = 0; i < w.teams.size(); ++i) {
    ClusterQueue q;
    q.team = w.teams[i].name;
    q.name = queue_style;
    q.name.replace(q.name.find("{t}"), 3, q.team);
    q.cohort =
        fmt::format("cohort-{}", static_cast<char>('a' + static_cast<int>(i) % cohort_count));
    w.queues.push_back(std::move(q));
  }
  int workload_gpus = std::max(2, static_cast<int>(std::lround(total_gpus * rng.range(0.35, 0.5))));
  int placed = 0;
  int attempts = 0;
  while (placed < workload_gpus && attempts++ < 4 * workload_gpus + 10) {
    size_t qi = static_cast<size_t>(rng.intIn(0, static_cast<int>(w.queues.size()) - 1));
    auto& q = w.queues[qi];
    Workload wl;
    double kind = rng.uniform();
    // Someone's notebook, in use: an idle allocation must not be told by its name alone.
    wl.kind = kind < 0.6    ? WorkloadKind::kTrain
              : kind < 0.92 ? WorkloadKind::kBatch
                            : WorkloadKind::kNotebook;
    int want = rng.pick(std::vector<int>{1, 1, 2, 2, 4, 8});
    int node = -1;
    for (int tries = 0; tries < 12 && node < 0; ++tries) {
      int n = rng.intIn(0, static_cast<int>(w.nodes.size()) - 1);
      if (!q.flavor.empty() && w.typeOf(n).flavor != q.flavor) continue;
      int f = free.freeOn(n);
      if (f <= 0) continue;
      want = std::min(want, f);
      // Keep a little room on the first nodes for what faults add.
      node = n;
    }
    if (node < 0) continue;
    wl.node = node;
    wl.gpus = free.take(node, want);
    if (wl.gpus.empty()) continue;
    if (q.flavor.empty()) q.flavor = w.typeOf(node).flavor;
    wl.ns = q.team;
    wl.queue = q.name;
    wl.name = w.workloadName(names, wl.kind);
    if (w.findWorkload(wl.ns + "/" + wl.name) >= 0) wl.name += fmt::format("-{}", placed + 1);
    const GpuType& t = w.typeOf(node);
    wl.titan_logs = rng.chance(0.5);
    wl.logs = wl.kind == WorkloadKind::kTrain || rng.chance(0.25);
    wl.train_line = rng.pick(std::vector<int>{212, 218, 230});
    wl.log_every = rng.pick(std::vector<int>{1, 2, 2, 3, 5});
    wl.log_phase = rng.intIn(0, wl.log_every - 1);
    wl.util = wl.kind == WorkloadKind::kTrain   ? rng.range(82, 98)
              : wl.kind == WorkloadKind::kBatch ? rng.range(55, 90)
                                                : rng.range(15, 45);
    if (wl.kind == WorkloadKind::kNotebook) wl.logs = false;
    wl.fb_mib = t.total_mib *
                (wl.kind == WorkloadKind::kTrain ? rng.range(0.6, 0.86) : rng.range(0.3, 0.75));
    wl.step_time = rng.range(0.7, 3.2);
    wl.tokens_per_s = rng.range(3000, 90000) * static_cast<double>(wl.gpus.size()) / 2;
    wl.loss = rng.range(2.1, 3.3);
    wl.lr = rng.range(2.3e-4, 3.0e-4);
    wl.step0 = rng.intIn(500, 40000);
    wl.state.assign(static_cast<size_t>(time.samples), kRunning);
    wl.util_scale = w.constant(1);
    wl.fb_extra = w.constant(0);
    wl.slow = w.constant(1);
    wl.multi_gpu_comm = w.constant(wl.gpus.size() > 1 ? rng.range(0.6, 1.4) : 0);
    placed += static_cast<int>(wl.gpus.size());
    w.workloads.push_back(std::move(wl));
  }
  // Lifecycles: a few start or end inside the window, as fleets do.
  for (auto& wl : w.workloads) {
    double r = rng.uniform();
    if (r < 0.15 && wl.kind != WorkloadKind::kTrain) {
      int64_t t = time.at(rng.intIn(time.samples / 5, time.samples - 3)) + rng.intIn(0, 29);
      w.finish(wl, t, true);
    } else if (r < 0.27) {
      wl.state.assign(static_cast<size_t>(time.samples), kNotSubmitted);
      int64_t t = time.at(rng.intIn(2, time.samples - 3)) + rng.intIn(0, 29);
      w.admit(wl, t, rng.intIn(1, 45));
    }
  }
  // Quotas with room to spare: quota questions must come from a fault, not the background.
  for (auto& q : w.queues) {
    int most = 0;
    for (const auto& wl : w.workloads) {
      if (wl.queue == q.name) most += static_cast<int>(wl.gpus.size());
    }
    q.nominal = most + rng.intIn(2, 6);
    if (q.flavor.empty()) q.flavor = gpuTypes()[0].flavor;
  }

  // Principals and wallets.
  auto keys = shuffled(rng, kKeys);
  int key_count = rng.intIn(2, 4) + (total_gpus > 200 ? 6 : 0);
  for (int i = 0; i < key_count && i < static_cast<int>(keys.size()); ++i) {
    Principal p;
    p.kind = "key";
    p.name = keys[static_cast<size_t>(i)];
    p.team = w.teams[static_cast<size_t>(rng.intIn(0, team_count - 1))].name;
    w.principals.push_back(p);
  }
  for (const auto& u : w.users) {
    Principal p;
    p.kind = "user";
    p.name = u;
    p.team = w.teams[static_cast<size_t>(rng.intIn(0, team_count - 1))].name;
    w.principals.push_back(p);
  }
  for (auto& p : w.principals) {
    int n = rng.intIn(1, 2);
    for (int i = 0; i < n; ++i) {
      int r = rng.intIn(0, static_cast<int>(w.routes.size()) - 1);
      if (std::find(p.routes.begin(), p.routes.end(), r) == p.routes.end()) p.routes.push_back(r);
    }
    p.share = rng.range(0.02, 0.15);
  }
  auto addWallet = [&](const std::string& scope) {
    Wallet wallet;
    wallet.scope = scope;
    wallet.ratio0 = rng.range(0.03, 0.68);
    // Spending that stays well clear of the alert thresholds inside the window.
    double room = std::max(0.0, 0.72 - wallet.ratio0);
    wallet.per_step = std::min(rng.range(0.00002, 0.0006), room / time.samples);
    wallet.limit_usd = rng.pick(std::vector<double>{200, 500, 800, 1000, 2500, 5000});
    wallet.period = rng.chance(0.7) ? "monthly" : "daily";
    w.wallets.push_back(std::move(wallet));
  };
  for (const auto& t : w.teams) addWallet("team:" + t.name);
  std::vector<std::string> seen_tenants;
  for (const auto& t : w.teams) {
    if (std::find(seen_tenants.begin(), seen_tenants.end(), t.tenant) == seen_tenants.end()) {
      seen_tenants.push_back(t.tenant);
      if (rng.chance(0.8)) addWallet("tenant:" + t.tenant);
    }
  }
  for (const auto& p : w.principals) {
    if (rng.chance(p.kind == "key" ? 0.7 : 0.5)) addWallet(p.kind + ":" + p.name);
  }

  // Harmless background audit events.
  int audits = rng.intIn(1, 3);
  for (int i = 0; i < audits; ++i) {
    int64_t t = time.at(rng.intIn(0, time.samples - 2)) + rng.intIn(0, 29);
    double r = rng.uniform();
    std::string actor = rng.pick(w.actors);
    if (r < 0.35) {
      w.audit(t, "key.rotate", actor, "key:" + rng.pick(kKeys),
              "rotated; previous secret valid for 24h");
    } else if (r < 0.6) {
      w.audit(
          t, "key.create", actor, "key:" + rng.pick(kKeys),
          "created for team " + w.teams[static_cast<size_t>(rng.intIn(0, team_count - 1))].name);
    } else if (r < 0.85) {
      w.audit(t, "user.add", actor, "user:" + rng.pick(kUsers),
              "added to team " + w.teams[static_cast<size_t>(rng.intIn(0, team_count - 1))].name);
    } else {
      const auto& route =
          w.routes[static_cast<size_t>(rng.intIn(0, static_cast<int>(w.routes.size()) - 1))];
      w.audit(t, "route.update", actor, route.name,
              "tags: +owner=" + w.teams[static_cast<size_t>(rng.intIn(0, team_count - 1))].name);
    }
  }
}

}  // namespace purser::sim::incident
