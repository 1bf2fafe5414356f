// Routing: which upstream serves a request for a model alias, and in what order to try the rest.
//
// A Route maps a client-facing model name to targets (provider + upstream model + weight) and a
// strategy: fallback (in order), weighted (random by weight), least_latency (moving average of
// observed latency), least_cost (cheapest listed price), least_loaded (fewest requests in flight),
// slo (the servers' queues and KV caches and the prompt's prefix affinity; see affinity.h).
// Every strategy yields a full order, so the rest are fallbacks. A target that fails 3 times in a
// row is cooled down (30 s, doubling up to 5 min while it keeps failing): it goes to the back of
// every order until the cooldown ends, then real traffic probes it again.
//
// Selection is pure given the time and the random source; the health counters are atomics, so
// routes are shared by all workers without locks.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/random.h"
#include "common/result.h"
#include "gateway/affinity.h"
#include "http/client.h"
#include "ledger/price.h"

namespace purser::gateway {

enum class ProviderKind { kOpenAi, kAnthropic };
enum class Strategy { kFallback, kWeighted, kLeastLatency, kLeastCost, kLeastLoaded, kSlo };

Result<Strategy> parseStrategy(std::string_view name);
std::string_view strategyName(Strategy s);

// What an upstream may send: an upstream is as hostile as a client.
struct ProviderLimits {
  size_t max_response_bytes = 16 * 1024 * 1024;  // a whole non-streamed answer
  size_t max_event_bytes = 1024 * 1024;          // one server-sent event of a stream
};

// How a provider's HTTPS is checked (GET /api/v1/providers shows it): the profile its requests
// connect with (null: the system's trust store, verified), and what it was made of.
struct ProviderTls {
  std::shared_ptr<const http::TlsProfile> profile;
  std::string ca_file;
  bool client_certificate = false;
  bool insecure_skip_verify = false;
};

// An upstream account: where it is and the keys to use, in turn. Keys can be replaced while
// requests run (thread-safe); they are never logged.
class Provider {
 public:
  Provider(std::string name, ProviderKind kind, std::string base_url, std::vector<std::string> keys,
           Duration timeout, Duration connect_timeout, ProviderLimits limits = {});

  const std::string& name() const { return name_; }
  ProviderKind kind() const { return kind_; }
  const std::string& baseUrl() const { return base_url_; }
  Duration timeout() const { return timeout_; }
  Duration connectTimeout() const { return connect_timeout_; }
  const ProviderLimits& limits() const { return limits_; }
  // Set once, before any request is made.
  void setTls(ProviderTls tls) { tls_ = std::move(tls); }
  const ProviderTls& tls() const { return tls_; }

  // The next key in turn ("" when the provider has none).
  std::string nextKey();
  // Keys set through the API: used instead of the configuration's until cleared.
  void replaceKeys(std::vector<std::string> keys);
  // Goes back to the configuration's keys.
  void clearReplacedKeys();
  // The configuration's keys (at start and on reload); in use unless replaced through the API.
  void setConfiguredKeys(std::vector<std::string> keys);
  size_t keyCount() const;
  // Whether the keys in use were set through the API.
  bool keysReplaced() const;

 private:
  const std::string name_;
  const ProviderKind kind_;
  const std::string base_url_;
  const Duration timeout_;
  const Duration connect_timeout_;
  const ProviderLimits limits_;
  ProviderTls tls_;
  mutable std::mutex mu_;
  std::vector<std::string> keys_;             // in use; guarded by mu_
  std::vector<std::string> configured_keys_;  // guarded by mu_
  bool replaced_ = false;                     // guarded by mu_
  size_t next_ = 0;                           // guarded by mu_
};

// The latest latencies of a target's requests as Purser measured them, each with when it was
// taken (the last 256); thread-safe.
class LatencyWindow {
 public:
  void record(MonoTime at, Duration latency);
  // The `q` quantile (seconds) of those taken at or after `since`, and how many there were.
  std::pair<std::optional<double>, size_t> quantile(double q, MonoTime since) const;

 private:
  static constexpr size_t kCapacity = 256;
  mutable std::mutex mu_;
  std::array<std::pair<MonoTime, double>, kCapacity> ring_{};  // guarded by mu_
  size_t next_ = 0;                                            // guarded by mu_
  size_t size_ = 0;                                            // guarded by mu_
};

struct TargetHealth {
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> ewma_latency_us{0};  // 0: nothing observed yet
  std::atomic<int> consecutive_failures{0};
  std::atomic<int64_t> cooldown_until_ns{0};  // monotonic; 0: not cooling down
  std::atomic<int64_t> cooldown_ns{0};        // the length of the current/last cooldown
  // Time to the upstream's first byte (the whole answer when not streamed), of requests that
  // succeeded: what users of the target feel, whatever the server reports.
  LatencyWindow ttft;
};

// What the server's metrics say of a target (set from observe/'s judgement by the composition
// root, about once a scrape interval). Routing reads `condition` on every request.
enum class Condition : uint8_t { kUnknown, kHealthy, kDegraded, kSaturated, kDown };
std::string_view conditionName(Condition c);

struct TargetObserved {
  std::atomic<Condition> condition{Condition::kUnknown};
  // The latest facts behind it, for the API and the console (nullopt: not reported).
  struct Facts {
    std::string reason;
    std::optional<double> queue;
    std::optional<double> running;
    std::optional<double> kv_cache_usage;
    std::optional<double> ttft_p95_ms;
    std::optional<double> itl_p95_ms;
    std::optional<double> prefix_cache_hit_rate;
    int64_t observed_at_ms = 0;  // 0: never
  };
  void set(Condition c, Facts facts);
  Facts facts() const;
  // The two facts routing scores by, readable without the lock (negative: not reported).
  std::atomic<double> queue{-1};
  std::atomic<double> kv_cache_usage{-1};
  // Requests Purser sent the target since those facts were set, less those that finished since
  // (negative when more finished): how far the facts have moved since (see admission.h).
  std::atomic<int64_t> since{0};

 private:
  mutable std::mutex mu_;
  Facts facts_;  // guarded by mu_
};

struct Target {
  Provider* provider = nullptr;
  std::string model;                          // upstream model name
  std::atomic<int64_t> weight{1};             // a configuration reload may change it
  const ledger::TokenPrice* price = nullptr;  // null when unpriced
  // Whether the usage it reports is believed as it is (a provider's); a replica the fleet serves
  // runs members' code, so its counts are held to what was reserved and what its bytes make
  // certain (gateway.cc, settle).
  bool vouched = true;
  std::string owner_tenant;  // a served replica's tenant ("" for configured targets)
  TargetHealth health;
  TargetObserved observed;
  PrefixIndex prefixes{4096};  // the prompt blocks routed here (the slo strategy)
};

// Targets that join a route and leave it while Purser runs: the replicas of models the fleet
// serves (workloads/). A replica joins once it answers its health check and leaves before its
// pods are stopped; a request that already chose it finishes there (in_flight says how many).
// Targets and providers are never freed while Purser runs (a request may hold one): a replica
// that left is only skipped, and joins again as the same target. Thread-safe.
class ServedTargets {
 public:
  // Makes replica `id` (one key per replica) a target served by `provider` as upstream `model`.
  void join(const std::string& id, std::unique_ptr<Provider> provider, std::string model,
            const ledger::TokenPrice* price, std::string owner_tenant = "");
  // No new request goes to it.
  void leave(const std::string& id);
  // Requests it has in flight (0 for an unknown id).
  int64_t inFlight(const std::string& id) const;
  // The serving targets, in the order they joined.
  std::vector<Target*> serving() const;

 private:
  struct Entry {
    std::unique_ptr<Target> target;
    bool serving = false;
    int64_t joined = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;              // guarded by mu_
  std::vector<std::unique_ptr<Provider>> providers_;  // guarded by mu_; every provider a replica
                                                      // was given
  int64_t joins_ = 0;                                 // guarded by mu_
};

// The configured targets a configuration reload (SIGHUP) put in force for a route, in order.
// Targets are never freed while Purser runs (a request may hold one): a target a reload drops is
// only left out, and one a later reload brings back is the same target, with its health. The
// list in force is read without a lock (one atomic load a request); each reload keeps a new list
// (a few pointers) for the rest of the run. Thread-safe.
class ReloadedTargets {
 public:
  // The targets in force, or null while no reload has changed them (the route's `targets`).
  const std::vector<Target*>* current() const { return current_.load(std::memory_order_acquire); }
  // Puts `order` in force; `added` are targets made for it, kept for the rest of the run.
  void set(std::vector<Target*> order, std::vector<std::unique_ptr<Target>> added);
  // The targets reloads made, oldest first.
  std::vector<Target*> added() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Target>> added_;                // guarded by mu_
  std::vector<std::unique_ptr<std::vector<Target*>>> lists_;  // guarded by mu_
  std::atomic<const std::vector<Target*>*> current_{nullptr};
};

class AdmissionQueue;

struct Route {
  std::string alias;
  std::atomic<Strategy> strategy{Strategy::kFallback};  // a configuration reload may change it
  // The targets it was built with; configuredTargets() says which are in force now.
  std::vector<std::unique_ptr<Target>> targets;
  std::shared_ptr<ReloadedTargets> reloaded = std::make_shared<ReloadedTargets>();
  std::vector<std::string> allow_tenants;
  std::vector<std::string> allow_teams;
  std::vector<std::string>
      served_by;  // tenants and tenant/team names (or ids) whose replicas may join
  // A tenant's own route, made for a model its workloads serve (no configured route has the
  // name): it exists only for those its allow lists admit (404 for anyone else).
  bool owned = false;
  int64_t max_tokens = 4096;
  int64_t retries = 1;
  // The objectives its targets are judged by (0: none) and when one counts as saturated.
  Duration slo_ttft_p95{0};
  Duration slo_itl_p95{0};
  double saturation_queue = 5;
  double saturation_kv_cache = 0.8;
  // Where requests wait while every target is saturated (admission.h), and for how long at most.
  std::shared_ptr<AdmissionQueue> queue;
  Duration queue_max_wait{std::chrono::seconds(30)};
  // Replicas of models the fleet serves (after the configured targets in every order's start).
  std::shared_ptr<ServedTargets> served = std::make_shared<ServedTargets>();
};

// The configured targets in force: as built, or as the latest reload set them.
std::vector<Target*> configuredTargets(const Route& route);
// The configured targets, then the serving replicas.
std::vector<Target*> allTargets(const Route& route);

// Whether a route's allow lists admit a tenant / a team (an empty list admits everyone).
bool allowsTenant(const Route& route, const std::string& tenant_id);
bool allowsTeam(const Route& route, const std::string& team_id);

// The order to try `route`'s targets in at `now`: the strategy's order, then saturated targets,
// then those down or cooling down (tried only when nothing else is left).
// `prompt_blocks` (prefixBlocks() of the prompt) are read by the slo strategy only.
std::vector<Target*> orderTargets(const Route& route, MonoTime now, Random& random,
                                  std::span<const uint64_t> prompt_blocks = {});

bool coolingDown(const Target& t, MonoTime now);
void recordSuccess(Target& t, Duration latency);
// Counts a failed try; returns true when it put the target in a cooldown.
bool recordFailure(Target& t, MonoTime now);

}  // namespace purser::gateway
