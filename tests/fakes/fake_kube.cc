#include "fakes/fake_kube.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <ctime>

namespace purser::testing {

using nlohmann::json;

namespace {

std::string now3339() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void reply(int fd, int status, const std::string& body,
           const std::string& type = "application/json") {
  const char* reason = status == 200   ? "OK"
                       : status == 201 ? "Created"
                       : status == 401 ? "Unauthorized"
                       : status == 404 ? "Not Found"
                       : status == 409 ? "Conflict"
                                       : "Error";
  FakeUpstream::writeAll(fd, "HTTP/1.1 " + std::to_string(status) + " " + reason +
                                 "\r\nContent-Type: " + type +
                                 "\r\nContent-Length: " + std::to_string(body.size()) +
                                 "\r\nConnection: close\r\n\r\n" + body);
}

json status(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
          {"code", code},     {"reason", reason},   {"message", message}};
}

std::string chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

// Splits "/a/b/c?x=1" into path segments and the query's value of `key`.
std::vector<std::string> segments(const std::string& target) {
  std::vector<std::string> out;
  const std::string path = target.substr(0, target.find('?'));
  size_t at = 1;
  while (at <= path.size()) {
    const size_t next = path.find('/', at);
    out.push_back(path.substr(at, next == std::string::npos ? std::string::npos : next - at));
    if (next == std::string::npos) break;
    at = next + 1;
  }
  return out;
}

std::string query(const std::string& target, const std::string& key) {
  const size_t q = target.find('?');
  if (q == std::string::npos) return {};
  const std::string qs = "&" + target.substr(q + 1);
  const size_t at = qs.find("&" + key + "=");
  if (at == std::string::npos) return {};
  const size_t from = at + key.size() + 2;
  return qs.substr(from, qs.find('&', from) - from);
}

}  // namespace

FakeKube::FakeKube(std::string token) : token_(std::move(token)) {
  server_ = std::make_unique<FakeUpstream>([this](int fd) { handle(fd); });
}

FakeKube::~FakeKube() {
  {
    std::lock_guard lock(mu_);
    ending_ = true;
  }
  changed_.notify_all();
  server_.reset();
}

std::vector<FakeKube::Request> FakeKube::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

json FakeKube::job(const std::string& name) const {
  std::lock_guard lock(mu_);
  for (const auto& [key, j] : jobs_) {
    if (j["metadata"]["name"] == name) return j;
  }
  return nullptr;
}

std::string FakeKube::jobOfWorkload(const std::string& prefix) const {
  std::lock_guard lock(mu_);
  for (const auto& [key, j] : jobs_) {
    const std::string name = j["metadata"]["name"];
    if (name.rfind(prefix, 0) == 0) return name;
  }
  return {};
}

int64_t FakeKube::resourceVersion() const {
  std::lock_guard lock(mu_);
  return rv_;
}

int64_t FakeKube::lastEventVersion(const std::string& kind) const {
  std::lock_guard lock(mu_);
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
    if (it->object.value("kind", "") == kind) return it->rv;
  }
  return 0;
}

void FakeKube::setNode(const json& node) {
  std::lock_guard lock(mu_);
  json n = node;
  n["apiVersion"] = "v1";
  n["kind"] = "Node";
  n["metadata"]["resourceVersion"] = std::to_string(++rv_);
  nodes_[n["metadata"]["name"].get<std::string>()] = n;
}

void FakeKube::event(const std::string& type, const json& object) {
  events_.push_back({rv_, type, object});
  changed_.notify_all();
}

namespace {

const char* pluralOf(const std::string& kind) {
  return kind == "JobSet" ? "jobsets" : kind == "PyTorchJob" ? "pytorchjobs" : "";
}

// The pod templates of a JobSet or PyTorchJob and how many pods each makes.
std::vector<std::pair<json, int64_t>> templatesOf(const json& object) {
  std::vector<std::pair<json, int64_t>> out;
  const json& spec = object["spec"];
  if (object["kind"] == "JobSet") {
    for (const auto& rj : spec.value("replicatedJobs", json::array())) {
      const int64_t n = rj.value("replicas", 1) * rj["template"]["spec"].value("parallelism", 1);
      out.emplace_back(rj["template"]["spec"]["template"], n);
    }
  } else {
    const json specs = spec.value("pytorchReplicaSpecs", json::object());
    for (const auto& [type, rs] : specs.items()) {
      out.emplace_back(rs["template"], rs.value("replicas", 1));
    }
  }
  return out;
}

}  // namespace

json FakeKube::object(const std::string& name) const {
  std::lock_guard lock(mu_);
  for (const auto& [key, o] : objects_) {
    if (o["metadata"]["name"] == name) return o;
  }
  return nullptr;
}

// A Running pod of `owner` (its job-name label) from pod template `tmpl`: its labels and
// annotations, and a loopback podIP.
void FakeKube::startPod(const std::string& ns, const std::string& owner, const json& tmpl) {
  json labels = tmpl.value("metadata", json::object()).value("labels", json::object());
  labels["job-name"] = owner;
  labels["batch.kubernetes.io/job-name"] = owner;
  json meta = {{"name", owner + "-" + std::to_string(rv_ + 1) + "-x7k2p"},
               {"namespace", ns},
               {"labels", labels},
               {"resourceVersion", std::to_string(++rv_)}};
  const json notes = tmpl.value("metadata", json::object()).value("annotations", json());
  if (notes.is_object()) meta["annotations"] = notes;
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", meta},
              {"spec", tmpl.value("spec", json::object())},
              {"status", {{"phase", "Running"}, {"startTime", now3339()}, {"podIP", "127.0.0.1"}}}};
  pods_[ns + "/" + meta["name"].get<std::string>()] = pod;
  event("ADDED", pod);
}

// Deletes those of `keys` that are Running; the pods left running (none).
int64_t FakeKube::deleteRunningPods(const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    auto p = pods_.find(k);
    if (p == pods_.end() || p->second["status"].value("phase", "") != "Running") continue;
    p->second["metadata"]["resourceVersion"] = std::to_string(++rv_);
    event("DELETED", p->second);
    pods_.erase(p);
  }
  return 0;
}

// A JobSet's or PyTorchJob's controller: its pods while it runs, none while it is suspended, and
// its conditions.
void FakeKube::reconcileObject(const std::string& key) {
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  json& o = it->second;
  const std::string ns = o["metadata"]["namespace"], name = o["metadata"]["name"];
  const bool pytorch = o["kind"] == "PyTorchJob";
  const bool suspended = pytorch
                             ? o["spec"].value("runPolicy", json::object()).value("suspend", false)
                             : o["spec"].value("suspend", false);
  json& status = o["status"];
  const json before = status;
  json conditions = status.value("conditions", json::array());
  bool done = false;
  for (const auto& c : conditions)
    done = done || (c["type"] != "Suspended" && c["status"] == "True");
  std::vector<std::string> mine;
  int64_t running = 0, succeeded = 0, failed = 0;
  for (const auto& [k, p] : pods_) {
    if (p["metadata"]["labels"].value("job-name", "") != name || p["metadata"]["namespace"] != ns) {
      continue;
    }
    mine.push_back(k);
    const std::string phase = p["status"].value("phase", "");
    running += phase == "Running";
    succeeded += phase == "Succeeded";
    failed += phase == "Failed";
  }
  int64_t expected = 0;
  for (const auto& [t, n] : templatesOf(o)) expected += n;
  const auto deleteRunning = [&] { running = deleteRunningPods(mine); };
  if (!done && failed > 0) {
    deleteRunning();
    conditions.push_back(
        {{"type", "Failed"}, {"status", "True"}, {"lastTransitionTime", now3339()}});
  } else if (!done && expected > 0 && succeeded >= expected) {
    conditions.push_back({{"type", pytorch ? "Succeeded" : "Completed"}, {"status", "True"}});
    status["completionTime"] = now3339();
  } else if (!done && suspended) {
    deleteRunning();
    status.erase("startTime");
    json kept = json::array();
    for (const auto& c : conditions) {
      if (c["type"] != "Suspended") kept.push_back(c);
    }
    kept.push_back({{"type", "Suspended"}, {"status", "True"}});
    conditions = kept;
  } else if (!done && running == 0) {
    json kept = json::array();
    for (const auto& c : conditions) {
      if (c["type"] != "Suspended") kept.push_back(c);
    }
    conditions = kept;
    status["startTime"] = now3339();
    for (const auto& [t, n] : templatesOf(o)) {
      for (int64_t i = 0; i < n; ++i) {
        startPod(ns, name, t);
        ++running;
      }
    }
  }
  status["conditions"] = conditions;
  if (pytorch) {
    status["replicaStatuses"] = {{"All", {{"active", running}}}};
  } else {
    status["replicatedJobsStatus"] = json::array({{{"name", "all"}, {"active", running}}});
  }
  if (status != before) {
    o["metadata"]["resourceVersion"] = std::to_string(++rv_);
    event("MODIFIED", o);
  }
}

void FakeKube::applyJob(const json& given) {
  if (given.value("kind", "Job") != "Job") {
    std::lock_guard lock(mu_);
    json o = given;
    const std::string ns = o["metadata"].value("namespace", "default");
    o["metadata"]["namespace"] = ns;
    o["metadata"]["resourceVersion"] = std::to_string(++rv_);
    o["metadata"]["uid"] = "uid-" + std::to_string(rv_) + "-9f8e7d6c";
    o["status"] = json::object();
    const std::string key = std::string(pluralOf(o["kind"])) + "/" + ns + "/" +
                            o["metadata"]["name"].get<std::string>();
    objects_[key] = o;
    event("ADDED", o);
    reconcileObject(key);
    return;
  }
  std::lock_guard lock(mu_);
  json job = given;
  job["apiVersion"] = "batch/v1";
  job["kind"] = "Job";
  const std::string ns = job["metadata"].value("namespace", "default");
  job["metadata"]["namespace"] = ns;
  job["metadata"]["resourceVersion"] = std::to_string(++rv_);
  job["metadata"]["uid"] = "uid-" + std::to_string(rv_) + "-0a1b2c3d";
  job["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}}});
  job["status"] = json::object();
  const std::string key = ns + "/" + job["metadata"]["name"].get<std::string>();
  jobs_[key] = job;
  event("ADDED", job);
  reconcile(key);
}

bool FakeKube::deleteJob(const std::string& ns, const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(ns + "/" + name);
  if (it == jobs_.end()) return false;
  for (auto p = pods_.begin(); p != pods_.end();) {
    if (p->second["metadata"]["labels"].value("job-name", "") == name) {
      p->second["metadata"]["resourceVersion"] = std::to_string(++rv_);
      event("DELETED", p->second);
      p = pods_.erase(p);
    } else {
      ++p;
    }
  }
  it->second["metadata"]["resourceVersion"] = std::to_string(++rv_);
  event("DELETED", it->second);
  jobs_.erase(it);
  return true;
}

int FakeKube::runningPods(const std::string& job_name) const {
  std::lock_guard lock(mu_);
  int n = 0;
  for (const auto& [key, pod] : pods_) {
    if (pod["metadata"]["labels"].value("job-name", "") == job_name &&
        pod["status"].value("phase", "") == "Running") {
      ++n;
    }
  }
  return n;
}

// The Job controller, for the Job at `key`: pods for a running Job, none for a suspended one,
// and the Job's status (startTime, active, succeeded, failed, conditions) from its pods.
void FakeKube::reconcile(const std::string& key) {
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return;
  json& job = it->second;
  const std::string ns = job["metadata"]["namespace"], name = job["metadata"]["name"];
  json& status = job["status"];
  const json before = status;
  const bool suspended = job["spec"].value("suspend", false);
  const auto finished = [&](const char* type) {
    for (const auto& c : status.value("conditions", json::array())) {
      if (c["type"] == type && c["status"] == "True") return true;
    }
    return false;
  };
  const bool done = finished("Complete") || finished("Failed");
  std::vector<std::string> mine;
  for (const auto& [k, p] : pods_) {
    if (p["metadata"]["labels"].value("job-name", "") == name && p["metadata"]["namespace"] == ns)
      mine.push_back(k);
  }
  int64_t active = 0, succeeded = 0, failed = 0;
  for (const auto& k : mine) {
    const std::string phase = pods_[k]["status"].value("phase", "");
    active += phase == "Running" ? 1 : 0;
    succeeded += phase == "Succeeded" ? 1 : 0;
    failed += phase == "Failed" ? 1 : 0;
  }
  const int64_t parallelism = job["spec"].value("parallelism", 1);
  const int64_t backoff = job["spec"].value("backoffLimit", 6);
  const int64_t completions = job["spec"].value("completions", 1);
  const auto deleteRunning = [&] { active = deleteRunningPods(mine); };
  json conditions = status.value("conditions", json::array());
  if (!done && failed > backoff) {
    deleteRunning();
    conditions.push_back({{"type", "Failed"},
                          {"status", "True"},
                          {"reason", "BackoffLimitExceeded"},
                          {"lastTransitionTime", now3339()}});
  } else if (!done && succeeded >= completions) {
    deleteRunning();
    conditions.push_back({{"type", "Complete"}, {"status", "True"}});
    status["completionTime"] = now3339();
  } else if (!done && suspended) {
    deleteRunning();
    status.erase("startTime");
    bool noted = false;
    for (auto& c : conditions) {
      if (c["type"] == "Suspended") {
        c["status"] = "True";
        noted = true;
      }
    }
    if (!noted) conditions.push_back({{"type", "Suspended"}, {"status", "True"}});
  } else if (!done) {
    for (auto& c : conditions) {
      if (c["type"] == "Suspended") c["status"] = "False";
    }
    if (!status.contains("startTime")) status["startTime"] = now3339();
    // Enough pods running (a failed one is replaced while the backoff limit allows).
    const int64_t wanted = std::min(parallelism, completions - succeeded);
    for (int64_t i = active; i < wanted; ++i) {
      startPod(ns, name, job["spec"]["template"]);
      ++active;
    }
  }
  status["conditions"] = conditions;
  status["active"] = active;
  status["succeeded"] = succeeded;
  status["failed"] = failed;
  if (status != before) {
    job["metadata"]["resourceVersion"] = std::to_string(++rv_);
    event("MODIFIED", job);
  }
}

bool FakeKube::finishPod(const std::string& job_name, int exit_code, const std::string& log) {
  std::lock_guard lock(mu_);
  for (auto& [key, pod] : pods_) {
    if (pod["metadata"]["labels"].value("job-name", "") != job_name) continue;
    if (pod["status"].value("phase", "") != "Running") continue;
    pod["status"]["phase"] = exit_code == 0 ? "Succeeded" : "Failed";
    pod["status"]["containerStatuses"] =
        json::array({{{"name", "main"},
                      {"state",
                       {{"terminated",
                         {{"exitCode", exit_code},
                          {"finishedAt", now3339()},
                          {"reason", exit_code == 0 ? "Completed" : "Error"}}}}}}});
    pod["metadata"]["resourceVersion"] = std::to_string(++rv_);
    logs_[pod["metadata"]["name"]] = log;
    event("MODIFIED", pod);
    const std::string ns = pod["metadata"]["namespace"];
    reconcile(ns + "/" + job_name);
    for (const char* plural : {"jobsets", "pytorchjobs"}) {
      reconcileObject(std::string(plural) + "/" + ns + "/" + job_name);
    }
    return true;
  }
  return false;
}

void FakeKube::dropWatches() {
  {
    std::lock_guard lock(mu_);
    ++drops_;
  }
  changed_.notify_all();
}

void FakeKube::compact() {
  std::lock_guard lock(mu_);
  kept_from_ = ++rv_;  // every version seen so far is now too old
  events_.clear();
}

void FakeKube::watch(int fd, int64_t from, const std::string& kind) {
  std::unique_lock lock(mu_);
  if (from < kept_from_) {
    lock.unlock();
    FakeUpstream::writeAll(
        fd,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n" +
            chunk(json{{"type", "ERROR"},
                       {"object", status(410, "Expired", "too old resource version")}}
                      .dump() +
                  "\n") +
            "0\r\n\r\n");
    return;
  }
  const int64_t drops = drops_;
  lock.unlock();
  FakeUpstream::writeAll(fd,
                         "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n");
  lock.lock();
  int64_t seen = from;
  while (!ending_ && drops_ == drops) {
    std::string out;
    for (const auto& e : events_) {
      if (e.rv <= seen) continue;
      seen = e.rv;
      if (e.object.value("kind", "") != kind) continue;
      out += chunk(json{{"type", e.type}, {"object", e.object}}.dump() + "\n");
    }
    if (!out.empty()) {
      lock.unlock();
      FakeUpstream::writeAll(fd, out);
      lock.lock();
      continue;
    }
    changed_.wait_for(lock, std::chrono::milliseconds(100));
  }
  // Dropped: the connection ends without its last chunk.
  lock.unlock();
  ::shutdown(fd, SHUT_RDWR);
}

void FakeKube::handle(int fd) {
  const std::string raw = FakeUpstream::readRequest(fd);
  const size_t line_end = raw.find("\r\n");
  const size_t head_end = raw.find("\r\n\r\n");
  if (line_end == std::string::npos || head_end == std::string::npos) return;
  const std::string line = raw.substr(0, line_end);
  const size_t s1 = line.find(' '), s2 = line.find(' ', s1 + 1);
  Request req;
  req.method = line.substr(0, s1);
  req.target = line.substr(s1 + 1, s2 - s1 - 1);
  req.body = raw.substr(head_end + 4);
  const std::string head = raw.substr(0, head_end);
  std::string auth;
  for (size_t at = head.find("\r\n"); at != std::string::npos;) {
    const size_t next = head.find("\r\n", at + 2);
    const std::string h =
        head.substr(at + 2, next == std::string::npos ? std::string::npos : next - at - 2);
    const std::string lower = [&] {
      std::string l = h.substr(0, h.find(':'));
      for (char& c : l) c = static_cast<char>(std::tolower(c));
      return l;
    }();
    std::string value = h.substr(h.find(':') + 1);
    value.erase(0, value.find_first_not_of(' '));
    if (lower == "authorization") auth = value;
    if (lower == "content-type") req.content_type = value;
    at = next;
  }
  {
    std::lock_guard lock(mu_);
    requests_.push_back(req);
  }
  if (auth != "Bearer " + token_) {
    reply(fd, 401, status(401, "Unauthorized", "Unauthorized").dump());
    return;
  }
  const auto seg = segments(req.target);
  // /api/v1/nodes
  if (req.method == "GET" && seg.size() == 3 && seg[0] == "api" && seg[2] == "nodes") {
    std::lock_guard lock(mu_);
    json items = json::array();
    for (const auto& [name, node] : nodes_) items.push_back(node);
    reply(fd, 200,
          json{{"kind", "NodeList"},
               {"apiVersion", "v1"},
               {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
               {"items", items}}
              .dump());
    return;
  }
  // /api/v1/pods[?watch=1]
  if (req.method == "GET" && seg.size() == 3 && seg[0] == "api" && seg[2] == "pods") {
    if (query(req.target, "watch") == "1") {
      watch(fd, std::stoll("0" + query(req.target, "resourceVersion")), "Pod");
      return;
    }
    std::lock_guard lock(mu_);
    json items = json::array();
    for (const auto& [key, pod] : pods_) items.push_back(pod);
    reply(fd, 200,
          json{{"kind", "PodList"},
               {"apiVersion", "v1"},
               {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
               {"items", items}}
              .dump());
    return;
  }
  // /api/v1/namespaces/NS/pods/POD/log
  if (req.method == "GET" && seg.size() == 7 && seg[4] == "pods" && seg[6] == "log") {
    std::lock_guard lock(mu_);
    auto it = logs_.find(seg[5]);
    reply(fd, it == logs_.end() ? 404 : 200, it == logs_.end() ? "" : it->second, "text/plain");
    return;
  }
  // /apis/jobset.x-k8s.io/v1alpha2/jobsets, /apis/kubeflow.org/v1/pytorchjobs [?watch=1] and
  // .../namespaces/NS/PLURAL/NAME
  if (seg.size() >= 4 && seg[0] == "apis" &&
      ((seg[1] == "jobset.x-k8s.io" && seg[2] == "v1alpha2") ||
       (seg[1] == "kubeflow.org" && seg[2] == "v1"))) {
    const std::string plural = seg[1] == "kubeflow.org" ? "pytorchjobs" : "jobsets";
    const std::string kind = seg[1] == "kubeflow.org" ? "PyTorchJob" : "JobSet";
    if (req.method == "GET" && seg.size() == 4 && seg[3] == plural) {
      if (query(req.target, "watch") == "1") {
        watch(fd, std::stoll("0" + query(req.target, "resourceVersion")), kind);
        return;
      }
      std::lock_guard lock(mu_);
      json items = json::array();
      for (const auto& [key, o] : objects_) {
        if (o["kind"] == kind) items.push_back(o);
      }
      reply(fd, 200,
            json{{"kind", kind + "List"},
                 {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
                 {"items", items}}
                .dump());
      return;
    }
    if (req.method == "POST" && seg.size() == 6 && seg[3] == "namespaces" && seg[5] == plural) {
      json o = json::parse(req.body, nullptr, false);
      if (!o.is_object() || !o["metadata"]["name"].is_string() || o["kind"] != kind) {
        reply(fd, 400, status(400, "BadRequest", "not a " + kind).dump());
        return;
      }
      std::lock_guard lock(mu_);
      const std::string key =
          plural + "/" + seg[4] + "/" + o["metadata"]["name"].get<std::string>();
      if (objects_.count(key) != 0) {
        reply(fd, 409, status(409, "AlreadyExists", plural + " already exists").dump());
        return;
      }
      o["metadata"]["namespace"] = seg[4];
      o["metadata"]["resourceVersion"] = std::to_string(++rv_);
      o["metadata"]["uid"] = "uid-" + std::to_string(rv_) + "-5a4b3c2d";
      o["status"] = json::object();
      objects_[key] = o;
      event("ADDED", o);
      reconcileObject(key);
      reply(fd, 201, objects_[key].dump());
      return;
    }
    if (seg.size() == 7 && seg[3] == "namespaces" && seg[5] == plural) {
      std::lock_guard lock(mu_);
      const std::string key = plural + "/" + seg[4] + "/" + seg[6];
      auto it = objects_.find(key);
      if (it == objects_.end()) {
        reply(fd, 404, status(404, "NotFound", plural + " \"" + seg[6] + "\" not found").dump());
        return;
      }
      if (req.method == "PATCH") {
        const json patch = json::parse(req.body, nullptr, false);
        if (req.content_type != "application/merge-patch+json" || !patch.is_object()) {
          reply(fd, 415, status(415, "UnsupportedMediaType", "expected a merge patch").dump());
          return;
        }
        it->second.merge_patch(patch);
        it->second["metadata"]["resourceVersion"] = std::to_string(++rv_);
        event("MODIFIED", it->second);
        reconcileObject(key);
        reply(fd, 200, objects_[key].dump());
        return;
      }
      if (req.method == "DELETE") {
        it->second["metadata"]["resourceVersion"] = std::to_string(++rv_);
        event("DELETED", it->second);
        objects_.erase(it);
        reply(fd, 200, status(200, "", "").dump());
        return;
      }
    }
    reply(fd, 404, status(404, "NotFound", "the fake serves no " + req.target).dump());
    return;
  }
  // /apis/batch/v1/jobs?labelSelector=kueue.x-k8s.io%2Fqueue-name[&watch=1]
  if (req.method == "GET" && seg.size() == 4 && seg[0] == "apis" && seg[3] == "jobs") {
    if (query(req.target, "watch") == "1") {
      watch(fd, std::stoll("0" + query(req.target, "resourceVersion")), "Job");
      return;
    }
    std::lock_guard lock(mu_);
    json items = json::array();
    for (const auto& [key, job] : jobs_) {
      if (job["metadata"]["labels"].contains("kueue.x-k8s.io/queue-name")) items.push_back(job);
    }
    reply(fd, 200,
          json{{"kind", "JobList"},
               {"apiVersion", "batch/v1"},
               {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
               {"items", items}}
              .dump());
    return;
  }
  // /apis/batch/v1/namespaces/NS/jobs[/NAME]
  if (seg.size() >= 6 && seg[0] == "apis" && seg[1] == "batch" && seg[5] == "jobs") {
    const std::string ns = seg[4];
    std::lock_guard lock(mu_);
    if (req.method == "POST" && seg.size() == 6) {
      json job = json::parse(req.body, nullptr, false);
      if (!job.is_object() || !job["metadata"]["name"].is_string()) {
        reply(fd, 400, status(400, "BadRequest", "not a Job").dump());
        return;
      }
      const std::string key = ns + "/" + job["metadata"]["name"].get<std::string>();
      if (jobs_.count(key) != 0) {
        reply(fd, 409, status(409, "AlreadyExists", "jobs.batch already exists").dump());
        return;
      }
      job["metadata"]["resourceVersion"] = std::to_string(++rv_);
      job["metadata"]["uid"] = "uid-" + std::to_string(rv_);
      job["status"] = json::object();
      jobs_[key] = job;
      event("ADDED", job);
      reconcile(key);
      reply(fd, 201, jobs_[key].dump());
      return;
    }
    if (seg.size() != 7) {
      reply(fd, 404, status(404, "NotFound", "no such path").dump());
      return;
    }
    const std::string key = ns + "/" + seg[6];
    auto it = jobs_.find(key);
    if (it == jobs_.end()) {
      reply(fd, 404, status(404, "NotFound", "jobs.batch \"" + seg[6] + "\" not found").dump());
      return;
    }
    json& job = it->second;
    const auto deletePods = [&] {
      for (auto p = pods_.begin(); p != pods_.end();) {
        if (p->second["metadata"]["labels"].value("job-name", "") == seg[6]) {
          p->second["metadata"]["resourceVersion"] = std::to_string(++rv_);
          event("DELETED", p->second);
          p = pods_.erase(p);
        } else {
          ++p;
        }
      }
    };
    if (req.method == "PATCH") {
      const json patch = json::parse(req.body, nullptr, false);
      if (req.content_type != "application/merge-patch+json" || !patch.is_object()) {
        reply(fd, 415, status(415, "UnsupportedMediaType", "expected a merge patch").dump());
        return;
      }
      job.merge_patch(patch);
      job["metadata"]["resourceVersion"] = std::to_string(++rv_);
      event("MODIFIED", job);
      reconcile(key);
      reply(fd, 200, jobs_[key].dump());
      return;
    }
    if (req.method == "DELETE") {
      const json options = json::parse(req.body.empty() ? "{}" : req.body, nullptr, false);
      if (options.is_object() && options.contains("preconditions") &&
          options["preconditions"].value("uid", "") != job["metadata"].value("uid", "")) {
        reply(fd, 409, status(409, "Conflict", "Precondition failed: UID in precondition").dump());
        return;
      }
      deletePods();
      job["metadata"]["resourceVersion"] = std::to_string(++rv_);
      event("DELETED", job);
      jobs_.erase(it);
      reply(fd, 200, status(200, "", "").dump());
      return;
    }
    if (req.method == "GET") {
      reply(fd, 200, job.dump());
      return;
    }
  }
  reply(fd, 404, status(404, "NotFound", "the fake serves no " + req.target).dump());
}

}  // namespace purser::testing
