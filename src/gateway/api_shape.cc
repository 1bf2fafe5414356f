#include "gateway/api_shape.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "common/json.h"

namespace purser::gateway {

using http::Response;
using nlohmann::json;

// --- Errors in each API's own shape -----------------------------------------------------------

int statusOf(Fault f) {
  switch (f) {
    case Fault::kBadRequest:
      return 400;
    case Fault::kUnauthenticated:
      return 401;
    case Fault::kForbidden:
      return 403;
    case Fault::kNotFound:
      return 404;
    case Fault::kTooLarge:
      return 413;
    case Fault::kRateLimited:
    case Fault::kBudget:
      return 429;
    case Fault::kUpstream:
      return 502;
    case Fault::kTimeout:
      return 504;
    case Fault::kInternal:
      return 500;
    case Fault::kOverloaded:
      return 503;
  }
  return 500;
}

Response apiError(Api api, Fault fault, std::string_view message, std::string_view param,
                  std::string_view code) {
  // Anthropic says "overloaded" with its own status, which its SDK retries like a 503.
  const int status = fault == Fault::kOverloaded && api == Api::kAnthropic ? 529 : statusOf(fault);
  json body;
  if (api == Api::kOpenAi) {
    std::string type = "invalid_request_error";
    if (fault == Fault::kBudget) type = "insufficient_quota";
    if (fault == Fault::kRateLimited) type = "rate_limit_exceeded";
    if (fault == Fault::kUpstream || fault == Fault::kTimeout || fault == Fault::kInternal ||
        fault == Fault::kOverloaded) {
      type = "server_error";
    }
    body = {{"error",
             {{"message", message},
              {"type", type},
              {"param", param.empty() ? json(nullptr) : json(param)},
              {"code", code.empty() ? json(nullptr) : json(code)}}}};
  } else {
    std::string type = "invalid_request_error";
    switch (fault) {
      case Fault::kUnauthenticated:
        type = "authentication_error";
        break;
      case Fault::kForbidden:
        type = "permission_error";
        break;
      case Fault::kNotFound:
        type = "not_found_error";
        break;
      case Fault::kTooLarge:
        type = "request_too_large";
        break;
      case Fault::kRateLimited:
      case Fault::kBudget:
        type = "rate_limit_error";
        break;
      case Fault::kUpstream:
      case Fault::kInternal:
        type = "api_error";
        break;
      case Fault::kTimeout:
        type = "timeout_error";
        break;
      case Fault::kOverloaded:
        type = "overloaded_error";
        break;
      case Fault::kBadRequest:
        break;
    }
    body = {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
  }
  Response r = Response::json(status, writeJson(body));
  if (fault == Fault::kBudget) r.headers.add("x-should-retry", "false");
  return r;
}

ProviderKind kindOf(Api api) {
  return api == Api::kAnthropic ? ProviderKind::kAnthropic : ProviderKind::kOpenAi;
}

// An upstream's refusal in the client's API's error shape (the status is kept); `parsed` is its
// answer as JSON, or discarded when it was not JSON.
Response translatedError(Api api, int status, const json& parsed) {
  std::string message = "The upstream model refused the request.";
  std::string type = "invalid_request_error";
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object()) {
    const json& err = parsed["error"];
    if (err.contains("message") && err["message"].is_string()) message = err["message"];
  }
  if (status == 401) type = "authentication_error";
  if (status == 403) type = "permission_error";
  if (status == 404) type = "not_found_error";
  if (status >= 500) type = api == Api::kOpenAi ? "server_error" : "api_error";
  json body;
  if (api == Api::kOpenAi) {
    body = {
        {"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}};
  } else {
    body = {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
  }
  return Response::json(status, writeJson(body));
}

// --- Usage in each API's terms -----------------------------------------------------------------

// The most tokens one count may say: far above any real request, far below what could
// overflow a cost.
constexpr int64_t kMaxTokenCount = int64_t{1} << 40;

// A token count at `path`: 0 when absent (or null), nullopt when present but not a whole number
// from 0 to kMaxTokenCount (negative, fractional, a string, an overflowing number).
static std::optional<int64_t> countAt(const JsonView& obj,
                                      std::initializer_list<const char*> path) {
  JsonView v = obj;
  for (const char* key : path) {
    if (!v.isObject()) return 0;
    auto next = v.get(key);
    if (!next) return 0;
    v = *next;
  }
  if (v.isNull()) return 0;
  const std::optional<int64_t> n = v.integer();
  if (!n || *n < 0 || *n > kMaxTokenCount) return std::nullopt;
  return n;
}

// Usage as the upstream reported it, in Purser's terms; nullopt when a count is not believable,
// which is treated as missing usage (estimated and flagged, never recorded as zero).
// OpenAI counts cached input inside prompt_tokens and reasoning inside completion_tokens;
// Purser's kinds are disjoint.
std::optional<ledger::TokenCounts> openAiUsage(const JsonView& usage) {
  const auto cached = countAt(usage, {"prompt_tokens_details", "cached_tokens"});
  const auto reasoning = countAt(usage, {"completion_tokens_details", "reasoning_tokens"});
  const auto prompt = countAt(usage, {"prompt_tokens"});
  const auto completion = countAt(usage, {"completion_tokens"});
  if (!cached || !reasoning || !prompt || !completion) return std::nullopt;
  ledger::TokenCounts t;
  t.input = std::max<int64_t>(0, *prompt - *cached);
  t.cached_input = std::min(*cached, *prompt);
  t.output = std::max<int64_t>(0, *completion - *reasoning);
  t.reasoning = std::min(*reasoning, *completion);
  return t;
}

std::optional<ledger::TokenCounts> anthropicUsage(const JsonView& usage) {
  const auto input = countAt(usage, {"input_tokens"});
  const auto cached = countAt(usage, {"cache_read_input_tokens"});
  const auto write = countAt(usage, {"cache_creation_input_tokens"});
  const auto output = countAt(usage, {"output_tokens"});
  if (!input || !cached || !write || !output) return std::nullopt;
  return ledger::TokenCounts{
      .input = *input, .output = *output, .cached_input = *cached, .cache_write = *write};
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

namespace {

const char* kindName(JsonKind k) {
  switch (k) {
    case JsonKind::kObject:
      return "an object";
    case JsonKind::kArray:
      return "an array";
    case JsonKind::kString:
      return "a string";
    case JsonKind::kNumber:
      return "a number";
    case JsonKind::kTrue:
    case JsonKind::kFalse:
      return "a boolean";
    case JsonKind::kNull:
      return "null";
  }
  return "something else";
}

bool isToken(const JsonView& v) { return v.kind() == JsonKind::kNumber && v.integer().has_value(); }

}  // namespace

std::optional<std::pair<std::string, std::string>> shapeError(std::string_view field,
                                                              const JsonView& value) {
  const auto wrong = [&](const std::string& param, const char* expected, const JsonView& got) {
    return std::make_pair(fmt::format("Invalid type for '{}': expected {}, but got {} instead.",
                                      param, expected, kindName(got.kind())),
                          param);
  };
  if (field == "messages") {
    const std::vector<JsonView> items = value.elements();
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string at = fmt::format("messages[{}]", i);
      if (!items[i].isObject()) return wrong(at, "an object", items[i]);
      const auto content = items[i].get("content");
      if (!content || content->isString() || content->isNull()) continue;
      if (!content->isArray()) {
        return wrong(at + ".content", "a string or an array of content parts", *content);
      }
      const std::vector<JsonView> parts = content->elements();
      for (size_t k = 0; k < parts.size(); ++k) {
        if (!parts[k].isObject()) {
          return wrong(fmt::format("{}.content[{}]", at, k), "an object", parts[k]);
        }
      }
    }
    return std::nullopt;
  }
  // input (embeddings) and prompt (completions): text, texts, tokens, or lists of tokens.
  const std::string param(field);
  constexpr const char* kExpected =
      "a string, an array of strings, an array of tokens or an array of token arrays";
  if (value.isString()) return std::nullopt;
  if (!value.isArray()) return wrong(param, kExpected, value);
  const std::vector<JsonView> items = value.elements();
  if (items.empty()) {
    return std::make_pair(fmt::format("'{}' must not be empty.", param), param);
  }
  const JsonKind first = items[0].kind();
  for (size_t i = 0; i < items.size(); ++i) {
    const JsonView& v = items[i];
    const std::string at = fmt::format("{}[{}]", param, i);
    if (first == JsonKind::kString) {
      if (!v.isString()) return wrong(at, "a string", v);
    } else if (first == JsonKind::kNumber) {
      if (!isToken(v)) return wrong(at, "a token (a whole number)", v);
    } else if (first == JsonKind::kArray) {
      if (!v.isArray()) return wrong(at, "an array of tokens", v);
      for (const auto& t : v.elements()) {
        if (!isToken(t)) return wrong(at, "an array of tokens", t);
      }
    } else {
      return wrong(at, "a string, a token or an array of tokens", v);
    }
  }
  return std::nullopt;
}

// The longest session id kept with a request's usage.

// Bodies at least this large are parsed and written on the CPU pool, not on an I/O worker.

// The most of an upstream's error answer read before it is relayed.

// Puts the alias where an answer names the upstream model ("model": "<upstream>"): clients see
// the name they asked for, never what serves it. A byte-level rewrite, no parse: inside a JSON
// string every quote is escaped, so the sequence can only be a key and its value.
void hideUpstreamModel(std::string& text, const std::string& upstream, const std::string& alias) {
  if (upstream == alias) return;
  const std::string from = writeJson(Json(upstream)), to = writeJson(Json(alias));
  for (const char* key : {"\"model\":", "\"model\": "}) {
    const std::string needle = key + from;
    const std::string replacement = key + to;
    for (size_t at = text.find(needle); at != std::string::npos;
         at = text.find(needle, at + replacement.size())) {
      text.replace(at, needle.size(), replacement);
    }
  }
}

std::string upstreamPath(Surface s) {
  switch (s) {
    case Surface::kChat:
      return "/chat/completions";
    case Surface::kCompletions:
      return "/completions";
    case Surface::kEmbeddings:
      return "/embeddings";
    case Surface::kMessages:
      return "/v1/messages";
  }
  return "/";
}

// Worth another try elsewhere: overloaded or failing upstreams, and upstreams that refuse the
// provider's own key (the client's request is not at fault; another target may serve it).
bool retryable(int status) {
  return status == 429 || status >= 500 || status == 401 || status == 403;
}

// The Retry-After of an upstream answer, capped; zero when absent.
std::chrono::milliseconds retryAfter(const http::Headers& h) {
  auto v = h.get("retry-after");
  if (!v) return std::chrono::milliseconds(0);
  char* end = nullptr;
  const double secs = std::strtod(std::string(*v).c_str(), &end);
  if (secs <= 0) return std::chrono::milliseconds(0);
  return std::min(std::chrono::milliseconds(static_cast<int64_t>(secs * 1000)),
                  std::chrono::milliseconds(5000));
}

Result<Money> sessionCap(std::string_view header, std::string_view session) {
  auto cap = Money::parse(header);
  if (!cap || !cap->isPositive()) {
    return fail(invalidArgument(
        "x-purser-session-budget must be a positive amount of money such as \"2.50\""));
  }
  if (session.empty()) {
    return fail(invalidArgument(
        "x-purser-session-budget caps a run: name the run with x-purser-session too"));
  }
  return *cap;
}

}  // namespace purser::gateway
