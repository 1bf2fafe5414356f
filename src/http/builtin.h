// The endpoints every Purser server has:
//   GET /healthz  200 "ok" while the process serves requests (liveness).
//   GET /readyz   200 when every readiness check passes and the server is not draining, else 503
//                 with the failing checks listed (load balancers stop sending new work).
//   GET /metrics  Prometheus text exposition of the registry.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "http/metrics.h"
#include "http/router.h"

namespace purser::http {

class Server;

// Named checks that must all pass for the server to be ready. Thread-safe.
class Readiness {
 public:
  using Check = std::function<Result<void>()>;
  void add(std::string name, Check check);
  // A check whose failure is reported ("degraded") without making the server unready: for what
  // the server can go on without for a while, such as a store every replica shares (taking every
  // replica out of a load balancer at once would stop what they can still serve).
  void addDegraded(std::string name, Check check);
  // The failures, as "name: message"; empty when ready.
  std::vector<std::string> failures() const;
  // The failed degraded checks, likewise.
  std::vector<std::string> degraded() const;

 private:
  struct Entry {
    std::string name;
    Check check;
    bool degraded_only = false;
  };
  std::vector<std::string> failed(bool degraded_only) const;

  mutable std::mutex mu_;
  std::vector<Entry> checks_;  // guarded by mu_
};

// `draining` reports whether shutdown has begun (readiness fails from then on).
Result<void> addBuiltinRoutes(Router& router, MetricsRegistry& metrics, Readiness& readiness,
                              std::function<bool()> draining);

}  // namespace purser::http
