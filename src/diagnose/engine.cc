#include "diagnose/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

#include "diagnose/signals.h"

namespace purser::diagnose {

const std::vector<std::string>& causeVocabulary() {
  static const std::vector<std::string> kCauses = {
      "kv_cache_exhaustion", "replica_saturation", "gpu_hardware_fault", "gpu_thermal_throttle",
      "gpu_memory_oom",      "nvlink_degraded",    "upstream_errors",    "upstream_rate_limited",
      "bad_config_change",   "budget_exhausted",   "quota_exhausted",    "preemption_churn",
      "noisy_neighbor",      "idle_allocation",    "traffic_shift",      "none"};
  return kCauses;
}

namespace {

constexpr TimeMs kMinute = 60'000;

bool contains(std::string_view hay, std::string_view needle) {
  return hay.find(needle) != std::string_view::npos;
}

std::string gpuName(const std::string& node, int64_t index) {
  return fmt::format("{}/{}", node, index);
}

// A logfmt value: key=value or key="quoted value".
std::optional<std::string> logfmtValue(std::string_view line, std::string_view key) {
  size_t pos = 0;
  while ((pos = line.find(key, pos)) != std::string_view::npos) {
    bool at_start = pos == 0 || line[pos - 1] == ' ';
    size_t eq = pos + key.size();
    if (at_start && eq < line.size() && line[eq] == '=') {
      size_t v = eq + 1;
      if (v < line.size() && line[v] == '"') {
        size_t end = v + 1;
        std::string out;
        while (end < line.size() && line[end] != '"') {
          if (line[end] == '\\' && end + 1 < line.size()) ++end;
          out += line[end++];
        }
        return out;
      }
      size_t end = line.find(' ', v);
      return std::string(line.substr(v, end == std::string_view::npos ? end : end - v));
    }
    pos = eq;
  }
  return std::nullopt;
}

// A subject written as a wallet scope ("team:ml", "user:dana", "key:ci").
std::optional<Subject> scopeSubject(std::string_view scope) {
  size_t colon = scope.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 >= scope.size()) {
    return std::nullopt;
  }
  std::string kind(scope.substr(0, colon));
  if (kind == "service_account" || kind == "agent") kind = "key";
  return Subject{kind, std::string(scope.substr(colon + 1))};
}

struct Candidate {
  Finding f;
  double strength = 0;
  std::vector<Subject> affects;  // objects it touches besides its subject
  bool explained = false;        // the effect of another finding
};

class Analysis {
 public:
  explicit Analysis(const Case& c) : c_(c) {
    for (const Series& s : c.series) by_name_[s.name].push_back(&s);
    for (const Deployment& d : c.inventory.deployments) deployments_[d.name] = &d;
    for (const Workload& w : c.inventory.workloads) workloads_[w.id()] = &w;
    for (const NodeInfo& n : c.inventory.nodes) nodes_[n.name] = &n;
    for (const Deployment& d : c.inventory.deployments) {
      for (int64_t g : d.gpus) gpu_users_[gpuName(d.node, g)].push_back({"deployment", d.name});
    }
    for (const Workload& w : c.inventory.workloads) {
      if (w.node.empty()) continue;
      for (int64_t g : w.gpus) gpu_users_[gpuName(w.node, g)].push_back({"workload", w.id()});
    }
    // The sample interval: the most common step of the first series.
    step_ = 30'000;
    if (!c.series.empty() && c.series.front().t.size() > 2) {
      step_ = std::max<TimeMs>(1, c.series.front().t[1] - c.series.front().t[0]);
    }
  }

  std::vector<Candidate> run() {
    for (const Deployment& d : c_.inventory.deployments) {
      kvCache(d);
      saturation(d);
      oomDeployment(d);
    }
    routeLevel();
    gpus();
    nodesNvlink();
    providers();
    budgets();
    queues();
    idle();
    oomWorkloads();
    configChanges();
    return std::move(out_);
  }

 private:
  // ------------------------------------------------------------------ lookups
  const std::vector<const Series*>& named(const std::string& name) const {
    static const std::vector<const Series*> kNone;
    auto it = by_name_.find(name);
    return it == by_name_.end() ? kNone : it->second;
  }

  std::vector<const Series*> select(
      const std::string& name,
      std::initializer_list<std::pair<std::string_view, std::string_view>> match) const {
    std::vector<const Series*> out;
    for (const Series* s : named(name)) {
      bool ok = true;
      for (const auto& [k, v] : match) {
        auto l = s->label(k);
        if (!l || *l != v) {
          ok = false;
          break;
        }
      }
      if (ok) out.push_back(s);
    }
    return out;
  }

  const Series* one(
      const std::string& name,
      std::initializer_list<std::pair<std::string_view, std::string_view>> match) const {
    auto all = select(name, match);
    return all.empty() ? nullptr : all.front();
  }

  // A model server's series: labelled with the replica's name as `instance` (incident files),
  // `target` (Purser's own scraper) or `pod` (Prometheus' Kubernetes discovery).
  const Series* engine(const std::string& name, const std::string& deployment) const {
    if (const Series* s = one(name, {{"instance", deployment}})) return s;
    if (const Series* s = one(name, {{"target", deployment}})) return s;
    return one(name, {{"pod", deployment}});
  }

  const Series* gpuSeries(const std::string& name, const std::string& node, int64_t index) const {
    std::string idx = std::to_string(index);
    if (const Series* s = one(name, {{"Hostname", node}, {"gpu", idx}})) return s;
    return one(name, {{"node", node}, {"gpu", idx}});
  }

  // The per-interval mean of a histogram whose _sum and _count carry these labels.
  std::optional<std::pair<Points, const Series*>> histMean(const std::string& base,
                                                           const Labels& labels) const {
    const Series* sum = nullptr;
    const Series* count = nullptr;
    for (const Series* s : named(base + "_sum")) {
      if (s->labels == labels) sum = s;
    }
    for (const Series* s : named(base + "_count")) {
      if (s->labels == labels) count = s;
    }
    if (sum == nullptr || count == nullptr) return std::nullopt;
    return std::make_pair(meanOf(*sum, *count), sum);
  }

  std::optional<std::pair<Points, const Series*>> engineHist(const std::string& base,
                                                             const std::string& d) const {
    const Series* sum = engine(base + "_sum", d);
    if (sum == nullptr) return std::nullopt;
    return histMean(base, sum->labels);
  }

  // ------------------------------------------------------------------ evidence
  Evidence metric(const Series& s, const Shift& sh, std::string summary,
                  std::string name = "") const {
    Evidence e;
    e.kind = Evidence::Kind::kMetric;
    e.name = name.empty() ? s.name : std::move(name);
    for (const auto& [k, v] : s.labels) {
      if (k != "le") e.labels.emplace_back(k, v);
    }
    e.from = sh.valid ? sh.from : (s.t.empty() ? c_.start : s.t.front());
    e.to = sh.valid ? sh.to : (s.t.empty() ? c_.end : s.t.back());
    e.summary = std::move(summary);
    return e;
  }

  Evidence histEvidence(const Series& sum_series, const std::string& base, const Shift& sh,
                        const std::string& what) const {
    Evidence e =
        metric(sum_series, sh,
               fmt::format("mean {} {} s -> {} s", what, num(sh.base), num(sh.peak)), base);
    return e;
  }

  static Evidence log(const LogLine& l) {
    Evidence e;
    e.kind = Evidence::Kind::kLog;
    e.time = l.time;
    e.source = l.source;
    e.line = l.line;
    return e;
  }

  static Evidence event(const Event& ev) {
    Evidence e;
    e.kind = Evidence::Kind::kEvent;
    e.time = ev.time;
    e.source = ev.source;
    e.event_kind = ev.kind;
    e.object = ev.object;
    e.message = ev.message;
    return e;
  }

  // Log lines from `source` containing any of `needles`, oldest first.
  std::vector<const LogLine*> logs(std::string_view source,
                                   std::initializer_list<std::string_view> needles) const {
    std::vector<const LogLine*> out;
    for (const LogLine& l : c_.logs) {
      if (!source.empty() && l.source != source) continue;
      for (std::string_view n : needles) {
        if (contains(l.line, n)) {
          out.push_back(&l);
          break;
        }
      }
    }
    return out;
  }

  // Adds up to `max` log lines as evidence: the first and the last, which show the span.
  static void addLogs(Finding& f, const std::vector<const LogLine*>& lines, size_t max = 2) {
    if (lines.empty()) return;
    f.evidence.push_back(log(*lines.front()));
    if (max > 1 && lines.size() > 1) f.evidence.push_back(log(*lines.back()));
  }

  // Latency of a replica: the larger relative rise of its mean TTFT and its mean ITL.
  struct Latency {
    Shift shift;
    const Series* sum = nullptr;
    std::string base;
    std::string what;
    double ratio = 1;
  };
  std::optional<Latency> replicaLatency(const std::string& d) const {
    std::optional<Latency> best;
    for (const auto& [base, what] :
         {std::pair<std::string, std::string>{"vllm:inter_token_latency_seconds", "ITL"},
          {"vllm:time_to_first_token_seconds", "TTFT"}}) {
      auto h = engineHist(base, d);
      if (!h) continue;
      Shift sh = upShift(h->first);
      if (!sh.valid) continue;
      double r = sh.ratio(1e-4);
      if (!best || r > best->ratio) best = Latency{sh, h->second, base, what, r};
    }
    return best;
  }

  void emit(Candidate c) { out_.push_back(std::move(c)); }

  // A counter that first appears inside the window was created by its first event (a
  // Prometheus client creates a labelled counter when it first counts): before that its rate
  // was 0, and its first value counts as an increase.
  bool lateStart(const Series& s) const {
    return !s.t.empty() && s.t.front() > c_.start + 2 * step_;
  }
  // Rates over at least kRateSpanMs: live series are sampled every second or faster, where a
  // few events a second would otherwise read as lone spikes between zeros.
  static constexpr TimeMs kRateSpanMs = 5000;
  Points rate(const Series& s) const { return rateOf(s, step_ < kRateSpanMs ? kRateSpanMs : 0); }
  Points counterRate(const Series& s) const {
    Points r = rate(s);
    if (!lateStart(s)) return r;
    Points p;
    for (TimeMs t = c_.start + step_; t < s.t.front(); t += step_) {
      p.t.push_back(t);
      p.x.push_back(0);
    }
    p.t.push_back(s.t.front());
    p.x.push_back(std::max(0.0, s.v.front()) * 1000.0 /
                  static_cast<double>(std::max(step_, kRateSpanMs)));
    p.t.insert(p.t.end(), r.t.begin(), r.t.end());
    p.x.insert(p.x.end(), r.x.begin(), r.x.end());
    return p;
  }
  double counterIncrease(const Series& s) const {
    if (s.v.empty()) return 0;
    double inc = s.v.back() - (lateStart(s) ? 0.0 : s.v.front());
    return std::isfinite(inc) ? std::max(inc, 0.0) : 0.0;
  }

  // ------------------------------------------------------------------ detectors
  void kvCache(const Deployment& d) {
    const Series* kv = engine("vllm:kv_cache_usage_perc", d.name);
    if (kv == nullptr) return;
    Points p = gaugeOf(*kv);
    int full = 0;
    TimeMs first_full = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      if (p.x[i] >= 0.9) {
        if (full++ == 0) first_full = p.t[i];
      }
    }
    if (full < 2) return;
    Shift sh = upShift(p);
    double peak = maxOf(p.x);
    Candidate c;
    Finding& f = c.f;
    f.cause = "kv_cache_exhaustion";
    f.subject = {"deployment", d.name};
    f.onset = first_full;
    f.evidence.push_back(metric(
        *kv, sh,
        fmt::format("{} -> {} ({} samples at 90 % or more)", num(sh.base), num(peak), full)));
    double s = 0.3;
    bool preempting = false;
    if (const Series* pre = engine("vllm:num_preemptions_total", d.name)) {
      Points r = counterRate(*pre);
      Shift ps = upShift(r);
      double inc = counterIncrease(*pre);
      if (ps.valid && inc >= 3 && ps.peak > 0 && ps.ratio(1.0 / 60) >= 3) {
        preempting = true;
        s += 0.3;
        f.evidence.push_back(metric(*pre, ps,
                                    fmt::format("preemptions {}/s -> {}/s, +{} in the window",
                                                num(ps.base), num(ps.peak), num(inc))));
      }
    }
    auto lines = logs(
        d.name, {"PreemptionMode.RECOMPUTE", "not enough KV cache space", "PreemptionMode.SWAP"});
    if (!lines.empty()) {
      s += preempting ? 0.15 : 0.3;
      addLogs(f, lines);
    }
    if (auto lat = replicaLatency(d.name); lat && lat->ratio >= 1.3) {
      s += 0.1;
      f.evidence.push_back(histEvidence(*lat->sum, lat->base, lat->shift, lat->what));
    }
    if (peak >= 0.97) s += 0.05;
    c.strength = std::min(s, 0.95);
    c.affects = {{"route", d.route}};
    f.explanation = fmt::format(
        "The KV cache of {} filled up ({} at its peak) and the engine began preempting running "
        "requests to free blocks, so requests are recomputed and wait; latency rises with it.",
        d.name, num(peak));
    f.next_steps = {
        fmt::format("Check the prompt and output lengths {} is receiving (long contexts fill the "
                    "cache).",
                    d.name),
        "Raise gpu_memory_utilization or the tensor-parallel size, or lower max_num_seqs / "
        "max_model_len for this replica.",
        fmt::format("Add a replica to route {} or shift weight away from {} while it is full.",
                    d.route, d.name)};
    emit(std::move(c));
  }

  void saturation(const Deployment& d) {
    const Series* waiting = engine("vllm:num_requests_waiting", d.name);
    auto queue = engineHist("vllm:request_queue_time_seconds", d.name);
    Shift ws;
    Shift qs;
    bool wait_up = false;
    bool queue_up = false;
    if (waiting != nullptr) {
      ws = upShift(gaugeOf(*waiting));
      wait_up = ws.valid && ws.peak >= 5 && ws.high >= 3 && ws.peak >= 4 * std::max(ws.base, 1.0);
    }
    if (queue) {
      qs = upShift(queue->first);
      queue_up = qs.valid && qs.peak >= 0.5 && qs.ratio(0.01) >= 4 && qs.high >= 3;
    }
    if (!wait_up && !queue_up) return;
    const Series* kv = engine("vllm:kv_cache_usage_perc", d.name);
    double kv_peak = kv != nullptr ? maxOf(kv->v) : 0;
    Candidate c;
    Finding& f = c.f;
    f.cause = "replica_saturation";
    f.subject = {"deployment", d.name};
    f.onset = wait_up ? ws.onset : qs.onset;
    double s = 0.45;
    if (wait_up) {
      f.evidence.push_back(metric(
          *waiting, ws, fmt::format("requests waiting {} -> {}", num(ws.base), num(ws.peak))));
    }
    if (queue_up) {
      f.evidence.push_back(
          histEvidence(*queue->second, "vllm:request_queue_time_seconds", qs, "queue time"));
    }
    if (wait_up && queue_up) s += 0.2;
    if (const Series* running = engine("vllm:num_requests_running", d.name)) {
      Shift rs = upShift(gaugeOf(*running));
      if (rs.valid) {
        f.evidence.push_back(metric(
            *running, rs,
            fmt::format("requests running {} -> {} (a ceiling)", num(rs.base), num(rs.peak))));
      }
    }
    // Load: the rate of requests Purser sent it.
    std::vector<Points> rates;
    const Series* any_req = nullptr;
    for (const Series* r : select("purser_gateway_requests_total", {{"target", d.name}})) {
      rates.push_back(rate(*r));
      any_req = r;
    }
    if (any_req != nullptr) {
      Shift ls = upShift(sumOf(rates));
      if (ls.valid && ls.ratio(0.01) >= 1.15) {
        s += 0.1;
        f.evidence.push_back(
            metric(*any_req, ls,
                   fmt::format("requests to {} {}/s -> {}/s", d.name, num(ls.base), num(ls.peak)),
                   "purser_gateway_requests_total"));
        f.evidence.back().labels = {{"target", d.name}};
      }
    }
    if (kv_peak >= 0.9) s *= 0.5;  // a full KV cache is the cause; the queue its effect
    c.strength = s;
    c.affects = {{"route", d.route}};
    f.explanation = fmt::format(
        "{} receives more requests than it can run: requests queue inside the engine ({} "
        "waiting at the peak) while its KV cache has room ({} at most), so capacity, not "
        "memory, is short.",
        d.name, num(ws.valid ? ws.peak : 0), num(kv_peak));
    f.next_steps = {
        fmt::format("Add replicas behind route {} or raise {}'s max_num_seqs if its GPU has "
                    "headroom.",
                    d.route, d.name),
        "Check whether the route's weights send this replica more than its share.",
        "Set a queue limit on the route so excess requests fail fast instead of waiting."};
    emit(std::move(c));
  }

  void oomDeployment(const Deployment& d) {
    oomObject({"deployment", d.name}, d.name, d.node, d.gpus, {{"route", d.route}});
  }

  void oomWorkloads() {
    for (const Workload& w : c_.inventory.workloads) {
      oomObject({"workload", w.id()}, w.id(), w.node, w.gpus, {{"queue", w.queue}});
    }
  }

  void oomObject(const Subject& subject, const std::string& source, const std::string& node,
                 const std::vector<int64_t>& gpus, std::vector<Subject> affects) {
    auto lines = logs(source, {"CUDA out of memory", "OutOfMemoryError",
                               "CUDA error: out of memory", "OOM when allocating"});
    // Memory at the top of the card on one of its GPUs.
    double top = 0;
    const Series* top_series = nullptr;
    Shift top_shift;
    for (int64_t g : gpus) {
      const Series* used = gpuSeries("DCGM_FI_DEV_FB_USED", node, g);
      if (used == nullptr) continue;
      const Series* free = gpuSeries("DCGM_FI_DEV_FB_FREE", node, g);
      double cap = capacityMiB(node);
      for (size_t i = 0; i < used->v.size(); ++i) {
        double total = cap;
        if (free != nullptr && i < free->v.size() && free->t[i] == used->t[i]) {
          total = used->v[i] + free->v[i];
        }
        if (total > 0 && used->v[i] / total > top) {
          top = used->v[i] / total;
          top_series = used;
        }
      }
      if (top_series == used) top_shift = upShift(gaugeOf(*used));
    }
    auto restarts = logs(source, {"vLLM API server version", "Loading weights took",
                                  "Starting vLLM API server", "restarting", "Back-off restarting"});
    bool failing = false;
    std::vector<Evidence> fail_evidence;
    if (subject.kind == "deployment") {
      for (const Series* e : select("purser_gateway_upstream_errors_total", {{"target", source}})) {
        Shift es = upShift(counterRate(*e));
        double inc = counterIncrease(*e);
        if (es.valid && inc >= 3 && es.peak > 0) {
          failing = true;
          fail_evidence.push_back(
              metric(*e, es,
                     fmt::format("{} errors {}/s -> {}/s", e->label("kind").value_or(""),
                                 num(es.base), num(es.peak))));
          break;
        }
      }
      if (const Series* run = engine("vllm:num_requests_running", source)) {
        if (hasGap(*run)) {
          failing = true;
          fail_evidence.push_back(metric(*run, Shift{},
                                         "the server stopped reporting metrics "
                                         "for part of the window (restarts)"));
        }
      }
    } else {
      for (const Event& ev : c_.events) {
        if (ev.object == source &&
            (ev.kind == "Evicted" || (ev.kind == "Finished" && ev.reason == "Failed"))) {
          failing = true;
          fail_evidence.push_back(event(ev));
          break;
        }
      }
    }
    if (lines.empty() && !(top >= 0.985 && failing && restarts.size() + (failing ? 1 : 0) >= 2)) {
      return;
    }
    Candidate c;
    Finding& f = c.f;
    f.cause = "gpu_memory_oom";
    f.subject = subject;
    double s = 0;
    if (!lines.empty()) {
      s = 0.55 + 0.05 * static_cast<double>(std::min<size_t>(lines.size() - 1, 2));
      addLogs(f, lines);
      f.onset = lines.front()->time;
    } else {
      s = 0.4;
    }
    if (top_series != nullptr && top >= 0.95) {
      s += 0.15;
      f.evidence.push_back(
          metric(*top_series, top_shift,
                 fmt::format("framebuffer {} % used at the peak", num(top * 100))));
    }
    if (failing || restarts.size() >= 2) {
      s += 0.15;
      for (auto& e : fail_evidence) f.evidence.push_back(std::move(e));
      if (restarts.size() >= 2) f.evidence.push_back(log(*restarts.back()));
    }
    if (f.onset == 0 && top_shift.valid) f.onset = top_shift.onset;
    c.strength = std::min(s, 0.95);
    c.affects = std::move(affects);
    for (int64_t g : gpus) c.affects.push_back({"gpu", gpuName(node, g)});
    f.explanation = fmt::format(
        "{} ran out of GPU memory (CUDA out of memory{}) and {}; requests to it fail while it "
        "restarts.",
        source, restarts.size() >= 2 ? fmt::format(", {} restarts", restarts.size()) : "",
        subject.kind == "deployment" ? "its engine died" : "the job failed");
    f.next_steps = {
        "Lower gpu_memory_utilization, max_num_seqs or max_model_len (or the batch size of a "
        "job) so the peak fits the card.",
        "Check whether something else now shares this GPU's memory.",
        "Move it to a larger GPU or spread it over more GPUs (tensor parallelism)."};
    emit(std::move(c));
  }

  bool hasGap(const Series& s) const {
    for (size_t i = 1; i < s.t.size(); ++i) {
      if (s.t[i] - s.t[i - 1] > 2 * step_ + step_ / 2) return true;
    }
    return !s.t.empty() && s.t.back() < c_.end - 3 * step_;
  }

  double capacityMiB(const std::string& node) const {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return 0;
    const std::string& type = it->second->gpu_type;
    size_t dash = type.rfind('-');
    if (dash == std::string::npos) return 0;
    double gb = std::atof(type.c_str() + dash + 1);
    return gb > 0 ? gb * 1024 * 0.99 : 0;
  }

  // Route-level: all replicas saturated (capacity of the route), or a traffic change.
  void routeLevel() {
    routeSaturation();
    std::set<std::string> routes;
    for (const Series* s : named("purser_gateway_requests_total")) {
      if (auto r = s->label("route")) routes.insert(std::string(*r));
    }
    for (const Deployment& d : c_.inventory.deployments) routes.insert(d.route);
    for (const std::string& route : routes) {
      if (!route.empty()) trafficShift(route);
    }
  }

  // Every replica of a route saturated at once: the route is short of capacity, not one replica.
  void routeSaturation() {
    std::map<std::string, std::vector<const Deployment*>> by_route;
    for (const Deployment& d : c_.inventory.deployments) {
      if (engine("vllm:num_requests_running", d.name) != nullptr) by_route[d.route].push_back(&d);
    }
    for (const auto& [route, replicas] : by_route) {
      if (replicas.size() < 2) continue;
      std::vector<Candidate*> saturated;
      for (const Deployment* d : replicas) {
        for (Candidate& c : out_) {
          if (c.f.cause == "replica_saturation" && c.f.subject == Subject{"deployment", d->name}) {
            saturated.push_back(&c);
          }
        }
      }
      if (saturated.size() != replicas.size()) continue;
      Candidate c;
      Finding& f = c.f;
      f.cause = "replica_saturation";
      f.subject = {"route", route};
      double strength = 0;
      for (Candidate* r : saturated) {
        strength = std::max(strength, r->strength);
        if (f.onset == 0 || r->f.onset < f.onset) f.onset = r->f.onset;
        for (size_t i = 0; i < r->f.evidence.size() && i < 2; ++i) {
          f.evidence.push_back(r->f.evidence[i]);
        }
        r->explained = true;
      }
      c.strength = std::min(strength + 0.05, 0.95);
      c.affects = {{"route", route}};
      for (const Deployment* d : replicas) c.affects.push_back({"deployment", d->name});
      f.explanation = fmt::format(
          "Every replica of route {} ({}) is saturated at once: requests queue in all of them "
          "while their KV caches have room, so the route as a whole is short of capacity.",
          route, replicas.size());
      f.next_steps = {
          fmt::format("Add replicas to route {} (or raise max_num_seqs where the GPUs have "
                      "headroom).",
                      route),
          "Find which callers grew (usage by key for the route) and whether the growth is "
          "expected.",
          "Set a queue limit and priorities on the route so important requests are served "
          "first and the rest fail fast."};
      out_.push_back(std::move(c));
    }
  }

  void trafficShift(const std::string& route) {
    std::vector<Points> rates;
    const Series* any = nullptr;
    for (const Series* s : select("purser_gateway_requests_total", {{"route", route}})) {
      rates.push_back(rate(*s));
      any = s;
    }
    if (any == nullptr) return;
    Points total = sumOf(rates);
    Shift rate = upShift(total);
    bool rate_up = rate.valid && rate.ratio(0.01) >= 1.3 && rate.high >= 4;
    // Prompt length: prompt tokens over requests, across the route's replicas.
    std::vector<Points> prompt;
    std::vector<Points> reqs;
    const Series* any_prompt = nullptr;
    for (const Deployment& d : c_.inventory.deployments) {
      if (d.route != route) continue;
      const Series* pt = engine("vllm:prompt_tokens_total", d.name);
      const Series* cnt = engine("vllm:time_to_first_token_seconds_count", d.name);
      if (pt == nullptr || cnt == nullptr) continue;
      prompt.push_back(this->rate(*pt));
      reqs.push_back(this->rate(*cnt));
      any_prompt = pt;
    }
    Shift len;
    bool len_up = false;
    if (any_prompt != nullptr) {
      len = upShift(ratioOf(sumOf(prompt), sumOf(reqs)));
      len_up = len.valid && len.ratio(1) >= 1.3 && len.high >= 4;
    }
    if (!rate_up && !len_up) return;
    // Latency on the route.
    std::optional<Latency> lat;
    for (const Deployment& d : c_.inventory.deployments) {
      if (d.route != route) continue;
      auto l = replicaLatency(d.name);
      if (l && (!lat || l->ratio > lat->ratio)) lat = l;
    }
    Candidate c;
    Finding& f = c.f;
    f.cause = "traffic_shift";
    f.subject = {"route", route};
    double s = 0.5;
    if (rate_up) {
      f.evidence.push_back(metric(
          *any, rate,
          fmt::format("requests on route {} {}/s -> {}/s", route, num(rate.base), num(rate.peak)),
          "purser_gateway_requests_total"));
      f.evidence.back().labels = {{"route", route}};
      f.onset = rate.onset;
    }
    if (len_up) {
      f.evidence.push_back(
          metric(*any_prompt, len,
                 fmt::format("prompt tokens per request {} -> {}", num(len.base), num(len.peak))));
      f.evidence.back().labels = {};
      if (f.onset == 0 || len.onset < f.onset) f.onset = len.onset;
      s += 0.05;
    }
    if (lat && lat->ratio >= 1.1) {
      if (lat->ratio >= 1.2) s += 0.1;
      f.evidence.push_back(histEvidence(*lat->sum, lat->base, lat->shift, lat->what));
    }
    // The replicas carry it: more requests in flight on each.
    for (const Deployment& d : c_.inventory.deployments) {
      if (d.route != route) continue;
      const Series* running = engine("vllm:num_requests_running", d.name);
      if (running == nullptr) continue;
      Shift rs = upShift(gaugeOf(*running));
      if (rs.valid && rs.ratio(1) >= 1.2) {
        f.evidence.push_back(metric(
            *running, rs,
            fmt::format("requests running on {} {} -> {}", d.name, num(rs.base), num(rs.peak))));
        break;
      }
    }
    c.strength = s;
    f.explanation = fmt::format(
        "Route {} is receiving different traffic: {}{}{}. Nothing in its path shows a fault; "
        "latency follows the load.",
        route,
        rate_up ? fmt::format("requests went from {}/s to {}/s", num(rate.base), num(rate.peak))
                : "",
        rate_up && len_up ? " and " : "",
        len_up ? fmt::format("prompts grew from {} to {} tokens", num(len.base), num(len.peak))
               : "");
    f.next_steps = {
        "Find which keys or applications sent the new traffic (usage by key for the route).",
        fmt::format("Add capacity to route {} if the new level is expected to stay.", route),
        "Set rate limits or a queue limit for the callers that grew."};
    emit(std::move(c));
  }

  void gpus() {
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

  static std::pair<std::string, int64_t> gpuKey(const Series& s) {
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

  std::vector<Subject> gpuAffects(const std::string& node, int64_t index) const {
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

  void thermal(const std::string& node, int64_t index) {
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

  void noisyNeighbor(const std::string& node, int64_t index) {
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
      f.evidence.push_back(metric(
          *util, us, fmt::format("GPU utilisation {} % -> {} %", num(us.base), num(us.peak))));
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
        util_up ? fmt::format(" (utilisation {} % -> {} %)", num(us.base), num(us.peak)) : "",
        victim, worst->what, num(worst->ratio));
    f.next_steps = {
        fmt::format("Give {} a whole GPU, or cap its neighbour's compute share on {}.", victim,
                    f.subject.name),
        "Check the sharing policy of this GPU pool (memory and core limits per tenant).",
        "Move the neighbour to another GPU if the replica's latency matters more."};
    emit(std::move(c));
  }

  static bool criticalXid(int64_t code) {
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

  struct XidLog {
    const LogLine* line = nullptr;
    int64_t code = 0;
    std::string pci;
  };

  std::vector<XidLog> xidLogs() const {
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

  // The GPU index a PCI address names on a node, from the kernel's "GPU at PCI:...: GPU-uuid"
  // line and the exporter's UUID label.
  std::optional<int64_t> gpuOfPci(const std::string& node, const std::string& pci) const {
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

  void hardwareFaults(const std::set<std::pair<std::string, int64_t>>& gpus) {
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
          if (const Series* run = engine("vllm:num_requests_running", a.name);
              run && hasGap(*run)) {
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
          fmt::format("Cordon {} and drain GPU {}; do not schedule on it until it is checked.",
                      node, f.subject.name),
          "Run the vendor's diagnostics (dcgmi diag -r 3) and check the kernel log; a GPU that "
          "fell off the bus or shows uncorrectable ECC usually needs a reset or replacement.",
          "Resubmit the failed work on healthy GPUs."};
      emit(std::move(c));
    }
  }

  static std::string xidMeaning(int64_t code) {
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

  // A training job's throughput from its log lines: "tps: 27,535" (tokens/s) or
  // "step_time=0.88s"; the first line of the last quarter when the job runs 20 % slower there
  // than in its first quarter.
  const LogLine* slowerSteps(const std::string& source) const {
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
        if (!digits.empty() && digits.size() < 15)
          speed.emplace_back(&l, std::atof(digits.c_str()));
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

  void nodesNvlink() {
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

  // Outside providers: 5xx / connection failures, and 429s.
  void providers() {
    std::set<std::string> targets;
    for (const Series* s : named("purser_gateway_upstream_errors_total")) {
      if (auto t = s->label("target"); t && !t->empty()) targets.insert(std::string(*t));
    }
    for (const std::string& target : targets) {
      if (deployments_.contains(target)) continue;  // a replica failing has a deeper cause
      upstream(target, false);
      upstream(target, true);
    }
  }

  void upstream(const std::string& target, bool rate_limited) {
    std::vector<const Series*> errors;
    for (const Series* s : select("purser_gateway_upstream_errors_total", {{"target", target}})) {
      auto kind = s->label("kind").value_or("");
      if (rate_limited ? kind == "429" : kind != "429" && kind != "4xx") errors.push_back(s);
    }
    if (errors.empty()) return;
    std::vector<Points> rates;
    double inc = 0;
    for (const Series* e : errors) {
      rates.push_back(counterRate(*e));
      inc += counterIncrease(*e);
    }
    Points total = sumOf(rates);
    Shift es = upShift(total);
    if (!es.valid || inc < 5 || es.high < 3 || es.peak <= 0) return;
    // Errors as a share of the provider's requests.
    std::vector<Points> reqs;
    std::set<std::string> routes;
    for (const Series* r : select("purser_gateway_requests_total", {{"target", target}})) {
      reqs.push_back(rate(*r));
      if (auto rt = r->label("route")) routes.insert(std::string(*rt));
    }
    double req_total = totalOf(sumOf(reqs).x) * static_cast<double>(step_) / 1000;
    auto lines = logs("", rate_limited ? std::initializer_list<std::string_view>{"429"}
                                       : std::initializer_list<std::string_view>{
                                             "upstream error", "upstream connect failed",
                                             "status=5", "connection refused", "timeout"});
    std::erase_if(lines, [&](const LogLine* l) {
      auto t = logfmtValue(l->line, "target");
      if (!t || *t != target) return true;
      if (rate_limited) return !contains(l->line, "status=429");
      return contains(l->line, "status=429") || contains(l->line, "budget");
    });
    Candidate c;
    Finding& f = c.f;
    f.cause = rate_limited ? "upstream_rate_limited" : "upstream_errors";
    f.subject = {"provider", target};
    f.onset = es.onset;
    double s = 0.5;
    f.evidence.push_back(metric(
        *errors.front(), es,
        fmt::format("{} from {} {}/s -> {}/s ({} in the window)", rate_limited ? "429s" : "errors",
                    target, num(es.base), num(es.peak), num(inc))));
    if (errors.size() > 1) f.evidence.back().labels = {{"target", target}};
    if (!lines.empty()) {
      s += 0.2;
      addLogs(f, lines);
    }
    for (const Event& ev : c_.events) {
      if (ev.kind == "target.cooldown" && contains(ev.object, target)) {
        s += 0.1;
        f.evidence.push_back(event(ev));
        break;
      }
    }
    if (req_total > 0 && inc / (req_total + inc) >= 0.02) s += 0.1;
    // Fallback: another target of the same route took more traffic.
    for (const std::string& route : routes) {
      for (const Series* r : select("purser_gateway_requests_total", {{"route", route}})) {
        auto t = r->label("target").value_or("");
        if (t == target || t.empty()) continue;
        Shift fs = upShift(rate(*r));
        if (fs.valid && fs.ratio(0.01) >= 1.5 && std::llabs(fs.onset - es.onset) <= 3 * kMinute) {
          s += 0.05;
          f.evidence.push_back(metric(
              *r, fs, fmt::format("fallback to {} {}/s -> {}/s", t, num(fs.base), num(fs.peak))));
          break;
        }
      }
      c.affects.push_back({"route", route});
    }
    c.strength = std::min(s, 0.95);
    if (rate_limited) {
      f.explanation = fmt::format(
          "Provider {} is rate-limiting Purser (HTTP 429, {} in the window); requests on {} "
          "fail or fall back while its limit resets.",
          target, num(inc), fmt::join(routes, ", "));
      f.next_steps = {
          fmt::format("Check the account's limits at {} (requests and tokens per minute) and "
                      "ask for a raise if the load is expected.",
                      target),
          "Spread the load over more provider keys or regions, or add a fallback target.",
          "Lower the rpm/tpm limits of the keys that drive this route so Purser queues instead "
          "of the provider refusing."};
    } else {
      f.explanation = fmt::format(
          "Provider {} is failing: {} server errors or connection failures in the window, "
          "starting {}; Purser retries and falls back, and requests on {} fail when no fallback "
          "is left.",
          target, num(inc), formatTime(es.onset), fmt::join(routes, ", "));
      f.next_steps = {fmt::format("Check {}'s status page and the error bodies in the gateway "
                                  "log.",
                                  target),
                      "Move weight to another provider or region until it recovers.",
                      "Keep the cooldown on; check that a fallback target exists for every "
                      "route that uses it."};
    }
    emit(std::move(c));
  }

  void budgets() {
    std::set<std::string> scopes;
    for (const Series* s : named("purser_wallet_spent_ratio")) {
      if (auto sc = s->label("scope")) scopes.insert(std::string(*sc));
    }
    for (const LogLine& l : c_.logs) {
      if (contains(l.line, "budget exceeded")) {
        if (auto w = logfmtValue(l.line, "wallet")) scopes.insert(*w);
      }
    }
    for (const std::string& scope : scopes) budget(scope);
  }

  void budget(const std::string& scope) {
    auto subject = scopeSubject(scope);
    if (!subject) return;
    const Series* ratio = one("purser_wallet_spent_ratio", {{"scope", scope}});
    Shift rs;
    bool full = false;
    if (ratio != nullptr) {
      rs = upShift(gaugeOf(*ratio));
      full = maxOf(ratio->v) >= 0.999;
    }
    auto lines = logs("", {"budget exceeded", "budget_exceeded"});
    std::erase_if(lines, [&](const LogLine* l) {
      auto w = logfmtValue(l->line, "wallet");
      return !w || *w != scope;
    });
    const Event* alert = nullptr;
    for (const Event& ev : c_.events) {
      if (ev.kind == "wallet.alert" && ev.object == scope &&
          (contains(ev.message, "100%") || contains(ev.message, "hard"))) {
        alert = &ev;
        break;
      }
    }
    // A hard wallet refuses a request whose worst case does not fit in what is left, so it
    // may stop short of its limit: near it (>= 95 %), requests refused before any upstream
    // that start once it got there say the same as a full wallet.
    const Series* refusals = nullptr;
    Shift refused;
    for (const Series* r : named("purser_gateway_requests_total")) {
      if (!r->label("target").value_or("").empty() || r->label("code").value_or("") != "429") {
        continue;
      }
      Shift qs = upShift(counterRate(*r));
      if (qs.valid && qs.peak > 0 && qs.high >= 3 &&
          (refusals == nullptr || qs.peak > refused.peak)) {
        refusals = r;
        refused = qs;
      }
    }
    bool near = false;
    TimeMs near_at = 0;
    if (!full && ratio != nullptr && refusals != nullptr) {
      for (size_t i = 0; i < ratio->v.size(); ++i) {
        if (ratio->v[i] >= 0.95) {
          near_at = ratio->t[i];
          break;
        }
      }
      near = near_at > 0 && refused.onset >= near_at - 2 * step_;
    }
    if (!full && !near && lines.empty()) return;
    Candidate c;
    Finding& f = c.f;
    f.cause = "budget_exhausted";
    f.subject = *subject;
    double s = 0;
    if (near) {
      s += 0.35;
      f.evidence.push_back(metric(*ratio, rs,
                                  fmt::format("wallet {} spent {} -> {} of its limit; what is "
                                              "left is less than a request may cost",
                                              scope, num(rs.base), num(maxOf(ratio->v)))));
      f.onset = near_at;
    }
    if (full) {
      s += 0.45;
      f.evidence.push_back(metric(*ratio, rs,
                                  fmt::format("wallet {} spent {} -> {} of its limit", scope,
                                              num(rs.base), num(maxOf(ratio->v)))));
      for (size_t i = 0; i < ratio->v.size(); ++i) {
        if (ratio->v[i] >= 0.999) {
          f.onset = ratio->t[i];
          break;
        }
      }
    }
    std::set<std::string> routes;
    if (!lines.empty()) {
      s += 0.3;
      addLogs(f, lines);
      for (const LogLine* l : lines) {
        if (auto r = logfmtValue(l->line, "route")) routes.insert(*r);
        if (auto t = logfmtValue(l->line, "team")) c.affects.push_back({"team", *t});
        if (auto p = logfmtValue(l->line, "principal")) {
          if (auto ps = scopeSubject(*p)) c.affects.push_back(*ps);
        }
      }
      if (f.onset == 0) f.onset = lines.front()->time;
    }
    // Refusals with no target: requests the gateway turned away before any upstream.
    if (refusals != nullptr) {
      s += 0.1;
      f.evidence.push_back(metric(*refusals, refused,
                                  fmt::format("requests refused before any upstream "
                                              "{}/s -> {}/s",
                                              num(refused.base), num(refused.peak))));
      if (lines.empty()) {
        if (auto route = refusals->label("route")) routes.insert(std::string(*route));
      }
    }
    if (alert != nullptr) {
      s += 0.1;
      f.evidence.push_back(event(*alert));
    }
    if (!full && !near && ratio != nullptr) s *= 0.6;  // the metric disagrees with the log
    for (const std::string& r : routes) c.affects.push_back({"route", r});
    c.strength = std::min(s, 0.95);
    f.explanation = fmt::format(
        "The {} wallet {} is spent{}; the gateway refuses its requests with 429 "
        "budget_exceeded while other callers are served.",
        subject->kind, subject->name, alert != nullptr ? fmt::format(" ({})", alert->message) : "");
    f.next_steps = {
        fmt::format("Review {}'s usage for the period (purser usage --{} {}).", scope,
                    subject->kind, subject->name),
        "Raise the limit or top the wallet up if the spend is legitimate; otherwise find the "
        "caller that ran away (a loop, a retry storm).",
        "Consider a soft alert threshold below the hard limit for this wallet."};
    emit(std::move(c));
  }

  void queues() {
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

  std::string queueOf(const std::string& object) const {
    auto it = workloads_.find(object);
    return it == workloads_.end() ? "" : it->second->queue;
  }

  void quota(const std::string& q) {
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
      f.evidence.push_back(
          metric(*at_used, upShift(gaugeOf(*at_used)),
                 fmt::format("{} of {} {} in use ({} nominal) for {} samples",
                             num(at_used->v.back()), at_used->label("resource").value_or(""),
                             at_used->label("flavor").value_or(""), num(at_nominal->v.back()),
                             at_samples)));
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

  std::string teamOfQueue(const std::string& q) const {
    for (const Workload& w : c_.inventory.workloads) {
      if (w.queue == q) return w.ns;
    }
    return "";
  }

  void churn(const std::string& q) {
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

  void idle() {
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

  // Audit changes that precede a change in behaviour of what they changed.
  static bool behaviourChange(const Event& ev) {
    if (ev.source != "audit") return false;
    std::string_view kind = ev.kind;
    if (!(kind.starts_with("route.") || kind.starts_with("deployment.") ||
          kind.starts_with("provider.") || kind.starts_with("target.") ||
          kind.starts_with("model."))) {
      return false;
    }
    // The changed field is named before the first colon ("timeout: 60s -> 3s"). Tags, labels,
    // descriptions and owners change nothing a request meets; anything else may.
    std::string_view m = ev.message;
    size_t colon = m.find(':');
    std::string_view field = colon == std::string_view::npos ? m : m.substr(0, colon);
    while (!field.empty() && (field.front() == ' ' || field.front() == '"')) field.remove_prefix(1);
    static constexpr std::string_view kCosmetic[] = {"tags",         "tag",         "labels",
                                                     "label",        "description", "owner",
                                                     "display_name", "comment",     "annotations"};
    for (std::string_view c : kCosmetic) {
      if (field == c) return false;
    }
    return true;
  }

  void configChanges() {
    for (const Event& ev : c_.events) {
      if (!behaviourChange(ev)) continue;
      std::string object = ev.object;
      Subject subject;
      std::string route;
      if (deployments_.contains(object)) {
        subject = {"deployment", object};
        route = deployments_.at(object)->route;
      } else {
        subject = {"route", object};
        route = object;
      }
      // What changed after it, within a few minutes: another finding touching the object, or
      // the traffic split of its route.
      Candidate c;
      Finding& f = c.f;
      f.cause = "bad_config_change";
      f.subject = subject;
      f.onset = ev.time;
      f.evidence.push_back(event(ev));
      double s = 0;
      for (const Candidate& other : out_) {
        if (other.f.cause == "bad_config_change" || other.f.onset < ev.time - kMinute ||
            other.f.onset > ev.time + 8 * kMinute) {
          continue;
        }
        bool touches = other.f.subject == subject ||
                       (!route.empty() && other.f.subject == Subject{"route", route});
        for (const Subject& a : other.affects) {
          if (a == subject || (!route.empty() && a == Subject{"route", route})) touches = true;
        }
        if (!touches) continue;
        s = std::max(s, 0.75);
        for (const Evidence& e : other.f.evidence) {
          if (f.evidence.size() >= 4) break;
          f.evidence.push_back(e);
        }
      }
      // The route's own answers changed right after it: more of them fail, or they are slower.
      auto near = [&](TimeMs onset) {
        return onset >= ev.time - step_ - 1000 && onset <= ev.time + 5 * kMinute;
      };
      {
        std::vector<Points> failed;
        const Series* shown = nullptr;
        for (const Series* r : select("purser_gateway_requests_total", {{"route", route}})) {
          std::string_view code = r->label("code").value_or("");
          if (code.empty() || code.front() == '2' || code == "429" || code == "499") continue;
          failed.push_back(counterRate(*r));
          if (shown == nullptr || counterIncrease(*r) > counterIncrease(*shown)) shown = r;
        }
        Shift fs = upShift(sumOf(failed));
        if (shown != nullptr && fs.valid && fs.peak > 0 && fs.high >= 3 &&
            fs.ratio(1.0 / 60) >= 3 && near(fs.onset)) {
          s = std::max(s, 0.75);
          f.evidence.push_back(metric(*shown, fs,
                                      fmt::format("failed requests on {} {}/s -> {}/s after the "
                                                  "change",
                                                  route, num(fs.base), num(fs.peak))));
        }
        for (const Deployment& d : c_.inventory.deployments) {
          if (d.route != route) continue;
          for (const Series* e :
               select("purser_gateway_upstream_errors_total", {{"target", d.name}})) {
            Shift es = upShift(counterRate(*e));
            if (es.valid && es.peak > 0 && es.high >= 3 && counterIncrease(*e) >= 5 &&
                near(es.onset)) {
              s = std::max(s, 0.7);
              if (f.evidence.size() < 4) {
                f.evidence.push_back(metric(
                    *e, es,
                    fmt::format("{} errors from {} {}/s -> {}/s", e->label("kind").value_or(""),
                                d.name, num(es.base), num(es.peak))));
              }
              break;
            }
          }
        }
        for (const Event& cool : c_.events) {
          if (cool.kind == "target.cooldown" && cool.object.starts_with(route + "/") &&
              cool.time >= ev.time - step_ && cool.time <= ev.time + 5 * kMinute) {
            if (s > 0) f.evidence.push_back(event(cool));
            break;
          }
        }
      }
      // The split of the route's traffic across its targets moved right after the change.
      for (const Series* r : select("purser_gateway_requests_total", {{"route", route}})) {
        Points split = rate(*r);
        Shift down = downShift(split);
        Shift up = upShift(split);
        bool moved = false;
        Shift used;
        if (down.valid && down.base > 0 && down.peak <= 0.4 * down.base &&
            std::llabs(down.onset - ev.time) <= 3 * kMinute) {
          moved = true;
          used = down;
        } else if (up.valid && up.ratio(0.01) >= 2 &&
                   std::llabs(up.onset - ev.time) <= 3 * kMinute) {
          moved = true;
          used = up;
        }
        if (moved) {
          s = std::max(s, 0.6) + 0.1;
          f.evidence.push_back(
              metric(*r, used,
                     fmt::format("requests to {} {}/s -> {}/s after the change",
                                 r->label("target").value_or(""), num(used.base), num(used.peak))));
          break;
        }
      }
      if (s == 0) continue;
      c.strength = std::min(s + 0.1, 0.95);
      c.affects = {{"route", route}};
      for (const Deployment& d : c_.inventory.deployments) {
        if (d.route == route) c.affects.push_back({"deployment", d.name});
      }
      f.explanation = fmt::format(
          "{} changed {} {} at {} (\"{}\"), and its behaviour changed within minutes after; the "
          "change is the likely cause and what followed its effect.",
          ev.actor.empty() ? "Someone" : ev.actor, subject.kind, object, formatTime(ev.time),
          ev.message);
      f.next_steps = {
          fmt::format("Review the change to {} in the audit log and roll it back if it was not "
                      "intended.",
                      object),
          "Compare the route's targets, weights and limits before and after the change.",
          "Require review for route changes, or stage them with a canary weight."};
      // The findings it explains rank below it.
      for (Candidate& other : out_) {
        if (other.f.cause == "bad_config_change") continue;
        if (other.f.onset < ev.time - kMinute || other.f.onset > ev.time + 8 * kMinute) continue;
        bool touches = other.f.subject == subject;
        for (const Subject& a : other.affects) {
          if (a == subject || (!route.empty() && a == Subject{"route", route})) touches = true;
        }
        if (touches) other.explained = true;
      }
      emit(std::move(c));
    }
  }

  const Case& c_;
  std::unordered_map<std::string, std::vector<const Series*>> by_name_;
  std::map<std::string, const Deployment*> deployments_;
  std::map<std::string, const Workload*> workloads_;
  std::map<std::string, const NodeInfo*> nodes_;
  std::map<std::string, std::vector<Subject>> gpu_users_;
  TimeMs step_ = 30'000;
  std::vector<Candidate> out_;
};

// ------------------------------------------------------------------------ scope and ranking

struct Scope {
  bool all = false;
  std::set<std::pair<std::string, std::string>> direct;
  std::set<std::pair<std::string, std::string>> related;

  void add(const std::string& kind, const std::string& name) {
    if (!name.empty()) direct.insert({kind, name});
  }
  double weight(const Candidate& c) const {
    if (all) return 1.0;
    if (direct.contains({c.f.subject.kind, c.f.subject.name})) return 1.0;
    if (related.contains({c.f.subject.kind, c.f.subject.name})) return 0.85;
    for (const Subject& a : c.affects) {
      if (direct.contains({a.kind, a.name})) return 0.9;
    }
    return 0;
  }
};

Scope scopeOf(const Case& c) {
  Scope s;
  const Question& q = c.question;
  const Inventory& inv = c.inventory;
  auto addDeployment = [&](const Deployment& d) {
    s.add("deployment", d.name);
    s.add("node", d.node);
    for (int64_t g : d.gpus) s.add("gpu", gpuName(d.node, g));
  };
  auto addWorkload = [&](const Workload& w) {
    s.add("workload", w.id());
    s.add("queue", w.queue);
    if (!w.node.empty()) {
      for (int64_t g : w.gpus) s.add("gpu", gpuName(w.node, g));
    }
  };
  if (q.kind == "fleet") {
    s.all = true;
  } else if (q.kind == "route") {
    s.add("route", q.name);
    for (const Deployment& d : inv.deployments) {
      if (d.route == q.name) addDeployment(d);
    }
    for (const Series& ser : c.series) {
      if (ser.name != "purser_gateway_requests_total") continue;
      if (ser.label("route") != std::optional<std::string_view>(q.name)) continue;
      if (auto t = ser.label("target")) s.add("provider", std::string(*t));
    }
  } else if (q.kind == "deployment") {
    for (const Deployment& d : inv.deployments) {
      if (d.name == q.name) {
        addDeployment(d);
        s.related.insert({"route", d.route});
      }
    }
    s.add("deployment", q.name);
  } else if (q.kind == "workload") {
    for (const Workload& w : inv.workloads) {
      if (w.id() == q.name || w.name == q.name) {
        addWorkload(w);
        s.add("node", w.node);
      }
    }
  } else if (q.kind == "queue") {
    s.add("queue", q.name);
    for (const Workload& w : inv.workloads) {
      if (w.queue == q.name) addWorkload(w);
    }
  } else if (q.kind == "team") {
    s.add("team", q.name);
    for (const Workload& w : inv.workloads) {
      if (w.ns == q.name) addWorkload(w);
    }
    // Keys and users the gateway logs as the team's.
    for (const LogLine& l : c.logs) {
      auto team = logfmtValue(l.line, "team");
      if (!team || *team != q.name) continue;
      if (auto w = logfmtValue(l.line, "wallet")) {
        if (auto sub = scopeSubject(*w)) s.add(sub->kind, sub->name);
      }
      if (auto p = logfmtValue(l.line, "principal")) {
        if (auto sub = scopeSubject(*p)) s.add(sub->kind, sub->name);
      }
    }
  } else if (q.kind == "user") {
    s.add("user", q.name);
    for (const LogLine& l : c.logs) {
      auto p = logfmtValue(l.line, "principal");
      if (!p || *p != "user:" + q.name) continue;
      if (auto w = logfmtValue(l.line, "wallet")) {
        if (auto sub = scopeSubject(*w)) s.add(sub->kind, sub->name);
      }
    }
  } else if (q.kind == "node") {
    s.add("node", q.name);
    for (const NodeInfo& n : inv.nodes) {
      if (n.name != q.name) continue;
      for (int64_t g = 0; g < n.gpus; ++g) s.add("gpu", gpuName(n.name, g));
    }
    for (const Deployment& d : inv.deployments) {
      if (d.node == q.name) addDeployment(d);
    }
    for (const Workload& w : inv.workloads) {
      if (w.node == q.name) addWorkload(w);
    }
  } else {
    s.add(q.kind, q.name);
  }
  return s;
}

// How well a cause answers a symptom.
double symptomWeight(const std::string& symptom, const std::string& cause) {
  if (symptom == "any" || symptom.empty()) return 1.0;
  static const std::map<std::string, std::map<std::string, double>> kTable = {
      {"slow",
       {{"kv_cache_exhaustion", 1},
        {"replica_saturation", 1},
        {"gpu_thermal_throttle", 1},
        {"noisy_neighbor", 1},
        {"traffic_shift", 1},
        {"bad_config_change", 1},
        {"nvlink_degraded", 1},
        {"gpu_hardware_fault", 0.7},
        {"gpu_memory_oom", 0.7},
        // Retries, backoff and fallback to a slower target are latency too.
        {"upstream_errors", 0.8},
        {"upstream_rate_limited", 0.8}}},
      {"errors",
       {{"gpu_memory_oom", 1},
        {"gpu_hardware_fault", 1},
        {"upstream_errors", 1},
        {"upstream_rate_limited", 1},
        {"budget_exhausted", 1},
        {"bad_config_change", 1},
        {"kv_cache_exhaustion", 0.6},
        {"replica_saturation", 0.6},
        {"nvlink_degraded", 0.6},
        {"preemption_churn", 0.6},
        {"quota_exhausted", 0.5}}},
      {"pending",
       {{"quota_exhausted", 1},
        {"preemption_churn", 1},
        {"gpu_hardware_fault", 0.6},
        {"idle_allocation", 0.6},
        {"bad_config_change", 0.6}}},
      {"over_budget", {{"budget_exhausted", 1}, {"traffic_shift", 0.6}}},
      {"idle", {{"idle_allocation", 1}, {"preemption_churn", 0.5}, {"quota_exhausted", 0.5}}},
  };
  auto it = kTable.find(symptom);
  if (it == kTable.end()) return 1.0;
  auto jt = it->second.find(cause);
  return jt == it->second.end() ? 0.4 : jt->second;
}

constexpr double kReportThreshold = 0.3;

}  // namespace

Diagnosis diagnose(const Case& c) {
  Analysis analysis(c);
  std::vector<Candidate> candidates = analysis.run();
  // A fault in the path of a route means its traffic change is not the story; a fault on a
  // replica (its GPU, its memory) explains that replica's queue.
  for (Candidate& t : candidates) {
    if (t.f.cause == "traffic_shift") {
      for (const Candidate& o : candidates) {
        if (&o == &t || o.f.cause == "traffic_shift" || o.strength < 0.45) continue;
        bool same_route = o.f.subject == t.f.subject;
        for (const Subject& a : o.affects) same_route = same_route || a == t.f.subject;
        if (same_route) t.strength *= 0.4;
      }
    }
    // Workloads preempted again and again wait for quota in between: the churn explains the
    // queue's pending work.
    if (t.f.cause == "quota_exhausted") {
      for (const Candidate& o : candidates) {
        if (o.f.cause == "preemption_churn" && o.f.subject == t.f.subject) t.explained = true;
      }
    }
    if (t.f.cause == "replica_saturation") {
      for (const Candidate& o : candidates) {
        if (o.f.cause == "replica_saturation" || o.f.cause == "traffic_shift" ||
            o.f.cause == "bad_config_change" || o.strength < 0.45) {
          continue;
        }
        bool same = o.f.subject == t.f.subject;
        for (const Subject& a : o.affects) same = same || a == t.f.subject;
        if (same) t.explained = true;
      }
    }
  }
  Scope scope = scopeOf(c);
  Diagnosis d;
  for (Candidate& cand : candidates) {
    double w = scope.weight(cand);
    if (w == 0) continue;
    double conf = cand.strength * w * symptomWeight(c.question.symptom, cand.f.cause);
    if (cand.explained) conf *= 0.5;
    cand.f.confidence = std::round(std::clamp(conf, 0.0, 1.0) * 100) / 100;
    if (cand.f.confidence < kReportThreshold && !cand.explained) continue;
    if (cand.f.confidence < 0.15) continue;
    d.findings.push_back(std::move(cand.f));
  }
  std::stable_sort(d.findings.begin(), d.findings.end(), [](const Finding& a, const Finding& b) {
    if (a.confidence != b.confidence) return a.confidence > b.confidence;
    return a.onset < b.onset;
  });
  if (d.findings.empty() || d.findings.front().confidence < kReportThreshold) {
    Finding none;
    none.cause = "none";
    none.confidence = 0.8;
    none.explanation =
        "Nothing in the scope of the question stands out from its own baseline or its peers in "
        "this window: no fault signature was found in the model servers, GPUs, providers, "
        "budgets or queues it depends on.";
    none.next_steps = {"Widen the window or ask about the whole fleet if the symptom persists.",
                       "Check the client side: its own timeouts, network and retries."};
    d.findings.insert(d.findings.begin(), std::move(none));
  }
  return d;
}

}  // namespace purser::diagnose
