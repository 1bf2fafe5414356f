// What `purser serve` says about itself: see info.h.
#include "server/info.h"

#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "common/json.h"

namespace purser::server {

void StoreProbe::check() {
  {
    std::lock_guard lock(mu_);
    waiting_ = clock_.monotonic();
  }
  Result<void> answer = store_.read([](store::Tx& tx) -> Result<void> {
    PURSER_TRY(tx.query("SELECT 1"));
    return {};
  });
  std::lock_guard lock(mu_);
  last_ = std::move(answer);
  waiting_.reset();
}

Result<void> StoreProbe::last() const {
  std::lock_guard lock(mu_);
  if (waiting_ && clock_.monotonic() - *waiting_ > kPatience) {
    const auto s = std::chrono::duration_cast<std::chrono::seconds>(clock_.monotonic() - *waiting_);
    return fail(unavailable(fmt::format("the store has not answered a check for {} s", s.count())));
  }
  return last_;
}

Result<void> addServerInfo(http::Router& router, http::MetricsRegistry& metrics,
                           http::Readiness& readiness, const StoreProbe& store, bool shared_store,
                           ServerFacts facts) {
  const auto& build = cli::buildInfo();
  metrics
      .gaugeFamily("purser_build_info", "Version of the running purser (always 1).",
                   {"version", "commit"})
      .labels({build.version, build.commit})
      .set(1);
  metrics.gauge("purser_start_time_seconds", "When this process started, in Unix seconds.")
      .set(static_cast<double>(unixMillis(facts.started_at)) / 1000.0);

  const auto store_check = [&store]() -> Result<void> { return store.last(); };
  if (shared_store) {
    // PostgreSQL down: every replica goes on serving from its budget leases and rate-limit units
    // until they run out, so none is taken out of its load balancer for it; /readyz says
    // "degraded" with the reason, and purser_store_up is 0.
    readiness.addDegraded("store", store_check);
    auto& up = metrics.gauge("purser_store_up",
                             "1 when the last check reached the store, 0 when it did not.");
    metrics.addCollector([&up, store_check] { up.set(store_check() ? 1 : 0); });
  } else {
    readiness.add("store", store_check);
  }
  PURSER_TRY(http::addBuiltinRoutes(router, metrics, readiness, facts.draining));
  PURSER_TRY(router.add(http::Method::kGet, "/api/v1/info", [facts](http::Request&) {
    const auto& build = cli::buildInfo();
    nlohmann::json body = {
        {"name", "purser"},
        {"version", build.version},
        {"commit", build.commit},
        {"installation_id", facts.installation},
        {"started_at", formatRfc3339(facts.started_at)},
        {"workers", facts.workers},
        {"warnings", *facts.warnings},
    };
    return http::Response::json(200, writeJson(body));
  }));
  return {};
}

}  // namespace purser::server
