#include "fleet_io/openb.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

namespace purser::fleet::placement {

namespace {

size_t u(int i) { return static_cast<size_t>(i); }

std::vector<std::string> splitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  for (char c : line) {
    if (c == ',') {
      out.push_back(cell);
      cell.clear();
    } else if (c != '\r') {
      cell.push_back(c);
    }
  }
  out.push_back(cell);
  return out;
}

// A CSV file as rows of named cells, with the line each came from.
class Csv {
 public:
  Csv(std::string file) : file_(std::move(file)) {}

  Result<void> read(const std::string& text, const std::vector<std::string>& required) {
    std::istringstream in(text);
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      if (number == 1) {
        const auto names = splitCsv(line);
        for (size_t i = 0; i < names.size(); ++i) {
          if (!columns_.emplace(names[i], i).second) {
            return fail(invalidArgument(
                fmt::format("{}:1: column \"{}\" appears more than once", file_, names[i])));
          }
        }
        for (const auto& r : required) {
          if (columns_.count(r) == 0) {
            return fail(invalidArgument(fmt::format("{}:1: missing column \"{}\"", file_, r)));
          }
        }
        continue;
      }
      if (line.empty() || line == "\r") continue;
      auto cells = splitCsv(line);
      if (cells.size() != columns_.size()) {
        return fail(invalidArgument(fmt::format("{}:{}: expected {} columns, got {}", file_, number,
                                                columns_.size(), cells.size())));
      }
      rows_.push_back({number, std::move(cells)});
    }
    if (number == 0) return fail(invalidArgument(fmt::format("{}: the file is empty", file_)));
    return {};
  }

  bool has(const std::string& column) const { return columns_.count(column) != 0; }

  struct Row {
    int line;
    std::vector<std::string> cells;
  };
  const std::vector<Row>& rows() const { return rows_; }

  const std::string& cell(const Row& r, const std::string& column) const {
    return r.cells[columns_.at(column)];
  }

  Result<int64_t> integer(const Row& r, const std::string& column) const {
    const std::string& text = cell(r, column);
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v < 0) {
      return fail(
          invalidArgument(fmt::format("{}:{}: column {}: \"{}\" is not a whole number of "
                                      "0 or more",
                                      file_, r.line, column, text)));
    }
    return v;
  }

  std::string where(const Row& r) const { return fmt::format("{}:{}", file_, r.line); }

 private:
  std::string file_;
  std::map<std::string, size_t> columns_;
  std::vector<Row> rows_;
};

}  // namespace

Result<std::vector<Node>> parseNodesCsv(const std::string& text, const std::string& file_name) {
  Csv csv(file_name);
  PURSER_TRY(csv.read(text, {"sn", "cpu_milli", "memory_mib", "gpu", "model"}));
  std::vector<Node> out;
  std::set<std::string> names;
  for (const auto& r : csv.rows()) {
    Node n;
    n.name = csv.cell(r, "sn");
    if (n.name.empty() || !names.insert(n.name).second) {
      return fail(invalidArgument(
          fmt::format("{}: node name \"{}\" is empty or repeated", csv.where(r), n.name)));
    }
    n.cpu_milli = PURSER_TRY_VALUE(csv.integer(r, "cpu_milli"));
    n.memory_mib = PURSER_TRY_VALUE(csv.integer(r, "memory_mib"));
    const int64_t gpus = PURSER_TRY_VALUE(csv.integer(r, "gpu"));
    if (gpus > 64) {
      return fail(invalidArgument(
          fmt::format("{}: node {} has {} GPUs; at most 64", csv.where(r), n.name, gpus)));
    }
    n.gpus = static_cast<int>(gpus);
    n.model = csv.cell(r, "model");
    if (n.gpus > 0 && n.model.empty()) {
      return fail(
          invalidArgument(fmt::format("{}: node {} has GPUs but no model", csv.where(r), n.name)));
    }
    out.push_back(std::move(n));
  }
  return out;
}

Result<std::vector<Pod>> parsePodsCsv(const std::string& text, const std::string& file_name,
                                      const std::vector<std::string>& known_models) {
  Csv csv(file_name);
  PURSER_TRY(csv.read(text, {"name", "cpu_milli", "memory_mib", "num_gpu"}));
  const bool has_milli = csv.has("gpu_milli");
  const bool has_spec = csv.has("gpu_spec");
  std::vector<Pod> out;
  for (const auto& r : csv.rows()) {
    Pod p;
    p.name = csv.cell(r, "name");
    p.cpu_milli = PURSER_TRY_VALUE(csv.integer(r, "cpu_milli"));
    p.memory_mib = PURSER_TRY_VALUE(csv.integer(r, "memory_mib"));
    const int64_t num_gpu = PURSER_TRY_VALUE(csv.integer(r, "num_gpu"));
    if (num_gpu > 64) {
      return fail(invalidArgument(
          fmt::format("{}: pod {} asks for {} GPUs; at most 64", csv.where(r), p.name, num_gpu)));
    }
    p.num_gpu = static_cast<int>(num_gpu);
    if (p.num_gpu != 0) {
      int64_t milli = kMilliPerGpu;
      if (has_milli) milli = PURSER_TRY_VALUE(csv.integer(r, "gpu_milli"));
      p.gpu_milli = milli > kMilliPerGpu ? kMilliPerGpu : milli;
      if (has_spec) {
        std::stringstream spec(csv.cell(r, "gpu_spec"));
        std::string model;
        while (std::getline(spec, model, '|')) {
          if (model.empty()) continue;
          if (!known_models.empty() &&
              std::find(known_models.begin(), known_models.end(), model) == known_models.end()) {
            return fail(invalidArgument(
                fmt::format("{}: pod {}: gpu_spec names GPU model \"{}\", which no node has",
                            csv.where(r), p.name, model)));
          }
          p.models.push_back(model);
        }
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

Result<ReplayResult> replay(const std::vector<Node>& nodes, const std::vector<Pod>& pods,
                            const ReplayOptions& options, const Clock& clock) {
  const MonoTime started = clock.monotonic();
  if (nodes.empty()) return fail(invalidArgument("the cluster has no nodes"));
  std::mt19937_64 rng(options.seed);
  int64_t gpus = 0;
  for (const auto& n : nodes) gpus += n.gpus;
  if (gpus == 0) return fail(invalidArgument("the cluster has no GPUs"));
  const double capacity = static_cast<double>(gpus * kMilliPerGpu);
  const std::vector<TypicalPod> typical = typicalPods(pods);
  const ModelPressure pressure = modelPressure(typical, nodes);

  // 1. The workload in name order, then shuffled.
  std::vector<Pod> workload = pods;
  std::stable_sort(workload.begin(), workload.end(),
                   [](const Pod& a, const Pod& b) { return a.name < b.name; });
  std::vector<Pod> arrivals = workload;
  for (size_t i = arrivals.size(); i > 1; --i) {
    std::swap(arrivals[i - 1], arrivals[uniform(rng, i)]);
  }
  // 2-4. Tuned to `tune` x capacity.
  const double target = options.tune * capacity;
  double total = 0;
  for (const auto& p : arrivals) total += static_cast<double>(p.totalGpu());
  // (A workload without GPU demand cannot be tuned to a GPU target: it is replayed as it is.)
  if (total < target && total > 0) {
    for (int64_t i = 0;; ++i) {
      const Pod& src = workload[uniform(rng, workload.size())];
      if (total + static_cast<double>(src.gpu_milli) > target) break;
      total += static_cast<double>(src.totalGpu());
      Pod copy = src;
      copy.name = fmt::format("{}-tuned-{}", src.name, i);
      arrivals.push_back(std::move(copy));
    }
  } else {
    while (total > target && !arrivals.empty()) {
      const size_t k = uniform(rng, arrivals.size());
      total -= static_cast<double>(arrivals[k].totalGpu());
      arrivals.erase(arrivals.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  // 5. Node order for ties.
  std::vector<int> order(nodes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[uniform(rng, i)]);
  std::vector<int> rank(nodes.size());
  for (size_t i = 0; i < order.size(); ++i) rank[u(order[i])] = static_cast<int>(i);

  // 6. Place, one pod at a time.
  std::vector<NodeState> states;
  std::vector<double> frag;
  double cluster_frag = 0;
  for (const auto& n : nodes) {
    states.push_back(NodeState::of(n));
    frag.push_back(fragmentation(n, states.back(), typical));
    cluster_frag += frag.back();
  }
  struct Sample {
    int arrive;
    double alloc, frag;
  };
  std::vector<Sample> samples;
  samples.reserve(arrivals.size());
  ReplayResult r;
  double arrived = 0, used = 0;
  int64_t failed = 0;
  std::vector<int> feasible_nodes;
  std::unordered_map<std::string, int> memo;
  for (const Pod& pod : arrivals) {
    feasible_nodes.clear();
    for (size_t n = 0; n < nodes.size(); ++n) {
      if (feasible(nodes[n], states[n], pod)) feasible_nodes.push_back(static_cast<int>(n));
    }
    int chosen = -1;
    if (feasible_nodes.size() == 1) {
      chosen = feasible_nodes[0];
    } else if (!feasible_nodes.empty()) {
      if (options.policy == Policy::kRandom) {
        chosen = feasible_nodes[uniform(rng, feasible_nodes.size())];
      } else {
        // Nodes in the same state score the same: score each state once.
        memo.clear();
        int best_score = -1;
        for (int n : feasible_nodes) {
          const NodeState& s = states[u(n)];
          std::vector<int64_t> sorted = s.left;
          std::sort(sorted.begin(), sorted.end());
          std::string key = fmt::format("{}|{}|", nodes[u(n)].model, s.cpu_left);
          for (int64_t l : sorted) key += fmt::format("{},", l);
          for (const auto& t : s.tags) key += t + ";";
          auto it = memo.find(key);
          const int sc =
              it != memo.end()
                  ? it->second
                  : (memo[key] = score(options.policy, nodes[u(n)], s, pod, typical, pressure));
          if (chosen < 0 || sc > best_score || (sc == best_score && rank[u(n)] < rank[u(chosen)])) {
            best_score = sc;
            chosen = n;
          }
        }
      }
    }
    arrived += static_cast<double>(pod.totalGpu());
    if (chosen < 0) {
      ++failed;
      if (std::lround(arrived / capacity * 100.0) <= 100) {
        ++r.failed_100;
        r.failed_gpus_100 += static_cast<double>(pod.totalGpu()) / kMilliPerGpu;
      }
    } else {
      NodeState& s = states[u(chosen)];
      const auto taken = chooseGpus(nodes[u(chosen)], s, pod, options.policy, typical, rng);
      place(s, pod, taken);
      for (const auto& [i, m] : taken) used += static_cast<double>(m);
      const double f = fragmentation(nodes[u(chosen)], s, typical);
      cluster_frag += f - frag[u(chosen)];
      frag[u(chosen)] = f;
    }
    samples.push_back({static_cast<int>(std::lround(arrived / capacity * 100.0)),
                       used / capacity * 100.0, cluster_frag / capacity * 100.0});
  }
  // Means over the events at an arrival ratio (or the ratios around it when none is exact).
  const auto at = [&](int ratio) -> std::pair<double, double> {
    for (int spread : {0, 1}) {
      double alloc = 0, f = 0;
      int count = 0;
      for (const auto& smp : samples) {
        if (std::abs(smp.arrive - ratio) > spread) continue;
        alloc += smp.alloc;
        f += smp.frag;
        ++count;
      }
      if (count > 0) return {alloc / count, f / count};
    }
    return {0, 0};
  };
  r.policy = options.policy;
  r.seed = options.seed;
  r.nodes = static_cast<int64_t>(nodes.size());
  r.gpus = gpus;
  r.arrivals = static_cast<int64_t>(arrivals.size());
  r.failed = failed;
  std::tie(r.allocation_ratio_100, r.fragmentation_100) = at(100);
  std::tie(r.allocation_ratio_130, r.fragmentation_130) =
      at(static_cast<int>(std::lround(options.tune * 100.0)));
  for (int ratio = 10; ratio <= std::lround(options.tune * 100.0); ratio += 10) {
    r.fragmentation_by_arrival.emplace_back(ratio, at(ratio).second);
  }
  r.unallocated_gpus_130 = static_cast<double>(gpus) * (1.0 - r.allocation_ratio_130 / 100.0);
  r.runtime_s = std::chrono::duration<double>(clock.monotonic() - started).count();
  return r;
}

}  // namespace purser::fleet::placement
