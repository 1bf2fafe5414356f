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

// The pods Purser manages; the Jobs that name a LocalQueue.
constexpr const char* kPods = "/api/v1/pods?labelSelector=purser.dev%2Fmanaged%3Dtrue";
constexpr const char* kJobs = "/apis/batch/v1/jobs?labelSelector=kueue.x-k8s.io%2Fqueue-name";
constexpr const char* kManaged = "purser.dev/managed";
constexpr const char* kHandle = "purser.dev/handle";

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
  watcher_ = std::thread([this] { watchLoop(Feed::kPods); });
  if (options_.adopt_jobs) job_watcher_ = std::thread([this] { watchLoop(Feed::kJobs); });
}

KubernetesExecutor::~KubernetesExecutor() {
  stop_ = true;
  watcher_.join();
  if (job_watcher_.joinable()) job_watcher_.join();
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

// Lists the pods Purser manages (or the Jobs naming a queue): the cache is what the API says
// now, `version` where to watch from.
bool KubernetesExecutor::relist(Feed feed, std::string& version) {
  const char* what = feed == Feed::kPods ? "pods" : "Jobs";
  auto reply = api_->call("GET", feed == Feed::kPods ? kPods : kJobs);
  const json list = reply && reply->status == 200 ? parseJsonOrDiscarded(reply->body) : json();
  if (!list.is_object() || !list.contains("items") || !list["items"].is_array()) {
    std::lock_guard lock(mu_);
    (feed == Feed::kPods ? down_ : jobs_down_) =
        reply ? fmt::format("listing {} answered {}", what, reply->status) : reply.error().message;
    (feed == Feed::kPods ? synced_ : jobs_synced_) = false;
    return false;
  }
  ++lists_;
  std::set<std::string> listed;
  for (const auto& item : list["items"]) {
    apply(feed, "ADDED", item);
    if (feed == Feed::kJobs && item.is_object()) {
      const json meta = item.value("metadata", json::object());
      listed.insert(meta.value("namespace", "") + "/" + meta.value("name", ""));
    }
  }
  {
    std::lock_guard lock(mu_);
    if (feed == Feed::kPods) {
      // A pod not listed again is gone (deleted while no watch was open).
      std::set<std::string> seen;
      for (const auto& item : list["items"]) {
        const json meta = item.is_object() ? item.value("metadata", json::object()) : json();
        const json notes = meta.is_object() ? meta.value("annotations", json::object()) : json();
        const json labels = meta.is_object() ? meta.value("labels", json::object()) : json();
        if (notes.is_object() && notes.value(kHandle, json()).is_string()) {
          seen.insert(notes[kHandle].get<std::string>());
        } else if (labels.is_object() && labels.value(kHandle, json()).is_string()) {
          seen.insert(labels[kHandle].get<std::string>());
        }
      }
      for (auto& [handle, pod] : pods_) {
        if (seen.count(handle) == 0) pod.phase = "Deleted";
      }
    } else {
      for (auto it = user_jobs_.begin(); it != user_jobs_.end();) {
        if (listed.count(it->first) != 0) {
          ++it;
          continue;
        }
        if (reported_.erase(it->second.uid) != 0) {
          found_.push_back({it->first + "/" + it->second.uid, ""});
        }
        it = user_jobs_.erase(it);
      }
    }
  }
  version = list.value("metadata", json::object()).value("resourceVersion", "");
  {
    std::lock_guard lock(mu_);
    (feed == Feed::kPods ? synced_ : jobs_synced_) = true;
    (feed == Feed::kPods ? down_ : jobs_down_).clear();
  }
  synced_cv_.notify_all();
  if (options_.on_change) options_.on_change();
  return true;
}

void KubernetesExecutor::apply(Feed feed, const std::string& type, const json& object) {
  if (!object.is_object()) return;
  if (feed == Feed::kPods) {
    applyPod(type, object);
  } else {
    applyJob(type, object);
  }
}

void KubernetesExecutor::applyPod(const std::string& type, const json& pod) {
  const json meta = pod.value("metadata", json::object());
  if (!meta.is_object()) return;
  const json notes = meta.value("annotations", json::object());
  const json labels = meta.value("labels", json::object());
  std::string handle;
  if (notes.is_object() && notes.value(kHandle, json()).is_string()) {
    handle = notes[kHandle].get<std::string>();
  } else if (labels.is_object() && labels.value(kHandle, json()).is_string()) {
    handle = labels[kHandle].get<std::string>();
  }
  if (handle.empty()) return;
  PodState s;
  s.name = meta.value("name", "");
  const json status = pod.value("status", json::object());
  if (!status.is_object()) return;
  s.phase = type == "DELETED" ? "Deleted" : status.value("phase", "Pending");
  s.started_at = timeOf(status, "startTime");
  for (const auto& c : status.value("containerStatuses", json::array())) {
    if (!c.is_object()) break;
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
  if (s.phase == "Failed" && s.exit_code && *s.exit_code != 0) failed_codes_[handle] = *s.exit_code;
  pods_[handle] = s;
}

// A Job naming a queue: a user's (not one Purser created) is kept, and reported once while it
// waits to run; one running that Purser never released is suspended first, as Kueue does.
void KubernetesExecutor::applyJob(const std::string& type, const json& job) {
  const json meta = job.value("metadata", json::object());
  if (!meta.is_object()) return;
  const json labels = meta.value("labels", json::object());
  if (labels.is_object() && labels.value(kManaged, "") == "true") return;  // Purser's own
  const std::string ns = meta.value("namespace", ""), name = meta.value("name", "");
  const std::string uid = meta.value("uid", "");
  if (ns.empty() || name.empty() || uid.empty()) return;
  const std::string key = ns + "/" + name;
  std::unique_lock lock(mu_);
  if (type == "DELETED") {
    auto it = user_jobs_.find(key);
    if (it != user_jobs_.end()) user_jobs_.erase(it);
    if (reported_.erase(uid) != 0) found_.push_back({key + "/" + uid, ""});
    return;
  }
  UserJob u;
  u.uid = uid;
  const json spec = job.value("spec", json::object());
  const json status = job.value("status", json::object());
  if (!spec.is_object() || !status.is_object()) return;
  u.suspended = spec.value("suspend", false) == true;
  const json tmeta = spec.value("template", json::object()).is_object()
                         ? spec["template"].value("metadata", json::object())
                         : json();
  const json tlabels = tmeta.is_object() ? tmeta.value("labels", json::object()) : json();
  u.released = tlabels.is_object() && tlabels.value(kManaged, "") == "true";
  if (status.value("active", json()).is_number_integer()) u.active = status["active"].get<int64_t>();
  u.started_at = timeOf(status, "startTime");
  u.finished_at = timeOf(status, "completionTime");
  for (const auto& c : status.value("conditions", json::array())) {
    if (!c.is_object() || c.value("status", "") != "True") continue;
    const std::string t = c.value("type", "");
    if (t == "Complete") u.complete = true;
    if (t == "Failed") {
      u.failed = true;
      if (!u.finished_at) u.finished_at = timeOf(c, "lastTransitionTime");
    }
  }
  auto before = user_jobs_.find(key);
  if (before != user_jobs_.end() && before->second.uid != uid) {
    // Deleted and applied again under the same name while no watch was open.
    if (reported_.erase(before->second.uid) != 0) {
      found_.push_back({key + "/" + before->second.uid, ""});
    }
  }
  user_jobs_[key] = u;
  if (reported_.count(uid) != 0 || u.complete || u.failed) return;
  reported_.insert(uid);
  lock.unlock();
  if (!u.suspended && !u.released) {
    // Running without an admission: suspended until the fleet admits it.
    auto r = api_->call("PATCH", fmt::format("/apis/batch/v1/namespaces/{}/jobs/{}", ns, name),
                        R"({"spec":{"suspend":true}})", "application/merge-patch+json");
    if (!r || r->status != 200) {
      spdlog::warn("kubernetes: Job {} runs without an admission and could not be suspended", key);
    }
  }
  json manifest = job;
  manifest.erase("status");
  manifest["metadata"].erase("managedFields");
  lock.lock();
  found_.push_back({key + "/" + uid, writeJson(manifest)});
}

void KubernetesExecutor::watchLoop(Feed feed) {
  const std::string base = feed == Feed::kPods ? kPods : kJobs;
  std::string version;
  int backoff_s = 1;
  const auto pause = [&] {
    for (int i = 0; i < backoff_s * 10 && !stop_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    backoff_s = std::min(backoff_s * 2, 30);
  };
  const auto down = [&](std::string why, bool forget_version) {
    std::lock_guard lock(mu_);
    (feed == Feed::kPods ? down_ : jobs_down_) = std::move(why);
    (feed == Feed::kPods ? synced_ : jobs_synced_) = false;
    if (forget_version) version.clear();
  };
  while (!stop_) {
    if (version.empty() && !relist(feed, version)) {
      pause();
      continue;
    }
    bool expired = false;
    auto reply = api_->watch(
        fmt::format("{}&watch=1&allowWatchBookmarks=true&resourceVersion={}", base, version),
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
          if (!object.is_object()) return true;
          const json meta = object.value("metadata", json::object());
          const std::string rv = meta.is_object() ? meta.value("resourceVersion", "") : "";
          if (!rv.empty()) version = rv;
          if (type != "BOOKMARK") {
            apply(feed, type, object);
            if (options_.on_change) options_.on_change();
          }
          return true;
        },
        stop_);
    if (!reply) {
      down(reply.error().message, false);
    } else if (reply->status == 410 || expired) {
      version.clear();
      continue;
    } else if (reply->status != 200) {
      down(fmt::format("watching {} answered {}", feed == Feed::kPods ? "pods" : "Jobs",
                       reply->status),
           true);
    } else {
      backoff_s = 1;
      continue;  // the server ended the watch: resume from `version`
    }
    pause();
  }
}

namespace {

// "namespace/name/uid" -> namespace and name.
std::optional<std::pair<std::string, std::string>> splitKey(const std::string& key) {
  const size_t a = key.find('/');
  const size_t b = a == std::string::npos ? a : key.find('/', a + 1);
  if (a == std::string::npos || a == 0 || b == std::string::npos || b == a + 1) return std::nullopt;
  return std::pair{key.substr(0, a), key.substr(a + 1, b - a - 1)};
}

}  // namespace

// A user's Job, released for its admission: un-suspended, its pods labelled and annotated as
// Purser's and sent to the placement's nodes. Every pod of the workload names the same Job: the
// first start() of a run releases it, the others find it released.
Result<std::string> KubernetesExecutor::release(const PodLaunch& pod) {
  auto where = splitKey(pod.existing);
  if (!where) return fail(invalidArgument("not a Kubernetes Job of this executor"));
  const auto& [ns, name] = *where;
  const std::string handle = ns + "/" + name;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(handle);
    if (it != jobs_.end() && !it->second.stopping) return handle;
    if (it != jobs_.end()) {
      return fail(Error(ErrorCode::kResourceExhausted,
                        fmt::format("the Job {} is still stopping from its last run", handle)));
    }
  }
  json tspec = json::object();
  std::vector<std::string> nodes;
  for (const auto& n : pod.pod_set_nodes) {
    if (!n.empty() && std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
  if (nodes.size() == 1) {
    tspec["nodeSelector"] = {{"kubernetes.io/hostname", nodes[0]}};
  } else if (nodes.size() > 1) {
    tspec["affinity"] = {
        {"nodeAffinity",
         {{"requiredDuringSchedulingIgnoredDuringExecution",
           {{"nodeSelectorTerms",
             json::array({{{"matchExpressions",
                            json::array({{{"key", "kubernetes.io/hostname"},
                                          {"operator", "In"},
                                          {"values", nodes}}})}}})}}}}}};
  }
  const json release = {
      {"spec",
       {{"suspend", false},
        {"template",
         {{"metadata", {{"labels", {{kManaged, "true"}}}, {"annotations", {{kHandle, handle}}}}},
          {"spec", tspec}}}}}};
  const std::string path = fmt::format("/apis/batch/v1/namespaces/{}/jobs/{}", ns, name);
  auto patched = api_->call("PATCH", path, writeJson(release), "application/merge-patch+json");
  if (!patched) return fail(patched.error());
  if (patched->status == 404) {
    return fail(invalidArgument(fmt::format("the Job {} is gone", handle)));
  }
  if (patched->status != 200) {
    return fail(unavailable(fmt::format("releasing the Job answered {}", patched->status)));
  }
  std::lock_guard lock(mu_);
  Job job;
  job.ns = ns;
  job.name = name;
  job.started_at = clock_.now();
  job.existing = true;
  jobs_[handle] = job;
  pods_.erase(handle);
  failed_codes_.erase(handle);
  return handle;
}

Result<std::string> KubernetesExecutor::start(const PodLaunch& pod) {
  if (!pod.existing.empty()) return release(pod);
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
  json labels = {{kManaged, "true"}};
  if (!pod.queue.empty()) labels["kueue.x-k8s.io/queue-name"] = pod.queue;
  const json annotations = {{kHandle, handle}};
  json job = {
      {"apiVersion", "batch/v1"},
      {"kind", "Job"},
      {"metadata",
       {{"name", name}, {"namespace", ns}, {"labels", labels}, {"annotations", annotations}}},
      {"spec",
       {{"suspend", true},
        {"parallelism", 1},
        {"completions", 1},
        {"backoffLimit", 0},
        {"template",
         {{"metadata", {{"labels", labels}, {"annotations", annotations}}},
          {"spec", {{"restartPolicy", "Never"}, {"containers", json::array({container})}}}}}}}};
  if (pod.time_limit_seconds > 0) job["spec"]["activeDeadlineSeconds"] = pod.time_limit_seconds;
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
    Job j;
    j.ns = ns;
    j.name = name;
    j.started_at = clock_.now();
    jobs_[handle] = j;
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
  const Job& job = it->second;
  if (!synced_ || (job.existing && !jobs_synced_)) {
    const std::string& why = !synced_ ? down_ : jobs_down_;
    return fail(
        Error(ErrorCode::kUnavailable, why.empty() ? "the Kubernetes API has not been listed yet" : why));
  }
  PodStatus st;
  st.started_at = job.started_at;
  st.stopping = job.stopping;
  if (job.existing) {
    // A user's Job: its own status decides.
    auto u = user_jobs_.find(job.ns + "/" + job.name);
    const auto ended = [&](PodPhase phase) {
      st.phase = phase;
      st.stopping = false;
      st.finished_at = clock_.now();
    };
    if (u == user_jobs_.end()) {
      ended(PodPhase::kFailed);  // deleted
      st.signal = SIGTERM;
      return st;
    }
    if (u->second.started_at) st.started_at = *u->second.started_at;
    if (u->second.complete) {
      ended(PodPhase::kSucceeded);
      st.exit_code = 0;
    } else if (u->second.failed) {
      ended(PodPhase::kFailed);
      if (auto code = failed_codes_.find(handle); code != failed_codes_.end()) {
        st.exit_code = code->second;
      }
    } else if (job.stopping && u->second.suspended && u->second.active == 0) {
      ended(PodPhase::kFailed);
      st.signal = SIGTERM;
    } else {
      return st;
    }
    if (u->second.finished_at) st.finished_at = *u->second.finished_at;
    return st;
  }
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
    const size_t cut = handle.find_first_of("./");
    if (pod == pods_.end() || pod->second.name.empty() || cut == std::string::npos) {
      return fail(unknownJob(handle));
    }
    path = fmt::format("/api/v1/namespaces/{}/pods/{}/log?tailLines=10000", handle.substr(0, cut),
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
  // "namespace.job-name" (Purser's Job) or "namespace/name" (a user's).
  const size_t cut = pod.handle.find_first_of("./");
  if (cut == std::string::npos || cut == 0 || cut + 1 == pod.handle.size()) {
    return fail(invalidArgument("not a handle of this executor"));
  }
  std::lock_guard lock(mu_);
  Job job;
  job.ns = pod.handle.substr(0, cut);
  job.name = pod.handle.substr(cut + 1);
  job.started_at = pod.started_at;
  job.existing = pod.handle[cut] == '/';
  jobs_.emplace(pod.handle, job);
  return {};
}

void KubernetesExecutor::forget(const std::string& handle) {
  std::string path;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(handle);
    if (it == jobs_.end()) return;
    const bool existing = it->second.existing;
    path = fmt::format("/apis/batch/v1/namespaces/{}/jobs/{}?propagationPolicy=Background",
                       it->second.ns, it->second.name);
    jobs_.erase(it);
    pods_.erase(handle);
    failed_codes_.erase(handle);
    if (existing) return;  // a user's Job stays theirs
  }
  if (auto r = api_->call("DELETE", path); !r || (r->status != 200 && r->status != 404)) {
    spdlog::warn("kubernetes: Job {} was not deleted", handle);
  }
}

std::vector<Found> KubernetesExecutor::takeFound() {
  std::lock_guard lock(mu_);
  std::vector<Found> out;
  out.swap(found_);
  return out;
}

void KubernetesExecutor::discard(const std::string& key) {
  auto where = splitKey(key);
  if (!where) return;
  const std::string uid = key.substr(where->first.size() + where->second.size() + 2);
  // Deleted only if it is still the Job that was found (not one applied since under its name).
  const json options = {{"kind", "DeleteOptions"},
                        {"apiVersion", "v1"},
                        {"propagationPolicy", "Background"},
                        {"preconditions", {{"uid", uid}}}};
  auto r = api_->call(
      "DELETE", fmt::format("/apis/batch/v1/namespaces/{}/jobs/{}", where->first, where->second),
      writeJson(options));
  if (!r || (r->status != 200 && r->status != 202 && r->status != 404 && r->status != 409)) {
    spdlog::warn("kubernetes: Job {}/{} was not deleted", where->first, where->second);
  }
}

}  // namespace purser::exec
