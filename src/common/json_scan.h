// JSON read in place: a document is validated once, then its values are views of its bytes.
//
// The gateway reads a handful of fields of each request (model, stream, max_tokens, ...) and of
// each answer (usage) and forwards the rest untouched. Building a DOM for that costs an allocation
// per value and a re-serialisation per hop; scanJson() instead checks the whole text as strictly
// as parseJson() does (RFC 8259 grammar, UTF-8 inside strings, \u escapes with their surrogate
// pairs, a nesting limit checked before any recursion) and hands back a JsonView: the kind of a
// value and its exact bytes. Lookups walk the validated bytes again; nothing is copied. Because a
// view knows where its bytes are, a caller can splice a new value into the text (see
// JsonSplicer) and forward bytes that differ from the client's only where it chose.
//
// Objects with a key given twice: get() returns the last, as parseJson() and most parsers do;
// count() lets a caller that must not be ambiguous refuse such a document.
//
// Thread-safety: views are immutable and refer to text the caller keeps alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/result.h"

namespace purser {

enum class JsonKind : uint8_t { kObject, kArray, kString, kNumber, kTrue, kFalse, kNull };

class JsonView {
 public:
  JsonView() = default;

  JsonKind kind() const { return kind_; }
  // The value's bytes, exactly as they are in the document (a string with its quotes).
  std::string_view text() const { return text_; }

  bool isObject() const { return kind_ == JsonKind::kObject; }
  bool isArray() const { return kind_ == JsonKind::kArray; }
  bool isString() const { return kind_ == JsonKind::kString; }
  bool isBool() const { return kind_ == JsonKind::kTrue || kind_ == JsonKind::kFalse; }
  bool isNull() const { return kind_ == JsonKind::kNull; }

  // Objects: the value of the last member named `key` (escapes in keys are decoded before the
  // comparison); nullopt when absent or when this is not an object.
  std::optional<JsonView> get(std::string_view key) const;
  // How many members are named `key` (0 when this is not an object).
  size_t count(std::string_view key) const;
  // Every member in order: (the key as written between its quotes, escapes not decoded; value).
  std::vector<std::pair<std::string_view, JsonView>> members() const;

  // Arrays: the element at `index`, nullopt past the end or when this is not an array.
  std::optional<JsonView> at(size_t index) const;
  // Arrays: every element in order (one pass); empty for other kinds.
  std::vector<JsonView> elements() const;
  // Arrays and objects: whether they hold nothing. False for every other kind.
  bool empty() const;

  // Strings: the decoded text. nullopt for other kinds.
  std::optional<std::string> string() const;
  // Numbers: the value when it is written as a whole number (no fraction, no exponent) that fits
  // a signed 64-bit integer, as jsonInt() reads a parsed value; nullopt otherwise.
  std::optional<int64_t> integer() const;
  // true/false; nullopt for other kinds.
  std::optional<bool> boolean() const;

 private:
  friend Result<JsonView> scanJson(std::string_view, size_t);
  friend JsonView viewAt(std::string_view, size_t*);
  JsonView(JsonKind kind, std::string_view text) : kind_(kind), text_(text) {}

  JsonKind kind_ = JsonKind::kNull;
  std::string_view text_ = "null";
};

// A member's key as members() gives it (between its quotes), decoded.
std::string decodeJsonKey(std::string_view raw_key);
// Whether a key as members() gives it is `key` once decoded (no copy when it has no escapes).
bool jsonKeyIs(std::string_view raw_key, std::string_view key);

// Validates `text` as one JSON value (whitespace around it allowed) nested at most `max_nesting`
// levels. Errors are kInvalidArgument with the same wording as parseJson()'s: "not valid JSON at
// byte N: ...", "the JSON is nested deeper than the limit of N levels", invalid UTF-8 named with
// its byte offset. The view refers to `text`.
Result<JsonView> scanJson(std::string_view text, size_t max_nesting = kDefaultMaxNesting);

// Builds a document from another one's bytes with some values replaced and members added,
// without re-writing anything else. Edits are given by the views of the source document and
// applied in the order of their offsets; two edits of the same bytes are a programming error.
class JsonSplicer {
 public:
  explicit JsonSplicer(std::string_view source) : source_(source) {}

  // Puts `json_text` (already valid JSON) where `value` is.
  void replace(const JsonView& value, std::string json_text);
  // Adds the member "key": json_text at the start of `object` (a view of the source). `key` is
  // written as a JSON string.
  void prepend(const JsonView& object, std::string_view key, std::string json_text);

  std::string build() const;

 private:
  struct Edit {
    size_t begin;
    size_t end;  // bytes [begin, end) of the source are replaced by `text`
    std::string text;
  };
  size_t offsetOf(std::string_view part) const;

  std::string_view source_;
  std::vector<Edit> edits_;
};

}  // namespace purser
