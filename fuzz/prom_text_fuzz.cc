// Fuzzes the reader of Prometheus and OpenMetrics text (observe/prom_text.h), the door scraped
// /metrics and pasted incident excerpts come in through: any bytes, in each format and under
// tight limits as well as the defaults, parse or are refused with an error that names its line in
// valid UTF-8; what parses keeps every limit, holds only valid UTF-8, has its labels sorted and
// unique, and reads back the same once written out as Prometheus text again. The histogram helpers
// run over whatever parsed.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/json.h"
#include "observe/prom_text.h"

namespace {

using purser::observe::Exposition;
using purser::observe::ParseLimits;
using purser::observe::Sample;
using purser::observe::TextFormat;

std::string escape(std::string_view s, bool in_quotes) {
  std::string out;
  for (const char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && in_quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// Prometheus 0.0.4 text for `e`: every family as a HELP line, every sample in full.
std::string write(const Exposition& e) {
  std::string out;
  for (const auto& f : e.families) out += "# HELP " + f.name + " " + escape(f.help, false) + "\n";
  for (const Sample& s : e.samples) {
    out += s.name + "{";
    for (const auto& [k, v] : s.labels) out += k + "=\"" + escape(v, true) + "\",";
    char value[64];
    std::snprintf(value, sizeof value, "%.17g", s.value);
    out += "} ";
    out += std::isnan(s.value) ? "NaN" : value;
    if (s.timestamp_ms) out += " " + std::to_string(*s.timestamp_ms);
    out += "\n";
  }
  return out;
}

std::string_view withoutTrailingCr(std::string_view s) {
  while (!s.empty() && s.back() == '\r') s.remove_suffix(1);
  return s;
}

void check(std::string_view text, const ParseLimits& limits, TextFormat format) {
  auto parsed = purser::observe::parsePrometheusText(text, limits, format);
  if (!parsed) {
    const purser::Error& err = parsed.error();
    if (err.code != purser::ErrorCode::kInvalidArgument) std::abort();
    if (!purser::isValidUtf8(err.message)) std::abort();
    if (text.size() > limits.max_bytes) return;  // the one error that names no line
    if (err.line < 1) std::abort();
    if (!err.message.starts_with("line " + std::to_string(err.line) + ": ")) std::abort();
    return;
  }
  const Exposition& e = *parsed;
  if (e.samples.size() > limits.max_samples || e.families.size() > limits.max_families) {
    std::abort();
  }
  for (const auto& f : e.families) {
    if (f.name.empty() || f.name.size() > limits.max_name_bytes) std::abort();
    if (!purser::isValidUtf8(f.help) || f.unit.size() > limits.max_name_bytes) std::abort();
  }
  for (const Sample& s : e.samples) {
    if (s.name.empty() || s.name.size() > limits.max_name_bytes) std::abort();
    if (s.labels.size() > limits.max_labels) std::abort();
    for (size_t i = 0; i < s.labels.size(); ++i) {
      const auto& [k, v] = s.labels[i];
      if (k.empty() || k.size() > limits.max_name_bytes) std::abort();
      if (v.size() > limits.max_label_value_bytes || !purser::isValidUtf8(v)) std::abort();
      if (i > 0 && !(s.labels[i - 1].first < k)) std::abort();
      if (purser::observe::label(s, k) != std::string_view(v)) std::abort();
    }
    if (s.family && e.familyOf(s) == nullptr) std::abort();
  }
  for (const auto& f : e.families) {
    const auto buckets = purser::observe::histogramBuckets(e, f.name);
    for (const double q : {0.0, 0.5, 0.99, 1.0}) {
      const double v = purser::observe::histogramQuantile(q, buckets);
      (void)v;
    }
  }

  // Written out and read again (as 0.0.4, with room for the escapes), it is the same.
  ParseLimits relaxed = limits;
  relaxed.max_bytes = SIZE_MAX;
  relaxed.max_line_bytes = SIZE_MAX;
  auto again = purser::observe::parsePrometheusText(write(e), relaxed, TextFormat::kPrometheus);
  if (!again || again->samples.size() != e.samples.size() ||
      again->families.size() != e.families.size()) {
    std::abort();
  }
  for (size_t i = 0; i < e.samples.size(); ++i) {
    const Sample& a = e.samples[i];
    const Sample& b = again->samples[i];
    if (a.name != b.name || a.labels != b.labels || a.timestamp_ms != b.timestamp_ms) std::abort();
    if (!(a.value == b.value || (std::isnan(a.value) && std::isnan(b.value)))) std::abort();
  }
  for (size_t i = 0; i < e.families.size(); ++i) {
    // A HELP text that ends in CR cannot be written: the CR reads as part of the line ending.
    if (withoutTrailingCr(again->families[i].help) != withoutTrailingCr(e.families[i].help)) {
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const ParseLimits defaults;
  for (const TextFormat format :
       {TextFormat::kAuto, TextFormat::kPrometheus, TextFormat::kOpenMetrics}) {
    check(text, defaults, format);
  }
  ParseLimits tight;
  tight.max_bytes = 4096;
  tight.max_line_bytes = 200;
  tight.max_samples = 20;
  tight.max_families = 5;
  tight.max_labels = 4;
  tight.max_label_value_bytes = 16;
  tight.max_name_bytes = 24;
  check(text, tight, TextFormat::kAuto);
  return 0;
}
