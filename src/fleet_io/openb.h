// The openb traces (Alibaba's cluster-trace-gpu-v2023) and their replay as the FGD paper's
// artifact ran it: bench/placement/README.md is the contract. `purser sim placement`
// prints a ReplayResult as JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "fleet/placement.h"

namespace purser::fleet::placement {

// `sn,cpu_milli,memory_mib,gpu,model`: one node per row. Errors name file:line and the column.
Result<std::vector<Node>> parseNodesCsv(const std::string& text, const std::string& file_name);
// `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,...` (gpu_milli and gpu_spec optional).
// `known_models`: the GPU models of the cluster; a constraint naming another is an error.
Result<std::vector<Pod>> parsePodsCsv(const std::string& text, const std::string& file_name,
                                      const std::vector<std::string>& known_models);

struct ReplayOptions {
  Policy policy = Policy::kDefault;
  uint64_t seed = 42;
  double tune = 1.3;
};

struct ReplayResult {
  Policy policy = Policy::kDefault;
  uint64_t seed = 0;
  int64_t nodes = 0;
  int64_t gpus = 0;
  int64_t arrivals = 0;
  int64_t failed = 0;
  // Pods that found no node before arrived demand passed 100 % (arrive ratio <= 100), and the
  // GPUs they asked for: what a scheduler would leave pending at full load.
  int64_t failed_100 = 0;
  double failed_gpus_100 = 0;
  double allocation_ratio_100 = 0;
  double allocation_ratio_130 = 0;
  double unallocated_gpus_130 = 0;
  double fragmentation_100 = 0;
  double fragmentation_130 = 0;
  // The cluster's fragmentation (% of GPU capacity) at 10 %, 20 %, ... of arrived demand, up to
  // the tuned load: (arrive ratio, fragmentation), measured as the *_100 and *_130 figures are.
  std::vector<std::pair<int, double>> fragmentation_by_arrival;
  double runtime_s = 0;
};

// `clock` measures ReplayResult::runtime_s.
Result<ReplayResult> replay(const std::vector<Node>& nodes, const std::vector<Pod>& pods,
                            const ReplayOptions& options,
                            const Clock& clock = SystemClock::instance());

}  // namespace purser::fleet::placement
