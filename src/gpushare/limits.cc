#include "gpushare/limits.h"

#include <cstdio>
#include <cstring>

namespace purser::gpushare {

bool Limits::limitsMemory() const {
  for (uint64_t m : memory) {
    if (m != 0) return true;
  }
  return false;
}

bool Limits::limitsCompute() const {
  for (int p : sm_percent) {
    if (p != 0) return true;
  }
  return false;
}

bool parseBytes(const char* text, uint64_t* out) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  uint64_t n = 0;
  const char* p = text;
  for (; *p >= '0' && *p <= '9'; ++p) {
    if (n > (UINT64_MAX - 9) / 10) return false;
    n = n * 10 + static_cast<uint64_t>(*p - '0');
  }
  uint64_t unit = 1;
  switch (*p) {
    case '\0':
      break;
    case 'k':
    case 'K':
      unit = uint64_t{1} << 10;
      ++p;
      break;
    case 'm':
    case 'M':
      unit = uint64_t{1} << 20;
      ++p;
      break;
    case 'g':
    case 'G':
      unit = uint64_t{1} << 30;
      ++p;
      break;
    default:
      return false;
  }
  if (*p != '\0' || (n != 0 && n > UINT64_MAX / unit)) return false;
  *out = n * unit;
  return true;
}

namespace {

bool parsePercent(const char* text, int* out) {
  uint64_t v = 0;
  if (!parseBytes(text, &v) || std::strpbrk(text, "kKmMgG") != nullptr || v > 100) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

Limits readLimits(const std::function<const char*(const char*)>& get) {
  Limits l;
  auto bad = [&l](const char* name, const char* value, const char* expected) {
    if (!l.error.empty()) return;
    l.error =
        std::string(name) + "=\"" + std::string(value).substr(0, 64) + "\" is not " + expected;
  };
  uint64_t all = 0;
  if (const char* v = get("CUDA_DEVICE_MEMORY_LIMIT")) {
    if (!parseBytes(v, &all) || all == 0)
      bad("CUDA_DEVICE_MEMORY_LIMIT", v, "a size such as 1024m");
  }
  int all_sm = 0;
  if (const char* v = get("CUDA_DEVICE_SM_LIMIT")) {
    if (!parsePercent(v, &all_sm) || all_sm == 0) {
      bad("CUDA_DEVICE_SM_LIMIT", v, "a percentage from 1 to 100");
    }
  }
  for (int i = 0; i < kMaxDevices; ++i) {
    char name[48];
    std::snprintf(name, sizeof name, "CUDA_DEVICE_MEMORY_LIMIT_%d", i);
    l.memory[i] = all;
    if (const char* v = get(name)) {
      uint64_t m = 0;
      if (!parseBytes(v, &m) || m == 0) bad(name, v, "a size such as 1024m");
      l.memory[i] = m;
    }
    std::snprintf(name, sizeof name, "CUDA_DEVICE_SM_LIMIT_%d", i);
    int sm = all_sm;
    if (const char* v = get(name)) {
      if (!parsePercent(v, &sm) || sm == 0) bad(name, v, "a percentage from 1 to 100");
    }
    l.sm_percent[i] = sm >= 100 ? 0 : sm;
  }
  if (const char* v = get("CUDA_DEVICE_MEMORY_SHARED_CACHE")) l.shared_cache = v;
  return l;
}

}  // namespace purser::gpushare
