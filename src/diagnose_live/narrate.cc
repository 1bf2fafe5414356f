#include "diagnose_live/narrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <variant>

namespace purser::diagnose_live {

namespace {

namespace asio = boost::asio;

constexpr const char* kInstructions =
    "You summarise a diagnosis for the operator of an LLM gateway and GPU fleet. Below, as JSON, "
    "are the question they asked and the findings a deterministic engine made from metrics, "
    "events and logs, first finding first. In a few short paragraphs of plain language: say "
    "what is most likely wrong and on what, the evidence for it (with its numbers), whether "
    "anything else contributes, and what to do first. Use only the facts given; do not invent "
    "causes, numbers or names. If the first finding's cause is \"none\", say that nothing stands "
    "out and what to check next.";

bool tokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

std::string text(const Json& v, const char* field) {
  auto it = v.find(field);
  return it != v.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string scrubSecrets(std::string s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const bool word_start = i == 0 || !tokenChar(s[i - 1]);
    // "Bearer <token>"
    if (word_start && s.compare(i, 7, "Bearer ") == 0) {
      size_t j = i + 7;
      while (j < s.size() && tokenChar(s[j])) ++j;
      if (j > i + 7) {
        out += "Bearer [secret]";
        i = j;
        continue;
      }
    }
    // "pk-..." (Purser's keys), "sk-..." (providers'), long enough to be a key.
    if (word_start && (s.compare(i, 3, "pk-") == 0 || s.compare(i, 3, "sk-") == 0)) {
      size_t j = i + 3;
      while (j < s.size() && tokenChar(s[j])) ++j;
      if (j - i >= 20) {
        out += "[secret]";
        i = j;
        continue;
      }
    }
    out.push_back(s[i]);
    ++i;
  }
  return out;
}

std::string narrationInput(const Json& answer, size_t max_findings) {
  Json in = Json::object();
  if (auto q = answer.find("question"); q != answer.end()) in["question"] = *q;
  if (auto w = answer.find("window"); w != answer.end()) in["window"] = *w;
  Json findings = Json::array();
  if (auto f = answer.find("findings"); f != answer.end() && f->is_array()) {
    for (const Json& finding : *f) {
      if (findings.size() >= max_findings) break;
      Json one = Json::object();
      for (const char* field : {"cause", "subject", "confidence", "explanation", "next_steps"}) {
        if (auto it = finding.find(field); it != finding.end()) one[field] = *it;
      }
      Json evidence = Json::array();
      if (auto ev = finding.find("evidence"); ev != finding.end() && ev->is_array()) {
        for (const Json& e : *ev) {
          if (evidence.size() >= 8) break;
          Json item = e;
          if (item.is_object()) item.erase("points");  // the console's charts, not facts
          evidence.push_back(std::move(item));
        }
      }
      one["evidence"] = std::move(evidence);
      findings.push_back(std::move(one));
    }
  }
  in["findings"] = std::move(findings);
  return scrubSecrets(writeJson(in));
}

asio::awaitable<Json> narrate(const http::Router& router, const http::Request& from,
                              const std::string& route, int64_t max_tokens, const Json& answer) {
  Json out = {{"route", route}};
  http::Request req;
  req.method = http::Method::kPost;
  req.method_name = "POST";
  req.target = "/v1/chat/completions";
  req.remote_address = from.remote_address;
  req.max_nesting = from.max_nesting;
  for (const char* header : {"Authorization", "x-api-key"}) {
    if (auto v = from.headers.get(header)) req.headers.add(header, std::string(*v));
  }
  req.headers.add("Content-Type", "application/json");
  req.body = writeJson(Json{{"model", route},
                            {"max_tokens", max_tokens},
                            {"messages",
                             {{{"role", "system"}, {"content", kInstructions}},
                              {{"role", "user"}, {"content", narrationInput(answer)}}}}});
  auto match = router.match(req);
  const auto* handler =
      match.route != nullptr ? std::get_if<http::AsyncHandler>(&match.route->handler) : nullptr;
  if (handler == nullptr) {
    out["error"] = "the gateway is not serving /v1/chat/completions";
    out["status"] = 503;
    co_return out;
  }
  http::Response res = co_await (*handler)(req);
  const Json body = parseJsonOrDiscarded(res.body);
  if (res.status == 200 && body.is_object()) {
    const Json choices = body.value("choices", Json::array());
    if (choices.is_array() && !choices.empty() && choices[0].is_object()) {
      const Json message = choices[0].value("message", Json::object());
      const std::string said = message.is_object() ? text(message, "content") : "";
      if (!said.empty()) {
        out["text"] = said;
        if (auto usage = body.find("usage"); usage != body.end()) out["usage"] = *usage;
        co_return out;
      }
    }
    out["error"] = fmt::format("route {} answered without a summary", route);
    out["status"] = 502;
    co_return out;
  }
  std::string why;
  if (body.is_object()) {
    if (auto e = body.find("error"); e != body.end() && e->is_object()) why = text(*e, "message");
  }
  out["error"] = why.empty() ? fmt::format("route {} answered {}", route, res.status)
                             : fmt::format("route {}: {}", route, why);
  out["status"] = res.status;
  co_return out;
}

}  // namespace purser::diagnose_live
