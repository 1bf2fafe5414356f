// Fleet faults: what goes wrong with GPUs and the jobs on them — hardware, heat, memory,
// NVLink, Kueue quotas and preemptions, shared and idle GPUs.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/incident_story.h"

namespace purser::sim::incident {

namespace {

std::string cudaError(int xid) {
  switch (xid) {
    case 79:
      return "unspecified launch failure";
    case 94:
      return "an illegal memory access was encountered";
    default:
      return "uncorrectable ECC error encountered";
  }
}

// The lines a vLLM engine prints when it dies of `error`.
void engineDeath(World& w, Rng& rng, const Replica& r, int64_t t, const std::string& error) {
  std::string vt = vllmTime(t);
  if (r.v1) {
    std::string core =
        fmt::format("(EngineCore_DP0 pid={}) ERROR {} [core.py:711]", r.engine_pid, vt);
    w.log(t, r.name, core + " EngineCore encountered a fatal error.");
    w.log(t, r.name, core + " " + error);
    w.log(t, r.name,
          fmt::format("(APIServer pid=1) ERROR {} [async_llm.py:480] AsyncLLM "
                      "output_handler failed.",
                      vt));
    w.log(t, r.name,
          fmt::format("(APIServer pid=1) ERROR {} [async_llm.py:480] "
                      "vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
                      "encountered an issue. See stack trace (above) for the root cause.",
                      vt));
  } else {
    w.log(t, r.name, fmt::format("ERROR {} engine.py:160] {}", vt, error));
    w.log(t + rng.intIn(0, 1), r.name,
          fmt::format("CRITICAL {} launcher.py:116] MQLLMEngine is already dead, terminating "
                      "server process",
                      vllmTime(t + 1)));
  }
}

void engineStart(World& w, const Replica& r, int64_t t, int pid) {
  if (r.v1) {
    w.log(t, r.name,
          fmt::format("(APIServer pid=1) INFO {} [api_server.py:1885] vLLM API server "
                      "version 0.11.0",
                      vllmTime(t)));
    (void)pid;
  } else {
    w.log(
        t, r.name,
        fmt::format("INFO {} api_server.py:712] vLLM API server version 0.6.3.post1", vllmTime(t)));
  }
}

// A training job's ranks failing on a broken GPU: the rank on it first, NCCL on the others.
void jobDeath(World& w, Rng& rng, const Workload& wl, int rank, int64_t t,
              const std::string& error) {
  std::string src = wlId(wl);
  w.log(t, src, fmt::format("[rank{}]: RuntimeError: CUDA error: {}", rank, error));
  w.log(t, src,
        fmt::format("[rank{}]: Compile with `TORCH_USE_CUDA_DSA` to enable device-side "
                    "assertions.",
                    rank));
  if (wl.gpus.size() > 1) {
    int other = rank == 0 ? 1 : 0;
    int64_t t2 = t + rng.intIn(60, 120);
    w.log(t2, src,
          fmt::format("[rank{}]:[E{} ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID "
                      "0(default_pg) Rank {}] Process group watchdog thread terminated "
                      "with exception: NCCL error: unhandled cuda error (run with "
                      "NCCL_DEBUG=INFO for details)",
                      other, glogTime(t2, rng.intIn(0, 999999)), other));
  }
  w.log(t + rng.intIn(125, 140), src,
        fmt::format("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py "
                    "FAILED (exitcode: 1, local_rank: {})",
                    rank));
}

}  // namespace

// gpu_hardware_fault: an XID (48, 63, 64, 79, 94, 95) on one GPU: the exporter's XID gauge
// (and remapped rows for row-remapping XIDs), NVRM lines in dmesg when they are collected, and
// whatever ran there dying — a replica that stops reporting and crash-loops, or a job's ranks
// failing with CUDA and NCCL errors until Kueue marks it Failed. XID 79 takes the GPU off the bus:
// its series stop.
Result<Story> gpuHardwareFault(World& w, Rng& rng, const Placement& p) {
  static const std::vector<int> kXids = {48, 63, 64, 79, 94, 95};
  int xid = rng.pick(kXids);
  auto reps = freeReplicas(w, *p.avoid);
  auto jobs = steadyWorkloads(w, *p.avoid);
  if (reps.empty() && jobs.empty()) return std::unexpected(noPlace("a GPU that fails"));
  bool on_replica = !reps.empty() && (jobs.empty() || rng.chance(0.5));
  int node = 0, gpu = 0;
  int64_t t0 = timeBefore(w, rng, p.onset);
  Story s;
  std::string error = cudaError(xid);
  if (on_replica) {
    auto& r = w.replicas[static_cast<size_t>(rng.pick(reps))];
    node = r.node;
    gpu = r.gpus[static_cast<size_t>(rng.intIn(0, static_cast<int>(r.gpus.size()) - 1))];
    r.down_from = p.onset;
    if (rng.chance(0.75))
      engineDeath(w, rng, r, t0 + rng.intIn(0, 2), "RuntimeError: CUDA error: " + error);
    // The pod restarts on the same GPU and dies at start-up.
    int64_t t = t0 + rng.intIn(40, 90);
    while (rng.chance(0.6) && t < w.time.end() - 30) {
      engineStart(w, r, t, r.engine_pid + rng.intIn(10, 300));
      int64_t td = t + rng.intIn(15, 40);
      w.log(td, r.name,
            r.v1 ? fmt::format("(EngineCore_DP0 pid={}) ERROR {} [core.py:700] RuntimeError: CUDA "
                               "error: {}",
                               r.engine_pid + rng.intIn(300, 900), vllmTime(td),
                               xid == 79 ? "no CUDA-capable device is detected" : error)
                 : fmt::format("ERROR {} engine.py:160] RuntimeError: CUDA error: {}", vllmTime(td),
                               xid == 79 ? "no CUDA-capable device is detected" : error));
      t = td + rng.intIn(60, 200);
    }
    claimReplica(w, r, s.touched);
    s.touched.routes.insert(r.route);
    s.questions = {{"route", r.route, "errors"},
                   {"deployment", r.name, "errors"},
                   {"node", nodeNameOf(w, node), "any"},
                   {"fleet", "*", "any"}};
  } else {
    auto& wl = w.workloads[static_cast<size_t>(rng.pick(jobs))];
    node = wl.node;
    int rank = rng.intIn(0, static_cast<int>(wl.gpus.size()) - 1);
    gpu = wl.gpus[static_cast<size_t>(rank)];
    for (int k = p.onset; k < w.time.samples; ++k) wl.util_scale[static_cast<size_t>(k)] = 0.0;
    if (rng.chance(0.8)) jobDeath(w, rng, wl, rank, t0 + rng.intIn(0, 2), error);
    w.finish(wl, t0 + rng.intIn(130, 150), false);
    claimWorkload(w, wl, s.touched);
    s.questions = {{"workload", wlId(wl), "errors"},
                   {"node", nodeNameOf(w, node), "any"},
                   {"fleet", "*", "any"}};
  }
  auto& g = w.nodes[static_cast<size_t>(node)].gpus[static_cast<size_t>(gpu)];
  for (int k = p.onset; k < w.time.samples; ++k) g.xid[static_cast<size_t>(k)] = xid;
  // Fallen off the bus: the exporter reports the XID once more, then nothing.
  if (xid == 79) g.present_until = p.onset + 1;
  if (xid == 63 || xid == 64 || (xid == 48 && rng.chance(0.5))) {
    if (rng.chance(0.8)) w.dcgm.remapped = true;
    double rows = rng.intIn(1, 3);
    for (int k = p.onset; k < w.time.samples; ++k) g.remapped[static_cast<size_t>(k)] = rows;
  }
  if (rng.chance(0.75)) kernelXid(w, rng, node, gpu, xid, t0);
  s.subject = {"gpu", gpuId(w, node, gpu)};
  s.touched.gpus.insert(gpuId(w, node, gpu));
  s.touched.node_faults.insert(nodeNameOf(w, node));
  return s;
}

// gpu_thermal_throttle: a GPU's cooling fails: its temperature climbs to 85-92 °C, the SM clock
// is capped, thermal violation time accrues, and its replica's steps (or its job's) slow down.
Result<Story> gpuThermalThrottle(World& w, Rng& rng, const Placement& p) {
  auto reps = freeReplicas(w, *p.avoid);
  auto jobs = steadyWorkloads(w, *p.avoid);
  if (reps.empty() && jobs.empty()) return std::unexpected(noPlace("a GPU that overheats"));
  bool on_replica = !reps.empty() && (jobs.empty() || rng.chance(0.8));
  Story s;
  int node = 0, gpu = 0;
  const GpuType* type = nullptr;
  double cap_ratio = rng.range(0.55, 0.75);
  double hot = rng.range(85, 92);
  // The clocks come down once the temperature, rising with the GPU's heat capacity (about 45 s),
  // is within a few degrees of where it settles.
  int settle = static_cast<int>(std::ceil(45.0 / w.time.step * std::log((hot - 45) / 3.5)));
  int throttle_from = std::min(w.time.samples - 1, p.onset + std::max(1, settle));
  if (on_replica) {
    int ri = rng.pick(reps);
    auto& r = w.replicas[static_cast<size_t>(ri)];
    node = r.node;
    gpu = r.gpus[static_cast<size_t>(rng.intIn(0, static_cast<int>(r.gpus.size()) - 1))];
    // Slower steps; keep the replica short of saturation so the clock is what the case is about.
    for (int tries = 0; tries < 10 && loadOf(w, ri, throttle_from, 1, 1, 1 / cap_ratio) > 0.85;
         ++tries) {
      cap_ratio = std::min(0.9, cap_ratio + 0.04);
    }
    for (int k = throttle_from; k < p.end; ++k) r.slow[static_cast<size_t>(k)] = 1 / cap_ratio;
    claimReplica(w, r, s.touched);
    s.questions = {{"route", r.route, "slow"},
                   {"deployment", r.name, "slow"},
                   {"node", nodeNameOf(w, node), "any"},
                   {"fleet", "*", "any"}};
  } else {
    auto& wl = w.workloads[static_cast<size_t>(rng.pick(jobs))];
    node = wl.node;
    gpu = wl.gpus[static_cast<size_t>(rng.intIn(0, static_cast<int>(wl.gpus.size()) - 1))];
    for (int k = throttle_from; k < p.end; ++k) wl.slow[static_cast<size_t>(k)] = 1 / cap_ratio;
    claimWorkload(w, wl, s.touched);
    s.questions = {{"workload", wlId(wl), "slow"},
                   {"node", nodeNameOf(w, node), "any"},
                   {"fleet", "*", "any"}};
  }
  type = &w.typeOf(node);
  auto& g = w.nodes[static_cast<size_t>(node)].gpus[static_cast<size_t>(gpu)];
  double frac = rng.range(0.45, 0.95);
  for (int k = p.onset; k < p.end; ++k) {
    auto ks = static_cast<size_t>(k);
    g.temp_override[ks] = hot + rng.range(-1.0, 1.0);
    if (k >= throttle_from) {
      g.clock_cap[ks] = type->max_clock * cap_ratio * rng.jitter(0.03);
      g.violation_frac[ks] = frac * rng.jitter(0.1);
    }
  }
  if (!w.dcgm.thermal && rng.chance(0.4)) w.dcgm.thermal = true;
  s.subject = {"gpu", gpuId(w, node, gpu)};
  s.touched.gpus.insert(gpuId(w, node, gpu));
  return s;
}

namespace {

std::string oomMessage(Rng& rng, int gpu_index, double total_gib, double tried_gib) {
  double free_mib = rng.range(120, 800);
  double in_use = total_gib - free_mib / 1024 - rng.range(0.0, 0.2);
  double reserved = rng.range(1.2, 3.0);
  double allocated = in_use - reserved - rng.range(0.2, 0.5);
  std::string tried = tried_gib >= 1 ? fmt::format("{:.2f} GiB", tried_gib)
                                     : fmt::format("{:.2f} MiB", tried_gib * 1024);
  return fmt::format(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {}. GPU {} has a total "
      "capacity of {:.2f} GiB of which {:.2f} MiB is free. Including non-PyTorch memory, this "
      "process has {:.2f} GiB memory in use. Of the allocated memory {:.2f} GiB is allocated by "
      "PyTorch, and {:.2f} GiB is reserved by PyTorch but unallocated. If reserved but "
      "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
      "to avoid fragmentation.  See documentation for Memory Management  "
      "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
      tried, gpu_index, total_gib, free_mib, in_use, allocated, reserved);
}

}  // namespace

// gpu_memory_oom: a replica with memory tight from the start hits "CUDA out of memory" on a long
// request and crash-loops (load weights, allocate the KV cache, die again), or a training job's
// memory creeps to the top until torch raises OutOfMemoryError and torchrun restarts it.
Result<Story> gpuMemoryOom(World& w, Rng& rng, const Placement& p) {
  std::vector<int> reps;
  for (int ri : freeReplicas(w, *p.avoid)) {
    if (w.replicas[static_cast<size_t>(ri)].gpus.size() == 1) reps.push_back(ri);
  }
  auto jobs = steadyWorkloads(w, *p.avoid);
  if (reps.empty() && jobs.empty())
    return std::unexpected(noPlace("a process that runs out of GPU memory"));
  bool on_replica = !reps.empty() && (jobs.empty() || rng.chance(0.65));
  Story s;
  int64_t t0 = timeBefore(w, rng, p.onset);
  if (on_replica) {
    auto& r = w.replicas[static_cast<size_t>(rng.pick(reps))];
    const GpuType& type = w.typeOf(r.node);
    auto& g = w.nodes[static_cast<size_t>(r.node)].gpus[static_cast<size_t>(r.gpus[0])];
    // Memory was tight from the start (a high gpu_memory_utilization); a long request tips it.
    r.mem_util = rng.range(0.95, 0.975);
    r.down_from = p.onset;
    double total_gib = (type.total_mib - 1000) / 1024;
    bool show_oom = rng.chance(0.85);
    engineDeath(w, rng, r, t0,
                show_oom ? oomMessage(rng, 0, total_gib, rng.range(0.5, 3.0))
                         : "RuntimeError: CUDA error: out of memory");
    // CrashLoopBackOff: start, load weights, allocate the KV cache, die again on the first
    // long prompt. The GPU's memory shows every round.
    double weights = std::min(type.total_mib * 0.6, [&] {
      for (const auto& m : modelSpecs()) {
        if (m.name == r.model) return m.params_b * 2 * 1024 / m.tp;
      }
      return 16.0 * 1024;
    }());
    double full = type.total_mib * r.mem_util;
    struct Phase {
      int64_t from;
      double mib;
      int64_t ramp_to;  // > from: memory ramps from 0 to mib over [from, ramp_to)
    };
    std::vector<Phase> phases = {{t0, 0, 0}};
    int64_t t = t0 + rng.intIn(35, 80);
    int pid = r.engine_pid;
    while (t < w.time.end() + 120) {
      pid += rng.intIn(40, 300);
      engineStart(w, r, t, pid);
      int64_t load = rng.intIn(40, 95);
      int64_t loaded = t + rng.intIn(8, 15) + load;
      phases.push_back({t + 5, weights, loaded});
      w.log(loaded, r.name,
            r.v1 ? fmt::format("(EngineCore_DP0 pid={}) INFO {} [default_loader.py:262] Loading "
                               "weights took {:.2f} seconds",
                               pid, vllmTime(loaded), static_cast<double>(load))
                 : fmt::format("INFO {} model_runner.py:1072] Loading model weights took {:.4f} GB",
                               vllmTime(loaded), weights / 1024));
      int64_t kv_at = loaded + rng.intIn(18, 40);
      phases.push_back({loaded, weights, 0});
      phases.push_back({kv_at, full, 0});
      w.log(kv_at, r.name,
            r.v1 ? fmt::format("(EngineCore_DP0 pid={}) INFO {} [kv_cache_utils.py:1087] GPU KV "
                               "cache size: {} tokens",
                               pid, vllmTime(kv_at),
                               withThousands(static_cast<int64_t>(r.kv_tokens * 1.05)))
                 : fmt::format("INFO {} gpu_executor.py:122] # GPU blocks: {}, # CPU blocks: 4096",
                               vllmTime(kv_at), static_cast<int64_t>(r.kv_tokens * 1.05 / 16)));
      int64_t die = kv_at + rng.intIn(8, 45);
      std::string err = show_oom ? oomMessage(rng, 0, total_gib, rng.range(0.25, 1.5))
                                 : "RuntimeError: CUDA error: out of memory";
      w.log(die, r.name,
            r.v1 ? fmt::format("(EngineCore_DP0 pid={}) ERROR {} [core.py:700] {}", pid,
                               vllmTime(die), err)
                 : fmt::format("ERROR {} engine.py:160] {}", vllmTime(die), err));
      phases.push_back({die, 0, 0});
      t = die + rng.intIn(25, 70);
    }
    for (int k = p.onset; k < w.time.samples; ++k) {
      int64_t now = w.time.at(k);
      double mib = 0;
      for (const auto& ph : phases) {
        if (ph.from > now) break;
        mib = ph.mib;
        if (ph.ramp_to > ph.from && now < ph.ramp_to) {
          mib = ph.mib * static_cast<double>(now - ph.from) /
                static_cast<double>(ph.ramp_to - ph.from);
        }
      }
      g.fb_override[static_cast<size_t>(k)] = std::round(mib * rng.jitter(0.003));
    }
    s.subject = {"deployment", r.name};
    claimReplica(w, r, s.touched);
    s.touched.routes.insert(r.route);
    s.questions = {
        {"route", r.route, "errors"}, {"deployment", r.name, "errors"}, {"fleet", "*", "any"}};
  } else {
    auto& wl = w.workloads[static_cast<size_t>(rng.pick(jobs))];
    const GpuType& type = w.typeOf(wl.node);
    double top = type.total_mib - 480 - wl.fb_mib - rng.range(50, 400);
    // Memory creeps up (growing sequence length, a leak) until an allocation fails; torchrun
    // restarts the job from its checkpoint and it climbs again.
    int climb = rng.intIn(2, 5);
    int k = std::max(1, p.onset - climb);
    int cycle = 0;
    int64_t t = 0;
    while (k < w.time.samples && cycle < 4) {
      int start = k;
      for (; k < w.time.samples && k < start + climb + 1; ++k) {
        double f = static_cast<double>(k - start + 1) / (climb + 1);
        wl.fb_extra[static_cast<size_t>(k)] = top * std::min(1.0, f);
      }
      if (k >= w.time.samples) break;
      t = timeBefore(w, rng, k);
      std::string src = wlId(wl);
      w.log(t, src,
            "[rank0]: " + oomMessage(rng, 0, (type.total_mib - 1000) / 1024, rng.range(0.5, 6.0)));
      w.log(t + rng.intIn(3, 20), src,
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED "
            "(exitcode: 1, local_rank: 0)");
      int gap = rng.intIn(1, 2);
      for (int j = k; j < k + gap && j < w.time.samples; ++j) {
        wl.util_scale[static_cast<size_t>(j)] = 0;
        wl.fb_extra[static_cast<size_t>(j)] = -wl.fb_mib;
      }
      k += gap;
      ++cycle;
      if (k < w.time.samples) {
        int64_t tl = w.time.at(k - 1) + rng.intIn(5, 25);
        w.log(tl, src,
              fmt::format("{} INFO checkpoint.py:311 Loading checkpoint from /ckpt/{}/step_{}",
                          pyTime(tl, rng.intIn(0, 999)), wl.name, wl.step0 + rng.intIn(100, 900)));
      }
      climb = rng.intIn(2, 4);
    }
    if (cycle >= 2 && rng.chance(0.5) && t > 0) {
      w.finish(wl, std::min(w.time.end(), t + rng.intIn(30, 60)), false);
    }
    s.subject = {"workload", wlId(wl)};
    claimWorkload(w, wl, s.touched);
    s.questions = {{"workload", wlId(wl), "errors"}, {"fleet", "*", "any"}};
  }
  return s;
}

// nvlink_degraded: a node's NVLink degrades under its multi-GPU work: bandwidth counters slow on
// those GPUs, CRC flit errors climb, maybe an XID 74, and tensor-parallel steps or training steps
// take longer.
Result<Story> nvlinkDegraded(World& w, Rng& rng, const Placement& p) {
  struct Candidate {
    int node;
    std::vector<int> replicas, workloads;
  };
  std::vector<Candidate> candidates;
  for (int n = 0; n < static_cast<int>(w.nodes.size()); ++n) {
    if (!nodeFree(w, n, *p.avoid) || !w.typeOf(n).nvlink) continue;
    Candidate c{n, {}, {}};
    for (int i = 0; i < static_cast<int>(w.replicas.size()); ++i) {
      const auto& r = w.replicas[static_cast<size_t>(i)];
      if (r.node == n && r.gpus.size() > 1) c.replicas.push_back(i);
    }
    for (int i : steadyWorkloads(w, *p.avoid, 2, false)) {
      if (w.workloads[static_cast<size_t>(i)].node == n) c.workloads.push_back(i);
    }
    if (!c.replicas.empty() || !c.workloads.empty()) candidates.push_back(std::move(c));
  }
  if (candidates.empty()) return std::unexpected(noPlace("a node whose NVLink degrades"));
  const Candidate& c = rng.pick(candidates);
  Story s;
  auto& node = w.nodes[static_cast<size_t>(c.node)];
  std::vector<int> gpus;
  for (int ri : c.replicas) {
    auto& r = w.replicas[static_cast<size_t>(ri)];
    double slow = rng.range(1.1, 1.35);
    for (int k = p.onset; k < p.end; ++k) r.slow[static_cast<size_t>(k)] = slow;
    gpus.insert(gpus.end(), r.gpus.begin(), r.gpus.end());
    s.questions.push_back({"route", r.route, "slow"});
    s.questions.push_back({"deployment", r.name, "slow"});
  }
  for (int wi : c.workloads) {
    auto& wl = w.workloads[static_cast<size_t>(wi)];
    double slow = rng.range(1.3, 2.3);
    for (int k = p.onset; k < p.end; ++k) {
      wl.slow[static_cast<size_t>(k)] = slow;
      wl.util_scale[static_cast<size_t>(k)] = rng.range(0.7, 0.85);
    }
    gpus.insert(gpus.end(), wl.gpus.begin(), wl.gpus.end());
    s.questions.push_back({"workload", wlId(wl), "slow"});
  }
  std::sort(gpus.begin(), gpus.end());
  gpus.erase(std::unique(gpus.begin(), gpus.end()), gpus.end());
  w.dcgm.nvlink = true;
  if (rng.chance(0.8)) w.dcgm.crc = true;
  double factor = rng.range(0.15, 0.45);
  int crc_gpus = rng.intIn(1, static_cast<int>(gpus.size()));
  for (size_t i = 0; i < gpus.size(); ++i) {
    auto& g = node.gpus[static_cast<size_t>(gpus[i])];
    double rate = rng.range(30, 2500);
    for (int k = p.onset; k < p.end; ++k) {
      g.nvlink_factor[static_cast<size_t>(k)] = factor * rng.jitter(0.1);
      if (static_cast<int>(i) < crc_gpus) g.crc_rate[static_cast<size_t>(k)] = rate;
    }
  }
  if (rng.chance(0.6)) {
    int g = gpus[static_cast<size_t>(rng.intIn(0, static_cast<int>(gpus.size()) - 1))];
    int k0 = std::min(w.time.samples - 1, p.onset + rng.intIn(0, 6));
    for (int k = k0; k < w.time.samples; ++k) {
      node.gpus[static_cast<size_t>(g)].xid[static_cast<size_t>(k)] = 74;
    }
    if (rng.chance(0.8)) kernelXid(w, rng, c.node, g, 74, timeBefore(w, rng, k0));
  }
  s.subject = {"node", node.name};
  s.touched.nodes.insert(node.name);
  s.touched.node_faults.insert(node.name);
  for (size_t g = 0; g < node.gpus.size(); ++g)
    s.touched.gpus.insert(gpuId(w, c.node, static_cast<int>(g)));
  for (int ri : c.replicas) claimReplica(w, w.replicas[static_cast<size_t>(ri)], s.touched);
  for (int wi : c.workloads) claimWorkload(w, w.workloads[static_cast<size_t>(wi)], s.touched);
  s.questions.push_back({"node", node.name, "any"});
  s.questions.push_back({"fleet", "*", "any"});
  return s;
}

namespace {

// A queue whose workloads run for the whole window (none arriving or leaving inside it).
std::vector<int> steadyQueues(const World& w, const Claims& a) {
  std::vector<int> out;
  for (int qi = 0; qi < static_cast<int>(w.queues.size()); ++qi) {
    const auto& q = w.queues[static_cast<size_t>(qi)];
    if (!queueFree(w, q, a)) continue;
    int running = 0;
    bool steady = true;
    for (const auto& wl : w.workloads) {
      if (wl.queue != q.name) continue;
      steady = steady &&
               std::all_of(wl.state.begin(), wl.state.end(), [](char s) { return s == kRunning; });
      ++running;
    }
    if (steady && running > 0) out.push_back(qi);
  }
  return out;
}

std::string quotaMessage(const ClusterQueue& q, int need, bool preempting) {
  return fmt::format(
      "couldn't assign flavors to pod set main: insufficient unused quota for "
      "nvidia.com/gpu in flavor {}, {} more needed{}",
      q.flavor, need, preempting ? ". Pending the preemption of 1 workload(s)" : "");
}

}  // namespace

// quota_exhausted: a ClusterQueue at its nominal quota with nothing to borrow; new workloads
// stay Pending ("insufficient unused quota"), with no node in the inventory.
Result<Story> quotaExhausted(World& w, Rng& rng, const Placement& p) {
  auto candidates = steadyQueues(w, *p.avoid);
  if (candidates.empty()) return std::unexpected(noPlace("a ClusterQueue that fills"));
  int qi = rng.pick(candidates);
  auto& q = w.queues[static_cast<size_t>(qi)];
  int used = 0;
  for (const auto& wl : w.workloads) {
    if (wl.queue == q.name) used += static_cast<int>(wl.gpus.size());
  }
  q.nominal = used;  // every GPU of its quota is taken, and its cohort lends nothing
  int arrivals = rng.intIn(1, 3);
  int64_t t = timeBefore(w, rng, p.onset);
  Story s;
  for (int i = 0; i < arrivals && t < w.time.end(); ++i) {
    Workload wl =
        newWorkload(w, rng, q, rng.chance(0.6) ? WorkloadKind::kTrain : WorkloadKind::kBatch);
    int need = rng.pick(std::vector<int>{1, 2, 4, 4, 8});
    w.pend(wl, t, quotaMessage(q, need, false));
    // Kueue says it again on its next attempts.
    if (rng.chance(0.4)) {
      int64_t again = t + rng.intIn(120, 400);
      if (again < w.time.end()) {
        w.events.push_back(
            {again, "fleet", "Pending", "", wlId(wl), "Pending", quotaMessage(q, need, false)});
      }
    }
    s.questions.push_back({"workload", wlId(wl), "pending"});
    w.workloads.push_back(std::move(wl));
    t += rng.intIn(60, 420);
  }
  s.subject = {"queue", q.name};
  claimQueue(w, q, s.touched);
  s.touched.teams.insert(q.team);
  s.questions.push_back({"queue", q.name, "pending"});
  s.questions.push_back({"team", q.team, "pending"});
  s.questions.push_back({"fleet", "*", "any"});
  return s;
}

// preemption_churn: a queue's job runs on GPUs borrowed from its cohort; the lender's jobs
// reclaim them again and again: Preempted/Evicted, SIGTERM and checkpoint lines, re-admitted,
// preempted again.
Result<Story> preemptionChurn(World& w, Rng& rng, const Placement& p) {
  const Claims& a = *p.avoid;
  // The victim: a training job that runs the whole window in a queue apart from everything
  // avoided; the reclaimer: another team's queue, put in the same cohort.
  std::vector<std::pair<int, int>> pairs;  // (workload, lender queue)
  for (int wi : steadyWorkloads(w, a)) {
    const auto& wl = w.workloads[static_cast<size_t>(wi)];
    int vq = w.findQueue(wl.queue);
    if (vq < 0 || !queueFree(w, w.queues[static_cast<size_t>(vq)], a)) continue;
    for (int lq = 0; lq < static_cast<int>(w.queues.size()); ++lq) {
      const auto& l = w.queues[static_cast<size_t>(lq)];
      if (lq == vq || l.team == wl.ns || !queueFree(w, l, a)) continue;
      if (l.flavor != w.queues[static_cast<size_t>(vq)].flavor) continue;
      pairs.push_back({wi, lq});
    }
  }
  if (pairs.empty())
    return std::unexpected(noPlace("a queue whose workloads keep being preempted"));
  auto [wi, lq] = rng.pick(pairs);
  int victim_node = w.workloads[static_cast<size_t>(wi)].node;
  std::vector<int> victim_gpus = w.workloads[static_cast<size_t>(wi)].gpus;
  std::string victim_queue = w.workloads[static_cast<size_t>(wi)].queue;
  int vq = w.findQueue(victim_queue);
  auto& lender = w.queues[static_cast<size_t>(lq)];
  auto& vqueue = w.queues[static_cast<size_t>(vq)];
  double v = rng.uniform();
  std::string reason = v < 0.65   ? "InCohortReclamation"
                       : v < 0.85 ? "InCohortFairSharing"
                                  : "InClusterQueue";
  std::string phrase = reason == "InCohortReclamation"   ? "reclamation within the cohort"
                       : reason == "InCohortFairSharing" ? "fairsharing within the cohort"
                                                         : "prioritization in the ClusterQueue";
  const ClusterQueue* claimer = &lender;
  if (reason == "InClusterQueue") {
    claimer = &vqueue;  // higher-priority jobs of its own queue
  } else {
    // A cohort of two: the victim runs on GPUs it borrows from the lender, and the cohort has
    // nothing else to spare, so each time the lender needs its quota back it reclaims them.
    for (auto& q : w.queues) {
      if (q.cohort == vqueue.cohort && q.name != vqueue.name) q.cohort = "cohort-" + q.name;
    }
    lender.cohort = vqueue.cohort;
    int victim_gpu_count = static_cast<int>(victim_gpus.size());
    int used_v = 0, used_l = 0;
    for (const auto& wl : w.workloads) {
      if (wl.queue == vqueue.name) used_v += static_cast<int>(wl.gpus.size());
      if (wl.queue == lender.name) used_l += static_cast<int>(wl.gpus.size());
    }
    vqueue.nominal = std::max(0, used_v - victim_gpu_count);
    lender.nominal = used_l + victim_gpu_count;
  }
  int cycles = rng.intIn(2, 4);
  int64_t t = timeBefore(w, rng, p.onset);
  int64_t ckpt = w.workloads[static_cast<size_t>(wi)].step0 + rng.intIn(200, 900);
  std::string claimer_queue = claimer->name;
  std::string claimer_team = claimer->team;
  std::vector<Workload> added;
  for (int c = 0; c < cycles && t < w.time.end() - 60; ++c) {
    ClusterQueue cq = *claimer;
    Workload j =
        newWorkload(w, rng, cq, rng.chance(0.5) ? WorkloadKind::kBatch : WorkloadKind::kTrain);
    j.node = victim_node;
    j.gpus = victim_gpus;
    j.logs = j.logs && rng.chance(0.5);
    int need = static_cast<int>(victim_gpus.size());
    w.pend(j, t - rng.intIn(2, 5), quotaMessage(cq, need, true));
    auto& victim = w.workloads[static_cast<size_t>(wi)];
    w.preempt(victim, t, reason, phrase);
    if (rng.chance(0.85)) {
      w.log(t + rng.intIn(1, 3), wlId(victim),
            fmt::format("{} WARNING train.py:402 Received SIGTERM; saving checkpoint at step {}",
                        pyTime(t + 2, rng.intIn(0, 999)), ckpt));
    }
    int64_t admitted = t + rng.intIn(5, 12);
    w.admit(j, admitted, static_cast<int>(admitted - t) + rng.intIn(2, 10));
    int64_t done = admitted + rng.intIn(120, 330);
    if (done >= w.time.end()) break;
    w.finish(j, done, true);
    int64_t back = done + rng.intIn(2, 10);
    w.admit(victim, back, static_cast<int>(back - t));
    if (rng.chance(0.85)) {
      int64_t tl = back + rng.intIn(25, 60);
      w.log(tl, wlId(victim),
            fmt::format("{} INFO checkpoint.py:311 Loading checkpoint from /ckpt/{}/step_{}",
                        pyTime(tl, rng.intIn(0, 999)), victim.name, ckpt));
    }
    ckpt += rng.intIn(20, 60);
    added.push_back(std::move(j));
    t = back + rng.intIn(60, 300);
  }
  if (added.size() < 2) return std::unexpected(noPlace("room for repeated preemptions"));
  for (auto& j : added) w.workloads.push_back(std::move(j));
  const auto& victim = w.workloads[static_cast<size_t>(wi)];
  Story s;
  s.subject = {"queue", victim_queue};
  claimQueue(w, w.queues[static_cast<size_t>(vq)], s.touched);
  claimQueue(w, w.queues[static_cast<size_t>(w.findQueue(claimer_queue))], s.touched);
  s.touched.teams.insert(victim.ns);
  s.touched.teams.insert(claimer_team);
  s.questions = {{"queue", victim_queue, "any"},
                 {"workload", wlId(victim), "any"},
                 {"team", victim.ns, "pending"},
                 {"fleet", "*", "any"}};
  return s;
}

// noisy_neighbor: a GPU shared HAMi-style by a replica and a batch job admitted at the onset
// that takes most of its compute: utilisation pinned at 100 %, the replica's ITL and TTFT up.
Result<Story> noisyNeighbor(World& w, Rng& rng, const Placement& p) {
  // A replica alone on its GPU, and a queue whose flavor is that GPU's.
  std::vector<std::pair<int, int>> pairs;
  for (int ri : freeReplicas(w, *p.avoid)) {
    const auto& r = w.replicas[static_cast<size_t>(ri)];
    if (r.gpus.size() != 1 || !usersOf(w, r.node, r.gpus[0]).workloads.empty()) continue;
    for (int qi = 0; qi < static_cast<int>(w.queues.size()); ++qi) {
      const auto& q = w.queues[static_cast<size_t>(qi)];
      if (q.flavor == w.typeOf(r.node).flavor && queueFree(w, q, *p.avoid)) {
        pairs.push_back({ri, qi});
      }
    }
  }
  if (pairs.empty()) return std::unexpected(noPlace("a shared GPU"));
  auto [ri, qi] = rng.pick(pairs);
  auto& r = w.replicas[static_cast<size_t>(ri)];
  const auto& q = w.queues[static_cast<size_t>(qi)];
  // The GPU is shared (HAMi-style slices): the replica holds part of its memory; a batch job
  // admitted at the onset takes most of its compute.
  r.mem_util = rng.range(0.4, 0.55);
  r.kv_tokens *= r.mem_util / 0.9;
  Workload wl = newWorkload(w, rng, q, WorkloadKind::kBatch);
  wl.node = r.node;
  wl.gpus = r.gpus;
  wl.util = rng.range(70, 96);
  wl.fb_mib = w.typeOf(r.node).total_mib * rng.range(0.2, 0.38);
  wl.logs = rng.chance(0.4);
  wl.titan_logs = false;
  int64_t t = timeBefore(w, rng, p.onset);
  w.admit(wl, t, rng.intIn(1, 60));
  double slow = rng.range(1.6, 3.0);
  for (int tries = 0; tries < 10 && loadOf(w, ri, p.onset, 1, 1, slow) > 0.9; ++tries) slow *= 0.88;
  slow = std::max(slow, 1.35);
  for (int k = p.onset; k < p.end; ++k) r.slow[static_cast<size_t>(k)] = slow * rng.jitter(0.05);
  if (p.end < w.time.samples) w.finish(wl, w.time.at(p.end) - rng.intIn(1, 25), true);
  Story s;
  s.subject = {"gpu", gpuId(w, r.node, r.gpus[0])};
  claimReplica(w, r, s.touched);
  claimWorkload(w, wl, s.touched);
  s.touched.routes.insert(r.route);
  s.questions = {{"route", r.route, "slow"}, {"deployment", r.name, "slow"}, {"fleet", "*", "any"}};
  w.workloads.push_back(std::move(wl));
  return s;
}

namespace {

struct FreeSlot {
  int node;
  std::vector<int> gpus;
};

// GPUs nothing uses during the window (and nothing in `avoid` covers).
std::vector<FreeSlot> freeSlots(const World& w, const Claims& a, int count) {
  std::vector<FreeSlot> out;
  for (int n = 0; n < static_cast<int>(w.nodes.size()); ++n) {
    if (a.everything || a.nodes.count(w.nodes[static_cast<size_t>(n)].name)) continue;
    std::vector<int> idle;
    for (int g = 0; g < static_cast<int>(w.nodes[static_cast<size_t>(n)].gpus.size()); ++g) {
      GpuUsers u = usersOf(w, n, g);
      if (u.replicas.empty() && u.workloads.empty() && !a.gpus.count(gpuId(w, n, g))) {
        idle.push_back(g);
      }
    }
    if (static_cast<int>(idle.size()) >= count) {
      idle.resize(static_cast<size_t>(count));
      out.push_back({n, idle});
    }
  }
  return out;
}

}  // namespace

// idle_allocation: a workload admitted before the window holding GPUs it never uses (a notebook,
// a job waiting on its data): utilisation near 0, idle clocks, its quota counted.
Result<Story> idleAllocation(World& w, Rng& rng, const Placement& p) {
  // Free GPUs of a flavor some queue apart from everything avoided can hold.
  std::vector<std::pair<FreeSlot, int>> options;
  for (int count = rng.pick(std::vector<int>{1, 2, 2, 4}); count >= 1 && options.empty();
       count /= 2) {
    for (const auto& slot : freeSlots(w, *p.avoid, count)) {
      for (int qi = 0; qi < static_cast<int>(w.queues.size()); ++qi) {
        const auto& q = w.queues[static_cast<size_t>(qi)];
        if (q.flavor == w.typeOf(slot.node).flavor && queueFree(w, q, *p.avoid)) {
          options.push_back({slot, qi});
        }
      }
    }
  }
  if (options.empty()) return std::unexpected(noPlace("idle GPUs to allocate"));
  auto [slot, qi] = rng.pick(options);
  auto& q = w.queues[static_cast<size_t>(qi)];
  bool notebook = rng.chance(0.6);
  Workload wl = newWorkload(w, rng, q, notebook ? WorkloadKind::kNotebook : WorkloadKind::kTrain);
  wl.node = slot.node;
  wl.gpus = slot.gpus;
  wl.logs = false;
  wl.fb_mib = notebook ? 815 : rng.range(1500, 9000);
  wl.state.assign(static_cast<size_t>(w.time.samples), kRunning);
  for (auto& x : wl.util_scale) x = 0.001;
  q.nominal += static_cast<int>(slot.gpus.size());
  if (!notebook && rng.chance(0.5)) {
    int64_t t = w.time.at(rng.intIn(0, 2)) + rng.intIn(0, 29);
    w.log(t, wlId(wl),
          fmt::format("{} INFO dataloader.py:88 waiting for shard manifest "
                      "s3://{}-datasets/{}/manifest.json",
                      pyTime(t, rng.intIn(0, 999)), wl.ns, wl.name));
  }
  Story s;
  s.subject = {"workload", wlId(wl)};
  claimWorkload(w, wl, s.touched);
  s.touched.queues.insert(q.name);
  s.questions = {{"fleet", "*", "any"}, {"team", wl.ns, "idle"}, {"workload", wlId(wl), "idle"}};
  w.workloads.push_back(std::move(wl));
  return s;
}

}  // namespace purser::sim::incident
