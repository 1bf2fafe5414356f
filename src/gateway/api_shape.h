// The two model APIs as the gateway speaks them: which API a path belongs to, errors in each
// API's own shape, usage as each reports it, upstream paths, and which upstream answers are worth
// another try.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/json_scan.h"
#include "common/money.h"
#include "common/result.h"
#include "gateway/routing.h"
#include "http/router.h"
#include "ledger/price.h"

namespace purser::gateway {

enum class Api { kOpenAi, kAnthropic };
enum class Surface { kChat, kCompletions, kEmbeddings, kMessages };

inline Api apiOf(Surface s) { return s == Surface::kMessages ? Api::kAnthropic : Api::kOpenAi; }

// What went wrong, independent of the API that reports it.
enum class Fault {
  kBadRequest,
  kUnauthenticated,
  kForbidden,
  kNotFound,
  kTooLarge,
  kRateLimited,
  kBudget,
  kUpstream,
  kTimeout,
  kInternal,
  kOverloaded,  // every replica saturated: shed, or waited past its bound (503; Anthropic 529)
};

// The longest session id kept with a request's usage.
constexpr size_t kMaxSessionBytes = 256;
// An x-purser-session-budget header's value: a positive amount of money ("2.50") capping the run
// `session` names (which must be given). The model API and /mcp read it alike.
Result<Money> sessionCap(std::string_view header, std::string_view session);
// Bodies at least this large are parsed and written on the CPU pool, not on an I/O worker.
constexpr size_t kOffloadBytes = 64 * 1024;
// The most of an upstream's error answer read before it is relayed.
constexpr size_t kMaxErrorBody = 64 * 1024;

int statusOf(Fault f);
// An error in `api`'s own shape (OpenAI's error object, Anthropic's error event).
http::Response apiError(Api api, Fault fault, std::string_view message, std::string_view param = {},
                        std::string_view code = {});
ProviderKind kindOf(Api api);
// An upstream's error answer, put in the client's API's shape.
http::Response translatedError(Api api, int status, const nlohmann::json& parsed);

// Usage as each API reports it; nothing when a count is missing or not believable.
std::optional<ledger::TokenCounts> openAiUsage(const JsonView& usage);
std::optional<ledger::TokenCounts> anthropicUsage(const JsonView& usage);

int64_t ceilDiv(int64_t a, int64_t b);

// What the model APIs refuse in a request's main field, as (message, param): `messages` items
// that are not objects, a message `content` that is neither a string (nor null) nor a list of
// parts (objects), an embeddings `input` (or a completion's `prompt`) that is not a string, a
// list of strings, a list of tokens or a list of token lists. nullopt when it is well formed.
std::optional<std::pair<std::string, std::string>> shapeError(std::string_view field,
                                                              const JsonView& value);
// Puts the alias where an answer names the upstream model (see api_shape.cc).
void hideUpstreamModel(std::string& text, const std::string& upstream, const std::string& alias);

std::string upstreamPath(Surface s);
// Worth another try elsewhere (see api_shape.cc).
bool retryable(int status);
// The Retry-After of an upstream answer, capped; zero when absent.
std::chrono::milliseconds retryAfter(const http::Headers& h);

}  // namespace purser::gateway
