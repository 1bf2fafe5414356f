#include "http/builtin.h"

#include <fmt/format.h>

namespace purser::http {

void Readiness::add(std::string name, Check check) {
  std::lock_guard lock(mu_);
  checks_.push_back({std::move(name), std::move(check), false});
}

void Readiness::addDegraded(std::string name, Check check) {
  std::lock_guard lock(mu_);
  checks_.push_back({std::move(name), std::move(check), true});
}

std::vector<std::string> Readiness::failed(bool degraded_only) const {
  std::vector<Entry> checks;
  {
    std::lock_guard lock(mu_);
    checks = checks_;
  }
  std::vector<std::string> out;
  for (const auto& e : checks) {
    if (e.degraded_only != degraded_only) continue;
    auto r = e.check();
    if (!r) out.push_back(fmt::format("{}: {}", e.name, r.error().message));
  }
  return out;
}

std::vector<std::string> Readiness::failures() const { return failed(false); }

std::vector<std::string> Readiness::degraded() const { return failed(true); }

Result<void> addBuiltinRoutes(Router& router, MetricsRegistry& metrics, Readiness& readiness,
                              std::function<bool()> draining) {
  PURSER_TRY(
      router.add(Method::kGet, "/healthz", [](Request&) { return Response::text(200, "ok\n"); }));
  PURSER_TRY(router.add(Method::kGet, "/readyz", [&readiness, draining](Request&) {
    std::vector<std::string> failures = readiness.failures();
    if (draining && draining()) failures.emplace_back("server: shutting down");
    if (failures.empty()) {
      const std::vector<std::string> degraded = readiness.degraded();
      if (degraded.empty()) return Response::text(200, "ready\n");
      return Response::text(200, fmt::format("ready, degraded\n{}\n", fmt::join(degraded, "\n")));
    }
    return Response::text(503, fmt::format("not ready\n{}\n", fmt::join(failures, "\n")));
  }));
  PURSER_TRY(router.add(Method::kGet, "/metrics", [&metrics](Request&) {
    return Response::text(200, metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  }));
  return {};
}

}  // namespace purser::http
