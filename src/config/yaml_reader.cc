#include "config/yaml_reader.h"

#include <fmt/format.h>
#include <yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "common/duration.h"
#include "common/json.h"
#include "common/quantity.h"

namespace purser::config {

namespace {

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      return fmt::format("\"{}\"", n.Scalar());
    default:
      return "an undefined value";
  }
}

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string closestMatch(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& c : candidates) {
    const size_t d = editDistance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  // A typo is at most a couple of edits, and less than half the word.
  if (best_distance <= 2 && best_distance * 2 < std::max<size_t>(word.size(), 2)) return best;
  return {};
}

namespace {

// The 1-based line and column of byte `offset` of `text`.
std::pair<int, int> lineAndColumn(std::string_view text, size_t offset) {
  int line = 1, column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// Checks the shape of what was loaded without recursion: nesting within `max_nesting`, and at most
// `budget` nodes visited (aliases share nodes, so a small text can stand for a huge tree).
Result<void> checkShape(const YAML::Node& root, const std::string& file, size_t max_nesting,
                        size_t& budget) {
  std::vector<std::pair<YAML::Node, size_t>> stack;
  stack.emplace_back(root, 0);
  while (!stack.empty()) {
    auto [node, depth] = std::move(stack.back());
    stack.pop_back();
    if (budget == 0) {
      return fail(
          invalidArgument(
              "the YAML expands to too many nodes (aliases repeat more than the text holds)")
              .at(file, 0, 0));
    }
    --budget;
    if (node.IsScalar() && !isValidUtf8(node.Scalar())) {
      // The text was UTF-8, but an escape ("\udc00") decodes to something that is not.
      const YAML::Mark at = node.Mark();
      return fail(invalidArgument("a YAML string is not valid UTF-8 once its escapes are read")
                      .at(file, at.line + 1, at.column + 1));
    }
    if (!node.IsSequence() && !node.IsMap()) continue;
    if (depth + 1 > max_nesting) {
      const YAML::Mark at = node.Mark();
      return fail(invalidArgument(fmt::format("the YAML is nested deeper than the limit of {} "
                                              "levels",
                                              max_nesting))
                      .at(file, at.line + 1, at.column + 1));
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (node.IsMap()) {
        stack.emplace_back(it->first, depth + 1);
        stack.emplace_back(it->second, depth + 1);
      } else {
        stack.emplace_back(*it, depth + 1);
      }
    }
  }
  return {};
}

// The most aliases (*name) a text may use; each can stand for a whole subtree.
constexpr size_t kMaxAliases = 10'000;

// Reads the text with libyaml before yaml-cpp builds anything from it. libyaml is a small state
// machine without recursion, fuzzed for years; yaml-cpp's parser has hung, growing without
// bound, on malformed text as short as ",\nb". So text libyaml refuses is refused with its line
// and column, and nesting and aliases are counted on the way, before any node exists.
Result<void> screen(std::string_view text, const std::string& file, size_t max_nesting) {
  yaml_parser_t parser;
  if (yaml_parser_initialize(&parser) == 0) {
    return fail(Error(ErrorCode::kResourceExhausted, "cannot read YAML: out of memory"));
  }
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING);
  size_t depth = 0, aliases = 0;
  Result<void> out;
  for (bool done = false; !done;) {
    yaml_event_t event;
    if (yaml_parser_parse(&parser, &event) == 0) {
      const std::string problem = parser.problem != nullptr ? parser.problem : "malformed";
      const std::string context = parser.context != nullptr ? parser.context : "";
      // Where it went wrong, from the byte offset (libyaml's own line count runs past the end
      // of a text without a final newline).
      const auto [line, column] =
          lineAndColumn(text, std::min<size_t>(parser.problem_mark.index, text.size()));
      out = fail(
          invalidArgument(toValidUtf8(fmt::format("invalid YAML: {}{}", problem,
                                                  context.empty() ? "" : " (" + context + ")")))
              .at(file, line, column));
      break;
    }
    const yaml_mark_t at = event.start_mark;
    switch (event.type) {
      case YAML_SEQUENCE_START_EVENT:
      case YAML_MAPPING_START_EVENT:
        if (++depth > max_nesting) {
          out = fail(invalidArgument(fmt::format("the YAML is nested deeper than the limit of {} "
                                                 "levels",
                                                 max_nesting))
                         .at(file, static_cast<int>(at.line) + 1, static_cast<int>(at.column) + 1));
          done = true;
        }
        break;
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT:
        if (depth > 0) --depth;
        break;
      case YAML_ALIAS_EVENT:
        if (++aliases > kMaxAliases) {
          out = fail(invalidArgument(fmt::format("the YAML uses more than {} aliases", kMaxAliases))
                         .at(file, static_cast<int>(at.line) + 1, static_cast<int>(at.column) + 1));
          done = true;
        }
        break;
      case YAML_STREAM_END_EVENT:
        done = true;
        break;
      default:
        break;
    }
    yaml_event_delete(&event);
  }
  yaml_parser_delete(&parser);
  return out;
}

template <typename Load>
auto loadChecked(std::string_view text, const std::string& file, size_t max_nesting, Load load)
    -> Result<decltype(load(std::string()))> {
  if (const size_t bad = invalidUtf8At(text); bad != std::string_view::npos) {
    const auto [line, column] = lineAndColumn(text, bad);
    return fail(invalidArgument("the YAML is not valid UTF-8 text").at(file, line, column));
  }
  PURSER_TRY(screen(text, file, max_nesting));
  try {
    return load(std::string(text));
  } catch (const YAML::ParserException& e) {
    // Also yaml-cpp's own recursion guard (DeepRecursion).
    return fail(invalidArgument(fmt::format("invalid YAML: {}", toValidUtf8(e.msg)))
                    .at(file, e.mark.line + 1, e.mark.column + 1));
  } catch (const YAML::Exception& e) {
    return fail(
        invalidArgument(fmt::format("invalid YAML: {}", toValidUtf8(e.msg))).at(file, 0, 0));
  }
}

// Nodes a document may expand to: generous for any real file, far below a billion laughs.
size_t nodeBudget(std::string_view text) { return 1000 + 16 * text.size(); }

}  // namespace

Result<YAML::Node> parseYaml(std::string_view text, const std::string& file, size_t max_nesting) {
  YAML::Node doc = PURSER_TRY_VALUE(
      loadChecked(text, file, max_nesting, [](const std::string& t) { return YAML::Load(t); }));
  size_t budget = nodeBudget(text);
  PURSER_TRY(checkShape(doc, file, max_nesting, budget));
  return doc;
}

Result<std::vector<YAML::Node>> parseYamlStream(std::string_view text, const std::string& file,
                                                size_t max_nesting) {
  std::vector<YAML::Node> docs = PURSER_TRY_VALUE(
      loadChecked(text, file, max_nesting, [](const std::string& t) { return YAML::LoadAll(t); }));
  size_t budget = nodeBudget(text);
  for (const auto& doc : docs) PURSER_TRY(checkShape(doc, file, max_nesting, budget));
  return docs;
}

void YamlReader::addError(const YAML::Mark& at, const std::string& path, std::string message) {
  Error e = invalidArgument(std::move(message));
  e.field = path;
  const bool known = at.line >= 0 && !at.is_null();
  errors_.push_back(e.at(file_, known ? at.line + 1 : 0, known ? at.column + 1 : 0));
}

void YamlReader::addError(const YAML::Node& at, const std::string& path, std::string message) {
  addError(at.IsDefined() ? at.Mark() : YAML::Mark::null_mark(), path, std::move(message));
}

Error YamlReader::error() const {
  if (errors_.empty()) return internalError("no error");
  if (errors_.size() == 1) return errors_.front();
  std::string message = fmt::format("{} errors:", errors_.size());
  for (const auto& e : errors_) message += "\n  " + e.toString();
  return invalidArgument(std::move(message));
}

YamlReader::Map YamlReader::map(const YAML::Node& node, std::string path) {
  if (!node.IsDefined() || node.IsNull()) {
    return Map(*this, YAML::Node(YAML::NodeType::Map), std::move(path), true);
  }
  if (!node.IsMap()) {
    addError(node, path, fmt::format("expected a mapping of fields, got {}", describe(node)));
    return Map(*this, YAML::Node(YAML::NodeType::Map), std::move(path), false);
  }
  return Map(*this, node, std::move(path), true);
}

std::optional<std::string> YamlReader::asString(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) {
    addError(n, path, fmt::format("expected a string, got {}", describe(n)));
    return std::nullopt;
  }
  return n.Scalar();
}

std::optional<bool> YamlReader::asBool(const YAML::Node& n, const std::string& path) {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    if (s == "true") return true;
    if (s == "false") return false;
  }
  addError(n, path, fmt::format("expected true or false, got {}", describe(n)));
  return std::nullopt;
}

std::optional<int64_t> YamlReader::asInt(const YAML::Node& n, const std::string& path, int64_t min,
                                         int64_t max) {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    int64_t v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && p == s.data() + s.size()) {
      if (v < min || v > max) {
        addError(n, path,
                 fmt::format("expected a whole number from {} to {}, got {}", min, max, v));
        return std::nullopt;
      }
      return v;
    }
  }
  addError(n, path, fmt::format("expected a whole number, got {}", describe(n)));
  return std::nullopt;
}

std::optional<double> YamlReader::asNumber(const YAML::Node& n, const std::string& path, double min,
                                           double max) {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    double v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && p == s.data() + s.size() && std::isfinite(v)) {
      if (v < min || v > max) {
        addError(n, path,
                 fmt::format("expected a number from {:g} to {:g}, got {:g}", min, max, v));
        return std::nullopt;
      }
      return v;
    }
  }
  addError(n, path, fmt::format("expected a number, got {}", describe(n)));
  return std::nullopt;
}

std::optional<Duration> YamlReader::asDuration(const YAML::Node& n, const std::string& path) {
  if (n.IsScalar()) {
    auto d = parseDuration(n.Scalar());
    if (d) return *d;
  }
  addError(
      n, path,
      fmt::format("expected a duration such as \"30s\", \"250ms\" or \"5m\", got {}", describe(n)));
  return std::nullopt;
}

std::optional<Money> YamlReader::asMoney(const YAML::Node& n, const std::string& path) {
  if (n.IsScalar()) {
    // A plain (unquoted) YAML scalar is text too; what matters is that it reads exactly.
    auto m = Money::parse(n.Scalar());
    if (m) return *m;
    addError(n, path, m.error().message);
    return std::nullopt;
  }
  addError(n, path, fmt::format("expected an amount such as \"2.50\", got {}", describe(n)));
  return std::nullopt;
}

std::optional<uint64_t> YamlReader::asBytes(const YAML::Node& n, const std::string& path,
                                            uint64_t min, uint64_t max) {
  if (n.IsScalar()) {
    auto q = Quantity::parse(n.Scalar());
    if (q && q->isInteger() && !q->isNegative()) {
      const auto v = q->value();
      if (v && static_cast<uint64_t>(*v) >= min && static_cast<uint64_t>(*v) <= max) {
        return static_cast<uint64_t>(*v);
      }
      addError(n, path,
               fmt::format("expected a size from {} to {} bytes, got {}", min, max, describe(n)));
      return std::nullopt;
    }
  }
  addError(
      n, path,
      fmt::format("expected a size in bytes such as 1048576 or \"16Mi\", got {}", describe(n)));
  return std::nullopt;
}

bool YamlReader::Map::has(const std::string& key) const { return valid_ && node_[key].IsDefined(); }

bool YamlReader::Map::present(const std::string& key) {
  read_.insert(key);
  return has(key);
}

YAML::Node YamlReader::Map::get(const std::string& key) {
  read_.insert(key);
  if (!valid_) return YAML::Node();
  return node_[key];
}

void YamlReader::Map::required(const std::string& key, std::string& out) {
  if (!present(key)) {
    if (valid_) reader_->addError(node_, child(key), "required field is missing");
    return;
  }
  if (auto v = reader_->asString(get(key), child(key))) out = *v;
}

void YamlReader::Map::optional(const std::string& key, std::string& out) {
  if (!present(key)) return;
  if (auto v = reader_->asString(get(key), child(key))) out = *v;
}

void YamlReader::Map::optional(const std::string& key, bool& out) {
  if (!present(key)) return;
  if (auto v = reader_->asBool(get(key), child(key))) out = *v;
}

void YamlReader::Map::optional(const std::string& key, int64_t& out, int64_t min, int64_t max) {
  if (!present(key)) return;
  if (auto v = reader_->asInt(get(key), child(key), min, max)) out = *v;
}

void YamlReader::Map::optional(const std::string& key, double& out, double min, double max) {
  if (!present(key)) return;
  if (auto v = reader_->asNumber(get(key), child(key), min, max)) out = *v;
}

void YamlReader::Map::optional(const std::string& key, size_t& out, int64_t min, int64_t max) {
  if (!present(key)) return;
  if (auto v = reader_->asInt(get(key), child(key), min, max)) out = static_cast<size_t>(*v);
}

void YamlReader::Map::optional(const std::string& key, Duration& out, Duration min) {
  if (!present(key)) return;
  const YAML::Node n = get(key);
  if (auto v = reader_->asDuration(n, child(key))) {
    if (*v < min) {
      reader_->addError(n, child(key), fmt::format("must be at least {}", formatDuration(min)));
      return;
    }
    out = *v;
  }
}

void YamlReader::Map::optionalBytes(const std::string& key, size_t& out, uint64_t min,
                                    uint64_t max) {
  if (!present(key)) return;
  if (auto v = reader_->asBytes(get(key), child(key), min, max)) out = static_cast<size_t>(*v);
}

void YamlReader::Map::requiredMoney(const std::string& key, Money& out) {
  if (!present(key)) {
    if (valid_) reader_->addError(node_, child(key), "required field is missing");
    return;
  }
  if (auto v = reader_->asMoney(get(key), child(key))) out = *v;
}

void YamlReader::Map::optionalMoney(const std::string& key, Money& out) {
  if (!present(key)) return;
  if (auto v = reader_->asMoney(get(key), child(key))) out = *v;
}

void YamlReader::Map::optionalChoice(const std::string& key, std::string& out,
                                     const std::vector<std::string>& choices) {
  if (!present(key)) return;
  const YAML::Node n = get(key);
  auto v = reader_->asString(n, child(key));
  if (!v) return;
  if (std::find(choices.begin(), choices.end(), *v) == choices.end()) {
    reader_->addError(n, child(key),
                      fmt::format("expected one of {}, got \"{}\"", fmt::join(choices, ", "), *v));
    return;
  }
  out = *v;
}

void YamlReader::Map::requiredChoice(const std::string& key, std::string& out,
                                     const std::vector<std::string>& choices) {
  if (!has(key)) {
    present(key);
    if (valid_) reader_->addError(node_, child(key), "required field is missing");
    return;
  }
  optionalChoice(key, out, choices);
}

void YamlReader::Map::optionalStrings(const std::string& key, std::vector<std::string>& out) {
  if (!present(key)) return;
  const YAML::Node n = get(key);
  if (!n.IsSequence()) {
    reader_->addError(n, child(key), "expected a list of strings");
    return;
  }
  out.clear();
  for (size_t i = 0; i < n.size(); ++i) {
    if (auto v = reader_->asString(n[i], fmt::format("{}[{}]", child(key), i))) out.push_back(*v);
  }
}

void YamlReader::Map::finish() {
  if (!valid_) return;
  std::vector<std::string> known(read_.begin(), read_.end());
  // A field given twice would be read once, the other silently ignored.
  std::map<std::string, int> first_line;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string("?");
    const auto [first, fresh] = first_line.emplace(key, it->first.Mark().line + 1);
    if (!fresh) {
      reader_->addError(
          it->first, child(key),
          fmt::format("given twice (first on line {}); give a field once", first->second));
      continue;
    }
    if (read_.contains(key)) continue;
    const std::string hint = closestMatch(key, known);
    reader_->addError(
        it->first, child(key),
        hint.empty() ? fmt::format("unknown field; expected one of: {}", fmt::join(known, ", "))
                     : fmt::format("unknown field; did you mean \"{}\"?", hint));
  }
}

}  // namespace purser::config
