#include "exec/kubernetes_executor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <csignal>

#include "common/json.h"
#include "common/quantity.h"

namespace purser::exec {

using nlohmann::json;

namespace {

constexpr const char* kSelector = "labelSelector=purser.dev%2Fmanaged%3Dtrue";

// A DNS label: lower-case letters, digits and '-', at most `max` characters, starting and ending
// with a letter or digit.
std::string dnsLabel(const std::string& text, size_t max) {
  std::string out;
  for (char c : text) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9');
    out += ok ? l : '-';
  }
  if (out.size() > max) out.resize(max);
  while (!out.empty() && out.back() == '-') out.pop_back();
  while (!out.empty() && out.front() == '-') out.erase(0, 1);
  return out.empty() ? "pod" : out;
}

std::optional<SystemTime> timeOf(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return std::nullopt;
  auto t = parseRfc3339(j[key].get<std::string>());
  return t ? std::optional<SystemTime>(*t) : std::nullopt;
}

Error unknownJob(const std::string& handle) {
  return Error(ErrorCode::kNotFound,
               fmt::format("no Kubernetes Job \"{}\" on this executor", handle));
}

// Resource `name` of a Node's allocatable, in thousandths (`milli`) or whole units; 0 when it
// has none.
Result<int64_t> quantityOf(const json& resources, const char* name, bool milli) {
  if (!resources.is_object() || !resources.contains(name)) return int64_t{0};
  const json& v = resources[name];
  if (!v.is_string()) {
    return fail(invalidArgument(fmt::format("allocatable {} is not a quantity", name)));
  }
  auto q = Quantity::parse(v.get<std::string>());
  if (!q || q->isNegative()) {
    return fail(invalidArgument(
        fmt::format("allocatable {} \"{}\" is not a quantity", name, v.get<std::string>())));
  }
  return milli ? q->milliValue() : q->value();
}

}  // namespace

Result<fleet::InventoryNode> inventoryNodeOf(const json& node, int64_t gpu_memory_mib) {
  if (!node.is_object()) return fail(invalidArgument("a Node is an object"));
  const json meta = node.value("metadata", json::object());
  const json spec = node.value("spec", json::object());
  const json status = node.value("status", json::object());
  fleet::InventoryNode n;
  n.name = meta.is_object() ? meta.value("name", "") : "";
  if (n.name.empty()) return fail(invalidArgument("a Node without a name"));
  const auto where = [&](const Error& e) {
    return invalidArgument(fmt::format("Node {}: {}", n.name, e.message));
  };
  if (meta.contains("labels") && meta["labels"].is_object()) {
    for (const auto& [k, v] : meta["labels"].items()) {
      if (v.is_string()) n.labels[k] = v.get<std::string>();
    }
  }
  if (spec.is_object()) {
    for (const auto& t : spec.value("taints", json::array())) {
      if (!t.is_object() || !t.value("key", json()).is_string()) continue;
      n.taints.push_back({t.value("key", ""), t.value("value", ""), t.value("effect", "")});
    }
    if (spec.value("unschedulable", false)) {
      n.taints.push_back({"node.kubernetes.io/unschedulable", "", "NoSchedule"});
    }
  }
  const json allocatable = status.is_object() ? status.value("allocatable", json()) : json();
  auto cpu = quantityOf(allocatable, "cpu", true);
  auto memory = quantityOf(allocatable, "memory", false);
  auto gpus = quantityOf(allocatable, "nvidia.com/gpu", false);
  if (!cpu) return fail(where(cpu.error()));
  if (!memory) return fail(where(memory.error()));
  if (!gpus) return fail(where(gpus.error()));
  n.cpu_milli = *cpu;
  n.memory_mib = *memory / (1024 * 1024);
  if (*gpus > 4096) return fail(invalidArgument(fmt::format("Node {}: {} GPUs", n.name, *gpus)));
  const auto label = [&](const char* key) {
    auto it = n.labels.find(key);
    return it == n.labels.end() ? std::string() : it->second;
  };
  int64_t gpu_mib = gpu_memory_mib;
  if (const std::string m = label("nvidia.com/gpu.memory"); !m.empty()) {
    if (auto q = Quantity::parse(m)) {
      if (auto v = q->value(); v && *v > 0) gpu_mib = *v;
    }
  }
  if (*gpus > 0 && gpu_mib <= 0) {
    return fail(invalidArgument(fmt::format(
        "Node {}: its GPUs' memory is unknown (no nvidia.com/gpu.memory label); set "
        "fleet.kubernetes.gpu_memory",
        n.name)));
  }
  for (int64_t i = 0; i < *gpus; ++i) {
    fleet::GpuDevice g;
    g.index = static_cast<int>(i);
    g.model = label("nvidia.com/gpu.product");
    if (g.model.empty()) g.model = "gpu";
    g.memory_mib = gpu_mib;
    n.gpus.push_back(std::move(g));
  }
  n.rack = label("purser.dev/rack");
  n.block = label("purser.dev/block");
  return n;
}

Result<std::unique_ptr<KubernetesExecutor>> KubernetesExecutor::create(
    const Clock& clock, KubernetesExecutorOptions options) {
  auto api = PURSER_TRY_VALUE(KubeApi::create(options.api));
  return std::unique_ptr<KubernetesExecutor>(
      new KubernetesExecutor(clock, std::move(options), std::move(api)));
}

KubernetesExecutor::KubernetesExecutor(const Clock& clock, KubernetesExecutorOptions options,
                                       std::unique_ptr<KubeApi> api)
    : clock_(clock), options_(std::move(options)), api_(std::move(api)) {
  watcher_ = std::thread([this] { watchLoop(); });
}

KubernetesExecutor::~KubernetesExecutor() {
  stop_ = true;
  watcher_.join();
  if (nodes_thread_.joinable()) nodes_thread_.join();
}

Result<std::vector<fleet::InventoryNode>> KubernetesExecutor::listNodes() {
  auto reply = api_->call("GET", "/api/v1/nodes");
  if (!reply) return fail(reply.error());
  if (reply->status != 200) {
    return fail(unavailable(fmt::format("listing nodes answered {}", reply->status)));
  }
  const json list = parseJsonOrDiscarded(reply->body);
  if (!list.is_object() || !list.contains("items") || !list["items"].is_array()) {
    return fail(unavailable("listing nodes answered no NodeList"));
  }
  std::vector<fleet::InventoryNode> out;
  for (const auto& item : list["items"]) {
    auto n = inventoryNodeOf(item, options_.gpu_memory_mib);
    if (!n) {
      spdlog::warn("kubernetes: {} (left out of the inventory)", n.error().message);
      continue;
    }
    out.push_back(std::move(*n));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

void KubernetesExecutor::nodeLoop() {
  while (!stop_) {
    for (auto waited = Duration::zero(); waited < options_.node_refresh && !stop_;
         waited += std::chrono::milliseconds(100)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (stop_) break;
    auto listed = listNodes();
    std::lock_guard lock(nodes_mu_);
    if (listed) {
      nodes_ = std::move(*listed);
      nodes_error_.clear();
    } else {
      nodes_error_ = listed.error().message;
    }
  }
}

std::optional<Result<std::vector<fleet::InventoryNode>>> KubernetesExecutor::nodes() {
  if (!options_.read_nodes) return std::nullopt;
  std::lock_guard lock(nodes_mu_);
  if (!nodes_thread_.joinable()) {
    // The first read: now, then every node_refresh on a thread of its own.
    auto listed = listNodes();
    if (listed) nodes_ = *listed;
    if (!listed) nodes_error_ = listed.error().message;
    nodes_thread_ = std::thread([this] { nodeLoop(); });
  }
  if (nodes_) return Result<std::vector<fleet::InventoryNode>>(*nodes_);
  return Result<std::vector<fleet::InventoryNode>>(
      fail(unavailable("the Kubernetes Nodes could not be listed: " + nodes_error_)));
}

// Lists the pods Purser manages: the cache is what the API says now, `version` where to watch
// from.
bool KubernetesExecutor::relist(std::string& version) {
  auto reply = api_->call("GET", std::string("/api/v1/pods?") + kSelector);
  const json list = reply && reply->status == 200 ? parseJsonOrDiscarded(reply->body) : json();
  if (!list.is_object() || !list.contains("items")) {
    std::lock_guard lock(mu_);
    down_ = reply ? fmt::format("listing pods answered {}", reply->status) : reply.error().message;
    synced_ = false;
    return false;
  }
  ++lists_;
  {
    std::lock_guard lock(mu_);
    for (auto& [handle, pod] : pods_) pod.phase = "Deleted";  // unless listed again below
  }
  for (const auto& item : list["items"]) apply("ADDED", item);
  version = list.value("metadata", json::object()).value("resourceVersion", "");
  {
    std::lock_guard lock(mu_);
    synced_ = true;
    down_.clear();
  }
  synced_cv_.notify_all();
  if (options_.on_change) options_.on_change();
  return true;
}

void KubernetesExecutor::apply(const std::string& type, const nlohmann::json& pod) {
  if (!pod.is_object()) return;
  const json meta = pod.value("metadata", json::object());
  const json labels = meta.value("labels", json::object());
  if (!labels.is_object() || !labels.contains("purser.dev/handle")) return;
  const std::string handle = labels.value("purser.dev/handle", "");
  PodState s;
  s.name = meta.value("name", "");
  const json status = pod.value("status", json::object());
  s.phase = type == "DELETED" ? "Deleted" : status.value("phase", "Pending");
  s.started_at = timeOf(status, "startTime");
  for (const auto& c : status.value("containerStatuses", json::array())) {
    const json term = c.value("state", json::object()).value("terminated", json());
    if (term.is_object()) {
      if (term.contains("exitCode") && term["exitCode"].is_number_integer()) {
        s.exit_code = term["exitCode"].get<int>();
      }
      s.finished_at = timeOf(term, "finishedAt");
    }
    break;  // the first container decides
  }
  std::lock_guard lock(mu_);
  pods_[handle] = s;
}

void KubernetesExecutor::watchLoop() {
  std::string version;
  int backoff_s = 1;
  const auto pause = [&] {
    for (int i = 0; i < backoff_s * 10 && !stop_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    backoff_s = std::min(backoff_s * 2, 30);
  };
  while (!stop_) {
    if (version.empty() && !relist(version)) {
      pause();
      continue;
    }
    bool expired = false;
    auto reply = api_->watch(
        fmt::format("/api/v1/pods?{}&watch=1&allowWatchBookmarks=true&resourceVersion={}",
                    kSelector, version),
        [&](const std::string& line) {
          const json event = parseJsonOrDiscarded(line);
          if (!event.is_object()) return true;
          const std::string type = event.value("type", "");
          const json object = event.value("object", json::object());
          if (type == "ERROR") {
            // 410 Gone: the version is no longer kept; start over from a fresh list.
            if (object.is_object() && object.value("code", 0) == 410) expired = true;
            return false;
          }
          const std::string rv =
              object.value("metadata", json::object()).value("resourceVersion", "");
          if (!rv.empty()) version = rv;
          if (type != "BOOKMARK") {
            apply(type, object);
            if (options_.on_change) options_.on_change();
          }
          return true;
        },
        stop_);
    if (!reply) {
      std::lock_guard lock(mu_);
      down_ = reply.error().message;
      synced_ = false;
    } else if (reply->status == 410 || expired) {
      version.clear();
      continue;
    } else if (reply->status != 200) {
      std::lock_guard lock(mu_);
      down_ = fmt::format("watching pods answered {}", reply->status);
      synced_ = false;
      version.clear();
    } else {
      backoff_s = 1;
      continue;  // the server ended the watch: resume from `version`
    }
    pause();
  }
}

Result<std::string> KubernetesExecutor::start(const PodLaunch& pod) {
  const std::string image = pod.image.empty() ? options_.default_image : pod.image;
  if (image.empty()) {
    return fail(invalidArgument("a pod on Kubernetes needs an image").withField("image"));
  }
  const size_t slash = pod.workload.find('/');
  const std::string ns =
      dnsLabel(slash == std::string::npos ? "default" : pod.workload.substr(0, slash), 63);
  const std::string base =
      slash == std::string::npos ? pod.workload : pod.workload.substr(slash + 1);
  std::string name;
  {
    std::lock_guard lock(mu_);
    // "train-main-0-5f3a2c1": the workload, the pod, and what makes the run unique.
    const std::string suffix =
        dnsLabel(fmt::format("{}-{}-{:x}{:03x}", pod.pod_set, pod.index,
                             unixMillis(clock_.now()) % 0xfffff, ++next_ % 0xfff),
                 40);
    name = dnsLabel(base, 62 - suffix.size()) + "-" + suffix;
  }
  const std::string handle = ns + "." + name;
  json env = json::array();
  for (const auto& [k, v] : pod.env) {
    if (k == "CUDA_VISIBLE_DEVICES") continue;  // the device plugin's to set
    env.push_back({{"name", k}, {"value", v}});
  }
  json container = {{"name", "main"}, {"image", image}, {"env", env}};
  if (!pod.argv.empty()) container["command"] = pod.argv;
  if (!pod.working_dir.empty()) container["workingDir"] = pod.working_dir;
  json requests = json::object(), limits = json::object();
  if (pod.cpu_milli > 0) requests["cpu"] = fmt::format("{}m", pod.cpu_milli);
  if (pod.memory_bytes > 0) requests["memory"] = std::to_string(pod.memory_bytes);
  if (pod.gpus > 0) limits["nvidia.com/gpu"] = std::to_string(pod.gpus);
  container["resources"] = {{"requests", requests}, {"limits", limits}};
  json labels = {{"purser.dev/managed", "true"}, {"purser.dev/handle", handle}};
  if (!pod.queue.empty()) labels["kueue.x-k8s.io/queue-name"] = pod.queue;
  const json job = {
      {"apiVersion", "batch/v1"},
      {"kind", "Job"},
      {"metadata", {{"name", name}, {"namespace", ns}, {"labels", labels}}},
      {"spec",
       {{"suspend", true},
        {"parallelism", 1},
        {"completions", 1},
        {"backoffLimit", 0},
        {"template",
         {{"metadata", {{"labels", labels}}},
          {"spec", {{"restartPolicy", "Never"}, {"containers", json::array({container})}}}}}}}};
  const std::string path = fmt::format("/apis/batch/v1/namespaces/{}/jobs", ns);
  auto created = api_->call("POST", path, writeJson(job));
  if (!created) return fail(created.error());
  if (created->status != 201 && created->status != 200) {
    const json problem = parseJsonOrDiscarded(created->body);
    return fail(invalidArgument(fmt::format(
        "Kubernetes refused the Job ({}): {}", created->status,
        problem.is_object() ? problem.value("message", created->body) : created->body)));
  }
  {
    std::lock_guard lock(mu_);
    jobs_[handle] = Job{ns, name, clock_.now(), false, false, std::nullopt};
  }
  // Released as Kueue releases a Job it admits: un-suspended, with the placement's node.
  json release = {{"spec", {{"suspend", false}}}};
  if (!pod.node.empty()) {
    release["spec"]["template"] = {
        {"spec", {{"nodeSelector", {{"kubernetes.io/hostname", pod.node}}}}}};
  }
  auto patched =
      api_->call("PATCH", path + "/" + name, writeJson(release), "application/merge-patch+json");
  if (!patched || patched->status != 200) {
    (void)api_->call("DELETE", path + "/" + name + "?propagationPolicy=Background");
    std::lock_guard lock(mu_);
    jobs_.erase(handle);
    return fail(patched ? unavailable(fmt::format("releasing the Job answered {}", patched->status))
                        : patched.error());
  }
  return handle;
}

Result<PodStatus> KubernetesExecutor::status(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(handle);
  if (it == jobs_.end()) return fail(unknownJob(handle));
  if (!synced_) {
    return fail(Error(ErrorCode::kUnavailable,
                      down_.empty() ? "the Kubernetes API has not been listed yet" : down_));
  }
  const Job& job = it->second;
  PodStatus st;
  st.started_at = job.started_at;
  st.stopping = job.stopping;
  auto pod = pods_.find(handle);
  if (pod == pods_.end()) return st;  // no pod yet: pending in the cluster
  const PodState& p = pod->second;
  if (p.started_at) st.started_at = *p.started_at;
  if (p.phase == "Succeeded" || p.phase == "Failed" || p.phase == "Deleted") {
    st.stopping = false;
    st.finished_at = p.finished_at.value_or(clock_.now());
    if (p.phase == "Succeeded") {
      st.phase = PodPhase::kSucceeded;
      st.exit_code = p.exit_code.value_or(0);
    } else {
      st.phase = PodPhase::kFailed;
      st.exit_code = p.exit_code;
      // Deleted (suspended) without a code of its own: ended by Kubernetes' polite signal.
      if (!p.exit_code && p.phase == "Deleted") st.signal = SIGTERM;
    }
  }
  return st;
}

Result<void> KubernetesExecutor::stop(const std::string& handle, Duration grace) {
  (void)grace;  // the pod's own terminationGracePeriodSeconds applies
  std::string path;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(handle);
    if (it == jobs_.end()) return fail(unknownJob(handle));
    if (it->second.stopping) return {};
    path = fmt::format("/apis/batch/v1/namespaces/{}/jobs/{}", it->second.ns, it->second.name);
  }
  // Suspended, as Kueue suspends a preempted Job: Kubernetes deletes its running pod.
  auto r =
      api_->call("PATCH", path, R"({"spec":{"suspend":true}})", "application/merge-patch+json");
  if (!r) return fail(r.error());
  if (r->status != 200 && r->status != 404) {
    return fail(unavailable(fmt::format("suspending the Job answered {}", r->status)));
  }
  std::lock_guard lock(mu_);
  auto it = jobs_.find(handle);
  if (it != jobs_.end()) it->second.stopping = true;
  return {};
}

Result<std::string> KubernetesExecutor::logTail(const std::string& handle, size_t max_bytes) {
  std::string path;
  {
    std::lock_guard lock(mu_);
    auto pod = pods_.find(handle);
    const size_t dot = handle.find('.');
    if (pod == pods_.end() || pod->second.name.empty() || dot == std::string::npos) {
      return fail(unknownJob(handle));
    }
    path = fmt::format("/api/v1/namespaces/{}/pods/{}/log?tailLines=10000", handle.substr(0, dot),
                       pod->second.name);
  }
  auto r = api_->call("GET", path);
  if (!r) return fail(r.error());
  if (r->status != 200) return fail(unknownJob(handle));
  std::string out = std::move(r->body);
  if (out.size() > max_bytes) out.erase(0, out.size() - max_bytes);
  return out;
}

Result<void> KubernetesExecutor::adopt(const Adopted& pod) {
  const size_t dot = pod.handle.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == pod.handle.size()) {
    return fail(invalidArgument("not a handle of this executor"));
  }
  std::lock_guard lock(mu_);
  jobs_.emplace(pod.handle, Job{pod.handle.substr(0, dot), pod.handle.substr(dot + 1),
                                pod.started_at, false, false, std::nullopt});
  return {};
}

void KubernetesExecutor::forget(const std::string& handle) {
  std::string path;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(handle);
    if (it == jobs_.end()) return;
    path = fmt::format("/apis/batch/v1/namespaces/{}/jobs/{}?propagationPolicy=Background",
                       it->second.ns, it->second.name);
    jobs_.erase(it);
    pods_.erase(handle);
  }
  if (auto r = api_->call("DELETE", path); !r || (r->status != 200 && r->status != 404)) {
    spdlog::warn("kubernetes: Job {} was not deleted", handle);
  }
}

}  // namespace purser::exec
