#include "sim/dcgm_sim.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <mutex>
#include <vector>

#include "common/hash.h"
#include "common/json.h"

namespace purser::sim {

using http::Method;
using http::Request;
using http::Response;
using nlohmann::json;

namespace {

struct Gpu {
  std::string uuid;
  double util = 0;  // percent
  double memory_used_mib = 0;
  double temp = 34;
  double power_w = 70;
  int64_t xid = 0;
  bool throttle = false;
  double violation_us = 0;  // DCGM_FI_DEV_THERMAL_VIOLATION
};

}  // namespace

class DcgmSim::Impl {
 public:
  Impl(DcgmSimOptions options, const Clock& clock)
      : options_(std::move(options)), clock_(clock), last_(clock.monotonic()) {
    for (int i = 0; i < options_.gpus; ++i) {
      const uint64_t h = fnv1a64(fmt::format("{}/{}/{}", options_.hostname, i, options_.seed));
      Gpu g;
      g.uuid = fmt::format("GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", h >> 32, (h >> 16) & 0xffff,
                           h & 0xffff, (h >> 48) & 0xffff, h & 0xffffffffffffULL);
      gpus_.push_back(g);
    }
  }

  Response metrics() {
    std::lock_guard lock(mu_);
    advanceLocked();
    std::string out;
    const auto family = [&](const char* name, const char* type, const char* help, auto value) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
      for (size_t i = 0; i < gpus_.size(); ++i) {
        out += fmt::format(
            "{}{{gpu=\"{}\",UUID=\"{}\",device=\"nvidia{}\",modelName=\"{}\",Hostname=\"{}\"}} "
            "{}\n",
            name, i, gpus_[i].uuid, i, options_.model, options_.hostname, value(gpus_[i]));
      }
    };
    family("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", [](const Gpu& g) {
      if (g.throttle) return kThrottledClockMhz;
      return g.util > 0 ? kBoostClockMhz : kBaseClockMhz;
    });
    family("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).",
           [](const Gpu& g) { return g.temp; });
    family("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).",
           [](const Gpu& g) { return g.power_w; });
    family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).",
           [](const Gpu& g) { return g.util; });
    family("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
           [](const Gpu& g) { return g.util * 0.6; });
    family("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
           [](const Gpu& g) { return g.memory_used_mib; });
    family("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
           [this](const Gpu& g) {
             return static_cast<double>(options_.memory_mib) - g.memory_used_mib;
           });
    family("DCGM_FI_DEV_THERMAL_VIOLATION", "counter",
           "Throttling duration due to thermal constraints (in us).",
           [](const Gpu& g) { return static_cast<int64_t>(g.violation_us); });
    family("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.",
           [](const Gpu& g) { return g.xid; });
    Response r;
    r.headers.add("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    r.body = std::move(out);
    return r;
  }

  json state() {
    std::lock_guard lock(mu_);
    advanceLocked();
    return stateLocked();
  }

  Response get() { return Response::json(200, writeJson(json{{"gpus", state()}})); }

  // POST /sim/gpus: all or nothing.
  Response set(const Request& req) {
    const json body = parseJsonOrDiscarded(req.body);
    auto bad = [](const std::string& message) {
      return Response::json(400, writeJson(json{{"error", {{"message", message}}}}));
    };
    if (!body.is_object()) return bad("the body must be a JSON object");
    std::lock_guard lock(mu_);
    advanceLocked();
    std::vector<Gpu> next = gpus_;
    std::vector<size_t> which;
    if (body.contains("gpu")) {
      const json& g = body["gpu"];
      if (!g.is_number_integer() || g.get<int64_t>() < 0 ||
          g.get<int64_t>() >= static_cast<int64_t>(gpus_.size())) {
        return bad(fmt::format("'gpu' must be a GPU index from 0 to {}", gpus_.size() - 1));
      }
      which.push_back(g.get<size_t>());
    } else {
      for (size_t i = 0; i < gpus_.size(); ++i) which.push_back(i);
    }
    for (const auto& [name, value] : body.items()) {
      if (name == "gpu") continue;
      if (name == "throttle") {
        if (!value.is_boolean()) return bad("'throttle' must be true or false");
        for (size_t i : which) next[i].throttle = value.get<bool>();
        continue;
      }
      double lo = 0;
      double hi = 0;
      if (name == "util") {
        hi = 100;
      } else if (name == "memory_used_mib") {
        hi = static_cast<double>(options_.memory_mib);
      } else if (name == "temp") {
        hi = 130;
      } else if (name == "power_w") {
        hi = 2000;
      } else if (name == "xid") {
        hi = 1000;
      } else {
        return bad(fmt::format(
            "unknown reading '{}'; the readings are util, memory_used_mib, temp, power_w, xid and "
            "throttle",
            name));
      }
      if (!value.is_number() || value.get<double>() < lo || value.get<double>() > hi) {
        return bad(fmt::format("'{}' must be a number from {:g} to {:g}", name, lo, hi));
      }
      for (size_t i : which) {
        Gpu& g = next[i];
        const double v = value.get<double>();
        if (name == "util") g.util = v;
        if (name == "memory_used_mib") g.memory_used_mib = v;
        if (name == "temp") g.temp = v;
        if (name == "power_w") g.power_w = v;
        if (name == "xid") g.xid = static_cast<int64_t>(v);
      }
    }
    gpus_ = std::move(next);
    return Response::json(200, writeJson(json{{"gpus", stateLocked()}}));
  }

 private:
  // Throttled GPUs accrue violation time for the time passed since the last look.
  void advanceLocked() {
    const MonoTime now = clock_.monotonic();
    const double us = static_cast<double>(
        std::chrono::duration_cast<std::chrono::microseconds>(now - last_).count());
    last_ = now;
    if (us <= 0) return;
    for (Gpu& g : gpus_) {
      if (g.throttle) g.violation_us += us;
    }
  }

  json stateLocked() const {
    json out = json::array();
    for (size_t i = 0; i < gpus_.size(); ++i) {
      const Gpu& g = gpus_[i];
      out.push_back({{"gpu", i},
                     {"uuid", g.uuid},
                     {"util", g.util},
                     {"memory_used_mib", g.memory_used_mib},
                     {"temp", g.temp},
                     {"power_w", g.power_w},
                     {"xid", g.xid},
                     {"throttle", g.throttle},
                     {"thermal_violation_us", static_cast<int64_t>(g.violation_us)}});
    }
    return out;
  }

  const DcgmSimOptions options_;
  const Clock& clock_;
  std::mutex mu_;
  std::vector<Gpu> gpus_;  // guarded by mu_
  MonoTime last_;          // guarded by mu_; when violation time was last accrued
};

DcgmSim::DcgmSim(DcgmSimOptions options, const Clock& clock)
    : impl_(std::make_shared<Impl>(std::move(options), clock)) {}
DcgmSim::~DcgmSim() = default;

Result<void> DcgmSim::addRoutes(http::Router& router) {
  auto impl = impl_;
  PURSER_TRY(router.add(Method::kGet, "/metrics", [impl](Request&) { return impl->metrics(); }));
  PURSER_TRY(router.add(Method::kGet, "/sim/gpus", [impl](Request&) { return impl->get(); }));
  PURSER_TRY(router.add(Method::kPost, "/sim/gpus", [impl](Request& r) { return impl->set(r); }));
  return {};
}

}  // namespace purser::sim
