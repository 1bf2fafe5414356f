#include "cli/diagnose_command.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "common/clock.h"
#include "common/json.h"
#include "diagnose/answer.h"
#include "diagnose/case.h"
#include "diagnose/engine.h"

namespace purser::cli {

namespace {

constexpr uintmax_t kMaxCaseBytes = 512u << 20;

Result<std::string> readFile(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    return std::unexpected(Error(ErrorCode::kNotFound, fmt::format("{}: {}", path, ec.message())));
  }
  if (size > kMaxCaseBytes) {
    return std::unexpected(Error(ErrorCode::kInvalidArgument,
                                 fmt::format("{}: larger than {} bytes", path, kMaxCaseBytes)));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::unexpected(Error(ErrorCode::kNotFound, fmt::format("cannot read {}", path)));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> expandCases(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      std::vector<std::string> files;
      for (const auto& entry : std::filesystem::directory_iterator(p, ec)) {
        auto ext = entry.path().extension();
        if (entry.is_regular_file() && (ext == ".yaml" || ext == ".yml")) {
          files.push_back(entry.path().string());
        }
      }
      std::sort(files.begin(), files.end());
      out.insert(out.end(), files.begin(), files.end());
    } else {
      out.push_back(p);
    }
  }
  return out;
}

int answerCase(const std::string& path, bool pretty) {
  auto text = readFile(path);
  if (!text) {
    std::cerr << "purser diagnose: " << text.error().message << "\n";
    return 2;
  }
  auto c = diagnose::parseCase(*text, path);
  if (!c) {
    std::cerr << "purser diagnose: " << c.error().toString() << "\n";
    return 2;
  }
  diagnose::Diagnosis d = diagnose::diagnose(*c);
  std::cout << writeJson(diagnose::toJson(d), pretty ? 2 : -1) << "\n";
  return 0;
}

int scoreCases(const std::vector<std::string>& inputs, bool json) {
  std::vector<std::string> files = expandCases(inputs);
  if (files.empty()) {
    std::cerr << "purser diagnose: no case files (*.yaml) in what was given\n";
    return 2;
  }
  SystemClock clock;
  int cases = 0, top1 = 0, evidence_ok = 0, false_alarms = 0, nones = 0, errors = 0;
  std::map<std::string, std::pair<int, int>> by_cause;  // expected cause -> (right, total)
  Json rows = Json::array();
  double slowest_ms = 0;
  for (const std::string& path : files) {
    auto text = readFile(path);
    if (!text) {
      std::cerr << "purser diagnose: " << text.error().message << "\n";
      ++errors;
      continue;
    }
    auto t0 = clock.monotonic();
    auto c = diagnose::parseCase(*text, path);
    if (!c) {
      std::cerr << "purser diagnose: " << c.error().toString() << "\n";
      ++errors;
      continue;
    }
    auto t1 = clock.monotonic();
    diagnose::Diagnosis d = diagnose::diagnose(*c);
    auto t2 = clock.monotonic();
    double parse_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    double engine_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
    slowest_ms = std::max(slowest_ms, parse_ms + engine_ms);
    diagnose::Score s = diagnose::scoreAnswer(*c, d);
    ++cases;
    top1 += s.top1 ? 1 : 0;
    evidence_ok += s.evidence_real && s.evidence_enough ? 1 : 0;
    if (c->expected_cause == std::optional<std::string>("none")) {
      ++nones;
      false_alarms += s.false_alarm ? 1 : 0;
    }
    auto& [right, total] = by_cause[c->expected_cause.value_or("?")];
    ++total;
    right += s.top1 ? 1 : 0;
    std::string name = std::filesystem::path(path).filename().string();
    if (json) {
      rows.push_back({{"case", name},
                      {"expected", s.expected},
                      {"got", s.got},
                      {"top1", s.top1},
                      {"evidence_ok", s.evidence_real && s.evidence_enough},
                      {"problems", s.problems},
                      {"parse_ms", parse_ms},
                      {"diagnose_ms", engine_ms}});
    } else {
      std::cout << fmt::format("{:<4} {:<44} expected {:<48} got {}{}  ({:.1f} + {:.1f} ms)\n",
                               s.top1 ? "ok" : "MISS", name.substr(0, 44), s.expected, s.got,
                               s.evidence_real && s.evidence_enough ? "" : "  [evidence!]",
                               parse_ms, engine_ms);
      for (const std::string& p : s.problems) std::cout << "       evidence: " << p << "\n";
    }
  }
  if (json) {
    Json causes = Json::object();
    for (const auto& [cause, rt] : by_cause) {
      causes[cause] = {{"right", rt.first}, {"cases", rt.second}};
    }
    std::cout << writeJson(Json{{"cases", cases},
                                {"top1", top1},
                                {"evidence_ok", evidence_ok},
                                {"false_alarms", false_alarms},
                                {"none_cases", nones},
                                {"errors", errors},
                                {"slowest_ms", slowest_ms},
                                {"by_cause", causes},
                                {"results", rows}},
                           2)
              << "\n";
  } else {
    std::cout << fmt::format(
        "\n{} cases: top-1 {}/{} ({:.0f} %), evidence real and sufficient "
        "{}/{}, false alarms {}/{}, unreadable {}; slowest {:.1f} ms\n",
        cases, top1, cases, cases ? 100.0 * top1 / cases : 0.0, evidence_ok, cases, false_alarms,
        nones, errors, slowest_ms);
    for (const auto& [cause, rt] : by_cause) {
      std::cout << fmt::format("  {:<24} {}/{}\n", cause, rt.first, rt.second);
    }
  }
  return errors > 0 ? 2 : (top1 == cases && evidence_ok == cases ? 0 : 1);
}

}  // namespace

void registerDiagnoseCommand(CLI::App& root, int& exit_code) {
  struct Options {
    std::string case_file;
    std::vector<std::string> score;
    bool pretty = false;
    bool json = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "diagnose",
      "Name the cause of a slow route, failing model, idle GPU or stuck job, with evidence "
      "(read-only)");
  cmd->add_option("--case", opts->case_file,
                  "Answer one incident case file (YAML, shared/specs/incidents.md) and print the "
                  "findings as JSON");
  cmd->add_option("--score", opts->score,
                  "Answer judged case files (or every *.yaml in a directory) and score them "
                  "against their `expected` block; exit 1 on any miss");
  cmd->add_flag("--pretty", opts->pretty, "Indent the JSON answer");
  cmd->add_flag("--json", opts->json, "With --score: print the scores as JSON");
  cmd->footer(
      "\nThe engine is deterministic and changes nothing: it reads metrics, events and logs, "
      "follows the inventory from the object asked about to what could cause its symptom, and "
      "ranks findings with their evidence. `cause: none` means nothing in scope stands out.");
  cmd->callback([opts, &exit_code] {
    if (!opts->case_file.empty() && !opts->score.empty()) {
      std::cerr << "purser diagnose: give --case or --score, not both\n";
      exit_code = 2;
      return;
    }
    if (!opts->case_file.empty()) {
      exit_code = answerCase(opts->case_file, opts->pretty);
      return;
    }
    if (!opts->score.empty()) {
      exit_code = scoreCases(opts->score, opts->json);
      return;
    }
    std::cerr << "purser diagnose: give --case FILE or --score FILE|DIR (see --help)\n";
    exit_code = 2;
  });
}

}  // namespace purser::cli
