// Narration of a diagnosis: the findings (as the caller may see them) summarised in plain words
// by a model, through Purser's own gateway in process, as the caller — with the caller's key, so
// the request is authorised, limited and metered to the caller's wallets like any other. The
// deterministic findings are the answer; the narration sits beside them and never changes them.
//
// Thread-safety: pure functions, and a coroutine that runs on the caller's executor.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <string>

#include "common/json.h"
#include "http/message.h"
#include "http/router.h"

namespace purser::diagnose_live {

// The findings as the model is given them: the question, the window and, per finding (the first
// `max_findings`), its cause, subject, confidence, explanation, evidence summaries (no points)
// and next steps. Anything that looks like a secret (an API key, a bearer token) is replaced
// with "[secret]". `answer` is the answer the caller receives, already redacted for them.
std::string narrationInput(const Json& answer, size_t max_findings = 5);

// Replaces API keys ("pk-...", "sk-...") and bearer tokens in `text` with "[secret]".
std::string scrubSecrets(std::string text);

// Asks route `route` (POST /v1/chat/completions through `router`, in process) for the summary
// with the credentials of `from` (its Authorization or x-api-key header). Returns
// {"route", "text"} or, when the gateway refused or the model failed, {"route", "error",
// "status"} — never an exception, never a change to `answer`.
boost::asio::awaitable<Json> narrate(const http::Router& router, const http::Request& from,
                                     const std::string& route, int64_t max_tokens,
                                     const Json& answer);

}  // namespace purser::diagnose_live
