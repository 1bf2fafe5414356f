// Gateway: the model API. One endpoint and one key for every model:
//   POST /v1/chat/completions, /v1/completions, /v1/embeddings   (OpenAI-compatible)
//   GET  /v1/models                                              (what the caller's key may use)
//   POST /v1/messages                                            (Anthropic-compatible)
//
// Every request is governed: key -> principal; the model must be routed and allowed (key allow-
// list, route allow-list); rate limits; the worst case is reserved on every wallet in the chain
// (durably) before anything is sent upstream; the actual usage is settled after, durably, before
// the response ends. Upstream targets are tried in the route's order with retries and backoff;
// a stream falls back only before its first byte reached the client. Streams are relayed event
// by event as they arrive; usage is read from the stream (OpenAI include_usage, Anthropic
// message_start/message_delta), and a stream that ends without it is estimated and flagged.
// Errors use each API's own shapes. Every response says how long Purser itself took, in
// `x-purser-overhead-us`.
//
// Thread-safety: handlers run concurrently on every worker; routes and providers are shared
// read-only (their health counters are atomics); each worker has its own upstream client.
#pragma once

#include <utility>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/id.h"
#include "common/random.h"
#include "common/work_pool.h"
#include "gateway/routing.h"
#include "http/client.h"
#include "http/metrics.h"
#include "http/router.h"
#include "http/workers.h"
#include "identity/directory.h"
#include "ledger/budget.h"
#include "ledger/price.h"

namespace purser::gateway {

struct GatewayDeps {
  const Clock& clock;
  Random& random;
  IdGenerator& ids;
  identity::Directory& directory;
  // The one door to the wallets and the rate limits: every request's hold and settlement.
  ledger::Budget& budget;
  const ledger::PriceBook& prices;
  http::WorkerLocal<http::HttpClient>& clients;
  // Budget thresholds a settlement crossed, on the worker that settled: the server audits them and
  // posts them to the alert webhook (it must not block).
  std::function<void(const std::vector<ledger::Alert>& alerts, const std::string& tenant_id)>
      on_alerts = {};
  // Threads that parse and write large bodies off the I/O workers.
  size_t cpu_threads = 1;
  // Where a hold that must wait on a shared store runs (replicas: a rate limit beyond the units
  // held, a budget lease to extend), keyed by the caller's tenant, so that a slow or hung
  // database holds no worker; none: on the worker.
  WorkPool* ledger_waits = nullptr;
  // Where the gateway's own metrics go (none when null).
  http::MetricsRegistry* metrics = nullptr;
};

// Something the gateway decided about a target, kept for diagnosis: kind "target.cooldown",
// object "ROUTE/PROVIDER", at `time_ms` (Unix milliseconds).
struct GatewayEvent {
  int64_t time_ms = 0;
  std::string kind;
  std::string object;
  std::string message;
};

// A target of a route as a reloaded configuration gives it.
struct TargetSpec {
  std::string provider;
  std::string model;
  int64_t weight = 1;
};

class Gateway {
 public:
  Gateway(GatewayDeps deps, std::vector<std::unique_ptr<Provider>> providers,
          std::vector<std::unique_ptr<Route>> routes);
  ~Gateway();

  Result<void> addRoutes(http::Router& router);

  // Sends on requests waiting for a saturated route whose targets now have room; called after
  // the targets' scraped facts change (thread-safe).
  void pumpQueues();

  // Puts a reloaded configuration's strategy and targets of route `alias` in force at once;
  // requests already under way finish where they are. A target in force before (the same
  // provider and model) stays the same target, with its health, and takes the new weight.
  // Errors change nothing: kNotFound for no such route, kInvalidArgument for a target whose
  // provider Purser was not started with, or no targets. Not for concurrent use with itself.
  Result<void> reloadRoute(const std::string& alias, Strategy strategy,
                           const std::vector<TargetSpec>& targets);

  Provider* provider(const std::string& name);
  std::vector<Provider*> providers();
  const Route* route(const std::string& alias) const;
  std::vector<const Route*> routes() const;  // by alias
  // Adds a route at run time (a served model's own, when no configured route has its name);
  // kAlreadyExists when one has the alias. Thread-safe; routes are never removed.
  Result<const Route*> addRoute(std::unique_ptr<Route> route);
  // The newest gateway events (at most kMaxEvents), oldest first; thread-safe.
  static constexpr size_t kMaxEvents = 512;
  std::vector<GatewayEvent> events() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace purser::gateway
