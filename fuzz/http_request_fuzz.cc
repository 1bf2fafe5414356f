// Fuzzes the HTTP request parser the server uses: arbitrary bytes must never crash, hang or
// read out of bounds, and a parsed request must respect the limits it was given.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "http/request_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kHeaderLimit = 4096;
  constexpr size_t kBodyLimit = 8192;
  auto r = purser::http::parseRequest(std::string_view(reinterpret_cast<const char*>(data), size),
                                      kHeaderLimit, kBodyLimit);
  if (r) {
    if (r->body.size() > kBodyLimit) std::abort();
    if (r->target.empty()) std::abort();
    (void)r->path();
    (void)r->queryParam("a");
    (void)r->targetProblem();
  }
  return 0;
}
