#include "cli/admin_commands.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "cli/api_client.h"
#include "cli/credentials.h"
#include "cli/describe.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/money.h"

namespace purser::cli {

namespace {

using nlohmann::json;

struct Globals {
  std::string server;
  std::string output = "table";
  bool exact = false;  // money to the nano-unit instead of the cent
};

// Fields that hold money, printed to the cent in tables unless --exact.
bool isMoney(const std::string& path) {
  static const std::set<std::string> kMoney = {"cost",     "overage",   "limit",       "spent",
                                               "reserved", "remaining", "gpu_charged", "charged",
                                               "total",    "amount"};
  return kMoney.contains(path);
}

// "0.004521" -> "0.00", "12.345" -> "12.35" (half to even, as the ledger rounds); text that is
// not money is left as it is.
std::string toCents(const std::string& text) {
  auto m = Money::parse(text);
  if (!m) return text;
  // Whole cents, as nano-units / 10^7 (half to even).
  auto cents = m->mulDiv(1, 10'000'000, Rounding::kHalfEven);
  if (!cents) return text;
  const int64_t c = cents->nanos();
  const uint64_t mag = c < 0 ? -static_cast<uint64_t>(c) : static_cast<uint64_t>(c);
  return fmt::format("{}{}.{:02}", c < 0 ? "-" : "", mag / 100, mag % 100);
}

// "a.b" -> obj["a"]["b"], printed for a table cell.
std::string cell(const json& obj, const std::string& path) {
  const json* v = &obj;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!v->is_object() || !v->contains(part)) return "";
    v = &(*v)[part];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (v->is_null()) return "";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_array()) {
    std::string out;
    for (const auto& x : *v)
      out += (out.empty() ? "" : ",") + (x.is_string() ? x.get<std::string>() : writeJson(x));
    return out;
  }
  return writeJson(*v);
}

void printTable(const json& rows, const std::vector<std::pair<std::string, std::string>>& columns,
                bool exact) {
  std::vector<size_t> width;
  for (const auto& [title, _] : columns) width.push_back(title.size());
  std::vector<std::vector<std::string>> cells;
  for (const auto& row : rows) {
    std::vector<std::string> line;
    for (size_t i = 0; i < columns.size(); ++i) {
      std::string text = cell(row, columns[i].second);
      if (!exact && isMoney(columns[i].second)) text = toCents(text);
      line.push_back(std::move(text));
      width[i] = std::max(width[i], line.back().size());
    }
    cells.push_back(std::move(line));
  }
  const auto print = [&](const std::vector<std::string>& line) {
    std::string out;
    for (size_t i = 0; i < line.size(); ++i) {
      out += line[i];
      if (i + 1 < line.size()) out += std::string(width[i] - line[i].size() + 2, ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    std::cout << out << "\n";
  };
  std::vector<std::string> titles;
  for (const auto& [title, _] : columns) titles.push_back(title);
  print(titles);
  for (const auto& line : cells) print(line);
}

// A client for --server (or PURSER_SERVER) with the caller's credential (credentials.h);
// nullptr, with a message, when there is none.
std::unique_ptr<ApiClient> clientFor(const Globals& g) {
  const std::string server = serverUrl(g.server);
  auto credential = credentialFor(server);
  if (!credential) return nullptr;
  return std::make_unique<ApiClient>(server, *credential);
}

// Runs one API call and prints its result; returns the exit code.
// `must_be_ok`: a reply whose "ok" is false exits 3 (audit verification for scripts).
// `text`: a body sent as it is (a YAML file) instead of `body`.
int run(const Globals& g, const std::string& method, const std::string& path, const json& body,
        const std::vector<std::pair<std::string, std::string>>& columns, bool must_be_ok = false,
        const std::optional<std::string>& text = std::nullopt) {
  auto client_or = clientFor(g);
  if (!client_or) return 2;
  ApiClient& client = *client_or;
  auto reply = text ? client.callText(method, path, *text, "application/yaml")
                    : client.call(method, path, body);
  if (!reply) {
    std::cerr << "purser: " << reply.error().message << "\n";
    return 1;
  }
  if (reply->status >= 400) {
    std::cerr << "purser: " << describeProblem(*reply) << "\n";
    return 1;
  }
  const int verdict = must_be_ok && reply->body.value("ok", true) == false ? 3 : 0;
  if (g.output == "json") {
    std::cout << writeJson(reply->body, 2) << "\n";
    return verdict;
  }
  const json& data = reply->body.is_object() && reply->body.contains("data")
                         ? reply->body["data"]
                         : json::array({reply->body});
  if (columns.size() == 1 && columns[0].first.empty()) {
    // A list of sentences, one per line.
    for (const auto& line : reply->body.value(columns[0].second, json::array())) {
      std::cout << (line.is_string() ? line.get<std::string>() : writeJson(line)) << "\n";
    }
    return verdict;
  }
  printTable(data, columns, g.exact);
  if (reply->body.is_object() && reply->body.contains("warnings")) {
    for (const auto& w : reply->body["warnings"]) {
      std::cerr << "warning: " << (w.is_string() ? w.get<std::string>() : writeJson(w)) << "\n";
    }
  }
  if (reply->body.is_object() && reply->body.contains("key")) {
    std::cout << "\nkey (shown once; store it now): " << reply->body["key"].get<std::string>()
              << "\n";
  }
  if (reply->body.is_object() && reply->body.contains("total")) {
    const std::string total = reply->body["total"].get<std::string>();
    std::cout << "\ntotal: " << (g.exact ? total : toCents(total)) << "\n";
  }
  return verdict;
}

std::string encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == ':') {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// "?a=1&b=2" from the non-empty pairs.
std::string query(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out;
  for (const auto& [k, v] : params) {
    if (v.empty()) continue;
    out += (out.empty() ? "?" : "&") + k + "=" + encode(v);
  }
  return out;
}

// "team:01jb..." -> {"kind": "team", "id": "01jb..."}; nullopt (with a message) if malformed.
std::optional<json> scopeArg(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    std::cerr << "purser: --scope must read KIND:ID, e.g. team:01jb...\n";
    return std::nullopt;
  }
  return json{{"kind", text.substr(0, colon)}, {"id", text.substr(colon + 1)}};
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

const std::vector<std::pair<std::string, std::string>> kTenantColumns = {
    {"ID", "id"},
    {"NAME", "name"},
    {"MAX PRIORITY", "priority.max_workload_priority"},
    {"KEYS UP TO", "priority.max_key_priority"},
    {"CREATED", "created_at"}};
const std::vector<std::pair<std::string, std::string>> kTeamColumns = {
    {"ID", "id"}, {"TENANT", "tenant"}, {"NAME", "name"}, {"CREATED", "created_at"}};
const std::vector<std::pair<std::string, std::string>> kUserColumns = {
    {"ID", "id"},     {"NAME", "name"},   {"ROLE", "role"},           {"TENANT", "tenant"},
    {"TEAM", "team"}, {"EMAIL", "email"}, {"DISABLED", "disabled_at"}};
const std::vector<std::pair<std::string, std::string>> kAccountColumns = {
    {"ID", "id"}, {"NAME", "name"}, {"TENANT", "tenant"}, {"TEAM", "team"}};
const std::vector<std::pair<std::string, std::string>> kKeyColumns = {{"ID", "id"},
                                                                      {"NAME", "name"},
                                                                      {"OWNER", "owner.id"},
                                                                      {"MODELS", "models"},
                                                                      {"RPM", "rpm"},
                                                                      {"TPM", "tpm"},
                                                                      {"PRIORITY", "priority"},
                                                                      {"EXPIRES", "expires_at"},
                                                                      {"REVOKED", "revoked_at"}};
const std::vector<std::pair<std::string, std::string>> kWalletColumns = {{"ID", "id"},
                                                                         {"SCOPE", "scope.kind"},
                                                                         {"SCOPE ID", "scope.id"},
                                                                         {"NAME", "scope.name"},
                                                                         {"MODEL", "model"},
                                                                         {"LIMIT", "limit"},
                                                                         {"SPENT", "spent"},
                                                                         {"RESERVED", "reserved"},
                                                                         {"REMAINING", "remaining"},
                                                                         {"USED %", "percent_used"},
                                                                         {"PERIOD", "period"},
                                                                         {"HARD", "hard"}};
const std::vector<std::pair<std::string, std::string>> kSpendColumns = {
    {"GROUP", "group"},
    {"NAME", "name"},
    {"COST", "cost"},
    {"OVERAGE", "overage"},
    {"REQUESTS", "requests"},
    {"INPUT TOKENS", "tokens.input"},
    {"OUTPUT TOKENS", "tokens.output"}};
const std::vector<std::pair<std::string, std::string>> kAuditColumns = {
    {"SEQ", "seq"},         {"AT", "at"},         {"ACTOR", "actor"},   {"WHO", "actor_name"},
    {"ROLE", "actor_role"}, {"ACTION", "action"}, {"TARGET", "target"}, {"NAME", "target_name"}};

}  // namespace

// Reads a whole file for sending; nullopt (with a message) if it cannot be read.
std::optional<std::string> readFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "purser: cannot read " << path << "\n";
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// "team-a/train-1" -> "/team-a/train-1" with both parts encoded; nullopt (with a message) if the
// name is not NAMESPACE/NAME.
std::optional<std::string> workloadPath(const std::string& name) {
  const size_t slash = name.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == name.size() ||
      name.find('/', slash + 1) != std::string::npos) {
    std::cerr << "purser: name the workload as NAMESPACE/NAME, e.g. team-a/train-1\n";
    return std::nullopt;
  }
  return "/" + encode(name.substr(0, slash)) + "/" + encode(name.substr(slash + 1));
}

const std::vector<std::pair<std::string, std::string>> kWorkloadColumns = {
    {"NAME", "name"},
    {"STATE", "state"},
    {"QUEUE", "queue"},
    {"CLUSTER QUEUE", "cluster_queue"},
    {"PRIORITY", "priority"},
    {"REASON", "reason"},
    {"EXIT", "exit_code"},
    {"GPU CHARGED", "gpu_charged"},
    {"SUBMITTED", "submitted_at"}};

// GET `path`: the reply, or nullopt with the problem told and `code` set (2: no server or key
// to ask with, 1: the call failed or was refused).
std::optional<ApiReply> fetch(const Globals& g, const std::string& path, int& code) {
  auto client = clientFor(g);
  if (!client) {
    code = 2;
    return std::nullopt;
  }
  auto reply = client->call("GET", path);
  if (!reply || reply->status >= 400) {
    std::cerr << "purser: " << (reply ? describeProblem(*reply) : reply.error().message) << "\n";
    code = 1;
    return std::nullopt;
  }
  return std::move(*reply);
}

template <typename Common>
void registerFleetCommands(CLI::App& root, const std::shared_ptr<Globals>& g, const Common& common,
                           int& code) {
  {
    auto file = std::make_shared<std::string>();
    CLI::App* submit = root.add_subcommand(
        "submit",
        "Submit a workload (a batch/v1 Job with Kueue's queue-name label, Kueue's Workload object "
        "or the short form; YAML or JSON)");
    submit->add_option("-f,--file", *file, "The workload file")->required();
    common(submit);
    submit->callback([g, file, &code] {
      auto text = readFile(*file);
      if (!text) {
        code = 2;
        return;
      }
      code = run(*g, "POST", "/api/v1/workloads", nullptr, kWorkloadColumns, false, *text);
    });
  }
  {
    CLI::App* cmd = root.add_subcommand("workloads", "List, show and delete workloads");
    struct W {
      std::string namespace_, state, name;
    };
    auto w = std::make_shared<W>();
    cmd->add_option("--namespace", w->namespace_, "Only this namespace (team)");
    cmd->add_option("--state", w->state,
                    "Only those in this state: pending, suspended, evicted, admitted, running, "
                    "unknown, succeeded, failed, or finished (succeeded or failed)")
        ->check(CLI::IsMember({"pending", "suspended", "evicted", "admitted", "running", "unknown",
                               "succeeded", "failed", "finished"}));
    common(cmd);
    cmd->callback([g, w, cmd, &code] {
      if (!cmd->get_subcommands().empty()) return;
      code = run(*g, "GET",
                 "/api/v1/workloads" + query({{"namespace", w->namespace_}, {"state", w->state}}),
                 nullptr, kWorkloadColumns);
    });
    CLI::App* get = cmd->add_subcommand("get", "One workload, in full");
    get->add_option("name", w->name, "NAMESPACE/NAME")->required();
    common(get);
    get->callback([g, w, &code] {
      auto path = workloadPath(w->name);
      if (!path) {
        code = 2;
      } else if (g->output == "json") {
        code = run(*g, "GET", "/api/v1/workloads" + *path, nullptr, kWorkloadColumns);
      } else if (auto reply = fetch(*g, "/api/v1/workloads" + *path, code)) {
        printDescribed(reply->body, std::cout);  // the object in full, a field a line
        code = 0;
      }
    });
    CLI::App* del = cmd->add_subcommand(
        "delete", "End a workload: its pods are stopped and its quota released");
    del->add_option("name", w->name, "NAMESPACE/NAME")->required();
    common(del);
    del->callback([g, w, &code] {
      auto path = workloadPath(w->name);
      code = path ? run(*g, "DELETE", "/api/v1/workloads" + *path, nullptr, kWorkloadColumns) : 2;
    });
  }
  {
    CLI::App* queues = root.add_subcommand("queues", "ClusterQueues: quota, usage, borrowing");
    common(queues);
    queues->callback([g, &code] {
      if (g->output == "json") {
        code = run(*g, "GET", "/api/v1/queues", nullptr, {{"NAME", "name"}});
        return;
      }
      // One row per queue, flavor and resource.
      auto reply = fetch(*g, "/api/v1/queues", code);
      if (!reply) return;
      json rows = json::array();
      for (const auto& q : reply->body.value("data", json::array())) {
        for (const auto& r : q.value("resources", json::array())) {
          json row = r;
          row["name"] = q["name"];
          row["cohort"] = q["cohort"];
          row["pending"] = q["pending"];
          row["admitted"] = q["admitted"];
          rows.push_back(row);
        }
      }
      printTable(rows,
                 {{"CLUSTER QUEUE", "name"},
                  {"COHORT", "cohort"},
                  {"FLAVOR", "flavor"},
                  {"RESOURCE", "resource"},
                  {"NOMINAL", "nominal"},
                  {"USAGE", "usage"},
                  {"BORROWED", "borrowed"},
                  {"LENT", "lent"},
                  {"AVAILABLE", "available"},
                  {"PENDING", "pending"},
                  {"ADMITTED", "admitted"}},
                 g->exact);
      code = 0;
    });
  }
  {
    struct L {
      std::string name, pod;
      size_t bytes = 64 * 1024;
    };
    auto l = std::make_shared<L>();
    CLI::App* logs = root.add_subcommand(
        "logs", "What a workload's pod wrote (stdout and stderr), the end of it");
    logs->add_option("name", l->name, "NAMESPACE/NAME")->required();
    logs->add_option("--pod", l->pod,
                     "Which pod: SET-INDEX, such as main-0 (default: the one that failed, else "
                     "the first)");
    logs->add_option("--bytes", l->bytes, "At most this many bytes of its end")
        ->check(CLI::Range(size_t{1}, size_t{8} * 1024 * 1024));
    common(logs);
    logs->callback([g, l, &code] {
      auto path = workloadPath(l->name);
      if (!path) {
        code = 2;
        return;
      }
      auto reply = fetch(*g,
                         "/api/v1/workloads" + *path + "/logs" +
                             query({{"pod", l->pod}, {"bytes", std::to_string(l->bytes)}}),
                         code);
      if (!reply) return;
      std::cout << reply->text;
      code = 0;
    });
  }
  {
    auto name = std::make_shared<std::string>();
    CLI::App* why = root.add_subcommand("why", "Why a workload is pending, in words");
    why->add_option("name", *name, "NAMESPACE/NAME")->required();
    common(why);
    why->callback([g, name, &code] {
      auto path = workloadPath(*name);
      code = path ? run(*g, "GET", "/api/v1/workloads" + *path + "/why", nullptr,
                        {{"", "explanation"}})
                  : 2;
    });
  }
  {
    CLI::App* cmd = root.add_subcommand("fleet", "The fleet's Kueue objects, nodes and events");
    cmd->require_subcommand(1);
    auto file = std::make_shared<std::string>();
    CLI::App* apply = cmd->add_subcommand(
        "apply",
        "Apply Kueue manifests: ResourceFlavor, Cohort, ClusterQueue, LocalQueue, "
        "WorkloadPriorityClass (platform admins)");
    apply->add_option("-f,--file", *file, "A YAML stream of kueue.x-k8s.io objects")->required();
    common(apply);
    apply->callback([g, file, &code] {
      auto text = readFile(*file);
      if (!text) {
        code = 2;
        return;
      }
      code = run(*g, "POST", "/api/v1/fleet/manifests", nullptr,
                 {{"FLAVORS", "applied.resource_flavors"},
                  {"COHORTS", "applied.cohorts"},
                  {"CLUSTER QUEUES", "applied.cluster_queues"},
                  {"LOCAL QUEUES", "applied.local_queues"},
                  {"PRIORITY CLASSES", "applied.workload_priority_classes"}},
                 false, *text);
    });
    CLI::App* nodes = cmd->add_subcommand(
        "nodes", "The inventory: each node's CPU and GPUs and how much is placed on them");
    common(nodes);
    nodes->callback([g, &code] {
      code = run(*g, "GET", "/api/v1/fleet/nodes", nullptr,
                 {{"NAME", "name"},
                  {"RACK", "rack"},
                  {"CPU", "cpu"},
                  {"CPU USED", "cpu_used"},
                  {"GPU MODEL", "gpu_model"},
                  {"GPUS", "gpu_count"},
                  {"GPUS ALLOCATED", "gpu_allocated"},
                  {"PODS", "pods"}});
    });
    auto since = std::make_shared<std::string>();
    CLI::App* utilisation = cmd->add_subcommand(
        "utilisation",
        "Per workload: GPU-hours allocated and busy, efficiency, and whether it is allocated but "
        "idle (its GPUs under 10 % over the last 10 minutes)");
    utilisation->add_option("--since", *since, "How far back (a duration up to 744h; default 24h)");
    common(utilisation);
    utilisation->callback([g, since, &code] {
      code = run(*g, "GET", "/api/v1/fleet/utilisation" + query({{"since", *since}}), nullptr,
                 {{"WORKLOAD", "workload"},
                  {"STATE", "state"},
                  {"GPU-HOURS", "allocated_gpu_hours"},
                  {"BUSY GPU-HOURS", "busy_gpu_hours"},
                  {"EFFICIENCY", "efficiency"},
                  {"NOW %", "recent_utilisation"},
                  {"IDLE", "idle"}});
    });
    auto workload = std::make_shared<std::string>();
    CLI::App* events = cmd->add_subcommand("events", "Admissions, preemptions and evictions");
    events->add_option("--workload", *workload, "Only this workload (NAMESPACE/NAME)");
    common(events);
    events->callback([g, workload, &code] {
      code = run(*g, "GET", "/api/v1/fleet/events" + query({{"workload", *workload}}), nullptr,
                 {{"AT", "at"},
                  {"KIND", "kind"},
                  {"WORKLOAD", "workload"},
                  {"CLUSTER QUEUE", "cluster_queue"},
                  {"REASON", "reason"},
                  {"BY", "by"},
                  {"MESSAGE", "message"}});
    });
  }
}

// `purser login --oidc`: the device authorization grant through the server (which holds the
// client secret): prints where to go and the code, polls until the person approves, and keeps
// the short-lived token it is given for this server. Returns the exit code.
int loginOidc(const std::string& server_flag) {
  const std::string server = serverUrl(server_flag);
  ApiClient client(server, "");
  auto started = client.call("POST", "/auth/oidc/device", json::object());
  if (!started) {
    std::cerr << "purser: " << started.error().message << "\n";
    return 1;
  }
  if (started->status == 404) {
    std::cerr << "purser: " << server << " has no single sign-on (no oidc: in its configuration); "
              << "use an API key (PURSER_KEY)\n";
    return 1;
  }
  if (started->status != 200 || !started->body.is_object()) {
    std::cerr << "purser: " << describeProblem(*started) << "\n";
    return 1;
  }
  const json& d = started->body;
  const std::string complete = d.value("verification_uri_complete", "");
  std::cout << "To sign in, open "
            << (complete.empty() ? d.value("verification_uri", "") : complete)
            << "\nand confirm the code " << d.value("user_code", "") << "\n"
            << std::flush;
  const int64_t interval = std::clamp<int64_t>(d.value("interval", int64_t{5}), 1, 60);
  const Clock& clock = SystemClock::instance();
  const MonoTime deadline = clock.monotonic() + std::chrono::seconds(std::clamp<int64_t>(
                                                    d.value("expires_in", int64_t{600}), 1, 3600));
  const json poll = {{"device_code", d.value("device_code", "")}};
  while (clock.monotonic() < deadline) {
    std::this_thread::sleep_for(std::chrono::seconds(interval));
    auto r = client.call("POST", "/auth/oidc/device/token", poll);
    if (!r) {
      std::cerr << "purser: " << r.error().message << "\n";
      return 1;
    }
    if (r->status == 400 && r->body.is_object() &&
        r->body.value("error", "") == "authorization_pending") {
      continue;
    }
    if (r->status != 200 || !r->body.is_object()) {
      std::cerr << "purser: not signed in: " << describeProblem(*r) << "\n";
      return 1;
    }
    const std::string token = r->body.value("token", "");
    const std::string expires_at = r->body.value("expires_at", "");
    if (auto stored = storeToken(server, token, expires_at); !stored) {
      std::cerr << "purser: " << stored.error().message << "\n";
      return 1;
    }
    const json& user = r->body.contains("user") ? r->body["user"] : json::object();
    std::string where;
    if (user.contains("tenant") && user["tenant"].is_object()) {
      where = " in " + user["tenant"].value("name", "");
      if (user.contains("team") && user["team"].is_object()) {
        where += "/" + user["team"].value("name", "");
      }
    }
    std::cout << "Signed in to " << server << " as " << user.value("name", "?") << " ("
              << user.value("role", "?") << where << ") until " << expires_at << "\n";
    return 0;
  }
  std::cerr << "purser: the sign-in was not approved in time; run `purser login --oidc` again\n";
  return 1;
}

// `purser logout`: ends the stored sign-in's session on the server and forgets it.
int logout(const std::string& server_flag) {
  const std::string server = serverUrl(server_flag);
  auto token = takeToken(server);
  if (!token) {
    std::cerr << "purser: " << token.error().message << "\n";
    return 1;
  }
  if (!*token || (*token)->empty()) {
    std::cout << "Not signed in to " << server << "\n";
    return 0;
  }
  ApiClient client(server, **token);
  auto r = client.call("POST", "/auth/signout", json::object());
  if (!r || (r->status != 204 && r->status != 401)) {
    std::cerr << "purser: forgotten here, but the server did not end the session: "
              << (r ? describeProblem(*r) : r.error().message) << "\n";
    return 1;
  }
  std::cout << "Signed out of " << server << "\n";
  return 0;
}

void registerAdminCommands(CLI::App& root, int& exit_code) {
  auto g = std::make_shared<Globals>();
  const auto common = [g](CLI::App* cmd) {
    cmd->add_option("--server", g->server,
                    "Purser server URL (default: PURSER_SERVER or http://127.0.0.1:8080)");
    cmd->add_option("-o,--output", g->output, "Output format")
        ->check(CLI::IsMember({"table", "json"}))
        ->capture_default_str();
    cmd->add_flag("--exact", g->exact, "Money to the last digit, not rounded to the cent");
  };
  // A group of subcommands whose `list` is what the bare group does ("purser tenants").
  auto defaults = std::make_shared<std::map<CLI::App*, std::function<void()>>>();
  const auto group = [&](const char* name, const char* what) {
    CLI::App* cmd = root.add_subcommand(name, what);
    cmd->require_subcommand(0, 1);
    common(cmd);
    cmd->callback([cmd, defaults] {
      if (!cmd->get_subcommands().empty()) return;
      if (auto it = defaults->find(cmd); it != defaults->end()) it->second();
    });
    return cmd;
  };
  const auto listing = [defaults](CLI::App* cmd, CLI::App* list, std::function<void()> action) {
    list->callback(action);
    (*defaults)[cmd] = std::move(action);
  };
  auto& code = exit_code;

  // login, logout
  {
    CLI::App* cmd = root.add_subcommand(
        "login", "Sign in through the organisation's identity provider (single sign-on)");
    cmd->add_option("--server", g->server,
                    "Purser server URL (default: PURSER_SERVER or http://127.0.0.1:8080)");
    auto oidc = std::make_shared<bool>(false);
    cmd->add_flag("--oidc", *oidc,
                  "Use the device authorization grant: open a URL, confirm a code, and keep a "
                  "short-lived token for this server (keys remain the way for automation)")
        ->required();
    cmd->callback([g, oidc, &code] { code = loginOidc(g->server); });
    CLI::App* out = root.add_subcommand("logout", "End the sign-in `purser login` made");
    out->add_option("--server", g->server,
                    "Purser server URL (default: PURSER_SERVER or http://127.0.0.1:8080)");
    out->callback([g, &code] { code = logout(g->server); });
  }

  // tenants
  {
    CLI::App* cmd = group("tenants", "List and create tenants");
    CLI::App* list = cmd->add_subcommand("list", "List the tenants you can see");
    common(list);
    listing(cmd, list,
            [g, &code] { code = run(*g, "GET", "/api/v1/tenants", nullptr, kTenantColumns); });
    // A tenant's priority grant: what priority its workloads and keys may ask for.
    struct Grant {
      std::optional<int64_t> max_priority;
      std::string classes, max_key_priority;
      bool given() const { return max_priority || !classes.empty() || !max_key_priority.empty(); }
      json body() const {
        json g = json::object();
        if (max_priority) g["max_workload_priority"] = *max_priority;
        if (!classes.empty()) {
          json list = json::array();
          std::stringstream in(classes);
          for (std::string c; std::getline(in, c, ',');) {
            if (!c.empty()) list.push_back(c);
          }
          g["classes"] = list;
        }
        if (!max_key_priority.empty()) g["max_key_priority"] = max_key_priority;
        return g;
      }
    };
    const auto grantOptions = [](CLI::App* c, Grant& grant) {
      c->add_option("--max-priority", grant.max_priority,
                    "The highest priority its workloads may have (default 0)");
      c->add_option("--priority-classes", grant.classes,
                    "The WorkloadPriorityClasses it may name, comma-separated (default: any "
                    "within --max-priority)");
      c->add_option("--max-key-priority", grant.max_key_priority,
                    "The highest priority its keys may carry (default standard)")
          ->check(CLI::IsMember({"critical", "standard", "sheddable"}));
    };
    auto name = std::make_shared<std::string>();
    auto grant = std::make_shared<Grant>();
    CLI::App* create = cmd->add_subcommand("create", "Create a tenant (platform admins)");
    create->add_option("name", *name, "Tenant name")->required();
    grantOptions(create, *grant);
    common(create);
    create->callback([g, name, grant, &code] {
      json body = {{"name", *name}};
      if (grant->given()) body["priority"] = grant->body();
      code = run(*g, "POST", "/api/v1/tenants", body, kTenantColumns);
    });
    auto granted = std::make_shared<std::string>();
    auto given = std::make_shared<Grant>();
    CLI::App* set = cmd->add_subcommand(
        "grant", "Set what priority a tenant's workloads and keys may ask for (platform admins)");
    set->add_option("tenant", *granted, "Tenant id or name")->required();
    grantOptions(set, *given);
    common(set);
    set->callback([g, granted, given, &code] {
      code = run(*g, "PUT", "/api/v1/tenants/" + *granted + "/priority", given->body(),
                 kTenantColumns);
    });
  }
  // teams
  {
    CLI::App* cmd = group("teams", "List and create teams");
    CLI::App* list = cmd->add_subcommand("list", "List the teams you can see");
    common(list);
    listing(cmd, list,
            [g, &code] { code = run(*g, "GET", "/api/v1/teams", nullptr, kTeamColumns); });
    auto name = std::make_shared<std::string>();
    auto tenant = std::make_shared<std::string>();
    CLI::App* create = cmd->add_subcommand("create", "Create a team in a tenant");
    create->add_option("name", *name, "Team name")->required();
    create->add_option("--tenant", *tenant, "Tenant id or name (default: your own)");
    common(create);
    create->callback([g, name, tenant, &code] {
      json body = {{"name", *name}};
      if (!tenant->empty()) body["tenant"] = *tenant;
      code = run(*g, "POST", "/api/v1/teams", body, kTeamColumns);
    });
  }
  // users and service accounts
  {
    CLI::App* cmd = group("users", "List, create, disable and enable users");
    CLI::App* list = cmd->add_subcommand("list", "List the users you can see");
    common(list);
    listing(cmd, list,
            [g, &code] { code = run(*g, "GET", "/api/v1/users", nullptr, kUserColumns); });
    struct U {
      std::string name, tenant, team, email, role;
    };
    auto u = std::make_shared<U>();
    CLI::App* create = cmd->add_subcommand("create", "Create a user");
    create->add_option("name", u->name, "User name")->required();
    create->add_option("--tenant", u->tenant, "Tenant id or name (default: your own)");
    create->add_option("--team", u->team, "Team id or name");
    create->add_option("--email", u->email, "E-mail address");
    create->add_option("--role", u->role, "platform-admin, tenant-admin, team-lead or member");
    common(create);
    create->callback([g, u, &code] {
      json body = {{"name", u->name}};
      for (const auto& [k, v] : {std::pair{"tenant", u->tenant}, std::pair{"team", u->team},
                                 std::pair{"email", u->email}, std::pair{"role", u->role}}) {
        if (!v.empty()) body[k] = v;
      }
      code = run(*g, "POST", "/api/v1/users", body, kUserColumns);
    });
    auto target = std::make_shared<std::string>();
    for (const bool disable : {true, false}) {
      CLI::App* sub = cmd->add_subcommand(
          disable ? "disable" : "enable",
          disable ? "Disable a user: their keys are refused and their sign-in sessions end"
                  : "Enable a disabled user again (their sessions stay ended)");
      sub->add_option("id", *target, "User id")->required();
      common(sub);
      sub->callback([g, target, disable, &code] {
        code = run(*g, "POST",
                   fmt::format("/api/v1/users/{}/{}", *target, disable ? "disable" : "enable"),
                   json::object(), kUserColumns);
      });
    }

    CLI::App* sa = group("service-accounts", "List and create service accounts (apps, agents)");
    CLI::App* sa_list = sa->add_subcommand("list", "List the service accounts you can see");
    common(sa_list);
    listing(sa, sa_list, [g, &code] {
      code = run(*g, "GET", "/api/v1/service-accounts", nullptr, kAccountColumns);
    });
    auto a = std::make_shared<U>();
    CLI::App* sa_create = sa->add_subcommand("create", "Create a service account in a team");
    sa_create->add_option("name", a->name, "Service account name")->required();
    sa_create->add_option("--tenant", a->tenant, "Tenant id or name (default: your own)");
    sa_create->add_option("--team", a->team, "Team id or name")->required();
    common(sa_create);
    sa_create->callback([g, a, &code] {
      json body = {{"name", a->name}, {"team", a->team}};
      if (!a->tenant.empty()) body["tenant"] = a->tenant;
      code = run(*g, "POST", "/api/v1/service-accounts", body, kAccountColumns);
    });
  }
  // keys
  {
    CLI::App* cmd = group("keys", "Create, list, revoke and rotate API keys");
    CLI::App* list = cmd->add_subcommand("list", "List the keys you can see (never their secrets)");
    common(list);
    listing(cmd, list, [g, &code] { code = run(*g, "GET", "/api/v1/keys", nullptr, kKeyColumns); });
    struct K {
      std::string name, owner, models, tools, expires, priority;
      int64_t rpm = 0, tpm = 0;
    };
    auto k = std::make_shared<K>();
    CLI::App* create = cmd->add_subcommand("create", "Create a key; its secret is shown once");
    create->add_option("--name", k->name, "Key name")->required();
    create->add_option("--owner", k->owner, "user:ID or service_account:ID (default: yourself)");
    create->add_option("--models", k->models, "Comma-separated models or routes it may use");
    create->add_option("--tools", k->tools,
                       "Comma-separated MCP tools it may call: server/tool, server/* or *");
    create->add_option("--rpm", k->rpm, "Requests per minute")->check(CLI::NonNegativeNumber);
    create->add_option("--tpm", k->tpm, "Tokens per minute")->check(CLI::NonNegativeNumber);
    create->add_option("--expires-at", k->expires, "Expiry, RFC 3339");
    create
        ->add_option("--priority", k->priority,
                     "critical, standard or sheddable: the most its requests may ask for while "
                     "the model servers are saturated (default standard)")
        ->check(CLI::IsMember({"critical", "standard", "sheddable"}));
    common(create);
    create->callback([g, k, &code] {
      json body = {{"name", k->name}};
      if (!k->owner.empty()) {
        const size_t colon = k->owner.find(':');
        if (colon == std::string::npos) {
          std::cerr << "purser: --owner must read user:ID or service_account:ID\n";
          code = 2;
          return;
        }
        body["owner"] = {{"kind", k->owner.substr(0, colon)}, {"id", k->owner.substr(colon + 1)}};
      }
      if (!k->models.empty()) body["models"] = splitList(k->models);
      if (!k->tools.empty()) body["tools"] = splitList(k->tools);
      if (k->rpm > 0) body["rpm"] = k->rpm;
      if (k->tpm > 0) body["tpm"] = k->tpm;
      if (!k->expires.empty()) body["expires_at"] = k->expires;
      if (!k->priority.empty()) body["priority"] = k->priority;
      code = run(*g, "POST", "/api/v1/keys", body, kKeyColumns);
    });
    auto id = std::make_shared<std::string>();
    CLI::App* revoke = cmd->add_subcommand("revoke", "Revoke a key");
    revoke->add_option("id", *id, "Key id")->required();
    common(revoke);
    revoke->callback([g, id, &code] {
      code = run(*g, "DELETE", "/api/v1/keys/" + encode(*id), nullptr, kKeyColumns);
    });
    auto rid = std::make_shared<std::string>();
    auto grace = std::make_shared<std::string>();
    CLI::App* rotate = cmd->add_subcommand(
        "rotate", "Give a key a new secret; the old one works for a grace period");
    rotate->add_option("id", *rid, "Key id")->required();
    rotate->add_option("--grace", *grace, "How long the old secret stays valid (default 24h)");
    common(rotate);
    rotate->callback([g, rid, grace, &code] {
      json body = json::object();
      if (!grace->empty()) body["grace"] = *grace;
      code = run(*g, "POST", "/api/v1/keys/" + encode(*rid) + "/rotate", body, kKeyColumns);
    });
  }
  // wallets
  {
    CLI::App* cmd = group("wallets", "Budgets: list their status and create them");
    auto scope = std::make_shared<std::string>();
    CLI::App* list =
        cmd->add_subcommand("list", "Wallet status: limit, spent, reserved, remaining");
    list->add_option("--scope", *scope, "Only this scope, KIND:ID (e.g. team:01jb...)");
    common(list);
    listing(cmd, list, [g, scope, &code] {
      code =
          run(*g, "GET", "/api/v1/wallets" + query({{"scope", *scope}}), nullptr, kWalletColumns);
    });
    struct W {
      std::string scope, limit, period, timezone, alert_at, model;
      bool soft = false;
    };
    auto w = std::make_shared<W>();
    CLI::App* create = cmd->add_subcommand("create", "Create a wallet on a scope");
    create->add_option("--scope", w->scope, "KIND:ID: tenant, team, user, service_account or key")
        ->required();
    create->add_option("--limit", w->limit, "Limit as a decimal amount, e.g. 100.00")->required();
    create->add_option("--period", w->period, "none, daily, weekly or monthly (default none)");
    create->add_option("--timezone", w->timezone, "IANA time zone of the period (default UTC)");
    create->add_flag("--soft", w->soft, "Alert only; never block");
    create->add_option("--alert-at", w->alert_at, "Comma-separated percents (default 50,80,100)");
    create->add_option("--model", w->model, "Count only this model or route");
    common(create);
    create->callback([g, w, &code] {
      auto scope = scopeArg(w->scope);
      if (!scope) {
        code = 2;
        return;
      }
      json body = {{"scope", *scope}, {"limit", w->limit}, {"hard", !w->soft}};
      if (!w->period.empty()) body["period"] = w->period;
      if (!w->timezone.empty()) body["timezone"] = w->timezone;
      if (!w->model.empty()) body["model"] = w->model;
      if (!w->alert_at.empty()) {
        json alerts = json::array();
        for (const auto& p : splitList(w->alert_at)) {
          try {
            alerts.push_back(std::stoi(p));
          } catch (const std::exception&) {
            std::cerr << "purser: --alert-at must be whole percents, e.g. 50,80,100\n";
            code = 2;
            return;
          }
        }
        body["alert_at"] = alerts;
      }
      code = run(*g, "POST", "/api/v1/wallets", body, kWalletColumns);
    });
  }
  // rate limits
  {
    CLI::App* cmd = group("limits", "Requests and tokens per minute for a scope");
    auto scope = std::make_shared<std::string>();
    CLI::App* list = cmd->add_subcommand("list", "List rate limits");
    list->add_option("--scope", *scope, "Only this scope, KIND:ID");
    common(list);
    listing(cmd, list, [g, scope, &code] {
      code = run(*g, "GET", "/api/v1/rate-limits" + query({{"scope", *scope}}), nullptr,
                 {{"ID", "id"},
                  {"SCOPE", "scope.kind"},
                  {"SCOPE ID", "scope.id"},
                  {"MODEL", "model"},
                  {"RPM", "rpm"},
                  {"TPM", "tpm"}});
    });
    struct L {
      std::string scope, model;
      int64_t rpm = 0, tpm = 0;
    };
    auto l = std::make_shared<L>();
    CLI::App* create = cmd->add_subcommand("create", "Limit a scope (for one model, or all)");
    create->add_option("--scope", l->scope, "KIND:ID")->required();
    create->add_option("--model", l->model, "Only this model or route");
    create->add_option("--rpm", l->rpm, "Requests per minute")->check(CLI::NonNegativeNumber);
    create->add_option("--tpm", l->tpm, "Tokens per minute")->check(CLI::NonNegativeNumber);
    common(create);
    create->callback([g, l, &code] {
      auto scope = scopeArg(l->scope);
      if (!scope) {
        code = 2;
        return;
      }
      json body = {{"scope", *scope}};
      if (!l->model.empty()) body["model"] = l->model;
      if (l->rpm > 0) body["rpm"] = l->rpm;
      if (l->tpm > 0) body["tpm"] = l->tpm;
      code = run(*g, "POST", "/api/v1/rate-limits", body,
                 {{"ID", "id"},
                  {"SCOPE", "scope.kind"},
                  {"SCOPE ID", "scope.id"},
                  {"MODEL", "model"},
                  {"RPM", "rpm"},
                  {"TPM", "tpm"}});
    });
  }
  // spend
  {
    struct S {
      std::string scope, group_by = "day", from, to;
    };
    auto s = std::make_shared<S>();
    CLI::App* cmd = root.add_subcommand("spend", "Spend and tokens of a scope, grouped");
    cmd->add_option("--scope", s->scope, "KIND:ID")->required();
    cmd->add_option("--group-by", s->group_by,
                    "user, team, key, model, route, session, tool, kind, day, hour or minute")
        ->capture_default_str();
    cmd->add_option("--from", s->from, "From (RFC 3339, inclusive)");
    cmd->add_option("--to", s->to, "To (RFC 3339, exclusive)");
    common(cmd);
    cmd->callback([g, s, &code] {
      code = run(*g, "GET",
                 "/api/v1/spend" + query({{"scope", s->scope},
                                          {"group_by", s->group_by},
                                          {"from", s->from},
                                          {"to", s->to}}),
                 nullptr, kSpendColumns);
    });
  }
  // session: one agent run's calls, in order.
  {
    auto id = std::make_shared<std::string>();
    CLI::App* cmd = root.add_subcommand(
        "session",
        "One agent run (x-purser-session): its model and tool calls in order, with "
        "what each cost, and the totals");
    cmd->add_option("id", *id, "The session id")->required();
    common(cmd);
    cmd->callback([g, id, &code] {
      auto client = clientFor(*g);
      if (!client) {
        code = 2;
        return;
      }
      auto reply = client->call("GET", "/api/v1/sessions/" + encode(*id), nullptr);
      if (!reply || reply->status >= 400) {
        std::cerr << "purser: " << (reply ? describeProblem(*reply) : reply.error().message)
                  << "\n";
        code = 1;
        return;
      }
      if (g->output == "json") {
        std::cout << writeJson(reply->body, 2) << "\n";
        return;
      }
      printTable(reply->body.value("data", json::array()),
                 {{"AT", "at"},
                  {"KIND", "kind"},
                  {"MODEL OR TOOL", "model"},
                  {"STATUS", "status"},
                  {"MS", "latency_ms"},
                  {"INPUT TOKENS", "tokens.input"},
                  {"OUTPUT TOKENS", "tokens.output"},
                  {"COST", "cost"}},
                 g->exact);
      const json total = reply->body.value("total", json::object());
      std::cout << "\n"
                << total.value("calls", 0) << " calls (" << total.value("model_calls", 0)
                << " model, " << total.value("tool_calls", 0) << " tool, "
                << total.value("errors", 0) << " failed), cost " << total.value("cost", "0") << ", "
                << total.value("duration_ms", 0) << " ms in calls\n";
      if (reply->body.value("truncated", false)) {
        std::cout << "(only the first calls are shown)\n";
      }
    });
  }
  // tools: what this key may call through /mcp, and grants.
  {
    CLI::App* cmd = root.add_subcommand(
        "tools",
        "MCP tools: what your key may call through /mcp (list), and grants to teams and "
        "tenants");
    CLI::App* list = cmd->add_subcommand("list", "The tools your key may call (the default)");
    common(list);
    common(cmd);
    const auto listTools = [g, &code] {
      auto client = clientFor(*g);
      if (!client) {
        code = 2;
        return;
      }
      json message = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}};
      auto reply = client->call("POST", "/mcp", message);
      if (!reply) {
        std::cerr << "purser: " << reply.error().message << "\n";
        code = 1;
        return;
      }
      if (reply->status == 404) {
        std::cerr << "purser: this server offers no MCP tools (no mcp: servers configured)\n";
        code = 1;
        return;
      }
      const json& body = reply->body;
      if (reply->status >= 400 || !body.is_object() || body.contains("error")) {
        const std::string why =
            body.is_object() && body.contains("error") && body["error"].is_object()
                ? body["error"].value("message", std::string("refused"))
                : describeProblem(*reply);
        std::cerr << "purser: " << why << "\n";
        code = 1;
        return;
      }
      const json tools = body.value("result", json::object()).value("tools", json::array());
      if (g->output == "json") {
        std::cout << writeJson(tools, 2) << "\n";
        return;
      }
      printTable(tools, {{"TOOL", "name"}, {"DESCRIPTION", "description"}}, g->exact);
    };
    list->callback(listTools);
    cmd->callback([cmd, listTools] {
      if (cmd->get_subcommands().empty()) listTools();
    });
    struct G {
      std::string team, tenant, tools;
    };
    auto grant = std::make_shared<G>();
    CLI::App* give = cmd->add_subcommand(
        "grant",
        "Grant tools to every key of a team (tenant admins) or a tenant (platform "
        "admins) that has none of its own; an empty list takes the grant away");
    give->add_option("--team", grant->team, "Team id or name (grants the team)");
    give->add_option(
        "--tenant", grant->tenant,
        "Tenant id or name (alone: grants the tenant; with --team: the team's tenant)");
    give->add_option("--tools", grant->tools, "Comma-separated: server/tool, server/* or *")
        ->required();
    common(give);
    give->callback([g, grant, &code] {
      if (grant->team.empty() && grant->tenant.empty()) {
        std::cerr << "purser: name --team (with --tenant when it is a platform admin's team name) "
                     "or --tenant\n";
        code = 2;
        return;
      }
      json body = {{"tools", splitList(grant->tools)}};
      if (!grant->team.empty() && !grant->tenant.empty()) body["tenant"] = grant->tenant;
      const std::string path = grant->team.empty()
                                   ? "/api/v1/tenants/" + encode(grant->tenant) + "/tools"
                                   : "/api/v1/teams/" + encode(grant->team) + "/tools";
      code = run(*g, "PUT", path, body, {{"ID", "id"}, {"NAME", "name"}, {"TOOLS", "tools"}});
    });
  }
  // usage record: history brought from elsewhere, in batches the API takes.
  {
    CLI::App* cmd = root.add_subcommand("usage", "Usage events");
    auto file = std::make_shared<std::string>();
    CLI::App* record = cmd->add_subcommand(
        "record",
        "Record usage that ran elsewhere (platform admins): a JSON file of {\"events\": [...]}, a "
        "JSON list, or JSON Lines, each event as POST /api/v1/usage takes it; sent 1,000 at a "
        "time, and safe to run again (recorded ids are skipped)");
    record->add_option("-f,--file", *file, "The events file")->required();
    common(record);
    record->callback([g, file, &code] {
      auto text = readFile(*file);
      if (!text) {
        code = 2;
        return;
      }
      json events = json::array();
      if (auto whole = parseJson(*text); whole && (whole->is_array() || whole->is_object())) {
        events = whole->is_array() ? *whole : whole->value("events", json::array());
      } else {
        std::istringstream lines(*text);
        std::string line;
        for (int n = 1; std::getline(lines, line); ++n) {
          if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
          auto e = parseJson(line);
          if (!e) {
            std::cerr << "purser: " << *file << ":" << n << ": " << e.error().message << "\n";
            code = 2;
            return;
          }
          events.push_back(std::move(*e));
        }
      }
      if (!events.is_array() || events.empty()) {
        std::cerr << "purser: " << *file << " holds no events\n";
        code = 2;
        return;
      }
      auto client = clientFor(*g);
      if (!client) {
        code = 2;
        return;
      }
      constexpr size_t kBatch = 1000;  // the API's limit per request
      int64_t recorded = 0, already = 0;
      Money charged, overage;
      json replies = json::array();
      for (size_t from = 0; from < events.size(); from += kBatch) {
        const size_t to = std::min(events.size(), from + kBatch);
        json batch = json::array();
        for (size_t i = from; i < to; ++i) batch.push_back(events[i]);
        auto reply = client->call("POST", "/api/v1/usage", {{"events", batch}});
        if (!reply || reply->status >= 400) {
          std::cerr << "purser: events " << from + 1 << " to " << to << " were not recorded: "
                    << (reply ? describeProblem(*reply) : reply.error().message)
                    << (from > 0 ? "; those before them were (running again skips them)" : "")
                    << "\n";
          code = 1;
          return;
        }
        recorded += reply->body.value("recorded", int64_t{0});
        already +=
            static_cast<int64_t>(reply->body.value("already_recorded", json::array()).size());
        charged = charged.add(Money::parse(reply->body.value("charged", "0")).value_or(Money()))
                      .value_or(charged);
        overage = overage.add(Money::parse(reply->body.value("overage", "0")).value_or(Money()))
                      .value_or(overage);
        replies.push_back(reply->body);
      }
      if (g->output == "json") {
        std::cout << writeJson(replies, 2) << "\n";
      } else {
        std::cout << "recorded " << recorded << " events (" << already
                  << " already recorded), charged "
                  << (g->exact ? charged.toString() : toCents(charged.toString())) << ", overage "
                  << (g->exact ? overage.toString() : toCents(overage.toString())) << "\n";
      }
      code = 0;
    });
    cmd->require_subcommand(1);
  }
  // audit
  {
    CLI::App* cmd = group("audit", "Read and verify the audit log");
    struct A {
      std::string from, to, limit, action, actor, before;
      bool newest = false;
    };
    auto a = std::make_shared<A>();
    CLI::App* list = cmd->add_subcommand("list", "Audit entries, oldest first");
    list->add_option("--from", a->from, "From (RFC 3339, inclusive)");
    list->add_option("--to", a->to, "To (RFC 3339, exclusive)");
    list->add_option("--limit", a->limit, "At most this many entries (default 1000)");
    list->add_option("--action", a->action,
                     "Only this action (key.create), or those starting so (key.)");
    list->add_option("--actor", a->actor, "Only what this actor (an id) did");
    list->add_flag("--newest-first", a->newest, "Newest entries first");
    list->add_option("--before", a->before,
                     "Only entries numbered below this SEQ (the next page, with --newest-first)");
    common(list);
    listing(cmd, list, [g, a, &code] {
      code = run(*g, "GET",
                 "/api/v1/audit" + query({{"from", a->from},
                                          {"to", a->to},
                                          {"limit", a->limit},
                                          {"action", a->action},
                                          {"actor", a->actor},
                                          {"before", a->before},
                                          {"order", a->newest ? "desc" : ""}}),
                 nullptr, kAuditColumns);
    });
    CLI::App* verify = cmd->add_subcommand(
        "verify", "Check the whole log: its hash chain, its signatures and its anchor");
    common(verify);
    verify->callback([g, &code] {
      // A broken chain exits 3, so scripts and cron jobs notice.
      code = run(*g, "GET", "/api/v1/audit/verify", nullptr,
                 {{"OK", "ok"},
                  {"ENTRIES", "entries"},
                  {"SIGNED", "signed_entries"},
                  {"ANCHORED AT", "anchored_seq"},
                  {"FIRST BAD", "first_bad_seq"},
                  {"PROBLEM", "problem"}},
                 /*must_be_ok=*/true);
    });
  }
  registerFleetCommands(root, g, common, code);
}

}  // namespace purser::cli
