// Detectors of GPUs and nodes: hardware faults (Xid), thermal throttling, a noisy neighbour
// on a shared device, NVLink degraded. See analysis.h.
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

void Analysis::gpusAndNodes() {
  gpus();
  nodesNvlink();
}

auto Analysis::gpus() -> void {
  std::set<std::pair<std::string, int64_t>> seen;
  for (const Series* s : named("DCGM_FI_DEV_GPU_TEMP")) seen.insert(gpuKey(*s));
  for (const Series* s : named("DCGM_FI_DEV_XID_ERRORS")) seen.insert(gpuKey(*s));
  for (const Series* s : named("DCGM_FI_DEV_GPU_UTIL")) seen.insert(gpuKey(*s));
  for (const auto& [node, index] : seen) {
    if (node.empty() || index < 0) continue;
    thermal(node, index);
    noisyNeighbor(node, index);
  }
  hardwareFaults(seen);
}

auto Analysis::gpuKey(const Series& s) -> std::pair<std::string, int64_t> {
  auto host = s.label("Hostname");
  if (!host) host = s.label("node");
  auto gpu = s.label("gpu");
  int64_t index = -1;
  if (gpu && !gpu->empty() && gpu->size() < 6 &&
      std::all_of(gpu->begin(), gpu->end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    index = std::atoll(std::string(*gpu).c_str());
  }
  return {host ? std::string(*host) : "", index};
}

auto Analysis::gpuAffects(const std::string& node, int64_t index) const -> std::vector<Subject> {
  std::vector<Subject> out;
  auto it = gpu_users_.find(gpuName(node, index));
  if (it != gpu_users_.end()) {
    for (const Subject& s : it->second) {
      out.push_back(s);
      if (s.kind == "deployment") {
        if (auto d = deployments_.find(s.name); d != deployments_.end()) {
          out.push_back({"route", d->second->route});
        }
      }
    }
  }
  return out;
}

auto Analysis::thermal(const std::string& node, int64_t index) -> void {
  const Series* temp = gpuSeries("DCGM_FI_DEV_GPU_TEMP", node, index);
  const Series* viol = gpuSeries("DCGM_FI_DEV_THERMAL_VIOLATION", node, index);
  const Series* clock = gpuSeries("DCGM_FI_DEV_SM_CLOCK", node, index);
  const Series* util = gpuSeries("DCGM_FI_DEV_GPU_UTIL", node, index);
  Shift ts, vs, cs;
  bool hot = false, violating = false, clocked_down = false;
  if (temp != nullptr) {
    ts = upShift(gaugeOf(*temp));
    hot = ts.valid && (ts.peak >= 85 || (ts.peak >= 80 && ts.peak - ts.base >= 15));
  }
  if (viol != nullptr) {
    vs = upShift(rate(*viol));
    double inc = viol->v.empty() ? 0 : viol->v.back() - viol->v.front();
    violating = vs.valid && inc > 0 && vs.peak > 0 && vs.high >= 3 && vs.ratio(1) >= 5;
  }
  if (clock != nullptr) {
    // A clock that drops because the GPU went idle is not throttling: only samples where the
    // GPU was busy count.
    Points busy;
    for (size_t i = 0; i < clock->t.size(); ++i) {
      double u = 100;
      if (util != nullptr) {
        auto it = std::lower_bound(util->t.begin(), util->t.end(), clock->t[i]);
        if (it != util->t.end() && *it == clock->t[i]) {
          u = util->v[static_cast<size_t>(it - util->t.begin())];
        }
      }
      if (u >= 10) {
        busy.t.push_back(clock->t[i]);
        busy.x.push_back(clock->v[i]);
      }
    }
    cs = downShift(busy);
    clocked_down = cs.valid && cs.base > 0 && cs.peak <= 0.9 * cs.base && cs.high >= 3;
  }
  if (!violating && !(hot && clocked_down)) return;
  Candidate c;
  Finding& f = c.f;
  f.cause = "gpu_thermal_throttle";
  f.subject = {"gpu", gpuName(node, index)};
  double s = 0;
  if (violating) {
    s += 0.5;
    f.evidence.push_back(metric(*viol, vs,
                                fmt::format("thermal violation time {} -> {} us/s",
                                            num(vs.base / 1000), num(vs.peak / 1000))));
    f.onset = vs.onset;
  }
  if (hot) {
    s += 0.15;
    f.evidence.push_back(
        metric(*temp, ts, fmt::format("temperature {} C -> {} C", num(ts.base), num(ts.peak))));
    if (f.onset == 0) f.onset = ts.onset;
  }
  if (clocked_down) {
    s += 0.2;
    f.evidence.push_back(
        metric(*clock, cs,
               fmt::format("SM clock {} MHz -> {} MHz while busy", num(cs.base), num(cs.peak))));
    if (f.onset == 0) f.onset = cs.onset;
  }
  c.affects = gpuAffects(node, index);
  for (const Subject& a : c.affects) {
    if (a.kind != "deployment") continue;
    if (auto lat = replicaLatency(a.name); lat && lat->ratio >= 1.2) {
      s += 0.1;
      f.evidence.push_back(histEvidence(*lat->sum, lat->base, lat->shift, lat->what));
      break;
    }
  }
  c.strength = std::min(s, 0.95);
  f.explanation = fmt::format(
      "GPU {} is throttling for heat: {}{}, so everything on it runs slower.", f.subject.name,
      hot ? fmt::format("it reached {} C", num(ts.peak)) : "it spends time in thermal violation",
      clocked_down
          ? fmt::format(" and its SM clock fell from {} to {} MHz", num(cs.base), num(cs.peak))
          : "");
  f.next_steps = {
      fmt::format("Check cooling on {}: fans, airflow, inlet temperature, a failed PSU or fan "
                  "tray.",
                  node),
      fmt::format("Drain or cordon {} and move its work while the hardware is checked.",
                  f.subject.name),
      "Compare with the node's other GPUs: one hot GPU points at the card, all of them at the "
      "chassis or the room."};
  emit(std::move(c));
}

auto Analysis::noisyNeighbor(const std::string& node, int64_t index) -> void {
  auto it = gpu_users_.find(gpuName(node, index));
  if (it == gpu_users_.end() || it->second.size() < 2) return;
  const Series* util = gpuSeries("DCGM_FI_DEV_GPU_UTIL", node, index);
  if (util == nullptr) return;
  Shift us = upShift(gaugeOf(*util));
  // The victim: a replica on the shared GPU whose latency rose.
  std::optional<Latency> worst;
  std::string victim;
  for (const Subject& s : it->second) {
    if (s.kind != "deployment") continue;
    auto lat = replicaLatency(s.name);
    if (lat && (!worst || lat->ratio > worst->ratio)) {
      worst = lat;
      victim = s.name;
    }
  }
  if (!worst || worst->ratio < 1.3) return;
  bool util_up = us.valid && us.peak >= 80 && us.peak - us.base >= 20;
  // The neighbour: another tenant of the GPU that arrived or got busy.
  const Event* arrival = nullptr;
  std::string neighbour;
  for (const Subject& s : it->second) {
    if (s.name == victim) continue;
    neighbour = s.name;
    for (const Event& ev : c_.events) {
      if (ev.object == s.name && (ev.kind == "Admitted" || ev.kind == "QuotaReserved")) {
        arrival = &ev;
      }
    }
  }
  // Its own load did not grow as much: the slowness does not come from the victim's traffic.
  double load_ratio = 1;
  if (const Series* gen = engine("vllm:generation_tokens_total", victim)) {
    Shift ls = upShift(rate(*gen));
    if (ls.valid) load_ratio = ls.ratio(1);
  }
  if (!util_up && arrival == nullptr) return;
  if (load_ratio >= worst->ratio) return;
  Candidate c;
  Finding& f = c.f;
  f.cause = "noisy_neighbor";
  f.subject = {"gpu", gpuName(node, index)};
  double s = 0.45;
  if (util_up) {
    s += 0.15;
    f.evidence.push_back(
        metric(*util, us, fmt::format("GPU utilisation {} % -> {} %", num(us.base), num(us.peak))));
    f.onset = us.onset;
  }
  f.evidence.push_back(
      histEvidence(*worst->sum, worst->base, worst->shift, worst->what + " of " + victim));
  if (arrival != nullptr) {
    f.evidence.push_back(event(*arrival));
    TimeMs lat_onset = worst->shift.onset;
    if (std::llabs(lat_onset - arrival->time) <= 3 * kMinute) s += 0.2;
    if (f.onset == 0) f.onset = arrival->time;
  }
  c.strength = std::min(s, 0.9);
  c.affects = gpuAffects(node, index);
  f.explanation = fmt::format(
      "GPU {} is shared, and {} now takes most of its compute{}; {} on the same GPU slowed "
      "down ({} rose {}x) although its own load grew less.",
      f.subject.name, neighbour.empty() ? "another tenant" : neighbour,
      util_up ? fmt::format(" (utilisation {} % -> {} %)", num(us.base), num(us.peak)) : "", victim,
      worst->what, num(worst->ratio));
  f.next_steps = {fmt::format("Give {} a whole GPU, or cap its neighbour's compute share on {}.",
                              victim, f.subject.name),
                  "Check the sharing policy of this GPU pool (memory and core limits per tenant).",
                  "Move the neighbour to another GPU if the replica's latency matters more."};
  emit(std::move(c));
}

auto Analysis::criticalXid(int64_t code) -> bool {
  switch (code) {
    case 48:
    case 61:
    case 62:
    case 63:
    case 64:
    case 79:
    case 92:
    case 94:
    case 95:
    case 119:
    case 120:
    case 121:
    case 140:
      return true;
    default:
      return false;
  }
}

auto Analysis::xidLogs() const -> std::vector<XidLog> {
  std::vector<XidLog> out;
  for (const LogLine& l : c_.logs) {
    size_t p = l.line.find("NVRM: Xid (");
    if (p == std::string::npos) continue;
    size_t close = l.line.find("): ", p);
    if (close == std::string::npos) continue;
    XidLog x;
    x.line = &l;
    std::string_view inside(l.line.data() + p + 11, close - (p + 11));
    if (inside.starts_with("PCI:")) inside.remove_prefix(4);
    x.pci = std::string(inside);
    x.code = std::atoll(l.line.c_str() + close + 3);
    out.push_back(x);
  }
  return out;
}

auto Analysis::gpuOfPci(const std::string& node, const std::string& pci) const
    -> std::optional<int64_t> {
  for (const LogLine& l : c_.logs) {
    if (l.source != node) continue;
    size_t p = l.line.find("GPU at PCI:" + pci);
    if (p == std::string::npos) continue;
    size_t u = l.line.find("GPU-", p + 11);
    if (u == std::string::npos) continue;
    std::string uuid = l.line.substr(u);
    while (!uuid.empty() && (uuid.back() == ' ' || uuid.back() == '.')) uuid.pop_back();
    for (const Series* s : named("DCGM_FI_DEV_GPU_UTIL")) {
      if (s->label("UUID") == std::optional<std::string_view>(uuid)) {
        auto [host, index] = gpuKey(*s);
        if (index >= 0) return index;
      }
    }
  }
  return std::nullopt;
}

auto Analysis::hardwareFaults(const std::set<std::pair<std::string, int64_t>>& gpus) -> void {
  auto xlogs = xidLogs();
  std::map<std::pair<std::string, int64_t>, std::vector<const XidLog*>> logs_by_gpu;
  std::map<std::string, std::vector<const XidLog*>> unplaced;  // node -> logs
  for (const XidLog& x : xlogs) {
    if (auto g = gpuOfPci(x.line->source, x.pci)) {
      logs_by_gpu[{x.line->source, *g}].push_back(&x);
    } else {
      unplaced[x.line->source].push_back(&x);
    }
  }
  for (const auto& [node, index] : gpus) {
    const Series* xid = gpuSeries("DCGM_FI_DEV_XID_ERRORS", node, index);
    int64_t code = 0;
    TimeMs when = 0;
    if (xid != nullptr) {
      for (size_t i = 0; i < xid->v.size(); ++i) {
        auto v = static_cast<int64_t>(xid->v[i]);
        if (std::isfinite(xid->v[i]) && criticalXid(v)) {
          code = v;
          when = xid->t[i];
          break;
        }
      }
    }
    std::vector<const XidLog*> lines;
    if (auto it = logs_by_gpu.find({node, index}); it != logs_by_gpu.end()) lines = it->second;
    std::erase_if(lines, [](const XidLog* x) { return !criticalXid(x->code); });
    if (code == 0 && !lines.empty()) {
      code = lines.front()->code;
      when = lines.front()->line->time;
    }
    if (code == 0) {
      // A critical XID in the kernel log that names no GPU: it is this one if the exporter
      // lost this GPU, or if it is the node's only GPU in use.
      auto u = unplaced.find(node);
      if (u == unplaced.end()) continue;
      const XidLog* crit = nullptr;
      for (const XidLog* x : u->second) {
        if (criticalXid(x->code)) crit = x;
      }
      if (crit == nullptr) continue;
      const Series* util = gpuSeries("DCGM_FI_DEV_GPU_UTIL", node, index);
      if (util == nullptr || util->t.empty() || util->t.back() >= c_.end - 2 * step_) continue;
      code = crit->code;
      when = crit->line->time;
      lines = {crit};
    }
    Candidate c;
    Finding& f = c.f;
    f.cause = "gpu_hardware_fault";
    f.subject = {"gpu", gpuName(node, index)};
    f.onset = when;
    double s = 0.6;
    if (xid != nullptr) {
      Shift xs = upShift(gaugeOf(*xid));
      f.evidence.push_back(metric(*xid, xs, fmt::format("XID {} reported", code)));
    }
    if (!lines.empty()) {
      s += 0.1;
      f.evidence.push_back(log(*lines.front()->line));
    }
    if (const Series* rows = gpuSeries("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", node, index)) {
      double inc = rows->v.empty() ? 0 : rows->v.back() - rows->v.front();
      if (inc > 0) {
        s += 0.05;
        f.evidence.push_back(metric(*rows, upShift(gaugeOf(*rows)),
                                    fmt::format("uncorrectable remapped rows +{}", num(inc))));
      }
    }
    c.affects = gpuAffects(node, index);
    // What it broke: the work on it failing or gone.
    for (const Subject& a : c.affects) {
      if (a.kind == "workload") {
        for (const Event& ev : c_.events) {
          if (ev.object == a.name && ev.time >= when &&
              ((ev.kind == "Finished" && ev.reason == "Failed") || ev.kind == "Evicted")) {
            s += 0.15;
            f.evidence.push_back(event(ev));
            break;
          }
        }
        auto err = logs(a.name, {"CUDA error", "NCCL error", "unhandled cuda error"});
        if (!err.empty()) f.evidence.push_back(log(*err.front()));
      } else if (a.kind == "deployment") {
        if (const Series* run = engine("vllm:num_requests_running", a.name); run && hasGap(*run)) {
          s += 0.15;
          f.evidence.push_back(metric(*run, Shift{}, "the replica stopped reporting"));
        }
      }
    }
    c.strength = std::min(s, 0.95);
    f.explanation =
        fmt::format("GPU {} failed in hardware: XID {} ({}), and the work on it failed with it.",
                    f.subject.name, code, xidMeaning(code));
    f.next_steps = {
        fmt::format("Cordon {} and drain GPU {}; do not schedule on it until it is checked.", node,
                    f.subject.name),
        "Run the vendor's diagnostics (dcgmi diag -r 3) and check the kernel log; a GPU that "
        "fell off the bus or shows uncorrectable ECC usually needs a reset or replacement.",
        "Resubmit the failed work on healthy GPUs."};
    emit(std::move(c));
  }
}

auto Analysis::xidMeaning(int64_t code) -> std::string {
  switch (code) {
    case 48:
      return "double-bit ECC error";
    case 63:
    case 64:
      return "row remapping event or failure";
    case 79:
      return "GPU has fallen off the bus";
    case 92:
      return "high single-bit ECC rate";
    case 94:
      return "contained ECC error";
    case 95:
      return "uncontained ECC error";
    case 119:
    case 120:
      return "GSP error";
    case 61:
    case 62:
      return "internal micro-controller error";
    default:
      return "hardware error";
  }
}

auto Analysis::slowerSteps(const std::string& source) const -> const LogLine* {
  std::vector<std::pair<const LogLine*, double>> speed;  // higher is faster
  for (const LogLine& l : c_.logs) {
    if (l.source != source) continue;
    size_t p = l.line.find("tps: ");
    if (p != std::string::npos) {
      std::string digits;
      for (size_t i = p + 5;
           i < l.line.size() &&
           (std::isdigit(static_cast<unsigned char>(l.line[i])) || l.line[i] == ',');
           ++i) {
        if (l.line[i] != ',') digits += l.line[i];
      }
      if (!digits.empty() && digits.size() < 15) speed.emplace_back(&l, std::atof(digits.c_str()));
      continue;
    }
    p = l.line.find("step_time=");
    if (p != std::string::npos) {
      double t = std::atof(l.line.c_str() + p + 10);
      if (t > 0) speed.emplace_back(&l, 1.0 / t);
    }
  }
  if (speed.size() < 8) return nullptr;
  size_t q = speed.size() / 4;
  std::vector<double> first, last;
  for (size_t i = 0; i < q; ++i) first.push_back(speed[i].second);
  for (size_t i = speed.size() - q; i < speed.size(); ++i) last.push_back(speed[i].second);
  double a = medianOf(first), b = medianOf(last);
  if (!(a > 0) || !(b <= 0.8 * a)) return nullptr;
  return speed[speed.size() - q].first;
}

auto Analysis::nodesNvlink() -> void {
  const std::vector<XidLog> xid_logs = xidLogs();
  std::set<std::string> hosts;
  for (const Series* s : named("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL")) {
    hosts.insert(gpuKey(*s).first);
  }
  for (const Series* s : named("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")) {
    hosts.insert(gpuKey(*s).first);
  }
  for (const XidLog& x : xid_logs) {
    if (x.code == 74) hosts.insert(x.line->source);
  }
  for (const std::string& node : hosts) {
    if (node.empty()) continue;
    Candidate c;
    Finding& f = c.f;
    int crc_gpus = 0;
    int bw_gpus = 0;
    double s = 0;
    for (const Series* crc : named("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL")) {
      if (gpuKey(*crc).first != node) continue;
      Shift cs = upShift(counterRate(*crc));
      double inc = counterIncrease(*crc);
      if (cs.valid && inc > 0 && cs.high >= 3 && cs.ratio(1.0 / 30) >= 5) {
        if (crc_gpus++ < 2) {
          f.evidence.push_back(metric(
              *crc, cs, fmt::format("CRC flit errors {}/s -> {}/s", num(cs.base), num(cs.peak))));
        }
        if (f.onset == 0 || cs.onset < f.onset) f.onset = cs.onset;
      }
    }
    for (const Series* bw : named("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")) {
      auto [host, index] = gpuKey(*bw);
      if (host != node) continue;
      Shift bs = downShift(rate(*bw));
      // The GPU must still be busy: an idle GPU moves no data over NVLink either.
      const Series* util = gpuSeries("DCGM_FI_DEV_GPU_UTIL", node, index);
      bool busy = util != nullptr && !util->v.empty() && util->v.back() >= 10;
      if (bs.valid && bs.base > 0 && bs.peak <= 0.6 * bs.base && bs.high >= 3 && busy) {
        if (bw_gpus++ < 2) {
          f.evidence.push_back(metric(
              *bw, bs, fmt::format("NVLink traffic {}/s -> {}/s", num(bs.base), num(bs.peak))));
        }
      }
    }
    const XidLog* x74 = nullptr;
    for (const XidLog& x : xid_logs) {
      if (x.code == 74 && x.line->source == node) {
        x74 = &x;
        break;
      }
    }
    // XID 74 in the exporter.
    const Series* xid74 = nullptr;
    for (const Series* xs : named("DCGM_FI_DEV_XID_ERRORS")) {
      if (gpuKey(*xs).first != node) continue;
      for (double v : xs->v) {
        if (v == 74) {
          xid74 = xs;
          break;
        }
      }
    }
    if (crc_gpus > 0) s += 0.45;
    if (bw_gpus > 0) s += bw_gpus >= 2 ? 0.3 : 0.2;
    // Multi-GPU work on the node slowed down with it: its training steps take longer.
    for (const Workload& w : c_.inventory.workloads) {
      if (w.node != node || w.gpus.size() < 2 || (crc_gpus == 0 && bw_gpus == 0)) continue;
      if (const LogLine* slow = slowerSteps(w.id())) {
        s += 0.15;
        f.evidence.push_back(log(*slow));
        break;
      }
    }
    if (x74 != nullptr || xid74 != nullptr) s += 0.2;
    if (s < 0.45 - 1e-9) continue;  // two sources at least (sums of tenths are inexact)
    if (x74 != nullptr) {
      f.evidence.push_back(log(*x74->line));
      if (f.onset == 0) f.onset = x74->line->time;
    } else if (xid74 != nullptr) {
      f.evidence.push_back(metric(*xid74, Shift{}, "XID 74 (NVLink error)"));
    }
    f.cause = "nvlink_degraded";
    f.subject = {"node", node};
    c.strength = std::min(s, 0.95);
    for (const Deployment& d : c_.inventory.deployments) {
      if (d.node == node) {
        c.affects.push_back({"deployment", d.name});
        c.affects.push_back({"route", d.route});
        for (int64_t g : d.gpus) c.affects.push_back({"gpu", gpuName(node, g)});
      }
    }
    for (const Workload& w : c_.inventory.workloads) {
      if (w.node == node) c.affects.push_back({"workload", w.id()});
    }
    f.explanation = fmt::format(
        "NVLink on {} is degraded: {}{}; multi-GPU work on the node (tensor-parallel replicas, "
        "data-parallel jobs) slows down as traffic retries or falls back.",
        node,
        crc_gpus > 0 ? fmt::format("CRC errors rising on {} GPU(s)", crc_gpus)
                     : "an NVLink error was reported",
        bw_gpus > 0 ? fmt::format(", NVLink throughput down on {} GPU(s)", bw_gpus) : "");
    f.next_steps = {
        fmt::format("Check link state on {} (nvidia-smi nvlink -s / -e) and the NVSwitch "
                    "fabric manager log.",
                    node),
        fmt::format("Move multi-GPU work off {} until the link or board is serviced.", node),
        "Reseat or replace the affected board or bridge; a reset may clear a transient fault."};
    emit(std::move(c));
  }
}

}  // namespace purser::diagnose
