#include "api/diagnose_api.h"

#include <utility>

#include <fmt/format.h>
#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <set>

#include "api/problem.h"
#include "common/duration.h"
#include "diagnose_io/case_io.h"
#include "diagnose_live/narrate.h"

namespace purser::api {

namespace {

namespace asio = boost::asio;
using http::Method;
using http::Request;
using http::Response;
using identity::Principal;
using identity::Role;

const std::set<std::string> kKinds = {"route", "deployment", "workload", "queue",
                                      "team",  "user",       "node",     "fleet"};
const std::set<std::string> kSymptoms = {"slow", "errors", "pending", "over_budget", "idle", "any"};
constexpr int64_t kDefaultSinceMs = 30 * 60 * 1000;

struct Context {
  const Services s;
  DiagnoseOptions o;
  diagnose_live::Investigator investigator;
  const http::Router* router = nullptr;  // the gateway, for narration
};

asio::awaitable<Response> handle(const Context& ctx, Request& req) {
  const Services& s = ctx.s;
  auto who_or = authenticate(s, req);
  if (!who_or) co_return problem(who_or.error());
  const Principal who = *who_or;
  const bool admin = who.role == Role::kPlatformAdmin;

  // --- The question -------------------------------------------------------------------------
  const std::string kind(req.queryParam("kind").value_or(""));
  if (kind.empty()) {
    co_return problem(400,
                      "say what to diagnose: kind=route, deployment, workload, queue, team, user, "
                      "node or fleet",
                      "kind");
  }
  if (!kKinds.contains(kind)) {
    co_return problem(400,
                      fmt::format("unknown kind \"{}\": use route, deployment, workload, queue, "
                                  "team, user, node or fleet",
                                  kind),
                      "kind");
  }
  const std::string symptom(req.queryParam("symptom").value_or("any"));
  if (!kSymptoms.contains(symptom)) {
    co_return problem(400,
                      fmt::format("unknown symptom \"{}\": use slow, errors, pending, over_budget, "
                                  "idle or any",
                                  symptom),
                      "symptom");
  }
  const std::string format(req.queryParam("format").value_or("json"));
  if (format != "json" && format != "case") {
    co_return problem(400,
                      fmt::format("unknown format \"{}\": use json (the findings) or case", format),
                      "format");
  }
  if (format == "case" && !admin) {
    co_return problem(403,
                      "the case holds every series, event and log line Purser keeps, of every "
                      "tenant; only a platform admin may take it",
                      "format");
  }
  bool narrate = !ctx.o.narrator_route.empty();
  if (auto n = req.queryParam("narrate")) {
    if (*n != "true" && *n != "false") {
      co_return problem(400, fmt::format("'narrate' is true or false, not \"{}\"", *n), "narrate");
    }
    if (*n == "true" && ctx.o.narrator_route.empty()) {
      co_return problem(400,
                        "no narrator is configured (diagnose.narrator.route in the configuration)",
                        "narrate");
    }
    narrate = *n == "true";
  }
  std::string name(req.queryParam("name").value_or(""));
  if (kind == "fleet") {
    if (!name.empty() && name != "*") {
      co_return problem(400, "a fleet question names nothing (leave name out)", "name");
    }
    name = "*";
  } else if (name.empty()) {
    co_return problem(400, fmt::format("name the {} to diagnose", kind), "name");
  }
  if (kind == "workload") {
    const size_t slash = name.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == name.size() ||
        name.find('/', slash + 1) != std::string::npos) {
      co_return problem(400, "a workload is named NAMESPACE/NAME, such as ml/train-7", "name");
    }
  }
  const int64_t retention_ms = ctx.investigator.retentionMs();
  int64_t since_ms = std::min(kDefaultSinceMs, retention_ms);
  if (auto text = req.queryParam("since")) {
    auto d = parseDuration(*text);
    const int64_t ms =
        d ? std::chrono::duration_cast<std::chrono::milliseconds>(*d).count() : int64_t{-1};
    if (!d || ms <= 0) {
      co_return problem(
          400, fmt::format("'since' must be a duration such as 30m or 2h, not \"{}\"", *text),
          "since");
    }
    if (ms > retention_ms) {
      co_return problem(400,
                        fmt::format("'since' reaches past what is kept: at most {} s of series",
                                    retention_ms / 1000),
                        "since");
    }
    since_ms = ms;
  }
  const diagnose_live::Question question{kind, name, symptom, since_ms};
  auto gathered = co_await ctx.investigator.gather(who, question);
  if (!gathered) co_return problem(gathered.error());
  if (format == "case") {
    // What the engine would answer from, to replay with `purser diagnose --case FILE`.
    std::string text = diagnose::writeCase(gathered->c);
    if (text.size() > ctx.o.max_case_bytes) {
      co_return problem(422,
                        fmt::format("the case would be {} MiB, more than the {} MiB a reply may "
                                    "carry; ask about a shorter window (since)",
                                    text.size() >> 20, ctx.o.max_case_bytes >> 20),
                        "since");
    }
    co_return http::Response::text(200, std::move(text), "application/yaml");
  }
  Json body = ctx.investigator.answer(who, question, std::move(*gathered));
  if (narrate && ctx.router != nullptr) {
    // Given the answer as the caller sees it: nothing they may not see reaches the model.
    body["narration"] = co_await diagnose_live::narrate(*ctx.router, req, ctx.o.narrator_route,
                                                        ctx.o.narrator_max_tokens, body);
  }
  co_return jsonResponse(200, body);
}

}  // namespace

Result<void> addDiagnoseRoutes(http::Router& router, const Services& services,
                               DiagnoseOptions options) {
  diagnose_live::Sources sources{services.clock,   services.directory, services.wallets,
                                 services.records, services.series,    services.gateway,
                                 services.readers, options.fleet,      options.providers};
  auto ctx = std::make_shared<const Context>(Context{
      services, std::move(options), diagnose_live::Investigator(std::move(sources)), &router});
  PURSER_TRY(router.addAsync(Method::kGet, "/api/v1/diagnose",
                             [ctx](Request& req) { return handle(*ctx, req); }));
  return {};
}

}  // namespace purser::api
