#include "diagnose/answer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "diagnose/signals.h"

namespace purser::diagnose {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return out;
}

bool nameMatches(const std::string& series, const std::string& cited) {
  if (series == cited) return true;
  for (const char* suffix : {"_bucket", "_sum", "_count", "_total"}) {
    if (series == cited + suffix) return true;
  }
  return false;
}

}  // namespace

Json toJson(const Evidence& e) {
  Json j = Json::object();
  switch (e.kind) {
    case Evidence::Kind::kMetric: {
      j["kind"] = "metric";
      j["name"] = e.name;
      Json labels = Json::object();
      for (const auto& [k, v] : e.labels) labels[k] = v;
      j["labels"] = std::move(labels);
      j["from"] = formatTime(e.from);
      j["to"] = formatTime(e.to);
      j["summary"] = e.summary;
      break;
    }
    case Evidence::Kind::kLog:
      j["kind"] = "log";
      j["time"] = formatTime(e.time);
      j["source"] = e.source;
      j["line"] = e.line;
      break;
    case Evidence::Kind::kEvent:
      j["kind"] = "event";
      j["time"] = formatTime(e.time);
      j["source"] = e.source;
      j["event_kind"] = e.event_kind;
      j["object"] = e.object;
      if (!e.message.empty()) j["message"] = e.message;
      break;
  }
  return j;
}

Json toJson(const Diagnosis& d) {
  Json findings = Json::array();
  for (const Finding& f : d.findings) {
    Json j = Json::object();
    j["cause"] = f.cause;
    if (f.cause != "none") j["subject"] = {{"kind", f.subject.kind}, {"name", f.subject.name}};
    j["confidence"] = f.confidence;
    Json ev = Json::array();
    for (const Evidence& e : f.evidence) ev.push_back(toJson(e));
    j["evidence"] = std::move(ev);
    j["explanation"] = f.explanation;
    j["next_steps"] = f.next_steps;
    if (f.onset != 0) j["onset"] = formatTime(f.onset);
    findings.push_back(std::move(j));
  }
  return Json{{"findings", std::move(findings)}};
}

bool evidenceInCase(const Case& c, const Evidence& e, std::string* why) {
  auto fail = [&](std::string reason) {
    if (why != nullptr) *why = std::move(reason);
    return false;
  };
  switch (e.kind) {
    case Evidence::Kind::kMetric: {
      for (const Series& s : c.series) {
        if (!nameMatches(s.name, e.name)) continue;
        bool all = true;
        for (const auto& [k, v] : e.labels) {
          auto l = s.label(k);
          // An empty value matches a series without the label, as in PromQL.
          if (v.empty() ? (l && !l->empty()) : (!l || *l != v)) {
            all = false;
            break;
          }
        }
        if (all) return true;
      }
      return fail(fmt::format("no series {} with those labels", e.name));
    }
    case Evidence::Kind::kLog: {
      if (e.line.size() < 20) return fail("a log excerpt shorter than 20 characters");
      for (const LogLine& l : c.logs) {
        if (l.line.find(e.line) != std::string::npos) return true;
      }
      return fail("no log line contains it");
    }
    case Evidence::Kind::kEvent: {
      for (const Event& ev : c.events) {
        if (ev.time == e.time && ev.source == e.source && ev.kind == e.event_kind &&
            ev.object == e.object) {
          return true;
        }
      }
      return fail(fmt::format("no event {} {} at {}", e.event_kind, e.object, formatTime(e.time)));
    }
  }
  return fail("unknown kind");
}

namespace {

const Series* findCited(const Case& c, const std::string& name, const Labels& labels) {
  for (const Series& s : c.series) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : labels) {
      auto l = s.label(k);
      if (v.empty() ? (l && !l->empty()) : (!l || *l != v)) {
        all = false;
        break;
      }
    }
    if (all) return &s;
  }
  return nullptr;
}

}  // namespace

Json evidencePoints(const Case& c, const Evidence& e, size_t max_points) {
  Json out = Json::array();
  if (e.kind != Evidence::Kind::kMetric || max_points == 0) return out;
  Points p;
  if (const Series* sum = findCited(c, e.name + "_sum", e.labels)) {
    if (const Series* count = findCited(c, e.name + "_count", sum->labels)) {
      p = meanOf(*sum, *count);
    }
  } else if (const Series* s = findCited(c, e.name, e.labels)) {
    p = e.name.ends_with("_total") ? rateOf(*s) : gaugeOf(*s);
  } else if (const Series* t = findCited(c, e.name + "_total", e.labels)) {
    p = rateOf(*t);
  }
  std::vector<size_t> keep;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p.t[i] >= e.from && p.t[i] <= e.to) keep.push_back(i);
  }
  size_t stride = keep.size() > max_points ? (keep.size() + max_points - 1) / max_points : 1;
  for (size_t k = 0; k < keep.size(); k += stride) {
    size_t i = keep[k];
    Json point = Json::array();
    point.push_back(static_cast<double>(p.t[i]) / 1000.0);
    if (std::isfinite(p.x[i])) {
      point.push_back(p.x[i]);
    } else {
      point.push_back(nullptr);
    }
    out.push_back(std::move(point));
  }
  return out;
}

void attachPoints(Json& answer, const Case& c, const Diagnosis& d) {
  if (!answer.contains("findings")) return;
  Json& findings = answer["findings"];
  for (size_t i = 0; i < d.findings.size() && i < findings.size(); ++i) {
    Json& ev = findings[i]["evidence"];
    for (size_t j = 0; j < d.findings[i].evidence.size() && j < ev.size(); ++j) {
      if (d.findings[i].evidence[j].kind == Evidence::Kind::kMetric) {
        ev[j]["points"] = evidencePoints(c, d.findings[i].evidence[j]);
      }
    }
  }
}

Score scoreAnswer(const Case& c, const Diagnosis& d) {
  Score s;
  if (c.expected_cause) {
    s.expected = *c.expected_cause;
    if (c.expected_subject && *c.expected_cause != "none") {
      s.expected += fmt::format(" {}/{}", c.expected_subject->kind, c.expected_subject->name);
    }
  }
  if (d.findings.empty()) return s;
  const Finding& first = d.findings.front();
  s.got = first.cause == "none"
              ? "none"
              : fmt::format("{} {}/{}", first.cause, first.subject.kind, first.subject.name);
  if (c.expected_cause) {
    if (*c.expected_cause == "none") {
      s.top1 = first.cause == "none";
      s.false_alarm = !s.top1;
    } else if (first.cause == *c.expected_cause && c.expected_subject) {
      s.top1 = lower(first.subject.kind) == lower(c.expected_subject->kind) &&
               lower(first.subject.name) == lower(c.expected_subject->name);
    }
  }
  s.evidence_real = true;
  for (const Finding& f : d.findings) {
    for (const Evidence& e : f.evidence) {
      std::string why;
      if (!evidenceInCase(c, e, &why)) {
        s.evidence_real = false;
        s.problems.push_back(fmt::format("{}: {}", f.cause, why));
      }
    }
  }
  s.evidence_enough = first.cause == "none" || first.evidence.size() >= 2;
  return s;
}

}  // namespace purser::diagnose
