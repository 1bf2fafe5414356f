#include "config/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/quantity.h"
#include "config/yaml_reader.h"

namespace purser::config {

Result<std::pair<std::string, uint16_t>> parseListenAddress(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return fail(invalidArgument(
        fmt::format("invalid listen address \"{}\": {}; expected host:port such as 127.0.0.1:8080",
                    text, why)));
  };
  std::string host;
  std::string_view port_text;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("an IPv6 address must be written [addr]:port");
    }
    host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("the port is missing");
    host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  if (host.empty()) return bad("the host is missing");
  if (host == "localhost") host = "127.0.0.1";
  // The server binds IP addresses only: names would make the bound interface depend on DNS.
  const bool ipv4 = host.find_first_not_of("0123456789.") == std::string::npos &&
                    std::count(host.begin(), host.end(), '.') == 3;
  const bool ipv6 = host.find(':') != std::string::npos;
  if (!ipv4 && !ipv6) return bad("the host must be an IP address or localhost");
  unsigned port = 0;
  const auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || p != port_text.data() + port_text.size() ||
      port > 65535) {
    return bad("the port must be a number from 0 to 65535");
  }
  return std::pair{host, static_cast<uint16_t>(port)};
}

bool validReplicaName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.';
  });
}

namespace {

// A Kubernetes quantity at `key` of `m`, in milli-units (cpu) or MiB (memory, rounded up).
std::optional<int64_t> quantityAt(YamlReader& reader, YamlReader::Map& m, const std::string& key,
                                  bool mib) {
  if (!m.present(key)) return std::nullopt;
  const YAML::Node n = m.get(key);
  const std::string text = n.IsScalar() ? n.Scalar() : "";
  auto q = Quantity::parse(text);
  std::optional<int64_t> v;
  if (q && !q->isNegative()) {
    if (mib) {
      if (auto bytes = q->value()) v = (*bytes + (1 << 20) - 1) >> 20;
    } else if (auto milli = q->milliValue()) {
      v = *milli;
    }
  }
  if (!v) {
    reader.addError(n, m.child(key),
                    fmt::format("expected a quantity of 0 or more such as {}, got \"{}\"",
                                mib ? "\"512Gi\"" : "\"64\" or \"500m\"", text));
  }
  return v;
}

// fleet.nodes: the inventory. A `count` of identical nodes expands to name-0, name-1, ...
void readNodes(YamlReader& reader, const YAML::Node& list, const std::string& path,
               FleetConfig& fleet) {
  if (!list.IsSequence()) {
    reader.addError(list, path, "expected a list of nodes ({name, cpu, memory, gpus, ...})");
    return;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", path, i);
    YamlReader::Map m = reader.map(list[i], at);
    NodeConfig node;
    m.required("name", node.name);
    int64_t count = 1;
    const bool counted = m.has("count");
    m.optional("count", count, 1, 100000);
    if (m.present("labels")) {
      const YAML::Node labels = m.get("labels");
      if (!labels.IsMap()) {
        reader.addError(labels, m.child("labels"), "expected a mapping of label to value");
      } else {
        for (const auto& kv : labels) {
          node.labels[kv.first.as<std::string>()] =
              kv.second.IsScalar() ? kv.second.Scalar() : std::string();
        }
      }
    }
    if (m.present("taints")) {
      const YAML::Node taints = m.get("taints");
      for (size_t t = 0; taints.IsSequence() && t < taints.size(); ++t) {
        YamlReader::Map tm = reader.map(taints[t], fmt::format("{}.taints[{}]", at, t));
        TaintConfig taint;
        tm.required("key", taint.key);
        tm.optional("value", taint.value);
        tm.requiredChoice("effect", taint.effect, {"NoSchedule", "PreferNoSchedule", "NoExecute"});
        tm.finish();
        node.taints.push_back(std::move(taint));
      }
      if (!taints.IsSequence()) {
        reader.addError(taints, m.child("taints"), "expected a list of {key, value, effect}");
      }
    }
    if (auto v = quantityAt(reader, m, "cpu", false)) node.cpu_milli = *v;
    if (auto v = quantityAt(reader, m, "memory", true)) node.memory_mib = *v;
    m.optional("rack", node.rack);
    m.optional("block", node.block);
    if (m.present("gpus")) {
      YamlReader::Map g = m.map("gpus");
      int64_t n = 0;
      g.optional("count", n, 0, 64);
      GpuConfig gpu;
      g.required("model", gpu.model);
      if (auto v = quantityAt(reader, g, "memory", true)) gpu.memory_mib = *v;
      if (gpu.memory_mib == 0) {
        reader.addError(g.node(), g.child("memory"), "required: each GPU's memory, such as 80Gi");
      }
      g.optional("mig_capable", gpu.mig_capable);
      node.gpus.assign(static_cast<size_t>(n), gpu);
      std::vector<std::string> uuids;
      g.optionalStrings("uuids", uuids);
      if (!uuids.empty() && (uuids.size() != node.gpus.size() || counted)) {
        reader.addError(g.get("uuids"), g.child("uuids"),
                        "one UUID per GPU, and only on a node declared alone (no count)");
      } else {
        for (size_t k = 0; k < uuids.size(); ++k) node.gpus[k].uuid = uuids[k];
      }
      const auto indices = [&](const YAML::Node& seq, const std::string& p) {
        std::vector<int> out;
        for (size_t k = 0; seq.IsSequence() && k < seq.size(); ++k) {
          int v = -1;
          if (seq[k].IsScalar()) {
            const std::string s = seq[k].Scalar();
            std::from_chars(s.data(), s.data() + s.size(), v);
          }
          if (v < 0 || v >= n) {
            reader.addError(seq[k], fmt::format("{}[{}]", p, k),
                            fmt::format("expected a GPU index from 0 to {}", n - 1));
            continue;
          }
          out.push_back(v);
        }
        if (!seq.IsSequence()) reader.addError(seq, p, "expected a list");
        return out;
      };
      if (g.present("numa")) {
        const auto numa = indices(g.get("numa"), g.child("numa"));  // NUMA node per GPU
        if (numa.size() != node.gpus.size()) {
          reader.addError(g.get("numa"), g.child("numa"), "one NUMA node per GPU");
        } else {
          for (size_t k = 0; k < numa.size(); ++k) node.gpus[k].numa = numa[k];
        }
      }
      if (g.present("nvlink_domains")) {
        const YAML::Node domains = g.get("nvlink_domains");
        for (size_t d = 0; domains.IsSequence() && d < domains.size(); ++d) {
          const std::string p = fmt::format("{}[{}]", g.child("nvlink_domains"), d);
          for (int k : indices(domains[d], p)) {
            if (node.gpus[static_cast<size_t>(k)].nvlink_domain >= 0) {
              reader.addError(domains[d], p, fmt::format("GPU {} is in two NVLink domains", k));
            }
            node.gpus[static_cast<size_t>(k)].nvlink_domain = static_cast<int>(d);
          }
        }
        if (!domains.IsSequence()) {
          reader.addError(domains, g.child("nvlink_domains"),
                          "expected a list of GPU index lists, such as [[0,1,2,3],[4,5,6,7]]");
        }
      }
      g.finish();
    }
    m.finish();
    if (!counted) {
      fleet.nodes.push_back(std::move(node));
      continue;
    }
    for (int64_t k = 0; k < count; ++k) {
      NodeConfig copy = node;
      copy.name = fmt::format("{}-{}", node.name, k);
      fleet.nodes.push_back(std::move(copy));
    }
  }
}

void readHttp(YamlReader::Map m, HttpConfig& http) {
  using std::chrono::milliseconds;
  m.optionalBytes("max_body_bytes", http.max_body_bytes, 1, 1ULL << 30);
  m.optionalBytes("max_header_bytes", http.max_header_bytes, 1024, 1ULL << 20);
  m.optional("max_nesting_depth", http.max_nesting_depth, 2, 1000);
  m.optional("max_connections", http.max_connections, 1, 1'000'000);
  m.optional("max_requests_per_connection", http.max_requests_per_connection, 0, INT64_MAX);
  m.optional("idle_timeout", http.idle_timeout, milliseconds(1));
  m.optional("header_timeout", http.header_timeout, milliseconds(1));
  m.optional("body_timeout", http.body_timeout, milliseconds(1));
  m.optional("write_timeout", http.write_timeout, milliseconds(1));
  m.optional("drain_timeout", http.drain_timeout);
  m.finish();
}

void readTls(YamlReader& reader, YamlReader::Map& top, Config& cfg) {
  YamlReader::Map m = top.map("tls");
  TlsConfig t;
  m.required("cert", t.cert_file);
  m.required("key", t.key_file);
  m.optional("client_ca", t.client_ca_file);
  m.optionalChoice("min_version", t.min_version, {"1.2", "1.3"});
  m.optional("watch_interval", t.watch_interval);
  if (m.present("clients")) {
    const YAML::Node list = m.get("clients");
    if (!list.IsSequence()) {
      reader.addError(list, "tls.clients", "expected a list of {subject, service_account, key?}");
    } else {
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string path = fmt::format("tls.clients[{}]", i);
        YamlReader::Map c = reader.map(list[i], path);
        TlsClientConfig client;
        c.required("subject", client.subject);
        c.required("service_account", client.service_account);
        c.optional("key", client.key);
        c.finish();
        const size_t slash = client.service_account.find('/');
        if (!client.service_account.empty() && (slash == std::string::npos || slash == 0 ||
                                                slash + 1 == client.service_account.size())) {
          reader.addError(list[i]["service_account"], path + ".service_account",
                          "expected TENANT/NAME, e.g. acme/ci-bot");
        }
        for (const auto& other : t.clients) {
          if (other.subject == client.subject) {
            reader.addError(list[i]["subject"], path + ".subject",
                            fmt::format("subject \"{}\" is mapped twice", client.subject));
          }
        }
        t.clients.push_back(std::move(client));
      }
    }
  }
  m.finish();
  if (!t.clients.empty() && t.client_ca_file.empty()) {
    reader.addError(top.get("tls"), "tls.clients",
                    "mapping client certificates needs tls.client_ca (the CA that signs them)");
  }
  cfg.tls = std::move(t);
}

void readOidc(YamlReader& reader, YamlReader::Map& top, Config& cfg) {
  YamlReader::Map m = top.map("oidc");
  OidcConfig o;
  m.required("issuer", o.issuer);
  m.required("client_id", o.client_id);
  m.optional("client_secret", o.client_secret);
  m.optional("client_secret_file", o.client_secret_file);
  m.required("redirect_url", o.redirect_url);
  m.optionalStrings("scopes", o.scopes);
  m.optional("groups_claim", o.groups_claim);
  m.optional("username_claim", o.username_claim);
  m.optional("display_name", o.display_name);
  m.optional("session_idle_timeout", o.session_idle_timeout, std::chrono::minutes(1));
  m.optional("session_max_age", o.session_max_age, std::chrono::minutes(1));
  m.optional("cli_token_max_age", o.cli_token_max_age, std::chrono::minutes(1));
  const YAML::Node node = top.get("oidc");
  if (o.client_secret.empty() == o.client_secret_file.empty()) {
    reader.addError(node, "oidc.client_secret",
                    "give exactly one of client_secret and client_secret_file");
  }
  if (!o.redirect_url.empty() && !o.redirect_url.starts_with("/") &&
      !o.redirect_url.starts_with("https://") && !o.redirect_url.starts_with("http://")) {
    reader.addError(node["redirect_url"], "oidc.redirect_url",
                    "expected the callback's full URL (https://purser.example.com/auth/oidc/"
                    "callback), or its path alone (/auth/oidc/callback) to build it from each "
                    "request's Host");
  }
  if (std::find(o.scopes.begin(), o.scopes.end(), "openid") == o.scopes.end()) {
    reader.addError(node["scopes"], "oidc.scopes", "must include \"openid\"");
  }
  if (!m.present("roles")) {
    reader.addError(node, "oidc.roles",
                    "required: the groups that may sign in, e.g. [{group: ml-team, tenant: acme, "
                    "team: research, role: member}]");
  } else if (const YAML::Node list = m.get("roles"); !list.IsSequence() || list.size() == 0) {
    reader.addError(list, "oidc.roles", "expected a list of {group, tenant?, team?, role}");
  } else {
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = fmt::format("oidc.roles[{}]", i);
      YamlReader::Map r = reader.map(list[i], path);
      OidcRoleConfig role;
      r.required("group", role.group);
      r.optional("tenant", role.tenant);
      r.optional("team", role.team);
      r.requiredChoice("role", role.role,
                       {"member", "team_lead", "tenant_admin", "platform_admin"});
      r.finish();
      const auto bad = [&](const char* field, const char* why) {
        reader.addError(list[i], path + "." + field, why);
      };
      if (role.role == "platform_admin" && (!role.tenant.empty() || !role.team.empty())) {
        bad("tenant", "a platform admin belongs to no tenant or team");
      } else if (role.role != "platform_admin" && !role.role.empty() && role.tenant.empty()) {
        bad("tenant", "required for this role (the tenant's name)");
      } else if (role.role == "tenant_admin" && !role.team.empty()) {
        bad("team", "a tenant admin belongs to no team");
      } else if ((role.role == "member" || role.role == "team_lead") && role.team.empty()) {
        bad("team", "required for this role (the team's name)");
      }
      o.roles.push_back(std::move(role));
    }
  }
  m.finish();
  if (o.session_idle_timeout > o.session_max_age) {
    reader.addError(node, "oidc.session_idle_timeout", "cannot be longer than session_max_age");
  }
  cfg.oidc = std::move(o);
}

bool validMcpServerName(std::string_view name) {
  if (name.empty() || name.size() > 63 || name[0] < 'a' || name[0] > 'z') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

// A header an MCP server may be told the caller in: a token Purser does not set itself.
bool validCallerHeader(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  std::string lower;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  for (std::string_view reserved : {"authorization", "cookie", "host", "accept", "connection",
                                    "transfer-encoding", "te", "upgrade", "proxy-authorization"}) {
    if (lower == reserved) return false;
  }
  return !lower.starts_with("content-") && !lower.starts_with("mcp-");
}

void readMcp(YamlReader& reader, YamlReader::Map& top, Config& cfg) {
  YamlReader::Map m = top.map("mcp");
  if (m.present("servers")) {
    const YAML::Node list = m.get("servers");
    if (!list.IsSequence()) {
      reader.addError(list, "mcp.servers", "expected a list of {name, url, headers?, api_key?}");
    } else {
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string path = fmt::format("mcp.servers[{}]", i);
        YamlReader::Map sm = reader.map(list[i], path);
        McpServerConfig server;
        sm.required("name", server.name);
        sm.required("url", server.url);
        sm.optional("api_key", server.api_key);
        sm.optional("caller_header", server.caller_header);
        sm.optional("log_bodies", server.log_bodies);
        sm.optional("timeout", server.timeout, std::chrono::milliseconds(1));
        sm.optionalBytes("max_result_bytes", server.max_result_bytes, 1024, 64 << 20);
        sm.optional("ca", server.ca_file);
        sm.optional("insecure_skip_verify", server.insecure_skip_verify);
        if (sm.present("headers")) {
          const YAML::Node headers = sm.get("headers");
          if (!headers.IsMap()) {
            reader.addError(headers, path + ".headers", "expected a mapping of header: value");
          } else {
            for (const auto& h : headers) {
              if (!h.second.IsScalar()) {
                reader.addError(h.second, path + ".headers", "header values are text");
                continue;
              }
              server.headers.emplace_back(h.first.as<std::string>(), h.second.as<std::string>());
            }
          }
        }
        sm.finish();
        if (!server.name.empty() && !validMcpServerName(server.name)) {
          reader.addError(list[i]["name"], path + ".name",
                          "1 to 63 lower-case letters, digits and '-', starting with a letter "
                          "(tools are offered as NAME.TOOL)");
        }
        if (!server.url.empty() && !server.url.starts_with("http://") &&
            !server.url.starts_with("https://")) {
          reader.addError(list[i]["url"], path + ".url", "expected an http:// or https:// URL");
        }
        if (!server.caller_header.empty() && !validCallerHeader(server.caller_header)) {
          reader.addError(list[i]["caller_header"], path + ".caller_header",
                          "expected a header name (letters, digits and '-') that is not one "
                          "Purser sets itself (Authorization, Cookie, Host, Content-*, Mcp-*)");
        }
        for (const auto& other : cfg.mcp.servers) {
          if (other.name == server.name) {
            reader.addError(list[i]["name"], path + ".name",
                            fmt::format("server \"{}\" is named twice", server.name));
          }
        }
        cfg.mcp.servers.push_back(std::move(server));
      }
    }
  }
  if (m.present("prices")) {
    const YAML::Node list = m.get("prices");
    if (!list.IsSequence()) {
      reader.addError(list, "mcp.prices", "expected a list of {server, tool, per_call}");
    } else {
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string path = fmt::format("mcp.prices[{}]", i);
        YamlReader::Map pm = reader.map(list[i], path);
        McpPriceConfig price;
        pm.required("server", price.server);
        pm.required("tool", price.tool);
        pm.optionalMoney("per_call", price.per_call);
        pm.optionalMoney("per_second", price.per_second);
        pm.finish();
        if (price.per_call.isNegative() || price.per_second.isNegative()) {
          reader.addError(list[i], path, "prices cannot be negative");
        }
        if (std::none_of(cfg.mcp.servers.begin(), cfg.mcp.servers.end(),
                         [&](const McpServerConfig& s) { return s.name == price.server; })) {
          reader.addError(list[i]["server"], path + ".server",
                          fmt::format("no server \"{}\" in mcp.servers", price.server));
        }
        cfg.mcp.prices.push_back(std::move(price));
      }
    }
  }
  m.finish();
}

void readProviders(YamlReader& reader, YamlReader::Map& top, Config& cfg) {
  if (!top.present("providers")) return;
  const YAML::Node list = top.get("providers");
  if (!list.IsSequence()) {
    reader.addError(list, "providers", "expected a list of {name, kind, base_url, api_keys}");
    return;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = fmt::format("providers[{}]", i);
    YamlReader::Map m = reader.map(list[i], path);
    ProviderConfig p;
    m.required("name", p.name);
    m.requiredChoice("kind", p.kind, {"openai", "anthropic"});
    m.required("base_url", p.base_url);
    m.optionalStrings("api_keys", p.api_keys);
    m.optional("timeout", p.timeout, std::chrono::milliseconds(1));
    m.optional("connect_timeout", p.connect_timeout, std::chrono::milliseconds(1));
    m.optionalBytes("max_response_bytes", p.max_response_bytes, 1024, 1ULL << 30);
    m.optionalBytes("max_event_bytes", p.max_event_bytes, 1024, 64ULL << 20);
    m.optional("metrics_url", p.metrics_url);
    m.optionalChoice("engine", p.engine, {"vllm", "sglang", "tgi"});
    m.optionalStrings("gpus", p.gpus);
    m.optional("ca", p.ca_file);
    m.optional("client_cert", p.client_cert_file);
    m.optional("client_key", p.client_key_file);
    m.optional("insecure_skip_verify", p.insecure_skip_verify);
    m.finish();
    if (p.client_cert_file.empty() != p.client_key_file.empty()) {
      reader.addError(list[i], path, "client_cert and client_key go together");
    }
    for (const auto& [field, url] :
         {std::pair{"base_url", p.base_url}, {"metrics_url", p.metrics_url}}) {
      if (!url.empty() && !url.starts_with("http://") && !url.starts_with("https://")) {
        reader.addError(list[i][field], path + "." + field, "expected an http:// or https:// URL");
      }
    }
    for (const auto& other : cfg.providers) {
      if (other.name == p.name) {
        reader.addError(list[i]["name"], path + ".name",
                        fmt::format("provider \"{}\" is defined twice", p.name));
      }
    }
    cfg.providers.push_back(std::move(p));
  }
}

void readObserve(YamlReader& reader, YamlReader::Map& top, Config& cfg) {
  ObserveConfig& o = cfg.observe;
  YamlReader::Map m = top.map("observe");
  m.optional("interval", o.interval, std::chrono::milliseconds(50));
  m.optional("gpu_interval", o.gpu_interval, std::chrono::milliseconds(50));
  m.optional("window", o.window, std::chrono::seconds(1));
  m.optional("max_series", o.max_series, 1, 10'000'000);
  if (m.present("retention")) {
    YamlReader::Map r = m.map("retention");
    r.optional("raw", o.raw_retention, std::chrono::seconds(1));
    r.optional("rollup", o.rollup_retention, std::chrono::seconds(0));
    r.optional("rollup_every", o.rollup, std::chrono::seconds(1));
    r.finish();
  }
  if (m.present("exporters")) {
    const YAML::Node list = m.get("exporters");
    if (!list.IsSequence()) {
      reader.addError(list, "observe.exporters", "expected a list of {name, url}");
    } else {
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string path = fmt::format("observe.exporters[{}]", i);
        YamlReader::Map e = reader.map(list[i], path);
        ExporterConfig x;
        x.interval = o.gpu_interval;
        e.required("name", x.name);
        e.required("url", x.url);
        e.optionalChoice("engine", x.engine, {"dcgm", "vllm", "sglang", "tgi"});
        e.optional("interval", x.interval, std::chrono::milliseconds(50));
        e.finish();
        if (!x.url.empty() && !x.url.starts_with("http://") && !x.url.starts_with("https://")) {
          reader.addError(list[i]["url"], path + ".url", "expected an http:// or https:// URL");
        }
        const bool taken =
            std::any_of(o.exporters.begin(), o.exporters.end(),
                        [&](const ExporterConfig& other) { return other.name == x.name; }) ||
            std::any_of(cfg.providers.begin(), cfg.providers.end(),
                        [&](const ProviderConfig& p) { return p.name == x.name; });
        if (taken) {
          reader.addError(list[i]["name"], path + ".name",
                          fmt::format("\"{}\" already names a provider or an exporter", x.name));
        }
        o.exporters.push_back(std::move(x));
      }
    }
  }
  m.finish();
  // Every provider's GPUs name a listed exporter.
  const YAML::Node providers = top.get("providers");
  for (size_t i = 0; i < cfg.providers.size(); ++i) {
    const auto& gpus = cfg.providers[i].gpus;
    for (size_t j = 0; j < gpus.size(); ++j) {
      const size_t slash = gpus[j].find('/');
      const std::string exporter = gpus[j].substr(0, slash);
      const bool known = std::any_of(o.exporters.begin(), o.exporters.end(),
                                     [&](const ExporterConfig& e) { return e.name == exporter; });
      if (slash == std::string::npos || slash + 1 == gpus[j].size() || !known) {
        reader.addError(providers[i]["gpus"][j], fmt::format("providers[{}].gpus[{}]", i, j),
                        fmt::format("expected EXPORTER/GPU naming one of observe.exporters, got "
                                    "\"{}\"",
                                    gpus[j]));
      }
    }
  }
}

void readRoutes(YamlReader& reader, YamlReader::Map& top, Config& cfg) {
  if (!top.present("routes")) return;
  const YAML::Node list = top.get("routes");
  if (!list.IsSequence()) {
    reader.addError(list, "routes", "expected a list of {model, strategy, targets}");
    return;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = fmt::format("routes[{}]", i);
    YamlReader::Map m = reader.map(list[i], path);
    RouteConfig r;
    m.required("model", r.model);
    m.optionalChoice(
        "strategy", r.strategy,
        {"fallback", "weighted", "least_latency", "least_cost", "least_loaded", "slo"});
    m.optional("max_tokens", r.max_tokens, 1, int64_t{1} << 30);
    m.optional("retries", r.retries, 0, 10);
    if (m.present("slo")) {
      YamlReader::Map slo = m.map("slo");
      slo.optional("ttft_p95", r.slo_ttft_p95);
      slo.optional("itl_p95", r.slo_itl_p95);
      slo.finish();
    }
    if (m.present("saturation")) {
      YamlReader::Map sat = m.map("saturation");
      sat.optional("queue", r.saturation_queue, 1, 1e6);
      sat.optional("kv_cache", r.saturation_kv_cache, 0.01, 1);
      sat.finish();
    }
    if (m.present("queue")) {
      YamlReader::Map q = m.map("queue");
      q.optional("max_wait", r.queue_max_wait);
      q.optional("max_waiting", r.queue_max_waiting, 0, 1'000'000);
      q.finish();
      if (r.queue_max_wait < Duration(0) || r.queue_max_wait > std::chrono::minutes(10)) {
        reader.addError(list[i], path + ".queue.max_wait",
                        "must be between 0s and 10m (how long a request may wait for a replica)");
      }
    }
    m.optionalStrings("served_by", r.served_by);
    if (m.present("allow")) {
      YamlReader::Map allow = m.map("allow");
      allow.optionalStrings("tenants", r.allow_tenants);
      allow.optionalStrings("teams", r.allow_teams);
      allow.finish();
    }
    if (!m.present("targets")) {
      reader.addError(list[i], path + ".targets", "required field is missing");
    } else {
      const YAML::Node targets = m.get("targets");
      // An empty list: the route is served only by replicas of models the fleet runs.
      if (!targets.IsSequence()) {
        reader.addError(targets, path + ".targets", "expected a list of {provider, model}");
      } else {
        for (size_t j = 0; j < targets.size(); ++j) {
          const std::string tpath = fmt::format("{}.targets[{}]", path, j);
          YamlReader::Map t = reader.map(targets[j], tpath);
          TargetConfig target;
          t.required("provider", target.provider);
          t.required("model", target.model);
          t.optional("weight", target.weight, 0, 1'000'000);
          t.finish();
          const bool known =
              std::any_of(cfg.providers.begin(), cfg.providers.end(),
                          [&](const ProviderConfig& p) { return p.name == target.provider; });
          if (!target.provider.empty() && !known) {
            reader.addError(targets[j]["provider"], tpath + ".provider",
                            fmt::format("no provider named \"{}\" (providers must be listed first)",
                                        target.provider));
          }
          r.targets.push_back(std::move(target));
        }
      }
    }
    m.finish();
    for (const auto& other : cfg.routes) {
      if (other.model == r.model) {
        reader.addError(list[i]["model"], path + ".model",
                        fmt::format("model \"{}\" is routed twice", r.model));
      }
    }
    cfg.routes.push_back(std::move(r));
  }
}

}  // namespace

Result<Config> parseConfig(std::string_view yaml, const std::string& file_name,
                           const Overrides& overrides) {
  YAML::Node root = PURSER_TRY_VALUE(parseYaml(yaml, file_name));
  YamlReader reader(file_name);
  Config cfg;
  cfg.file = file_name;
  YamlReader::Map top = reader.map(root, "");

  if (overrides.listen) {
    top.present("listen");
    cfg.listen = *overrides.listen;
  } else if (root.IsNull() || !root.IsDefined()) {
    reader.addError(YAML::Mark(), "listen",
                    "required field is missing (the file is empty); for example: "
                    "listen: 127.0.0.1:8080");
  } else {
    top.required("listen", cfg.listen);
  }
  if (!cfg.listen.empty()) {
    auto addr = parseListenAddress(cfg.listen);
    if (addr) {
      std::tie(cfg.host, cfg.port) = *addr;
    } else if (overrides.listen) {
      reader.addError(YAML::Mark::null_mark(), "--listen", addr.error().message);
    } else {
      reader.addError(top.get("listen"), "listen", addr.error().message);
    }
  }
  top.optional("threads", cfg.threads, 0, 1024);
  top.optional("data_dir", cfg.data_dir);
  if (overrides.data_dir) cfg.data_dir = *overrides.data_dir;

  if (top.present("log")) {
    YamlReader::Map log = top.map("log");
    log.optionalChoice("level", cfg.log.level,
                       {"trace", "debug", "info", "warn", "error", "critical", "off"});
    std::string format = "text";
    log.optionalChoice("format", format, {"text", "json"});
    cfg.log.format = format == "json" ? LogFormat::kJson : LogFormat::kText;
    log.finish();
  }
  if (top.present("http")) readHttp(top.map("http"), cfg.http);
  if (top.present("tls")) readTls(reader, top, cfg);
  if (top.present("oidc")) readOidc(reader, top, cfg);
  if (top.present("mcp")) readMcp(reader, top, cfg);
  if (top.present("crypto")) {
    YamlReader::Map crypto = top.map("crypto");
    crypto.optional("fips", cfg.crypto.fips);
    crypto.finish();
  }
  if (top.present("store")) {
    YamlReader::Map store = top.map("store");
    store.optionalChoice("driver", cfg.store.driver, {"sqlite", "postgres"});
    store.optional("busy_timeout", cfg.store.busy_timeout);
    store.optional("postgres", cfg.store.postgres);
    store.optional("max_connections", cfg.store.max_connections, 1, 1000);
    store.optional("readers", cfg.store.readers, 1, 64);
    store.optional("read_queue", cfg.store.read_queue, 1, 100'000);
    store.optional("replica", cfg.store.replica);
    store.optional("lease_ttl", cfg.store.lease_ttl, std::chrono::seconds(1));
    store.optional("ship_interval", cfg.store.ship_interval);
    if (cfg.store.ship_interval > std::chrono::seconds(5)) {
      reader.addError(store.get("ship_interval"), "store.ship_interval",
                      "at most 5s: usage and spend reach the store this late");
    }
    if (cfg.store.lease_ttl > std::chrono::minutes(10)) {
      reader.addError(store.get("lease_ttl"), "store.lease_ttl",
                      "at most 10m: a dead replica's budget leases come back only after it");
    }
    if (!cfg.store.replica.empty() && !validReplicaName(cfg.store.replica)) {
      reader.addError(store.get("replica"), "store.replica",
                      "1 to 63 letters, digits, '-', '_' or '.'");
    }
    if (!cfg.store.postgres.empty()) cfg.store.driver = "postgres";
    if (cfg.store.driver == "postgres" && cfg.store.postgres.empty()) {
      reader.addError(top.get("store"), "store.postgres",
                      "the postgres driver needs a connection string, such as "
                      "\"postgresql://purser@db:5432/purser\"");
    }
    store.finish();
  }
  if (top.present("ledger")) {
    YamlReader::Map ledger = top.map("ledger");
    ledger.optionalChoice("sync", cfg.ledger.sync, {"batch", "always"});
    ledger.optional("sync_interval", cfg.ledger.sync_interval, std::chrono::microseconds(100));
    if (cfg.ledger.sync_interval > std::chrono::seconds(1)) {
      reader.addError(ledger.get("sync_interval"), "ledger.sync_interval",
                      "must be at most 1s; it bounds what a machine crash can lose");
    }
    ledger.finish();
  }
  if (top.present("alerts")) {
    YamlReader::Map alerts = top.map("alerts");
    alerts.optional("webhook_url", cfg.alerts.webhook_url);
    alerts.finish();
    const auto& url = cfg.alerts.webhook_url;
    if (!url.empty() && !url.starts_with("http://") && !url.starts_with("https://")) {
      reader.addError(top.get("alerts")["webhook_url"], "alerts.webhook_url",
                      "expected an http:// or https:// URL");
    }
  }
  if (top.present("fleet")) {
    YamlReader::Map fleet = top.map("fleet");
    fleet.optional("enabled", cfg.fleet.enabled);
    fleet.optional("advertise", cfg.fleet.advertise);
    if (!cfg.fleet.advertise.empty() && !cfg.fleet.advertise.starts_with("http://") &&
        !cfg.fleet.advertise.starts_with("https://")) {
      reader.addError(fleet.get("advertise"), "fleet.advertise",
                      "expected the URL the other replicas reach this one at, such as "
                      "\"http://gateway-1:8080\"");
    }
    fleet.optional("leader_check", cfg.fleet.leader_check, std::chrono::milliseconds(100));
    fleet.optionalStrings("manifests", cfg.fleet.manifests);
    fleet.optionalChoice("cycle_mode", cfg.fleet.cycle_mode, {"drain", "kueue"});
    fleet.optional("metering_interval", cfg.fleet.metering_interval, std::chrono::seconds(1));
    if (fleet.present("placement")) {
      YamlReader::Map placement = fleet.map("placement");
      placement.optionalChoice("policy", cfg.fleet.placement_policy,
                               {"default", "binpack", "spread", "best_fit", "fgd", "packing",
                                "clustering", "dotprod", "random"});
      placement.optional("seed", cfg.fleet.placement_seed, 0, INT64_MAX);
      placement.finish();
    }
    if (fleet.present("nodes")) readNodes(reader, fleet.get("nodes"), "fleet.nodes", cfg.fleet);
    fleet.optional("termination_grace", cfg.fleet.termination_grace, std::chrono::seconds(0));
    fleet.optional("inventory_refresh", cfg.fleet.inventory_refresh, std::chrono::seconds(1));
    fleet.optional("max_pods_per_set", cfg.fleet.max_pods_per_set, 1, 1'000'000);
    if (auto v = quantityAt(reader, fleet, "min_pod_cpu", false)) cfg.fleet.min_pod_cpu_milli = *v;
    if (fleet.present("local")) {
      YamlReader::Map local = fleet.map("local");
      local.optional("max_log_bytes", cfg.fleet.local_max_log_bytes, 4096, int64_t{1} << 40);
      local.optional("max_memory_bytes", cfg.fleet.local_max_memory_bytes, 0, INT64_MAX);
      local.optional("max_cpu_seconds", cfg.fleet.local_max_cpu_seconds, 0, INT64_MAX);
      local.optional("working_dir", cfg.fleet.local_working_dir);
      local.optional("log_dir", cfg.fleet.local_log_dir);
      local.optional("max_pods", cfg.fleet.local_max_pods, 1, 1'000'000);
      local.optionalChoice("isolation", cfg.fleet.local_isolation, {"auto", "none"});
      local.optionalStrings("read_only_paths", cfg.fleet.local_read_only_paths);
      for (size_t i = 0; i < cfg.fleet.local_read_only_paths.size(); ++i) {
        const std::string& path = cfg.fleet.local_read_only_paths[i];
        if (path.empty() || path[0] != '/') {
          reader.addError(local.get("read_only_paths"),
                          fmt::format("fleet.local.read_only_paths[{}]", i),
                          fmt::format("\"{}\" is not an absolute path", path));
        }
      }
      local.optional("uid_base", cfg.fleet.local_uid_base, 1000, int64_t{1} << 31);
      local.optional("uid_count", cfg.fleet.local_uid_count, 1, int64_t{1} << 24);
      local.optional("pids_limit", cfg.fleet.local_pids_limit, 0, 4'194'304);
      local.optional("file_retention", cfg.fleet.local_file_retention, std::chrono::seconds(0));
      if (auto v = quantityAt(reader, local, "tmp_size", false)) {
        cfg.fleet.local_tmp_bytes = *v / 1000;
      }
      local.finish();
      if (cfg.fleet.local_uid_base + cfg.fleet.local_uid_count > (int64_t{1} << 32) - 2) {
        reader.addError(local.node(), "fleet.local.uid_count",
                        "uid_base + uid_count must stay below 4294967294");
      }
    }
    if (fleet.present("slurm")) {
      YamlReader::Map slurm = fleet.map("slurm");
      FleetConfig::Slurm s;
      slurm.optionalStrings("flavors", s.flavors);
      slurm.optional("partition", s.partition);
      slurm.optional("gres_type", s.gres_type);
      slurm.optional("conf", s.conf);
      slurm.optional("bin_dir", s.bin_dir);
      slurm.optional("log_dir", s.log_dir);
      slurm.optional("inventory", s.inventory);
      if (auto v = quantityAt(reader, slurm, "gpu_memory", true)) s.gpu_memory_mib = *v;
      if (slurm.present("accounts")) {
        const YAML::Node accounts = slurm.get("accounts");
        if (!accounts.IsMap()) {
          reader.addError(accounts, "fleet.slurm.accounts",
                          "expected a mapping of team to Unix account, such as {ml: ml-svc}");
        } else {
          for (const auto& kv : accounts) {
            if (!kv.first.IsScalar() || !kv.second.IsScalar() || kv.second.Scalar().empty()) {
              reader.addError(kv.first, "fleet.slurm.accounts",
                              "expected a team and the name of a Unix account");
              continue;
            }
            s.accounts[kv.first.Scalar()] = kv.second.Scalar();
          }
        }
      }
      slurm.finish();
      if (s.accounts.empty() && !s.flavors.empty()) {
        reader.addError(top.get("fleet")["slurm"], "fleet.slurm.accounts",
                        "map each team whose work runs on Slurm to a Unix account (such as "
                        "{ml: ml-svc}): Slurm jobs never run as Purser's own user");
      }
      if (s.flavors.empty()) {
        reader.addError(top.get("fleet")["slurm"], "fleet.slurm.flavors",
                        "name the ResourceFlavors whose workloads Slurm runs");
      }
      cfg.fleet.slurm = std::move(s);
    }
    if (fleet.present("kubernetes")) {
      YamlReader::Map k = fleet.map("kubernetes");
      FleetConfig::Kubernetes kc;
      k.optionalStrings("flavors", kc.flavors);
      k.optional("kubeconfig", kc.kubeconfig);
      k.optional("context", kc.context);
      k.optional("server", kc.server);
      k.optional("token", kc.token);
      k.optional("token_file", kc.token_file);
      k.optional("ca_file", kc.ca_file);
      k.optional("insecure_skip_tls_verify", kc.insecure);
      k.optional("default_image", kc.default_image);
      k.optional("inventory", kc.inventory);
      k.optional("adopt_jobs", kc.adopt_jobs);
      if (auto v = quantityAt(reader, k, "gpu_memory", true)) kc.gpu_memory_mib = *v;
      k.optional("pod_security", kc.pod_security);
      k.optional("service_account_tokens", kc.service_account_tokens);
      k.finish();
      if (kc.pod_security != "baseline" && kc.pod_security != "restricted") {
        reader.addError(top.get("fleet")["kubernetes"]["pod_security"],
                        "fleet.kubernetes.pod_security",
                        "expected baseline or restricted (the Pod Security Standards' levels; "
                        "Purser does not create privileged pods)");
      }
      if (kc.flavors.empty()) {
        reader.addError(top.get("fleet")["kubernetes"], "fleet.kubernetes.flavors",
                        "name the ResourceFlavors whose workloads Kubernetes runs");
      }
      if (kc.server.empty() && kc.kubeconfig.empty()) {
        reader.addError(top.get("fleet")["kubernetes"], "fleet.kubernetes.server",
                        "name the API server (server: https://10.0.0.1:6443) or a kubeconfig");
      }
      if (!kc.context.empty() && kc.kubeconfig.empty()) {
        reader.addError(top.get("fleet")["kubernetes"]["context"], "fleet.kubernetes.context",
                        "a context is one of a kubeconfig's; name the kubeconfig too");
      }
      if (!kc.server.empty() && kc.server.rfind("https://", 0) != 0 &&
          kc.server.rfind("http://", 0) != 0) {
        reader.addError(top.get("fleet")["kubernetes"]["server"], "fleet.kubernetes.server",
                        "expected an https:// URL such as https://10.0.0.1:6443");
      }
      cfg.fleet.kubernetes = std::move(kc);
    }
    fleet.finish();
    const std::filesystem::path base = std::filesystem::path(file_name).parent_path();
    for (auto& m : cfg.fleet.manifests) {
      if (std::filesystem::path(m).is_relative()) m = (base / m).string();
    }
    if (cfg.fleet.kubernetes && !cfg.fleet.kubernetes->kubeconfig.empty() &&
        std::filesystem::path(cfg.fleet.kubernetes->kubeconfig).is_relative()) {
      cfg.fleet.kubernetes->kubeconfig = (base / cfg.fleet.kubernetes->kubeconfig).string();
    }
  }
  if (top.present("diagnose")) {
    YamlReader::Map diagnose = top.map("diagnose");
    if (diagnose.present("narrator")) {
      YamlReader::Map narrator = diagnose.map("narrator");
      NarratorConfig n;
      narrator.required("route", n.route);
      narrator.optional("max_tokens", n.max_tokens, 16, 8192);
      narrator.finish();
      cfg.diagnose.narrator = n;  // its route is checked once the routes are read
    }
    diagnose.finish();
  }
  if (top.present("console")) {
    YamlReader::Map console = top.map("console");
    console.optional("enabled", cfg.console.enabled);
    console.finish();
  }
  if (top.present("prices")) {
    const YAML::Node list = top.get("prices");
    if (!list.IsSequence()) {
      reader.addError(list, "prices",
                      "expected a list of {provider, model, input_per_mtok, output_per_mtok}");
    } else {
      for (size_t i = 0; i < list.size(); ++i) {
        YamlReader::Map m = reader.map(list[i], fmt::format("prices[{}]", i));
        ModelPriceConfig p;
        m.required("provider", p.provider);
        m.required("model", p.model);
        m.requiredMoney("input_per_mtok", p.input);
        m.requiredMoney("output_per_mtok", p.output);
        m.optionalMoney("cached_input_per_mtok", p.cached_input);
        m.optionalMoney("cache_write_per_mtok", p.cache_write);
        if (m.present("reasoning_per_mtok")) {
          Money r;
          m.optionalMoney("reasoning_per_mtok", r);
          p.reasoning = r;
        }
        m.finish();
        for (const auto& other : cfg.prices) {
          if (other.provider == p.provider && other.model == p.model) {
            reader.addError(list[i], fmt::format("prices[{}]", i),
                            fmt::format("{} {} is priced twice", p.provider, p.model));
          }
        }
        for (const Money* v : {&p.input, &p.output, &p.cached_input, &p.cache_write}) {
          if (v->isNegative()) {
            reader.addError(list[i], fmt::format("prices[{}]", i), "prices cannot be negative");
            break;
          }
        }
        cfg.prices.push_back(std::move(p));
      }
    }
  }
  if (top.present("gpu_prices")) {
    const YAML::Node list = top.get("gpu_prices");
    if (!list.IsSequence()) {
      reader.addError(list, "gpu_prices", "expected a list of {flavor, per_gpu_hour}");
    } else {
      for (size_t i = 0; i < list.size(); ++i) {
        YamlReader::Map m = reader.map(list[i], fmt::format("gpu_prices[{}]", i));
        GpuPriceConfig g;
        m.required("flavor", g.flavor);
        m.requiredMoney("per_gpu_hour", g.per_gpu_hour);
        m.finish();
        if (g.per_gpu_hour.isNegative()) {
          reader.addError(list[i], fmt::format("gpu_prices[{}]", i), "prices cannot be negative");
        }
        cfg.gpu_prices.push_back(std::move(g));
      }
    }
  }
  readProviders(reader, top, cfg);
  readRoutes(reader, top, cfg);
  {
    // Certificates and keys named relative to the configuration file are found beside it.
    const std::filesystem::path base = std::filesystem::path(file_name).parent_path();
    const auto beside = [&](std::string& f) {
      if (!f.empty() && std::filesystem::path(f).is_relative()) f = (base / f).string();
    };
    if (cfg.tls) {
      beside(cfg.tls->cert_file);
      beside(cfg.tls->key_file);
      beside(cfg.tls->client_ca_file);
    }
    if (cfg.oidc) beside(cfg.oidc->client_secret_file);
    for (auto& s : cfg.mcp.servers) beside(s.ca_file);
    for (auto& p : cfg.providers) {
      beside(p.ca_file);
      beside(p.client_cert_file);
      beside(p.client_key_file);
    }
  }
  if (top.present("observe")) {
    readObserve(reader, top, cfg);
  } else {
    for (size_t i = 0; i < cfg.providers.size(); ++i) {
      if (!cfg.providers[i].gpus.empty()) {
        reader.addError(top.get("providers")[i]["gpus"], fmt::format("providers[{}].gpus", i),
                        "names GPUs of observe.exporters, but no exporters are configured");
      }
    }
  }
  if (cfg.diagnose.narrator && !cfg.diagnose.narrator->route.empty()) {
    const std::string& route = cfg.diagnose.narrator->route;
    if (std::none_of(cfg.routes.begin(), cfg.routes.end(),
                     [&](const RouteConfig& r) { return r.model == route; })) {
      reader.addError(top.get("diagnose")["narrator"]["route"], "diagnose.narrator.route",
                      fmt::format("no route \"{}\" in routes", route));
    }
  }
  top.finish();
  if (!reader.ok()) return fail(reader.error());
  return cfg;
}

Result<Config> loadConfig(const std::string& path, const Overrides& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(Error(ErrorCode::kNotFound, fmt::format("cannot read configuration file \"{}\": {}",
                                                        path, std::strerror(errno))));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parseConfig(text.str(), path, overrides);
}

}  // namespace purser::config
