#include "exec/kubernetes_executor.h"

#include "exec/gpu_share_env.h"
#include "exec/pod_security.h"

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

// The pods Purser manages.
constexpr const char* kPods = "/api/v1/pods?labelSelector=purser.dev%2Fmanaged%3Dtrue";
// Objects that name a LocalQueue.
constexpr const char* kQueued = "labelSelector=kueue.x-k8s.io%2Fqueue-name";
constexpr const char* kManaged = "purser.dev/managed";
constexpr const char* kHandle = "purser.dev/handle";

// The kinds of objects users apply for Purser to queue (and that Purser releases).
struct ObjectKind {
  const char* kind;
  const char* plural;
  const char* group_version;
  const char* done;  // the condition that says it succeeded
};
constexpr ObjectKind kKinds[] = {{"Job", "jobs", "batch/v1", "Complete"},
                                 {"JobSet", "jobsets", "jobset.x-k8s.io/v1alpha2", "Completed"},
                                 {"PyTorchJob", "pytorchjobs", "kubeflow.org/v1", "Succeeded"}};
constexpr int kJob = 0, kJobSet = 1, kPyTorchJob = 2;

// An object of one of kKinds.
struct Ref {
  int kind = kJob;
  std::string ns, name;
  // Its handle: "namespace/name" for a Job, "plural/namespace/name" for the others.
  std::string handle() const {
    return kind == kJob ? ns + "/" + name
                        : std::string(kKinds[kind].plural) + "/" + ns + "/" + name;
  }
  std::string path() const {
    return fmt::format("/apis/{}/namespaces/{}/{}/{}", kKinds[kind].group_version, ns,
                       kKinds[kind].plural, name);
  }
};

std::vector<std::string> splitSlashes(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t next; (next = s.find('/', at)) != std::string::npos; at = next + 1) {
    out.push_back(s.substr(at, next - at));
  }
  out.push_back(s.substr(at));
  return out;
}

int kindOfPlural(const std::string& plural) {
  for (int k = 0; k < static_cast<int>(std::size(kKinds)); ++k) {
    if (plural == kKinds[k].plural) return k;
  }
  return -1;
}

// A handle of a user's object ("ns/name", "plural/ns/name"); a Found key is the same with
// "/uid" after it (`with_uid`).
std::optional<Ref> refOf(const std::string& text, bool with_uid) {
  auto parts = splitSlashes(text);
  if (with_uid && !parts.empty()) parts.pop_back();
  Ref r;
  if (parts.size() == 3) {
    r.kind = kindOfPlural(parts[0]);
    if (r.kind < 0) return std::nullopt;
    parts.erase(parts.begin());
  }
  if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) return std::nullopt;
  r.ns = parts[0];
  r.name = parts[1];
  return r;
}

// The pod templates of an object of kind `kind`, with the pod set each makes (Kueue's names).
void forEachTemplate(json& spec, int kind,
                     const std::function<void(const std::string&, json&)>& fn) {
  if (!spec.is_object()) return;
  if (kind == kJob) {
    if (spec.contains("template") && spec["template"].is_object()) fn("main", spec["template"]);
  } else if (kind == kJobSet) {
    if (!spec.contains("replicatedJobs") || !spec["replicatedJobs"].is_array()) return;
    for (auto& rj : spec["replicatedJobs"]) {
      if (!rj.is_object() || !rj.value("name", json()).is_string()) continue;
      json& jt = rj["template"];
      if (!jt.is_object() || !jt["spec"].is_object() || !jt["spec"]["template"].is_object()) {
        continue;
      }
      fn(rj["name"].get<std::string>(), jt["spec"]["template"]);
    }
  } else {
    if (!spec.contains("pytorchReplicaSpecs") || !spec["pytorchReplicaSpecs"].is_object()) return;
    for (auto& [type, rs] : spec["pytorchReplicaSpecs"].items()) {
      if (!rs.is_object() || !rs.contains("template") || !rs["template"].is_object()) continue;
      std::string set = type;
      std::transform(set.begin(), set.end(), set.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      fn(set, rs["template"]);
    }
  }
}

// The merge patch that suspends (or releases) an object of kind `kind`.
json suspendPatch(int kind, bool suspend) {
  if (kind == kPyTorchJob) return {{"spec", {{"runPolicy", {{"suspend", suspend}}}}}};
  return {{"spec", {{"suspend", suspend}}}};
}

bool isSuspended(const json& spec, int kind) {
  if (!spec.is_object()) return false;
  if (kind == kPyTorchJob) {
    const json rp = spec.value("runPolicy", json::object());
    return rp.is_object() && rp.value("suspend", false) == true;
  }
  return spec.value("suspend", false) == true;
}

// Pods (Job, PyTorchJob) or Jobs (JobSet) the object has running now.
int64_t activeOf(const json& status, int kind) {
  const auto count = [](const json& j) {
    return j.is_object() && j.value("active", json()).is_number_integer()
               ? j["active"].get<int64_t>()
               : int64_t{0};
  };
  if (kind == kJob) return count(status);
  int64_t n = 0;
  if (kind == kJobSet) {
    for (const auto& r : status.value("replicatedJobsStatus", json::array())) n += count(r);
  } else {
    const json rs = status.value("replicaStatuses", json::object());
    if (rs.is_object()) {
      for (const auto& [type, r] : rs.items()) n += count(r);
    }
  }
  return n;
}

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

}  // namespace

Result<std::unique_ptr<KubernetesExecutor>> KubernetesExecutor::create(
    const Clock& clock, KubernetesExecutorOptions options) {
  auto api = PURSER_TRY_VALUE(KubeApi::create(options.api));
  return std::unique_ptr<KubernetesExecutor>(
      new KubernetesExecutor(clock, std::move(options), std::move(api)));
}

KubernetesExecutor::KubernetesExecutor(const Clock& clock, KubernetesExecutorOptions options,
                                       std::unique_ptr<KubeApi> api)
    : clock_(clock), options_(std::move(options)), api_(std::move(api)) {
  watchers_.emplace_back([this] { watchLoop(kPodFeed); });
  if (options_.adopt_jobs) {
    for (int k = 0; k < static_cast<int>(std::size(kKinds)); ++k) {
      watchers_.emplace_back([this, k] { watchLoop(k + 1); });
    }
  }
}

KubernetesExecutor::~KubernetesExecutor() {
  stop_ = true;
  for (auto& t : watchers_) t.join();
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

// Lists the pods Purser manages (or the objects of a kind naming a queue): the cache is what
// the API says now, `version` where to watch from.
bool KubernetesExecutor::relist(int feed, std::string& version) {
  const std::string what = feed == kPodFeed ? "pods" : kKinds[feed - 1].plural;
  auto reply = api_->call("GET", feedPath(feed));
  if (reply && reply->status == 404 && feed != kPodFeed) {
    // The cluster does not serve this kind (its operator is not installed).
    std::lock_guard lock(mu_);
    if (!absent_[feed]) spdlog::info("kubernetes: the cluster serves no {}; not watched", what);
    absent_[feed] = true;
    return false;
  }
  const json list = reply && reply->status == 200 ? parseJsonOrDiscarded(reply->body) : json();
  if (!list.is_object() || !list.contains("items") || !list["items"].is_array()) {
    std::lock_guard lock(mu_);
    down_[feed] =
        reply ? fmt::format("listing {} answered {}", what, reply->status) : reply.error().message;
    synced_[feed] = false;
    return false;
  }
  ++lists_;
  std::set<std::string> listed;
  for (const auto& item : list["items"]) {
    apply(feed, "ADDED", item);
    if (feed != kPodFeed && item.is_object()) {
      const json meta = item.value("metadata", json::object());
      if (meta.is_object()) {
        listed.insert(Ref{feed - 1, meta.value("namespace", ""), meta.value("name", "")}.handle());
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    absent_[feed] = false;
    if (feed == kPodFeed) {
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
        if (it->second.kind != feed - 1 || listed.count(it->first) != 0) {
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
    synced_[feed] = true;
    down_[feed].clear();
  }
  if (options_.on_change) options_.on_change();
  return true;
}

std::string KubernetesExecutor::feedPath(int feed) const {
  if (feed == kPodFeed) return kPods;
  const ObjectKind& k = kKinds[feed - 1];
  return fmt::format("/apis/{}/{}?{}", k.group_version, k.plural, kQueued);
}

void KubernetesExecutor::apply(int feed, const std::string& type, const json& object) {
  if (!object.is_object()) return;
  if (feed == kPodFeed) {
    applyPod(type, object);
  } else {
    applyObject(feed - 1, type, object);
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
  if (status.value("podIP", json()).is_string()) s.ip = status["podIP"].get<std::string>();
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
  if (s.phase == "Failed" && s.exit_code && *s.exit_code != 0 && failed_codes_.count(handle) == 0) {
    failed_codes_[handle] = {*s.exit_code, s.name};  // the first to fail decides
  }
  pods_[handle] = s;
}

// An object naming a queue: a user's (not one Purser created) is kept, and reported once while
// it waits to run; one running that Purser never released is suspended first, as Kueue does.
void KubernetesExecutor::applyObject(int kind, const std::string& type, const json& object) {
  const json meta = object.value("metadata", json::object());
  if (!meta.is_object()) return;
  const json labels = meta.value("labels", json::object());
  if (labels.is_object() && labels.value(kManaged, "") == "true") return;  // Purser's own
  const Ref ref{kind, meta.value("namespace", ""), meta.value("name", "")};
  const std::string uid = meta.value("uid", "");
  if (ref.ns.empty() || ref.name.empty() || uid.empty()) return;
  const std::string key = ref.handle();
  std::unique_lock lock(mu_);
  if (type == "DELETED") {
    user_jobs_.erase(key);
    if (reported_.erase(uid) != 0) found_.push_back({key + "/" + uid, ""});
    return;
  }
  UserJob u;
  u.kind = kind;
  u.uid = uid;
  json spec = object.value("spec", json::object());
  const json status = object.value("status", json::object());
  if (!spec.is_object() || !status.is_object()) return;
  u.suspended = isSuspended(spec, kind);
  forEachTemplate(spec, kind, [&](const std::string&, json& t) {
    const json tmeta = t.value("metadata", json::object());
    const json tlabels = tmeta.is_object() ? tmeta.value("labels", json::object()) : json();
    u.released = u.released || (tlabels.is_object() && tlabels.value(kManaged, "") == "true");
  });
  u.active = activeOf(status, kind);
  u.started_at = timeOf(status, "startTime");
  u.finished_at = timeOf(status, "completionTime");
  for (const auto& c : status.value("conditions", json::array())) {
    if (!c.is_object() || c.value("status", "") != "True") continue;
    const std::string t = c.value("type", "");
    if (t == kKinds[kind].done) u.complete = true;
    if (t == "Failed") u.failed = true;
    if ((u.complete || u.failed) && !u.finished_at) u.finished_at = timeOf(c, "lastTransitionTime");
  }
  u.spec = spec;
  auto before = user_jobs_.find(key);
  if (u.complete || u.failed) {
    const bool was = before != user_jobs_.end() && before->second.uid == uid &&
                     (before->second.complete || before->second.failed);
    u.ended_seen = was ? before->second.ended_seen : clock_.monotonic();
  }
  if (before != user_jobs_.end() && before->second.uid != uid) {
    // Deleted and applied again under the same name while no watch was open.
    if (reported_.erase(before->second.uid) != 0) {
      found_.push_back({key + "/" + before->second.uid, ""});
    }
  }
  const bool finished = u.complete || u.failed;
  const bool suspended = u.suspended, released = u.released;
  user_jobs_[key] = std::move(u);
  if (reported_.count(uid) != 0 || finished) return;
  reported_.insert(uid);
  lock.unlock();
  if (!suspended && !released) {
    // Running without an admission: suspended until the fleet admits it.
    auto r = api_->call("PATCH", ref.path(), writeJson(suspendPatch(kind, true)),
                        "application/merge-patch+json");
    if (!r || r->status != 200) {
      spdlog::warn("kubernetes: {} {} runs without an admission and could not be suspended",
                   kKinds[kind].kind, key);
    }
  }
  json manifest = object;
  manifest.erase("status");
  manifest["metadata"].erase("managedFields");
  // The found key: a Job's "namespace/name/uid", another kind's "plural/namespace/name/uid".
  lock.lock();
  found_.push_back({key + "/" + uid, writeJson(manifest)});
}

void KubernetesExecutor::watchLoop(int feed) {
  const std::string base = feedPath(feed);
  std::string version;
  int backoff_s = 1;
  const auto pause = [&](int seconds) {
    for (int i = 0; i < seconds * 10 && !stop_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  };
  const auto down = [&](std::string why, bool forget_version) {
    std::lock_guard lock(mu_);
    down_[feed] = std::move(why);
    synced_[feed] = false;
    if (forget_version) version.clear();
  };
  while (!stop_) {
    if (version.empty() && !relist(feed, version)) {
      bool absent;
      {
        std::lock_guard lock(mu_);
        absent = absent_[feed];
      }
      pause(absent ? 60 : backoff_s);  // an absent kind is looked for again now and then
      backoff_s = std::min(backoff_s * 2, 30);
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
      down(fmt::format("watching {} answered {}",
                       feed == kPodFeed ? "pods" : kKinds[feed - 1].plural, reply->status),
           true);
    } else {
      backoff_s = 1;
      continue;  // the server ended the watch: resume from `version`
    }
    pause(backoff_s);
    backoff_s = std::min(backoff_s * 2, 30);
  }
}

// A user's object, released for its admission: un-suspended, its pods labelled and annotated as
// Purser's and sent to the placement's nodes (per pod set). Every pod of the workload names the
// same object: the first start() of a run releases it, the others find it released.
Result<std::string> KubernetesExecutor::release(const PodLaunch& pod) {
  auto where = refOf(pod.existing, /*with_uid=*/true);
  if (!where) return fail(invalidArgument("not a Kubernetes object of this executor"));
  const Ref ref = *where;
  const std::string handle = ref.handle();
  json spec;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(handle);
    if (it != jobs_.end() && !it->second.stopping) return handle;
    if (it != jobs_.end()) {
      return fail(Error(
          ErrorCode::kResourceExhausted,
          fmt::format("{} {} is still stopping from its last run", kKinds[ref.kind].kind, handle)));
    }
    auto u = user_jobs_.find(handle);
    if (u == user_jobs_.end()) {
      return fail(invalidArgument(fmt::format("the {} {} is gone", kKinds[ref.kind].kind, handle)));
    }
    spec = u->second.spec;
  }
  // What each pod template gains: Purser's label and handle, and its pod set's nodes.
  const auto templatePatch = [&](const std::string& pod_set) {
    json tspec = json::object();
    std::vector<std::string> nodes;
    if (auto p = pod.placement.find(pod_set); p != pod.placement.end()) {
      for (const auto& n : p->second) {
        if (!n.empty() && std::find(nodes.begin(), nodes.end(), n) == nodes.end()) {
          nodes.push_back(n);
        }
      }
    }
    if (nodes.size() == 1) {
      tspec["nodeSelector"] = {{"kubernetes.io/hostname", nodes[0]}};
    } else if (nodes.size() > 1) {
      tspec["affinity"] = {
          {"nodeAffinity",
           {{"requiredDuringSchedulingIgnoredDuringExecution",
             {{"nodeSelectorTerms",
               json::array({{{"matchExpressions", json::array({{{"key", "kubernetes.io/hostname"},
                                                                {"operator", "In"},
                                                                {"values", nodes}}})}}})}}}}}};
    }
    return json{
        {"metadata", {{"labels", {{kManaged, "true"}}}, {"annotations", {{kHandle, handle}}}}},
        {"spec", tspec}};
  };
  json release = suspendPatch(ref.kind, false);
  if (ref.kind == kJob) {
    release["spec"]["template"] = templatePatch("main");
  } else if (ref.kind == kPyTorchJob) {
    forEachTemplate(spec, ref.kind, [&](const std::string& set, json&) {
      for (auto& [type, rs] : spec["pytorchReplicaSpecs"].items()) {
        std::string lower = type;
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (lower == set)
          release["spec"]["pytorchReplicaSpecs"][type]["template"] = templatePatch(set);
      }
    });
  } else {
    // A merge patch replaces a list whole: the JobSet's replicatedJobs go back in full.
    forEachTemplate(spec, ref.kind,
                    [&](const std::string& set, json& t) { t.merge_patch(templatePatch(set)); });
    release["spec"]["replicatedJobs"] = spec.value("replicatedJobs", json::array());
  }
  auto patched =
      api_->call("PATCH", ref.path(), writeJson(release), "application/merge-patch+json");
  if (!patched) return fail(patched.error());
  if (patched->status == 404) {
    return fail(invalidArgument(fmt::format("the {} {} is gone", kKinds[ref.kind].kind, handle)));
  }
  if (patched->status != 200) {
    return fail(unavailable(
        fmt::format("releasing the {} answered {}", kKinds[ref.kind].kind, patched->status)));
  }
  std::lock_guard lock(mu_);
  Job job;
  job.ns = ref.ns;
  job.name = ref.name;
  job.kind = ref.kind;
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
  // A share of a GPU is HAMi's to enforce here: it becomes HAMi's resources (its device plugin
  // then sets the limits HAMi-core reads, and pins the GPUs Purser placed it on by UUID).
  const HamiShare hami = hamiShareOf(pod.env);
  json env = json::array();
  for (const auto& [k, v] : pod.env) {
    if (k == "CUDA_VISIBLE_DEVICES") continue;  // the device plugin's to set
    if (hami.held &&
        (k.starts_with("CUDA_DEVICE_MEMORY_LIMIT") || k.starts_with("CUDA_DEVICE_SM_LIMIT"))) {
      continue;  // HAMi's device plugin sets these
    }
    env.push_back({{"name", k}, {"value", v}});
  }
  json container = {{"name", "main"}, {"image", image}, {"env", env}};
  if (!pod.argv.empty()) container["command"] = pod.argv;
  if (!pod.working_dir.empty()) container["workingDir"] = pod.working_dir;
  json requests = json::object(), limits = json::object();
  if (pod.cpu_milli > 0) requests["cpu"] = fmt::format("{}m", pod.cpu_milli);
  if (pod.memory_bytes > 0) requests["memory"] = std::to_string(pod.memory_bytes);
  if (pod.gpus > 0) limits["nvidia.com/gpu"] = std::to_string(pod.gpus);
  if (hami.memory_mib > 0) limits["nvidia.com/gpumem"] = std::to_string(hami.memory_mib);
  if (hami.cores_percent > 0) limits["nvidia.com/gpucores"] = std::to_string(hami.cores_percent);
  container["resources"] = {{"requests", requests}, {"limits", limits}};
  json labels = {{kManaged, "true"}};
  if (!pod.queue.empty()) labels["kueue.x-k8s.io/queue-name"] = pod.queue;
  json annotations = {{kHandle, handle}};
  if (hami.held && !hami.uuids.empty()) annotations["nvidia.com/use-gpuuuid"] = hami.uuids;
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
          {"spec",
           {{"restartPolicy", "Never"},
            {"automountServiceAccountToken", false},
            {"containers", json::array({container})}}}}}}}};
  if (options_.restricted) {
    // What "restricted" asks of every pod: no root, no escalation, no capabilities, a seccomp
    // profile (the image must run as a non-root user).
    json& spec = job["spec"]["template"]["spec"];
    spec["securityContext"] = {{"runAsNonRoot", true},
                               {"seccompProfile", {{"type", "RuntimeDefault"}}}};
    spec["containers"][0]["securityContext"] = {{"allowPrivilegeEscalation", false},
                                                {"capabilities", {{"drop", {"ALL"}}}}};
  }
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
  const int feed = job.existing ? job.kind + 1 : kPodFeed;
  if (!synced_[kPodFeed] || !synced_[feed]) {
    const std::string& why = !synced_[kPodFeed] ? down_[kPodFeed] : down_[feed];
    return fail(Error(ErrorCode::kUnavailable,
                      why.empty() ? "the Kubernetes API has not been listed yet" : why));
  }
  PodStatus st;
  st.started_at = job.started_at;
  st.stopping = job.stopping;
  if (job.existing) {
    // A user's object: its own status decides.
    auto u = user_jobs_.find(handle);
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
      auto code = failed_codes_.find(handle);
      // The pods are watched apart from the object: its failed pod's code may be on its way.
      if (code == failed_codes_.end() && u->second.ended_seen &&
          clock_.monotonic() - *u->second.ended_seen < std::chrono::seconds(5)) {
        return st;
      }
      ended(PodPhase::kFailed);
      if (code != failed_codes_.end()) st.exit_code = code->second.first;
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
  Ref ref;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(handle);
    if (it == jobs_.end()) return fail(unknownJob(handle));
    if (it->second.stopping) return {};
    ref = Ref{it->second.kind, it->second.ns, it->second.name};
  }
  // Suspended, as Kueue suspends a preempted Job: Kubernetes deletes its running pods.
  auto r = api_->call("PATCH", ref.path(), writeJson(suspendPatch(ref.kind, true)),
                      "application/merge-patch+json");
  if (!r) return fail(r.error());
  if (r->status != 200 && r->status != 404) {
    return fail(unavailable(fmt::format("suspending {} answered {}", handle, r->status)));
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
    auto job = jobs_.find(handle);
    if (pod == pods_.end() || pod->second.name.empty() || job == jobs_.end()) {
      return fail(unknownJob(handle));
    }
    // The pod that failed first, else the last one seen.
    auto failed = failed_codes_.find(handle);
    path = fmt::format("/api/v1/namespaces/{}/pods/{}/log?tailLines=10000", job->second.ns,
                       failed != failed_codes_.end() ? failed->second.second : pod->second.name);
  }
  auto r = api_->call("GET", path);
  if (!r) return fail(r.error());
  if (r->status != 200) return fail(unknownJob(handle));
  std::string out = std::move(r->body);
  if (out.size() > max_bytes) out.erase(0, out.size() - max_bytes);
  return out;
}

Result<void> KubernetesExecutor::adopt(const Adopted& pod) {
  // "namespace.job-name" (a Job Purser created) or a user's object ("namespace/name",
  // "plural/namespace/name").
  Job job;
  job.started_at = pod.started_at;
  if (pod.handle.find('/') != std::string::npos) {
    auto ref = refOf(pod.handle, /*with_uid=*/false);
    if (!ref) return fail(invalidArgument("not a handle of this executor"));
    job.ns = ref->ns;
    job.name = ref->name;
    job.kind = ref->kind;
    job.existing = true;
  } else {
    const size_t dot = pod.handle.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == pod.handle.size()) {
      return fail(invalidArgument("not a handle of this executor"));
    }
    job.ns = pod.handle.substr(0, dot);
    job.name = pod.handle.substr(dot + 1);
  }
  std::lock_guard lock(mu_);
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

Result<std::string> KubernetesExecutor::create(const std::string& object_json,
                                               const std::string& ns) {
  json object = parseJsonOrDiscarded(object_json);
  if (!object.is_object()) return fail(invalidArgument("not an object"));
  int kind = -1;
  for (int k = 0; k < static_cast<int>(std::size(kKinds)); ++k) {
    if (object.value("kind", "") == kKinds[k].kind) kind = k;
  }
  if (kind < 0) return fail(invalidArgument("Purser creates Jobs, JobSets and PyTorchJobs only"));
  json& meta = object["metadata"];
  if (!meta.is_object() || !meta.value("name", json()).is_string()) {
    return fail(invalidArgument("the object has no name"));
  }
  // A fresh object of the workload's namespace, suspended until it is released.
  for (const char* server_set : {"uid", "resourceVersion", "creationTimestamp", "managedFields",
                                 "generation", "selfLink", "ownerReferences"}) {
    meta.erase(server_set);
  }
  meta["namespace"] = ns;
  object.erase("status");
  std::string refused;
  forEachTemplate(object["spec"], kind, [&](const std::string& set, json& t) {
    if (!t.contains("spec") || !t["spec"].is_object()) return;
    const std::string why =
        podSecurityViolation(t["spec"], options_.restricted, options_.service_account_tokens);
    if (refused.empty() && !why.empty()) refused = fmt::format("pod set {} asks for {}", set, why);
  });
  if (!refused.empty()) {
    return fail(invalidArgument(
        fmt::format("{}, which the Pod Security Standards' {} level forbids here; Purser does "
                    "not create it",
                    refused, options_.restricted ? "restricted" : "baseline")));
  }
  object.merge_patch(suspendPatch(kind, true));
  const Ref ref{kind, ns, meta["name"].get<std::string>()};
  auto created = api_->call(
      "POST",
      fmt::format("/apis/{}/namespaces/{}/{}", kKinds[kind].group_version, ns, kKinds[kind].plural),
      writeJson(object));
  if (!created) return fail(created.error());
  const json answer = parseJsonOrDiscarded(created->body);
  if (created->status != 201 && created->status != 200) {
    return fail(invalidArgument(
        fmt::format("Kubernetes refused the {} ({}): {}", kKinds[kind].kind, created->status,
                    answer.is_object() ? answer.value("message", created->body) : created->body)));
  }
  const std::string uid =
      answer.is_object() ? answer.value("metadata", json::object()).value("uid", "") : "";
  if (uid.empty()) return fail(unavailable("the created object came back without a uid"));
  // Known now (release() needs its spec), and never reported as found: it is the workload's.
  std::lock_guard lock(mu_);
  UserJob u;
  u.kind = kind;
  u.uid = uid;
  u.suspended = true;
  u.spec = answer.value("spec", json::object());
  if (user_jobs_.count(ref.handle()) == 0) user_jobs_[ref.handle()] = u;
  reported_.insert(uid);
  return ref.handle() + "/" + uid;
}

std::optional<std::string> KubernetesExecutor::address(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto job = jobs_.find(handle);
  auto pod = pods_.find(handle);
  // A user's object has several pods under one handle: none of them is "the" pod.
  if (job == jobs_.end() || job->second.existing || pod == pods_.end() || pod->second.ip.empty() ||
      pod->second.phase != "Running") {
    return std::nullopt;
  }
  return pod->second.ip;
}

std::vector<Found> KubernetesExecutor::takeFound() {
  std::lock_guard lock(mu_);
  std::vector<Found> out;
  out.swap(found_);
  return out;
}

void KubernetesExecutor::discard(const std::string& key) {
  auto ref = refOf(key, /*with_uid=*/true);
  if (!ref) return;
  const std::string uid = key.substr(key.rfind('/') + 1);
  // Deleted only if it is still the object that was found (not one applied since under its name).
  const json options = {{"kind", "DeleteOptions"},
                        {"apiVersion", "v1"},
                        {"propagationPolicy", "Background"},
                        {"preconditions", {{"uid", uid}}}};
  auto r = api_->call("DELETE", ref->path(), writeJson(options));
  if (!r || (r->status != 200 && r->status != 202 && r->status != 404 && r->status != 409)) {
    spdlog::warn("kubernetes: {} {} was not deleted", kKinds[ref->kind].kind, ref->handle());
  }
}

}  // namespace purser::exec
