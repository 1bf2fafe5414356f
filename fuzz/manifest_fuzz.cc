// Fuzzes the Kueue manifest and workload readers (YAML or JSON from platform admins and from
// every tenant's submissions): any text gives objects or a located error, never a crash, and an
// error is valid UTF-8 (it is written into JSON answers).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/json.h"
#include "fleet_io/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto set = purser::fleet::parseManifests(text, "fuzz.yaml", 32);
  if (!set && set.error().toString().empty()) std::abort();
  auto w = purser::fleet::parseWorkload(text, "fuzz.yaml", 32);
  if (!w && w.error().toString().empty()) std::abort();
  if (w) (void)purser::writeJson(purser::Json{{"name", w->workload.name}});
  return 0;
}
