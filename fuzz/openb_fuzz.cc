// Fuzzes the openb trace readers (CSV files given to `purser sim placement`): any text gives rows
// or an error naming the line, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fleet_io/openb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto nodes = purser::fleet::placement::parseNodesCsv(text, "nodes.csv");
  if (!nodes && nodes.error().toString().empty()) std::abort();
  auto pods = purser::fleet::placement::parsePodsCsv(text, "pods.csv", {"A100", "V100M32", "T4"});
  if (!pods && pods.error().toString().empty()) std::abort();
  return 0;
}
