// What a pod's share is, read from its environment the way HAMi-core reads it:
//   CUDA_DEVICE_MEMORY_LIMIT=<n>[k|m|g]     memory on every visible device (no unit: bytes)
//   CUDA_DEVICE_MEMORY_LIMIT_<i>=<n>[k|m|g] memory on visible device i (wins over the above)
//   CUDA_DEVICE_SM_LIMIT=<percent>          compute on every device; _<i> for one device
//   CUDA_DEVICE_MEMORY_SHARED_CACHE=<path>  the file the pod's processes share the cap through
// A value that cannot be read is an error, never "no limit": the shim refuses the share rather than
// leave it unenforced. Pure (the environment is passed in); no allocation on the error path beyond
// the message.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace purser::gpushare {

constexpr int kMaxDevices = 16;

struct Limits {
  uint64_t memory[kMaxDevices] = {};  // bytes; 0 = not limited
  int sm_percent[kMaxDevices] = {};   // 1..99 throttled; 0 = not limited (absent or 100)
  std::string shared_cache;           // empty: this process alone holds the share
  std::string error;                  // non-empty: the share cannot be enforced, and why

  bool limitsMemory() const;
  bool limitsCompute() const;
  bool active() const { return limitsMemory() || limitsCompute() || !error.empty(); }
};

// `get` returns the variable's value or nullptr when it is not set.
Limits readLimits(const std::function<const char*(const char*)>& get);

// "1024m" -> 1073741824; no unit means bytes; false for anything else (signs, overflow, junk).
bool parseBytes(const char* text, uint64_t* out);

}  // namespace purser::gpushare
