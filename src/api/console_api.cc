#include "api/console_api.h"

#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "api/problem.h"
#include "common/clock.h"
#include "common/duration.h"
#include "gateway/gateway.h"
#include "gateway/routing.h"
#include "http/async.h"
#include "observe/observation.h"

namespace purser::api {

namespace {

namespace asio = boost::asio;
using http::Method;
using http::Request;
using http::Response;
using identity::Principal;
using identity::Role;
using nlohmann::json;

constexpr int64_t kDayMs = 24 * 3600 * 1000;
constexpr int64_t kMaxLatencySamples = 100'000;

// A percentile of sorted values (nearest rank).
int64_t percentile(const std::vector<int64_t>& sorted, int pct) {
  if (sorted.empty()) return 0;
  const size_t rank = (sorted.size() * static_cast<size_t>(pct) + 99) / 100;
  return sorted[std::max<size_t>(rank, 1) - 1];
}

struct Stats {
  int64_t requests = 0;
  int64_t errors = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  Money cost;
  std::vector<int64_t> latencies;  // successful requests

  json toJson() {
    std::sort(latencies.begin(), latencies.end());
    const double error_rate =
        requests == 0 ? 0.0 : static_cast<double>(errors) / static_cast<double>(requests);
    return {{"requests", requests},
            {"errors", errors},
            {"error_rate", std::round(error_rate * 10000.0) / 10000.0},
            {"latency_ms",
             {{"p50", latencies.empty() ? json(nullptr) : json(percentile(latencies, 50))},
              {"p95", latencies.empty() ? json(nullptr) : json(percentile(latencies, 95))}}},
            {"tokens", {{"input", input_tokens}, {"output", output_tokens}}},
            {"cost", cost.toString()},
            {"cost_per_1k_requests", requests == 0
                                         ? json(nullptr)
                                         : json(cost.mulDiv(1000, requests, Rounding::kHalfEven)
                                                    .value_or(Money::max())
                                                    .toString())}};
  }
};

bool routeVisible(const gateway::Route& r, const Principal& who) {
  if (who.role == Role::kPlatformAdmin) return true;
  // A tenant admin sees the routes any of its teams may use.
  return gateway::allowsTenant(r, who.tenant_id) &&
         (who.role == Role::kTenantAdmin || gateway::allowsTeam(r, who.team_id));
}

json optionalNumber(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

// The target's state as its metrics judge it when it is scraped; from Purser's own view of its
// traffic otherwise (its failures, and the time to first token it measured over `window`), by
// the same judgement.
std::pair<std::string, std::string> stateOf(const gateway::Route& r, const gateway::Target& t,
                                            const gateway::TargetObserved::Facts& facts,
                                            MonoTime now, Duration window, int64_t requests) {
  const gateway::Condition c = t.observed.condition.load(std::memory_order_relaxed);
  if (c != gateway::Condition::kUnknown || !facts.reason.empty()) {
    return {std::string(gateway::conditionName(c)), facts.reason};
  }
  observe::TargetEvidence e;
  e.cooling_down = gateway::coolingDown(t, now);
  e.consecutive_failures = t.health.consecutive_failures.load(std::memory_order_relaxed);
  e.any_traffic = requests > 0 || t.health.ewma_latency_us.load(std::memory_order_relaxed) != 0;
  std::tie(e.measured_ttft_p95_s, e.measured) = t.health.ttft.quantile(0.95, now - window);
  const observe::TargetHealthJudgement j =
      observe::judgeTarget(e, {.ttft_p95 = r.slo_ttft_p95,
                               .itl_p95 = r.slo_itl_p95,
                               .saturation_queue = r.saturation_queue,
                               .saturation_kv = r.saturation_kv_cache});
  return {std::string(observe::targetStateName(j.state)), j.reason};
}

std::string health(const gateway::Target& t, MonoTime now, int64_t requests) {
  if (gateway::coolingDown(t, now)) return "cooling_down";
  if (t.health.consecutive_failures.load(std::memory_order_relaxed) > 0) return "degraded";
  return requests == 0 && t.health.ewma_latency_us.load(std::memory_order_relaxed) == 0 ? "unknown"
                                                                                        : "healthy";
}

// GET /api/v1/routes[?from=RFC3339]: the model routes the caller may use, with their targets'
// health and, since `from` (default: the last 24 hours), requests, error rate, latency p50/p95,
// tokens and cost — over every tenant for platform admins, the caller's tenant for tenant
// admins, the caller's team otherwise.
asio::awaitable<Response> listRoutes(const Services& s, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  int64_t from_ms = unixMillis(s.clock.now()) - kDayMs;
  if (auto from = req.queryParam("from")) {
    auto t = parseRfc3339(*from);
    if (!t) co_return problem(t.error().withField("from"));
    from_ms = unixMillis(*t);
  }
  ledger::RecentQuery query{.from_ms = from_ms, .limit = kMaxLatencySamples};
  if (who->role != Role::kPlatformAdmin) query.tenant_id = who->tenant_id;
  if (who->role != Role::kPlatformAdmin && who->role != Role::kTenantAdmin) {
    query.team_id = who->team_id;
  }
  // Per route and per (route, provider, model): the target that served the request.
  std::map<std::string, Stats> by_route;
  std::map<std::tuple<std::string, std::string, std::string>, Stats> by_target;
  auto read = co_await http::runBlocking(s.readers, who->tenant_id,
                                         [&] { return s.meter.recentRequests(query); });
  if (!read) co_return problem(read.error());
  for (const ledger::RequestSample& r : *read) {
    const bool ok = r.status >= 200 && r.status < 300;
    for (Stats* st : {&by_route[r.route], &by_target[{r.route, r.provider, r.model}]}) {
      ++st->requests;
      st->errors += ok ? 0 : 1;
      st->input_tokens += r.input_tokens;
      st->output_tokens += r.output_tokens;
      st->cost = st->cost.add(r.cost).value_or(Money::max());
      if (ok) st->latencies.push_back(r.latency_ms);
    }
  }
  json items = json::array();
  if (s.gateway != nullptr) {
    const MonoTime now = s.clock.monotonic();
    for (const gateway::Route* r : s.gateway->routes()) {
      if (!routeVisible(*r, *who)) continue;
      json targets = json::array();
      const size_t configured = gateway::configuredTargets(*r).size();
      const std::vector<gateway::Target*> all = gateway::allTargets(*r);
      for (size_t i = 0; i < all.size(); ++i) {
        const gateway::Target* t = all[i];
        Stats& st = by_target[{r->alias, t->provider->name(), t->model}];
        // Another tenant's replica is shown as one, never by its workload's name or model.
        const bool theirs = !t->owner_tenant.empty() && who->role != Role::kPlatformAdmin &&
                            t->owner_tenant != who->tenant_id;
        json target = {
            {"provider", theirs ? std::string("a replica of another tenant") : t->provider->name()},
            {"kind",
             t->provider->kind() == gateway::ProviderKind::kOpenAi ? "openai" : "anthropic"},
            {"model", theirs ? std::string() : t->model},
            {"weight", t->weight.load(std::memory_order_relaxed)},
            {"health", health(*t, now, st.requests)},
            {"in_flight", t->health.in_flight.load(std::memory_order_relaxed)},
            {"consecutive_failures",
             t->health.consecutive_failures.load(std::memory_order_relaxed)},
            {"priced", t->price != nullptr},
            {"served", i >= configured}};  // a replica the fleet serves
        const gateway::TargetObserved::Facts facts = t->observed.facts();
        auto [state, reason] = stateOf(*r, *t, facts, now, s.observe_window, st.requests);
        const auto measured = t->health.ttft.quantile(0.95, now - s.observe_window).first;
        target["measured_ttft_p95_ms"] =
            measured ? json(std::round(*measured * 1000.0 * 10.0) / 10.0) : json(nullptr);
        target["state"] = state;
        target["reason"] = reason;
        target["queue"] = optionalNumber(facts.queue);
        target["running"] = optionalNumber(facts.running);
        target["kv_cache_usage"] = optionalNumber(facts.kv_cache_usage);
        target["ttft_p95_ms"] = optionalNumber(facts.ttft_p95_ms);
        target["itl_p95_ms"] = optionalNumber(facts.itl_p95_ms);
        target["prefix_cache_hit_rate"] = optionalNumber(facts.prefix_cache_hit_rate);
        target["observed_at"] =
            facts.observed_at_ms > 0
                ? json(formatRfc3339(SystemTime(std::chrono::milliseconds(facts.observed_at_ms))))
                : json(nullptr);
        target["stats"] = st.toJson();
        targets.push_back(std::move(target));
      }
      json route = {
          {"alias", r->alias},
          {"strategy",
           std::string(gateway::strategyName(r->strategy.load(std::memory_order_relaxed)))},
          {"targets", std::move(targets)}};
      route["stats"] = by_route[r->alias].toJson();
      items.push_back(std::move(route));
    }
  }
  co_return jsonResponse(200,
                         {{"data", items},
                          {"from", formatRfc3339(SystemTime(std::chrono::milliseconds(from_ms)))},
                          {"scope", who->role == Role::kPlatformAdmin ? "platform"
                                    : who->role == Role::kTenantAdmin ? "tenant"
                                                                      : "team"}});
}

// GET /api/v1/targets/{provider}/series[?since=DURATION]: what the provider's server reported
// (queue, running, KV-cache usage) over the window (default 15m, within what is kept in full),
// at most 300 points a series, for the console's charts. Visible to whoever may use a route the
// provider serves.
asio::awaitable<Response> targetSeries(const Services& s, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  const std::string provider(req.param("provider").value_or(""));
  bool visible = false;
  if (s.gateway != nullptr) {
    for (const gateway::Route* r : s.gateway->routes()) {
      if (!routeVisible(*r, *who)) continue;
      for (const gateway::Target* t : gateway::allTargets(*r)) {
        const bool theirs = !t->owner_tenant.empty() && who->role != Role::kPlatformAdmin &&
                            t->owner_tenant != who->tenant_id;
        visible = visible || (!theirs && t->provider != nullptr && t->provider->name() == provider);
      }
    }
  }
  if (!visible) {
    co_return problem(Error(ErrorCode::kNotFound,
                            fmt::format("no target of yours is served by \"{}\"", provider)));
  }
  Duration since = std::chrono::minutes(15);
  if (auto text = req.queryParam("since")) {
    auto d = parseDuration(*text);
    if (!d || *d <= Duration(0) || *d > std::chrono::hours(24)) {
      co_return problem(
          invalidArgument("'since' must be a duration up to 24h, such as 15m").withField("since"));
    }
    since = *d;
  }
  const int64_t now_ms = unixMillis(s.clock.now());
  const int64_t from_ms =
      now_ms - std::chrono::duration_cast<std::chrono::milliseconds>(since).count();
  json out = {{"provider", provider},
              {"from", formatRfc3339(SystemTime(std::chrono::milliseconds(from_ms)))}};
  const std::vector<std::pair<const char*, std::vector<std::string>>> facts = {
      {"queue", {"vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"}},
      {"running",
       {"vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"}},
      {"kv_cache_usage",
       {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}}};
  for (const auto& [field, names] : facts) {
    // Summed per scrape over the server's series (one per model name, say).
    std::map<int64_t, double> sum;
    if (s.series != nullptr) {
      for (const std::string& name : names) {
        for (const auto& key : s.series->select(name, {{"target", provider}})) {
          for (const auto& p : s.series->range(key, from_ms, now_ms).points) {
            if (!std::isnan(p.value)) sum[p.t_ms] += p.value;
          }
        }
        if (!sum.empty()) break;
      }
    }
    const size_t step = std::max<size_t>(1, (sum.size() + 299) / 300);
    json points = json::array();
    size_t i = 0;
    for (const auto& [t, v] : sum) {
      if (i++ % step == 0) points.push_back(json::array({t / 1000.0, v}));
    }
    out[field] = std::move(points);
  }
  co_return jsonResponse(200, out);
}

}  // namespace

Result<void> addConsoleApiRoutes(http::Router& router, const Services& services) {
  auto s = std::make_shared<const Services>(services);
  PURSER_TRY(router.addAsync(Method::kGet, "/api/v1/routes",
                             [s](Request& req) { return listRoutes(*s, req); }));
  PURSER_TRY(router.addAsync(Method::kGet, "/api/v1/targets/{provider}/series",
                             [s](Request& req) { return targetSeries(*s, req); }));
  return {};
}

}  // namespace purser::api
