// DcgmSim: a simulated NVIDIA DCGM exporter for one node — what Purser scrapes to see GPUs
// (`purser sim dcgm`). GET /metrics answers in the exporter's format: DCGM_FI_DEV_GPU_UTIL,
// DCGM_FI_DEV_MEM_COPY_UTIL, DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_FB_FREE, DCGM_FI_DEV_GPU_TEMP,
// DCGM_FI_DEV_POWER_USAGE, DCGM_FI_DEV_SM_CLOCK, DCGM_FI_DEV_THERMAL_VIOLATION (a counter: the
// microseconds the GPU spent clocked down for heat) and DCGM_FI_DEV_XID_ERRORS (the last XID
// error's code, 0 when none), each labelled gpu, UUID, device, modelName and Hostname as
// dcgm-exporter labels them.
//
// The GPUs' readings are set at run time — POST /sim/gpus with {"gpu": 0, "util": 95,
// "memory_used_mib": 70000, "temp": 83, "power_w": 650, "xid": 79, "throttle": true} (any subset;
// "gpu" omitted sets every GPU) — and are otherwise steady: idle GPUs at their base clock, busy
// ones at their boost clock. While `throttle` is set a GPU is thermally throttled: its SM clock
// drops to kThrottledClockMhz and its violation counter grows by the time that passes (on
// `clock`'s monotonic time). Deterministic but for that time: the UUIDs follow from the host
// name and `--seed`.
//
// Thread-safety: handlers run on any worker; the readings are behind one mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/result.h"
#include "http/router.h"

namespace purser::sim {

struct DcgmSimOptions {
  std::string hostname = "node-1";
  int gpus = 8;
  std::string model = "NVIDIA H100 80GB HBM3";
  int64_t memory_mib = 81559;
  uint64_t seed = 1;
};

class DcgmSim {
 public:
  static constexpr int kBaseClockMhz = 345;
  static constexpr int kBoostClockMhz = 1980;
  static constexpr int kThrottledClockMhz = 1125;

  explicit DcgmSim(DcgmSimOptions options, const Clock& clock = SystemClock::instance());
  ~DcgmSim();
  // GET /metrics, GET /sim/gpus, POST /sim/gpus.
  Result<void> addRoutes(http::Router& router);

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace purser::sim
