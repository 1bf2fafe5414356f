#include "workloads/record.h"

#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <map>

#include "common/json.h"

namespace purser::workloads {

using fleet::Amount;
using fleet::Workload;
using nlohmann::json;

bool isTerminal(const std::string& state) { return state == "succeeded" || state == "failed"; }

bool holdsQuota(const std::string& state) {
  return state == "admitted" || state == "running" || state == "unknown";
}

namespace {

json placementsJson(const std::vector<fleet::PodPlacement>& pods) {
  json out = json::array();
  for (const auto& p : pods) {
    out.push_back({{"node", p.node}, {"gpus", p.gpus}, {"gpu_milli", p.gpu_milli}});
  }
  return out;
}

json admissionJson(const fleet::Admission& a) {
  json sets = json::array();
  for (const auto& ps : a.pod_sets) {
    json usage = json::object();
    for (const auto& [r, v] : ps.usage) usage[r] = v;
    sets.push_back({{"name", ps.name},
                    {"count", ps.count},
                    {"flavors", ps.flavors},
                    {"usage", usage},
                    {"placements", placementsJson(ps.placements)}});
  }
  return {{"cluster_queue", a.cluster_queue}, {"pod_sets", sets}};
}

fleet::Admission admissionFrom(const json& j) {
  fleet::Admission a;
  a.cluster_queue = j.at("cluster_queue").get<std::string>();
  for (const auto& ps : j.at("pod_sets")) {
    fleet::PodSetAssignment out;
    out.name = ps.at("name").get<std::string>();
    out.count = ps.at("count").get<int64_t>();
    out.flavors = ps.at("flavors").get<std::map<std::string, std::string>>();
    out.usage = ps.at("usage").get<std::map<std::string, Amount>>();
    if (ps.contains("placements")) {
      for (const auto& p : ps.at("placements")) {
        out.placements.push_back({p.at("node").get<std::string>(),
                                  p.at("gpus").get<std::vector<int>>(),
                                  p.at("gpu_milli").get<int64_t>()});
      }
    }
    a.pod_sets.push_back(std::move(out));
  }
  return a;
}

json specJson(const Workload& w) {
  json sets = json::array();
  for (const auto& ps : w.pod_sets) {
    json tolerations = json::array();
    for (const auto& t : ps.tolerations) {
      tolerations.push_back(
          {{"key", t.key}, {"op", t.op}, {"value", t.value}, {"effect", t.effect}});
    }
    json requests = json::object();
    for (const auto& [r, v] : ps.requests) requests[r] = v;
    sets.push_back({{"name", ps.name},
                    {"count", ps.count},
                    {"min_count", ps.min_count ? json(*ps.min_count) : json(nullptr)},
                    {"requests", requests},
                    {"tolerations", tolerations},
                    {"node_selector", ps.node_selector},
                    {"topology", ps.topology.level.empty()
                                     ? json(nullptr)
                                     : json{{ps.topology.required ? "required" : "preferred",
                                             ps.topology.level}}},
                    {"use_gpu_types", ps.use_gpu_types},
                    {"nouse_gpu_types", ps.nouse_gpu_types},
                    {"command", ps.command},
                    {"limits", ps.limits},
                    {"working_dir", ps.working_dir},
                    {"env", ps.env},
                    {"image", ps.image}});
  }
  return {{"name", w.name},
          {"namespace", w.namespace_},
          {"queue", w.local_queue},
          {"priority", w.priority},
          {"priority_class", w.priority_class},
          {"created_ms", w.created_ms},
          {"uid", w.uid},
          {"pod_sets", sets},
          {"queued_ms", w.queued_ms ? json(*w.queued_ms) : json(nullptr)},
          {"max_execution_seconds", w.max_execution_seconds},
          {"serve", w.serve ? json{{"route", w.serve->route},
                                   {"port", w.serve->port},
                                   {"api", w.serve->api},
                                   {"model", w.serve->model},
                                   {"health", w.serve->health},
                                   {"metrics", w.serve->metrics},
                                   {"engine", w.serve->engine}}
                            : json(nullptr)}};
}

Workload specFrom(const json& j) {
  Workload w;
  w.name = j.at("name").get<std::string>();
  w.namespace_ = j.at("namespace").get<std::string>();
  w.local_queue = j.at("queue").get<std::string>();
  w.priority = j.at("priority").get<int32_t>();
  w.priority_class = j.at("priority_class").get<std::string>();
  w.created_ms = j.at("created_ms").get<int64_t>();
  w.uid = j.at("uid").get<std::string>();
  if (j.contains("queued_ms") && !j.at("queued_ms").is_null()) {
    w.queued_ms = j.at("queued_ms").get<int64_t>();
  }
  w.max_execution_seconds = j.value("max_execution_seconds", int64_t{0});
  if (j.contains("serve") && j.at("serve").is_object()) {
    const json& s = j.at("serve");
    w.serve = fleet::ServeSpec{s.at("route").get<std::string>(), s.at("port").get<int64_t>(),
                               s.at("api").get<std::string>(), s.at("model").get<std::string>(),
                               s.at("health").get<std::string>()};
    // Records written before these were known scrape the default.
    w.serve->metrics = s.value("metrics", std::string("/metrics"));
    w.serve->engine = s.value("engine", std::string("vllm"));
  }
  for (const auto& ps : j.at("pod_sets")) {
    fleet::PodSet out;
    out.name = ps.at("name").get<std::string>();
    out.count = ps.at("count").get<int64_t>();
    if (!ps.at("min_count").is_null()) out.min_count = ps.at("min_count").get<int64_t>();
    out.requests = ps.at("requests").get<std::map<std::string, Amount>>();
    for (const auto& t : ps.at("tolerations")) {
      out.tolerations.push_back({t.at("key").get<std::string>(), t.at("op").get<std::string>(),
                                 t.at("value").get<std::string>(),
                                 t.at("effect").get<std::string>()});
    }
    out.node_selector = ps.at("node_selector").get<std::map<std::string, std::string>>();
    if (ps.contains("topology") && ps.at("topology").is_object()) {
      for (const auto& [kind, level] : ps.at("topology").items()) {
        out.topology = {level.get<std::string>(), kind == "required"};
      }
    }
    if (ps.contains("use_gpu_types")) {
      out.use_gpu_types = ps.at("use_gpu_types").get<std::vector<std::string>>();
    }
    if (ps.contains("nouse_gpu_types")) {
      out.nouse_gpu_types = ps.at("nouse_gpu_types").get<std::vector<std::string>>();
    }
    // Records written before workloads carried what they run have none of these.
    if (ps.contains("command")) out.command = ps.at("command").get<std::vector<std::string>>();
    if (ps.contains("working_dir")) out.working_dir = ps.at("working_dir").get<std::string>();
    if (ps.contains("limits")) out.limits = ps.at("limits").get<std::map<std::string, Amount>>();
    if (ps.contains("env")) out.env = ps.at("env").get<std::map<std::string, std::string>>();
    if (ps.contains("image")) out.image = ps.at("image").get<std::string>();
    w.pod_sets.push_back(std::move(out));
  }
  return w;
}

json podJson(const PodRun& p) {
  return {{"pod_set", p.pod_set},
          {"index", p.index},
          {"executor", p.executor},
          {"handle", p.handle},
          {"phase", p.phase},
          {"exit_code", p.exit_code ? json(*p.exit_code) : json(nullptr)},
          {"signal", p.signal ? json(*p.signal) : json(nullptr)},
          {"reason", p.reason},
          {"started_ms", p.started_ms},
          {"finished_ms", p.finished_ms},
          {"pid", p.pid},
          {"pid_start", p.pid_start}};
}

PodRun podFrom(const json& j) {
  PodRun p;
  p.pod_set = j.at("pod_set").get<std::string>();
  p.index = j.at("index").get<int64_t>();
  p.executor = j.value("executor", "local");
  p.handle = j.at("handle").get<std::string>();
  p.phase = j.at("phase").get<std::string>();
  if (!j.at("exit_code").is_null()) p.exit_code = j.at("exit_code").get<int>();
  if (!j.at("signal").is_null()) p.signal = j.at("signal").get<int>();
  if (j.contains("reason")) p.reason = j.at("reason").get<std::string>();
  p.started_ms = j.at("started_ms").get<int64_t>();
  p.finished_ms = j.at("finished_ms").get<int64_t>();
  p.pid = j.value("pid", int64_t{0});
  p.pid_start = j.value("pid_start", int64_t{0});
  return p;
}

}  // namespace

std::string recordText(const Record& r) {
  json pods = json::array();
  for (const auto& p : r.pods) pods.push_back(podJson(p));
  return writeJson(json{{"spec", specJson(r.spec)},
                        {"seq", r.seq},
                        {"tenant_id", r.tenant_id},
                        {"team_id", r.team_id},
                        {"owner_kind", r.owner_kind},
                        {"owner_id", r.owner_id},
                        {"key_id", r.key_id},
                        {"external", r.external},
                        {"manifest", r.manifest},
                        {"state", r.state},
                        {"reason", r.reason},
                        {"message", r.message},
                        {"admission", r.admission ? admissionJson(*r.admission) : json(nullptr)},
                        {"submitted_ms", r.submitted_ms},
                        {"admitted_ms", r.admitted_ms},
                        {"started_ms", r.started_ms},
                        {"metered_until_ms", r.metered_until_ms},
                        {"finished_ms", r.finished_ms},
                        {"exit_code", r.exit_code ? json(*r.exit_code) : json(nullptr)},
                        {"log_tail", r.log_tail},
                        {"pods", pods},
                        {"runs", r.runs},
                        {"launching", r.launching},
                        {"charged_nanos", r.charged.nanos()},
                        {"preemptions", r.preemptions},
                        {"hold", r.hold},
                        {"version", r.version}});
}

Result<Record> recordFrom(const std::string& text) {
  const json j = parseJsonOrDiscarded(text);
  if (!j.is_object()) return fail(Error(ErrorCode::kDataLoss, "a workload record is unreadable"));
  try {
    Record r;
    r.spec = specFrom(j.at("spec"));
    r.seq = j.at("seq").get<int64_t>();
    r.tenant_id = j.at("tenant_id").get<std::string>();
    r.team_id = j.at("team_id").get<std::string>();
    r.owner_kind = j.at("owner_kind").get<std::string>();
    r.owner_id = j.at("owner_id").get<std::string>();
    r.key_id = j.at("key_id").get<std::string>();
    r.external = j.value("external", "");
    r.manifest = j.value("manifest", "");
    r.state = j.at("state").get<std::string>();
    r.reason = j.value("reason", "");
    r.message = j.value("message", "");
    // Records written before workloads ran: "finished" was a deletion.
    if (r.state == "finished") {
      r.state = "failed";
      if (r.reason.empty()) r.reason = "Deleted";
    }
    if (!j.at("admission").is_null()) r.admission = admissionFrom(j.at("admission"));
    r.submitted_ms = j.at("submitted_ms").get<int64_t>();
    r.admitted_ms = j.at("admitted_ms").get<int64_t>();
    r.started_ms = j.value("started_ms", int64_t{0});
    r.metered_until_ms = j.at("metered_until_ms").get<int64_t>();
    r.finished_ms = j.at("finished_ms").get<int64_t>();
    if (j.contains("exit_code") && !j.at("exit_code").is_null()) {
      r.exit_code = j.at("exit_code").get<int>();
    }
    r.log_tail = j.value("log_tail", "");
    if (j.contains("pods")) {
      for (const auto& p : j.at("pods")) r.pods.push_back(podFrom(p));
    }
    r.runs = j.value("runs", int64_t{0});
    r.launching = j.value("launching", false);
    r.charged = Money::fromNanos(j.at("charged_nanos").get<int64_t>());
    r.preemptions = j.at("preemptions").get<int64_t>();
    r.hold = j.value("hold", "");
    r.version = j.value("version", int64_t{0});
    return r;
  } catch (const json::exception& e) {
    return fail(
        Error(ErrorCode::kDataLoss, fmt::format("a workload record is unreadable: {}", e.what())));
  }
}

std::string shownText(std::string text) {
  constexpr size_t kIdLength = 26;  // a tenant id (common/id.h)
  size_t at = 0;
  while ((at = text.find('@', at)) != std::string::npos) {
    size_t end = at + 1;
    while (end < text.size() && std::isalnum(static_cast<unsigned char>(text[end]))) ++end;
    if (end - at - 1 == kIdLength) {
      text.erase(at, end - at);
    } else {
      at = end;
    }
  }
  return text;
}

}  // namespace purser::workloads
