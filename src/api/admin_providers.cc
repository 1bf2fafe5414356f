// Model providers through the admin API (platform admins): names, kinds and key counts; keys go
// in — sealed in the store and audited by count — and never come out.
#include <utility>

#include <fmt/format.h>

#include "api/admin_common.h"
#include "api/admin_handlers.h"
#include "common/json.h"

namespace purser::api {

namespace asio = boost::asio;
using http::Request;
using http::Response;
using identity::Action;

namespace admin {

asio::awaitable<Response> listProviders(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  if (auto denied = identity::authorize(who, Action::kCreateTenant, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), "provider.read", "providers");
  }
  json items = json::array();
  if (s.gateway != nullptr) {
    for (const auto* p : s.gateway->providers()) {
      json item = {
          {"name", p->name()},
          {"kind", p->kind() == gateway::ProviderKind::kAnthropic ? "anthropic" : "openai"},
          {"base_url", p->baseUrl()},
          {"keys", p->keyCount()},
          {"keys_source", p->keysReplaced() ? "api" : "config"}};
      // How its HTTPS is checked: a provider that is not verified says so wherever it is listed.
      const gateway::ProviderTls& tls = p->tls();
      item["tls"] = {{"verify", !tls.insecure_skip_verify},
                     {"insecure_skip_verify", tls.insecure_skip_verify},
                     {"ca", tls.ca_file.empty() ? "system" : "system+file"},
                     {"client_certificate", tls.client_certificate}};
      items.push_back(std::move(item));
    }
  }
  co_return jsonResponse(200, listOf(std::move(items)));
}

asio::awaitable<Response> replaceProviderKeys(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  const std::string name(*req.param("name"));
  if (auto denied = identity::authorize(who, Action::kCreateTenant, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), "provider.keys.replace", "provider:" + name);
  }
  gateway::Provider* provider = s.gateway != nullptr ? s.gateway->provider(name) : nullptr;
  if (provider == nullptr || s.provider_keys == nullptr) {
    co_return problem(404, fmt::format("provider \"{}\" not found", name), "name");
  }
  API_TRY(body, parseObject(req));
  API_TRY(keys, stringList(body, "api_keys"));
  if (keys.empty()) co_return problem(400, "\"api_keys\" must list at least one key", "api_keys");
  // The audit entry records that the keys changed and how many there are, never the keys.
  ledger::AuditEntry entry = auditEntry(who, "provider.keys.replace", "provider:" + name,
                                        writeJson(json{{"keys", provider->keyCount()}}),
                                        writeJson(json{{"keys", keys.size()}}), std::string());
  auto done = co_await commitAudited(s, s.provider_keys->replacement(name, keys), entry);
  if (!done) co_return problem(done.error());
  provider->replaceKeys(keys);
  co_return jsonResponse(200, {{"name", name}, {"keys", keys.size()}});
}

// Forgets the keys set through the API: the provider goes back to its configuration's keys.
asio::awaitable<Response> restoreProviderKeys(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  const std::string name(*req.param("name"));
  if (auto denied = identity::authorize(who, Action::kCreateTenant, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), "provider.keys.restore", "provider:" + name);
  }
  gateway::Provider* provider = s.gateway != nullptr ? s.gateway->provider(name) : nullptr;
  if (provider == nullptr || s.provider_keys == nullptr) {
    co_return problem(404, fmt::format("provider \"{}\" not found", name), "name");
  }
  if (!provider->keysReplaced()) {
    co_return problem(409, fmt::format("provider \"{}\" already uses its configured keys", name));
  }
  ledger::AuditEntry entry = auditEntry(who, "provider.keys.restore", "provider:" + name,
                                        writeJson(json{{"keys_source", "api"}}),
                                        writeJson(json{{"keys_source", "config"}}), std::string());
  auto done = co_await commitAudited(s, s.provider_keys->removal(name), entry);
  if (!done) co_return problem(done.error());
  provider->clearReplacedKeys();
  co_return jsonResponse(
      200, {{"name", name}, {"keys", provider->keyCount()}, {"keys_source", "config"}});
}

}  // namespace admin

}  // namespace purser::api
