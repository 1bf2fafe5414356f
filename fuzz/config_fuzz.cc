// Fuzzes configuration loading: any text must give a configuration or a located error, never a
// crash; an error always names the file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto c = purser::config::parseConfig(std::string_view(reinterpret_cast<const char*>(data), size),
                                       "fuzz.yaml");
  if (!c && c.error().toString().empty()) std::abort();
  return 0;
}
