// SseParser: server-sent events read incrementally from a byte stream that arrives in arbitrary
// pieces. Each complete event is returned with its raw bytes, so a relay can forward it exactly
// as received (or drop it) after looking inside.
//
// Events end at a blank line; "\n", "\r\n" and "\r" line endings are accepted; "event:" and
// multi-line "data:" fields are read; comment lines (":") stay in the raw bytes. The bytes held
// for an incomplete event are bounded: over `max_event_bytes` is an error (a runaway upstream).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace purser::gateway {

struct SseEvent {
  std::string event;  // "" when the event has no "event:" field
  std::string data;   // data lines joined with "\n"
  std::string raw;    // the exact bytes, including the terminating blank line
};

class SseParser {
 public:
  explicit SseParser(size_t max_event_bytes = 4 * 1024 * 1024) : max_(max_event_bytes) {}

  // Appends bytes; returns the events they complete.
  Result<std::vector<SseEvent>> feed(std::string_view bytes);
  // Bytes of an event still incomplete (a stream that ends here was cut).
  const std::string& pending() const { return buffer_; }

 private:
  size_t max_;
  std::string buffer_;
  size_t scanned_ = 0;  // bytes of buffer_ already searched for an event's end
};

}  // namespace purser::gateway
