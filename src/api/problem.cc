#include "api/problem.h"
#include "common/json.h"

#include <fmt/format.h>

namespace purser::api {

using nlohmann::json;

int statusFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
      return 400;
    case ErrorCode::kUnauthenticated:
      return 401;
    case ErrorCode::kPermissionDenied:
      return 403;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kAlreadyExists:
    case ErrorCode::kFailedPrecondition:
    case ErrorCode::kAborted:
      return 409;
    case ErrorCode::kResourceExhausted:
      return 429;
    case ErrorCode::kUnavailable:
    case ErrorCode::kCancelled:
      return 503;
    case ErrorCode::kDeadlineExceeded:
      return 504;
    case ErrorCode::kUnimplemented:
      return 501;
    case ErrorCode::kDataLoss:
    case ErrorCode::kInternal:
      return 500;
  }
  return 500;
}

http::Response jsonResponse(int status, const json& body) {
  return http::Response::json(status, writeJson(body));
}

http::Response problem(int status, std::string_view detail, std::string_view field) {
  json body = {{"type", "about:blank"},
               {"title", http::statusReason(status)},
               {"status", status},
               {"detail", detail}};
  if (!field.empty()) body["field"] = field;
  http::Response r = http::Response::text(status, writeJson(body), "application/problem+json");
  if (status == 401) r.headers.add("WWW-Authenticate", "Bearer realm=\"purser\"");
  return r;
}

http::Response problem(const Error& error) {
  const int status = statusFor(error.code);
  // Internal errors are logged by the caller; the client learns only that it was not their fault
  // (unless the message was written for it: the server is busy).
  const bool shown = status < 500 || error.for_client;
  http::Response r = problem(status, shown ? error.message : "internal error", error.field);
  if (status == 503 && error.for_client) r.headers.add("Retry-After", "1");
  return r;
}

Result<json> parseObject(const http::Request& request) {
  if (request.body.empty()) {
    return fail(invalidArgument("the request body is empty; expected a JSON object"));
  }
  json body = parseJsonOrDiscarded(request.body);
  if (body.is_discarded()) return fail(invalidArgument("the request body is not valid JSON"));
  if (!body.is_object()) return fail(invalidArgument("the request body must be a JSON object"));
  return body;
}

namespace {

Error fieldError(const std::string& field, std::string message) {
  return invalidArgument(std::move(message)).withField(field);
}

}  // namespace

Result<std::string> requiredString(const json& obj, const std::string& field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) {
    return fail(fieldError(field, fmt::format("\"{}\" is required", field)));
  }
  if (!it->is_string())
    return fail(fieldError(field, fmt::format("\"{}\" must be a string", field)));
  return it->get<std::string>();
}

Result<std::optional<std::string>> optionalString(const json& obj, const std::string& field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string())
    return fail(fieldError(field, fmt::format("\"{}\" must be a string", field)));
  return std::optional<std::string>(it->get<std::string>());
}

Result<std::optional<int64_t>> optionalInt(const json& obj, const std::string& field, int64_t min,
                                           int64_t max) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer()) {
    return fail(fieldError(field, fmt::format("\"{}\" must be a whole number", field)));
  }
  const std::optional<int64_t> n = jsonInt(*it);
  if (!n || *n < min || *n > max) {
    return fail(fieldError(field, fmt::format("\"{}\" must be from {} to {}, got {}", field, min,
                                              max, writeJson(*it))));
  }
  const int64_t v = *n;
  if (v < min || v > max) {
    return fail(
        fieldError(field, fmt::format("\"{}\" must be from {} to {}, got {}", field, min, max, v)));
  }
  return std::optional<int64_t>(v);
}

Result<std::optional<bool>> optionalBool(const json& obj, const std::string& field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean())
    return fail(fieldError(field, fmt::format("\"{}\" must be true or false", field)));
  return std::optional<bool>(it->get<bool>());
}

Result<std::vector<std::string>> stringList(const json& obj, const std::string& field) {
  std::vector<std::string> out;
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return out;
  if (!it->is_array()) {
    return fail(fieldError(field, fmt::format("\"{}\" must be a list of strings", field)));
  }
  for (const auto& v : *it) {
    if (!v.is_string() || v.get<std::string>().empty()) {
      return fail(
          fieldError(field, fmt::format("\"{}\" must be a list of non-empty strings", field)));
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

Result<Money> requiredMoney(const json& obj, const std::string& field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) {
    return fail(fieldError(field, fmt::format("\"{}\" is required", field)));
  }
  if (!it->is_string()) {
    return fail(fieldError(
        field,
        fmt::format("\"{}\" must be a decimal string such as \"100.00\" (not a number)", field)));
  }
  auto m = Money::parse(it->get<std::string>());
  if (!m) return fail(fieldError(field, m.error().message));
  return *m;
}

Result<std::string> requiredName(const json& obj, const std::string& field) {
  auto name = PURSER_TRY_VALUE(requiredString(obj, field));
  if (name.empty() || name.size() > 100) {
    return fail(fieldError(field, fmt::format("\"{}\" must be 1 to 100 characters", field)));
  }
  for (unsigned char c : name) {
    if (c < 32 || c == 127) {
      return fail(
          fieldError(field, fmt::format("\"{}\" cannot contain control characters", field)));
    }
  }
  return name;
}

}  // namespace purser::api
