// Incident files: see case_io.h.
#include "diagnose_io/case_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "common/json.h"
#include "common/logging.h"
#include "config/yaml_reader.h"
#include "observe/prom_text.h"

namespace purser::diagnose {

namespace {

Error lineError(const std::string& file, int line, std::string message) {
  return Error(ErrorCode::kInvalidArgument, fmt::format("line {}: {}", line, message))
      .at(file, line);
}

std::string_view trimLeft(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

std::string_view trimRight(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

size_t indentOf(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  return i;
}

// Where the `metrics: |` block literal lies: its header line and the lines of its content,
// as byte offsets into the text. Absent when the case writes its metrics some other way (the
// YAML reader then takes them).
struct Block {
  size_t header_begin = 0;
  size_t content_begin = 0;
  size_t content_end = 0;  // one past the last content line's line ending
  int first_line = 0;      // 1-based line of the first content line
  int lines = 0;           // content lines
};

std::optional<Block> findMetricsBlock(std::string_view text) {
  size_t pos = 0;
  int line_no = 1;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (line.starts_with("metrics:")) {
      std::string_view rest = trimRight(trimLeft(line.substr(8)));
      if (rest != "|" && rest != "|-" && rest != "|+") return std::nullopt;
      Block b;
      b.header_begin = pos;
      b.content_begin = std::min(eol + 1, text.size());
      b.first_line = line_no + 1;
      size_t p = b.content_begin;
      size_t indent = 0;
      size_t end = p;
      int count = 0;
      while (p < text.size()) {
        size_t e = text.find('\n', p);
        if (e == std::string_view::npos) e = text.size();
        std::string_view l = trimRight(text.substr(p, e - p));
        if (!l.empty()) {
          size_t ind = indentOf(l);
          if (indent == 0) {
            if (ind == 0) break;
            indent = ind;
          } else if (ind < indent) {
            break;
          }
        }
        p = std::min(e + 1, text.size());
        ++count;
        end = p;
        if (e == text.size()) break;
      }
      b.content_end = end;
      b.lines = count;
      return b;
    }
    pos = eol + 1;
    ++line_no;
  }
  return std::nullopt;
}

// Reads the sample lines of the metrics block into series.
class SampleReader {
 public:
  SampleReader(const std::string& file, const CaseLimits& limits, std::vector<Series>& out)
      : file_(file), limits_(limits), out_(out) {}

  Result<void> line(std::string_view raw, int line_no) {
    std::string_view l = trimRight(trimLeft(raw));
    if (l.empty() || l.front() == '#') return {};
    if (l.size() > limits_.max_line_bytes) {
      return std::unexpected(
          lineError(file_, line_no,
                    fmt::format("a metric line is longer than {} bytes", limits_.max_line_bytes)));
    }
    // The series key ends at the closing brace when there are labels (a label value may hold
    // blanks), else at the first blank.
    size_t key_end;
    size_t brace = l.find('{');
    size_t first_blank = l.find(' ');
    if (brace != std::string_view::npos &&
        (first_blank == std::string_view::npos || brace < first_blank)) {
      size_t close = l.rfind('}');
      if (close == std::string_view::npos || close < brace) {
        return std::unexpected(lineError(file_, line_no, "a label set is not closed with '}'"));
      }
      key_end = close + 1;
    } else {
      key_end = first_blank;
    }
    if (key_end == std::string_view::npos || key_end >= l.size()) {
      return std::unexpected(lineError(file_, line_no, "a sample needs a value and a timestamp"));
    }
    std::string_view key = l.substr(0, key_end);
    std::string_view rest = trimLeft(l.substr(key_end));
    size_t blank = rest.find(' ');
    if (blank == std::string_view::npos) {
      return std::unexpected(
          lineError(file_, line_no, "a sample needs a timestamp (seconds) after its value"));
    }
    std::string_view value_text = rest.substr(0, blank);
    std::string_view ts_text = trimLeft(rest.substr(blank));
    if (ts_text.find(' ') != std::string_view::npos) {
      return std::unexpected(
          lineError(file_, line_no, "unexpected text after the sample's timestamp"));
    }
    std::optional<double> value = observe::parseSampleValue(value_text);
    if (!value) {
      return std::unexpected(lineError(
          file_, line_no, fmt::format("\"{}\" is not a sample value", toValidUtf8(value_text))));
    }
    std::optional<double> seconds = observe::parseSampleValue(ts_text);
    if (!seconds || !std::isfinite(*seconds) || *seconds < 0 || *seconds > 1e11) {
      return std::unexpected(
          lineError(file_, line_no,
                    fmt::format("\"{}\" is not a timestamp in seconds", toValidUtf8(ts_text))));
    }
    // A thousandth of a millisecond over: "1763632800.123" is 1763632800122.9999... ms in binary.
    auto ts = static_cast<TimeMs>(std::floor(*seconds * 1000.0 + 1e-3));

    size_t index;
    auto it = index_.find(key);
    if (it != index_.end()) {
      index = it->second;
    } else {
      if (out_.size() >= limits_.max_series) {
        return std::unexpected(
            lineError(file_, line_no, fmt::format("more than {} series", limits_.max_series)));
      }
      // The first sample of a series: its name and labels are checked whole by the exposition
      // reader; later lines with the same bytes are the same series.
      std::string probe(key);
      probe += " 0\n";
      auto parsed = observe::parsePrometheusText(probe, {}, observe::TextFormat::kPrometheus);
      if (!parsed || parsed->samples.size() != 1) {
        std::string why = parsed ? "not one sample" : parsed.error().message;
        if (why.starts_with("line 1: ")) why = why.substr(8);
        return std::unexpected(lineError(file_, line_no, why));
      }
      Series s;
      s.name = std::move(parsed->samples[0].name);
      s.labels = std::move(parsed->samples[0].labels);
      std::sort(s.labels.begin(), s.labels.end());
      index = out_.size();
      out_.push_back(std::move(s));
      index_.emplace(key, index);
    }
    if (++samples_ > limits_.max_samples) {
      return std::unexpected(
          lineError(file_, line_no, fmt::format("more than {} samples", limits_.max_samples)));
    }
    Series& s = out_[index];
    if (!s.t.empty() && ts <= s.t.back()) return {};  // repeated or out of order: dropped
    s.t.push_back(ts);
    s.v.push_back(*value);
    return {};
  }

 private:
  const std::string& file_;
  const CaseLimits& limits_;
  std::vector<Series>& out_;
  std::unordered_map<std::string_view, size_t> index_;
  size_t samples_ = 0;
};

Result<void> readSampleLines(std::string_view text, int first_line, const std::string& file,
                             const CaseLimits& limits, std::vector<Series>& out) {
  SampleReader reader(file, limits, out);
  size_t pos = 0;
  int line_no = first_line;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    if (auto r = reader.line(text.substr(pos, eol - pos), line_no); !r) return r;
    pos = eol + 1;
    ++line_no;
  }
  return {};
}

std::optional<std::string> scalar(config::YamlReader& r, const YAML::Node& n,
                                  const std::string& path) {
  if (!n.IsDefined() || n.IsNull()) return std::string();
  return r.asString(n, path);
}

std::vector<int64_t> gpuList(config::YamlReader& r, const YAML::Node& n, const std::string& path) {
  std::vector<int64_t> out;
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsSequence()) {
    r.addError(n, path, "expected a list of GPU indexes");
    return out;
  }
  for (size_t i = 0; i < n.size(); ++i) {
    if (auto v = r.asInt(n[i], fmt::format("{}[{}]", path, i), 0, 1 << 20)) out.push_back(*v);
  }
  return out;
}

template <typename F>
void forEachItem(config::YamlReader& r, const YAML::Node& seq, const std::string& path,
                 size_t limit, F&& f) {
  if (!seq.IsDefined() || seq.IsNull()) return;
  if (!seq.IsSequence()) {
    r.addError(seq, path, "expected a list");
    return;
  }
  if (seq.size() > limit) {
    r.addError(seq, path, fmt::format("more than {} entries", limit));
    return;
  }
  for (size_t i = 0; i < seq.size(); ++i) {
    std::string p = fmt::format("{}[{}]", path, i);
    auto m = r.map(seq[i], p);
    if (!m.valid()) continue;
    f(m, p);
  }
}

std::optional<TimeMs> requiredTime(config::YamlReader& r, config::YamlReader::Map& m,
                                   const std::string& key) {
  std::string text;
  m.required(key, text);
  if (text.empty()) return std::nullopt;
  auto t = parseTime(text);
  if (!t) {
    r.addError(m.node()[key], m.child(key),
               fmt::format("\"{}\" is not a time such as 2026-11-20T10:00:00Z", text));
  }
  return t;
}

}  // namespace
namespace {

// A JSON string is a YAML double-quoted scalar (YAML 1.2 reads JSON), so JSON's escaping is
// YAML's; invalid UTF-8 becomes U+FFFD.
std::string yamlString(std::string_view text) { return "\"" + jsonEscape(text) + "\""; }

// A label value as the exposition format escapes it.
void appendLabelValue(std::string& out, std::string_view v) {
  for (char ch : v) {
    if (ch == '\\') {
      out += "\\\\";
    } else if (ch == '"') {
      out += "\\\"";
    } else if (ch == '\n') {
      out += "\\n";
    } else {
      out.push_back(ch);
    }
  }
}

void appendSampleValue(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else {
    fmt::format_to(std::back_inserter(out), "{}", v);
  }
}

void appendSeconds(std::string& out, TimeMs t) {
  const int64_t secs = t / 1000;
  const int64_t ms = t % 1000;
  if (ms == 0) {
    fmt::format_to(std::back_inserter(out), "{}", secs);
  } else {
    fmt::format_to(std::back_inserter(out), "{}.{:03}", secs, ms);
  }
}

std::string gpuIndexes(const std::vector<int64_t>& gpus) {
  return fmt::format("[{}]", fmt::join(gpus, ", "));
}

}  // namespace

std::string writeCase(const Case& c) {
  std::string out;
  size_t samples = 0;
  for (const auto& s : c.series) samples += s.t.size();
  out.reserve(samples * 80 + c.events.size() * 200 + c.logs.size() * 200 + 4096);
  auto it = std::back_inserter(out);
  const auto time = [](TimeMs t) { return yamlString(formatTime(t, true)); };
  fmt::format_to(it, "name: {}\n", yamlString(c.name));
  fmt::format_to(it, "question: {{kind: {}, name: {}, symptom: {}}}\n", yamlString(c.question.kind),
                 yamlString(c.question.name), yamlString(c.question.symptom));
  fmt::format_to(it, "window: {{start: {}, end: {}}}\n", time(c.start), time(c.end));
  const Inventory& inv = c.inventory;
  out += inv.nodes.empty() ? "inventory:\n  nodes: []\n" : "inventory:\n  nodes:\n";
  for (const auto& n : inv.nodes) {
    fmt::format_to(it, "    - {{name: {}, gpus: {}, gpu_type: {}}}\n", yamlString(n.name), n.gpus,
                   yamlString(n.gpu_type));
  }
  out += inv.deployments.empty() ? "  deployments: []\n" : "  deployments:\n";
  for (const auto& d : inv.deployments) {
    fmt::format_to(it, "    - {{name: {}, route: {}, provider: {}, node: {}, gpus: {}}}\n",
                   yamlString(d.name), yamlString(d.route), yamlString(d.provider),
                   d.node.empty() ? std::string("null") : yamlString(d.node), gpuIndexes(d.gpus));
  }
  out += inv.workloads.empty() ? "  workloads: []\n" : "  workloads:\n";
  for (const auto& w : inv.workloads) {
    fmt::format_to(it, "    - {{namespace: {}, name: {}, queue: {}, node: {}, gpus: {}}}\n",
                   yamlString(w.ns), yamlString(w.name), yamlString(w.queue),
                   w.node.empty() ? std::string("null") : yamlString(w.node), gpuIndexes(w.gpus));
  }
  out += inv.teams.empty() ? "  teams: []\n" : "  teams:\n";
  for (const auto& t : inv.teams) {
    fmt::format_to(it, "    - {{name: {}, tenant: {}}}\n", yamlString(t.name),
                   yamlString(t.tenant));
  }
  out += "metrics: |\n";
  for (const auto& s : c.series) {
    std::string head = "  " + s.name;
    if (!s.labels.empty()) {
      head.push_back('{');
      for (size_t i = 0; i < s.labels.size(); ++i) {
        if (i > 0) head.push_back(',');
        head += s.labels[i].first;
        head += "=\"";
        appendLabelValue(head, s.labels[i].second);
        head.push_back('"');
      }
      head.push_back('}');
    }
    head.push_back(' ');
    for (size_t k = 0; k < s.t.size() && k < s.v.size(); ++k) {
      out += head;
      appendSampleValue(out, s.v[k]);
      out.push_back(' ');
      appendSeconds(out, s.t[k]);
      out.push_back('\n');
    }
  }
  out += c.events.empty() ? "events: []\n" : "events:\n";
  for (const auto& e : c.events) {
    fmt::format_to(it, "  - {{time: {}, source: {}, kind: {}", time(e.time), yamlString(e.source),
                   yamlString(e.kind));
    if (!e.actor.empty()) fmt::format_to(it, ", actor: {}", yamlString(e.actor));
    fmt::format_to(it, ", object: {}", yamlString(e.object));
    if (!e.reason.empty()) fmt::format_to(it, ", reason: {}", yamlString(e.reason));
    fmt::format_to(it, ", message: {}}}\n", yamlString(e.message));
  }
  out += c.logs.empty() ? "logs: []\n" : "logs:\n";
  for (const auto& l : c.logs) {
    fmt::format_to(it, "  - {{time: {}, source: {}, line: {}}}\n", time(l.time),
                   yamlString(l.source), yamlString(l.line));
  }
  if (c.expected_cause) {
    fmt::format_to(it, "expected:\n  cause: {}\n", yamlString(*c.expected_cause));
    if (c.expected_subject) {
      fmt::format_to(it, "  subject: {{kind: {}, name: {}}}\n",
                     yamlString(c.expected_subject->kind), yamlString(c.expected_subject->name));
    }
  }
  return out;
}

Result<Case> parseCase(std::string_view text, const std::string& file, const CaseLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return std::unexpected(
        Error(ErrorCode::kInvalidArgument,
              fmt::format("{}: the case is larger than {} bytes", file, limits.max_bytes)));
  }
  if (size_t bad = invalidUtf8At(text); bad != std::string_view::npos) {
    int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + bad, '\n'));
    return std::unexpected(lineError(file, line, "the text is not valid UTF-8"));
  }
  Case c;
  // The metrics block is read here; the YAML reader gets the rest, with the block's lines left
  // empty so that its line numbers stay those of the file.
  std::string rest;
  std::optional<Block> block = findMetricsBlock(text);
  if (block) {
    if (auto r = readSampleLines(
            text.substr(block->content_begin, block->content_end - block->content_begin),
            block->first_line, file, limits, c.series);
        !r) {
      return std::unexpected(r.error());
    }
    rest.reserve(text.size() - (block->content_end - block->header_begin) + block->lines + 16);
    rest.append(text.substr(0, block->header_begin));
    rest.append("metrics: \"\"\n");
    rest.append(static_cast<size_t>(block->lines), '\n');
    rest.append(text.substr(block->content_end));
  } else {
    rest.assign(text);
  }

  auto doc = config::parseYaml(rest, file);
  if (!doc) return std::unexpected(doc.error());
  config::YamlReader r(file);
  auto root = r.map(*doc, "");
  root.optional("name", c.name);

  auto q = root.map("question");
  q.required("kind", c.question.kind);
  q.required("name", c.question.name);
  q.optional("symptom", c.question.symptom);
  static const std::vector<std::string> kKinds = {"route",    "deployment", "workload", "queue",
                                                  "team",     "user",       "node",     "fleet",
                                                  "provider", "gpu",        "key"};
  static const std::vector<std::string> kSymptoms = {"slow",        "errors", "pending",
                                                     "over_budget", "idle",   "any"};
  if (!c.question.kind.empty() &&
      std::find(kKinds.begin(), kKinds.end(), c.question.kind) == kKinds.end()) {
    r.addError(q.node()["kind"], "question.kind",
               fmt::format("\"{}\" is not a kind of question; expected one of: {}", c.question.kind,
                           fmt::join(kKinds, ", ")));
  }
  if (std::find(kSymptoms.begin(), kSymptoms.end(), c.question.symptom) == kSymptoms.end()) {
    r.addError(q.node()["symptom"], "question.symptom",
               fmt::format("\"{}\" is not a symptom; expected one of: {}", c.question.symptom,
                           fmt::join(kSymptoms, ", ")));
  }

  auto w = root.map("window");
  auto start = requiredTime(r, w, "start");
  auto end = requiredTime(r, w, "end");
  if (start && end) {
    c.start = *start;
    c.end = *end;
    if (c.end <= c.start) r.addError(w.node(), "window", "the window ends before it starts");
  }

  auto inv = root.map("inventory");
  forEachItem(r, inv.get("nodes"), "inventory.nodes", limits.max_inventory,
              [&](config::YamlReader::Map& m, const std::string&) {
                NodeInfo n;
                m.required("name", n.name);
                m.optional("gpus", n.gpus, 0, 1 << 20);
                m.optional("gpu_type", n.gpu_type);
                c.inventory.nodes.push_back(std::move(n));
              });
  forEachItem(r, inv.get("deployments"), "inventory.deployments", limits.max_inventory,
              [&](config::YamlReader::Map& m, const std::string& p) {
                Deployment d;
                m.required("name", d.name);
                m.optional("route", d.route);
                m.optional("provider", d.provider);
                d.node = scalar(r, m.get("node"), p + ".node").value_or("");
                d.gpus = gpuList(r, m.get("gpus"), p + ".gpus");
                c.inventory.deployments.push_back(std::move(d));
              });
  forEachItem(r, inv.get("workloads"), "inventory.workloads", limits.max_inventory,
              [&](config::YamlReader::Map& m, const std::string& p) {
                Workload wl;
                m.required("namespace", wl.ns);
                m.required("name", wl.name);
                m.optional("queue", wl.queue);
                wl.node = scalar(r, m.get("node"), p + ".node").value_or("");
                wl.gpus = gpuList(r, m.get("gpus"), p + ".gpus");
                c.inventory.workloads.push_back(std::move(wl));
              });
  forEachItem(r, inv.get("teams"), "inventory.teams", limits.max_inventory,
              [&](config::YamlReader::Map& m, const std::string&) {
                Team t;
                m.required("name", t.name);
                m.optional("tenant", t.tenant);
                c.inventory.teams.push_back(std::move(t));
              });

  if (!block) {
    std::string metrics;
    root.optional("metrics", metrics);
    if (!metrics.empty()) {
      if (auto rr = readSampleLines(metrics, 0, file, limits, c.series); !rr) {
        return std::unexpected(rr.error());
      }
    }
  } else {
    root.get("metrics");
  }

  forEachItem(r, root.get("events"), "events", limits.max_events,
              [&](config::YamlReader::Map& m, const std::string&) {
                Event e;
                if (auto t = requiredTime(r, m, "time")) e.time = *t;
                m.optional("source", e.source);
                m.required("kind", e.kind);
                m.optional("reason", e.reason);
                m.optional("actor", e.actor);
                m.optional("object", e.object);
                m.optional("message", e.message);
                c.events.push_back(std::move(e));
              });
  forEachItem(r, root.get("logs"), "logs", limits.max_logs,
              [&](config::YamlReader::Map& m, const std::string&) {
                LogLine l;
                if (auto t = requiredTime(r, m, "time")) l.time = *t;
                m.optional("source", l.source);
                m.required("line", l.line);
                c.logs.push_back(std::move(l));
              });

  if (root.has("expected")) {
    auto e = root.map("expected");
    std::string cause;
    e.required("cause", cause);
    c.expected_cause = cause;
    if (e.has("subject")) {
      auto s = e.map("subject");
      Subject subject;
      s.required("kind", subject.kind);
      s.required("name", subject.name);
      c.expected_subject = subject;
    }
  }
  if (!r.ok()) return std::unexpected(r.error());
  std::stable_sort(c.events.begin(), c.events.end(),
                   [](const Event& a, const Event& b) { return a.time < b.time; });
  std::stable_sort(c.logs.begin(), c.logs.end(),
                   [](const LogLine& a, const LogLine& b) { return a.time < b.time; });
  return c;
}

}  // namespace purser::diagnose
