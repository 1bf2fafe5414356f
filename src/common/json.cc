#include "common/json.h"

#include <fmt/format.h>

#include <algorithm>

namespace purser {

namespace {

// See utf8SequenceAt().
size_t sequenceAt(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

size_t utf8SequenceAt(std::string_view s, size_t i) { return sequenceAt(s, i); }

size_t invalidUtf8At(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // Runs of ASCII are the common case.
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = sequenceAt(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

bool isValidUtf8(std::string_view s) { return invalidUtf8At(s) == std::string_view::npos; }

std::string toValidUtf8(std::string_view s) {
  size_t bad = invalidUtf8At(s);
  if (bad == std::string_view::npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = sequenceAt(s, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    out.append(s.data() + i, n);
    i += n;
  }
  return out;
}

size_t jsonNesting(std::string_view text, size_t stop_after) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > stop_after) return deepest;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return deepest;
}

Result<Json> parseJson(std::string_view text, size_t max_nesting) {
  if (jsonNesting(text, max_nesting) > max_nesting) {
    return fail(invalidArgument(
        fmt::format("the JSON is nested deeper than the limit of {} levels", max_nesting)));
  }
  // JSON has no place for a raw NUL byte (inside a string it must be escaped), and the parser
  // would stop reading at one and ignore what follows.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return fail(invalidArgument(
        fmt::format("not valid JSON at byte {}: a NUL byte is not allowed", nul + 1)));
  }
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    // nlohmann quotes what it last read, which may be any bytes of the input: keep it short and
    // valid UTF-8.
    std::string what = toValidUtf8(e.what());
    if (what.size() > 300) what = toValidUtf8(what.substr(0, 300)) + "...";
    return fail(invalidArgument(fmt::format("not valid JSON at byte {}: {}", e.byte, what)));
  } catch (const Json::exception& e) {
    return fail(invalidArgument(fmt::format("not valid JSON: {}", toValidUtf8(e.what()))));
  }
}

Json parseJsonOrDiscarded(std::string_view text, size_t max_nesting) {
  auto parsed = parseJson(text, max_nesting);
  return parsed ? std::move(*parsed) : Json(Json::value_t::discarded);
}

std::optional<int64_t> jsonInt(const Json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t n = value.get<uint64_t>();
    if (n > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(n);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return std::nullopt;
}

std::string writeJson(const Json& value, int indent) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

}  // namespace purser
