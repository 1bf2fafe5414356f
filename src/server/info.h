// What `purser serve` says about itself: /healthz, /readyz (the store checked: on PostgreSQL a
// store that cannot be reached is "degraded", not "not ready", since the replicas serve from their
// leases meanwhile) and /metrics, purser_build_info and purser_start_time_seconds, and
// /api/v1/info (version, installation, workers and the warnings the console shows).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "http/builtin.h"
#include "http/metrics.h"
#include "http/router.h"
#include "store/store.h"

namespace purser::server {

struct ServerFacts {
  std::string installation;
  SystemTime started_at;
  size_t workers = 0;
  const std::vector<std::string>* warnings = nullptr;  // read at each request, written at start
  std::function<bool()> draining;
};

Result<void> addServerInfo(http::Router& router, http::MetricsRegistry& metrics,
                           http::Readiness& readiness, store::Store& store, bool shared_store,
                           ServerFacts facts);

}  // namespace purser::server
