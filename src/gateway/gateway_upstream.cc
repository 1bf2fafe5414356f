#include "gateway/gateway_impl.h"

namespace purser::gateway {

// The request as the target's provider expects it, translated when the target speaks the
// other API.
Result<http::ClientRequest> Gateway::Impl::upstreamRequest(Call& c, const Target& t) const {
  const bool usage_option = c.stream && t.provider->kind() == ProviderKind::kOpenAi;
  std::string text;
  Surface path = c.surface;
  if (!crosses(c, t)) {
    // The client's bytes with three values spliced in: the upstream's model name, the output
    // cap, and (OpenAI streams) the option that makes the upstream report usage.
    JsonSplicer splice(c.raw);
    splice.replace(c.model, writeJson(json(t.model)));
    if (c.max_field != nullptr) {
      if (c.max_value) {
        splice.replace(*c.max_value, std::to_string(c.max_output));
      } else {
        splice.prepend(c.doc, c.max_field, std::to_string(c.max_output));
      }
    }
    if (usage_option) {
      constexpr std::string_view kIncludeUsage = R"({"include_usage":true})";
      if (!c.stream_options) {
        splice.prepend(c.doc, "stream_options", std::string(kIncludeUsage));
      } else if (!c.stream_options->isObject()) {
        splice.replace(*c.stream_options, std::string(kIncludeUsage));
      } else {
        bool set = false;
        for (const auto& [key, value] : c.stream_options->members()) {
          if (jsonKeyIs(key, "include_usage")) {
            splice.replace(value, "true");
            set = true;
          }
        }
        if (!set) splice.prepend(*c.stream_options, "include_usage", "true");
      }
    }
    text = splice.build();
  } else {
    json body;
    // A field of an unexpected type surfaces as a JSON type error: the client's request is
    // at fault, not the upstream.
    try {
      if (c.surface == Surface::kChat) {
        body = PURSER_TRY_VALUE(chatToMessagesRequest(document(c), t.model, c.max_output));
        path = Surface::kMessages;
      } else {
        body = PURSER_TRY_VALUE(messagesToChatRequest(document(c), t.model));
        path = Surface::kChat;
      }
    } catch (const json::exception& e) {
      return fail(invalidArgument(
          fmt::format("The request cannot be translated for this model's API: {}", e.what())));
    }
    if (usage_option) {
      if (!body.contains("stream_options") || !body["stream_options"].is_object()) {
        body["stream_options"] = json::object();
      }
      body["stream_options"]["include_usage"] = true;
    }
    text = writeJson(body);
  }
  http::ClientRequest r;
  r.method = Method::kPost;
  r.url = t.provider->baseUrl() + upstreamPath(path);
  r.tls = t.provider->tls().profile;
  r.headers.add("Content-Type", "application/json");
  const std::string key = t.provider->nextKey();
  if (t.provider->kind() == ProviderKind::kAnthropic) {
    if (!key.empty()) r.headers.add("x-api-key", key);
    r.headers.add("anthropic-version",
                  c.anthropic_version.empty() ? "2023-06-01" : c.anthropic_version);
    if (!c.anthropic_beta.empty()) r.headers.add("anthropic-beta", c.anthropic_beta);
  } else if (!key.empty()) {
    r.headers.add("Authorization", "Bearer " + key);
  }
  if (c.stream) r.headers.add("Accept", "text/event-stream");
  r.body = std::move(text);
  r.timeout = t.provider->timeout();
  r.max_response_bytes = t.provider->limits().max_response_bytes;
  return r;
}

asio::awaitable<Response> Gateway::Impl::whole(Call& c) {
  http::HttpClient& client = d_.clients.current();
  const auto targets = candidates(c);
  Fault last_fault = Fault::kUpstream;
  std::string last_error = "no target of this route can serve this API";
  for (Target* t : targets) {
    for (int64_t attempt = 0; attempt <= c.route->retries; ++attempt) {
      if (attempt > 0) co_await sleepFor(std::chrono::milliseconds(100 << (attempt - 1)));
      auto request = co_await buildUpstream(c, *t);
      if (!request) {
        // The request cannot be put in this target's API; another target may take it as is.
        last_fault = Fault::kBadRequest;
        last_error = request.error().message;
        break;
      }
      const auto sent = d_.clock.monotonic();
      beginTry(c, *t);
      c.last_target = t;
      auto res = co_await client.request(std::move(*request));
      endTry(c, *t);
      c.upstream_time += d_.clock.monotonic() - sent;
      observeUpstream(c, *t, d_.clock.monotonic() - sent);
      if (!res) {
        failed(c.route, *t);
        upstreamError(*t, errorKind(res.error()));
        if (res.error().code == ErrorCode::kResourceExhausted) {
          // It ran and answered more than a provider may send: not retried (the work is
          // done), charged as estimated at the worst case that was held for it.
          co_await settle(c, {.input = c.input_estimate, .output = c.max_output}, true, 502, t,
                          d_.clock.monotonic() - c.started);
          Response r =
              apiError(c.api, Fault::kUpstream,
                       fmt::format("The answer of {} exceeded {} bytes.", t->provider->name(),
                                   t->provider->limits().max_response_bytes));
          overhead(r, c);
          co_return r;
        }
        last_fault =
            res.error().code == ErrorCode::kDeadlineExceeded ? Fault::kTimeout : Fault::kUpstream;
        last_error = res.error().message;
        continue;
      }
      if (retryable(res->status)) {
        failed(c.route, *t);
        upstreamError(*t, errorKind(res->status));
        last_fault = Fault::kUpstream;
        last_error = fmt::format("{} answered {}", t->provider->name(), res->status);
        // Its Retry-After is honoured before trying it again; another target is tried at once.
        if (attempt < c.route->retries) co_await sleepFor(retryAfter(res->headers));
        continue;
      }
      recordSuccess(*t, d_.clock.monotonic() - sent);
      if (res->status < 400)
        t->health.ttft.record(d_.clock.monotonic(), d_.clock.monotonic() - sent);
      // The answer is read in place: its usage and shape, nothing built. Only a translated
      // answer (the other API) or a refusal put in the client's shape becomes a document.
      Result<JsonView> answer = fail(internalError("not read"));
      const std::function<void()> read_answer = [&] {
        answer = scanJson(res->body, c.max_nesting);
      };
      co_await offload(res->body.size(), read_answer);
      const bool is_object = answer && answer->isObject();
      if (res->status >= 400) {
        upstreamError(*t, errorKind(res->status));
        // The upstream refused the request itself: nothing ran, nothing is charged. Its
        // answer reaches the client in the client's API's shape; one that is not such a JSON
        // error is put in that shape.
        c.hold.release();
        const bool own_shape = !crosses(c, *t) && is_object && answer->get("error");
        Response r = own_shape ? Response::json(res->status, std::move(res->body))
                               : translatedError(c.api, res->status,
                                                 parseJsonOrDiscarded(res->body, c.max_nesting));
        overhead(r, c);
        co_return r;
      }
      std::optional<ledger::TokenCounts> reported;
      if (auto usage = is_object ? answer->get("usage") : std::nullopt;
          usage && usage->isObject()) {
        reported = t->provider->kind() == ProviderKind::kAnthropic ? anthropicUsage(*usage)
                                                                   : openAiUsage(*usage);
        if (!reported) {
          spdlog::warn("gateway: {} reported usage that is not believable; estimated instead",
                       t->provider->name());
        }
      }
      ledger::TokenCounts tokens;
      if (reported) {
        tokens = *reported;
      } else {
        tokens.input = c.input_estimate;
        tokens.output = ceilDiv(static_cast<int64_t>(res->body.size()), 4);
      }
      co_await settle(c, tokens, !reported, res->status, t, d_.clock.monotonic() - c.started);
      if (!is_object) {
        // The upstream ran (and is metered, estimated) but its answer is not what its API
        // promises: the client is told so, in its own API's shape.
        Response r =
            apiError(c.api, Fault::kUpstream,
                     fmt::format("The answer of {} was not a JSON object.", t->provider->name()));
        overhead(r, c);
        co_return r;
      }
      if (crosses(c, *t)) {
        std::optional<std::string> translated;
        try {
          const json body = parseJsonOrDiscarded(res->body, c.max_nesting);
          if (body.is_object()) {
            translated =
                writeJson(c.api == Api::kOpenAi ? messagesToChatResponse(body, d_.clock.now())
                                                : chatToMessagesResponse(body));
          }
        } catch (const json::exception& e) {
          spdlog::warn("gateway: the answer of {} could not be translated: {}", t->provider->name(),
                       e.what());
        }
        if (!translated) {
          // The upstream ran and was metered; its answer was not what its API promises.
          Response r = apiError(
              c.api, Fault::kUpstream,
              fmt::format("The answer of {} could not be translated.", t->provider->name()));
          overhead(r, c);
          co_return r;
        }
        res->body = std::move(*translated);
      }
      hideUpstreamModel(res->body, t->model, c.route->alias);
      Response r = Response::json(res->status, std::move(res->body));
      overhead(r, c);
      co_return r;
    }
  }
  c.hold.release();
  Response r = apiError(c.api, last_fault, failureMessage(c, last_fault, last_error));
  overhead(r, c);
  co_return r;
}

}  // namespace purser::gateway
