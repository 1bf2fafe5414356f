#include "api/fleet_views.h"

#include <utility>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "common/quantity.h"

namespace purser::api {

using fleet::Amount;
using identity::Principal;
using identity::Role;
using nlohmann::json;
using workloads::bareName;
using workloads::FleetService;
using workloads::mayAccess;
using workloads::Record;

namespace {

json resourcesJson(const fleet::Resources& r) {
  json out = json::object();
  for (const auto& [name, v] : r) out[name] = quantityText(v);
  return out;
}

std::string rfc3339(int64_t ms) {
  return ms == 0 ? std::string() : formatRfc3339(SystemTime(std::chrono::milliseconds(ms)));
}

json timeOrNull(int64_t ms) { return ms == 0 ? json(nullptr) : json(rfc3339(ms)); }

json placementsJson(const std::vector<fleet::PodPlacement>& pods) {
  json out = json::array();
  for (const auto& p : pods) {
    out.push_back({{"node", p.node}, {"gpus", p.gpus}, {"gpu_milli", p.gpu_milli}});
  }
  return out;
}

// The priority a workload is ordered by: its WorkloadPriorityClass's value when it names one.
int32_t priorityOf(const FleetService& svc, const fleet::Workload& w) {
  for (const auto& pc : svc.manifests().priority_classes) {
    if (pc.name == w.priority_class) return pc.value;
  }
  return w.priority;
}

}  // namespace

std::string quantityText(Amount milli) {
  constexpr Amount kMebi = Amount{1} << 20;
  // Whole mebibytes and up read best in binary units.
  if (milli != 0 && milli % 1000 == 0 && (milli / 1000) % kMebi == 0) {
    return Quantity::fromInt(milli / 1000, Quantity::Format::kBinarySI).toString();
  }
  return Quantity::fromMilli(milli).toString();
}

json workloadView(const FleetService& svc, const Record& r) {
  const auto shown = FleetService::shown;
  json sets = json::array();
  for (const auto& ps : r.spec.pod_sets) {
    // What it runs, and the names (not the values, which may be secrets) of its environment.
    json env_names = json::array();
    for (const auto& [name, value] : ps.env) env_names.push_back(name);
    sets.push_back({{"name", ps.name},
                    {"count", ps.count},
                    {"min_count", ps.min_count ? json(*ps.min_count) : json(nullptr)},
                    {"requests", resourcesJson(ps.requests)},
                    {"command", ps.command},
                    {"working_dir", ps.working_dir.empty() ? json(nullptr) : json(ps.working_dir)},
                    {"env", env_names}});
  }
  json pods = json::array();
  for (const auto& p : r.pods) {
    pods.push_back({{"pod_set", p.pod_set},
                    {"index", p.index},
                    {"phase", p.phase},
                    {"serving", p.serving},
                    {"exit_code", p.exit_code ? json(*p.exit_code) : json(nullptr)},
                    {"signal", p.signal ? json(*p.signal) : json(nullptr)},
                    {"reason", p.reason.empty() ? json(nullptr) : json(p.reason)},
                    {"started_at", timeOrNull(p.started_ms)},
                    {"finished_at", timeOrNull(p.finished_ms)}});
  }
  const bool live = !workloads::isTerminal(r.state);
  json out = {
      {"name", shown(r.spec.name)},
      {"namespace", shown(r.spec.namespace_)},
      {"workload", bareName(r.spec.name)},
      {"queue", r.spec.local_queue},
      {"priority", priorityOf(svc, r.spec)},
      {"priority_class",
       r.spec.priority_class.empty() ? json(nullptr) : json(r.spec.priority_class)},
      {"max_execution_seconds",
       r.spec.max_execution_seconds > 0 ? json(r.spec.max_execution_seconds) : json(nullptr)},
      {"state", r.state},
      {"reason", r.reason.empty() ? json(nullptr) : json(r.reason)},
      {"message", r.message.empty() ? json(nullptr) : json(shown(r.message))},
      {"pod_sets", sets},
      {"pods", pods},
      {"runs", r.runs},
      {"owner",
       {{"tenant", r.tenant_id}, {"team", r.team_id}, {"kind", r.owner_kind}, {"id", r.owner_id}}},
      {"submitted_at", rfc3339(r.submitted_ms)},
      {"admitted_at", r.admission ? timeOrNull(r.admitted_ms) : json(nullptr)},
      {"started_at", timeOrNull(r.started_ms)},
      {"finished_at", timeOrNull(r.finished_ms)},
      {"exit_code", r.exit_code ? json(*r.exit_code) : json(nullptr)},
      {"gpu_charged", r.charged.toString()},
      {"preemptions", r.preemptions}};
  if (r.state == "failed" && !r.log_tail.empty()) out["log_tail"] = r.log_tail;
  if (!r.external.empty()) {
    // Found on an engine (a Job a user applied): "kubernetes:namespace/name/uid".
    const size_t colon = r.external.find(':'), uid = r.external.rfind('/');
    out["found_as"] = {{"executor", r.external.substr(0, colon)},
                       {"object", r.external.substr(colon + 1, uid - colon - 1)},
                       {"uid", r.external.substr(uid + 1)}};
  }
  if (r.admission) {
    json a = json::array();
    for (const auto& ps : r.admission->pod_sets) {
      json placements = placementsJson(ps.placements);
      // What an executor sets for each pod (HAMi-core's limits for shares) while it runs.
      for (size_t i = 0; live && i < ps.placements.size(); ++i) {
        if (ps.placements[i].gpus.empty()) continue;
        json e = json::object();
        for (const auto& [k, v] : svc.admissionEnv(r, ps.name, static_cast<int64_t>(i))) {
          if (k.rfind("PURSER_", 0) != 0 && k != "JOB_COMPLETION_INDEX") e[k] = v;
        }
        placements[i]["env"] = std::move(e);
      }
      a.push_back({{"name", ps.name},
                   {"count", ps.count},
                   {"flavors", ps.flavors},
                   {"usage", resourcesJson(ps.usage)},
                   {"placements", placements}});
    }
    out["admission"] = {{"cluster_queue", r.admission->cluster_queue}, {"pod_sets", a}};
  } else {
    out["admission"] = nullptr;
  }
  if (live && !r.admission) {
    auto st = svc.engine().status(r.spec.name);
    out["cluster_queue"] = st ? json(st->cluster_queue) : json(nullptr);
    if (st && !st->reason.empty()) {
      out["reason"] = st->reason;
      out["message"] = shown(st->message);
    } else if (r.reason.empty()) {
      out["reason"] = "NotYetAttempted";
    }
  } else {
    out["cluster_queue"] = r.admission ? json(r.admission->cluster_queue) : json(nullptr);
  }
  return out;
}

json queueView(const fleet::QueueStatus& q) {
  json resources = json::array();
  for (const auto& u : q.usage) {
    resources.push_back(
        {{"flavor", u.flavor},
         {"resource", u.resource},
         {"nominal", quantityText(u.nominal)},
         {"borrowing_limit",
          u.borrowing_limit ? json(quantityText(*u.borrowing_limit)) : json(nullptr)},
         {"lending_limit", u.lending_limit ? json(quantityText(*u.lending_limit)) : json(nullptr)},
         {"usage", quantityText(u.usage)},
         {"borrowed", quantityText(u.borrowed)},
         {"lent", quantityText(u.lent)},
         {"available", quantityText(u.available)}});
  }
  return {{"name", q.name},
          {"cohort", q.cohort.empty() ? json(nullptr) : json(q.cohort)},
          {"pending", q.pending},
          {"admitted", q.admitted},
          {"resources", resources}};
}

// The structured reasons in words.
namespace {

const char* policyName(fleet::WithinClusterQueue p) {
  switch (p) {
    case fleet::WithinClusterQueue::kNever:
      return "Never";
    case fleet::WithinClusterQueue::kLowerPriority:
      return "LowerPriority";
    case fleet::WithinClusterQueue::kLowerOrNewerEqualPriority:
      return "LowerOrNewerEqualPriority";
  }
  return "Never";
}

const char* policyName(fleet::ReclaimWithinCohort p) {
  switch (p) {
    case fleet::ReclaimWithinCohort::kNever:
      return "Never";
    case fleet::ReclaimWithinCohort::kAny:
      return "Any";
    case fleet::ReclaimWithinCohort::kLowerPriority:
      return "LowerPriority";
  }
  return "Never";
}

const char* policyName(fleet::BorrowWithinCohort p) {
  return p == fleet::BorrowWithinCohort::kNever ? "Never" : "LowerPriority";
}

const char* verdictText(fleet::Explanation::FlavorTry::Verdict v) {
  using V = fleet::Explanation::FlavorTry::Verdict;
  switch (v) {
    case V::kFits:
      return "fits";
    case V::kNeedsPreemption:
      return "needs preemption or released quota";
    case V::kNeverFits:
      return "never fits";
    case V::kDoesNotMatch:
      return "does not match";
    case V::kNotCovered:
      return "not covered";
  }
  return "";
}

}  // namespace

json explanationJson(const fleet::Explanation& e) {
  using State = fleet::Explanation::State;
  using Verdict = fleet::Explanation::FlavorTry::Verdict;
  json out = {{"workload", e.workload},
              {"cluster_queue", e.cluster_queue},
              {"local_queue", e.local_queue},
              {"priority", e.priority}};
  if (e.state != State::kPending) {
    out["state"] = e.state == State::kAdmitted ? "admitted" : "finished";
    return out;
  }
  out["state"] = "pending";
  out["reason"] = e.reason.empty() ? json("NotYetAttempted") : json(e.reason);
  out["message"] = e.message;
  out["held"] = e.held;
  out["inadmissible"] = e.inadmissible;
  out["ahead_in_queue"] = e.ahead_in_queue;
  if (e.queue_stopped) {
    out["stopped"] = "the ClusterQueue is stopped (stopPolicy); nothing is admitted from it";
  }
  if (e.namespace_mismatch) {
    out["namespace_mismatch"] = fmt::format(
        "namespace \"{}\" is not selected by ClusterQueue \"{}\"", e.namespace_, e.cluster_queue);
  }
  json pod_sets = json::array();
  for (const auto& ps : e.pod_sets) {
    json flavors = json::array();
    for (const auto& t : ps.flavors) {
      json entry = {{"resource", t.resource}, {"verdict", verdictText(t.verdict)}};
      if (t.verdict != Verdict::kNotCovered) entry["flavor"] = t.flavor;
      if (t.verdict == Verdict::kNotCovered || t.verdict == Verdict::kDoesNotMatch) {
        entry["detail"] = t.detail;
      } else {
        entry["requested"] = t.requested;
        entry["nominal"] = t.nominal;
        entry["in_use"] = t.in_use;
        entry["available"] = t.available;
        entry["borrowable"] = t.borrowable;
        entry["at_most"] = t.at_most;
      }
      flavors.push_back(std::move(entry));
    }
    pod_sets.push_back({{"name", ps.name},
                        {"count", ps.count},
                        {"min_count", ps.min_count ? json(*ps.min_count) : json(nullptr)},
                        {"flavors", std::move(flavors)}});
  }
  out["pod_sets"] = std::move(pod_sets);
  json preemption = {{"within_cluster_queue", policyName(e.policy.within_cluster_queue)},
                     {"reclaim_within_cohort", policyName(e.policy.reclaim_within_cohort)},
                     {"borrow_within_cohort", policyName(e.policy.borrow_within_cohort)}};
  if (e.tried) {
    using Mode = fleet::Explanation::Mode;
    preemption["mode"] = e.mode == Mode::kFit       ? "fit"
                         : e.mode == Mode::kPreempt ? "preempt"
                                                    : "no fit";
    json victims = json::array();
    for (const auto& v : e.would_preempt) {
      victims.push_back({{"workload", v.workload},
                         {"cluster_queue", v.cluster_queue},
                         {"priority", v.priority},
                         {"reason", v.reason}});
    }
    preemption["would_preempt"] = std::move(victims);
    if (e.mode == Mode::kPreempt && e.would_preempt.empty()) {
      preemption["why_not"] = fmt::format(
          "no set of workloads this queue's policy lets it preempt frees enough quota "
          "(withinClusterQueue {}, reclaimWithinCohort {}, borrowWithinCohort {})",
          policyName(e.policy.within_cluster_queue), policyName(e.policy.reclaim_within_cohort),
          policyName(e.policy.borrow_within_cohort));
    }
    if (!e.assignment.empty()) preemption["assignment"] = e.assignment;
  }
  out["preemption"] = std::move(preemption);
  return out;
}

json whySentences(const json& why) {
  json out = json::array();
  const std::string cq = why.value("cluster_queue", "");
  const std::string state = why.value("state", "");
  if (state == "admitted") {
    out.push_back(fmt::format("admitted in ClusterQueue {}", cq));
    return out;
  }
  if (why.contains("budget")) out.push_back(why["budget"].get<std::string>());
  if (why.contains("stopped")) out.push_back(why["stopped"].get<std::string>());
  if (why.contains("namespace_mismatch")) {
    out.push_back(why["namespace_mismatch"].get<std::string>());
  }
  const std::string reason = why.value("reason", "");
  const std::string message = why.value("message", "");
  if (!message.empty()) out.push_back(fmt::format("last attempt: {} — {}", reason, message));
  if (why.value("ahead_in_queue", 0) > 0) {
    out.push_back(fmt::format("{} workload(s) are ahead of it in ClusterQueue {}",
                              why["ahead_in_queue"].get<int64_t>(), cq));
  }
  for (const auto& ps : why.value("pod_sets", json::array())) {
    for (const auto& f : ps.value("flavors", json::array())) {
      const std::string verdict = f.value("verdict", "");
      const std::string resource = f.value("resource", "");
      if (!f.contains("requested")) {
        out.push_back(fmt::format(
            "pod set {}: {}{}: {}", ps.value("name", ""),
            f.contains("flavor") ? "flavor " + f.value("flavor", "") + ", " : std::string(),
            resource, f.value("detail", verdict)));
        continue;
      }
      out.push_back(fmt::format(
          "pod set {} in flavor {}: asks for {} {}; ClusterQueue {} has {} in use of its nominal "
          "{}, can use {} now ({} of it borrowed from its cohort) and at most {} ever — {}",
          ps.value("name", ""), f.value("flavor", ""), quantityText(f["requested"].get<Amount>()),
          resource, cq, quantityText(f["in_use"].get<Amount>()),
          quantityText(f["nominal"].get<Amount>()), quantityText(f["available"].get<Amount>()),
          quantityText(f["borrowable"].get<Amount>()), quantityText(f["at_most"].get<Amount>()),
          verdict));
    }
  }
  const json& p = why.value("preemption", json::object());
  if (p.contains("would_preempt") && !p["would_preempt"].empty()) {
    std::string victims;
    for (const auto& v : p["would_preempt"]) {
      victims += fmt::format("{}{} ({}, priority {}, {})", victims.empty() ? "" : ", ",
                             v.value("workload", ""), v.value("cluster_queue", ""),
                             v.value("priority", 0), v.value("reason", ""));
    }
    out.push_back("to make room it would preempt: " + victims);
  }
  if (p.contains("why_not")) out.push_back("preemption cannot help: " + p.value("why_not", ""));
  if (why.value("ahead_in_queue", 0) == 0 && p.value("mode", "") == "fit" &&
      !why.contains("budget")) {
    out.push_back("it fits now and will be admitted at the next scheduling pass");
  }
  return out;
}

// The inventory and what is placed on it: each GPU's shares as "team/workload" with its
// tenant's name; another team's workloads show as shares without either.
json nodesView(const FleetService& svc, const identity::Directory& directory,
               const Principal& who) {
  const auto shown = FleetService::shown;
  json items = json::array();
  if (svc.placer() != nullptr) {
    for (const auto& v : svc.placer()->view()) {
      json gpus = json::array();
      for (const auto& g : v.gpus) {
        json shares = json::array();
        for (const auto& sh : g.shares) {
          const Record* owner = svc.find(sh.owner);
          const bool named = owner != nullptr && mayAccess(who, owner->tenant_id, owner->team_id);
          json share = {{"workload", named ? json(shown(sh.owner)) : json(nullptr)},
                        {"tenant", nullptr},
                        {"gpu_milli", sh.milli}};
          if (named) {
            if (auto t = directory.tenant(owner->tenant_id)) share["tenant"] = t->name;
          }
          shares.push_back(std::move(share));
        }
        // How busy it is now (DCGM's DCGM_FI_DEV_GPU_UTIL, percent), when its exporter says.
        const auto reading = svc.gpuReading(v.node->name, g.gpu->index);
        gpus.push_back({{"index", g.gpu->index},
                        {"utilisation", reading ? json(reading->util_percent) : json(nullptr)},
                        {"utilisation_at", reading ? json(rfc3339(reading->at_ms)) : json(nullptr)},
                        {"uuid", g.gpu->uuid.empty() ? json(nullptr) : json(g.gpu->uuid)},
                        {"model", g.gpu->model},
                        {"memory_mib", g.gpu->memory_mib},
                        {"numa", g.gpu->numa},
                        {"nvlink_domain",
                         g.gpu->nvlink_domain >= 0 ? json(g.gpu->nvlink_domain) : json(nullptr)},
                        {"used_milli", g.used_milli},
                        {"cores_used", g.cores_used},
                        {"shares", shares}});
      }
      const fleet::InventoryNode& n = *v.node;
      // The flavors whose node labels the node carries.
      json flavors = json::array();
      for (const auto& f : svc.manifests().flavors) {
        if (fleet::carriesLabels(n, f.node_labels)) flavors.push_back(f.name);
      }
      int64_t allocated = 0;
      for (const auto& g : v.gpus) allocated += g.used_milli;
      json taints = json::array();
      for (const auto& t : n.taints) {
        taints.push_back({{"key", t.key}, {"value", t.value}, {"effect", t.effect}});
      }
      items.push_back({{"name", n.name},
                       {"flavors", flavors},
                       {"gpu_model", n.gpus.empty() ? json(nullptr) : json(n.gpus[0].model)},
                       {"gpu_count", n.gpus.size()},
                       {"gpu_allocated", quantityText(allocated)},
                       {"labels", n.labels},
                       {"taints", taints},
                       {"rack", n.rack.empty() ? json(nullptr) : json(n.rack)},
                       {"block", n.block.empty() ? json(nullptr) : json(n.block)},
                       {"cpu", quantityText(n.cpu_milli)},
                       {"cpu_used", quantityText(v.cpu_used_milli)},
                       {"memory_mib", n.memory_mib},
                       {"memory_used_mib", v.memory_used_mib},
                       {"pods", v.pods},
                       {"gpus", gpus}});
    }
  }
  return {{"data", items},
          {"placement", svc.placer() != nullptr},
          {"policy", fleet::placement::policyName(svc.options().policy)}};
}

std::vector<LiveGpuUse> liveGpuUse(const FleetService& svc, const Principal& who, int64_t now_ms) {
  std::vector<LiveGpuUse> out;
  for (const auto& [name, r] : svc.records()) {
    auto use = svc.utilisationOf(name);
    if (!use || !r.admission) continue;
    LiveGpuUse l;
    l.name = name;
    l.tenant_id = r.tenant_id;
    l.team_id = r.team_id;
    l.state = r.state;
    l.visible = mayAccess(who, r.tenant_id, r.team_id);
    l.gpus = json::array();
    Amount gpu_milli = 0;
    for (const auto& ps : r.admission->pod_sets) {
      // What metering charges: GPUs of pod sets admitted in a GPU flavor.
      auto usage = ps.usage.find("nvidia.com/gpu");
      if (usage != ps.usage.end() && usage->second > 0 && ps.flavors.count("nvidia.com/gpu") != 0) {
        gpu_milli += usage->second;
      }
      for (const auto& p : ps.placements) {
        for (int gpu : p.gpus) {
          const auto reading = svc.gpuReading(p.node, gpu);
          l.gpus.push_back(
              {{"node", p.node},
               {"index", gpu},
               {"gpu_milli", p.gpu_milli},
               {"utilisation", reading ? json(reading->util_percent) : json(nullptr)}});
        }
      }
    }
    const int64_t elapsed = std::max<int64_t>(0, now_ms - r.metered_until_ms);
    l.unmetered_gpu_ms = gpu_milli * elapsed / 1000;
    l.use = *use;
    out.push_back(std::move(l));
  }
  return out;
}

json utilisationView(const std::vector<LiveGpuUse>& live,
                     const std::vector<workloads::UtilisationRow>& stored,
                     const identity::Directory& directory, const Principal& who, int64_t from_ms) {
  struct Entry {
    std::string tenant_id;
    bool visible = false;
    const LiveGpuUse* live = nullptr;
    double gpu_ms = 0, placed_ms = 0, observed_ms = 0, busy_ms = 0;
  };
  std::map<std::string, Entry> entries;
  for (const auto& row : stored) {
    const bool visible = mayAccess(who, row.tenant_id, row.team_id);
    Entry& e = entries[row.workload];
    e.tenant_id = row.tenant_id;
    e.visible = visible;
    e.gpu_ms += static_cast<double>(row.gpu_ms);
    e.placed_ms += static_cast<double>(row.placed_gpu_ms);
    e.observed_ms += static_cast<double>(row.observed_gpu_ms);
    e.busy_ms += static_cast<double>(row.busy_gpu_ms);
  }
  for (const auto& l : live) {
    Entry& e = entries[l.name];
    e.tenant_id = l.tenant_id;
    e.visible = l.visible;
    e.live = &l;
    // Not yet recorded: since its last metering (milli-GPU-milliseconds in `use`).
    e.gpu_ms += static_cast<double>(l.unmetered_gpu_ms);
    e.placed_ms += static_cast<double>(l.use.unmetered.placed) / 1000.0;
    e.observed_ms += static_cast<double>(l.use.unmetered.observed) / 1000.0;
    e.busy_ms += l.use.unmetered.busy / 1000.0;
  }
  const auto hours = [](double ms) { return std::round(ms / 3'600'000.0 * 1e6) / 1e6; };
  // To four decimals (a hundredth of a percent): more would be noise.
  const auto efficiency = [](double busy, double observed) {
    if (observed <= 0) return json(nullptr);
    return json(std::round(std::clamp(busy / observed, 0.0, 1.0) * 1e4) / 1e4);
  };
  std::vector<std::pair<double, json>> rows;
  double total_gpu = 0, total_observed = 0, total_busy = 0;
  for (const auto& [name, e] : entries) {
    // Another team's workload is shown (unnamed) only while it holds GPUs, as on the node map.
    if (!e.visible && e.live == nullptr) continue;
    json item = {{"workload", e.visible ? json(FleetService::shown(name)) : json(nullptr)},
                 {"tenant", nullptr},
                 {"live", e.live != nullptr},
                 {"state", e.live ? json(e.live->state) : json(nullptr)},
                 {"gpus", e.live ? e.live->gpus : json::array()},
                 {"allocated_gpu_hours", hours(e.gpu_ms)},
                 {"placed_gpu_hours", hours(e.placed_ms)},
                 {"observed_gpu_hours", hours(e.observed_ms)},
                 {"busy_gpu_hours", hours(std::min(e.busy_ms, e.observed_ms))},
                 {"efficiency", efficiency(e.busy_ms, e.observed_ms)},
                 {"recent_utilisation", nullptr},
                 {"idle", false}};
    if (e.visible) {
      if (auto t = directory.tenant(e.tenant_id)) item["tenant"] = t->name;
      total_gpu += e.gpu_ms;
      total_observed += e.observed_ms;
      total_busy += std::min(e.busy_ms, e.observed_ms);
    }
    if (e.live) {
      if (auto avg = e.live->use.recent.averagePercent()) {
        // Down to a tenth, so that an idle one never reads as 10.0.
        item["recent_utilisation"] = std::floor(*avg * 10) / 10;
      }
      item["idle"] = e.live->use.idle;
    }
    rows.emplace_back(e.gpu_ms, std::move(item));
  }
  // Allocated but idle first, then by GPU time; the caller's own before other teams'.
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    const bool ai = a.second["idle"].template get<bool>();
    const bool bi = b.second["idle"].template get<bool>();
    if (ai != bi) return ai;
    const bool an = !a.second["workload"].is_null();
    const bool bn = !b.second["workload"].is_null();
    if (an != bn) return an;
    return a.first > b.first;
  });
  json data = json::array();
  for (auto& [ms, item] : rows) data.push_back(std::move(item));
  return {
      {"since", rfc3339(from_ms)},
      {"idle_rule",
       {{"window_s", fleet::kIdleWindowMs / 1000}, {"below_percent", fleet::kIdleBelowPercent}}},
      {"data", std::move(data)},
      {"totals",
       {{"allocated_gpu_hours", hours(total_gpu)},
        {"observed_gpu_hours", hours(total_observed)},
        {"busy_gpu_hours", hours(total_busy)},
        {"efficiency", efficiency(total_busy, total_observed)}}}};
}

}  // namespace purser::api
