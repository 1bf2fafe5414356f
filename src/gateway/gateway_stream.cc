#include "gateway/gateway_impl.h"

namespace purser::gateway {

asio::awaitable<Response> Gateway::Impl::streamed(const std::shared_ptr<Call>& c) {
  http::HttpClient& client = d_.clients.current();
  const auto targets = candidates(*c);
  Fault last_fault = Fault::kUpstream;
  std::string last_error = "no target of this route can serve this API";
  for (Target* t : targets) {
    for (int64_t attempt = 0; attempt <= c->route->retries; ++attempt) {
      if (attempt > 0) co_await sleepFor(std::chrono::milliseconds(100 << (attempt - 1)));
      auto request = co_await buildUpstream(*c, *t);
      if (!request) {
        last_fault = Fault::kBadRequest;
        last_error = request.error().message;
        break;
      }
      const auto sent = d_.clock.monotonic();
      c->last_target = t;
      beginTry(*c, *t);
      auto upstream = co_await client.stream(std::move(*request));
      c->upstream_time += d_.clock.monotonic() - sent;
      if (!upstream || retryable((*upstream)->status()) || (*upstream)->status() >= 400) {
        endTry(*c, *t);
      }
      if (!upstream) {
        failed(c->route, *t);
        upstreamError(*t, errorKind(upstream.error()));
        last_fault = upstream.error().code == ErrorCode::kDeadlineExceeded ? Fault::kTimeout
                                                                           : Fault::kUpstream;
        last_error = upstream.error().message;
        continue;
      }
      const int status = (*upstream)->status();
      if (retryable(status) || status >= 400) {
        upstreamError(*t, errorKind(status));
        // Read the (small) error body, at most 64 pieces; nothing has reached the client yet.
        std::string error_body;
        for (int i = 0; i < 64 && error_body.size() < kMaxErrorBody; ++i) {
          auto piece = co_await (*upstream)->next();
          if (!piece || !*piece) break;
          error_body += **piece;
        }
        if (retryable(status)) {
          failed(c->route, *t);
          last_error = fmt::format("{} answered {}", t->provider->name(), status);
          // Its Retry-After is honoured before trying it again; another target is tried at once.
          if (attempt < c->route->retries) co_await sleepFor(retryAfter((*upstream)->headers()));
          continue;
        }
        c->hold.release();
        const json parsed = parseJsonOrDiscarded(error_body, c->max_nesting);
        const bool own_shape = !crosses(*c, *t) && parsed.is_object() && parsed.contains("error");
        Response r = own_shape ? Response::json(status, std::move(error_body))
                               : translatedError(c->api, status, parsed);
        overhead(r, *c);
        co_return r;
      }
      Response r;
      r.status = 200;
      r.headers.add("Content-Type", "text/event-stream");
      r.headers.add("Cache-Control", "no-cache");
      overhead(r, *c);
      auto self = shared_from_this();
      auto stream_ptr = std::shared_ptr<http::ClientStream>(std::move(*upstream));
      r.stream = [self, c, t, stream_ptr, sent](http::BodyWriter& w) -> asio::awaitable<void> {
        co_await self->relay(*c, *t, *stream_ptr, w, sent);
      };
      co_return r;
    }
  }
  c->hold.release();
  Response r = apiError(c->api, last_fault, failureMessage(*c, last_fault, last_error));
  overhead(r, *c);
  co_return r;
}

// Relays an upstream stream event by event; settles before the final marker goes out.
asio::awaitable<void> Gateway::Impl::relay(Call& c, Target& t, http::ClientStream& upstream,
                                           http::BodyWriter& w, SteadyTime sent) {
  SseParser parser(t.provider->limits().max_event_bytes);
  StreamState s;
  std::function<std::vector<TranslatedEvent>(const SseEvent&)> translator;
  if (crosses(c, t) && c.api == Api::kOpenAi) {
    translator = [tr =
                      std::make_shared<MessagesToChatStream>(c.client_wants_usage, d_.clock.now())](
                     const SseEvent& e) { return tr->translate(e); };
  } else if (crosses(c, t)) {
    translator = [tr = std::make_shared<ChatToMessagesStream>()](const SseEvent& e) {
      return tr->translate(e);
    };
  }
  std::string held;  // the final marker, sent after the usage is durable
  bool client_gone = false;
  bool cut = false;
  for (;;) {
    auto piece = co_await upstream.next();
    if (!piece) {
      cut = true;
      break;
    }
    if (!*piece) break;
    auto events = parser.feed(**piece);
    if (!events) {
      cut = true;
      break;
    }
    // Reading the events (their JSON) is work proportional to their size: large ones are read
    // off the I/O worker.
    std::string out;
    size_t batch_bytes = 0;
    for (const auto& e : *events) batch_bytes += e.raw.size();
    const std::function<void()> read_events = [&] {
      for (const auto& e : *events) {
        auto [forward, final_marker] = inspect(c, t.provider->kind(), e, s);
        if (translator) {
          // The client speaks the other API: its events are made from the upstream's. An
          // event that cannot be translated ends the stream as a cut one.
          try {
            for (auto& te : translator(e)) (te.final ? held : out) += te.raw;
          } catch (const json::exception& ex) {
            spdlog::warn("gateway: an event from {} could not be translated: {}",
                         t.provider->name(), ex.what());
            cut = true;
            return;
          }
          continue;
        }
        if (!forward) continue;
        if (final_marker) {
          held += e.raw;
          continue;
        }
        out += e.raw;
      }
    };
    co_await offload(batch_bytes, read_events);
    hideUpstreamModel(out, t.model, c.route->alias);
    if (!out.empty()) {
      if (!s.first_byte) {
        s.first_byte = true;
        s.first_byte_at = d_.clock.monotonic();
      }
      if (!co_await w.write(out)) {
        client_gone = true;
        break;
      }
    }
    if (cut) break;
  }
  // An upstream that closed without its final marker ([DONE], message_stop) did not finish.
  if (!cut && !client_gone && held.empty()) cut = true;
  endTry(c, t);
  const auto ttft =
      s.first_byte ? s.first_byte_at - c.started : std::chrono::steady_clock::duration(0);
  observeUpstream(c, t, d_.clock.monotonic() - sent);
  if (cut) {
    failed(c.route, t);
    upstreamError(t, "5xx");
  } else {
    recordSuccess(t, d_.clock.monotonic() - sent);
    if (s.first_byte) t.health.ttft.record(d_.clock.monotonic(), s.first_byte_at - sent);
  }
  const bool estimated = !s.usage_seen || s.usage_invalid || cut || client_gone;
  co_await settle(c, estimated ? estimate(c, s) : s.tokens, estimated, cut ? 502 : 200, &t, ttft);
  if (client_gone) co_return;
  if (cut) {
    (void)co_await w.write(errorEvent(c.api, "The upstream connection was lost mid-stream."));
    throw http::AbortStream();  // the client sees the stream end without its final marker
  }
  if (!held.empty()) {
    hideUpstreamModel(held, t.model, c.route->alias);
    (void)co_await w.write(held);
  }
}

}  // namespace purser::gateway
