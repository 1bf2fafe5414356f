// diagnose_bench: what answering one incident case costs, against reading its metrics with the
// general exposition reader (the baseline: the least any reader of the case must do).
//   diagnose_bench CASE.yaml [ROUNDS]
// Prints one JSON object: series and samples in the case, and per round the median and worst
// milliseconds of (a) the baseline, (b) parseCase, (c) diagnose, (d) both.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/json.h"
#include "diagnose/case.h"
#include "diagnose/engine.h"
#include "diagnose_io/case_io.h"
#include "observe/prom_text.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double worst(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// The metrics block of a case as plain exposition text (indentation removed).
std::string metricsText(const std::string& text) {
  std::string out;
  size_t pos = text.find("\nmetrics: |");
  if (pos == std::string::npos) return out;
  pos = text.find('\n', pos + 1) + 1;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    if (!line.empty() && line[0] != ' ') break;
    size_t i = line.find_first_not_of(' ');
    if (i != std::string_view::npos) {
      out.append(line.substr(i));
      out.push_back('\n');
    }
    pos = eol + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: diagnose_bench CASE.yaml [ROUNDS]\n";
    return 2;
  }
  int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 20;
  std::ifstream in(argv[1], std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string metrics = metricsText(text);
  purser::SystemClock clock;
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::vector<double> base, parse, engine, total;
  size_t series = 0, samples = 0, findings = 0;
  std::string first;
  purser::observe::ParseLimits limits;
  limits.max_bytes = 1u << 30;
  limits.max_samples = 50'000'000;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = clock.monotonic();
    auto expo = purser::observe::parsePrometheusText(metrics, limits);
    auto t1 = clock.monotonic();
    if (!expo) {
      std::cerr << "baseline: " << expo.error().message << "\n";
      return 1;
    }
    auto c = purser::diagnose::parseCase(text, argv[1]);
    auto t2 = clock.monotonic();
    if (!c) {
      std::cerr << c.error().toString() << "\n";
      return 1;
    }
    auto d = purser::diagnose::diagnose(*c);
    auto t3 = clock.monotonic();
    base.push_back(ms(t1 - t0));
    parse.push_back(ms(t2 - t1));
    engine.push_back(ms(t3 - t2));
    total.push_back(ms(t3 - t1));
    series = c->series.size();
    samples = 0;
    for (const auto& s : c->series) samples += s.t.size();
    findings = d.findings.size();
    first = d.findings.empty() ? "" : d.findings.front().cause;
  }
  purser::Json out = {
      {"case", argv[1]},
      {"bytes", text.size()},
      {"series", series},
      {"samples", samples},
      {"rounds", rounds},
      {"first_finding", first},
      {"findings", findings},
      {"baseline_exposition_parse_ms", {{"median", median(base)}, {"worst", worst(base)}}},
      {"parse_case_ms", {{"median", median(parse)}, {"worst", worst(parse)}}},
      {"diagnose_ms", {{"median", median(engine)}, {"worst", worst(engine)}}},
      {"total_ms", {{"median", median(total)}, {"worst", worst(total)}}},
      {"parse_vs_baseline", median(base) > 0 ? median(parse) / median(base) : 0}};
  std::cout << purser::writeJson(out, 2) << "\n";
  return 0;
}
