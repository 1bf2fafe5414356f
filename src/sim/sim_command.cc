#include "sim/sim_command.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <boost/asio/signal_set.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "common/clock.h"
#include "common/json.h"
#include "common/logging.h"
#include "config/config.h"
#include "fleet_io/openb.h"
#include "fleet_io/scenario.h"
#include "http/builtin.h"
#include "http/server.h"
#include "http/workers.h"
#include "sim/dcgm_sim.h"
#include "sim/incident_gen.h"
#include "sim/llm_sim.h"

namespace purser::sim {

namespace {

struct LlmFlags {
  std::string listen = "127.0.0.1:9001";
  std::string models;
  std::string api_keys;
  int64_t ttft_ms = 50;
  int64_t tokens_per_s = 200;
  double fail_rate = 0;
  double cut_rate = 0;
  double prefill_tokens_per_s = 0;
  double batch_slowdown = 0.01;
  int64_t kv_cache_tokens = 65536;
  int64_t max_num_seqs = 64;
  int64_t max_batched_tokens = 8192;
  bool no_prefix_caching = false;
  uint64_t seed = 1;
  size_t threads = 1;
  std::string log_level = "warn";
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Serves `router` at `so`'s address until SIGINT or SIGTERM, then drains; prints the URL it
// listens on as "purser sim NAME: listening on URL" (tests and scripts wait for that line).
int serveUntilStopped(const char* name, http::ServerOptions so, http::Router& router,
                      http::Workers& workers, http::MetricsRegistry& metrics,
                      std::unique_ptr<http::Server>& server) {
  server = std::make_unique<http::Server>(so, router, workers, metrics);
  if (auto r = server->listen(); !r) {
    std::cerr << "purser sim " << name << ": " << r.error().message << "\n";
    return 1;
  }
  server->start();
  boost::asio::signal_set signals(workers.context(0), SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) server->shutdown([&workers] { workers.stop(); });
  });
  workers.start();
  std::cout << "purser sim " << name << ": listening on " << server->url() << std::endl;
  workers.join();
  return 0;
}

int runLlm(const LlmFlags& f) {
  if (auto logged = setupLogging({.level = f.log_level}); !logged) {
    std::cerr << "purser sim llm: " << logged.error().message << "\n";
    return 2;
  }
  auto address = config::parseListenAddress(f.listen);
  if (!address) {
    std::cerr << "purser sim llm: --listen: " << address.error().message << "\n";
    return 2;
  }
  http::Workers workers(f.threads);
  http::Router router;
  http::MetricsRegistry metrics;
  http::Readiness readiness;
  LlmSimOptions options;
  options.models = split(f.models);
  options.api_keys = split(f.api_keys);
  options.ttft = std::chrono::milliseconds(f.ttft_ms);
  options.tokens_per_s = f.tokens_per_s;
  options.fail_rate = f.fail_rate;
  options.cut_rate = f.cut_rate;
  options.prefill_tokens_per_s = f.prefill_tokens_per_s;
  options.batch_slowdown = f.batch_slowdown;
  options.kv_cache_tokens = f.kv_cache_tokens;
  options.max_num_seqs = f.max_num_seqs;
  options.max_batched_tokens = f.max_batched_tokens;
  options.prefix_caching = !f.no_prefix_caching;
  options.seed = f.seed;
  LlmSim sim(options, metrics);
  std::unique_ptr<http::Server> server;
  if (auto r = sim.addRoutes(router); !r) {
    std::cerr << "purser sim llm: " << r.error().message << "\n";
    return 1;
  }
  if (auto r =
          http::addBuiltinRoutes(router, metrics, readiness, [&] { return server->draining(); });
      !r) {
    std::cerr << "purser sim llm: " << r.error().message << "\n";
    return 1;
  }
  http::ServerOptions so;
  std::tie(so.host, so.port) = *address;
  so.max_requests_per_connection = 0;
  so.drain_timeout = std::chrono::seconds(2);
  return serveUntilStopped("llm", so, router, workers, metrics, server);
}

struct DcgmFlags {
  std::string listen = "127.0.0.1:9400";
  std::string hostname = "node-1";
  int gpus = 8;
  std::string model = "NVIDIA H100 80GB HBM3";
  int64_t memory_mib = 81559;
  uint64_t seed = 1;
};

int runDcgm(const DcgmFlags& f) {
  auto address = config::parseListenAddress(f.listen);
  if (!address) {
    std::cerr << "purser sim dcgm: --listen: " << address.error().message << "\n";
    return 2;
  }
  http::Workers workers(1);
  http::Router router;
  http::MetricsRegistry own;  // the server's own; /metrics is the exporter's
  DcgmSim sim({.hostname = f.hostname,
               .gpus = f.gpus,
               .model = f.model,
               .memory_mib = f.memory_mib,
               .seed = f.seed});
  if (auto r = sim.addRoutes(router); !r) {
    std::cerr << "purser sim dcgm: " << r.error().message << "\n";
    return 1;
  }
  if (auto r = router.add(http::Method::kGet, "/healthz",
                          [](http::Request&) { return http::Response::json(200, "{}"); });
      !r) {
    std::cerr << "purser sim dcgm: " << r.error().message << "\n";
    return 1;
  }
  http::ServerOptions so;
  std::tie(so.host, so.port) = *address;
  so.drain_timeout = std::chrono::seconds(1);
  std::unique_ptr<http::Server> server;
  return serveUntilStopped("dcgm", so, router, workers, own, server);
}

}  // namespace

namespace {

std::optional<std::string> readWhole(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

template <typename Options>
int runPlacement(const Options& o) {
  using namespace fleet::placement;
  auto policy = parsePolicy(o.policy);
  if (!policy) {
    std::cerr << "purser: " << policy.error().message << "\n";
    return 2;
  }
  auto nodes_text = readWhole(o.nodes);
  auto pods_text = readWhole(o.pods);
  if (!nodes_text || !pods_text) {
    std::cerr << "purser: cannot read " << (nodes_text ? o.pods : o.nodes) << "\n";
    return 2;
  }
  auto nodes = parseNodesCsv(*nodes_text, o.nodes);
  if (!nodes) {
    std::cerr << "purser: " << nodes.error().message << "\n";
    return 2;
  }
  std::vector<std::string> models;
  for (const auto& n : *nodes) {
    if (!n.model.empty() && std::find(models.begin(), models.end(), n.model) == models.end()) {
      models.push_back(n.model);
    }
  }
  auto pods = parsePodsCsv(*pods_text, o.pods, models);
  if (!pods) {
    std::cerr << "purser: " << pods.error().message << "\n";
    return 2;
  }
  auto r = replay(*nodes, *pods, {*policy, o.seed, o.tune});
  if (!r) {
    std::cerr << "purser: " << r.error().message << "\n";
    return 2;
  }
  const auto round2 = [](double v) { return std::round(v * 100.0) / 100.0; };
  nlohmann::json out = {{"policy", policyName(r->policy)},
                        {"seed", r->seed},
                        {"nodes", r->nodes},
                        {"gpus", r->gpus},
                        {"arrivals", r->arrivals},
                        {"failed", r->failed},
                        {"failed_100", r->failed_100},
                        {"failed_gpus_100", round2(r->failed_gpus_100)},
                        {"allocation_ratio_100", round2(r->allocation_ratio_100)},
                        {"allocation_ratio_130", round2(r->allocation_ratio_130)},
                        {"unallocated_gpus_130", round2(r->unallocated_gpus_130)},
                        {"fragmentation_100", round2(r->fragmentation_100)},
                        {"fragmentation_130", round2(r->fragmentation_130)},
                        {"runtime_s", round2(r->runtime_s)}};
  nlohmann::json curve = nlohmann::json::array();
  for (const auto& [ratio, frag] : r->fragmentation_by_arrival) {
    curve.push_back({ratio, round2(frag)});
  }
  out["fragmentation_by_arrival"] = curve;
  std::cout << writeJson(out) << "\n";
  return 0;
}

struct IncidentFlags {
  std::string cause;
  std::string second;
  uint64_t seed = 1;
  bool no_red_herrings = false;
  int nodes = 0;
  int gpus_per_node = 0;
  int samples = 41;
  int step_s = 30;
  std::string out;
  std::string suite;
};

bool writeText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(text.data(), static_cast<std::streamsize>(text.size()));
  file.close();
  return static_cast<bool>(file);
}

int runIncident(const IncidentFlags& f) {
  if (!f.suite.empty()) {
    if (!f.cause.empty() || !f.second.empty() || !f.out.empty()) {
      std::cerr << "purser sim incident: --suite writes the standard set; it takes no --cause, "
                   "--second or --out\n";
      return 2;
    }
    std::error_code ec;
    std::filesystem::create_directories(f.suite, ec);
    if (ec) {
      std::cerr << "purser sim incident: cannot create " << f.suite << ": " << ec.message() << "\n";
      return 2;
    }
    auto suite = incidentSuite();
    for (size_t i = 0; i < suite.size(); ++i) {
      auto text = generateIncident(suite[i]);
      if (!text) {
        std::cerr << "purser sim incident: " << incidentFileName(i + 1, suite[i]) << ": "
                  << text.error().message << "\n";
        return 2;
      }
      auto path = std::filesystem::path(f.suite) / incidentFileName(i + 1, suite[i]);
      if (!writeText(path, *text)) {
        std::cerr << "purser sim incident: cannot write " << path.string() << "\n";
        return 2;
      }
    }
    std::cout << "purser sim incident: wrote " << suite.size() << " cases to " << f.suite << "\n";
    return 0;
  }
  if (f.cause.empty()) {
    std::string known;
    for (const auto& c : incidentCauses()) known += (known.empty() ? "" : ", ") + c;
    std::cerr << "purser sim incident: --cause (or --suite DIR) is required; causes: " << known
              << "\n";
    return 2;
  }
  IncidentSpec spec;
  spec.cause = f.cause;
  spec.second_cause = f.second;
  spec.seed = f.seed;
  spec.red_herrings = !f.no_red_herrings;
  spec.nodes = f.nodes;
  spec.gpus_per_node = f.gpus_per_node;
  spec.samples = f.samples;
  spec.step_s = f.step_s;
  auto text = generateIncident(spec);
  if (!text) {
    std::cerr << "purser sim incident: " << text.error().message << "\n";
    return 2;
  }
  if (f.out.empty() || f.out == "-") {
    std::cout << *text;
    std::cout.flush();
    return std::cout ? 0 : 1;
  }
  if (!writeText(f.out, *text)) {
    std::cerr << "purser sim incident: cannot write " << f.out << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

void registerSimCommands(CLI::App& root, int& exit_code) {
  CLI::App* sim = root.add_subcommand("sim", "Simulators for demos, tests and benchmarks");
  sim->require_subcommand(1);
  auto f = std::make_shared<LlmFlags>();
  CLI::App* llm = sim->add_subcommand(
      "llm", "A simulated OpenAI- and Anthropic-compatible model server with vLLM metrics");
  llm->add_option("--listen", f->listen, "Address to listen on, host:port")->capture_default_str();
  llm->add_option("--models", f->models,
                  "Comma-separated model names to answer to (default: any name)");
  llm->add_option("--api-keys", f->api_keys,
                  "Comma-separated keys clients must present (default: none needed)");
  llm->add_option("--ttft-ms", f->ttft_ms, "Time to first token, milliseconds")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  llm->add_option("--tokens-per-s", f->tokens_per_s, "Decoding speed per request (0: instant)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  llm->add_option("--fail-rate", f->fail_rate, "Fraction of requests answered with a 500")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  llm->add_option("--cut-rate", f->cut_rate, "Fraction of requests cut off midway")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  llm->add_option("--prefill-tokens-per-s", f->prefill_tokens_per_s,
                  "Prompt tokens computed per second (0: prompts cost only --ttft-ms)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  llm->add_option("--batch-slowdown", f->batch_slowdown,
                  "How much longer a step takes per further sequence in the batch (a fraction)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  llm->add_option("--kv-cache-tokens", f->kv_cache_tokens,
                  "KV-cache capacity in tokens (blocks of 16); a request that can never fit is "
                  "refused")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 28))
      ->capture_default_str();
  llm->add_option("--max-num-seqs", f->max_num_seqs, "Sequences in a batch at most; more wait")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  llm->add_option("--max-batched-tokens", f->max_batched_tokens,
                  "Tokens one engine step computes at most (long prompts are chunked)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  llm->add_flag("--no-prefix-caching", f->no_prefix_caching,
                "Compute every prompt whole, even when its start is cached");
  llm->add_option("--seed", f->seed, "Seed of the fault injection")->capture_default_str();
  llm->add_option("--threads", f->threads, "I/O threads")->capture_default_str();
  llm->add_option("--log-level", f->log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  llm->footer(
      "The engine batches up to --max-num-seqs sequences in a paged KV cache of "
      "--kv-cache-tokens, preempts (and later recomputes) the newest when the cache is full, and "
      "reuses cached prompt prefixes. A step takes 1/--tokens-per-s, plus --batch-slowdown of "
      "it per further sequence, plus --ttft-ms and the prompt tokens at --prefill-tokens-per-s "
      "when it computes prompts. With --tokens-per-s 0 and --ttft-ms 0 answers are immediate.\n"
      "Faults at run time: POST /sim/faults {\"fail_rate\": 0.5, \"cut_rate\": 0, "
      "\"slow_factor\": 4, \"down\": true}; GET /sim/faults reads them; GET /health answers 503 "
      "while down.");
  llm->callback([f, &exit_code] { exit_code = runLlm(*f); });

  auto d = std::make_shared<DcgmFlags>();
  CLI::App* dcgm = sim->add_subcommand(
      "dcgm",
      "A simulated NVIDIA DCGM exporter: one node's GPUs on /metrics, readings set at run time");
  dcgm->add_option("--listen", d->listen, "Address to listen on, host:port")->capture_default_str();
  dcgm->add_option("--hostname", d->hostname, "The node's name (the Hostname label)")
      ->capture_default_str();
  dcgm->add_option("--gpus", d->gpus, "GPUs on the node")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  dcgm->add_option("--model", d->model, "The GPUs' model name")->capture_default_str();
  dcgm->add_option("--memory-mib", d->memory_mib, "Each GPU's memory in MiB")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  dcgm->add_option("--seed", d->seed, "Seed of the GPUs' UUIDs")->capture_default_str();
  dcgm->footer(
      "Readings at run time: POST /sim/gpus {\"gpu\": 0, \"util\": 95, \"memory_used_mib\": "
      "70000, \"temp\": 83, \"power_w\": 650, \"xid\": 79} (without \"gpu\": every GPU); "
      "GET /sim/gpus reads them.");
  dcgm->callback([d, &exit_code] { exit_code = runDcgm(*d); });

  struct Admission {
    std::string scenario;
    std::string mode = "kueue";
    bool summary = false;
  };
  auto ad = std::make_shared<Admission>();
  CLI::App* admission = sim->add_subcommand(
      "admission",
      "Run an admission scenario (Kueue objects, workloads, a mode) and print the outcome as JSON");
  admission->add_option("FILE", ad->scenario, "The scenario (YAML)")->required();
  admission
      ->add_option("--mode", ad->mode,
                   "kueue: Kueue's cycles, one head per ClusterQueue (what the cases expect); "
                   "drain: each cycle admits until nothing more fits, as purser serve runs")
      ->check(CLI::IsMember({"kueue", "drain"}))
      ->capture_default_str();
  admission->add_flag("--summary", ad->summary,
                      "Print how many workloads end admitted, preempted and pending (and per "
                      "step), not each one: for large scenarios");
  admission->footer(
      "Scenario modes: single_cycle (one scheduling cycle), preemption_targets (the victims for "
      "one incoming workload), until_stable (cycles until nothing changes, then each step). The "
      "cycles run, the decisions made (admissions and preemptions) and the time spent reading, "
      "running and printing go to stderr. Exit code 0 whatever the outcome; 2 for an invalid "
      "file.");
  admission->callback([ad, &exit_code] {
    const Clock& clock = SystemClock::instance();
    const MonoTime begin = clock.monotonic();
    auto loaded = fleet::loadScenario(ad->scenario);
    if (!loaded) {
      std::cerr << "purser: " << loaded.error().toString() << "\n";
      exit_code = 2;
      return;
    }
    fleet::RunStats stats;
    const MonoTime read = clock.monotonic();
    auto out = fleet::runScenario(
        *loaded, ad->mode == "drain" ? fleet::CycleMode::kDrain : fleet::CycleMode::kKueue, &stats);
    const MonoTime ran = clock.monotonic();
    if (!out) {
      std::cerr << "purser: " << ad->scenario << ": " << out.error().toString() << "\n";
      exit_code = 2;
      return;
    }
    if (ad->summary) {
      // Counts only: the outcome of a 50,000-workload scenario is about 100 MB of JSON.
      const auto counts = [](const nlohmann::json& o) {
        nlohmann::json c;
        for (const char* key : {"admitted", "preempted", "pending"}) {
          c[key] = o.contains(key) ? o[key].size() : 0;
        }
        return c;
      };
      nlohmann::json s = counts(*out);
      if (out->contains("steps")) {
        nlohmann::json steps = nlohmann::json::array();
        for (const auto& step : (*out)["steps"]) steps.push_back(counts(step));
        s["steps"] = steps;
      }
      std::cout << writeJson(s, 2) << "\n";
    } else {
      std::cout << writeJson(*out, 2) << "\n";
    }
    std::cout.flush();
    const MonoTime printed = clock.monotonic();
    const auto ms = [](MonoTime from, MonoTime to) {
      return std::chrono::duration<double, std::milli>(to - from).count();
    };
    const double run_ms = ms(read, ran);
    std::cerr << fmt::format(
        "purser: mode {}: {} cycle(s), {} decision(s); read {:.1f} ms, run {:.1f} ms ({:.0f} "
        "decisions/s), print {:.1f} ms\n",
        ad->mode, stats.cycles, stats.decisions, ms(begin, read), run_ms,
        run_ms > 0 ? static_cast<double>(stats.decisions) * 1000.0 / run_ms : 0.0,
        ms(ran, printed));
    exit_code = 0;
  });

  struct Placement {
    std::string nodes, pods, policy = "default";
    uint64_t seed = 42;
    double tune = 1.3;
  };
  auto pl = std::make_shared<Placement>();
  CLI::App* placement = sim->add_subcommand(
      "placement", "Replay an openb trace onto a cluster with a placement policy; print JSON");
  placement->add_option("--nodes", pl->nodes, "Nodes CSV (sn,cpu_milli,memory_mib,gpu,model)")
      ->required();
  placement
      ->add_option("--pods", pl->pods,
                   "Pods CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,...)")
      ->required();
  placement
      ->add_option("--policy", pl->policy,
                   "random, dotprod, clustering, packing, best_fit, fgd or default")
      ->capture_default_str();
  placement->add_option("--seed", pl->seed, "Seed of the shuffle, tuning and ties")
      ->capture_default_str();
  placement->add_option("--tune", pl->tune, "Arrived GPU demand as a multiple of capacity")
      ->check(CLI::Range(0.01, 10.0))
      ->capture_default_str();
  placement->footer(
      "The replay of the FGD paper's experiment (bench/placement/README.md). Exit "
      "code 2 for invalid input.");
  placement->callback([pl, &exit_code] { exit_code = runPlacement(*pl); });

  auto inc = std::make_shared<IncidentFlags>();
  CLI::App* incident = sim->add_subcommand(
      "incident",
      "Write an incident case (the YAML `purser diagnose --case` reads) for a cause and a seed");
  incident->add_option("--cause", inc->cause, "The fault to tell (see the list below)");
  incident->add_option("--seed", inc->seed, "Seed of everything drawn: names, sizes, magnitudes")
      ->capture_default_str();
  incident->add_option("--second", inc->second,
                       "A second simultaneous fault, placed outside the question's scope");
  incident->add_flag("--no-red-herrings", inc->no_red_herrings,
                     "Leave out the harmless or out-of-scope trouble cases usually carry");
  incident->add_option("--nodes", inc->nodes, "Nodes in the fleet (0: drawn from the seed, 2-5)")
      ->check(CLI::Range(0, 2000))
      ->capture_default_str();
  incident->add_option("--gpus-per-node", inc->gpus_per_node, "GPUs per node (0: drawn per node)")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  incident->add_option("--samples", inc->samples, "Samples per series")
      ->check(CLI::Range(12, 5000))
      ->capture_default_str();
  incident->add_option("--step", inc->step_s, "Seconds between samples")
      ->check(CLI::Range(5, 600))
      ->capture_default_str();
  incident->add_option("--out", inc->out, "Write the case to this file (default: stdout)");
  incident->add_option("--suite", inc->suite,
                       "Write the standard judging set into this directory instead, as "
                       "NNN-<cause>[+<second>]-s<seed>.yaml");
  {
    std::string causes;
    for (const auto& c : incidentCauses()) causes += (causes.empty() ? "" : ", ") + c;
    incident->footer(
        "Causes: " + causes +
        ".\nThe case follows docs/incidents.md: inventory, OpenMetrics samples, "
        "events and log lines of a 20-minute window (with the defaults), the operator's question "
        "and the expected answer. The same flags always give the same bytes. Examples:\n"
        "  purser sim incident --cause kv_cache_exhaustion --seed 7\n"
        "  purser sim incident --cause budget_exhausted --second gpu_thermal_throttle --out "
        "c.yaml\n"
        "  purser sim incident --cause none --nodes 125 --gpus-per-node 8 --samples 120  "
        "(a large case, for benchmarks)\n"
        "  purser sim incident --suite cases/\n"
        "Exit code 2 for an unknown cause, a pair of causes that cannot coexist, or a fleet too "
        "small to hold them apart.");
  }
  incident->callback([inc, &exit_code] { exit_code = runIncident(*inc); });
}

}  // namespace purser::sim
