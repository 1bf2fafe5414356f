// The configuration of `purser serve`: YAML -> typed, validated structs.
//
// Every field but `listen` has a default, so a one-line file `listen: 127.0.0.1:8080` starts a
// working server. Unknown fields are errors (a typo never silently falls back to a default), and
// every error names the file, line, column and field and says what was expected. Later
// components add their sections here. See docs/configuration.md for the reference.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"
#include "common/money.h"
#include "common/result.h"

namespace purser::config {

// A client certificate's subject (RFC 2253, as `openssl x509 -subject -nameopt RFC2253` prints
// it: "CN=ci-runner,O=Acme") and the service account it authenticates as: `service_account` is
// "TENANT/NAME"; `key` names which of the account's keys the certificate stands for (its models,
// limits and wallets apply; revoking the key ends the certificate's access). Without `key` the
// account must have exactly one active key.
struct TlsClientConfig {
  std::string subject;
  std::string service_account;
  std::string key;
};

// HTTPS on `listen`. The certificate and key are re-read on SIGHUP and when either file changes
// (checked every `watch_interval`; 0: only on SIGHUP). `client_ca` turns on mutual TLS: every
// client must present a certificate it signed.
struct TlsConfig {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  std::string min_version = "1.2";  // "1.2" or "1.3"
  std::vector<TlsClientConfig> clients;
  Duration watch_interval = std::chrono::seconds(10);
};

// `crypto.fips`: load OpenSSL's FIPS provider and make `fips=yes` the default property query at
// start (refusing to start without it).
struct CryptoConfig {
  bool fips = false;
};

// Single sign-on (OpenID Connect): people sign in to the console and the CLI with the
// organisation's identity provider; the first `roles` entry whose group they are in makes them a
// user of that tenant and team with that role (created at first sign-in, updated at each).
struct OidcRoleConfig {
  std::string group;
  std::string tenant;  // by name; empty only for platform_admin
  std::string team;    // by name; required for member and team_lead
  std::string role;    // member, team_lead, tenant_admin, platform_admin
};
struct OidcConfig {
  std::string issuer;  // https://..., or http://127.0.0.1 for tests
  std::string client_id;
  std::string client_secret;       // or read from client_secret_file at load
  std::string client_secret_file;  // as written (resolved beside the configuration file)
  std::string redirect_url;        // Purser's /auth/oidc/callback as the provider calls it
  std::vector<std::string> scopes = {"openid", "profile", "email"};
  std::string groups_claim = "groups";
  std::string username_claim = "preferred_username";  // else "email"
  std::string display_name;  // "Sign in with <display_name>"; default: the issuer's host
  std::vector<OidcRoleConfig> roles;
  Duration session_idle_timeout = std::chrono::hours(8);
  Duration session_max_age = std::chrono::hours(24);
  Duration cli_token_max_age = std::chrono::hours(12);  // `purser login --oidc`
};

struct HttpConfig {
  size_t max_body_bytes = 16 * 1024 * 1024;
  size_t max_header_bytes = 32 * 1024;
  size_t max_nesting_depth = 128;  // arrays and objects in JSON and YAML request bodies
  size_t max_connections = 10'000;
  size_t max_requests_per_connection = 10'000;
  Duration idle_timeout = std::chrono::seconds(60);
  Duration header_timeout = std::chrono::seconds(10);
  Duration body_timeout = std::chrono::seconds(60);
  Duration write_timeout = std::chrono::seconds(60);
  Duration drain_timeout = std::chrono::seconds(10);
};

// Where state lives: SQLite in the data directory (the default), or a PostgreSQL server
// (`postgres`: a libpq connection string; a password may come from PGPASSWORD or ~/.pgpass
// rather than the file).
// A replica's name: 1 to 63 letters, digits, '-', '_' or '.'.
bool validReplicaName(std::string_view name);

struct StoreConfig {
  std::string driver = "sqlite";  // "sqlite" or "postgres" (set by `postgres`)
  std::string postgres;
  Duration busy_timeout = std::chrono::seconds(5);  // SQLite's
  int64_t max_connections = 8;                      // PostgreSQL's readers (and one writer)
  // The threads the API's store reads run on (reports, lists of ended work, audit), never an
  // HTTP worker, and how many reads may wait for them before the API answers 503.
  int64_t readers = 2;
  int64_t read_queue = 64;
  // Several replicas sharing one PostgreSQL store: this one's name (default: made once and kept
  // in data_dir/replica), and how long a budget lease outlives its replica (wallet_leases.h).
  std::string replica;
  Duration lease_ttl = std::chrono::seconds(30);
  // PostgreSQL: how often a replica ships its journal to the store (usage events, spend). Longer
  // carries more requests per transaction (fewer round trips each); usage queries on a replica
  // ship what it holds first, and budgets are kept by leases, so neither waits for it.
  Duration ship_interval = std::chrono::milliseconds(100);
};

// The ledger's journal (docs/architecture.md rule 3). `sync`: "batch" (the default: a response
// waits for its record to reach the kernel, and the journal is synced every `sync_interval`, so a
// machine crash loses at most that interval) or "always" (a response also waits for the sync that
// covers it).
struct LedgerConfig {
  std::string sync = "batch";
  Duration sync_interval = std::chrono::milliseconds(5);
};

struct ConsoleConfig {
  bool enabled = true;
};

// Prices per million tokens, as exact decimal strings: input_per_mtok, output_per_mtok,
// cached_input_per_mtok, cache_write_per_mtok, reasoning_per_mtok ("2.50"). Reasoning defaults to
// the output price, the others to zero.
struct ModelPriceConfig {
  std::string provider;
  std::string model;
  Money input;
  Money output;
  Money cached_input;
  Money cache_write;
  std::optional<Money> reasoning;
};

struct ProviderConfig {
  std::string name;
  std::string kind;  // "openai" (any OpenAI-compatible server) or "anthropic"
  std::string base_url;
  std::vector<std::string> api_keys;             // used in turn
  Duration timeout = std::chrono::seconds(120);  // for a whole non-streamed answer
  Duration connect_timeout = std::chrono::seconds(5);
  size_t max_response_bytes = 16 * 1024 * 1024;  // a whole non-streamed answer
  size_t max_event_bytes = 1024 * 1024;          // one server-sent event of a stream
  // Where the server's Prometheus metrics are (scraped every observe.interval; empty: not
  // scraped), and which serving engine's names they use: vllm, sglang or tgi.
  std::string metrics_url;
  std::string engine = "vllm";
  // The GPUs it runs on, as "EXPORTER/GPU" (an observe.exporters name and the GPU's index):
  // an XID error reported on one makes its targets down.
  std::vector<std::string> gpus;
  // HTTPS: extra trust anchors (PEM file; the system store counts too), a client certificate
  // and key (PEM files) for servers that require one, and — for a test bench only — no
  // verification at all (a warning at every start, shown in GET /api/v1/providers).
  std::string ca_file;
  std::string client_cert_file;
  std::string client_key_file;
  bool insecure_skip_verify = false;
};

// MCP tools through the gateway (`/mcp`): the upstream MCP servers and what their tools cost.
struct McpServerConfig {
  std::string name;  // [a-z][a-z0-9-]*: tools are offered as "<name>.<tool>"
  std::string url;   // its Streamable HTTP endpoint
  std::vector<std::pair<std::string, std::string>> headers;  // sent with every request
  std::string api_key;  // the server's own credential (Authorization: Bearer); never a caller's
  // A header that tells the server who is calling (the caller's principal, never their key).
  std::string caller_header;
  // Tool call arguments and answers are written to Purser's log (never stored otherwise).
  bool log_bodies = false;
  Duration timeout = std::chrono::seconds(30);
  size_t max_result_bytes = 1024 * 1024;
  // HTTPS: as for providers.
  std::string ca_file;
  bool insecure_skip_verify = false;
};
struct McpPriceConfig {
  std::string server;
  std::string tool;  // a tool name, or "*" for every tool of the server without a price of its own
  Money per_call;
  Money per_second;  // of call time, charged after the call
};
struct McpConfig {
  std::vector<McpServerConfig> servers;
  std::vector<McpPriceConfig> prices;
};

struct TargetConfig {
  std::string provider;
  std::string model;  // the upstream model name
  int64_t weight = 1;
};

struct RouteConfig {
  std::string model;                  // the name clients use
  std::string strategy = "fallback";  // fallback, weighted, least_latency, least_cost, least_loaded
  std::vector<TargetConfig> targets;
  std::vector<std::string> allow_tenants;  // empty: every tenant
  std::vector<std::string> allow_teams;    // empty: every team
  // Whose fleet workloads may serve it as replicas: tenants ("acme") and teams ("acme/ml"), by
  // name or id; empty: none (a route is never served by a member's pods unless it says so).
  std::vector<std::string> served_by;
  int64_t max_tokens = 4096;  // the output cap reserved for when a request sets none
  int64_t retries = 1;        // retries per target before falling back
  // Service-level objectives its targets are judged by (0: none), and when a target counts as
  // saturated (requests waiting, KV-cache usage 0..1).
  Duration slo_ttft_p95{0};
  Duration slo_itl_p95{0};
  double saturation_queue = 5;
  double saturation_kv_cache = 0.8;
  // While every target is saturated, requests wait in Purser by priority: at most this long,
  // at most this many (0: none wait; every request is refused while saturated).
  Duration queue_max_wait{std::chrono::seconds(30)};
  int64_t queue_max_waiting = 1000;
};

// A Prometheus endpoint scraped beside the providers' own: a GPU node's DCGM exporter.
struct ExporterConfig {
  std::string name;
  std::string url;
  std::string engine = "dcgm";
  Duration interval = std::chrono::seconds(10);
};

// Scraping and the in-memory series it fills (observe/).
struct ObserveConfig {
  Duration interval = std::chrono::seconds(1);       // model servers
  Duration gpu_interval = std::chrono::seconds(10);  // exporters' default
  Duration window = std::chrono::seconds(60);        // percentiles and rates are over this
  Duration raw_retention = std::chrono::minutes(15);
  Duration rollup = std::chrono::minutes(1);
  Duration rollup_retention = std::chrono::hours(6);
  size_t max_series = 20000;
  std::vector<ExporterConfig> exporters;
};

struct AlertsConfig {
  std::string webhook_url;  // empty: alerts go to the audit log only
};

struct GpuPriceConfig {
  std::string flavor;
  Money per_gpu_hour;
};

// One GPU of a node in the fleet's inventory.
struct GpuConfig {
  std::string uuid;  // empty: unknown (executors use indices)
  std::string model;
  int64_t memory_mib = 0;
  int numa = 0;
  int nvlink_domain = -1;  // -1: no NVLink
  bool mig_capable = false;
};

struct TaintConfig {
  std::string key;
  std::string value;
  std::string effect;  // NoSchedule, PreferNoSchedule or NoExecute
};

// A node of the fleet's inventory (a `count` of identical nodes expands to name-0, name-1, ...).
struct NodeConfig {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<TaintConfig> taints;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::string rack;
  std::string block;
  std::vector<GpuConfig> gpus;  // by index
};

// The fleet: Kueue manifests (ResourceFlavor, ClusterQueue, LocalQueue, Cohort,
// WorkloadPriorityClass) loaded at start, before those applied through the API; and the
// hardware workloads are placed on (none: admission by quota alone).
struct FleetConfig {
  // Whether this process may run the fleet engine. Replicas sharing one PostgreSQL run it on
  // one at a time: the one holding a lock in the database leads; the others with `enabled`
  // follow, forward the fleet's API to the leader, and one of them takes the lead when it dies.
  bool enabled = true;
  // Replicas sharing PostgreSQL: where the others reach this one ("http://host:port"); empty:
  // made from `listen` (the machine's host name when it listens on every address).
  std::string advertise;
  // How often a follower tries to take the lead, and the leader checks that it holds it.
  Duration leader_check = std::chrono::seconds(1);
  std::vector<std::string> manifests;  // files, relative to the configuration file
  std::string cycle_mode = "drain";    // drain, or kueue (one head per ClusterQueue per cycle)
  Duration metering_interval = std::chrono::seconds(60);  // GPU time charged at least this often
  std::vector<NodeConfig> nodes;
  std::string placement_policy = "default";  // default, binpack, spread, best_fit, fgd, ...
  int64_t placement_seed = 1;                // ties between equally good nodes, reproducibly
  // Between the polite and the forceful signal when a pod is stopped (preempted or deleted).
  Duration termination_grace = std::chrono::seconds(30);
  // The local executor: pods as processes of this machine, their logs under the data directory.
  int64_t local_max_log_bytes = 8 * 1024 * 1024;  // per log file; a pod keeps two
  int64_t local_max_memory_bytes = 0;             // address space per process; 0: no limit
  int64_t local_max_cpu_seconds = 0;              // CPU time per process; 0: no limit
  // The teams' workspaces: a team's pods work in <working_dir>/<team>; empty: "workspaces" in
  // the data directory (pods see only their own team's).
  std::string local_working_dir;
  // Where local pods' logs, ends and pids are kept; empty: "pods" in the data directory.
  // Replicas on one machine that may take the fleet over from one another share one.
  std::string local_log_dir;
  int64_t local_max_pods = 1024;  // pods running at once on this machine
  // The wall around local pods: "auto" (root: an account per team and namespaces; otherwise user
  // namespaces; refused where neither is possible) or "none" (pods run as Purser, seeing what it
  // sees: warned at start, in /readyz and in the console).
  std::string local_isolation = "auto";
  std::vector<std::string> local_read_only_paths;  // shown read-only to every pod, besides /usr...
  int64_t local_uid_base = 200000;                 // the first team account's uid (and gid)
  int64_t local_uid_count = 65536;                 // how many team accounts there may be
  int64_t local_pids_limit = 4096;                 // processes and threads of one pod at once
  int64_t local_tmp_bytes = int64_t{1} << 30;      // each pod's /tmp and /dev/shm, at most
  // How long an ended pod's files (its logs, exit and pid files) are kept; 0: for ever.
  Duration local_file_retention = std::chrono::hours(24 * 7);
  // A Slurm cluster that runs the workloads of some ResourceFlavors (fleet.slurm).
  struct Slurm {
    std::vector<std::string> flavors;  // whose workloads it runs
    std::string partition, gres_type, conf, bin_dir;
    std::string log_dir;         // shared with the nodes; default data_dir/slurm
    bool inventory = false;      // Slurm's nodes join fleet.nodes
    int64_t gpu_memory_mib = 0;  // each of their GPUs' memory (Slurm does not know it)
    // Team (namespace) -> the Unix account its jobs run as; required (jobs never run as Purser).
    std::map<std::string, std::string> accounts;
  };
  std::optional<Slurm> slurm;
  // A Kubernetes cluster that runs the workloads of some ResourceFlavors (fleet.kubernetes).
  struct Kubernetes {
    std::vector<std::string> flavors;
    std::string kubeconfig;  // a kubeconfig file (its context's server and credentials)
    std::string context;     // its context to use; empty: its current-context
    std::string server;      // https://host:6443 (or the kubeconfig's)
    std::string token;       // bearer token (or token_file)
    std::string token_file;  // a file holding it (a service account's token)
    std::string ca_file;     // the cluster's CA
    bool insecure = false;   // skip verifying the server (labs only)
    std::string default_image;
    bool adopt_jobs = true;      // Jobs users apply with Kueue's queue-name label are queued
    bool inventory = false;      // the cluster's Nodes join fleet.nodes
    int64_t gpu_memory_mib = 0;  // GPU memory where a Node's labels do not say
    // The Pod Security Standard every pod template Purser creates must meet: "baseline" or
    // "restricted" (Kubernetes' own levels; "privileged" is not offered).
    std::string pod_security = "baseline";
    // Whether a template may ask for a service account token (automountServiceAccountToken: true)
    // or name a service account; off, every pod Purser creates runs without one.
    bool service_account_tokens = false;
  };
  std::optional<Kubernetes> kubernetes;
  // What one workload may ask for: pods per pod set, and the least CPU a pod that runs a command
  // must request (in thousandths; a pod of no CPU would hold an executor's slot for nothing).
  int64_t max_pods_per_set = 10000;
  int64_t min_pod_cpu_milli = 1;
  // How often the engines' nodes are read again (fleet.slurm.inventory, ...).
  Duration inventory_refresh = std::chrono::seconds(30);
};

// Diagnosis (`purser diagnose`, GET /api/v1/diagnose). With a narrator, each answer's findings
// are also summarised in plain words by a model, through Purser's own gateway as the asking
// principal (metered to their wallets); the findings are the answer either way.
struct NarratorConfig {
  std::string route;         // a model route of this configuration
  int64_t max_tokens = 400;  // the summary's output cap
};
struct DiagnoseConfig {
  std::optional<NarratorConfig> narrator;
};

struct Config {
  std::string file;    // where this configuration was read from
  std::string listen;  // "host:port" as written
  std::string host;    // parsed from listen
  uint16_t port = 0;   // parsed from listen; 0 picks a free port
  size_t threads = 0;  // I/O threads; 0 = one per core
  std::string data_dir = "./var";
  LogOptions log;
  HttpConfig http;
  std::optional<TlsConfig> tls;
  CryptoConfig crypto;
  std::optional<OidcConfig> oidc;
  StoreConfig store;
  LedgerConfig ledger;
  ConsoleConfig console;
  std::vector<ModelPriceConfig> prices;
  std::vector<GpuPriceConfig> gpu_prices;
  AlertsConfig alerts;
  std::vector<ProviderConfig> providers;
  std::vector<RouteConfig> routes;
  McpConfig mcp;
  ObserveConfig observe;
  FleetConfig fleet;
  DiagnoseConfig diagnose;
};

// Command-line values that replace the file's (and satisfy `listen` when the file has none).
struct Overrides {
  std::optional<std::string> listen;
  std::optional<std::string> data_dir;
};

Result<Config> parseConfig(std::string_view yaml, const std::string& file_name,
                           const Overrides& overrides = {});
Result<Config> loadConfig(const std::string& path, const Overrides& overrides = {});

// "127.0.0.1:8080", "[::1]:8080", "localhost:8080" -> host and port.
Result<std::pair<std::string, uint16_t>> parseListenAddress(std::string_view text);

}  // namespace purser::config
