// Error: what went wrong, said so that the person who reads it can act on it.
//
// An Error carries a machine-readable code (mapped to HTTP statuses and API error types by the
// surfaces), a user-facing message, and where useful the place the input was wrong: a field path
// ("http.max_body_bytes"), and for files a file name, line and column. Errors are plain values;
// they are cheap to move and safe to copy between threads.
#pragma once

#include <string>
#include <string_view>

namespace purser {

enum class ErrorCode {
  kInvalidArgument,     // the input is malformed or violates a rule; fix the input
  kNotFound,            // the named thing does not exist (or is not visible to the caller)
  kAlreadyExists,       // a create collided with an existing name or id
  kFailedPrecondition,  // the system is not in a state that allows this (e.g. store is newer)
  kPermissionDenied,    // authenticated, but not allowed
  kUnauthenticated,     // no or bad credentials
  kResourceExhausted,   // a limit, budget or quota was hit
  kOutOfRange,          // a number does not fit (overflow, too precise)
  kAborted,             // a concurrent change won; retrying may succeed
  kDeadlineExceeded,    // a timeout fired
  kUnavailable,         // a dependency (upstream, disk) is unreachable right now
  kCancelled,           // the caller went away or shutdown began
  kUnimplemented,       // recognised, but not supported (yet)
  kDataLoss,            // stored data is corrupt
  kInternal,            // a bug: an invariant broke
};

// Stable lower-case name of a code, e.g. "invalid_argument". Used in logs and JSON errors.
std::string_view errorCodeName(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;  // user-facing; says what was wrong and, where possible, what is expected
  std::string field;    // dotted path of the offending field, or empty
  std::string file;     // file the input came from, or empty
  int line = 0;         // 1-based line in `file`, or 0
  int column = 0;       // 1-based column in `file`, or 0
  // The message was written for the client (the server is busy; try again shortly): the API shows
  // it even where the status is a server error, whose messages it otherwise hides (they may name
  // a database host, a path).
  bool for_client = false;

  Error() = default;
  Error(ErrorCode c, std::string msg) : code(c), message(std::move(msg)) {}

  // Returns a copy with the field set (or prefixed: "http" + "tls.cert" -> "http.tls.cert").
  Error withField(std::string_view name) const;
  Error at(std::string file_name, int line_no, int column_no = 0) const;

  // "file:line:column: field: message", leaving out the parts that are not set.
  std::string toString() const;
};

inline Error invalidArgument(std::string msg) {
  return Error(ErrorCode::kInvalidArgument, std::move(msg));
}
inline Error outOfRange(std::string msg) { return Error(ErrorCode::kOutOfRange, std::move(msg)); }
inline Error internalError(std::string msg) { return Error(ErrorCode::kInternal, std::move(msg)); }
inline Error unavailable(std::string msg) { return Error(ErrorCode::kUnavailable, std::move(msg)); }
// The server has no room for the request now (a queue is full); `msg`, shown to the client, says
// so and when to try again.
inline Error serverBusy(std::string msg) {
  Error e(ErrorCode::kUnavailable, std::move(msg));
  e.for_client = true;
  return e;
}

}  // namespace purser
