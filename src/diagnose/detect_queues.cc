// Detectors of the fleet's queues: quota exhausted, preemption churn, GPUs allocated and idle,
// workloads out of memory. See analysis.h.
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

void Analysis::fleetQueues() {
  queues();
  idle();
  oomWorkloads();
}

auto Analysis::oomWorkloads() -> void {
  for (const Workload& w : c_.inventory.workloads) {
    oomObject({"workload", w.id()}, w.id(), w.node, w.gpus, {{"queue", w.queue}});
  }
}

auto Analysis::queues() -> void {
  std::set<std::string> cqs;
  for (const Series* s : named("purser_fleet_quota_used")) {
    if (auto q = s->label("cluster_queue")) cqs.insert(std::string(*q));
  }
  for (const Series* s : named("purser_fleet_pending_workloads")) {
    if (auto q = s->label("cluster_queue")) cqs.insert(std::string(*q));
  }
  for (const Workload& w : c_.inventory.workloads) cqs.insert(w.queue);
  for (const std::string& q : cqs) {
    if (q.empty()) continue;
    quota(q);
    churn(q);
  }
}

auto Analysis::queueOf(const std::string& object) const -> std::string {
  auto it = workloads_.find(object);
  return it == workloads_.end() ? "" : it->second->queue;
}

auto Analysis::quota(const std::string& q) -> void {
  const Series* pending = one("purser_fleet_pending_workloads", {{"cluster_queue", q}});
  bool waiting = pending != nullptr && maxOf(pending->v) >= 1;
  // Quota used at nominal for some flavor and resource.
  const Series* at_used = nullptr;
  const Series* at_nominal = nullptr;
  int at_samples = 0;
  for (const Series* used : select("purser_fleet_quota_used", {{"cluster_queue", q}})) {
    const Series* nominal =
        one("purser_fleet_quota_nominal", {{"cluster_queue", q},
                                           {"flavor", used->label("flavor").value_or("")},
                                           {"resource", used->label("resource").value_or("")}});
    if (nominal == nullptr) continue;
    int n = 0;
    for (size_t i = 0; i < used->v.size() && i < nominal->v.size(); ++i) {
      if (nominal->v[i] > 0 && used->v[i] >= nominal->v[i]) ++n;
    }
    if (n > at_samples) {
      at_samples = n;
      at_used = used;
      at_nominal = nominal;
    }
  }
  std::vector<const Event*> pend_events;
  for (const Event& ev : c_.events) {
    if (ev.kind == "Pending" && queueOf(ev.object) == q &&
        (contains(ev.message, "quota") || contains(ev.message, "insufficient"))) {
      pend_events.push_back(&ev);
    }
  }
  int never_admitted = 0;
  for (const Workload& w : c_.inventory.workloads) {
    if (w.queue == q && w.node.empty()) ++never_admitted;
  }
  if (!waiting && pend_events.empty()) return;
  if (at_samples < 3 && pend_events.empty()) return;
  Candidate c;
  Finding& f = c.f;
  f.cause = "quota_exhausted";
  f.subject = {"queue", q};
  double s = 0.2;
  if (at_samples >= 3) {
    s += 0.35;
    f.evidence.push_back(metric(
        *at_used, upShift(gaugeOf(*at_used)),
        fmt::format("{} of {} {} in use ({} nominal) for {} samples", num(at_used->v.back()),
                    at_used->label("resource").value_or(""), at_used->label("flavor").value_or(""),
                    num(at_nominal->v.back()), at_samples)));
    f.evidence.push_back(metric(*at_nominal, Shift{}, "nominal quota"));
  }
  if (waiting) {
    s += 0.15;
    Shift ps = upShift(gaugeOf(*pending));
    f.evidence.push_back(
        metric(*pending, ps,
               fmt::format("pending workloads {} -> {}", num(ps.base), num(maxOf(pending->v)))));
    f.onset = ps.onset;
  }
  if (!pend_events.empty()) {
    s += 0.2;
    f.evidence.push_back(event(*pend_events.front()));
    if (pend_events.size() > 1) f.evidence.push_back(event(*pend_events.back()));
    if (f.onset == 0 || pend_events.front()->time < f.onset) f.onset = pend_events.front()->time;
  }
  if (never_admitted > 0) s += 0.05;
  // Pending that ended in an admission within minutes (a reclaim through preemption, a job
  // finishing) is the queue working, not a queue out of quota.
  int resolved = 0;
  for (const Event* p : pend_events) {
    for (const Event& ev : c_.events) {
      if (ev.object == p->object && ev.kind == "Admitted" && ev.time >= p->time &&
          ev.time <= p->time + 3 * kMinute) {
        ++resolved;
        break;
      }
    }
  }
  if (!pend_events.empty() && resolved == static_cast<int>(pend_events.size()) &&
      never_admitted == 0) {
    s *= 0.5;
  }
  for (const Workload& w : c_.inventory.workloads) {
    if (w.queue == q) c.affects.push_back({"workload", w.id()});
  }
  c.affects.push_back({"team", teamOfQueue(q)});
  c.strength = std::min(s, 0.9);
  f.explanation = fmt::format(
      "ClusterQueue {} has used its whole nominal quota{} and cannot borrow enough from its "
      "cohort, so its new workloads stay Pending until running ones finish.",
      q,
      at_used != nullptr
          ? fmt::format(" ({} of {})", num(at_used->v.back()), num(at_nominal->v.back()))
          : "");
  f.next_steps = {
      fmt::format("See what holds {}'s quota (purser fleet workloads --queue {}) and whether "
                  "any of it is idle.",
                  q, q),
      "Raise the nominal quota or the borrowing limit, or add the queue to a cohort with "
      "unused capacity.",
      "Lower the priority of less urgent pending work so the important job is admitted first."};
  emit(std::move(c));
}

auto Analysis::teamOfQueue(const std::string& q) const -> std::string {
  for (const Workload& w : c_.inventory.workloads) {
    if (w.queue == q) return w.ns;
  }
  return "";
}

auto Analysis::churn(const std::string& q) -> void {
  std::map<std::string, std::vector<const Event*>> preempted;
  std::vector<const Event*> readmitted;
  for (const Event& ev : c_.events) {
    std::string wq = queueOf(ev.object);
    if (wq.empty() && contains(ev.message, "ClusterQueue " + q)) wq = q;
    if (wq != q) continue;
    if (ev.kind == "Preempted") preempted[ev.object].push_back(&ev);
    if (ev.kind == "Admitted") readmitted.push_back(&ev);
  }
  size_t total = 0;
  size_t most = 0;
  std::string worst;
  for (const auto& [obj, evs] : preempted) {
    total += evs.size();
    if (evs.size() > most) {
      most = evs.size();
      worst = obj;
    }
  }
  if (total < 2 || (most < 2 && total < 3)) return;
  Candidate c;
  Finding& f = c.f;
  f.cause = "preemption_churn";
  f.subject = {"queue", q};
  const auto& evs = preempted[worst];
  f.onset = evs.front()->time;
  f.evidence.push_back(event(*evs.front()));
  f.evidence.push_back(event(*evs.back()));
  for (const Event* a : readmitted) {
    if (a->object == worst && a->time > evs.front()->time) {
      f.evidence.push_back(event(*a));
      break;
    }
  }
  auto restarts = logs(worst, {"Loading checkpoint", "Resuming from", "restored from"});
  if (!restarts.empty()) f.evidence.push_back(log(*restarts.back()));
  c.strength = std::min(0.5 + 0.1 * static_cast<double>(total - 1), 0.9);
  for (const auto& [obj, e] : preempted) c.affects.push_back({"workload", obj});
  c.affects.push_back({"team", teamOfQueue(q)});
  std::string reason = evs.front()->reason;
  f.explanation = fmt::format(
      "Workloads of ClusterQueue {} keep being preempted and readmitted: {} was preempted {} "
      "times in the window{}, so it restarts from checkpoints and makes little progress.",
      q, worst, most, reason.empty() ? "" : fmt::format(" ({})", reason));
  f.next_steps = {
      "Check who reclaims the quota: the preempting workloads' queue and its nominal quota in "
      "the cohort.",
      fmt::format("Give {} enough nominal quota for its steady work so it stops borrowing, or "
                  "set a higher priority for the job that keeps losing.",
                  q),
      "Consider waitForPodsReady or a minimum runtime before preemption to stop the churn."};
  emit(std::move(c));
}

auto Analysis::idle() -> void {
  for (const Workload& w : c_.inventory.workloads) {
    if (w.node.empty() || w.gpus.empty()) continue;
    // Finished during the window: its GPUs going quiet is expected.
    bool finished = false;
    TimeMs admitted = 0;
    for (const Event& ev : c_.events) {
      if (ev.object != w.id()) continue;
      if (ev.kind == "Finished" || ev.kind == "Evicted" || ev.kind == "Preempted") {
        finished = true;
      }
      if (ev.kind == "Admitted") admitted = ev.time;
    }
    if (finished) continue;
    int idle_gpus = 0;
    const Series* shown = nullptr;
    double worst_max = 0;
    for (int64_t g : w.gpus) {
      const Series* util = gpuSeries("DCGM_FI_DEV_GPU_UTIL", w.node, g);
      if (util == nullptr) continue;
      // Only the time since it was admitted, less a few minutes to start.
      std::vector<double> vals;
      for (size_t i = 0; i < util->t.size(); ++i) {
        if (admitted == 0 || util->t[i] >= admitted + 5 * kMinute) vals.push_back(util->v[i]);
      }
      if (vals.size() < 10) continue;
      double mx = maxOf(vals);
      double med = medianOf(vals);
      if (med <= 2 && mx <= 10) {
        ++idle_gpus;
        if (shown == nullptr) shown = util;
        worst_max = std::max(worst_max, mx);
      }
    }
    if (idle_gpus == 0 || idle_gpus * 2 < static_cast<int>(w.gpus.size())) continue;
    // Sharing a GPU with a busy replica is not idling; the inventory says whose GPU it is.
    Candidate c;
    Finding& f = c.f;
    f.cause = "idle_allocation";
    f.subject = {"workload", w.id()};
    f.onset = c_.start;
    f.evidence.push_back(
        metric(*shown, upShift(gaugeOf(*shown)),
               fmt::format("GPU utilisation at most {} % over the window", num(worst_max))));
    for (int64_t g : w.gpus) {
      const Series* fb = gpuSeries("DCGM_FI_DEV_FB_USED", w.node, g);
      if (fb != nullptr) {
        f.evidence.push_back(
            metric(*fb, Shift{}, fmt::format("{} MiB of memory held", num(medianOf(fb->v)))));
        break;
      }
    }
    if (f.evidence.size() < 2 && w.gpus.size() > 1) {
      for (int64_t g : w.gpus) {
        const Series* util = gpuSeries("DCGM_FI_DEV_GPU_UTIL", w.node, g);
        if (util != nullptr && util != shown) {
          f.evidence.push_back(metric(*util, Shift{}, "also idle"));
          break;
        }
      }
    }
    c.strength = std::min(0.55 + 0.05 * static_cast<double>(idle_gpus), 0.85);
    c.affects = {{"queue", w.queue}, {"team", w.ns}};
    for (int64_t g : w.gpus) c.affects.push_back({"gpu", gpuName(w.node, g)});
    f.explanation = fmt::format(
        "{} holds {} GPU(s) on {} that stayed idle (utilisation at most {} %) for the whole "
        "window, while the quota they count against is unavailable to others.",
        w.id(), w.gpus.size(), w.node, num(worst_max));
    f.next_steps = {
        fmt::format("Ask the owner of {} whether it is still needed (an idle notebook or a "
                    "hung job).",
                    w.id()),
        "Stop it, or set an idle timeout for interactive workloads in this queue.",
        "If it waits on data or a dependency, check its logs for the stall."};
    emit(std::move(c));
  }
}

}  // namespace purser::diagnose
