// Fuzzes the one door JSON comes in and goes out through (common/json.h): any bytes parse or are
// refused with a message in valid UTF-8; whatever parses writes back out as valid UTF-8 that
// parses to the same value; nesting is counted the same way the parser sees it; and the in-place
// reader (common/json_scan.h) accepts exactly what the parser accepts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/json.h"
#include "common/json_scan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using purser::Json;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = purser::parseJson(text, 64);
  auto scanned = purser::scanJson(text, 64);
  if (scanned.has_value() != parsed.has_value()) std::abort();
  if (!scanned && !purser::isValidUtf8(scanned.error().message)) std::abort();
  if (!parsed) {
    if (!purser::isValidUtf8(parsed.error().message)) std::abort();
  } else {
    if (purser::jsonNesting(text, 64) > 64) std::abort();
    const std::string out = purser::writeJson(*parsed);
    if (!purser::isValidUtf8(out)) std::abort();
    auto again = purser::parseJson(out, 64);
    if (!again || *again != *parsed) std::abort();
  }
  // Any bytes written as a JSON string come out as valid UTF-8 JSON.
  const std::string wrapped = purser::writeJson(Json{{"s", std::string(text)}});
  if (!purser::isValidUtf8(wrapped) || !purser::parseJson(wrapped)) std::abort();
  if (!purser::isValidUtf8(purser::toValidUtf8(text))) std::abort();
  return 0;
}
