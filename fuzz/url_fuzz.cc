// Fuzzes URL parsing and percent-decoding: no crash, and a parsed URL always has a host, a
// non-zero port and a target starting with '/'.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "http/message.h"
#include "http/url.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto u = purser::http::parseUrl(text)) {
    if (u->host.empty() || u->port == 0 || u->target.empty() || u->target[0] != '/') std::abort();
    (void)u->authority();
  }
  (void)purser::http::percentDecode(text, true);
  return 0;
}
