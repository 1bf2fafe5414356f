#include "cli/diagnose_command.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "cli/api_client.h"
#include "cli/credentials.h"
#include "common/clock.h"
#include "common/json.h"
#include "diagnose/answer.h"
#include "diagnose/case.h"
#include "diagnose/engine.h"
#include "diagnose_io/case_io.h"

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

std::string queryEscape(const std::string& v) {
  std::string out;
  for (unsigned char c : v) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/' || c == '*') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string str(const Json& v, const char* field) {
  auto it = v.find(field);
  if (it == v.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : writeJson(*it);
}

// One evidence item on one line.
std::string evidenceLine(const Json& e) {
  const std::string kind = str(e, "kind");
  if (kind == "metric") {
    std::vector<std::string> labels;
    if (auto it = e.find("labels"); it != e.end() && it->is_object()) {
      for (const auto& [k, v] : it->items()) {
        labels.push_back(fmt::format("{}=\"{}\"", k, v.is_string() ? v.get<std::string>() : ""));
      }
    }
    return fmt::format("metric {}{{{}}} {} .. {}: {}", str(e, "name"), fmt::join(labels, ","),
                       str(e, "from"), str(e, "to"), str(e, "summary"));
  }
  if (kind == "log") {
    return fmt::format("log {} {}: {}", str(e, "time"), str(e, "source"), str(e, "line"));
  }
  std::string line = fmt::format("event {} {} {} {}", str(e, "time"), str(e, "source"),
                                 str(e, "event_kind"), str(e, "object"));
  if (!str(e, "message").empty()) line += ": " + str(e, "message");
  return line;
}

void printFindings(const Json& body) {
  const Json q = body.value("question", Json::object());
  const Json w = body.value("window", Json::object());
  std::cout << fmt::format("Diagnosis of {} {} (symptom {}, {} to {})\n", str(q, "kind"),
                           str(q, "name"), str(q, "symptom"), str(w, "start"), str(w, "end"));
  if (auto n = body.find("narration"); n != body.end() && n->is_object()) {
    if (!str(*n, "text").empty()) {
      std::cout << fmt::format(
          "\nIn short (written by {}; the findings below are the "
          "evidence):\n{}\n",
          str(*n, "route"), str(*n, "text"));
    } else if (!str(*n, "error").empty()) {
      std::cout << fmt::format("\n(no summary: {})\n", str(*n, "error"));
    }
  }
  const Json findings = body.value("findings", Json::array());
  if (findings.empty()) std::cout << "\nNo findings.\n";
  int n = 0;
  for (const Json& f : findings) {
    const Json subject = f.value("subject", Json::object());
    std::cout << fmt::format("\n{}. {}", ++n, str(f, "cause"));
    if (!str(subject, "name").empty()) {
      std::cout << fmt::format(" - {} {}", str(subject, "kind"), str(subject, "name"));
    }
    std::cout << fmt::format(" (confidence {:.2f})\n", f.value("confidence", 0.0));
    if (!str(f, "explanation").empty()) std::cout << "   " << str(f, "explanation") << "\n";
    if (auto ev = f.find("evidence"); ev != f.end() && ev->is_array() && !ev->empty()) {
      std::cout << "   evidence:\n";
      for (const Json& e : *ev) std::cout << "     - " << evidenceLine(e) << "\n";
    }
    if (auto steps = f.find("next_steps");
        steps != f.end() && steps->is_array() && !steps->empty()) {
      std::cout << "   next steps:\n";
      for (const Json& step : *steps) {
        std::cout << "     - " << (step.is_string() ? step.get<std::string>() : "") << "\n";
      }
    }
  }
}

// `purser diagnose KIND [NAME]`: asks the server (GET /api/v1/diagnose) about its own state.
int askServer(const std::vector<std::string>& args, const std::string& symptom,
              const std::string& since, std::string server, bool json, const std::string& save_case,
              bool no_narrate) {
  static const std::set<std::string> kKinds = {"route", "deployment", "workload", "queue",
                                               "team",  "user",       "node",     "fleet"};
  const std::string& kind = args[0];
  if (!kKinds.contains(kind)) {
    std::cerr << "purser diagnose: unknown kind \"" << kind
              << "\": use route, deployment, workload, queue, team, user, node or fleet\n";
    return 2;
  }
  if (kind == "fleet" ? args.size() > 1 : args.size() != 2) {
    std::cerr << (kind == "fleet" ? "purser diagnose: `fleet` takes no name\n"
                                  : "purser diagnose: name the " + kind + " to diagnose\n");
    return 2;
  }
  server = serverUrl(server);
  const auto key = credentialFor(server);
  if (!key) return 2;
  std::string path = "/api/v1/diagnose?kind=" + queryEscape(kind);
  if (kind != "fleet") path += "&name=" + queryEscape(args[1]);
  if (!symptom.empty()) path += "&symptom=" + queryEscape(symptom);
  if (!since.empty()) path += "&since=" + queryEscape(since);
  ApiClient client(server, *key);
  // A reply of 200, or nullopt with the reason printed and `code` set.
  int code = 0;
  const auto get = [&](const std::string& p) -> std::optional<ApiReply> {
    auto r = client.call("GET", p);
    if (!r) {
      std::cerr << "purser: " << r.error().message << "\n";
      code = 1;
      return std::nullopt;
    }
    if (r->status != 200) {
      std::cerr << "purser: " << describeProblem(*r) << "\n";
      code = r->status == 404 || r->status == 403 ? 4 : 1;
      return std::nullopt;
    }
    return std::move(*r);
  };
  if (!save_case.empty()) {
    // The case first: it is what the findings below are answered from (a moment earlier).
    auto taken = get(path + "&format=case");
    if (!taken) return code;
    std::ofstream file(save_case, std::ios::binary | std::ios::trunc);
    file.write(taken->text.data(), static_cast<std::streamsize>(taken->text.size()));
    file.close();
    if (!file) {
      std::cerr << "purser: cannot write " << save_case << "\n";
      return 1;
    }
    std::cerr << "saved the case to " << save_case << " (replay: purser diagnose --case "
              << save_case << ")\n";
  }
  auto reply = get(no_narrate ? path + "&narrate=false" : path);
  if (!reply) return code;
  if (json) {
    std::cout << writeJson(reply->body, 2) << "\n";
  } else {
    printFindings(reply->body);
  }
  return 0;
}

}  // namespace

void registerDiagnoseCommand(CLI::App& root, int& exit_code) {
  struct Options {
    std::string case_file;
    std::vector<std::string> score;
    bool pretty = false;
    bool json = false;
    std::vector<std::string> args;  // KIND [NAME]
    std::string symptom;
    std::string since;
    std::string server;
    std::string save_case;
    bool no_narrate = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "diagnose",
      "Name the cause of a slow route, failing model, idle GPU or stuck job, with evidence "
      "(read-only)");
  cmd->add_option("--case", opts->case_file,
                  "Answer one incident case file (YAML, docs/incidents.md) and print the "
                  "findings as JSON");
  cmd->add_option("--score", opts->score,
                  "Answer judged case files (or every *.yaml in a directory) and score them "
                  "against their `expected` block; exit 1 on any miss");
  cmd->add_flag("--pretty", opts->pretty, "Indent the JSON answer");
  cmd->add_flag("--json", opts->json,
                "Print the server's answer (or, with --score, the scores) as JSON");
  cmd->add_option("question", opts->args,
                  "What to ask the server about: route NAME, deployment NAME, workload NS/NAME, "
                  "queue NAME, team NAME, user NAME, node NAME, or fleet");
  cmd->add_option("--symptom", opts->symptom,
                  "slow, errors, pending, over_budget, idle or any (default)")
      ->check(CLI::IsMember({"slow", "errors", "pending", "over_budget", "idle", "any"}));
  cmd->add_option("--since", opts->since, "How far back to look (default 30m)");
  cmd->add_option("--server", opts->server,
                  "Purser server URL (default: PURSER_SERVER or http://127.0.0.1:8080)");
  cmd->add_option("--save-case", opts->save_case,
                  "Also save what the server answered from as an incident case file, to replay "
                  "with --case or attach to a report (platform admins)");
  cmd->add_flag("--no-narrate", opts->no_narrate,
                "Leave out the plain-language summary even when the server has a narrator "
                "(diagnose.narrator), which is asked as you and metered to your wallets");
  cmd->footer(
      "\nThe engine is deterministic and changes nothing: it reads metrics, events and logs, "
      "follows the inventory from the object asked about to what could cause its symptom, and "
      "ranks findings with their evidence. `cause: none` means nothing in scope stands out.");
  cmd->callback([opts, &exit_code] {
    if (!opts->args.empty()) {
      if (!opts->case_file.empty() || !opts->score.empty()) {
        std::cerr << "purser diagnose: ask the server or give --case/--score, not both\n";
        exit_code = 2;
        return;
      }
      exit_code = askServer(opts->args, opts->symptom, opts->since, opts->server, opts->json,
                            opts->save_case, opts->no_narrate);
      return;
    }
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
    std::cerr << "purser diagnose: ask about something (purser diagnose route NAME, ... fleet), or "
                 "give --case FILE or --score FILE|DIR (see --help)\n";
    exit_code = 2;
  });
}

}  // namespace purser::cli
