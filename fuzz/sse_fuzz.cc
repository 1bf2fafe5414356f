// Fuzzes the server-sent-event parser with any bytes in any split: it never crashes, never holds
// more than its limit, and the events' raw bytes plus what is pending are exactly what came in.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gateway/sse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 31;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  purser::gateway::SseParser parser(1024);
  std::string seen;
  for (size_t i = 0; i < rest.size(); i += piece) {
    auto events = parser.feed(rest.substr(i, piece));
    if (!events) return 0;  // over the limit: refused
    for (const auto& e : *events) seen += e.raw;
    if (parser.pending().size() > 1024) std::abort();
  }
  if (seen + parser.pending() != rest) std::abort();
  return 0;
}
