// JSON at Purser's edges: the one way outside bytes become JSON values, and the one way JSON
// values become text.
//
// Every byte from a client, an upstream, a file or another tenant is hostile. parseJson() refuses
// nesting deeper than a limit before it builds anything, so no document can exhaust the stack of
// the parser, of a copy or of the writer; it refuses invalid UTF-8 too. writeJson() never fails:
// a string that holds invalid UTF-8 (from a header, a path, a YAML scalar) is written with U+FFFD
// in place of each bad sequence, so the output is always valid JSON and no client byte can make a
// response throw. Nothing else in Purser calls nlohmann's parse() or dump() (a source rule test
// checks it).
//
// The UTF-8 helpers follow RFC 3629: overlong forms, surrogates (U+D800..U+DFFF) and code points
// past U+10FFFF are invalid.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace purser {

using Json = nlohmann::json;

// The nesting accepted by default: objects and arrays inside each other, this many levels.
inline constexpr size_t kDefaultMaxNesting = 128;

bool isValidUtf8(std::string_view s);
// The length of the valid UTF-8 sequence starting at s[i] (i < s.size()), or 0 when the bytes
// there are not one.
size_t utf8SequenceAt(std::string_view s, size_t i);
// `s` with each invalid byte sequence replaced by U+FFFD.
std::string toValidUtf8(std::string_view s);
// The byte offset of the first invalid sequence, or npos.
size_t invalidUtf8At(std::string_view s);

// The deepest nesting of arrays and objects in JSON text (strings are skipped), counting up to
// `stop_after` + 1 at most: a cheap scan that needs no parse.
size_t jsonNesting(std::string_view text, size_t stop_after);

// Parses `text`. kInvalidArgument says what is wrong and where: not JSON (with the byte offset),
// nested deeper than `max_nesting`, or invalid UTF-8 in a string.
Result<Json> parseJson(std::string_view text, size_t max_nesting = kDefaultMaxNesting);

// For bytes whose shape the caller checks anyway (an upstream's answer, a stored document): the
// value, or a discarded value (is_discarded(); no type predicate holds) when parseJson() refuses.
Json parseJsonOrDiscarded(std::string_view text, size_t max_nesting = kDefaultMaxNesting);

// The value as a signed 64-bit integer when it is a whole number that fits one; nullopt for
// fractions, strings, numbers past 2^63 - 1 and everything else.
std::optional<int64_t> jsonInt(const Json& value);

// The value as JSON text (compact, or indented by `indent` spaces). Never throws.
std::string writeJson(const Json& value, int indent = -1);

}  // namespace purser
