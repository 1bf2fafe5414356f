#include "observe/prom_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <expected>
#include <limits>
#include <system_error>
#include <unordered_map>

#include "common/json.h"

namespace purser::observe {

namespace {

bool isBlank(char c) { return c == ' ' || c == '\t'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool isLabelStart(char c) { return isAlpha(c) || c == '_'; }
bool isLabelChar(char c) { return isLabelStart(c) || isDigit(c); }
bool isMetricStart(char c) { return isLabelStart(c) || c == ':'; }
bool isMetricChar(char c) { return isLabelChar(c) || c == ':'; }

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// Input quoted in an error message: short, and valid UTF-8 whatever the input was, so a message
// can always be logged and written as JSON.
std::string quoted(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out = toValidUtf8(s.substr(0, kMax));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = '?';
  }
  return fmt::format("\"{}{}\"", out, s.size() > kMax ? "..." : "");
}

enum class FloatFault { kNotANumber, kOutOfRange };

// Whether a decimal number whose from_chars() overflowed or underflowed is large (>= 1 in
// magnitude): Go's ParseFloat refuses the large ones and reads the tiny ones as zero.
bool decimalIsLarge(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  int64_t magnitude = 0;  // decimal exponent of the first significant digit, before `e`
  bool found = false, in_fraction = false;
  int64_t int_digits = 0, fraction_zeros = 0;
  for (; i < s.size() && (isDigit(s[i]) || s[i] == '.'); ++i) {
    if (s[i] == '.') {
      in_fraction = true;
      continue;
    }
    if (found) {
      if (!in_fraction) ++int_digits;
      continue;
    }
    if (s[i] != '0') {
      found = true;
      if (!in_fraction) int_digits = 1;
    } else if (in_fraction) {
      ++fraction_zeros;
    }
  }
  if (!found) return false;
  magnitude = int_digits > 0 ? int_digits - 1 : -(fraction_zeros + 1);
  int64_t exponent = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool negative = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
    for (; i < s.size() && isDigit(s[i]); ++i) {
      // Saturates: past a million the answer cannot change.
      exponent = std::min<int64_t>(exponent * 10 + (s[i] - '0'), 1000000000);
    }
    if (negative) exponent = -exponent;
  }
  return magnitude + exponent >= 0;
}

// A float as Go's strconv.ParseFloat reads it, hex forms and underscores excepted.
std::expected<double, FloatFault> parseGoFloat(std::string_view s) {
  std::string_view body = s;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body.empty()) return std::unexpected(FloatFault::kNotANumber);
  // from_chars() would take "nan(...)", "-nan" and "+-1"; Go takes none of them.
  if (equalsIgnoreCase(body, "inf") || equalsIgnoreCase(body, "infinity")) {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  if (equalsIgnoreCase(body, "nan")) {
    if (body.size() != s.size()) return std::unexpected(FloatFault::kNotANumber);
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (!isDigit(body[0]) && body[0] != '.') return std::unexpected(FloatFault::kNotANumber);
  double v = 0;
  const auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
  if (end != body.data() + body.size()) return std::unexpected(FloatFault::kNotANumber);
  if (ec == std::errc::result_out_of_range) {
    if (decimalIsLarge(body)) return std::unexpected(FloatFault::kOutOfRange);
    v = 0;
  } else if (ec != std::errc()) {
    return std::unexpected(FloatFault::kNotANumber);
  }
  return negative ? -v : v;
}

// The suffixes a family's samples add to its name, and the types that write them.
struct Suffix {
  std::string_view text;
  std::array<MetricType, 3> types;
  size_t type_count;
};
constexpr std::array<Suffix, 8> kSuffixes = {{
    {"_total", {MetricType::kCounter}, 1},
    {"_created", {MetricType::kCounter, MetricType::kHistogram, MetricType::kSummary}, 3},
    {"_bucket", {MetricType::kHistogram, MetricType::kGaugeHistogram}, 2},
    {"_count", {MetricType::kHistogram, MetricType::kSummary}, 2},
    {"_sum", {MetricType::kHistogram, MetricType::kSummary}, 2},
    {"_gcount", {MetricType::kGaugeHistogram}, 1},
    {"_gsum", {MetricType::kGaugeHistogram}, 1},
    {"_info", {MetricType::kInfo}, 1},
}};

std::optional<MetricType> metricTypeNamed(std::string_view s) {
  static constexpr std::pair<std::string_view, MetricType> kTypes[] = {
      {"counter", MetricType::kCounter},
      {"gauge", MetricType::kGauge},
      {"histogram", MetricType::kHistogram},
      {"summary", MetricType::kSummary},
      {"untyped", MetricType::kUnknown},
      {"unknown", MetricType::kUnknown},
      {"gaugehistogram", MetricType::kGaugeHistogram},
      {"info", MetricType::kInfo},
      {"stateset", MetricType::kStateSet},
  };
  for (const auto& [name, type] : kTypes) {
    if (name == s) return type;
  }
  return std::nullopt;
}

enum class TimestampUnit { kMillis, kSeconds, kByDigits };

// One pass over the lines. Each line is read with a cursor (line_, pos_) that never leaves it, so
// no token can run past a line ending and the whole parse is linear in the text.
class TextParser {
 public:
  TextParser(std::string_view text, const ParseLimits& limits, TextFormat format)
      : text_(text), limits_(limits), format_(format) {}

  Result<Exposition> run() {
    // Lines are counted in an int (Error::line); no text may have more of them.
    const size_t max_bytes =
        std::min<size_t>(limits_.max_bytes, std::numeric_limits<int>::max() - 1);
    if (text_.size() > max_bytes) {
      return fail(invalidArgument(
          fmt::format("the text is {} bytes, more than the limit of {}", text_.size(), max_bytes)));
    }
    unit_ = format_ == TextFormat::kPrometheus    ? TimestampUnit::kMillis
            : format_ == TextFormat::kOpenMetrics ? TimestampUnit::kSeconds
            : endsWithEof(text_)                  ? TimestampUnit::kSeconds
                                                  : TimestampUnit::kByDigits;
    size_t at = 0;
    bool saw_eof = false;
    while (at < text_.size()) {
      ++line_no_;
      const size_t nl = text_.find('\n', at);
      const size_t end = nl == std::string_view::npos ? text_.size() : nl;
      line_ = text_.substr(at, end - at);
      at = nl == std::string_view::npos ? text_.size() : nl + 1;
      pos_ = 0;
      if (!line_.empty() && line_.back() == '\r') line_.remove_suffix(1);
      if (line_.size() > limits_.max_line_bytes) {
        return fail(error(fmt::format("the line is {} bytes, longer than the limit of {}",
                                      line_.size(), limits_.max_line_bytes)));
      }
      if (line_ == "# EOF") {
        if (at < text_.size()) {
          ++line_no_;
          return fail(error("text follows # EOF, which must end the exposition"));
        }
        saw_eof = true;
        break;
      }
      skipBlanks();
      if (atEnd()) continue;
      if (line_[pos_] == '#') {
        ++pos_;
        PURSER_TRY(metadataLine());
      } else {
        PURSER_TRY(sampleLine());
      }
    }
    if (format_ == TextFormat::kOpenMetrics && !saw_eof) {
      return fail(error("OpenMetrics text must end with a # EOF line"));
    }
    resolveFamilies();
    return std::move(out_);
  }

 private:
  static bool endsWithEof(std::string_view t) {
    if (t.ends_with('\n')) t.remove_suffix(1);
    if (t.ends_with('\r')) t.remove_suffix(1);
    if (!t.ends_with("# EOF")) return false;
    t.remove_suffix(5);
    return t.empty() || t.back() == '\n';
  }

  Error error(std::string_view what) const {
    const int line = std::max(line_no_, 1);  // an empty text has no line, but would have one
    Error e = invalidArgument(fmt::format("line {}: {}", line, what));
    e.line = line;
    return e;
  }

  // "a label", "an exemplar label".
  static std::string article(std::string_view what) {
    return fmt::format("{} {}", what.starts_with('e') ? "an" : "a", what);
  }

  bool atEnd() const { return pos_ >= line_.size(); }
  void skipBlanks() {
    while (pos_ < line_.size() && isBlank(line_[pos_])) ++pos_;
  }
  // The bytes up to the next blank or the end of the line.
  std::string_view token() {
    const size_t begin = pos_;
    while (pos_ < line_.size() && !isBlank(line_[pos_])) ++pos_;
    return line_.substr(begin, pos_ - begin);
  }

  Result<std::string_view> metricName(std::string_view what) {
    if (atEnd() || !isMetricStart(line_[pos_])) {
      return fail(error(fmt::format("{} must start with a metric name", what)));
    }
    const size_t begin = pos_;
    while (pos_ < line_.size() && isMetricChar(line_[pos_])) ++pos_;
    if (pos_ - begin > limits_.max_name_bytes) {
      return fail(error(fmt::format("the metric name is longer than the limit of {} bytes",
                                    limits_.max_name_bytes)));
    }
    return line_.substr(begin, pos_ - begin);
  }

  // After '#': HELP, TYPE or UNIT of a family, or a comment.
  Result<void> metadataLine() {
    skipBlanks();
    const std::string_view keyword = token();
    if (keyword != "HELP" && keyword != "TYPE" && keyword != "UNIT") return {};  // a comment
    skipBlanks();
    const std::string what = fmt::format("# {}", keyword);
    const std::string_view name = PURSER_TRY_VALUE(metricName(what));
    if (!atEnd() && !isBlank(line_[pos_])) {
      return fail(error(fmt::format("{} names an invalid metric name {}", what,
                                    quoted(line_.substr(pos_ - name.size())))));
    }
    skipBlanks();
    const size_t index = PURSER_TRY_VALUE(familyIndex(name));
    Family& family = out_.families[index];
    Seen& seen = seen_[index];
    if (keyword == "HELP") {
      if (seen.help) return fail(error(fmt::format("a second # HELP for {}", name)));
      seen.help = true;
      family.help = PURSER_TRY_VALUE(helpText(line_.substr(pos_)));
      return {};
    }
    const std::string_view value = token();
    skipBlanks();
    if (!atEnd()) {
      return fail(error(
          fmt::format("unexpected text after {} {}: {}", what, name, quoted(line_.substr(pos_)))));
    }
    if (keyword == "TYPE") {
      if (value.empty()) return fail(error(fmt::format("# TYPE {} names no type", name)));
      if (seen.type) return fail(error(fmt::format("a second # TYPE for {}", name)));
      seen.type = true;
      const auto type = metricTypeNamed(value);
      if (!type) return fail(error(fmt::format("unknown metric type {}", quoted(value))));
      family.type = *type;
      return {};
    }
    if (seen.unit) return fail(error(fmt::format("a second # UNIT for {}", name)));
    seen.unit = true;
    if (value.size() > limits_.max_name_bytes) {
      return fail(error(
          fmt::format("the unit is longer than the limit of {} bytes", limits_.max_name_bytes)));
    }
    if (!std::all_of(value.begin(), value.end(), isMetricChar)) {
      return fail(error(fmt::format("the unit {} is not a metric name", quoted(value))));
    }
    family.unit = std::string(value);
    return {};
  }

  Result<size_t> familyIndex(std::string_view name) {
    const auto it = family_index_.find(std::string(name));
    if (it != family_index_.end()) return it->second;
    if (out_.families.size() >= limits_.max_families) {
      return fail(
          error(fmt::format("more than the limit of {} metric families", limits_.max_families)));
    }
    family_index_.emplace(std::string(name), out_.families.size());
    seen_.emplace_back();
    out_.families.push_back(Family{.name = std::string(name)});
    return out_.families.size() - 1;
  }

  Result<std::string> helpText(std::string_view raw) {
    if (invalidUtf8At(raw) != std::string_view::npos) {
      return fail(error("HELP text is not valid UTF-8"));
    }
    std::string help;
    help.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\\' && i + 1 < raw.size()) {
        const char e = raw[i + 1];
        if (e == '\\' || e == '"' || e == 'n') {
          help += e == 'n' ? '\n' : e;
          ++i;
          continue;
        }
      }
      help += raw[i];
    }
    return help;
  }

  Result<void> sampleLine() {
    if (out_.samples.size() >= limits_.max_samples) {
      return fail(error(fmt::format("more than the limit of {} samples", limits_.max_samples)));
    }
    Sample sample;
    sample.name = std::string(PURSER_TRY_VALUE(metricName("a sample line")));
    skipBlanks();
    if (!atEnd() && line_[pos_] == '{') {
      sample.labels = PURSER_TRY_VALUE(labelSet("label"));
      std::sort(sample.labels.begin(), sample.labels.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      const auto twice =
          std::adjacent_find(sample.labels.begin(), sample.labels.end(),
                             [](const auto& a, const auto& b) { return a.first == b.first; });
      if (twice != sample.labels.end()) {
        return fail(error(fmt::format("label {} is given twice", twice->first)));
      }
      skipBlanks();
    }
    if (atEnd()) return fail(error(fmt::format("the sample {} has no value", sample.name)));
    sample.value = PURSER_TRY_VALUE(number(token(), "sample value"));
    skipBlanks();
    if (!atEnd() && line_[pos_] != '#') {
      sample.timestamp_ms = PURSER_TRY_VALUE(timestamp(token(), unit_));
      skipBlanks();
    }
    if (!atEnd()) {
      if (line_[pos_] != '#') {
        return fail(error(
            fmt::format("unexpected text after the timestamp: {}", quoted(line_.substr(pos_)))));
      }
      ++pos_;
      PURSER_TRY(exemplar());
    }
    out_.samples.push_back(std::move(sample));
    return {};
  }

  // ` # {labels} value [timestamp]`, after the '#': checked, then dropped.
  Result<void> exemplar() {
    skipBlanks();
    if (atEnd() || line_[pos_] != '{') {
      return fail(error("an exemplar after '#' must start with a label set"));
    }
    PURSER_TRY(labelSet("exemplar label"));
    skipBlanks();
    if (atEnd()) return fail(error("the exemplar has no value"));
    PURSER_TRY(number(token(), "exemplar value"));
    skipBlanks();
    if (!atEnd()) {
      // Exemplar timestamps are OpenMetrics seconds whatever the sample timestamps are.
      PURSER_TRY(timestamp(token(), TimestampUnit::kSeconds));
      skipBlanks();
    }
    if (!atEnd()) {
      return fail(
          error(fmt::format("unexpected text after the exemplar: {}", quoted(line_.substr(pos_)))));
    }
    return {};
  }

  // `{name="value",...}` with pos_ at '{'; a trailing comma is allowed.
  Result<Labels> labelSet(std::string_view what) {
    ++pos_;
    Labels labels;
    for (;;) {
      skipBlanks();
      if (atEnd()) return fail(error("the label set has no closing '}'"));
      if (line_[pos_] == '}') {
        ++pos_;
        return labels;
      }
      if (!isLabelStart(line_[pos_])) {
        return fail(error(fmt::format("expected {} name or '}}' at {}", article(what),
                                      quoted(line_.substr(pos_)))));
      }
      if (labels.size() >= limits_.max_labels) {
        return fail(
            error(fmt::format("more than the limit of {} labels in one set", limits_.max_labels)));
      }
      const size_t begin = pos_;
      while (pos_ < line_.size() && isLabelChar(line_[pos_])) ++pos_;
      if (pos_ - begin > limits_.max_name_bytes) {
        return fail(error(fmt::format("the {} name is longer than the limit of {} bytes", what,
                                      limits_.max_name_bytes)));
      }
      std::string name(line_.substr(begin, pos_ - begin));
      skipBlanks();
      if (atEnd() || line_[pos_] != '=') {
        return fail(error(fmt::format("expected '=' after the {} name {}", what, name)));
      }
      ++pos_;
      skipBlanks();
      if (atEnd() || line_[pos_] != '"') {
        return fail(error(fmt::format("the value of {} {} must be in double quotes", what, name)));
      }
      ++pos_;
      std::string value = PURSER_TRY_VALUE(labelValue(what));
      labels.emplace_back(std::move(name), std::move(value));
      skipBlanks();
      if (atEnd()) return fail(error("the label set has no closing '}'"));
      if (line_[pos_] == ',') {
        ++pos_;
      } else if (line_[pos_] != '}') {
        return fail(error(fmt::format("expected ',' or '}}' after the value of {} {}", what,
                                      labels.back().first)));
      }
    }
  }

  // The text after an opening quote, up to and past the closing one.
  Result<std::string> labelValue(std::string_view what) {
    std::string value;
    for (;;) {
      if (atEnd()) return fail(error(fmt::format("{} value has no closing quote", article(what))));
      if (value.size() > limits_.max_label_value_bytes) {
        return fail(error(fmt::format("{} value is longer than the limit of {} bytes",
                                      article(what), limits_.max_label_value_bytes)));
      }
      const char c = line_[pos_];
      if (c == '"') {
        ++pos_;
        return value;
      }
      if (c == '\\') {
        if (pos_ + 1 >= line_.size()) {
          return fail(error(fmt::format("{} value has no closing quote", article(what))));
        }
        const char e = line_[pos_ + 1];
        if (e != '\\' && e != '"' && e != 'n') {
          return fail(
              error(fmt::format("unknown escape {} in {} value (only \\\\, \\\" and "
                                "\\n are allowed)",
                                quoted(line_.substr(pos_, 2)), article(what))));
        }
        value += e == 'n' ? '\n' : e;
        pos_ += 2;
        continue;
      }
      const size_t n = utf8SequenceAt(line_, pos_);
      if (n == 0) return fail(error(fmt::format("{} value is not valid UTF-8", what)));
      value.append(line_.substr(pos_, n));
      pos_ += n;
    }
  }

  Result<double> number(std::string_view text, std::string_view what) {
    const auto v = parseGoFloat(text);
    if (v) return *v;
    if (v.error() == FloatFault::kOutOfRange) {
      return fail(error(fmt::format("{} {} is out of the range of a double", what, quoted(text))));
    }
    return fail(error(fmt::format("{} {} is not a number", what, quoted(text))));
  }

  static bool isInteger(std::string_view t) {
    if (!t.empty() && (t[0] == '+' || t[0] == '-')) t.remove_prefix(1);
    return !t.empty() && std::all_of(t.begin(), t.end(), isDigit);
  }

  Result<int64_t> timestamp(std::string_view text, TimestampUnit unit) {
    const bool integer = isInteger(text);
    const size_t digits = integer ? text.size() - (isDigit(text[0]) ? 0 : 1) : 0;
    if (unit == TimestampUnit::kMillis ||
        (unit == TimestampUnit::kByDigits && integer && digits > 11)) {
      if (!integer) {
        return fail(error(
            fmt::format("timestamp {} is not an integer number of milliseconds", quoted(text))));
      }
      std::string_view t = text;
      if (t[0] == '+') t.remove_prefix(1);
      int64_t ms = 0;
      const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), ms);
      if (ec != std::errc() || end != t.data() + t.size()) {
        return fail(error(fmt::format("timestamp {} is out of range", quoted(text))));
      }
      return ms;
    }
    const auto seconds = parseGoFloat(text);
    if (!seconds) {
      return fail(error(fmt::format("timestamp {} is not a number", quoted(text))));
    }
    if (!std::isfinite(*seconds)) {
      return fail(error(fmt::format("timestamp {} is not finite", quoted(text))));
    }
    if (const auto exact = plainSecondsToMillis(text)) return *exact;
    const double ms = std::trunc(*seconds * 1000);
    // 2^63 is exact in a double; anything at or past it does not fit.
    if (!(std::fabs(ms) < 9223372036854775808.0)) {
      return fail(error(fmt::format("timestamp {} is out of range", quoted(text))));
    }
    return static_cast<int64_t>(ms);
  }

  // Seconds written as [sign]digits[.digits], read exactly (a double would turn 1763632800.123
  // into ...122.99...); nullopt for other forms and for values past int64 milliseconds.
  static std::optional<int64_t> plainSecondsToMillis(std::string_view t) {
    bool negative = false;
    if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
      negative = t[0] == '-';
      t.remove_prefix(1);
    }
    const size_t dot = t.find('.');
    const std::string_view whole = t.substr(0, dot);
    const std::string_view fraction =
        dot == std::string_view::npos ? std::string_view() : t.substr(dot + 1);
    if (!std::all_of(whole.begin(), whole.end(), isDigit) ||
        !std::all_of(fraction.begin(), fraction.end(), isDigit)) {
      return std::nullopt;
    }
    int64_t ms = 0;
    for (const char c : whole) {
      if (__builtin_mul_overflow(ms, 10, &ms) || __builtin_add_overflow(ms, c - '0', &ms)) {
        return std::nullopt;
      }
    }
    int64_t sub = 0;
    for (size_t i = 0; i < 3; ++i) sub = sub * 10 + (i < fraction.size() ? fraction[i] - '0' : 0);
    if (__builtin_mul_overflow(ms, 1000, &ms) || __builtin_add_overflow(ms, sub, &ms)) {
      return std::nullopt;
    }
    return negative ? -ms : ms;
  }

  // Each sample's family: its own name, or its name less a suffix its family's type writes.
  void resolveFamilies() {
    if (out_.families.empty()) return;
    std::unordered_map<std::string_view, size_t> by_name;
    by_name.reserve(out_.families.size());
    for (size_t i = 0; i < out_.families.size(); ++i) by_name.emplace(out_.families[i].name, i);
    for (Sample& s : out_.samples) {
      const std::string_view name = s.name;
      if (const auto it = by_name.find(name); it != by_name.end()) {
        s.family = it->second;
        continue;
      }
      for (const Suffix& suffix : kSuffixes) {
        if (!name.ends_with(suffix.text)) continue;
        const auto it = by_name.find(name.substr(0, name.size() - suffix.text.size()));
        if (it == by_name.end()) continue;
        const MetricType type = out_.families[it->second].type;
        const auto types_end =
            suffix.types.begin() + static_cast<std::ptrdiff_t>(suffix.type_count);
        if (std::find(suffix.types.begin(), types_end, type) != types_end) {
          s.family = it->second;
          break;
        }
      }
    }
  }

  struct Seen {
    bool help = false;
    bool type = false;
    bool unit = false;
  };

  const std::string_view text_;
  const ParseLimits& limits_;
  const TextFormat format_;
  TimestampUnit unit_ = TimestampUnit::kByDigits;
  int line_no_ = 0;
  std::string_view line_;  // the current line, without its line ending
  size_t pos_ = 0;         // the cursor in line_
  Exposition out_;
  std::vector<Seen> seen_;  // parallel to out_.families
  std::unordered_map<std::string, size_t> family_index_;
};

// Go's sort.Search: the first index in [0, n) where `pred` holds, assuming it holds for a suffix.
template <typename Pred>
size_t searchFirst(size_t n, Pred pred) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (!pred(mid)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace

Result<Exposition> parsePrometheusText(std::string_view text, const ParseLimits& limits,
                                       TextFormat format) {
  return TextParser(text, limits, format).run();
}

std::optional<std::string_view> label(const Sample& sample, std::string_view name) {
  const auto it =
      std::lower_bound(sample.labels.begin(), sample.labels.end(), name,
                       [](const auto& pair, std::string_view n) { return pair.first < n; });
  if (it == sample.labels.end() || it->first != name) return std::nullopt;
  return std::string_view(it->second);
}

std::optional<double> parseSampleValue(std::string_view text) {
  const auto v = parseGoFloat(text);
  if (!v) return std::nullopt;
  return *v;
}

std::vector<std::pair<double, double>> histogramBuckets(
    const Exposition& exposition, std::string_view histogram_name,
    const std::vector<std::pair<std::string_view, std::string_view>>& matchers) {
  std::vector<std::pair<double, double>> buckets;
  for (const Sample& s : exposition.samples) {
    if (s.name.size() != histogram_name.size() + 7 || !s.name.starts_with(histogram_name) ||
        !std::string_view(s.name).ends_with("_bucket")) {
      continue;
    }
    const bool matches = std::all_of(matchers.begin(), matchers.end(), [&](const auto& m) {
      const auto v = label(s, m.first);
      return v && *v == m.second;
    });
    if (!matches) continue;
    const auto le = label(s, "le");
    if (!le) continue;
    const auto bound = parseSampleValue(*le);
    if (!bound) continue;
    buckets.emplace_back(*bound, s.value);
  }
  return buckets;
}

double histogramQuantile(double q, std::vector<std::pair<double, double>> buckets) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (std::isnan(q)) return kNaN;
  if (q < 0) return -kInf;
  if (q > 1) return kInf;
  // A NaN bound has no place in a strict weak order; std::sort must never see one.
  std::erase_if(buckets, [](const auto& b) { return std::isnan(b.first); });
  if (buckets.empty()) return kNaN;
  std::sort(buckets.begin(), buckets.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  if (buckets.back().first != kInf) return kNaN;

  // Buckets of equal bounds become one (several series summed by le).
  size_t n = 0;
  for (size_t i = 1; i < buckets.size(); ++i) {
    if (buckets[i].first == buckets[n].first) {
      buckets[n].second += buckets[i].second;
    } else {
      buckets[++n] = buckets[i];
    }
  }
  buckets.resize(n + 1);

  // Sums of rates differ in their last bits; a difference that small is not a decrease.
  double prev = buckets[0].second;
  for (size_t i = 1; i < buckets.size(); ++i) {
    const double cur = buckets[i].second;
    const double delta = std::fabs(cur - prev);
    if (delta == 0) continue;
    if (delta / cur <= 1e-12) {
      buckets[i].second = prev;
    } else {
      prev = cur;
    }
  }
  // Counts are cumulative: a decrease is lifted to the running maximum.
  double max = buckets[0].second;
  for (size_t i = 1; i < buckets.size(); ++i) {
    if (buckets[i].second > max) {
      max = buckets[i].second;
    } else if (buckets[i].second < max) {
      buckets[i].second = max;
    }
  }

  if (buckets.size() < 2) return kNaN;
  const double observations = buckets.back().second;
  if (observations == 0) return kNaN;
  double rank = q * observations;
  const size_t b =
      searchFirst(buckets.size() - 1, [&](size_t i) { return buckets[i].second >= rank; });
  if (b == buckets.size() - 1) return buckets[buckets.size() - 2].first;
  if (b == 0 && buckets[0].first <= 0) return buckets[0].first;
  double start = 0;
  const double end = buckets[b].first;
  double count = buckets[b].second;
  if (b > 0) {
    start = buckets[b - 1].first;
    count -= buckets[b - 1].second;
    rank -= buckets[b - 1].second;
  }
  return start + (end - start) * (rank / count);
}

}  // namespace purser::observe
