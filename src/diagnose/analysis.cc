// The analysis: its table of detectors, the lookups they share over the case's series, logs and
// events, and how evidence is written. See analysis.h.
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

const std::vector<Analysis::Detector>& Analysis::detectors() {
  // In this order: where two findings tie on confidence and onset, the earlier detector's first.
  static const std::vector<Detector> kDetectors = {
      {"serving", &Analysis::serving},    {"gpu", &Analysis::gpusAndNodes},
      {"upstream", &Analysis::providers}, {"budget", &Analysis::budgets},
      {"queues", &Analysis::fleetQueues}, {"changes", &Analysis::configChanges},
  };
  return kDetectors;
}

auto Analysis::run() -> std::vector<Candidate> {
  for (const Detector& d : detectors()) (this->*d.run)();
  return std::move(out_);
}

auto Analysis::named(const std::string& name) const -> const std::vector<const Series*>& {
  static const std::vector<const Series*> kNone;
  auto it = by_name_.find(name);
  return it == by_name_.end() ? kNone : it->second;
}

auto Analysis::select(const std::string& name,
                      std::initializer_list<std::pair<std::string_view, std::string_view>> match)
    const -> std::vector<const Series*> {
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

auto Analysis::one(const std::string& name,
                   std::initializer_list<std::pair<std::string_view, std::string_view>> match) const
    -> const Series* {
  auto all = select(name, match);
  return all.empty() ? nullptr : all.front();
}

auto Analysis::engine(const std::string& name, const std::string& deployment) const
    -> const Series* {
  if (const Series* s = one(name, {{"instance", deployment}})) return s;
  if (const Series* s = one(name, {{"target", deployment}})) return s;
  return one(name, {{"pod", deployment}});
}

auto Analysis::gpuSeries(const std::string& name, const std::string& node, int64_t index) const
    -> const Series* {
  std::string idx = std::to_string(index);
  if (const Series* s = one(name, {{"Hostname", node}, {"gpu", idx}})) return s;
  return one(name, {{"node", node}, {"gpu", idx}});
}

auto Analysis::histMean(const std::string& base, const Labels& labels) const
    -> std::optional<std::pair<Points, const Series*>> {
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

auto Analysis::engineHist(const std::string& base, const std::string& d) const
    -> std::optional<std::pair<Points, const Series*>> {
  const Series* sum = engine(base + "_sum", d);
  if (sum == nullptr) return std::nullopt;
  return histMean(base, sum->labels);
}

auto Analysis::metric(const Series& s, const Shift& sh, std::string summary, std::string name) const
    -> Evidence {
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

auto Analysis::histEvidence(const Series& sum_series, const std::string& base, const Shift& sh,
                            const std::string& what) const -> Evidence {
  Evidence e = metric(sum_series, sh,
                      fmt::format("mean {} {} s -> {} s", what, num(sh.base), num(sh.peak)), base);
  return e;
}

auto Analysis::log(const LogLine& l) -> Evidence {
  Evidence e;
  e.kind = Evidence::Kind::kLog;
  e.time = l.time;
  e.source = l.source;
  e.line = l.line;
  return e;
}

auto Analysis::event(const Event& ev) -> Evidence {
  Evidence e;
  e.kind = Evidence::Kind::kEvent;
  e.time = ev.time;
  e.source = ev.source;
  e.event_kind = ev.kind;
  e.object = ev.object;
  e.message = ev.message;
  return e;
}

auto Analysis::logs(std::string_view source, std::initializer_list<std::string_view> needles) const
    -> std::vector<const LogLine*> {
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

auto Analysis::addLogs(Finding& f, const std::vector<const LogLine*>& lines, size_t max) -> void {
  if (lines.empty()) return;
  f.evidence.push_back(log(*lines.front()));
  if (max > 1 && lines.size() > 1) f.evidence.push_back(log(*lines.back()));
}

auto Analysis::replicaLatency(const std::string& d) const -> std::optional<Latency> {
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

auto Analysis::emit(Candidate c) -> void { out_.push_back(std::move(c)); }

auto Analysis::lateStart(const Series& s) const -> bool {
  return !s.t.empty() && s.t.front() > c_.start + 2 * step_;
}

auto Analysis::rate(const Series& s) const -> Points {
  return rateOf(s, step_ < kRateSpanMs ? kRateSpanMs : 0);
}

auto Analysis::counterRate(const Series& s) const -> Points {
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

auto Analysis::counterIncrease(const Series& s) const -> double {
  if (s.v.empty()) return 0;
  double inc = s.v.back() - (lateStart(s) ? 0.0 : s.v.front());
  return std::isfinite(inc) ? std::max(inc, 0.0) : 0.0;
}

auto Analysis::oomObject(const Subject& subject, const std::string& source, const std::string& node,
                         const std::vector<int64_t>& gpus, std::vector<Subject> affects) -> void {
  auto lines = logs(source, {"CUDA out of memory", "OutOfMemoryError", "CUDA error: out of memory",
                             "OOM when allocating"});
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
    f.evidence.push_back(metric(*top_series, top_shift,
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

}  // namespace purser::diagnose
