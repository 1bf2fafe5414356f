#include "common/json_scan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>

namespace purser {

namespace {

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The four hex digits at text[i..i+4) as a code unit, or -1.
int32_t codeUnitAt(std::string_view text, size_t i) {
  if (i + 4 > text.size()) return -1;
  int32_t v = 0;
  for (size_t k = 0; k < 4; ++k) {
    const int h = hexValue(text[i + k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

void appendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The validating pass. Iterative: the nesting limit bounds a vector, never the stack.
class Scanner {
 public:
  Scanner(std::string_view text, size_t max_nesting) : text_(text), max_nesting_(max_nesting) {}

  Result<JsonView> run(JsonKind* kind, size_t* begin, size_t* end) {
    skipSpace();
    *begin = pos_;
    if (pos_ < text_.size()) *kind = kindAt(text_[pos_]);
    std::vector<bool> in_object;  // the open containers, innermost last
    for (;;) {
      // A value starts here.
      if (pos_ >= text_.size()) return fail(error("the text ends where a value should start"));
      const char c = text_[pos_];
      if (c == '{' || c == '[') {
        if (in_object.size() + 1 > max_nesting_) {
          return fail(invalidArgument(
              fmt::format("the JSON is nested deeper than the limit of {} levels", max_nesting_)));
        }
        in_object.push_back(c == '{');
        ++pos_;
        skipSpace();
        const char close = c == '{' ? '}' : ']';
        if (pos_ < text_.size() && text_[pos_] == close) {
          in_object.pop_back();
          ++pos_;
        } else if (c == '{') {
          PURSER_TRY(memberKey());
          continue;
        } else {
          continue;
        }
      } else if (c == '"') {
        PURSER_TRY(string());
      } else if (c == '-' || isDigit(c)) {
        PURSER_TRY(number());
      } else if (c == 't') {
        PURSER_TRY(literal("true"));
      } else if (c == 'f') {
        PURSER_TRY(literal("false"));
      } else if (c == 'n') {
        PURSER_TRY(literal("null"));
      } else {
        return fail(error("a value cannot start with this character"));
      }
      // After a value: the next member or element, or the end of containers.
      for (;;) {
        skipSpace();
        if (in_object.empty()) {
          *end = pos_;
          while (*end > *begin && isSpace(text_[*end - 1])) --*end;
          if (pos_ != text_.size()) return fail(error("more text follows the value"));
          return JsonView();
        }
        if (pos_ >= text_.size()) return fail(error("the text ends inside an object or array"));
        const char n = text_[pos_];
        if (n == ',') {
          ++pos_;
          skipSpace();
          if (in_object.back()) PURSER_TRY(memberKey());
          break;
        }
        if (n == (in_object.back() ? '}' : ']')) {
          in_object.pop_back();
          ++pos_;
          continue;
        }
        return fail(error(in_object.back() ? "expected ',' or '}' after an object member"
                                           : "expected ',' or ']' after an array element"));
      }
    }
  }

  static JsonKind kindAt(char c) {
    switch (c) {
      case '{':
        return JsonKind::kObject;
      case '[':
        return JsonKind::kArray;
      case '"':
        return JsonKind::kString;
      case 't':
        return JsonKind::kTrue;
      case 'f':
        return JsonKind::kFalse;
      case 'n':
        return JsonKind::kNull;
      default:
        return JsonKind::kNumber;
    }
  }

 private:
  Error error(std::string_view what) const {
    return invalidArgument(fmt::format("not valid JSON at byte {}: {}", pos_ + 1, what));
  }

  void skipSpace() {
    while (pos_ < text_.size() && isSpace(text_[pos_])) ++pos_;
  }

  // A member's key and its colon; leaves pos_ at the start of the value.
  Result<void> memberKey() {
    if (pos_ >= text_.size() || text_[pos_] != '"') {
      return fail(error("an object member must start with a string key"));
    }
    PURSER_TRY(string());
    skipSpace();
    if (pos_ >= text_.size() || text_[pos_] != ':') {
      return fail(error("expected ':' after an object key"));
    }
    ++pos_;
    skipSpace();
    return {};
  }

  Result<void> string() {
    ++pos_;  // the opening quote
    for (;;) {
      if (pos_ >= text_.size()) return fail(error("the text ends inside a string"));
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return {};
      }
      if (c == '\\') {
        if (pos_ + 1 >= text_.size()) return fail(error("the text ends inside a string"));
        const char e = text_[pos_ + 1];
        if (e == 'u') {
          const int32_t unit = codeUnitAt(text_, pos_ + 2);
          if (unit < 0) return fail(error("\\u must be followed by four hex digits"));
          pos_ += 6;
          if (unit >= 0xDC00 && unit <= 0xDFFF) {
            return fail(error("a low surrogate \\u escape without a high one before it"));
          }
          if (unit >= 0xD800 && unit <= 0xDBFF) {
            const int32_t low =
                pos_ + 1 < text_.size() && text_[pos_] == '\\' && text_[pos_ + 1] == 'u'
                    ? codeUnitAt(text_, pos_ + 2)
                    : -1;
            if (low < 0xDC00 || low > 0xDFFF) {
              return fail(error("a high surrogate \\u escape must be followed by a low one"));
            }
            pos_ += 6;
          }
          continue;
        }
        if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' &&
            e != 't') {
          return fail(error("an invalid escape in a string"));
        }
        pos_ += 2;
        continue;
      }
      if (c < 0x20) return fail(error("a control character must be escaped in a string"));
      if (c < 0x80) {
        ++pos_;
        continue;
      }
      const size_t n = utf8SequenceAt(text_, pos_);
      if (n == 0) {
        return fail(invalidArgument(
            fmt::format("not valid JSON at byte {}: invalid UTF-8 in a string", pos_ + 1)));
      }
      pos_ += n;
    }
  }

  Result<void> number() {
    const size_t begin = pos_;
    PURSER_TRY(numberGrammar());
    // A number that is not a whole one within 64 bits is read as a double by parsers, and one
    // past a double's range is refused (as parseJson() refuses it), not read as infinity.
    const std::string_view token = text_.substr(begin, pos_ - begin);
    const size_t digits = token.size() - (token[0] == '-' ? 1 : 0);
    if (token.find_first_of(".eE") != std::string_view::npos || digits > 19) {
      const std::string copy(token);
      if (std::isinf(std::strtod(copy.c_str(), nullptr))) {
        return fail(invalidArgument(
            fmt::format("not valid JSON at byte {}: the number {} is too large", begin + 1,
                        copy.size() > 40 ? copy.substr(0, 40) + "..." : copy)));
      }
    }
    return {};
  }

  Result<void> numberGrammar() {
    if (text_[pos_] == '-') ++pos_;
    if (pos_ >= text_.size() || !isDigit(text_[pos_])) return fail(error("a number needs digits"));
    if (text_[pos_] == '0') {
      ++pos_;
    } else {
      while (pos_ < text_.size() && isDigit(text_[pos_])) ++pos_;
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (pos_ >= text_.size() || !isDigit(text_[pos_])) {
        return fail(error("a fraction needs digits after the point"));
      }
      while (pos_ < text_.size() && isDigit(text_[pos_])) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (pos_ >= text_.size() || !isDigit(text_[pos_])) {
        return fail(error("an exponent needs digits"));
      }
      while (pos_ < text_.size() && isDigit(text_[pos_])) ++pos_;
    }
    return {};
  }

  Result<void> literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return fail(error("an unknown literal"));
    pos_ += word.size();
    return {};
  }

  std::string_view text_;
  size_t max_nesting_;
  size_t pos_ = 0;
};

// On validated text: the end of the value that starts at `pos`.
size_t skipValue(std::string_view text, size_t pos) {
  const auto skipString = [&](size_t p) {
    ++p;
    while (text[p] != '"') p += text[p] == '\\' ? 2 : 1;
    return p + 1;
  };
  const char c = text[pos];
  if (c == '"') return skipString(pos);
  if (c == '{' || c == '[') {
    size_t depth = 0;
    size_t p = pos;
    for (;;) {
      const char d = text[p];
      if (d == '"') {
        p = skipString(p);
        continue;
      }
      if (d == '{' || d == '[') ++depth;
      if (d == '}' || d == ']') {
        if (--depth == 0) return p + 1;
      }
      ++p;
    }
  }
  size_t p = pos;
  while (p < text.size() && text[p] != ',' && text[p] != '}' && text[p] != ']' &&
         !isSpace(text[p])) {
    ++p;
  }
  return p;
}

size_t skipSpaceAt(std::string_view text, size_t p) {
  while (p < text.size() && isSpace(text[p])) ++p;
  return p;
}

// Decodes the inside of a validated string (between its quotes).
std::string decode(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size();) {
    if (raw[i] != '\\') {
      const size_t next = raw.find('\\', i);
      const size_t stop = next == std::string_view::npos ? raw.size() : next;
      out.append(raw.data() + i, stop - i);
      i = stop;
      continue;
    }
    const char e = raw[i + 1];
    switch (e) {
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t cp = static_cast<uint32_t>(codeUnitAt(raw, i + 2));
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          const auto low = static_cast<uint32_t>(codeUnitAt(raw, i + 8));
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          i += 6;
        }
        appendUtf8(out, cp);
        i += 6;
        continue;
      }
      default:
        out += e;  // " \ /
        break;
    }
    i += 2;
  }
  return out;
}

}  // namespace

JsonView viewAt(std::string_view text, size_t* pos) {
  const size_t begin = *pos;
  *pos = skipValue(text, begin);
  return JsonView(Scanner::kindAt(text[begin]), text.substr(begin, *pos - begin));
}

std::vector<std::pair<std::string_view, JsonView>> JsonView::members() const {
  std::vector<std::pair<std::string_view, JsonView>> out;
  if (kind_ != JsonKind::kObject) return out;
  size_t p = skipSpaceAt(text_, 1);
  while (text_[p] != '}') {
    const size_t key_end = skipValue(text_, p);
    const std::string_view key = text_.substr(p + 1, key_end - p - 2);
    p = skipSpaceAt(text_, key_end) + 1;  // past the colon
    p = skipSpaceAt(text_, p);
    out.emplace_back(key, viewAt(text_, &p));
    p = skipSpaceAt(text_, p);
    if (text_[p] == ',') p = skipSpaceAt(text_, p + 1);
  }
  return out;
}

std::string decodeJsonKey(std::string_view raw_key) { return decode(raw_key); }

bool jsonKeyIs(std::string_view raw_key, std::string_view key) {
  if (raw_key.find('\\') == std::string_view::npos) return raw_key == key;
  return decode(raw_key) == key;
}

std::optional<JsonView> JsonView::get(std::string_view key) const {
  std::optional<JsonView> found;
  if (kind_ != JsonKind::kObject) return found;
  for (const auto& [k, v] : members()) {
    if (jsonKeyIs(k, key)) found = v;
  }
  return found;
}

size_t JsonView::count(std::string_view key) const {
  size_t n = 0;
  if (kind_ != JsonKind::kObject) return n;
  for (const auto& [k, v] : members()) {
    if (jsonKeyIs(k, key)) ++n;
  }
  return n;
}

std::optional<JsonView> JsonView::at(size_t index) const {
  if (kind_ != JsonKind::kArray) return std::nullopt;
  size_t p = skipSpaceAt(text_, 1);
  for (size_t i = 0; text_[p] != ']'; ++i) {
    JsonView v = viewAt(text_, &p);
    if (i == index) return v;
    p = skipSpaceAt(text_, p);
    if (text_[p] == ',') p = skipSpaceAt(text_, p + 1);
  }
  return std::nullopt;
}

std::vector<JsonView> JsonView::elements() const {
  std::vector<JsonView> out;
  if (kind_ != JsonKind::kArray) return out;
  size_t p = skipSpaceAt(text_, 1);
  while (text_[p] != ']') {
    out.push_back(viewAt(text_, &p));
    p = skipSpaceAt(text_, p);
    if (text_[p] == ',') p = skipSpaceAt(text_, p + 1);
  }
  return out;
}

bool JsonView::empty() const {
  if (kind_ != JsonKind::kObject && kind_ != JsonKind::kArray) return false;
  const size_t p = skipSpaceAt(text_, 1);
  return text_[p] == '}' || text_[p] == ']';
}

std::optional<std::string> JsonView::string() const {
  if (kind_ != JsonKind::kString) return std::nullopt;
  return decode(text_.substr(1, text_.size() - 2));
}

std::optional<int64_t> JsonView::integer() const {
  if (kind_ != JsonKind::kNumber) return std::nullopt;
  if (text_.find_first_of(".eE") != std::string_view::npos) return std::nullopt;
  const bool negative = text_[0] == '-';
  // Accumulated as a negative number, whose range is the larger.
  int64_t v = 0;
  for (size_t i = negative ? 1 : 0; i < text_.size(); ++i) {
    const int d = text_[i] - '0';
    if (v < (INT64_MIN + d) / 10) return std::nullopt;
    v = v * 10 - d;
  }
  if (negative) return v;
  if (v == INT64_MIN) return std::nullopt;
  return -v;
}

std::optional<bool> JsonView::boolean() const {
  if (kind_ == JsonKind::kTrue) return true;
  if (kind_ == JsonKind::kFalse) return false;
  return std::nullopt;
}

Result<JsonView> scanJson(std::string_view text, size_t max_nesting) {
  JsonKind kind = JsonKind::kNull;
  size_t begin = 0, end = 0;
  Scanner scanner(text, max_nesting);
  PURSER_TRY(scanner.run(&kind, &begin, &end));
  return JsonView(kind, text.substr(begin, end - begin));
}

size_t JsonSplicer::offsetOf(std::string_view part) const {
  assert(part.data() >= source_.data() &&
         part.data() + part.size() <= source_.data() + source_.size());
  return static_cast<size_t>(part.data() - source_.data());
}

void JsonSplicer::replace(const JsonView& value, std::string json_text) {
  const size_t begin = offsetOf(value.text());
  edits_.push_back({begin, begin + value.text().size(), std::move(json_text)});
}

void JsonSplicer::prepend(const JsonView& object, std::string_view key, std::string json_text) {
  const size_t at = offsetOf(object.text()) + 1;
  std::string member = writeJson(Json(key));
  member += ':';
  member += json_text;
  if (!object.empty()) member += ',';
  edits_.push_back({at, at, std::move(member)});
}

std::string JsonSplicer::build() const {
  std::vector<const Edit*> order;
  order.reserve(edits_.size());
  size_t added = 0;
  for (const Edit& e : edits_) {
    order.push_back(&e);
    added += e.text.size();
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const Edit* a, const Edit* b) { return a->begin < b->begin; });
  std::string out;
  out.reserve(source_.size() + added);
  size_t at = 0;
  for (const Edit* e : order) {
    assert(e->begin >= at);
    out.append(source_.data() + at, e->begin - at);
    out += e->text;
    at = e->end;
  }
  out.append(source_.data() + at, source_.size() - at);
  return out;
}

}  // namespace purser
