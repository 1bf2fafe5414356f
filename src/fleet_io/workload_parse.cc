// Reading workloads: Kueue's Workload, batch Jobs, JobSets, PyTorchJobs and pods (see manifest.h).
#include "fleet_io/manifest.h"

#include "fleet_io/kueue_objects.h"

namespace purser::fleet {

using config::YamlReader;
using Map = YamlReader::Map;
using namespace kueue_objects;  // NOLINT(google-build-using-namespace): this reader's own
                                // vocabulary

namespace {

class WorkloadParser {
 public:
  explicit WorkloadParser(ObjectReader& o) : o_(o), r_(o.reader()) {}

  // Kueue's Workload object.
  Workload kueue(Map& top) {
    Workload w;
    std::string api, kind;
    top.required("apiVersion", api);
    top.required("kind", kind);
    if (!kind.empty() && kind != "Workload") {
      r_.addError(top.get("kind"), top.child("kind"),
                  fmt::format("expected a Workload, got \"{}\"", kind));
    }
    std::optional<Version> v;
    if (api == "kueue.x-k8s.io/v1beta1") v = Version::kV1beta1;
    if (api == "kueue.x-k8s.io/v1beta2") v = Version::kV1beta2;
    if (!api.empty() && !v) {
      r_.addError(top.get("apiVersion"), top.child("apiVersion"),
                  fmt::format("expected kueue.x-k8s.io/v1beta1 or v1beta2, got \"{}\"", api));
    }
    const Meta meta = identity(top, w);
    serveAnnotation(meta, top, w);

    Map spec = top.map("spec");
    spec.optional("queueName", w.local_queue);
    if (w.local_queue.empty() && meta.labels.count(kQueueLabel) != 0) {
      w.local_queue = meta.labels.at(kQueueLabel);
    }
    std::optional<int64_t> priority = o_.integer(spec, "priority", INT32_MIN, INT32_MAX);
    if (priority) w.priority = static_cast<int32_t>(*priority);
    // Purser knows WorkloadPriorityClasses; a pod PriorityClass contributes spec.priority only.
    std::string class_name;
    bool workload_class = false;
    if (v == Version::kV1beta2) {
      if (spec.present("priorityClassRef") && !isNull(spec.get("priorityClassRef"))) {
        Map ref = spec.map("priorityClassRef");
        std::string group, ref_kind;
        ref.requiredChoice("group", group, {"kueue.x-k8s.io", "scheduling.k8s.io"});
        ref.requiredChoice("kind", ref_kind, {"WorkloadPriorityClass", "PriorityClass"});
        ref.required("name", class_name);
        ref.finish();
        workload_class = ref_kind == "WorkloadPriorityClass";
      }
      o_.renamed(spec, "priorityClassName", "v1beta1", "priorityClassRef");
    } else {
      spec.optional("priorityClassName", class_name);
      std::string source;
      spec.optionalChoice(
          "priorityClassSource", source,
          {"", "kueue.x-k8s.io/workloadpriorityclass", "scheduling.k8s.io/priorityclass"});
      workload_class = source == "kueue.x-k8s.io/workloadpriorityclass";
    }
    if (workload_class) {
      w.priority_class = class_name;
    } else if (!class_name.empty()) {
      o_.warn(o_.at(), spec.child("priority"),
              fmt::format("pod PriorityClass \"{}\" is not known to Purser; the workload's "
                          "priority is spec.priority ({})",
                          class_name, w.priority));
    }
    bool active = true;
    spec.optional("active", active);
    if (!active) {
      r_.addError(spec.get("active"), spec.child("active"),
                  "an inactive Workload cannot be submitted to Purser");
    }
    if (auto m = o_.integer(spec, "maximumExecutionTimeSeconds", 1, kMaxExecSeconds)) {
      w.max_execution_seconds = *m;
    }
    if (!spec.present("podSets")) {
      r_.addError(spec.node().IsDefined() ? spec.node() : top.node(), spec.child("podSets"),
                  "required field is missing");
    } else {
      w.pod_sets = kueuePodSets(spec.get("podSets"), spec.child("podSets"));
    }
    spec.finish();
    (void)top.present("status");
    top.finish();
    return w;
  }

  // A batch/v1 Job, as Kueue's job integration sees one: a single pod set "main" of
  // min(parallelism, completions) pods (parallelism defaults to 1, as Kubernetes defaults it),
  // per-pod requests from the pod template; the queue from the kueue.x-k8s.io/queue-name label, a
  // WorkloadPriorityClass from the kueue.x-k8s.io/priority-class label, and partial admission
  // down to the kueue.x-k8s.io/job-min-parallelism annotation. The rest of the Job (backoff,
  // completion mode, deadlines, ...) is for whatever runs it.
  // What a Job, a JobSet and a PyTorchJob share: the API version, the identity, the served
  // model, the queue and priority-class labels.
  Meta jobHeader(Map& top, Workload& w, const std::string& expected_api, const char* what) {
    std::string api, kind;
    top.required("apiVersion", api);
    top.required("kind", kind);
    if (api != expected_api) {
      r_.addError(top.get("apiVersion"), top.child("apiVersion"),
                  fmt::format("a {} is {}, got \"{}\"", what, expected_api, api));
    }
    Meta meta = identity(top, w);
    serveAnnotation(meta, top, w);
    if (auto q = meta.labels.find(kQueueLabel); q != meta.labels.end()) w.local_queue = q->second;
    if (w.local_queue.empty()) {
      r_.addError(top.get("metadata"), "metadata.labels",
                  fmt::format("a {} is queued by its \"{}\" label, naming a LocalQueue of its "
                              "namespace; add it to metadata.labels",
                              what, kQueueLabel));
    }
    if (auto c = meta.labels.find(kPriorityClassLabel); c != meta.labels.end()) {
      w.priority_class = c->second;
    }
    if (auto m = meta.labels.find(kMaxExecLabel); m != meta.labels.end()) {
      int64_t seconds = 0;
      const auto [end, ec] =
          std::from_chars(m->second.data(), m->second.data() + m->second.size(), seconds);
      if (ec != std::errc() || end != m->second.data() + m->second.size() || seconds < 1 ||
          seconds > kMaxExecSeconds) {
        r_.addError(top.get("metadata"), "metadata.labels",
                    fmt::format("\"{}\" must be a whole number of seconds from 1 to {}, got \"{}\"",
                                kMaxExecLabel, kMaxExecSeconds, m->second));
      } else {
        w.max_execution_seconds = seconds;
      }
    }
    return meta;
  }

  // A pod template ({metadata, spec}) into `ps`: requests, scheduling and what the pod runs.
  void podTemplate(Map& t, PodSet& ps, const Workload& w) {
    if (t.present("metadata")) templateAnnotations(t.get("metadata"), t.child("metadata"), ps);
    Map pod = t.map("spec");
    std::string pod_class;
    pod.optional("priorityClassName", pod_class);
    if (!pod_class.empty() && w.priority_class.empty()) {
      o_.warn(keyMark(pod, "priorityClassName"), pod.child("priorityClassName"),
              fmt::format("pod PriorityClass \"{}\" is not known to Purser; give the workload a "
                          "WorkloadPriorityClass with the \"{}\" label",
                          pod_class, kPriorityClassLabel));
    }
    podSpec(pod, ps);
    t.finish();
  }

  // A JobSet (jobset.x-k8s.io/v1alpha2), as Kueue's JobSet integration sees one: a pod set per
  // replicated Job, named as it is, of replicas × min(parallelism, completions) pods.
  Workload jobSet(Map& top) {
    Workload w;
    jobHeader(top, w, "jobset.x-k8s.io/v1alpha2", "JobSet");
    Map spec = top.map("spec");
    const YAML::Node list = spec.get("replicatedJobs");
    const std::string path = spec.child("replicatedJobs");
    if (!list.IsSequence() || list.size() == 0) {
      r_.addError(isNull(list) ? spec.node() : list, path, "expected a non-empty list");
    }
    for (size_t i = 0; list.IsSequence() && i < list.size(); ++i) {
      Map rj = r_.map(list[i], fmt::format("{}[{}]", path, i));
      PodSet ps;
      rj.required("name", ps.name);
      int64_t replicas = 1;
      if (auto r = o_.integer(rj, "replicas", 0, 1'000'000)) replicas = *r;
      Map jt = rj.map("template");
      (void)jt.present("metadata");
      Map js = jt.map("spec");
      int64_t per_job = 1;
      if (auto p = o_.integer(js, "parallelism", 0, INT32_MAX)) per_job = *p;
      if (auto c = o_.integer(js, "completions", 0, INT32_MAX); c && *c < per_job) per_job = *c;
      ps.count = replicas * per_job;
      Map t = js.map("template");
      podTemplate(t, ps, w);
      for (const char* runner : {"backoffLimit", "completionMode", "activeDeadlineSeconds",
                                 "ttlSecondsAfterFinished", "podFailurePolicy", "suspend"}) {
        (void)js.present(runner);
      }
      js.finish();
      jt.finish();
      rj.finish();
      addPodSet(w.pod_sets, std::move(ps), rj);
    }
    for (const char* runner : {"network", "successPolicy", "failurePolicy", "startupPolicy",
                               "suspend", "coordinator", "managedBy", "ttlSecondsAfterFinished"}) {
      (void)spec.present(runner);
    }
    spec.finish();
    (void)top.present("status");
    top.finish();
    return w;
  }

  // A Kubeflow PyTorchJob (kubeflow.org/v1), as Kueue's integration sees one: a pod set per
  // replica type, named in lower case ("master", "worker"), of its replicas (default 1).
  Workload pytorchJob(Map& top) {
    Workload w;
    jobHeader(top, w, "kubeflow.org/v1", "PyTorchJob");
    Map spec = top.map("spec");
    const YAML::Node specs = spec.get("pytorchReplicaSpecs");
    const std::string path = spec.child("pytorchReplicaSpecs");
    if (!specs.IsMap() || specs.size() == 0) {
      r_.addError(isNull(specs) ? spec.node() : specs, path,
                  "expected replica specs such as Master and Worker");
    }
    for (auto it = specs.IsMap() ? specs.begin() : YAML::const_iterator();
         specs.IsMap() && it != specs.end(); ++it) {
      const std::string type = it->first.IsScalar() ? it->first.Scalar() : std::string();
      Map rs = r_.map(it->second, path + "." + type);
      PodSet ps;
      ps.name = type;
      std::transform(ps.name.begin(), ps.name.end(), ps.name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      ps.count = 1;
      if (auto r = o_.integer(rs, "replicas", 0, 1'000'000)) ps.count = *r;
      (void)rs.present("restartPolicy");
      Map t = rs.map("template");
      podTemplate(t, ps, w);
      rs.finish();
      addPodSet(w.pod_sets, std::move(ps), rs);
    }
    for (const char* runner : {"runPolicy", "elasticPolicy", "nprocPerNode"}) {
      (void)spec.present(runner);
    }
    spec.finish();
    (void)top.present("status");
    top.finish();
    return w;
  }

  Workload job(Map& top) {
    Workload w;
    const Meta meta = jobHeader(top, w, "batch/v1", "Job");
    Map spec = top.map("spec");
    int64_t parallelism = 1;
    if (auto p = o_.integer(spec, "parallelism", 0, INT32_MAX)) parallelism = *p;
    PodSet ps;
    ps.name = "main";  // Kueue's name for a Job's only pod set
    ps.count = parallelism;
    if (auto c = o_.integer(spec, "completions", 0, INT32_MAX); c && *c < ps.count) ps.count = *c;
    if (auto a = meta.annotations.find(kMinParallelismAnnotation); a != meta.annotations.end()) {
      int64_t least = 0;
      const auto [end, ec] =
          std::from_chars(a->second.data(), a->second.data() + a->second.size(), least);
      if (ec != std::errc() || end != a->second.data() + a->second.size() || least < 1 ||
          least > ps.count) {
        r_.addError(top.get("metadata"), "metadata.annotations",
                    fmt::format("\"{}\" must be a whole number from 1 to the Job's {} pods, got "
                                "\"{}\"",
                                kMinParallelismAnnotation, ps.count, a->second));
      } else if (least < ps.count) {
        ps.min_count = least;
      }
    }
    if (!spec.present("template")) {
      r_.addError(spec.node().IsDefined() ? spec.node() : top.node(), spec.child("template"),
                  "required field is missing");
    } else {
      Map t = spec.map("template");
      podTemplate(t, ps, w);
    }
    // A deadline of the Job's own bounds each run too (the shorter of it and Kueue's label).
    if (auto d = o_.integer(spec, "activeDeadlineSeconds", 1, kMaxExecSeconds)) {
      if (w.max_execution_seconds == 0 || *d < w.max_execution_seconds) {
        w.max_execution_seconds = *d;
      }
    }
    for (const char* runner :
         {"suspend", "backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes",
          "ttlSecondsAfterFinished", "completionMode", "podFailurePolicy", "successPolicy",
          "manualSelector", "selector", "podReplacementPolicy", "managedBy"}) {
      (void)spec.present(runner);  // for whatever runs the Job, not for admission
    }
    spec.finish();
    (void)top.present("status");
    top.finish();
    w.pod_sets.push_back(std::move(ps));
    return w;
  }

  // Purser's short form.
  Workload shortForm(Map& top) {
    Workload w;
    std::string name, ns = kDefaultNamespace;
    top.required("name", name);
    namespace_given_ = top.has("namespace");
    top.optional("namespace", ns);
    if (!name.empty() && !isDnsSubdomain(name)) {
      r_.addError(top.get("name"), top.child("name"),
                  fmt::format("\"{}\" is not a valid name", name));
    }
    if (!isDnsLabel(ns)) {
      r_.addError(top.get("namespace"), top.child("namespace"),
                  fmt::format("\"{}\" is not a valid namespace", ns));
    }
    setName(w, name, ns);
    top.required("queue", w.local_queue);
    top.optional("priority_class", w.priority_class);
    if (auto m = o_.integer(top, "max_execution_seconds", 1, kMaxExecSeconds)) {
      w.max_execution_seconds = *m;
    }
    if (auto p = o_.integer(top, "priority", INT32_MIN, INT32_MAX)) {
      w.priority = static_cast<int32_t>(*p);
    }
    const YAML::Node sets = top.get("pod_sets");
    const std::string path = top.child("pod_sets");
    if (!sets.IsSequence() || sets.size() == 0) {
      r_.addError(isNull(sets) ? top.node() : sets, path, "expected a non-empty list of pod sets");
    }
    for (size_t i = 0; sets.IsSequence() && i < sets.size(); ++i) {
      Map m = r_.map(sets[i], fmt::format("{}[{}]", path, i));
      PodSet ps;
      m.required("name", ps.name);
      counts(m, "count", "min_count", ps);
      if (m.present("requests"))
        ps.requests = o_.resourceList(m.get("requests"), m.child("requests"));
      if (m.present("limits")) {
        ps.limits = o_.resourceList(m.get("limits"), m.child("limits"));
        for (const auto& [name, v] : ps.limits) ps.requests.emplace(name, v);  // as Kueue does
      }
      if (m.present("tolerations")) {
        ps.tolerations = o_.tolerations(m.get("tolerations"), m.child("tolerations"));
      }
      if (m.present("node_selector")) {
        ps.node_selector = o_.stringMap(m.get("node_selector"), m.child("node_selector"));
      }
      if (m.present("topology")) topology(m.map("topology"), ps);
      m.optionalStrings("use_gpu_types", ps.use_gpu_types);
      m.optionalStrings("nouse_gpu_types", ps.nouse_gpu_types);
      m.optionalStrings("command", ps.command);
      m.optional("working_dir", ps.working_dir);
      m.optional("image", ps.image);
      if (m.present("env")) ps.env = o_.stringMap(m.get("env"), m.child("env"));
      m.finish();
      addPodSet(w.pod_sets, std::move(ps), m);
    }
    if (top.present("serve")) w.serve = serve(top.map("serve"));
    top.finish();
    return w;
  }

  bool namespaceGiven() const { return namespace_given_; }

 private:
  bool namespace_given_ = false;

  // A served model: {route, port, model, api?, health?, metrics?, engine?}.
  std::optional<ServeSpec> serve(Map m) {
    ServeSpec s;
    m.required("route", s.route);
    m.required("model", s.model);
    m.optionalChoice("api", s.api, {"openai", "anthropic"});
    m.optional("health", s.health);
    m.optional("metrics", s.metrics);
    m.optionalChoice("engine", s.engine, {"vllm", "sglang", "tgi"});
    if (!m.present("port")) {
      r_.addError(m.node(), m.child("port"), "required field is missing");
    } else if (auto p = o_.integer(m, "port", 1, 65535)) {
      s.port = *p;
    }
    // Paths on the replica's own address and port: "/" and URL path characters, nothing that
    // could end the request line (a CR, an LF, a space) or add a query or a host.
    if (!s.health.empty() && !isUrlPath(s.health)) {
      r_.addError(m.get("health"), m.child("health"),
                  "expected a path such as /health: \"/\" then letters, digits and "
                  "-._~!$&'()*+,;=:@%/, at most 256 bytes");
    }
    if (!s.metrics.empty() && !isUrlPath(s.metrics)) {
      r_.addError(m.get("metrics"), m.child("metrics"),
                  "expected a path such as /metrics (\"/\" then letters, digits and "
                  "-._~!$&'()*+,;=:@%/, at most 256 bytes), or \"\" for none");
    }
    m.finish();
    return s;
  }
  // The `purser.dev/serve` annotation of a Job or a Workload: the same map, as YAML or JSON text.
  void serveAnnotation(const Meta& meta, Map& top, Workload& w) {
    auto a = meta.annotations.find(kServeAnnotation);
    if (a == meta.annotations.end()) return;
    const std::string path = std::string("metadata.annotations.") + kServeAnnotation;
    auto parsed = config::parseYaml(a->second, path);
    if (!parsed) {
      r_.addError(top.get("metadata"), path,
                  fmt::format("not a YAML or JSON map: {}", parsed.error().message));
      return;
    }
    const YAML::Node node = *parsed;
    if (!node.IsMap()) {
      r_.addError(top.get("metadata"), path,
                  "expected a map such as {route: chat, port: 8000, model: llama-3-8b}");
      return;
    }
    w.serve = serve(r_.map(node, path));
  }

  // An object's metadata as the workload's name, namespace, uid and creation time.
  Meta identity(Map& top, Workload& w) {
    Meta meta = readMeta(o_, top, true);
    namespace_given_ = meta.namespace_given;
    setName(w, meta.name, meta.namespace_);
    w.uid = meta.uid;
    if (meta.created_ms) w.created_ms = *meta.created_ms;
    return meta;
  }
  void setName(Workload& w, const std::string& name, const std::string& ns) {
    w.namespace_ = ns;
    w.name = ns.empty() ? name : ns + "/" + name;
    o_.setLabel(fmt::format("Workload \"{}\"", w.name));
  }

  void counts(Map& m, const std::string& count_key, const std::string& min_key, PodSet& ps) {
    if (auto c = o_.integer(m, count_key, 0, INT32_MAX)) ps.count = *c;
    if (auto mc = o_.integer(m, min_key, 1, ps.count)) ps.min_count = *mc;
  }

  void addPodSet(std::vector<PodSet>& sets, PodSet ps, Map& m) {
    if (!ps.name.empty() && !isDnsLabel(ps.name)) {
      r_.addError(m.get("name"), m.child("name"),
                  fmt::format("\"{}\" is not a valid pod set name", ps.name));
    }
    for (const auto& other : sets) {
      if (other.name == ps.name) {
        r_.addError(m.get("name"), m.child("name"),
                    fmt::format("pod set \"{}\" is listed twice", ps.name));
      }
    }
    sets.push_back(std::move(ps));
  }

  std::vector<PodSet> kueuePodSets(const YAML::Node& n, const std::string& path) {
    std::vector<PodSet> out;
    if (!n.IsSequence() || n.size() == 0) {
      r_.addError(n, path, "expected a non-empty list of pod sets");
      return {};
    }
    for (size_t i = 0; i < n.size(); ++i) {
      Map m = r_.map(n[i], fmt::format("{}[{}]", path, i));
      PodSet ps;
      ps.name = "main";  // Kueue's default
      m.optional("name", ps.name);
      counts(m, "count", "minCount", ps);
      if (!m.present("template")) {
        r_.addError(m.node(), m.child("template"), "required field is missing");
      } else {
        Map t = m.map("template");
        if (t.present("metadata")) templateAnnotations(t.get("metadata"), t.child("metadata"), ps);
        podSpec(t.map("spec"), ps);
        t.finish();
      }
      if (m.present("topologyRequest")) topology(m.map("topologyRequest"), ps);
      m.finish();
      addPodSet(out, std::move(ps), m);
    }
    return out;
  }

  // Kueue's topology request: `required` or `preferred`, a level (nvlink, node or
  // kubernetes.io/hostname, rack, block, or a node label key).
  void topology(Map t, PodSet& ps) {
    std::string required, preferred;
    t.optional("required", required);
    t.optional("preferred", preferred);
    o_.unsupported(t, "unconstrained");
    o_.unsupported(t, "podIndexLabel");
    o_.unsupported(t, "subGroupIndexLabel");
    o_.unsupported(t, "subGroupCount");
    o_.unsupported(t, "podSetSliceRequiredTopology");
    o_.unsupported(t, "podSetSliceSize");
    o_.unsupported(t, "podSetGroupName");
    if (!required.empty() && !preferred.empty()) {
      r_.addError(t.node(), t.path(), "give required or preferred, not both");
    }
    ps.topology.required = !required.empty();
    ps.topology.level = required.empty() ? preferred : required;
    t.finish();
  }

  static std::vector<std::string> commaList(const std::string& s) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(',', start);
      if (end == std::string::npos) end = s.size();
      std::string item = s.substr(start, end - start);
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      if (!item.empty()) out.push_back(item);
      start = end + 1;
    }
    return out;
  }

  // The pod template's annotations Purser reads: Kueue's topology requests and HAMi's GPU type
  // constraints. The rest of the metadata is the pods' own.
  void templateAnnotations(const YAML::Node& meta, const std::string& path, PodSet& ps) {
    if (!meta.IsMap()) return;
    const YAML::Node annotations = meta["annotations"];
    if (!annotations.IsDefined() || !annotations.IsMap()) return;
    std::map<std::string, std::string> a = o_.stringMap(annotations, path + ".annotations");
    if (auto it = a.find("kueue.x-k8s.io/podset-required-topology"); it != a.end()) {
      ps.topology = {it->second, true};
    } else if (auto p = a.find("kueue.x-k8s.io/podset-preferred-topology"); p != a.end()) {
      ps.topology = {p->second, false};
    }
    if (auto it = a.find("nvidia.com/use-gputype"); it != a.end()) {
      ps.use_gpu_types = commaList(it->second);
    }
    if (auto it = a.find("nvidia.com/nouse-gputype"); it != a.end()) {
      ps.nouse_gpu_types = commaList(it->second);
    }
  }

  // A container's requests, with limits standing in for missing requests (as Kueue does).
  Resources containerRequests(const YAML::Node& c, const std::string& path) {
    Map cm = r_.map(c, path);  // the rest of a container is not Purser's concern
    if (!cm.present("resources") || isNull(cm.get("resources"))) return {};
    Map res = cm.map("resources");
    Resources requests = o_.resourceList(res.get("requests"), res.child("requests"));
    for (const auto& [name, v] : o_.resourceList(res.get("limits"), res.child("limits"))) {
      requests.emplace(name, v);
    }
    o_.unsupported(res, "claims");
    res.finish();
    return requests;
  }

  // A container's limits alone (what a local pod is held to). Errors are containerRequests'.
  Resources containerLimits(const YAML::Node& c, const std::string& path) {
    if (!c.IsMap()) return {};
    const YAML::Node res = c["resources"];
    if (!res.IsDefined() || !res.IsMap() || !res["limits"].IsDefined()) return {};
    YamlReader quiet(r_.file());
    return readResources(quiet, res["limits"], path + ".resources.limits", /*whole_extended=*/true);
  }

  bool add(Resources& into, const Resources& more, const YAML::Node& at, const std::string& path) {
    for (const auto& [name, v] : more) {
      if (!addChecked(into[name], v)) {
        r_.addError(at, path, fmt::format("the pod's total \"{}\" is too large", name));
        return false;
      }
    }
    return true;
  }

  static void maxInto(Resources& into, const Resources& other) {
    for (const auto& [name, v] : other) into[name] = std::max(into[name], v);
  }

  // Kubernetes' effective pod requests: the containers summed, plus restartable (sidecar) init
  // containers; at least each regular init container with the sidecars started before it; plus
  // the pod's overhead.
  // What the first container runs: command then args, workingDir, and env given by value (a
  // valueFrom needs a cluster to resolve it: warned, and left unset).
  void runs(const YAML::Node& c, const std::string& path, PodSet& ps) {
    if (!c.IsMap()) return;
    for (const char* key : {"command", "args"}) {
      const YAML::Node list = c[key];
      if (!list.IsDefined() || list.IsNull()) continue;
      const std::string at = path + "." + key;
      if (!list.IsSequence()) {
        r_.addError(list, at,
                    fmt::format("expected a list of strings, got {}", describeNode(list)));
        continue;
      }
      for (size_t i = 0; i < list.size(); ++i) {
        if (!list[i].IsScalar()) {
          r_.addError(list[i], fmt::format("{}[{}]", at, i), "expected a string");
          continue;
        }
        ps.command.push_back(list[i].Scalar());
      }
    }
    const YAML::Node dir = c["workingDir"];
    if (dir.IsDefined() && dir.IsScalar()) ps.working_dir = dir.Scalar();
    const YAML::Node image = c["image"];
    if (image.IsDefined() && image.IsScalar()) ps.image = image.Scalar();
    const YAML::Node env = c["env"];
    if (!env.IsDefined() || env.IsNull()) return;
    if (!env.IsSequence()) {
      r_.addError(env, path + ".env", "expected a list of {name, value}");
      return;
    }
    for (size_t i = 0; i < env.size(); ++i) {
      const std::string at = fmt::format("{}.env[{}]", path, i);
      const YAML::Node e = env[i];
      const YAML::Node name = e.IsMap() ? e["name"] : YAML::Node();
      if (!name.IsDefined() || !name.IsScalar() || name.Scalar().empty() ||
          name.Scalar().find('=') != std::string::npos) {
        r_.addError(e, at + ".name", "each variable needs a name (without '=')");
        continue;
      }
      const YAML::Node value = e["value"];
      if (e["valueFrom"].IsDefined() && !e["valueFrom"].IsNull()) {
        o_.warn(e.Mark(), at + ".valueFrom",
                fmt::format("\"{}\" comes from the cluster (valueFrom), which Purser cannot "
                            "resolve; it is left unset",
                            name.Scalar()));
        continue;
      }
      ps.env[name.Scalar()] = value.IsDefined() && value.IsScalar() ? value.Scalar() : "";
    }
  }

  void podSpec(Map s, PodSet& ps) {
    Resources containers, sidecars, init_peak;
    const YAML::Node cs = s.get("containers");
    if (cs.IsSequence() && cs.size() > 0) {
      runs(cs[0], s.child("containers") + "[0]", ps);
      ps.limits = containerLimits(cs[0], s.child("containers") + "[0]");
    }
    for (size_t i = 0; cs.IsSequence() && i < cs.size(); ++i) {
      const std::string at = fmt::format("{}[{}]", s.child("containers"), i);
      if (!add(containers, containerRequests(cs[i], at), cs[i], at)) return;
    }
    const YAML::Node init = s.get("initContainers");
    for (size_t i = 0; init.IsSequence() && i < init.size(); ++i) {
      const std::string at = fmt::format("{}[{}]", s.child("initContainers"), i);
      Resources req = containerRequests(init[i], at);
      const YAML::Node restart = init[i].IsMap() ? init[i]["restartPolicy"] : YAML::Node();
      if (restart.IsDefined() && restart.IsScalar() && restart.Scalar() == "Always") {
        if (!add(sidecars, req, init[i], at)) return;
        maxInto(init_peak, sidecars);
      } else {
        if (!add(req, sidecars, init[i], at)) return;
        maxInto(init_peak, req);
      }
    }
    if (!add(containers, sidecars, s.node(), s.path())) return;
    maxInto(containers, init_peak);
    if (s.present("overhead")) {
      if (!add(containers, o_.resourceList(s.get("overhead"), s.child("overhead")), s.node(),
               s.child("overhead"))) {
        return;
      }
    }
    ps.requests = std::move(containers);
    if (s.present("tolerations")) {
      ps.tolerations = o_.tolerations(s.get("tolerations"), s.child("tolerations"));
    }
    if (s.present("nodeSelector")) {
      ps.node_selector = o_.stringMap(s.get("nodeSelector"), s.child("nodeSelector"));
    }
    if (s.present("affinity") && s.get("affinity").IsMap() &&
        s.get("affinity")["nodeAffinity"].IsDefined()) {
      o_.warn(keyMark(s, "affinity"), s.child("affinity.nodeAffinity"),
              "not supported by Purser; flavors are matched on nodeSelector only");
    }
    // The rest of the pod spec (images, volumes, ...) is for the kubelet, not for admission.
  }

  ObjectReader& o_;
  YamlReader& r_;
};

}  // namespace

namespace {

// A YAML node as JSON: a quoted scalar is a string; a plain one null, a boolean, an integer or a
// number when it reads as one (YAML 1.2's core schema), else a string.
nlohmann::json jsonOf(const YAML::Node& n) {
  using nlohmann::json;
  if (n.IsMap()) {
    json out = json::object();
    for (const auto& kv : n) {
      out[kv.first.IsScalar() ? kv.first.Scalar() : std::string()] = jsonOf(kv.second);
    }
    return out;
  }
  if (n.IsSequence()) {
    json out = json::array();
    for (const auto& item : n) out.push_back(jsonOf(item));
    return out;
  }
  if (!n.IsScalar()) return nullptr;
  const std::string& v = n.Scalar();
  if (n.Tag() == "!") return v;  // quoted
  if (v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL") return nullptr;
  if (v == "true" || v == "True" || v == "TRUE") return true;
  if (v == "false" || v == "False" || v == "FALSE") return false;
  int64_t i = 0;
  const char* end = v.data() + v.size();
  if (auto [p, ec] = std::from_chars(v.data(), end, i); ec == std::errc() && p == end) return i;
  double d = 0;
  if (auto [p, ec] = std::from_chars(v.data(), end, d); ec == std::errc() && p == end) return d;
  return v;
}

}  // namespace

namespace {

// An environment variable's name as a shell and Kubernetes' C_IDENTIFIER rule have it.
bool validEnvName(const std::string& name) {
  if (name.empty() || name.size() > 256 || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// What a workload may ask for, past its shape: pod sets, pods, environment names, CPU.
void checkBounds(const Workload& w, const WorkloadBounds& bounds, std::vector<Error>& errors) {
  if (w.pod_sets.size() > bounds.max_pod_sets) {
    errors.push_back(
        invalidArgument(
            fmt::format("a workload has at most {} pod sets (Kueue's limit); this one has {}",
                        bounds.max_pod_sets, w.pod_sets.size()))
            .withField("pod_sets"));
  }
  for (const auto& ps : w.pod_sets) {
    if (ps.count > bounds.max_pods_per_set) {
      errors.push_back(
          invalidArgument(fmt::format("pod set \"{}\" asks for {} pods; at most {} may run in "
                                      "one pod set (fleet.max_pods_per_set)",
                                      ps.name, ps.count, bounds.max_pods_per_set))
              .withField("pod_sets"));
    }
    for (const auto& [name, value] : ps.env) {
      if (!validEnvName(name)) {
        std::string shown;
        for (char c : name.substr(0, 64)) {
          shown += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
                       ? fmt::format("\\x{:02x}", static_cast<unsigned char>(c))
                       : std::string(1, c);
        }
        errors.push_back(invalidArgument(fmt::format("pod set \"{}\": \"{}\" is not an "
                                                     "environment variable's name (letters, "
                                                     "digits and _, not first a digit)",
                                                     ps.name, shown))
                             .withField("env"));
      }
    }
    if (bounds.min_pod_cpu_milli > 0 && !ps.command.empty()) {
      auto cpu = ps.requests.find("cpu");
      const int64_t milli = cpu == ps.requests.end() ? 0 : cpu->second;
      if (milli < bounds.min_pod_cpu_milli) {
        errors.push_back(
            invalidArgument(
                fmt::format(
                    "pod set \"{}\" runs a command and must request at least {}m of CPU per pod "
                    "(fleet.min_pod_cpu); it requests {}m",
                    ps.name, bounds.min_pod_cpu_milli, milli))
                .withField("requests"));
      }
    }
  }
}

}  // namespace

Result<ParsedWorkload> parseWorkload(const std::string& yaml_or_json, const std::string& file_name,
                                     size_t max_nesting, const WorkloadBounds& bounds) {
  std::vector<YAML::Node> docs =
      PURSER_TRY_VALUE(config::parseYamlStream(yaml_or_json, file_name, max_nesting));
  std::erase_if(docs, [](const YAML::Node& d) { return isNull(d); });
  if (docs.size() != 1) {
    return fail(invalidArgument(fmt::format("expected one workload, got {} documents", docs.size()))
                    .at(file_name, 0, 0));
  }
  const YAML::Node& doc = docs.front();
  ParsedWorkload out;
  ObjectReader o(file_name, out.warnings, doc.Mark());
  o.setLabel("Workload");
  Map top = o.reader().map(doc, "");
  if (top.valid()) {
    WorkloadParser p(o);
    const YAML::Node kind = top.has("kind") ? top.get("kind") : YAML::Node();
    if (kind.IsScalar() && kind.Scalar() == "Job") {
      out.workload = p.job(top);
      out.object_json = writeJson(jsonOf(doc));
    } else if (kind.IsScalar() && kind.Scalar() == "JobSet") {
      out.workload = p.jobSet(top);
      out.object_json = writeJson(jsonOf(doc));
    } else if (kind.IsScalar() && kind.Scalar() == "PyTorchJob") {
      out.workload = p.pytorchJob(top);
      out.object_json = writeJson(jsonOf(doc));
    } else {
      out.workload = top.has("apiVersion") || top.has("kind") ? p.kueue(top) : p.shortForm(top);
    }
    out.namespace_given = p.namespaceGiven();
  }
  std::vector<Error> errors;
  o.moveErrorsTo(errors);
  if (errors.empty()) checkBounds(out.workload, bounds, errors);
  if (!errors.empty()) return fail(combine(errors));
  return out;
}

}  // namespace purser::fleet
