#include "gateway/sse.h"

#include <fmt/format.h>

#include <algorithm>

namespace purser::gateway {

namespace {

// The end of the first blank line at or after `from`: the index just past it, or npos.
size_t eventEnd(const std::string& s, size_t from, size_t& body_end) {
  for (size_t i = from; i < s.size(); ++i) {
    if (s[i] != '\n' && s[i] != '\r') continue;
    // A line ends at i; a blank line follows if the next line ending comes right after.
    size_t j = i + 1;
    if (s[i] == '\r' && j < s.size() && s[j] == '\n') ++j;
    if (j >= s.size()) return std::string::npos;
    if (s[j] == '\n' || s[j] == '\r') {
      size_t k = j + 1;
      if (s[j] == '\r') {
        if (k >= s.size()) return std::string::npos;  // "\r" might be the start of "\r\n"
        if (s[k] == '\n') ++k;
      }
      body_end = i;
      return k;
    }
  }
  return std::string::npos;
}

SseEvent parseEvent(std::string raw, size_t body_end) {
  SseEvent e;
  const std::string_view body(raw.data(), body_end);
  size_t pos = 0;
  bool first_data = true;
  while (pos <= body.size()) {
    size_t eol = body.find_first_of("\r\n", pos);
    if (eol == std::string_view::npos) eol = body.size();
    std::string_view line = body.substr(pos, eol - pos);
    if (!line.empty() && line[0] != ':') {
      const size_t colon = line.find(':');
      std::string_view field = line.substr(0, colon);
      std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
      if (field == "event") {
        e.event = std::string(value);
      } else if (field == "data") {
        if (!first_data) e.data += '\n';
        e.data += value;
        first_data = false;
      }
    }
    if (eol >= body.size()) break;
    pos = eol + 1;
    if (body[eol] == '\r' && pos < body.size() && body[pos] == '\n') ++pos;
  }
  e.raw = std::move(raw);
  return e;
}

}  // namespace

Result<std::vector<SseEvent>> SseParser::feed(std::string_view bytes) {
  buffer_.append(bytes);
  std::vector<SseEvent> out;
  size_t start = 0;
  // The search resumes where the last one ran out (less the few bytes a blank line spans), so
  // a large event arriving in many pieces is scanned once, not once per piece.
  size_t from = scanned_;
  for (;;) {
    size_t body_end = 0;
    const size_t end = eventEnd(buffer_, std::max(start, from), body_end);
    if (end == std::string::npos) break;
    out.push_back(parseEvent(buffer_.substr(start, end - start), body_end - start));
    start = end;
    from = end;
  }
  buffer_.erase(0, start);
  scanned_ = buffer_.size() > 3 ? buffer_.size() - 3 : 0;
  if (buffer_.size() > max_) {
    return fail(
        Error(ErrorCode::kResourceExhausted, fmt::format("an event exceeds {} bytes", max_)));
  }
  return out;
}

}  // namespace purser::gateway
