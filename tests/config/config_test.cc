#include "config/config.h"

#include <gtest/gtest.h>

#include "fakes/temp_dir.h"

namespace purser::config {
namespace {

TEST(ConfigTest, OneLineFileGivesAWorkingConfigurationWithDefaults) {
  auto c = parseConfig("listen: 127.0.0.1:9000\n", "min.yaml");
  ASSERT_TRUE(c.has_value()) << c.error().toString();
  EXPECT_EQ(c->host, "127.0.0.1");
  EXPECT_EQ(c->port, 9000);
  EXPECT_EQ(c->threads, 0u);
  EXPECT_EQ(c->data_dir, "./var");
  EXPECT_EQ(c->http.max_body_bytes, 16u * 1024 * 1024);
  EXPECT_EQ(c->http.header_timeout, std::chrono::seconds(10));
  EXPECT_FALSE(c->tls.has_value());
  EXPECT_FALSE(c->crypto.fips);
  EXPECT_EQ(c->store.driver, "sqlite");
  EXPECT_TRUE(c->console.enabled);
}

TEST(ConfigTest, ReadsEveryField) {
  auto c = parseConfig(R"(
listen: "[::1]:8443"
threads: 4
data_dir: /srv/purser
log: {level: debug, format: json}
http:
  max_body_bytes: 8Mi
  max_header_bytes: 65536
  max_connections: 500
  max_requests_per_connection: 0
  idle_timeout: 90s
  header_timeout: 5s
  body_timeout: 1m
  write_timeout: 45s
  drain_timeout: 2.5s
tls:
  cert: /etc/purser/cert.pem
  key: /etc/purser/key.pem
  client_ca: clients-ca.pem
  min_version: "1.3"
  watch_interval: 30s
  clients:
    - {subject: "CN=ci-runner,O=Acme", service_account: acme/ci-bot, key: mtls}
    - {subject: "CN=batch,O=Acme", service_account: acme/batch}
crypto: {fips: false}
store: {driver: sqlite, busy_timeout: 250ms}
ledger: {sync: always, sync_interval: 2ms}
console: {enabled: false}
)",
                       "full.yaml");
  ASSERT_TRUE(c.has_value()) << c.error().toString();
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, 8443);
  EXPECT_EQ(c->threads, 4u);
  EXPECT_EQ(c->data_dir, "/srv/purser");
  EXPECT_EQ(c->log.level, "debug");
  EXPECT_EQ(c->log.format, LogFormat::kJson);
  EXPECT_EQ(c->http.max_body_bytes, 8u * 1024 * 1024);
  EXPECT_EQ(c->http.max_header_bytes, 65536u);
  EXPECT_EQ(c->http.max_connections, 500u);
  EXPECT_EQ(c->http.max_requests_per_connection, 0u);
  EXPECT_EQ(c->http.idle_timeout, std::chrono::seconds(90));
  EXPECT_EQ(c->http.drain_timeout, std::chrono::milliseconds(2500));
  ASSERT_TRUE(c->tls.has_value());
  EXPECT_EQ(c->tls->cert_file, "/etc/purser/cert.pem");
  EXPECT_EQ(c->tls->key_file, "/etc/purser/key.pem");
  EXPECT_EQ(c->tls->client_ca_file, "clients-ca.pem");  // beside full.yaml, which has no folder
  EXPECT_EQ(c->tls->min_version, "1.3");
  EXPECT_EQ(c->tls->watch_interval, std::chrono::seconds(30));
  ASSERT_EQ(c->tls->clients.size(), 2u);
  EXPECT_EQ(c->tls->clients[0].subject, "CN=ci-runner,O=Acme");
  EXPECT_EQ(c->tls->clients[0].service_account, "acme/ci-bot");
  EXPECT_EQ(c->tls->clients[0].key, "mtls");
  EXPECT_EQ(c->tls->clients[1].key, "");
  EXPECT_EQ(c->store.busy_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(c->ledger.sync, "always");
  EXPECT_EQ(c->ledger.sync_interval, std::chrono::milliseconds(2));
  EXPECT_FALSE(c->console.enabled);
}

struct BadCase {
  const char* yaml;
  const char* expected;  // the whole error: file:line:column: field: message
};

class ConfigErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ConfigErrorTest, NamesFileLineFieldAndWhatWasExpected) {
  auto c = parseConfig(GetParam().yaml, "purser.yaml");
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().toString(), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ConfigErrorTest,
    ::testing::Values(
        // A wrong type.
        BadCase{"listen: 127.0.0.1:80\nthreads: many\n",
                "purser.yaml:2:10: threads: expected a whole number, got \"many\""},
        BadCase{"listen: 127.0.0.1:80\nhttp:\n  idle_timeout: [1, 2]\n",
                "purser.yaml:3:17: http.idle_timeout: expected a duration such as \"30s\", "
                "\"250ms\" or \"5m\", got a list"},
        BadCase{"listen: 127.0.0.1:80\nconsole:\n  enabled: yes please\n",
                "purser.yaml:3:12: console.enabled: expected true or false, got \"yes please\""},
        BadCase{"listen: 127.0.0.1:80\nhttp: 5\n",
                "purser.yaml:2:7: http: expected a mapping of fields, got \"5\""},
        // An unknown key, with a suggestion when it looks like a typo.
        BadCase{"listen: 127.0.0.1:80\nhttp:\n  max_bdy_bytes: 10\n",
                "purser.yaml:3:3: http.max_bdy_bytes: unknown field; did you mean "
                "\"max_body_bytes\"?"},
        BadCase{
            "listen: 127.0.0.1:80\nflavours: []\n",
            "purser.yaml:2:1: flavours: unknown field; expected one of: alerts, console, crypto, "
            "data_dir, diagnose, fleet, gpu_prices, http, ledger, listen, log, mcp, observe, "
            "oidc, prices, providers, routes, store, threads, tls"},
        // PostgreSQL needs somewhere to connect to.
        BadCase{"listen: 127.0.0.1:80\nstore: {driver: postgres}\n",
                "purser.yaml:2:8: store.postgres: the postgres driver needs a connection string, "
                "such as \"postgresql://purser@db:5432/purser\""},
        // The narrator names a route of this file.
        BadCase{"listen: 127.0.0.1:80\ndiagnose: {narrator: {route: summary}}\n",
                "purser.yaml:2:30: diagnose.narrator.route: no route \"summary\" in routes"},
        BadCase{"listen: 127.0.0.1:80\ndiagnose: {narrator: {max_tokens: 100}}\n",
                "purser.yaml:2:22: diagnose.narrator.route: required field is missing"},
        // The ledger's durability.
        BadCase{"listen: 127.0.0.1:80\nledger: {sync: never}\n",
                "purser.yaml:2:16: ledger.sync: expected one of batch, always, got \"never\""},
        BadCase{"listen: 127.0.0.1:80\nledger: {sync_interval: 5s}\n",
                "purser.yaml:2:25: ledger.sync_interval: must be at most 1s; it bounds what a "
                "machine crash can lose"},
        // A field given twice: one of them would be silently ignored.
        BadCase{"listen: 127.0.0.1:80\nthreads: 2\nthreads: 8\n",
                "purser.yaml:3:1: threads: given twice (first on line 2); give a field once"},
        BadCase{"listen: 127.0.0.1:80\nhttp:\n  idle_timeout: 5s\n  idle_timeout: 9s\n",
                "purser.yaml:4:3: http.idle_timeout: given twice (first on line 3); give a field "
                "once"},
        // A missing required field.
        BadCase{"threads: 2\n", "purser.yaml:1:1: listen: required field is missing"},
        BadCase{"listen: 127.0.0.1:80\ntls:\n  cert: c.pem\n",
                "purser.yaml:3:3: tls.key: required field is missing"},
        BadCase{"listen: 127.0.0.1:80\ntls: {cert: c.pem, key: k.pem, min_version: \"1.1\"}\n",
                "purser.yaml:2:45: tls.min_version: expected one of 1.2, 1.3, got \"1.1\""},
        BadCase{"listen: 127.0.0.1:80\ntls: {cert: c.pem, key: k.pem, clients: [{subject: CN=a, "
                "service_account: acme/a}]}\n",
                "purser.yaml:2:6: tls.clients: mapping client certificates needs tls.client_ca "
                "(the CA that signs them)"},
        BadCase{"listen: 127.0.0.1:80\ntls: {cert: c.pem, key: k.pem, client_ca: ca.pem, clients: "
                "[{subject: CN=a, service_account: a}]}\n",
                "purser.yaml:2:94: tls.clients[0].service_account: expected TENANT/NAME, e.g. "
                "acme/ci-bot"},
        BadCase{"listen: 127.0.0.1:80\nproviders:\n  - {name: p, kind: openai, base_url: "
                "https://x, client_cert: c.pem}\n",
                "purser.yaml:3:5: providers[0]: client_cert and client_key go together"},
        BadCase{"listen: 127.0.0.1:80\nhttp:\n  tls: {cert_file: c.pem, key_file: k.pem}\n",
                "purser.yaml:3:3: http.tls: unknown field; expected one of: body_timeout, "
                "drain_timeout, header_timeout, idle_timeout, max_body_bytes, max_connections, "
                "max_header_bytes, max_nesting_depth, max_requests_per_connection, write_timeout"},
        BadCase{"",
                "purser.yaml:1:1: listen: required field is missing (the file is empty); for "
                "example: listen: 127.0.0.1:8080"},
        // Values out of range or malformed.
        BadCase{"listen: 127.0.0.1:80\nthreads: 5000\n",
                "purser.yaml:2:10: threads: expected a whole number from 0 to 1024, got 5000"},
        BadCase{"listen: 127.0.0.1:80\nhttp: {max_body_bytes: 2Gi}\n",
                "purser.yaml:2:24: http.max_body_bytes: expected a size from 1 to 1073741824 "
                "bytes, got \"2Gi\""},
        BadCase{"listen: 127.0.0.1:80\nlog: {level: loud}\n",
                "purser.yaml:2:14: log.level: expected one of trace, debug, info, warn, error, "
                "critical, off, got \"loud\""},
        BadCase{"listen: example.com:80\n",
                "purser.yaml:1:9: listen: invalid listen address \"example.com:80\": the host must "
                "be an IP address or localhost; expected host:port such as 127.0.0.1:8080"},
        BadCase{"listen: 127.0.0.1\n",
                "purser.yaml:1:9: listen: invalid listen address \"127.0.0.1\": the port is "
                "missing; expected host:port such as 127.0.0.1:8080"},
        BadCase{"listen: 127.0.0.1:80\nfleet: {cycle_mode: fast}\n",
                "purser.yaml:2:21: fleet.cycle_mode: expected one of drain, kueue, got \"fast\""},
        BadCase{"listen: 127.0.0.1:80\nfleet: {metering_interval: 10ms}\n",
                "purser.yaml:2:28: fleet.metering_interval: must be at least 1s"},
        BadCase{"listen: 127.0.0.1:80\nfleet: {placement: {policy: tidy}}\n",
                "purser.yaml:2:29: fleet.placement.policy: expected one of default, binpack, "
                "spread, best_fit, fgd, packing, clustering, dotprod, random, got \"tidy\""},
        BadCase{"listen: 127.0.0.1:80\nfleet:\n  nodes: [{name: a, cpu: lots}]\n",
                "purser.yaml:3:26: fleet.nodes[0].cpu: expected a quantity of 0 or more such as "
                "\"64\" or \"500m\", got \"lots\""},
        BadCase{"listen: 127.0.0.1:80\nfleet:\n  nodes: [{name: a, gpus: {count: 2, model: T4}}]\n",
                "purser.yaml:3:27: fleet.nodes[0].gpus.memory: required: each GPU's memory, such "
                "as 80Gi"},
        BadCase{"listen: 127.0.0.1:80\nfleet:\n  nodes: [{name: a, gpus: {count: 2, model: T4, "
                "memory: 16Gi, nvlink_domains: [[0, 2]]}}]\n",
                "purser.yaml:3:84: fleet.nodes[0].gpus.nvlink_domains[0][1]: expected a GPU index "
                "from 0 to 1"},
        // Broken YAML.
        BadCase{"listen: [127.0.0.1:80\n",
                "purser.yaml:2:1: invalid YAML: did not find expected ',' or ']' (while parsing "
                "a flow sequence)"}));

TEST(ConfigTest, ReadsPricesAsExactDecimals) {
  auto c = parseConfig(R"(
listen: 127.0.0.1:80
prices:
  - {provider: openai, model: gpt-4o, input_per_mtok: "2.50", output_per_mtok: "10.00", cached_input_per_mtok: "1.25"}
  - {provider: anthropic, model: claude-sonnet, input_per_mtok: 3, output_per_mtok: 15, reasoning_per_mtok: "15.00"}
gpu_prices:
  - {flavor: h100, per_gpu_hour: "2.40"}
)",
                       "p.yaml");
  ASSERT_TRUE(c.has_value()) << c.error().toString();
  ASSERT_EQ(c->prices.size(), 2u);
  EXPECT_EQ(c->prices[0].output.toString(), "10.00");
  EXPECT_EQ(c->prices[0].cached_input.toString(), "1.25");
  EXPECT_FALSE(c->prices[0].reasoning.has_value());
  EXPECT_EQ(c->prices[1].input.toString(), "3.00");
  EXPECT_EQ(c->gpu_prices[0].per_gpu_hour.toString(), "2.40");

  auto bad = parseConfig(
      "listen: 127.0.0.1:80\nprices:\n  - {provider: a, model: m, input_per_mtok: \"1.2.3\", "
      "output_per_mtok: 1}\n"
      "  - {provider: a, model: m, input_per_mtok: 1, output_per_mtok: 1}\n",
      "p.yaml");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().toString().find(
                "p.yaml:3:45: prices[0].input_per_mtok: invalid amount \"1.2.3\""),
            std::string::npos)
      << bad.error().toString();
  EXPECT_NE(bad.error().toString().find("a m is priced twice"), std::string::npos);
}

TEST(ConfigTest, ReadsProvidersAndRoutesOfTheContract) {
  auto c = parseConfig(R"(
listen: 127.0.0.1:0
providers:
  - {name: sim-a, kind: openai, base_url: http://127.0.0.1:9001/v1, api_keys: [sk-test-1]}
  - {name: sim-b, kind: anthropic, base_url: http://127.0.0.1:9002, api_keys: [sk-test-2, sk-3]}
routes:
  - model: chat-default
    strategy: fallback
    targets: [{provider: sim-a, model: sim-small}, {provider: sim-b, model: sim-claude}]
  - model: cheap
    strategy: weighted
    allow: {teams: [ml]}
    targets: [{provider: sim-a, model: sim-small, weight: 3}]
prices:
  - {provider: sim-a, model: sim-small, input_per_mtok: "0.15", output_per_mtok: "0.60"}
)",
                       "gw.yaml");
  ASSERT_TRUE(c.has_value()) << c.error().toString();
  ASSERT_EQ(c->providers.size(), 2u);
  EXPECT_EQ(c->providers[1].kind, "anthropic");
  EXPECT_EQ(c->providers[1].api_keys, (std::vector<std::string>{"sk-test-2", "sk-3"}));
  ASSERT_EQ(c->routes.size(), 2u);
  EXPECT_EQ(c->routes[0].targets[1].model, "sim-claude");
  EXPECT_EQ(c->routes[1].targets[0].weight, 3);
  EXPECT_EQ(c->routes[1].allow_teams, std::vector<std::string>{"ml"});

  auto bad = parseConfig(R"(
listen: 127.0.0.1:0
providers:
  - {name: a, kind: grpc, base_url: ftp://x}
routes:
  - {model: m, strategy: random, targets: [{provider: nobody, model: x}]}
)",
                         "gw.yaml");
  ASSERT_FALSE(bad.has_value());
  const std::string text = bad.error().toString();
  EXPECT_NE(text.find("providers[0].kind: expected one of openai, anthropic, got \"grpc\""),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("providers[0].base_url: expected an http:// or https:// URL"),
            std::string::npos);
  EXPECT_NE(text.find("routes[0].strategy: expected one of fallback, weighted"), std::string::npos);
  EXPECT_NE(text.find("routes[0].targets[0].provider: no provider named \"nobody\""),
            std::string::npos);
}

TEST(ConfigTest, ReadsWhatIsScrapedAndHowTargetsAreJudged) {
  auto c = parseConfig(R"(
listen: 127.0.0.1:0
providers:
  - {name: a, kind: openai, base_url: http://10.0.0.5:8000/v1,
     metrics_url: http://10.0.0.5:8000/metrics, engine: sglang}
  - {name: b, kind: openai, base_url: http://10.0.0.6:8000/v1}
routes:
  - model: chat
    targets: [{provider: a, model: m}]
    slo: {ttft_p95: 2s, itl_p95: 100ms}
    saturation: {queue: 8, kv_cache: 0.9}
    queue: {max_wait: 5s, max_waiting: 20}
observe:
  interval: 500ms
  window: 30s
  max_series: 5000
  retention: {raw: 5m, rollup: 1h, rollup_every: 30s}
  exporters: [{name: node-1, url: http://10.0.0.5:9400/metrics}, {name: n2, url: http://x/m, interval: 5s}]
)",
                       "o.yaml");
  ASSERT_TRUE(c.has_value()) << c.error().toString();
  EXPECT_EQ(c->providers[0].metrics_url, "http://10.0.0.5:8000/metrics");
  EXPECT_EQ(c->providers[0].engine, "sglang");
  EXPECT_EQ(c->providers[1].metrics_url, "");
  EXPECT_EQ(c->providers[1].engine, "vllm");
  EXPECT_EQ(c->routes[0].slo_ttft_p95, std::chrono::seconds(2));
  EXPECT_EQ(c->routes[0].slo_itl_p95, std::chrono::milliseconds(100));
  EXPECT_EQ(c->routes[0].saturation_queue, 8);
  EXPECT_DOUBLE_EQ(c->routes[0].saturation_kv_cache, 0.9);
  EXPECT_EQ(c->routes[0].queue_max_wait, std::chrono::seconds(5));
  EXPECT_EQ(c->routes[0].queue_max_waiting, 20);
  EXPECT_EQ(c->observe.interval, std::chrono::milliseconds(500));
  EXPECT_EQ(c->observe.window, std::chrono::seconds(30));
  EXPECT_EQ(c->observe.max_series, 5000u);
  EXPECT_EQ(c->observe.raw_retention, std::chrono::minutes(5));
  EXPECT_EQ(c->observe.rollup_retention, std::chrono::hours(1));
  EXPECT_EQ(c->observe.rollup, std::chrono::seconds(30));
  ASSERT_EQ(c->observe.exporters.size(), 2u);
  EXPECT_EQ(c->observe.exporters[0].engine, "dcgm");
  EXPECT_EQ(c->observe.exporters[0].interval, std::chrono::seconds(10));
  EXPECT_EQ(c->observe.exporters[1].interval, std::chrono::seconds(5));

  // Defaults when nothing is said.
  auto plain = parseConfig("listen: 127.0.0.1:1\n", "p.yaml");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->observe.interval, std::chrono::seconds(1));
  EXPECT_EQ(plain->observe.max_series, 20000u);

  auto bad = parseConfig(R"(
listen: 127.0.0.1:0
providers:
  - {name: a, kind: openai, base_url: http://x/v1, engine: triton}
routes:
  - {model: chat, targets: [{provider: a, model: m}], saturation: {kv_cache: 2, queue: nope},
     queue: {max_wait: 11m, max_waiting: -1}}
observe: {window: 1ms, exporters: [{name: a, url: x}], frequency: 1s}
)",
                         "o.yaml");
  ASSERT_FALSE(bad);
  const std::string text = bad.error().toString();
  for (const char* expected :
       {"providers[0].engine: expected one of vllm, sglang, tgi",
        "routes[0].saturation.kv_cache: "
        "expected a number from 0.01 to 1, got 2",
        "routes[0].saturation.queue: expected a number, got",
        "routes[0].queue.max_wait: must be between 0s and 10m", "routes[0].queue.max_waiting: ",
        "observe.window", "observe.exporters[0].url: expected an http:// or https:// URL",
        "observe.exporters[0].name: \"a\" already names a provider or an exporter",
        "observe.frequency: unknown field"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  }
}

TEST(ConfigTest, SeveralErrorsAreReportedTogether) {
  auto c = parseConfig("threads: x\nhttp: {idle_timeout: soon}\n", "a.yaml");
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().toString(),
            "3 errors:\n"
            "  a.yaml:1:1: listen: required field is missing\n"
            "  a.yaml:1:10: threads: expected a whole number, got \"x\"\n"
            "  a.yaml:2:22: http.idle_timeout: expected a duration such as \"30s\", \"250ms\" or "
            "\"5m\", got \"soon\"");
}

TEST(ConfigTest, FleetManifestsAreRelativeToTheFile) {
  auto c = parseConfig(
      "listen: 127.0.0.1:80\nfleet:\n  manifests: [fleet.yaml, /abs/queues.yaml]\n"
      "  cycle_mode: kueue\n  metering_interval: 30s\n",
      "conf/purser.yaml");
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->fleet.manifests, (std::vector<std::string>{"conf/fleet.yaml", "/abs/queues.yaml"}));
  EXPECT_EQ(c->fleet.cycle_mode, "kueue");
  EXPECT_EQ(c->fleet.metering_interval, std::chrono::seconds(30));
  auto d = parseConfig("listen: 127.0.0.1:80\n", "purser.yaml");
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->fleet.manifests.empty());
  EXPECT_EQ(d->fleet.cycle_mode, "drain");
  EXPECT_EQ(d->fleet.metering_interval, std::chrono::seconds(60));
}

TEST(ConfigTest, ReadsTheFleetInventory) {
  auto c = parseConfig(R"(
listen: 127.0.0.1:80
fleet:
  placement: {policy: binpack, seed: 9}
  nodes:
    - name: dgx
      count: 2
      labels: {pool: h100}
      taints: [{key: dedicated, value: training, effect: NoSchedule}]
      cpu: 112
      memory: 2Ti
      rack: r7
      block: b1
      gpus:
        count: 8
        model: H100-SXM-80GB
        memory: 80Gi
        nvlink_domains: [[0, 1, 2, 3], [4, 5, 6, 7]]
        numa: [0, 0, 0, 0, 1, 1, 1, 1]
    - name: cpu-1
      cpu: 500m
      memory: 1536Mi
)",
                       "p.yaml");
  ASSERT_TRUE(c.has_value()) << c.error().toString();
  EXPECT_EQ(c->fleet.placement_policy, "binpack");
  EXPECT_EQ(c->fleet.placement_seed, 9);
  ASSERT_EQ(c->fleet.nodes.size(), 3u);
  const auto& n = c->fleet.nodes[1];
  EXPECT_EQ(n.name, "dgx-1");
  EXPECT_EQ(n.labels.at("pool"), "h100");
  ASSERT_EQ(n.taints.size(), 1u);
  EXPECT_EQ(n.taints[0].effect, "NoSchedule");
  EXPECT_EQ(n.cpu_milli, 112000);
  EXPECT_EQ(n.memory_mib, 2 * 1024 * 1024);
  EXPECT_EQ(n.rack, "r7");
  ASSERT_EQ(n.gpus.size(), 8u);
  EXPECT_EQ(n.gpus[5].memory_mib, 81920);
  EXPECT_EQ(n.gpus[5].nvlink_domain, 1);
  EXPECT_EQ(n.gpus[5].numa, 1);
  EXPECT_EQ(n.gpus[2].nvlink_domain, 0);
  EXPECT_EQ(c->fleet.nodes[2].cpu_milli, 500);
  EXPECT_EQ(c->fleet.nodes[2].memory_mib, 1536);
  EXPECT_TRUE(c->fleet.nodes[2].gpus.empty());
}

TEST(ConfigTest, ReadsTheEnginesWhoseNodesAreTheInventory) {
  auto c = parseConfig(R"(
listen: 127.0.0.1:80
fleet:
  inventory_refresh: 10s
  slurm: {flavors: [h100], inventory: true, gpu_memory: 80Gi, log_dir: /shared/jobs,
          accounts: {ml: ml-svc}}
  kubernetes: {flavors: [a100], server: "https://10.0.0.1:6443", inventory: true,
               gpu_memory: 40Gi, adopt_jobs: false, pod_security: restricted}
)",
                       "p.yaml");
  ASSERT_TRUE(c.has_value()) << c.error().toString();
  EXPECT_EQ(c->fleet.inventory_refresh, std::chrono::seconds(10));
  EXPECT_TRUE(c->fleet.slurm->inventory);
  EXPECT_EQ(c->fleet.slurm->gpu_memory_mib, 80 * 1024);
  EXPECT_TRUE(c->fleet.kubernetes->inventory);
  EXPECT_EQ(c->fleet.kubernetes->gpu_memory_mib, 40 * 1024);
  EXPECT_FALSE(c->fleet.kubernetes->adopt_jobs);
  EXPECT_EQ(c->fleet.slurm->accounts.at("ml"), "ml-svc");
  EXPECT_EQ(c->fleet.kubernetes->pod_security, "restricted");
  EXPECT_FALSE(c->fleet.kubernetes->service_account_tokens);
  auto bad = parseConfig(
      "fleet:\n  inventory_refresh: 10ms\n"
      "  slurm: {flavors: [h100], inventory: maybe, gpu_memory: lots}\n"
      "  kubernetes: {flavors: [a100], server: \"https://10.0.0.1:6443\", "
      "pod_security: privileged}\n",
      "p.yaml");
  ASSERT_FALSE(bad.has_value());
  const std::string why = bad.error().toString();
  EXPECT_NE(why.find("fleet.inventory_refresh"), std::string::npos) << why;
  EXPECT_NE(why.find("fleet.slurm.inventory"), std::string::npos) << why;
  EXPECT_NE(why.find("fleet.slurm.gpu_memory"), std::string::npos) << why;
  // Jobs never run as Purser: a Slurm cluster without the teams' accounts is refused.
  EXPECT_NE(why.find("fleet.slurm.accounts"), std::string::npos) << why;
  EXPECT_NE(why.find("fleet.kubernetes.pod_security"), std::string::npos) << why;
}

TEST(ConfigTest, ReadsSingleSignOn) {
  auto c = parseConfig(R"(
listen: 127.0.0.1:9000
oidc:
  issuer: https://login.example.com/realms/acme
  client_id: purser
  client_secret_file: secrets/oidc
  redirect_url: https://purser.example.com/auth/oidc/callback
  groups_claim: roles
  session_idle_timeout: 30m
  session_max_age: 12h
  roles:
    - {group: ops, role: platform_admin}
    - {group: acme-admins, tenant: acme, role: tenant_admin}
    - {group: ml-leads, tenant: acme, team: ml, role: team_lead}
    - {group: ml, tenant: acme, team: ml, role: member}
)",
                       "/etc/purser/purser.yaml");
  ASSERT_TRUE(c.has_value()) << c.error().toString();
  ASSERT_TRUE(c->oidc.has_value());
  EXPECT_EQ(c->oidc->issuer, "https://login.example.com/realms/acme");
  EXPECT_EQ(c->oidc->client_secret_file, "/etc/purser/secrets/oidc");
  EXPECT_EQ(c->oidc->groups_claim, "roles");
  EXPECT_EQ(c->oidc->username_claim, "preferred_username");
  EXPECT_EQ(c->oidc->scopes, (std::vector<std::string>{"openid", "profile", "email"}));
  EXPECT_EQ(c->oidc->session_idle_timeout, std::chrono::minutes(30));
  EXPECT_EQ(c->oidc->session_max_age, std::chrono::hours(12));
  ASSERT_EQ(c->oidc->roles.size(), 4u);
  EXPECT_EQ(c->oidc->roles[2].group, "ml-leads");
  EXPECT_EQ(c->oidc->roles[2].team, "ml");
  EXPECT_EQ(c->oidc->roles[2].role, "team_lead");
}

TEST(ConfigTest, RefusesSingleSignOnThatCannotWork) {
  const std::string head =
      "listen: 127.0.0.1:80\noidc:\n  issuer: https://idp.example\n  client_id: p\n"
      "  redirect_url: /auth/oidc/callback\n";
  const std::pair<std::string, std::string> cases[] = {
      {"  roles: [{group: g, role: platform_admin}]\n",
       "oidc.client_secret: give exactly one of client_secret and client_secret_file"},
      {"  client_secret: s\n  client_secret_file: f\n  roles: [{group: g, role: member, tenant: "
       "a, team: b}]\n",
       "give exactly one of"},
      {"  client_secret: s\n", "oidc.roles: required"},
      {"  client_secret: s\n  roles: []\n", "oidc.roles: expected a list"},
      {"  client_secret: s\n  roles: [{group: g, role: admin}]\n", "oidc.roles[0].role"},
      {"  client_secret: s\n  roles: [{group: g, role: member, tenant: acme}]\n",
       "oidc.roles[0].team: required for this role"},
      {"  client_secret: s\n  roles: [{group: g, role: tenant_admin}]\n",
       "oidc.roles[0].tenant: required for this role"},
      {"  client_secret: s\n  roles: [{group: g, role: tenant_admin, tenant: a, team: b}]\n",
       "oidc.roles[0].team: a tenant admin belongs to no team"},
      {"  client_secret: s\n  roles: [{group: g, role: platform_admin, tenant: a}]\n",
       "a platform admin belongs to no tenant or team"},
      {"  client_secret: s\n  scopes: [profile]\n  roles: [{group: g, role: platform_admin}]\n",
       "oidc.scopes: must include \"openid\""},
      {"  client_secret: s\n  session_idle_timeout: 48h\n  roles: [{group: g, role: "
       "platform_admin}]\n",
       "cannot be longer than session_max_age"},
  };
  for (const auto& [tail, expected] : cases) {
    auto c = parseConfig(head + tail, "purser.yaml");
    ASSERT_FALSE(c.has_value()) << tail;
    EXPECT_NE(c.error().toString().find(expected), std::string::npos)
        << tail << " -> " << c.error().toString();
  }
  auto ftp = parseConfig(
      "listen: 127.0.0.1:80\noidc: {issuer: https://i, client_id: p, client_secret: s, "
      "redirect_url: ftp://x/cb, roles: [{group: g, role: platform_admin}]}\n",
      "purser.yaml");
  ASSERT_FALSE(ftp.has_value());
  EXPECT_NE(ftp.error().toString().find("oidc.redirect_url"), std::string::npos);
}

TEST(ConfigTest, ReadsMcpServersAndRefusesWhatCannotWork) {
  auto c = parseConfig(
      "listen: 127.0.0.1:80\nmcp:\n  servers:\n"
      "    - {name: search, url: https://s/mcp, api_key: k, caller_header: X-Purser-Caller,\n"
      "       log_bodies: true, timeout: 5s, max_result_bytes: 2Mi, headers: {X-Org: acme}}\n"
      "  prices:\n    - {server: search, tool: \"*\", per_call: \"0.01\", per_second: "
      "\"0.001\"}\n",
      "purser.yaml");
  ASSERT_TRUE(c.has_value()) << c.error().toString();
  ASSERT_EQ(c->mcp.servers.size(), 1u);
  const McpServerConfig& s = c->mcp.servers[0];
  EXPECT_EQ(s.caller_header, "X-Purser-Caller");
  EXPECT_TRUE(s.log_bodies);
  EXPECT_EQ(s.timeout, std::chrono::seconds(5));
  EXPECT_EQ(s.max_result_bytes, 2u << 20);
  ASSERT_EQ(s.headers.size(), 1u);
  ASSERT_EQ(c->mcp.prices.size(), 1u);
  EXPECT_EQ(c->mcp.prices[0].per_second.toString(), "0.001");
  const std::string head = "listen: 127.0.0.1:80\nmcp:\n  servers:\n";
  const std::pair<std::string, std::string> cases[] = {
      {"    - {name: s, url: http://s, caller_header: Authorization}\n",
       "mcp.servers[0].caller_header"},
      {"    - {name: s, url: http://s, caller_header: Mcp-Session-Id}\n",
       "mcp.servers[0].caller_header"},
      {"    - {name: s, url: http://s, caller_header: \"X Caller\"}\n",
       "mcp.servers[0].caller_header"},
      {"    - {name: S.x, url: http://s}\n", "mcp.servers[0].name"},
      {"    - {name: s, url: ftp://s}\n", "mcp.servers[0].url"},
      {"    - {name: s, url: http://s}\n    - {name: s, url: http://t}\n", "named twice"},
      {"    - {name: s, url: http://s}\n  prices: [{server: t, tool: x, per_call: \"1\"}]\n",
       "no server \"t\" in mcp.servers"},
      {"    - {name: s, url: http://s}\n  prices: [{server: s, tool: x, per_call: \"-1\"}]\n",
       "prices cannot be negative"},
  };
  for (const auto& [tail, expected] : cases) {
    auto bad = parseConfig(head + tail, "purser.yaml");
    ASSERT_FALSE(bad.has_value()) << tail;
    EXPECT_NE(bad.error().toString().find(expected), std::string::npos)
        << tail << " -> " << bad.error().toString();
  }
}

TEST(ConfigTest, CommandLineOverridesWin) {
  auto c = parseConfig("threads: 1\n", "a.yaml", {.listen = "127.0.0.1:0", .data_dir = "/tmp/x"});
  ASSERT_TRUE(c.has_value()) << c.error().toString();
  EXPECT_EQ(c->port, 0);
  EXPECT_EQ(c->data_dir, "/tmp/x");
  auto bad = parseConfig("threads: 1\n", "a.yaml", {.listen = "nowhere"});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().toString().find("--listen: invalid listen address"), std::string::npos);
}

TEST(ConfigTest, LoadsFilesAndReportsMissingOnes) {
  purser::testing::TempDir dir;
  purser::testing::writeFile(dir.file("p.yaml"), "listen: localhost:7000\n");
  auto c = loadConfig(dir.file("p.yaml"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->host, "127.0.0.1");
  auto missing = loadConfig(dir.file("nope.yaml"));
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("cannot read configuration file"), std::string::npos);
}

}  // namespace
}  // namespace purser::config
