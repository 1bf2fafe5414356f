// Admin API errors as RFC 7807 problem documents:
//   {"type":"about:blank","title":"Not Found","status":404,"detail":"...","field":"team"}
// and the reading of JSON request fields with errors that name the field.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/money.h"
#include "common/result.h"
#include "http/message.h"

namespace purser::api {

int statusFor(ErrorCode code);
http::Response problem(int status, std::string_view detail, std::string_view field = {});
http::Response problem(const Error& error);
http::Response jsonResponse(int status, const nlohmann::json& body);

// The request body as a JSON object, or a 400-ready error.
Result<nlohmann::json> parseObject(const http::Request& request);

// Field readers. Absent optional fields give nullopt; a present field of the wrong type, or an
// absent required one, is an error naming the field.
Result<std::string> requiredString(const nlohmann::json& obj, const std::string& field);
Result<std::optional<std::string>> optionalString(const nlohmann::json& obj,
                                                  const std::string& field);
Result<std::optional<int64_t>> optionalInt(const nlohmann::json& obj, const std::string& field,
                                           int64_t min, int64_t max);
Result<std::optional<bool>> optionalBool(const nlohmann::json& obj, const std::string& field);
Result<std::vector<std::string>> stringList(const nlohmann::json& obj, const std::string& field);
// Money is written as a decimal string ("100.00"), never a JSON number.
Result<Money> requiredMoney(const nlohmann::json& obj, const std::string& field);
// A display name: 1..100 characters, no control characters.
Result<std::string> requiredName(const nlohmann::json& obj, const std::string& field);

}  // namespace purser::api
