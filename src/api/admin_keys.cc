// API keys through the admin API: created (within the limits of the key that makes them, derived
// from it when made for its own owner), revoked with the keys derived from them, rotated with a
// grace period for the previous secret, and listed.
#include <utility>

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "api/admin_common.h"
#include "api/admin_handlers.h"
#include "common/duration.h"
#include "common/json.h"
#include "identity/identity_store.h"
#include "identity/keys.h"
#include "mcp/protocol.h"

namespace purser::api {

namespace asio = boost::asio;
using http::Request;
using http::Response;
using identity::Action;

namespace admin {

namespace {

// Fits `key` inside the limits of `creator`, the key that makes it: what `key` leaves open it
// inherits; what it asks beyond them is refused (kPermissionDenied naming the field).
Result<void> withinLimits(const identity::ApiKey& creator, identity::ApiKey& key) {
  const auto outside = [](std::string field, std::string why) {
    return fail(Error(ErrorCode::kPermissionDenied,
                      "a key can only make keys within its own limits: " + why)
                    .withField(field));
  };
  if (!creator.models.empty()) {
    if (key.models.empty()) key.models = creator.models;
    for (const auto& m : key.models) {
      if (std::find(creator.models.begin(), creator.models.end(), m) == creator.models.end()) {
        return outside("models", fmt::format("model \"{}\" is not among this key's models", m));
      }
    }
  }
  if (creator.rpm > 0) {
    if (key.rpm == 0) key.rpm = creator.rpm;
    if (key.rpm > creator.rpm) {
      return outside("rpm", fmt::format("rpm {} is above this key's {}", key.rpm, creator.rpm));
    }
  }
  if (creator.tpm > 0) {
    if (key.tpm == 0) key.tpm = creator.tpm;
    if (key.tpm > creator.tpm) {
      return outside("tpm", fmt::format("tpm {} is above this key's {}", key.tpm, creator.tpm));
    }
  }
  if (!creator.expires_at.empty()) {
    if (key.expires_at.empty()) key.expires_at = creator.expires_at;
    if (key.expires_at > creator.expires_at) {
      return outside("expires_at",
                     fmt::format("it would expire after this key ({})", creator.expires_at));
    }
  }
  return {};
}

// Gives `key` its priority; `who` calls with a key of priority `ceiling`. Platform and tenant
// admins give any priority, anyone else at most the ceiling (kPermissionDenied naming the field,
// as withinLimits). Left open it is standard, or the ceiling where that is lower and the maker is
// no admin or the key is derived: a sheddable key makes sheddable keys.
Result<void> fitPriority(const identity::Principal& who, identity::Priority ceiling,
                         std::optional<identity::Priority> asked, identity::ApiKey& key,
                         const identity::Tenant* tenant) {
  const bool admin =
      who.role == identity::Role::kPlatformAdmin || who.role == identity::Role::kTenantAdmin;
  if (!asked) {
    const bool inherits = !admin || !key.parent_key_id.empty();
    key.priority =
        inherits ? std::min(identity::Priority::kStandard, ceiling) : identity::Priority::kStandard;
    return {};
  }
  if (!admin && *asked > ceiling) {
    return fail(Error(ErrorCode::kPermissionDenied,
                      fmt::format("a key can only make keys within its own limits: priority {} "
                                  "is above this key's {}",
                                  identity::priorityName(*asked), identity::priorityName(ceiling)))
                    .withField("priority"));
  }
  // Priority is the platform's to grant: within a tenant, no key goes above the tenant's grant
  // (the platform admin grants it, and may make keys of any priority).
  if (asked && tenant != nullptr && who.role != identity::Role::kPlatformAdmin &&
      *asked > tenant->grant.max_key_priority) {
    return fail(
        Error(ErrorCode::kPermissionDenied,
              fmt::format("tenant {}'s keys may be at most {} (its priority grant, which "
                          "the platform admin sets); {} was asked",
                          tenant->name, identity::priorityName(tenant->grant.max_key_priority),
                          identity::priorityName(*asked)))
            .withField("priority"));
  }
  key.priority = *asked;
  return {};
}

}  // namespace

asio::awaitable<Response> createKey(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  API_TRY(name, requiredName(body, "name"));
  API_TRY(models, stringList(body, "models"));
  API_TRY(tools, stringList(body, "tools"));
  for (const auto& t : tools) {
    if (!mcp::validToolPattern(t)) {
      co_return problem(400,
                        fmt::format("\"{}\" is not a tool pattern: expected \"server/tool\", "
                                    "\"server/*\" or \"*\"",
                                    toValidUtf8(t.substr(0, 200))),
                        "tools");
    }
  }
  API_TRY(expires, optionalString(body, "expires_at"));
  API_TRY(rpm, optionalInt(body, "rpm", 0, 1'000'000'000));
  API_TRY(tpm, optionalInt(body, "tpm", 0, 1'000'000'000'000));
  API_TRY(priority_text, optionalString(body, "priority"));
  std::optional<identity::Priority> priority;
  if (priority_text) {
    auto p = identity::parsePriority(*priority_text);
    if (!p) co_return problem(p.error().withField("priority"));
    priority = *p;
  }
  // The owner defaults to the caller.
  identity::OwnerKind kind = who.kind;
  std::string owner_id = who.id;
  if (auto it = body.find("owner"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      co_return problem(400, "\"owner\" must be an object {\"kind\": ..., \"id\": ...}", "owner");
    }
    API_TRY(kind_text, requiredString(*it, "kind"));
    auto k = identity::parseOwnerKind(kind_text);
    if (!k) co_return problem(k.error().withField("owner.kind"));
    kind = *k;
    API_TRY(id, requiredString(*it, "id"));
    // By id, or by name among what the caller may see.
    owner_id =
        resolveScope(s, who,
                     {kind == identity::OwnerKind::kUser ? ledger::ScopeKind::kUser
                                                         : ledger::ScopeKind::kServiceAccount,
                      id})
            .id;
  }
  identity::ApiKey key;
  key.owner_kind = kind;
  key.owner_id = owner_id;
  if (kind == identity::OwnerKind::kUser) {
    auto u = s.directory.user(owner_id);
    if (!u || !inReach(who, u->tenant_id))
      co_return problem(notFound("user", owner_id, "owner.id"));
    key.tenant_id = u->tenant_id;
    key.team_id = u->team_id;
  } else {
    auto a = s.directory.serviceAccount(owner_id);
    if (!a || !inReach(who, a->tenant_id)) {
      co_return problem(notFound("service account", owner_id, "owner.id"));
    }
    key.tenant_id = a->tenant_id;
    key.team_id = a->team_id;
  }
  if (auto denied = identity::authorize(who, Action::kCreateKey, keyTarget(key)); !denied) {
    co_return co_await deny(s, who, denied.error(), "key.create",
                            std::string(identity::ownerKindName(kind)) + ":" + owner_id);
  }
  if (expires) {
    auto t = parseRfc3339(*expires);
    if (!t) co_return problem(t.error().withField("expires_at"));
    if (*t <= s.clock.now()) co_return problem(400, "\"expires_at\" is in the past", "expires_at");
    key.expires_at = formatRfc3339(*t);
  }
  key.models = models;
  key.tools = tools;
  key.rpm = rpm.value_or(0);
  key.tpm = tpm.value_or(0);
  // A key makes keys only within its own limits; one made for the key's own owner is derived
  // from it (revoked and expired with it, charged to its wallets, counted in its rate limits).
  const auto creator = s.directory.key(who.key_id);
  if (creator) {
    if (auto outside = withinLimits(*creator, key); !outside) {
      co_return co_await deny(s, who, outside.error(), "key.create", "key:" + creator->id);
    }
    if (key.owner_kind == who.kind && key.owner_id == who.id) {
      if (s.directory.keyChain(creator->id).size() >= identity::kMaxKeyDepth) {
        co_return problem(409,
                          fmt::format("keys can be derived at most {} deep; make this key with "
                                      "a key nearer the first",
                                      identity::kMaxKeyDepth));
      }
      key.parent_key_id = creator->id;
      // A key cannot give itself tools it does not have (an admin granting tools to someone
      // else is an authorisation matter: their role).
      // A derived key without tools of its own would fall back to its team's grant, which may
      // be wider than its parent's own list: it takes its parent's list instead.
      if (key.tools.empty() && !creator->tools.empty()) key.tools = creator->tools;
      if (!mcp::within(key.tools, s.directory.toolsOf(*creator))) {
        const Error outside = Error(ErrorCode::kPermissionDenied,
                                    "a key can only make keys within its own limits: a tool it "
                                    "asks for is not among this key's tools")
                                  .withField("tools");
        co_return co_await deny(s, who, outside, "key.create", "key:" + creator->id);
      }
    }
  }
  // Without a key of its own (none today) a caller is held to standard.
  const auto key_tenant = s.directory.tenant(key.tenant_id);
  if (auto outside = fitPriority(who, creator ? creator->priority : identity::Priority::kStandard,
                                 priority, key, key_tenant ? &*key_tenant : nullptr);
      !outside) {
    co_return co_await deny(s, who, outside.error(), "key.create", "key:" + who.key_id);
  }
  const identity::NewKey secret = identity::generateKey(s.ids, s.random);
  key.id = secret.id;
  key.lookup = secret.lookup;
  key.secret_hash = secret.secret_hash;
  key.name = name;
  key.created_at = now(s);
  auto done = co_await commitAudited(
      s, ledger::change(identity::insertKey, key),
      auditEntry(who, "key.create", "key:" + key.id, "", writeJson(toJson(key)), key.tenant_id));
  if (!done) co_return problem(done.error());
  s.directory.put(key);
  json out = toJson(key);
  out["key"] = secret.secret;  // shown this once; only its hash is stored
  co_return jsonResponse(201, out);
}

asio::awaitable<Response> revokeKey(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  const std::string id(*req.param("id"));
  auto key = s.directory.key(id);
  if (!key || !inReach(who, key->tenant_id)) co_return problem(notFound("key", id, "id"));
  if (auto denied = identity::authorize(who, Action::kManageKey, keyTarget(*key)); !denied) {
    co_return co_await deny(s, who, denied.error(), "key.revoke", "key:" + id);
  }
  if (!key->revoked_at.empty()) co_return jsonResponse(200, toJson(*key));  // already revoked
  identity::ApiKey after = *key;
  after.revoked_at = now(s);
  // The keys derived from it go with it, in the same transaction.
  std::vector<identity::ApiKey> derived;
  for (auto k : s.directory.derivedKeys(id)) {
    if (!k.revoked_at.empty()) continue;
    k.revoked_at = after.revoked_at;
    derived.push_back(std::move(k));
  }
  json out = toJson(after);
  out["revoked_with_it"] = json::array();
  for (const auto& k : derived) out["revoked_with_it"].push_back(k.id);
  // The derived keys' entries first, then the key's own (the order the log has always had).
  std::vector<ledger::Change> changes{ledger::change(identity::updateKey, after)};
  std::vector<ledger::AuditEntry> entries;
  for (const auto& k : derived) {
    changes.push_back(ledger::change(identity::updateKey, k));
    entries.push_back(auditEntry(who, "key.revoke", "key:" + k.id, "",
                                 writeJson(json{{"with", id}}), k.tenant_id));
  }
  entries.push_back(auditEntry(who, "key.revoke", "key:" + id, writeJson(toJson(*key)),
                               writeJson(toJson(after)), key->tenant_id));
  auto done = co_await record(s, std::move(changes), std::move(entries));
  if (!done) co_return problem(done.error());
  s.directory.put(after);
  for (const auto& k : derived) s.directory.put(k);
  co_return jsonResponse(200, out);
}

asio::awaitable<Response> rotateKey(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  const std::string id(*req.param("id"));
  auto key = s.directory.key(id);
  if (!key || !inReach(who, key->tenant_id)) co_return problem(notFound("key", id, "id"));
  if (auto denied = identity::authorize(who, Action::kManageKey, keyTarget(*key)); !denied) {
    co_return co_await deny(s, who, denied.error(), "key.rotate", "key:" + id);
  }
  if (!key->revoked_at.empty()) co_return problem(409, "a revoked key cannot be rotated", "id");
  Duration grace = std::chrono::hours(24);
  if (!req.body.empty()) {
    API_TRY(body, parseObject(req));
    API_TRY(grace_text, optionalString(body, "grace"));
    if (grace_text) {
      auto g = parseDuration(*grace_text);
      if (!g) co_return problem(g.error().withField("grace"));
      if (*g > std::chrono::hours(24 * 30)) {
        co_return problem(400, "\"grace\" can be at most 30 days (720h)", "grace");
      }
      grace = *g;
    }
  }
  if (key->lookup != key->id) {
    co_return problem(409, "the bootstrap key cannot be rotated; create a new admin key instead",
                      "id");
  }
  const identity::NewKey secret = identity::regenerateSecret(key->id, s.random);
  identity::ApiKey after = *key;
  after.previous_hash = key->secret_hash;
  after.previous_valid_until = formatRfc3339(s.clock.now() + grace);
  after.secret_hash = secret.secret_hash;
  auto done =
      co_await commitAudited(s, ledger::change(identity::updateKey, after),
                             auditEntry(who, "key.rotate", "key:" + id, writeJson(toJson(*key)),
                                        writeJson(toJson(after)), key->tenant_id));
  if (!done) co_return problem(done.error());
  s.directory.put(after);
  json out = toJson(after);
  out["key"] = secret.secret;
  co_return jsonResponse(200, out);
}

asio::awaitable<Response> listKeys(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  json out = json::array();
  for (const auto& k : s.directory.keys()) {
    if (identity::canSee(who, Action::kReadKey, keyTarget(k))) out.push_back(toJson(k));
  }
  co_return jsonResponse(200, listOf(std::move(out)));
}

}  // namespace admin

}  // namespace purser::api
