#include "common/error.h"

#include <fmt/format.h>

namespace purser {

std::string_view errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kAlreadyExists:
      return "already_exists";
    case ErrorCode::kFailedPrecondition:
      return "failed_precondition";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    case ErrorCode::kUnauthenticated:
      return "unauthenticated";
    case ErrorCode::kResourceExhausted:
      return "resource_exhausted";
    case ErrorCode::kOutOfRange:
      return "out_of_range";
    case ErrorCode::kAborted:
      return "aborted";
    case ErrorCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kUnimplemented:
      return "unimplemented";
    case ErrorCode::kDataLoss:
      return "data_loss";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "internal";
}

Error Error::withField(std::string_view name) const {
  Error e = *this;
  if (e.field.empty()) {
    e.field = std::string(name);
  } else if (!name.empty()) {
    e.field = fmt::format("{}{}{}", name, e.field.front() == '[' ? "" : ".", e.field);
  }
  return e;
}

Error Error::at(std::string file_name, int line_no, int column_no) const {
  Error e = *this;
  e.file = std::move(file_name);
  e.line = line_no;
  e.column = column_no;
  return e;
}

std::string Error::toString() const {
  std::string out;
  if (!file.empty()) {
    out += file;
    if (line > 0) {
      out += fmt::format(":{}", line);
      if (column > 0) out += fmt::format(":{}", column);
    }
    out += ": ";
  }
  if (!field.empty()) {
    out += field;
    out += ": ";
  }
  out += message;
  return out;
}

}  // namespace purser
