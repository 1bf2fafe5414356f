#include "sim/incident_gen.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "config/yaml_reader.h"
#include "observe/prom_text.h"

namespace purser::sim {
namespace {

// The vocabulary of ../shared/specs/incidents.md §1.
const std::set<std::string>& vocabulary() {
  static const std::set<std::string> kNames = [] {
    std::set<std::string> s = {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_POWER_VIOLATION",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "purser_gateway_requests_total",
        "purser_gateway_upstream_errors_total",
        "purser_wallet_spent_ratio",
        "purser_fleet_pending_workloads",
        "purser_fleet_quota_used",
        "purser_fleet_quota_nominal",
    };
    for (const char* h : {"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                          "vllm:request_queue_time_seconds", "purser_gateway_ttft_seconds"}) {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) s.insert(std::string(h) + suffix);
    }
    return s;
  }();
  return kNames;
}

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool isCounter(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  return endsWith(lower, "_total") || endsWith(name, "_bucket") || endsWith(name, "_sum") ||
         endsWith(name, "_count") || name == "DCGM_FI_DEV_THERMAL_VIOLATION" ||
         name == "DCGM_FI_DEV_POWER_VIOLATION" || name == "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS";
}

std::string seriesKey(const observe::Sample& s) {
  std::string key = s.name + "{";
  for (const auto& [k, v] : s.labels) key += k + "=" + v + ",";
  return key + "}";
}

std::string str(const YAML::Node& n) { return n ? n.as<std::string>() : std::string(); }

// A case read back, with the relations the scope rules need.
struct Case {
  std::string text;
  YAML::Node doc;
  observe::Exposition metrics;
  std::string question_kind, question_name, symptom;
  std::string cause, subject_kind, subject_name;
  std::map<std::string, int> nodes;  // name -> GPUs
  struct Replica {
    std::string route, node;
    std::vector<int> gpus;
  };
  std::map<std::string, Replica> deployments;
  struct Workload {
    std::string ns, queue, node;
    std::vector<int> gpus;
  };
  std::map<std::string, Workload> workloads;  // "ns/name"
  std::set<std::string> teams, routes, targets, queues, wallets;
  std::set<std::pair<std::string, std::string>> route_targets;
  std::vector<std::string> budget_lines;
};

::testing::AssertionResult readCase(const std::string& text, Case& c) {
  c.text = text;
  auto doc = config::parseYaml(text, "case.yaml");
  if (!doc) return ::testing::AssertionFailure() << "YAML: " << doc.error().toString();
  c.doc = *doc;
  for (const char* key :
       {"name", "question", "window", "inventory", "metrics", "events", "logs", "expected"}) {
    if (!c.doc[key]) return ::testing::AssertionFailure() << "no " << key;
  }
  observe::ParseLimits limits;
  limits.max_bytes = 1u << 30;
  limits.max_samples = 50'000'000;
  auto metrics = observe::parsePrometheusText(str(c.doc["metrics"]), limits);
  if (!metrics) return ::testing::AssertionFailure() << "metrics: " << metrics.error().message;
  c.metrics = std::move(*metrics);
  c.question_kind = str(c.doc["question"]["kind"]);
  c.question_name = str(c.doc["question"]["name"]);
  c.symptom = str(c.doc["question"]["symptom"]);
  c.cause = str(c.doc["expected"]["cause"]);
  if (c.doc["expected"]["subject"]) {
    c.subject_kind = str(c.doc["expected"]["subject"]["kind"]);
    c.subject_name = str(c.doc["expected"]["subject"]["name"]);
  }
  const auto& inv = c.doc["inventory"];
  for (const auto& n : inv["nodes"]) c.nodes[str(n["name"])] = n["gpus"].as<int>();
  for (const auto& d : inv["deployments"]) {
    Case::Replica r{str(d["route"]), str(d["node"]), d["gpus"].as<std::vector<int>>()};
    c.deployments[str(d["name"])] = r;
  }
  for (const auto& wl : inv["workloads"]) {
    Case::Workload w{str(wl["namespace"]), str(wl["queue"]),
                     wl["node"].IsNull() ? "" : str(wl["node"]), wl["gpus"].as<std::vector<int>>()};
    c.workloads[w.ns + "/" + str(wl["name"])] = w;
  }
  for (const auto& t : inv["teams"]) c.teams.insert(str(t["name"]));
  for (const auto& s : c.metrics.samples) {
    auto route = observe::label(s, "route");
    auto target = observe::label(s, "target");
    if (s.name == "purser_gateway_requests_total" && route && target) {
      c.routes.insert(std::string(*route));
      if (!target->empty()) c.targets.insert(std::string(*target));
      c.route_targets.insert({std::string(*route), std::string(*target)});
    }
    if (auto q = observe::label(s, "cluster_queue")) c.queues.insert(std::string(*q));
    if (auto w = observe::label(s, "scope")) c.wallets.insert(std::string(*w));
  }
  for (const auto& l : c.doc["logs"]) {
    std::string line = str(l["line"]);
    if (line.find("msg=\"budget exceeded\"") != std::string::npos) c.budget_lines.push_back(line);
  }
  return ::testing::AssertionSuccess();
}

bool hasField(const std::string& line, const std::string& field) {
  return line.find(" " + field + " ") != std::string::npos || endsWith(line, " " + field);
}

bool subjectExists(const Case& c) {
  const std::string& n = c.subject_name;
  if (c.subject_kind == "deployment") return c.deployments.count(n) > 0;
  if (c.subject_kind == "workload") return c.workloads.count(n) > 0;
  if (c.subject_kind == "node") return c.nodes.count(n) > 0;
  if (c.subject_kind == "route") return c.routes.count(n) > 0;
  if (c.subject_kind == "queue") return c.queues.count(n) > 0;
  if (c.subject_kind == "provider") return c.targets.count(n) > 0 && c.deployments.count(n) == 0;
  if (c.subject_kind == "gpu") {
    auto slash = n.rfind('/');
    if (slash == std::string::npos || !c.nodes.count(n.substr(0, slash))) return false;
    int index = std::stoi(n.substr(slash + 1));
    return index >= 0 && index < c.nodes.at(n.substr(0, slash));
  }
  if (c.subject_kind == "team") return c.teams.count(n) > 0 && c.wallets.count("team:" + n) > 0;
  if (c.subject_kind == "key" || c.subject_kind == "user") {
    return c.wallets.count(c.subject_kind + ":" + n) > 0;
  }
  return false;
}

// Whether the object the answer names lies inside what the question asks about.
bool inScope(const Case& c) {
  const std::string& q = c.question_name;
  const std::string& kind = c.subject_kind;
  const std::string& n = c.subject_name;
  auto gpuOf = [&](const std::string& node, const std::vector<int>& gpus) {
    for (int g : gpus) {
      if (node + "/" + std::to_string(g) == n) return true;
    }
    return false;
  };
  if (c.question_kind == "fleet") return q == "*";
  if (c.question_kind == "route") {
    if (kind == "route") return n == q;
    if (kind == "deployment") return c.deployments.count(n) && c.deployments.at(n).route == q;
    if (kind == "gpu") {
      for (const auto& [name, r] : c.deployments) {
        if (r.route == q && gpuOf(r.node, r.gpus)) return true;
      }
      return false;
    }
    if (kind == "node") {
      for (const auto& [name, r] : c.deployments) {
        if (r.route == q && r.node == n) return true;
      }
      return false;
    }
    if (kind == "provider") return c.route_targets.count({q, n}) > 0;
    if (kind == "key" || kind == "user" || kind == "team") {
      std::string who = kind == "key"    ? "key=" + n
                        : kind == "user" ? "principal=user:" + n
                                         : "wallet=team:" + n;
      for (const auto& line : c.budget_lines) {
        if (hasField(line, "route=" + q) && hasField(line, who)) return true;
      }
      return false;
    }
    return false;
  }
  if (c.question_kind == "deployment") {
    if (!c.deployments.count(q)) return false;
    const auto& r = c.deployments.at(q);
    return (kind == "deployment" && n == q) || (kind == "gpu" && gpuOf(r.node, r.gpus)) ||
           (kind == "node" && n == r.node);
  }
  if (c.question_kind == "workload") {
    if (!c.workloads.count(q)) return false;
    const auto& w = c.workloads.at(q);
    return (kind == "workload" && n == q) || (kind == "gpu" && gpuOf(w.node, w.gpus)) ||
           (kind == "node" && n == w.node) || (kind == "queue" && n == w.queue);
  }
  if (c.question_kind == "queue") {
    if (kind == "queue") return n == q;
    return kind == "workload" && c.workloads.count(n) && c.workloads.at(n).queue == q;
  }
  if (c.question_kind == "team") {
    if (kind == "team") return n == q;
    if (kind == "queue") {
      for (const auto& [name, w] : c.workloads) {
        if (w.queue == n && w.ns == q) return true;
      }
      return false;
    }
    if (kind == "workload") return c.workloads.count(n) && c.workloads.at(n).ns == q;
    if (kind == "key" || kind == "user") {
      std::string who = kind == "key" ? "key=" + n : "principal=user:" + n;
      for (const auto& line : c.budget_lines) {
        if (hasField(line, who) && hasField(line, "team=" + q)) return true;
      }
      return false;
    }
    return false;
  }
  if (c.question_kind == "user") return kind == "user" && n == q;
  if (c.question_kind == "node") {
    if (kind == "node") return n == q;
    if (kind == "gpu") return n.rfind(q + "/", 0) == 0;
    if (kind == "deployment") return c.deployments.count(n) && c.deployments.at(n).node == q;
    if (kind == "workload") return c.workloads.count(n) && c.workloads.at(n).node == q;
    return false;
  }
  return false;
}

// The values of the one series `name` with these labels (all of them must match), in order.
std::vector<double> values(const Case& c, const std::string& name,
                           const std::vector<std::pair<std::string, std::string>>& match) {
  std::vector<double> out;
  std::string key;
  for (const auto& s : c.metrics.samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match) {
      auto l = observe::label(s, k);
      ok = ok && l && *l == v;
    }
    if (!ok) continue;
    std::string k = seriesKey(s);
    if (key.empty()) key = k;
    if (k == key) out.push_back(s.value);
  }
  return out;
}

double mean(const std::vector<double>& v, size_t from, size_t to) {
  double sum = 0;
  for (size_t i = from; i < to; ++i) sum += v[i];
  return to > from ? sum / static_cast<double>(to - from) : 0;
}

std::vector<double> deltas(const std::vector<double>& v) {
  std::vector<double> d;
  for (size_t i = 1; i < v.size(); ++i) d.push_back(v[i] - v[i - 1]);
  return d;
}

bool anyLog(const Case& c, std::string_view piece) {
  for (const auto& l : c.doc["logs"]) {
    if (str(l["line"]).find(piece) != std::string::npos) return true;
  }
  return false;
}

// The fault's evidence as the spec's "typical evidence" column describes it, starting inside
// the window (not at its first sample).
::testing::AssertionResult showsItsSignature(const Case& c) {
  const std::string& n = c.subject_name;
  auto fail = [](const std::string& why) { return ::testing::AssertionFailure() << why; };
  auto gpu = [&](const std::string& field) {
    auto slash = n.rfind('/');
    return values(c, field, {{"Hostname", n.substr(0, slash)}, {"gpu", n.substr(slash + 1)}});
  };
  if (c.cause == "kv_cache_exhaustion") {
    auto kv = values(c, "vllm:kv_cache_usage_perc", {{"instance", n}});
    auto pre = values(c, "vllm:num_preemptions_total", {{"instance", n}});
    if (kv.empty() || *std::max_element(kv.begin(), kv.end()) < 0.95 || kv[0] > 0.9) {
      return fail("KV usage does not fill");
    }
    if (pre.back() <= pre.front()) return fail("no preemptions");
  } else if (c.cause == "replica_saturation") {
    std::vector<std::string> replicas;
    for (const auto& [name, r] : c.deployments) {
      if ((c.subject_kind == "deployment" && name == n) ||
          (c.subject_kind == "route" && r.route == n)) {
        replicas.push_back(name);
      }
    }
    if (replicas.empty()) return fail("no replica");
    for (const auto& r : replicas) {
      auto waiting = values(c, "vllm:num_requests_waiting", {{"instance", r}});
      auto kv = values(c, "vllm:kv_cache_usage_perc", {{"instance", r}});
      if (waiting.front() > 0 || *std::max_element(waiting.begin(), waiting.end()) < 5) {
        return fail("no queue builds on " + r);
      }
      if (*std::max_element(kv.begin(), kv.end()) > 0.9) return fail("the KV cache fills on " + r);
    }
  } else if (c.cause == "gpu_hardware_fault") {
    auto xid = gpu("DCGM_FI_DEV_XID_ERRORS");
    static const std::set<double> kXids = {48, 63, 64, 79, 94, 95};
    if (xid.empty() || xid.front() != 0 || !kXids.count(xid.back())) return fail("no XID");
  } else if (c.cause == "gpu_thermal_throttle") {
    auto temp = gpu("DCGM_FI_DEV_GPU_TEMP");
    auto clock = gpu("DCGM_FI_DEV_SM_CLOCK");
    if (*std::max_element(temp.begin(), temp.end()) < 84 || temp.front() > 80) {
      return fail("the GPU does not heat up");
    }
    if (*std::min_element(clock.begin(), clock.end()) >
        0.85 * *std::max_element(clock.begin(), clock.end())) {
      return fail("the SM clock does not drop");
    }
  } else if (c.cause == "gpu_memory_oom") {
    if (!anyLog(c, "out of memory")) return fail("no out-of-memory line");
  } else if (c.cause == "nvlink_degraded") {
    int dropped = 0;
    for (int g = 0; g < c.nodes.at(n); ++g) {
      auto bw = values(c, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
                       {{"Hostname", n}, {"gpu", std::to_string(g)}});
      if (bw.size() < 10) continue;
      auto d = deltas(bw);
      size_t fifth = d.size() / 5;
      double before = mean(d, 0, fifth), after = mean(d, d.size() - fifth, d.size());
      if (before > 1000 && after < 0.7 * before) ++dropped;
    }
    if (dropped < 2) return fail("NVLink bandwidth does not drop on two GPUs");
  } else if (c.cause == "upstream_errors" || c.cause == "upstream_rate_limited") {
    bool rising = false;
    for (const char* kind : {"5xx", "connect", "timeout", "429"}) {
      if ((c.cause == "upstream_rate_limited") != (std::string(kind) == "429")) continue;
      auto v = values(c, "purser_gateway_upstream_errors_total", {{"target", n}, {"kind", kind}});
      rising = rising || (!v.empty() && v.back() - v.front() > 20);
    }
    if (!rising) return fail("the provider's errors do not rise");
  } else if (c.cause == "bad_config_change") {
    bool changed = false;
    for (const auto& e : c.doc["events"]) {
      std::string kind = str(e["kind"]), msg = str(e["message"]);
      changed = changed || ((kind == "route.update" || kind == "deployment.update") &&
                            str(e["object"]) == n && msg.find("tags") == std::string::npos);
    }
    if (!changed) return fail("no audit event changes " + n);
  } else if (c.cause == "budget_exhausted") {
    auto ratio = values(c, "purser_wallet_spent_ratio", {{"scope", c.subject_kind + ":" + n}});
    if (ratio.empty() || ratio.front() >= 1 || ratio.back() < 1)
      return fail("the wallet does not run out");
    if (c.budget_lines.empty()) return fail("nobody is refused");
  } else if (c.cause == "quota_exhausted") {
    auto pending = values(c, "purser_fleet_pending_workloads", {{"cluster_queue", n}});
    auto used = values(c, "purser_fleet_quota_used", {{"cluster_queue", n}});
    auto nominal = values(c, "purser_fleet_quota_nominal", {{"cluster_queue", n}});
    if (pending.front() != 0 || pending.back() < 1) return fail("nothing pends");
    if (used.back() < nominal.back()) return fail("the queue is not full");
  } else if (c.cause == "preemption_churn") {
    std::map<std::string, int> preempted;
    for (const auto& e : c.doc["events"]) {
      if (str(e["kind"]) == "Preempted") ++preempted[str(e["object"])];
    }
    bool churn = false;
    for (const auto& [name, w] : c.workloads)
      churn = churn || (w.queue == n && preempted[name] >= 2);
    if (!churn) return fail("no workload of the queue is preempted twice");
  } else if (c.cause == "noisy_neighbor") {
    int sharing = 0;
    auto slash = n.rfind('/');
    std::string node = n.substr(0, slash);
    int index = std::stoi(n.substr(slash + 1));
    for (const auto& [name, r] : c.deployments) {
      sharing += r.node == node && std::count(r.gpus.begin(), r.gpus.end(), index) ? 1 : 0;
    }
    for (const auto& [name, w] : c.workloads) {
      sharing += w.node == node && std::count(w.gpus.begin(), w.gpus.end(), index) ? 1 : 0;
    }
    auto util = gpu("DCGM_FI_DEV_GPU_UTIL");
    if (sharing < 2) return fail("the GPU is not shared");
    if (*std::max_element(util.begin(), util.end()) < 95 || util.front() > 90) {
      return fail("the GPU's compute is not taken");
    }
  } else if (c.cause == "idle_allocation") {
    const auto& w = c.workloads.at(n);
    for (int g : w.gpus) {
      auto util =
          values(c, "DCGM_FI_DEV_GPU_UTIL", {{"Hostname", w.node}, {"gpu", std::to_string(g)}});
      if (*std::max_element(util.begin(), util.end()) > 3) return fail("the GPUs are used");
    }
  } else if (c.cause == "traffic_shift") {
    bool more = false;
    for (const auto& [name, r] : c.deployments) {
      if (r.route != n) continue;
      auto d = deltas(values(c, "vllm:prompt_tokens_total", {{"instance", name}}));
      size_t fifth = d.size() / 5;
      more = more || mean(d, d.size() - fifth, d.size()) > 1.3 * mean(d, 0, fifth);
      auto waiting = values(c, "vllm:num_requests_waiting", {{"instance", name}});
      if (*std::max_element(waiting.begin(), waiting.end()) >= 5) return fail("a queue builds");
    }
    if (!more) return fail("no more prompt tokens");
  }
  return ::testing::AssertionSuccess();
}

// Every property a generated case must have.
void checkCase(const std::string& text, const std::string& cause, const std::string& label) {
  SCOPED_TRACE(label);
  Case c;
  ASSERT_TRUE(readCase(text, c));
  EXPECT_EQ(c.cause, cause);
  static const std::set<std::string> kKinds = {"route", "deployment", "workload", "queue",
                                               "team",  "user",       "node",     "fleet"};
  static const std::set<std::string> kSymptoms = {"slow",        "errors", "pending",
                                                  "over_budget", "idle",   "any"};
  EXPECT_TRUE(kKinds.count(c.question_kind)) << c.question_kind;
  EXPECT_TRUE(kSymptoms.count(c.symptom)) << c.symptom;
  if (cause == "none") {
    EXPECT_TRUE(c.subject_kind.empty());
  } else {
    EXPECT_TRUE(subjectExists(c)) << c.subject_kind << " " << c.subject_name;
    EXPECT_TRUE(inScope(c)) << c.question_kind << " " << c.question_name << " does not cover "
                            << c.subject_kind << " " << c.subject_name;
    EXPECT_TRUE(showsItsSignature(c));
  }

  // Metrics: the spec's names only, counters that never go down, times inside the window.
  std::map<std::string, double> last;
  std::set<std::string> unknown;
  std::string decreasing;
  for (const auto& s : c.metrics.samples) {
    if (!vocabulary().count(s.name)) unknown.insert(s.name);
    if (!isCounter(s.name)) continue;
    std::string key = seriesKey(s);
    auto it = last.find(key);
    if (it != last.end() && s.value < it->second && decreasing.empty()) decreasing = key;
    last[key] = s.value;
  }
  EXPECT_TRUE(unknown.empty()) << *unknown.begin();
  EXPECT_TRUE(decreasing.empty()) << decreasing;
  EXPECT_GT(c.metrics.samples.size(), 1000u);

  // Nothing but `expected:` names the cause (the spec's own metric name aside).
  std::string body = text.substr(0, text.rfind("\nexpected:"));
  for (size_t at; (at = body.find("purser_gateway_upstream_errors_total")) != std::string::npos;) {
    body.erase(at, std::string_view("purser_gateway_upstream_errors_total").size());
  }
  for (const auto& name : incidentCauses()) {
    EXPECT_EQ(body.find(name), std::string::npos) << "the case names " << name;
  }
}

class IncidentCauseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(IncidentCauseTest, GeneratesValidAnswerableCases) {
  for (uint64_t seed : {1u, 2u}) {
    IncidentSpec spec;
    spec.cause = GetParam();
    spec.seed = seed;
    auto text = generateIncident(spec);
    ASSERT_TRUE(text) << text.error().message;
    checkCase(*text, GetParam(), "seed " + std::to_string(seed));
  }
}

TEST_P(IncidentCauseTest, KeepsTheFirstFaultAsTheAnswerWhenASecondOneRuns) {
  const auto& causes = incidentCauses();
  auto it = std::find(causes.begin(), causes.end(), GetParam());
  // A partner that differs from the cause and is a fault.
  std::string second = causes[static_cast<size_t>(it - causes.begin() + 5) % causes.size()];
  if (second == "none" || second == GetParam()) second = "gpu_thermal_throttle";
  if (second == GetParam()) second = "quota_exhausted";
  IncidentSpec spec;
  spec.cause = GetParam();
  spec.second_cause = second;
  spec.seed = 11;
  spec.nodes = 5;
  auto text = generateIncident(spec);
  ASSERT_TRUE(text) << text.error().message;
  checkCase(*text, GetParam(), "with " + second);
  Case c;
  ASSERT_TRUE(readCase(*text, c));
  EXPECT_NE(c.question_kind, "fleet") << "two faults need a question that covers only one";
}

INSTANTIATE_TEST_SUITE_P(AllCauses, IncidentCauseTest, ::testing::ValuesIn(incidentCauses()),
                         [](const auto& info) { return info.param; });

TEST(IncidentGenTest, IsDeterministicAndVariesWithTheSeed) {
  IncidentSpec spec;
  spec.cause = "kv_cache_exhaustion";
  spec.seed = 42;
  auto a = generateIncident(spec);
  auto b = generateIncident(spec);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
  spec.seed = 43;
  auto c = generateIncident(spec);
  ASSERT_TRUE(c);
  EXPECT_NE(*a, *c);
  spec.seed = 42;
  spec.red_herrings = false;
  auto d = generateIncident(spec);
  ASSERT_TRUE(d);
  EXPECT_NE(*a, *d);
}

TEST(IncidentGenTest, VariesTheQuestionTheOnsetAndTheSizesAcrossSeeds) {
  std::set<std::string> questions, windows, node_counts;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    IncidentSpec spec;
    spec.cause = "gpu_hardware_fault";
    spec.seed = seed;
    auto text = generateIncident(spec);
    ASSERT_TRUE(text) << text.error().message;
    // The part before the metrics says it all (and reads fast).
    auto head = config::parseYaml(text->substr(0, text->find("\nmetrics: |")), "head.yaml");
    ASSERT_TRUE(head) << head.error().toString();
    questions.insert(str((*head)["question"]["kind"]) + "/" + str((*head)["question"]["symptom"]));
    windows.insert(str((*head)["window"]["start"]));
    node_counts.insert(std::to_string((*head)["inventory"]["nodes"].size()));
  }
  EXPECT_GE(questions.size(), 3u);
  EXPECT_GE(windows.size(), 10u);
  EXPECT_GE(node_counts.size(), 3u);
}

TEST(IncidentGenTest, RefusesWhatItCannotTell) {
  IncidentSpec spec;
  spec.cause = "disk_full";
  auto unknown = generateIncident(spec);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(unknown.error().message.find("kv_cache_exhaustion"), std::string::npos);
  EXPECT_NE(unknown.error().message.find("traffic_shift"), std::string::npos);

  spec.cause = "kv_cache_exhaustion";
  spec.second_cause = "kv_cache_exhaustion";
  auto same = generateIncident(spec);
  ASSERT_FALSE(same);
  EXPECT_NE(same.error().message.find("ambiguous"), std::string::npos);
  spec.second_cause = "none";
  ASSERT_FALSE(generateIncident(spec));
  spec.second_cause = "gremlins";
  ASSERT_FALSE(generateIncident(spec));
  spec.second_cause.clear();
  spec.samples = 3;
  ASSERT_FALSE(generateIncident(spec));
}

TEST(IncidentGenTest, QuotesLogLinesSoTheyReadBackWhole) {
  IncidentSpec spec;
  spec.cause = "upstream_errors";
  bool seen = false;
  for (uint64_t seed = 1; seed <= 20 && !seen; ++seed) {
    spec.seed = seed;
    auto text = generateIncident(spec);
    ASSERT_TRUE(text);
    size_t from = text->find("\nlogs:") + 1;
    auto logs =
        config::parseYaml(text->substr(from, text->find("\nexpected:") - from), "logs.yaml");
    ASSERT_TRUE(logs) << logs.error().toString();
    for (const auto& l : (*logs)["logs"]) {
      std::string line = str(l["line"]);
      if (line.find("msg=\"upstream error\"") == std::string::npos) continue;
      // logfmt's escaped JSON body survives YAML quoting byte for byte.
      EXPECT_NE(line.find("body=\"{\\\""), std::string::npos) << line;
      EXPECT_EQ(line.back(), '"');
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
}

TEST(IncidentGenTest, TheSuiteCoversEveryCauseWithSecondFaults) {
  auto suite = incidentSuite();
  EXPECT_GE(suite.size(), 100u);
  std::map<std::string, int> per_cause, with_second;
  std::set<std::string> names;
  for (size_t i = 0; i < suite.size(); ++i) {
    const auto& s = suite[i];
    EXPECT_TRUE(s.red_herrings);
    ++per_cause[s.cause];
    if (!s.second_cause.empty()) ++with_second[s.cause];
    names.insert(incidentFileName(i + 1, s));
  }
  EXPECT_EQ(names.size(), suite.size());
  EXPECT_EQ(incidentFileName(7, suite[6]).substr(0, 4), "007-");
  for (const auto& cause : incidentCauses()) {
    EXPECT_GE(per_cause[cause], 6) << cause;
    EXPECT_GE(with_second[cause], 2) << cause;
  }
}

TEST(IncidentGenTest, EverySuiteCaseGenerates) {
  for (const auto& spec : incidentSuite()) {
    auto text = generateIncident(spec);
    ASSERT_TRUE(text) << spec.cause << "+" << spec.second_cause << " seed " << spec.seed << ": "
                      << text.error().message;
    EXPECT_NE(text->find("expected:\n  cause: " + spec.cause + "\n"), std::string::npos);
  }
}

TEST(IncidentGenTest, ABigCaseHoldsAThousandSeries) {
  IncidentSpec spec;
  spec.cause = "gpu_thermal_throttle";
  spec.seed = 5;
  spec.nodes = 125;
  spec.gpus_per_node = 8;
  spec.samples = 120;
  auto text = generateIncident(spec);
  ASSERT_TRUE(text) << text.error().message;
  // Count series by their first sample line; the block's lines are "  name{labels} value ts".
  std::set<std::string_view> series;
  size_t dcgm = 0;
  std::string_view all(*text);
  size_t begin = all.find("metrics: |\n") + 11, end = all.find("\nevents:");
  std::string_view block = all.substr(begin, end - begin);
  for (size_t at = 0; at < block.size();) {
    size_t nl = block.find('\n', at);
    std::string_view line = block.substr(at, nl - at);
    std::string_view key = line.substr(2, line.find("} ") - 1);
    if (series.insert(key).second && key.starts_with("DCGM_FI_DEV_GPU_UTIL")) ++dcgm;
    at = nl == std::string_view::npos ? block.size() : nl + 1;
  }
  EXPECT_GE(series.size(), 1000u);
  EXPECT_EQ(dcgm, 1000u);
}

}  // namespace
}  // namespace purser::sim
