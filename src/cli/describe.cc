#include "cli/describe.h"

#include <sstream>
#include <string>
#include <vector>

namespace purser::cli {
namespace {

// A field's name as words ("gpu_charged" -> "Gpu charged"); a key that is data rather than a
// field name (a resource "nvidia.com/gpu", a variable "CUDA_VISIBLE_DEVICES") stays as it is.
std::string label(const std::string& key) {
  if (key.empty() || key.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") != std::string::npos) {
    return key;
  }
  std::string out = key;
  for (char& c : out) {
    if (c == '_') c = ' ';
  }
  out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

bool empty(const Json& v) { return v.is_null() || ((v.is_array() || v.is_object()) && v.empty()); }

// Text as one line a terminal shows as it is: control characters (a newline, an escape sequence a
// workload's author wrote, and the C1 controls U+0080-U+009F, which some terminals obey as 8-bit
// escapes: CSI, OSC) are written as \n, \xNN or \u00NN.
std::string printable(const std::string& text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto u = static_cast<unsigned char>(text[i]);
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if (u == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else if (u == 0xc2 && next >= 0x80 && next <= 0x9f) {  // UTF-8 of U+0080-U+009F
      out += "\\u00";
      out += kHex[next >> 4];
      out += kHex[next & 15];
      ++i;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string scalar(const Json& v) {
  if (v.is_string()) return printable(v.get<std::string>());
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return writeJson(v);
}

bool allScalars(const Json& list) {
  for (const auto& item : list) {
    if (item.is_object() || item.is_array()) return false;
  }
  return true;
}

}  // namespace

void printDescribed(const Json& value, std::ostream& out, int indent) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (!value.is_object()) {
    out << pad << scalar(value) << "\n";
    return;
  }
  std::vector<std::string> keys;
  for (const char* first : {"name", "namespace", "state"}) {
    if (value.contains(first)) keys.emplace_back(first);
  }
  for (const auto& [key, v] : value.items()) {
    if (key != "name" && key != "namespace" && key != "state") keys.push_back(key);
  }
  for (const std::string& key : keys) {
    const Json& v = value[key];
    if (empty(v)) continue;
    if (v.is_object()) {
      out << pad << printable(label(key)) << ":\n";
      printDescribed(v, out, indent + 2);
    } else if (v.is_array() && allScalars(v)) {
      std::string line;
      for (const auto& item : v) line += (line.empty() ? "" : ", ") + scalar(item);
      out << pad << printable(label(key)) << ": " << line << "\n";
    } else if (v.is_array()) {
      out << pad << printable(label(key)) << ":\n";
      for (const auto& item : v) {
        if (!item.is_object()) {
          out << pad << "  - " << scalar(item) << "\n";
          continue;
        }
        // The item's first line carries the dash; the rest line up under it.
        std::ostringstream inner;
        printDescribed(item, inner, indent + 4);
        std::string text = inner.str();
        if (text.size() >= static_cast<size_t>(indent) + 4) {
          text.replace(static_cast<size_t>(indent), 4, "  - ");
        }
        out << text;
      }
    } else {
      out << pad << printable(label(key)) << ": " << scalar(v) << "\n";
    }
  }
}

}  // namespace purser::cli
