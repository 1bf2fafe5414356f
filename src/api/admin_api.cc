#include "api/admin_api.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <nlohmann/json.hpp>

#include "api/async_store.h"
#include "api/problem.h"
#include "gateway/async_meter.h"
#include "identity/payer.h"
#include "ledger/budget.h"

#include <deque>
#include <mutex>
#include <unordered_map>
#include "common/duration.h"
#include "common/json.h"
#include "identity/identity_store.h"
#include "identity/keys.h"
#include "identity/policy.h"
#include "ledger/ledger_store.h"

namespace purser::api {

namespace asio = boost::asio;
using http::Method;
using http::Request;
using http::Response;
using identity::Action;
using identity::Principal;
using identity::Role;
using identity::Target;
using nlohmann::json;

// Inside a handler coroutine: evaluates a Result, answers with its problem if it failed, else
// binds its value to `var`.
#define API_TRY(var, expr)                                    \
  auto var##_result = (expr);                                 \
  if (!var##_result) co_return problem(var##_result.error()); \
  auto var = std::move(*var##_result)

namespace {

// --- JSON views -------------------------------------------------------------------------------

json toJson(const identity::Tenant& t) {
  return {{"id", t.id}, {"name", t.name}, {"created_at", t.created_at}};
}

json toJson(const identity::Team& t) {
  return {{"id", t.id}, {"tenant", t.tenant_id}, {"name", t.name}, {"created_at", t.created_at}};
}

json toJson(const identity::User& u) {
  return {{"id", u.id},
          {"tenant", u.tenant_id},
          {"team", u.team_id},
          {"name", u.name},
          {"email", u.email},
          {"role", identity::roleName(u.role)},
          {"created_at", u.created_at}};
}

json toJson(const identity::ServiceAccount& a) {
  return {{"id", a.id},
          {"tenant", a.tenant_id},
          {"team", a.team_id},
          {"name", a.name},
          {"created_at", a.created_at}};
}

json toJson(const identity::ApiKey& k) {
  return {{"id", k.id},
          {"name", k.name},
          {"owner", {{"kind", identity::ownerKindName(k.owner_kind)}, {"id", k.owner_id}}},
          {"tenant", k.tenant_id},
          {"team", k.team_id},
          {"models", k.models},
          {"expires_at", k.expires_at.empty() ? json(nullptr) : json(k.expires_at)},
          {"rpm", k.rpm},
          {"tpm", k.tpm},
          {"revoked_at", k.revoked_at.empty() ? json(nullptr) : json(k.revoked_at)},
          {"previous_valid_until",
           k.previous_valid_until.empty() ? json(nullptr) : json(k.previous_valid_until)},
          {"derived_from", k.parent_key_id.empty() ? json(nullptr) : json(k.parent_key_id)},
          {"created_at", k.created_at}};
}

std::string percent(int64_t basis_points) {
  return fmt::format("{}.{:02}", basis_points / 100, basis_points % 100);
}

json toJson(const ledger::WalletStatus& w) {
  const auto& s = w.spec;
  json window = nullptr;
  if (s.period != ledger::Period::kNone) {
    window = {{"start", formatRfc3339(w.window.start)}, {"end", formatRfc3339(w.window.end)}};
  }
  return {{"id", s.id},
          {"tenant", s.tenant_id},
          {"scope", {{"kind", ledger::scopeKindName(s.scope.kind)}, {"id", s.scope.id}}},
          {"limit", s.limit.toString()},
          {"period", ledger::periodName(s.period)},
          {"timezone", s.zone.name()},
          {"hard", s.hard},
          {"alert_at", s.alert_at},
          {"model", s.model.empty() ? json(nullptr) : json(s.model)},
          {"window", window},
          {"spent", w.spent.toString()},
          {"reserved", w.reserved.toString()},
          {"remaining", w.remaining.toString()},
          {"percent_used", percent(w.used_basis_points)}};
}

json listOf(json items) { return {{"data", std::move(items)}}; }

// --- Authentication, audit and targets ----------------------------------------------------------

}  // namespace

Result<Principal> authenticate(const Services& s, const Request& req) {
  auto header = req.headers.get("authorization");
  if (!header) {
    return fail(Error(ErrorCode::kUnauthenticated,
                      "no API key: send it as \"Authorization: Bearer <key>\""));
  }
  std::string_view value = *header;
  if (value.size() < 7 || !http::equalsIgnoreCase(value.substr(0, 7), "bearer ")) {
    return fail(
        Error(ErrorCode::kUnauthenticated, "the Authorization header must read \"Bearer <key>\""));
  }
  value.remove_prefix(7);
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  return s.directory.authenticate(value);
}

namespace {

ledger::AuditEntry auditEntry(const Principal& who, std::string action, std::string target,
                              std::string before, std::string after, std::string tenant_id) {
  ledger::AuditEntry e;
  e.tenant_id = std::move(tenant_id);
  e.actor = who.id;
  e.actor_role = std::string(identity::roleName(who.role));
  e.action = std::move(action);
  e.target = std::move(target);
  e.before = std::move(before);
  e.after = std::move(after);
  return e;
}

// Records a policy denial in the audit log (within the principal's share, DenialLog), then
// answers with it.
asio::awaitable<Response> deny(const Services& s, const Principal& who, const Error& why,
                               std::string action, std::string target) {
  auto entries = denialEntries(s, who, "policy.deny", std::move(target),
                               writeJson(json{{"action", action}, {"reason", why.message}}));
  if (!entries.empty()) {
    auto logged = co_await commit(s.store, [&](store::Tx& tx) -> Result<void> {
      for (const auto& e : entries) PURSER_TRY(s.audit.append(tx, e));
      return {};
    });
    if (!logged) spdlog::error("api: could not audit a denial: {}", logged.error().message);
  }
  co_return problem(why);
}

// Commits `change` and its audit entry in one transaction.
asio::awaitable<Result<void>> commitAudited(const Services& s, store::TxFn change,
                                            ledger::AuditEntry entry) {
  co_return co_await commit(s.store, [&](store::Tx& tx) -> Result<void> {
    PURSER_TRY(change(tx));
    PURSER_TRY(s.audit.append(tx, entry));
    return {};
  });
}

Error notFound(std::string_view what, std::string_view id, std::string_view field) {
  return Error(ErrorCode::kNotFound, fmt::format("{} \"{}\" not found", what, id)).withField(field);
}

// Whether `who` may learn that something of `tenant_id` exists: platform admins everywhere,
// everyone else in their own tenant only. Lookups answer for anything outside exactly as for
// something that does not exist (same status, same message, same work), so neither the answer
// nor its timing tells a tenant what another one has (DESIGN.md rule 5).
bool inReach(const Principal& who, const std::string& tenant_id) {
  return who.role == Role::kPlatformAdmin || (!tenant_id.empty() && tenant_id == who.tenant_id);
}

// A tenant by id or by name, as `who` may see it.
Result<identity::Tenant> findTenant(const Services& s, const Principal& who,
                                    const std::string& ref) {
  auto t = s.directory.tenant(ref);
  if (!t) t = s.directory.tenantByName(ref);
  if (t && inReach(who, t->id)) return *t;
  return fail(notFound("tenant", ref, "tenant"));
}

// A team of `tenant` by id or by name.
Result<identity::Team> findTeam(const Services& s, const std::string& tenant_id,
                                const std::string& ref) {
  if (auto t = s.directory.team(ref); t && t->tenant_id == tenant_id) return *t;
  if (auto t = s.directory.teamByName(tenant_id, ref)) return *t;
  return fail(notFound("team", ref, "team"));
}

std::string now(const Services& s) { return formatRfc3339(s.clock.now()); }

// The tenant a caller means: the body's "tenant", or for a tenant-bound caller their own.
Result<identity::Tenant> tenantFor(const Services& s, const Principal& who, const json& body) {
  auto ref = PURSER_TRY_VALUE(optionalString(body, "tenant"));
  if (!ref) {
    if (who.tenant_id.empty()) {
      return fail(invalidArgument("\"tenant\" is required").withField("tenant"));
    }
    return findTenant(s, who, who.tenant_id);
  }
  return findTenant(s, who, *ref);
}

// The tenant/team/owner of a wallet scope, for authorization; a scope outside `who`'s reach is
// not found. `for_write` makes tenant and team wallets a tenant-admin matter (a team lead cannot
// raise their own team's budget).
Result<Target> scopeTarget(const Services& s, const Principal& who, const ledger::Scope& scope,
                           bool for_write) {
  using ledger::ScopeKind;
  switch (scope.kind) {
    case ScopeKind::kTenant: {
      auto t = s.directory.tenant(scope.id);
      if (!t || !inReach(who, t->id)) return fail(notFound("tenant", scope.id, "scope.id"));
      return Target{t->id, "", ""};
    }
    case ScopeKind::kTeam: {
      auto t = s.directory.team(scope.id);
      if (!t || !inReach(who, t->tenant_id)) return fail(notFound("team", scope.id, "scope.id"));
      return Target{t->tenant_id, for_write ? "" : t->id, ""};
    }
    case ScopeKind::kUser: {
      auto u = s.directory.user(scope.id);
      if (!u || (!u->tenant_id.empty() && !inReach(who, u->tenant_id))) {
        return fail(notFound("user", scope.id, "scope.id"));
      }
      if (u->tenant_id.empty()) {
        return fail(invalidArgument("platform admins have no wallets").withField("scope.id"));
      }
      return Target{u->tenant_id, u->team_id, u->id};
    }
    case ScopeKind::kServiceAccount: {
      auto a = s.directory.serviceAccount(scope.id);
      if (!a || !inReach(who, a->tenant_id)) {
        return fail(notFound("service account", scope.id, "scope.id"));
      }
      return Target{a->tenant_id, a->team_id, a->id};
    }
    case ScopeKind::kKey: {
      auto k = s.directory.key(scope.id);
      if (!k || (!k->tenant_id.empty() && !inReach(who, k->tenant_id))) {
        return fail(notFound("key", scope.id, "scope.id"));
      }
      if (k->tenant_id.empty()) {
        return fail(invalidArgument("platform admin keys have no wallets").withField("scope.id"));
      }
      return Target{k->tenant_id, k->team_id, k->owner_id};
    }
  }
  return fail(internalError("unknown scope kind"));
}

// A scope as its caller named it: by id, or — tenants, teams, users and service accounts — by
// name, among what `who` may see (a team, user or service account in the caller's own tenant; a
// platform admin's team name must be one tenant's only). A name nobody has stays as it was, and
// the lookup after it answers "not found" as for an unknown id.
ledger::Scope resolveScope(const Services& s, const Principal& who, ledger::Scope scope) {
  using ledger::ScopeKind;
  const auto unique = [&](const auto& items, auto match) -> std::optional<std::string> {
    std::optional<std::string> found;
    for (const auto& x : items) {
      if (!match(x) || !inReach(who, x.tenant_id)) continue;
      if (found) return std::nullopt;  // ambiguous: ids only
      found = x.id;
    }
    return found;
  };
  const auto mine = [&](const std::string& tenant_id) {
    return who.role == Role::kPlatformAdmin || tenant_id == who.tenant_id;
  };
  std::optional<std::string> id;
  switch (scope.kind) {
    case ScopeKind::kTenant:
      if (!s.directory.tenant(scope.id)) {
        if (auto t = s.directory.tenantByName(scope.id); t && inReach(who, t->id)) id = t->id;
      }
      break;
    case ScopeKind::kTeam:
      if (!s.directory.team(scope.id)) {
        id = unique(s.directory.teams(), [&](const identity::Team& t) {
          return t.name == scope.id && mine(t.tenant_id);
        });
      }
      break;
    case ScopeKind::kUser:
      if (!s.directory.user(scope.id)) {
        id = unique(s.directory.users(), [&](const identity::User& u) {
          return u.name == scope.id && !u.tenant_id.empty() && mine(u.tenant_id);
        });
      }
      break;
    case ScopeKind::kServiceAccount:
      if (!s.directory.serviceAccount(scope.id)) {
        id = unique(s.directory.serviceAccounts(), [&](const identity::ServiceAccount& a) {
          return a.name == scope.id && mine(a.tenant_id);
        });
      }
      break;
    case ScopeKind::kKey:
      break;  // key names are not unique: ids only
  }
  if (id) scope.id = *id;
  return scope;
}

// The name of what a scope stands for ("" when it is gone).
std::string scopeName(const Services& s, ledger::ScopeKind kind, const std::string& id) {
  using ledger::ScopeKind;
  switch (kind) {
    case ScopeKind::kTenant:
      if (auto t = s.directory.tenant(id)) return t->name;
      break;
    case ScopeKind::kTeam:
      if (auto t = s.directory.team(id)) return t->name;
      break;
    case ScopeKind::kUser:
      if (auto u = s.directory.user(id)) return u->name;
      break;
    case ScopeKind::kServiceAccount:
      if (auto a = s.directory.serviceAccount(id)) return a->name;
      break;
    case ScopeKind::kKey:
      if (auto k = s.directory.key(id)) return k->name;
      break;
  }
  return {};
}

Result<ledger::Scope> parseScopeObject(const json& body) {
  auto it = body.find("scope");
  if (it == body.end() || !it->is_object()) {
    return fail(invalidArgument("\"scope\" must be an object {\"kind\": ..., \"id\": ...}")
                    .withField("scope"));
  }
  auto kind_text = requiredString(*it, "kind");
  if (!kind_text) return fail(kind_text.error().withField("scope"));
  auto kind = ledger::parseScopeKind(*kind_text);
  if (!kind) return fail(kind.error().withField("scope.kind"));
  auto id = requiredString(*it, "id");
  if (!id) return fail(id.error().withField("scope"));
  return ledger::Scope{*kind, *id};
}

// "team:01j..." -> scope
Result<ledger::Scope> parseScopeParam(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos || colon + 1 == text.size()) {
    return fail(invalidArgument("scope must read KIND:ID, e.g. team:01jb...").withField("scope"));
  }
  auto kind = ledger::parseScopeKind(text.substr(0, colon));
  if (!kind) return fail(kind.error().withField("scope"));
  return ledger::Scope{*kind, text.substr(colon + 1)};
}

Target keyTarget(const identity::ApiKey& k) { return Target{k.tenant_id, k.team_id, k.owner_id}; }

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

// --- Handlers ----------------------------------------------------------------------------------

asio::awaitable<Response> createTenant(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  API_TRY(name, requiredName(body, "name"));
  if (auto denied = identity::authorize(who, Action::kCreateTenant, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), "tenant.create", "tenant:" + name);
  }
  if (s.directory.tenantByName(name)) {
    co_return problem(409, fmt::format("a tenant named \"{}\" already exists", name), "name");
  }
  const identity::Tenant t{s.ids.next(), name, now(s)};
  auto done = co_await commitAudited(
      s, [&](store::Tx& tx) { return identity::insertTenant(tx, t); },
      auditEntry(who, "tenant.create", "tenant:" + t.id, "", writeJson(toJson(t)), t.id));
  if (!done) co_return problem(done.error().withField("name"));
  s.directory.put(t);
  co_return jsonResponse(201, toJson(t));
}

asio::awaitable<Response> createTeam(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  API_TRY(name, requiredName(body, "name"));
  API_TRY(tenant, tenantFor(s, who, body));
  if (auto denied = identity::authorize(who, Action::kCreateTeam, {tenant.id, "", ""}); !denied) {
    co_return co_await deny(s, who, denied.error(), "team.create", "tenant:" + tenant.id);
  }
  if (s.directory.teamByName(tenant.id, name)) {
    co_return problem(
        409, fmt::format("tenant {} already has a team named \"{}\"", tenant.name, name), "name");
  }
  const identity::Team t{s.ids.next(), tenant.id, name, now(s)};
  auto done = co_await commitAudited(
      s, [&](store::Tx& tx) { return identity::insertTeam(tx, t); },
      auditEntry(who, "team.create", "team:" + t.id, "", writeJson(toJson(t)), t.tenant_id));
  if (!done) co_return problem(done.error().withField("name"));
  s.directory.put(t);
  co_return jsonResponse(201, toJson(t));
}

asio::awaitable<Response> createUser(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  API_TRY(name, requiredName(body, "name"));
  API_TRY(email, optionalString(body, "email"));
  API_TRY(role_text, optionalString(body, "role"));
  Role role = Role::kMember;
  if (role_text) {
    auto r = identity::parseRole(*role_text);
    if (!r || *r == Role::kServiceAccount) {
      co_return problem(400,
                        fmt::format("unknown role \"{}\"; expected platform-admin, tenant-admin, "
                                    "team-lead or member",
                                    *role_text),
                        "role");
    }
    role = *r;
  }
  if (email && !email->empty() && (email->find('@') == std::string::npos || email->size() > 254)) {
    co_return problem(400, fmt::format("\"{}\" is not an e-mail address", *email), "email");
  }
  identity::User u;
  u.id = s.ids.next();
  u.name = name;
  u.email = email ? *email : "";
  u.role = role;
  u.created_at = now(s);
  Target target;
  Action action = Action::kCreateUser;
  if (role == Role::kPlatformAdmin) {
    action = Action::kCreateTenant;  // platform-wide: only a platform admin
  } else {
    API_TRY(tenant, tenantFor(s, who, body));
    API_TRY(team_ref, optionalString(body, "team"));
    u.tenant_id = tenant.id;
    if (team_ref) {
      API_TRY(team, findTeam(s, tenant.id, *team_ref));
      u.team_id = team.id;
    } else if (role != Role::kTenantAdmin) {
      co_return problem(400, "\"team\" is required for team leads and members", "team");
    }
    if (role == Role::kTenantAdmin || role == Role::kTeamLead) action = Action::kCreateTenantAdmin;
    target = Target{u.tenant_id, u.team_id, ""};
  }
  if (auto denied = identity::authorize(who, action, target); !denied) {
    co_return co_await deny(s, who, denied.error(), "user.create", "user:" + name);
  }
  if (s.directory.nameTaken(identity::OwnerKind::kUser, u.tenant_id, u.name)) {
    co_return problem(409, fmt::format("a user named \"{}\" already exists here", u.name), "name");
  }
  auto done = co_await commitAudited(
      s, [&](store::Tx& tx) { return identity::insertUser(tx, u); },
      auditEntry(who, "user.create", "user:" + u.id, "", writeJson(toJson(u)), u.tenant_id));
  if (!done) co_return problem(done.error().withField("name"));
  s.directory.put(u);
  co_return jsonResponse(201, toJson(u));
}

asio::awaitable<Response> createServiceAccount(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  API_TRY(name, requiredName(body, "name"));
  API_TRY(tenant, tenantFor(s, who, body));
  API_TRY(team_ref, requiredString(body, "team"));
  API_TRY(team, findTeam(s, tenant.id, team_ref));
  if (auto denied =
          identity::authorize(who, Action::kCreateServiceAccount, {tenant.id, team.id, ""});
      !denied) {
    co_return co_await deny(s, who, denied.error(), "service_account.create", "team:" + team.id);
  }
  if (s.directory.nameTaken(identity::OwnerKind::kServiceAccount, tenant.id, name)) {
    co_return problem(409, fmt::format("a service account named \"{}\" already exists", name),
                      "name");
  }
  const identity::ServiceAccount a{s.ids.next(), tenant.id, team.id, name, now(s)};
  auto done = co_await commitAudited(
      s, [&](store::Tx& tx) { return identity::insertServiceAccount(tx, a); },
      auditEntry(who, "service_account.create", "service_account:" + a.id, "", writeJson(toJson(a)),
                 a.tenant_id));
  if (!done) co_return problem(done.error().withField("name"));
  s.directory.put(a);
  co_return jsonResponse(201, toJson(a));
}

asio::awaitable<Response> createKey(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  API_TRY(name, requiredName(body, "name"));
  API_TRY(models, stringList(body, "models"));
  API_TRY(expires, optionalString(body, "expires_at"));
  API_TRY(rpm, optionalInt(body, "rpm", 0, 1'000'000'000));
  API_TRY(tpm, optionalInt(body, "tpm", 0, 1'000'000'000'000));
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
  key.rpm = rpm.value_or(0);
  key.tpm = tpm.value_or(0);
  // A key makes keys only within its own limits; one made for the key's own owner is derived
  // from it (revoked and expired with it, charged to its wallets, counted in its rate limits).
  if (auto creator = s.directory.key(who.key_id)) {
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
    }
  }
  const identity::NewKey secret = identity::generateKey(s.ids, s.random);
  key.id = secret.id;
  key.lookup = secret.lookup;
  key.secret_hash = secret.secret_hash;
  key.name = name;
  key.created_at = now(s);
  auto done = co_await commitAudited(
      s, [&](store::Tx& tx) { return identity::insertKey(tx, key); },
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
  auto done = co_await commitAudited(
      s,
      [&](store::Tx& tx) -> Result<void> {
        PURSER_TRY(identity::updateKey(tx, after));
        for (const auto& k : derived) {
          PURSER_TRY(identity::updateKey(tx, k));
          PURSER_TRY(s.audit.append(tx, auditEntry(who, "key.revoke", "key:" + k.id, "",
                                                   writeJson(json{{"with", id}}), k.tenant_id)));
        }
        return {};
      },
      auditEntry(who, "key.revoke", "key:" + id, writeJson(toJson(*key)), writeJson(toJson(after)),
                 key->tenant_id));
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
  auto done = co_await commitAudited(
      s, [&](store::Tx& tx) { return identity::updateKey(tx, after); },
      auditEntry(who, "key.rotate", "key:" + id, writeJson(toJson(*key)), writeJson(toJson(after)),
                 key->tenant_id));
  if (!done) co_return problem(done.error());
  s.directory.put(after);
  json out = toJson(after);
  out["key"] = secret.secret;
  co_return jsonResponse(200, out);
}

asio::awaitable<Response> createWallet(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  API_TRY(named, parseScopeObject(body));
  const ledger::Scope scope = resolveScope(s, who, named);
  API_TRY(target, scopeTarget(s, who, scope, /*for_write=*/true));
  if (auto denied = identity::authorize(who, Action::kWriteWallet, target); !denied) {
    co_return co_await deny(s, who, denied.error(), "wallet.create",
                            std::string(ledger::scopeKindName(scope.kind)) + ":" + scope.id);
  }
  API_TRY(limit, requiredMoney(body, "limit"));
  if (limit.isNegative()) co_return problem(400, "\"limit\" cannot be negative", "limit");
  API_TRY(period_text, optionalString(body, "period"));
  API_TRY(zone_text, optionalString(body, "timezone"));
  API_TRY(hard, optionalBool(body, "hard"));
  API_TRY(model, optionalString(body, "model"));
  ledger::WalletSpec w;
  w.id = s.ids.next();
  w.tenant_id = target.tenant_id;
  w.scope = scope;
  w.limit = limit;
  if (period_text) {
    auto p = ledger::parsePeriod(*period_text);
    if (!p) co_return problem(p.error().withField("period"));
    w.period = *p;
  }
  if (zone_text) {
    auto z = ledger::TimeZone::find(*zone_text);
    if (!z) co_return problem(z.error().withField("timezone"));
    w.zone = *z;
  }
  w.hard = hard.value_or(true);
  w.model = model.value_or("");
  w.alert_at = {50, 80, 100};
  if (auto it = body.find("alert_at"); it != body.end() && !it->is_null()) {
    if (!it->is_array())
      co_return problem(400, "\"alert_at\" must be a list of percents", "alert_at");
    w.alert_at.clear();
    for (const auto& v : *it) {
      const std::optional<int64_t> percent = jsonInt(v);
      if (!percent) {
        co_return problem(400, "\"alert_at\" must be a list of whole percents", "alert_at");
      }
      if (*percent < 1 || *percent > 1000) {
        co_return problem(400,
                          fmt::format("\"alert_at\": {} is outside 1..1000 percent", writeJson(v)),
                          "alert_at");
      }
      w.alert_at.push_back(static_cast<int>(*percent));
    }
  }
  if (auto valid = ledger::validateWalletSpec(w); !valid) co_return problem(valid.error());
  for (const auto& existing : s.wallets.all()) {
    if (existing.spec.scope == w.scope && existing.spec.model == w.model) {
      co_return problem(
          409,
          fmt::format("{} {} already has a wallet{} ({})", ledger::scopeKindName(w.scope.kind),
                      w.scope.id, w.model.empty() ? "" : " for model " + w.model, existing.spec.id),
          "scope");
    }
  }
  ledger::WalletStatus fresh;
  fresh.spec = w;
  fresh.window = ledger::periodWindow(w.period, w.zone, s.clock.now());
  fresh.remaining = w.limit;
  auto done = co_await commitAudited(
      s, [&](store::Tx& tx) { return ledger::insertWallet(tx, w, now(s)); },
      auditEntry(who, "wallet.create", "wallet:" + w.id, "", writeJson(toJson(fresh)),
                 w.tenant_id));
  if (!done) {
    if (done.error().code == ErrorCode::kAlreadyExists) {
      co_return problem(409, "this scope already has a wallet for that model", "scope");
    }
    co_return problem(done.error());
  }
  if (auto put = s.wallets.put(w); !put) co_return problem(put.error());
  API_TRY(status, s.wallets.status(w.id));
  co_return jsonResponse(201, toJson(status));
}

// GET on a collection of scoped things (wallets, rate limits): optionally narrowed to one scope
// (which the caller must be allowed to read), else everything the caller may see.
template <typename Fetch, typename ScopeOf, typename View>
auto scopedList(const char* read_action, Fetch fetch, ScopeOf scope_of, View view) {
  return [=](const Services& s, Request& req) -> asio::awaitable<Response> {
    API_TRY(who, authenticate(s, req));
    std::optional<ledger::Scope> only;
    if (auto scope_text = req.queryParam("scope")) {
      API_TRY(named, parseScopeParam(*scope_text));
      const ledger::Scope scope = resolveScope(s, who, named);
      API_TRY(target, scopeTarget(s, who, scope, /*for_write=*/false));
      if (auto denied = identity::authorize(who, Action::kReadWallet, target); !denied) {
        co_return co_await deny(s, who, denied.error(), read_action, *scope_text);
      }
      only = scope;
    }
    json items = json::array();
    for (const auto& item : fetch(s)) {
      const ledger::Scope& scope = scope_of(item);
      if (only && !(scope == *only)) continue;
      auto target = scopeTarget(s, who, scope, false);
      if (!target || !identity::canSee(who, Action::kReadWallet, *target)) continue;
      json shown = view(item);
      shown["scope"]["name"] = scopeName(s, scope.kind, scope.id);
      items.push_back(std::move(shown));
    }
    co_return jsonResponse(200, listOf(std::move(items)));
  };
}

json nameOrNull(const std::string& name) { return name.empty() ? json(nullptr) : json(name); }

// Who an audit entry's actor is, by name: a user or a service account ("system" is itself).
std::string auditActorName(const Services& s, const std::string& actor) {
  if (actor == "system") return {};
  std::string name = scopeName(s, ledger::ScopeKind::kUser, actor);
  return name.empty() ? scopeName(s, ledger::ScopeKind::kServiceAccount, actor) : name;
}

// What an audit entry's target ("KIND:ID") is, by name: a tenant, team, person, key or wallet
// ("user dana's wallet"); empty when it has none or is gone.
std::string auditTargetName(const Services& s, const std::string& target) {
  const size_t colon = target.find(':');
  if (colon == std::string::npos) return {};
  const std::string kind = target.substr(0, colon), id = target.substr(colon + 1);
  if (kind == "wallet") {
    auto w = s.wallets.status(id);
    if (!w) return {};
    const std::string owner = scopeName(s, w->spec.scope.kind, w->spec.scope.id);
    if (owner.empty()) return {};
    std::string kind_name(ledger::scopeKindName(w->spec.scope.kind));
    std::replace(kind_name.begin(), kind_name.end(), '_', ' ');
    return fmt::format("{} {}'s {}wallet", kind_name, owner,
                       w->spec.model.empty() ? "" : w->spec.model + " ");
  }
  auto scope = ledger::parseScopeKind(kind);
  return scope ? scopeName(s, *scope, id) : std::string();
}

asio::awaitable<Response> listAudit(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  ledger::AuditQuery q;
  if (who.role != Role::kPlatformAdmin) {
    auto denied = identity::authorize(who, Action::kReadAudit, {who.tenant_id, "", ""});
    if (!denied || who.role != Role::kTenantAdmin) {
      // Named, not a conditional temporary: GCC 12 mishandles those across co_await.
      Error why = denied ? Error(ErrorCode::kPermissionDenied, "only admins can read the audit log")
                         : denied.error();
      co_return co_await deny(s, who, why, "audit.read", "audit");
    }
    q.tenant_id = who.tenant_id;
  }
  for (const char* bound : {"from", "to"}) {
    if (auto v = req.queryParam(bound)) {
      auto t = parseRfc3339(*v);
      if (!t) co_return problem(t.error().withField(bound));
      (std::string_view(bound) == "from" ? q.from : q.to) = formatRfc3339(*t);
    }
  }
  if (auto limit = req.queryParam("limit")) {
    char* end = nullptr;
    const long long n = std::strtoll(limit->c_str(), &end, 10);
    if (limit->empty() || *end != '\0' || n < 1 || n > 10'000) {
      co_return problem(400, "\"limit\" must be a whole number from 1 to 10000", "limit");
    }
    q.limit = n;
  }
  for (const char* bound : {"before", "after"}) {
    if (auto v = req.queryParam(bound)) {
      char* end = nullptr;
      const long long n = std::strtoll(v->c_str(), &end, 10);
      if (v->empty() || *end != '\0' || n < 1 || n >= (int64_t{1} << 62)) {
        co_return problem(
            400, fmt::format("\"{}\" must be an entry's number (a whole number from 1)", bound),
            bound);
      }
      (std::string_view(bound) == "before" ? q.before_seq : q.after_seq) = n;
    }
  }
  if (auto action = req.queryParam("action")) q.action = *action;
  if (auto actor = req.queryParam("actor")) q.actor = *actor;
  if (auto order = req.queryParam("order")) {
    if (*order != "asc" && *order != "desc") {
      co_return problem(400, "\"order\" must be asc (oldest first) or desc (newest first)",
                        "order");
    }
    q.newest_first = *order == "desc";
  }
  // One more than asked, to say whether there is another page.
  const int64_t page = q.limit;
  ++q.limit;
  API_TRY(entries, s.audit.list(s.store, q));
  const bool more = static_cast<int64_t>(entries.size()) > page;
  if (more) entries.resize(static_cast<size_t>(page));
  json items = json::array();
  for (const auto& e : entries) {
    items.push_back({{"seq", e.seq},
                     {"at", e.at},
                     {"tenant", e.tenant_id},
                     {"actor", e.actor},
                     {"actor_name", nameOrNull(auditActorName(s, e.actor))},
                     {"actor_role", e.actor_role},
                     {"action", e.action},
                     {"target", e.target},
                     {"target_name", nameOrNull(auditTargetName(s, e.target))},
                     {"before", e.before.empty() ? json(nullptr) : parseJsonOrDiscarded(e.before)},
                     {"after", e.after.empty() ? json(nullptr) : parseJsonOrDiscarded(e.after)},
                     {"hash", e.hash}});
  }
  json out = listOf(std::move(items));
  out["more"] = more;
  co_return jsonResponse(200, out);
}

// Who the caller's key stands for: the console's sign-in.
asio::awaitable<Response> whoami(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  json out = {{"kind", std::string(identity::ownerKindName(who.kind))},
              {"id", who.id},
              {"name", who.name},
              {"role", std::string(identity::roleName(who.role))},
              {"key_id", who.key_id.empty() ? json(nullptr) : json(who.key_id)},
              {"tenant", nullptr},
              {"team", nullptr}};
  if (auto t = s.directory.tenant(who.tenant_id)) {
    out["tenant"] = {{"id", t->id}, {"name", t->name}};
  }
  if (auto t = s.directory.team(who.team_id)) out["team"] = {{"id", t->id}, {"name", t->name}};
  co_return jsonResponse(200, out);
}

asio::awaitable<Response> verifyAudit(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  if (auto denied = identity::authorize(who, Action::kVerifyAudit, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), "audit.verify", "audit");
  }
  API_TRY(v, s.audit.verify(s.store));
  json out = {{"ok", v.ok},
              {"entries", v.entries},
              {"signed_entries", v.signed_entries},
              {"anchored_seq", v.anchored_seq}};
  if (!v.ok) {
    out["first_bad_seq"] = v.first_bad_seq;
    out["problem"] = v.problem;
  }
  co_return jsonResponse(200, out);
}

// GET on a collection: what the caller may see.
template <typename T, typename TargetOf>
Response listVisible(const Services& s, const Principal& who, Action read,
                     const std::vector<T>& items, TargetOf target_of) {
  json out = json::array();
  for (const auto& item : items) {
    if (identity::canSee(who, read, target_of(item))) out.push_back(toJson(item));
  }
  (void)s;
  return jsonResponse(200, listOf(std::move(out)));
}

// --- Metering --------------------------------------------------------------------------------

// Who made each outstanding reservation, so only they (or their admins) can settle it.
class Reservations {
 public:
  void put(const ledger::UsageEvent& draft, int64_t tokens_estimate) {
    std::lock_guard lock(mu_);
    drafts_[draft.id] = {draft, tokens_estimate};
    order_.push_back(draft.id);
    while (order_.size() > kMax) {
      drafts_.erase(order_.front());
      order_.pop_front();
    }
  }
  void restore(const std::vector<ledger::RestoredReservation>& restored) {
    for (const auto& r : restored) put(r.draft, r.token_estimate);
  }
  std::optional<std::pair<ledger::UsageEvent, int64_t>> get(const std::string& id) const {
    std::lock_guard lock(mu_);
    auto it = drafts_.find(id);
    if (it == drafts_.end()) return std::nullopt;
    return it->second;
  }
  void erase(const std::string& id) {
    std::lock_guard lock(mu_);
    drafts_.erase(id);
  }

 private:
  static constexpr size_t kMax = 500'000;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::pair<ledger::UsageEvent, int64_t>> drafts_;
  std::deque<std::string> order_;
};

Reservations& reservations() {
  static Reservations r;
  return r;
}

json toJson(const ledger::UsageEvent& e) {
  return {{"id", e.id},
          {"at", formatRfc3339(e.at)},
          {"tenant", e.tenant_id},
          {"team", e.team_id},
          {"user", e.user_id.empty() ? json(nullptr) : json(e.user_id)},
          {"service_account",
           e.service_account_id.empty() ? json(nullptr) : json(e.service_account_id)},
          {"key", e.key_id},
          {"session_id", e.session_id},
          {"route", e.route},
          {"provider", e.provider},
          {"model", e.model},
          {"tokens",
           {{"input", e.tokens.input},
            {"output", e.tokens.output},
            {"cached_input", e.tokens.cached_input},
            {"cache_write", e.tokens.cache_write},
            {"reasoning", e.tokens.reasoning}}},
          {"cost", e.cost.toString()},
          {"overage", e.overage.toString()},
          {"latency_ms", e.latency_ms},
          {"ttft_ms", e.ttft_ms},
          {"status", e.status},
          {"estimated", e.estimated},
          {"recovered", e.recovered}};
}

// An id a client chose for its reservation: printable, and safe in a URL path.
bool validClientId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
  });
}

asio::awaitable<Response> createReservation(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  if (who.tenant_id.empty()) {
    co_return problem(400, "platform admins have no budget to reserve on; use a tenant's key");
  }
  API_TRY(id, optionalString(body, "id"));
  if (id && !validClientId(*id)) {
    co_return problem(
        400, "\"id\" must be 1 to 128 characters of letters, digits, '.', '_', ':' or '-'", "id");
  }
  API_TRY(model, optionalString(body, "model"));
  API_TRY(provider, optionalString(body, "provider"));
  API_TRY(input_tokens, optionalInt(body, "input_tokens", 0, int64_t{1} << 40));
  API_TRY(max_tokens, optionalInt(body, "max_tokens", 0, int64_t{1} << 40));
  Money amount;
  if (body.contains("amount")) {
    API_TRY(explicit_amount, requiredMoney(body, "amount"));
    amount = explicit_amount;
  } else {
    // The worst case: the counted input plus max_tokens of output, at the model's prices.
    const ledger::TokenPrice* price =
        model ? s.prices.find(provider.value_or(""), *model) : nullptr;
    if (price == nullptr || !max_tokens) {
      co_return problem(
          400,
          model && price == nullptr
              ? fmt::format("there is no price for model \"{}\"; give \"amount\"", *model)
              : std::string("give \"amount\", or \"model\" with \"input_tokens\" "
                            "and \"max_tokens\""),
          "amount");
    }
    auto worst = ledger::tokenCost(
        *price, {.input = input_tokens.value_or(0), .output = *max_tokens}, Rounding::kCeil);
    if (!worst) co_return problem(worst.error().withField("amount"));
    amount = *worst;
  }
  if (amount.isNegative()) co_return problem(400, "\"amount\" cannot be negative", "amount");
  API_TRY(route, optionalString(body, "route"));
  API_TRY(session, optionalString(body, "session_id"));
  API_TRY(tokens, optionalInt(body, "tokens", 0, int64_t{1} << 40));
  API_TRY(lease_text, optionalString(body, "lease"));
  Duration lease = std::chrono::minutes(10);
  if (lease_text) {
    auto l = parseDuration(*lease_text);
    if (!l || *l < std::chrono::seconds(1) || *l > std::chrono::hours(24)) {
      co_return problem(400, "\"lease\" must be a duration from 1s to 24h, e.g. \"10m\"", "lease");
    }
    lease = *l;
  }
  const auto key = s.directory.key(who.key_id);
  if (!key) co_return problem(401, "invalid API key");
  const std::string model_name = model.value_or(route.value_or(""));
  if (!key->models.empty() &&
      std::find(key->models.begin(), key->models.end(), model_name) == key->models.end()) {
    const Error why = Error(ErrorCode::kPermissionDenied,
                            fmt::format("this key may not use model \"{}\"", model_name))
                          .withField("model");
    co_return co_await deny(s, who, why, "reservation.create", "key:" + key->id);
  }
  const int64_t token_estimate = tokens.value_or(input_tokens.value_or(0) + max_tokens.value_or(0));
  ledger::UsageEvent draft;
  draft.id = id.value_or(s.ids.next());
  draft.tenant_id = who.tenant_id;
  draft.team_id = who.team_id;
  (who.kind == identity::OwnerKind::kUser ? draft.user_id : draft.service_account_id) = who.id;
  draft.key_id = key->id;
  draft.session_id = session.value_or("");
  draft.route = route.value_or("");
  draft.model = model.value_or("");
  draft.provider = provider.value_or("");
  ledger::Budget budget(s.wallets, s.meter, s.limiter, s.rate_limits);
  ledger::RateDecision rate;
  auto held = budget.hold({.payer = identity::payerOf(who, s.directory),
                           .model = model_name,
                           .draft = draft,
                           .amount = amount,
                           .tokens = token_estimate,
                           .lease = lease,
                           .options = {.external = true,
                                       .token_estimate = token_estimate,
                                       .fresh_id = !id.has_value()}},
                          &rate);
  if (!held && !rate.allowed) {
    Error why(ErrorCode::kResourceExhausted,
              rate.never ? fmt::format("this request needs more than the key's whole limit of {} "
                                       "per minute ({})",
                                       rate.limit, rate.key)
                         : fmt::format("rate limit {} of {} per minute reached; retry in {}",
                                       rate.key, rate.limit, formatDuration(rate.retry_after)));
    auto entries = denialEntries(s, who, "rate.deny", "key:" + key->id,
                                 writeJson(json{{"bucket", rate.key}, {"limit", rate.limit}}));
    if (!entries.empty()) {
      (void)co_await commit(s.store, [&](store::Tx& tx) -> Result<void> {
        for (const auto& e : entries) PURSER_TRY(s.audit.append(tx, e));
        return {};
      });
    }
    Response r = problem(why);
    if (!rate.never) {
      const auto secs = std::chrono::ceil<std::chrono::seconds>(rate.retry_after).count();
      r.headers.add("Retry-After", std::to_string(std::max<int64_t>(1, secs)));
    }
    co_return r;
  }
  if (!held) {
    if (held.error().code == ErrorCode::kResourceExhausted) {
      co_return co_await deny(s, who, held.error(), "budget.deny", "event:" + draft.id);
    }
    co_return problem(held.error());
  }
  if (s.meter.syncsEachRecord() &&
      !co_await gateway::asyncDurable(s.meter, held->journalSequence(), asio::use_awaitable)) {
    co_return problem(unavailable("the ledger could not make the reservation durable; try again"));
  }
  const std::vector<std::string> chain = held->wallets();
  held->detach();  // settled or released by id, through this API
  reservations().put(draft, token_estimate);
  co_return jsonResponse(201, {{"id", draft.id},
                               {"amount", amount.toString()},
                               {"wallets", chain},
                               {"lease_expires_at", formatRfc3339(s.clock.now() + lease)}});
}

// Which reservation, and may the caller act on it?
Result<std::pair<ledger::UsageEvent, int64_t>> ownReservation(const Principal& who,
                                                              const std::string& id) {
  auto r = reservations().get(id);
  if (!r || !inReach(who, r->first.tenant_id)) {
    return fail(Error(ErrorCode::kNotFound, fmt::format("reservation \"{}\" not found", id))
                    .withField("id"));
  }
  const ledger::UsageEvent& d = r->first;
  const std::string owner = d.user_id.empty() ? d.service_account_id : d.user_id;
  if (owner != who.id)
    PURSER_TRY(identity::authorize(who, Action::kManageKey, {d.tenant_id, d.team_id, owner}));
  return *r;
}

// Delivers one alert; failures are logged, never retried forever (the audit log has the alert).
asio::awaitable<void> postWebhook(http::HttpClient& client, std::string url, std::string body) {
  http::ClientRequest req;
  req.method = Method::kPost;
  req.url = std::move(url);
  req.headers.add("Content-Type", "application/json");
  req.body = std::move(body);
  req.timeout = std::chrono::seconds(10);
  auto res = co_await client.request(std::move(req));
  if (!res) {
    spdlog::warn("alerts: webhook failed: {}", res.error().message);
  } else if (res->status >= 300) {
    spdlog::warn("alerts: webhook answered {}", res->status);
  }
}

// The optional "tokens" object of a settlement or a recorded event: {input, output, cached_input,
// cache_write, reasoning}.
Result<void> readTokens(const json& body, ledger::TokenCounts* tokens) {
  auto it = body.find("tokens");
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_object()) {
    return fail(invalidArgument("\"tokens\" must be an object of counts").withField("tokens"));
  }
  for (const auto& [name, field] :
       std::initializer_list<std::pair<const char*, int64_t ledger::TokenCounts::*>>{
           {"input", &ledger::TokenCounts::input},
           {"output", &ledger::TokenCounts::output},
           {"cached_input", &ledger::TokenCounts::cached_input},
           {"cache_write", &ledger::TokenCounts::cache_write},
           {"reasoning", &ledger::TokenCounts::reasoning}}) {
    auto v = optionalInt(*it, name, 0, int64_t{1} << 40);
    if (!v) return fail(v.error().withField("tokens"));
    tokens->*field = v->value_or(0);
  }
  return {};
}

// What an event costs: "cost" as given, or its tokens at the model's price.
Result<Money> eventCost(const Services& s, const json& body, const ledger::UsageEvent& event) {
  if (body.contains("cost")) {
    auto cost = PURSER_TRY_VALUE(requiredMoney(body, "cost"));
    if (cost.isNegative()) {
      return fail(invalidArgument("\"cost\" cannot be negative").withField("cost"));
    }
    return cost;
  }
  const ledger::TokenPrice* price = s.prices.find(event.provider, event.model);
  if (price == nullptr) {
    return fail(invalidArgument(
                    fmt::format("there is no price for model \"{}\"; give \"cost\"", event.model))
                    .withField("cost"));
  }
  auto priced = ledger::tokenCost(*price, event.tokens, Rounding::kHalfEven);
  if (!priced) return fail(priced.error().withField("cost"));
  return *priced;
}

asio::awaitable<Response> settleReservation(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  const std::string id(*req.param("id"));
  API_TRY(body, parseObject(req));
  API_TRY(own, ownReservation(who, id));
  auto [event, estimate] = own;
  if (auto read = readTokens(body, &event.tokens); !read) co_return problem(read.error());
  API_TRY(status, optionalInt(body, "status", 0, 999));
  API_TRY(latency, optionalInt(body, "latency_ms", 0, int64_t{1} << 40));
  API_TRY(ttft, optionalInt(body, "ttft_ms", 0, int64_t{1} << 40));
  API_TRY(provider, optionalString(body, "provider"));
  API_TRY(estimated, optionalBool(body, "estimated"));
  if (provider) event.provider = *provider;
  API_TRY(cost, eventCost(s, body, event));
  event.cost = cost;
  event.status = static_cast<int>(status.value_or(200));
  event.latency_ms = latency.value_or(0);
  event.ttft_ms = ttft.value_or(0);
  event.estimated = estimated.value_or(false);
  event.at = s.clock.now();
  // The tokens-per-minute limits took the estimate at reservation; the settlement reconciles.
  ledger::Budget budget(s.wallets, s.meter, s.limiter, s.rate_limits);
  ledger::Charged charged{
      event.tenant_id, event.team_id, event.user_id, event.service_account_id, {}};
  auto settled = budget.settle(identity::payerOf(std::move(charged), event.key_id, s.directory),
                               event.model.empty() ? event.route : event.model, event, estimate);
  if (!settled) co_return problem(settled.error());
  if (!settled->duplicate && s.meter.syncsEachRecord() &&
      !co_await gateway::asyncDurable(s.meter, settled->journal_sequence, asio::use_awaitable)) {
    co_return problem(
        unavailable("the ledger could not make the usage durable; it will be "
                    "recovered at the next start"));
  }
  json alerts = json::array();
  for (const auto& a : settled->alerts) {
    alerts.push_back({{"wallet", a.wallet_id},
                      {"threshold", a.threshold},
                      {"spent", a.spent.toString()},
                      {"limit", a.limit.toString()}});
  }
  if (!settled->alerts.empty()) {
    postAlerts(s, co_await asio::this_coro::executor, settled->alerts, event.tenant_id);
  }
  if (!settled->alerts.empty()) {
    (void)co_await commit(s.store, [&](store::Tx& tx) -> Result<void> {
      for (const auto& a : settled->alerts) {
        PURSER_TRY(s.audit.append(tx, auditEntry(who, "budget.alert", "wallet:" + a.wallet_id, "",
                                                 writeJson(json{{"threshold", a.threshold},
                                                                {"spent", a.spent.toString()},
                                                                {"limit", a.limit.toString()}}),
                                                 event.tenant_id)));
      }
      return {};
    });
  }
  co_return jsonResponse(200, {{"id", id},
                               {"charged", settled->charged.toString()},
                               {"overage", settled->overage.toString()},
                               {"duplicate", settled->duplicate},
                               {"wallets", settled->wallet_ids},
                               {"alerts", alerts}});
}

asio::awaitable<Response> releaseReservation(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  const std::string id(*req.param("id"));
  API_TRY(own, ownReservation(who, id));
  (void)own;
  auto released = s.meter.release(id);
  if (!released) co_return problem(released.error().withField("id"));
  reservations().erase(id);
  co_return jsonResponse(200, {{"id", id}, {"released", true}});
}

// At most this many events in one POST /usage.
constexpr size_t kMaxRecordedEvents = 1000;

// An optional label of a recorded event (model, route, provider, session): 1 to 256 bytes, no
// control characters.
Result<std::string> optionalLabel(const json& body, const std::string& field) {
  auto v = PURSER_TRY_VALUE(optionalString(body, field));
  if (!v) return std::string();
  if (v->empty() || v->size() > 256 || std::any_of(v->begin(), v->end(), [](char c) {
        return static_cast<unsigned char>(c) < 32 || c == 127;
      })) {
    return fail(
        invalidArgument(
            fmt::format("\"{}\" must be 1 to 256 characters with no control characters", field))
            .withField(field));
  }
  return *v;
}

struct RecordedEvent {
  ledger::UsageEvent event;
  std::vector<std::string> wallets;
};

// One event of POST /usage: {id, at, owner: {kind, id}, key?, model?, route?, provider?,
// session_id?, tokens?, cost?, status?, latency_ms?, ttft_ms?}.
Result<RecordedEvent> readRecordedEvent(const Services& s, const Principal& who, const json& body,
                                        SystemTime now) {
  if (!body.is_object()) return fail(invalidArgument("each event must be a JSON object"));
  RecordedEvent out;
  ledger::UsageEvent& e = out.event;
  e.id = PURSER_TRY_VALUE(requiredString(body, "id"));
  if (!validClientId(e.id)) {
    return fail(invalidArgument("\"id\" must be 1 to 128 characters of letters, digits, '.', '_', "
                                "':' or '-'")
                    .withField("id"));
  }
  const std::string at_text = PURSER_TRY_VALUE(requiredString(body, "at"));
  auto at = parseRfc3339(at_text);
  if (!at) {
    return fail(invalidArgument(fmt::format("\"at\" must be an RFC 3339 time such as "
                                            "\"2026-11-02T14:05:00Z\", got \"{}\"",
                                            at_text))
                    .withField("at"));
  }
  if (*at > now) {
    return fail(invalidArgument("\"at\" is in the future; only usage that ran is recorded")
                    .withField("at"));
  }
  if (*at < parseRfc3339("2000-01-01T00:00:00Z").value()) {
    return fail(invalidArgument("\"at\" is before 2000").withField("at"));
  }
  e.at = *at;
  auto owner = body.find("owner");
  if (owner == body.end() || !owner->is_object()) {
    return fail(invalidArgument("\"owner\" is required: {\"kind\": \"user\" or "
                                "\"service_account\", \"id\": id or name}")
                    .withField("owner"));
  }
  const std::string kind_text = PURSER_TRY_VALUE(requiredString(*owner, "kind"));
  auto kind = identity::parseOwnerKind(kind_text);
  if (!kind) return fail(kind.error().withField("owner.kind"));
  const std::string named = PURSER_TRY_VALUE(requiredString(*owner, "id"));
  const bool user = *kind == identity::OwnerKind::kUser;
  const std::string owner_id =
      resolveScope(s, who,
                   {user ? ledger::ScopeKind::kUser : ledger::ScopeKind::kServiceAccount, named})
          .id;
  if (user) {
    auto u = s.directory.user(owner_id);
    if (!u || u->tenant_id.empty()) return fail(notFound("user", named, "owner.id"));
    e.tenant_id = u->tenant_id;
    e.team_id = u->team_id;
    e.user_id = u->id;
  } else {
    auto a = s.directory.serviceAccount(owner_id);
    if (!a) return fail(notFound("service account", named, "owner.id"));
    e.tenant_id = a->tenant_id;
    e.team_id = a->team_id;
    e.service_account_id = a->id;
  }
  ledger::Charged charged{e.tenant_id, e.team_id, e.user_id, e.service_account_id, {}};
  if (auto key = PURSER_TRY_VALUE(optionalString(body, "key")); key) {
    auto k = s.directory.key(*key);
    if (!k || k->owner_id != owner_id) {
      return fail(invalidArgument(fmt::format("key \"{}\" is not a key of the owner", *key))
                      .withField("key"));
    }
    e.key_id = k->id;
    for (const auto& c : s.directory.keyChain(k->id)) charged.key_chain.push_back(c.id);
  }
  e.model = PURSER_TRY_VALUE(optionalLabel(body, "model"));
  e.route = PURSER_TRY_VALUE(optionalLabel(body, "route"));
  e.provider = PURSER_TRY_VALUE(optionalLabel(body, "provider"));
  e.session_id = PURSER_TRY_VALUE(optionalLabel(body, "session_id"));
  PURSER_TRY(readTokens(body, &e.tokens));
  e.cost = PURSER_TRY_VALUE(eventCost(s, body, e));
  e.status =
      static_cast<int>(PURSER_TRY_VALUE(optionalInt(body, "status", 100, 599)).value_or(200));
  e.latency_ms = PURSER_TRY_VALUE(optionalInt(body, "latency_ms", 0, int64_t{1} << 40)).value_or(0);
  e.ttft_ms = PURSER_TRY_VALUE(optionalInt(body, "ttft_ms", 0, int64_t{1} << 40)).value_or(0);
  out.wallets = s.wallets.chain(charged, e.model.empty() ? e.route : e.model);
  return out;
}

// POST /api/v1/usage: usage that ran elsewhere, recorded after the fact — history brought from
// another gateway, or work metered outside Purser (platform admins). Each event is charged to its
// owner's wallets whose current window holds its time (older events are history only: spend
// reports, not budgets) and recorded once by id: a retry answers the ids already recorded. A bad
// event refuses the whole request, naming it; nothing is recorded.
asio::awaitable<Response> recordUsage(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  if (auto denied = identity::authorize(who, Action::kRecordUsage, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), "usage.record", "usage");
  }
  API_TRY(body, parseObject(req));
  auto list = body.find("events");
  if (list == body.end() || !list->is_array() || list->empty()) {
    co_return problem(400, "\"events\" must be a non-empty list of usage events", "events");
  }
  if (list->size() > kMaxRecordedEvents) {
    co_return problem(400,
                      fmt::format("at most {} events per request, got {}; send the rest in "
                                  "further requests",
                                  kMaxRecordedEvents, list->size()),
                      "events");
  }
  const SystemTime now = s.clock.now();
  std::vector<RecordedEvent> events;
  std::set<std::string> ids;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string at = fmt::format("events[{}]", i);
    auto read = readRecordedEvent(s, who, (*list)[i], now);
    if (!read) {
      co_return problem(read.error().withField(at));
    }
    if (!ids.insert(read->event.id).second) {
      co_return problem(400, fmt::format("id \"{}\" is given twice", read->event.id), at + ".id");
    }
    if (s.wallets.holds(read->event.id)) {
      co_return problem(Error(ErrorCode::kAlreadyExists,
                              fmt::format("id \"{}\" is an outstanding reservation's; settle it "
                                          "instead",
                                          read->event.id))
                            .withField(at + ".id"));
    }
    events.push_back(std::move(*read));
  }
  // The ids the durable record already has: a retry, or ids in use (the journal's latest
  // settlements included, once the store has caught up with it).
  if (auto caught = s.meter.catchUp(); !caught) co_return problem(caught.error());
  std::set<std::string> recorded;
  auto looked = co_await commit(s.store, [&](store::Tx& tx) -> Result<void> {
    for (const auto& r : events) {
      auto rows = PURSER_TRY_VALUE(
          tx.query("SELECT 1 FROM usage_events WHERE id = $1 LIMIT 1", {r.event.id}));
      if (!rows.empty()) recorded.insert(r.event.id);
    }
    return {};
  });
  if (!looked) co_return problem(unavailable("the ledger could not be read; try again"));
  // Charged in memory first (as every charge is), then written together; a failed write leaves
  // memory charged (never under-counting), and the retry records what this attempt charged.
  struct TenantTotal {
    int64_t events = 0;
    Money charged, overage;
    SystemTime from = SystemTime::max(), to = SystemTime::min();
    std::vector<ledger::Alert> alerts;
  };
  std::map<std::string, TenantTotal> tenants;
  std::vector<store::TxFn> writes;
  Money charged, overage;
  json alerts = json::array();
  Error failed;
  bool stopped = false;
  for (const auto& r : events) {
    if (recorded.contains(r.event.id)) continue;
    auto c = s.meter.record(r.event, r.wallets);
    if (!c) {
      // Only a race with a reservation made since the check above: record what was charged.
      failed = c.error().withField("events");
      stopped = true;
      break;
    }
    writes.push_back(std::move(c->write));
    TenantTotal& t = tenants[r.event.tenant_id];
    ++t.events;
    t.charged = t.charged.add(c->charged).value_or(Money::max());
    t.overage = t.overage.add(c->overage).value_or(Money::max());
    t.from = std::min(t.from, r.event.at);
    t.to = std::max(t.to, r.event.at);
    charged = charged.add(c->charged).value_or(Money::max());
    overage = overage.add(c->overage).value_or(Money::max());
    for (const auto& a : c->alerts) {
      t.alerts.push_back(a);
      alerts.push_back({{"wallet", a.wallet_id},
                        {"threshold", a.threshold},
                        {"spent", a.spent.toString()},
                        {"limit", a.limit.toString()}});
    }
  }
  auto written = co_await commit(s.store, [&](store::Tx& tx) -> Result<void> {
    for (const auto& w : writes) PURSER_TRY(w(tx));
    for (const auto& [tenant, t] : tenants) {
      PURSER_TRY(auditAlerts(s, tx, t.alerts, tenant, who.id));
      PURSER_TRY(s.audit.append(tx, auditEntry(who, "usage.record", "tenant:" + tenant, "",
                                               writeJson(json{{"events", t.events},
                                                              {"charged", t.charged.toString()},
                                                              {"overage", t.overage.toString()},
                                                              {"from", formatRfc3339(t.from)},
                                                              {"to", formatRfc3339(t.to)}}),
                                               tenant)));
    }
    return {};
  });
  if (!written) {
    spdlog::error("api: recorded usage not written: {}", written.error().message);
    co_return problem(unavailable(
        "the ledger could not record the usage; send the same events again (ids already recorded "
        "are skipped)"));
  }
  const auto executor = co_await asio::this_coro::executor;
  for (const auto& [tenant, t] : tenants) {
    if (!t.alerts.empty()) postAlerts(s, executor, t.alerts, tenant);
  }
  if (stopped) co_return problem(failed);
  co_return jsonResponse(
      200, {{"recorded", writes.size()},
            {"already_recorded", json(std::vector<std::string>(recorded.begin(), recorded.end()))},
            {"charged", charged.toString()},
            {"overage", overage.toString()},
            {"alerts", alerts}});
}

json toJson(const ledger::RateLimitSpec& l) {
  return {{"id", l.id},
          {"tenant", l.tenant_id},
          {"scope", {{"kind", ledger::scopeKindName(l.scope.kind)}, {"id", l.scope.id}}},
          {"model", l.model.empty() ? json(nullptr) : json(l.model)},
          {"rpm", l.rpm},
          {"tpm", l.tpm}};
}

asio::awaitable<Response> createRateLimit(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  API_TRY(named, parseScopeObject(body));
  const ledger::Scope scope = resolveScope(s, who, named);
  API_TRY(target, scopeTarget(s, who, scope, /*for_write=*/true));
  if (auto denied = identity::authorize(who, Action::kWriteWallet, target); !denied) {
    co_return co_await deny(s, who, denied.error(), "rate_limit.create",
                            std::string(ledger::scopeKindName(scope.kind)) + ":" + scope.id);
  }
  API_TRY(model, optionalString(body, "model"));
  API_TRY(rpm, optionalInt(body, "rpm", 0, 1'000'000'000));
  API_TRY(tpm, optionalInt(body, "tpm", 0, int64_t{1} << 40));
  if (rpm.value_or(0) == 0 && tpm.value_or(0) == 0) {
    co_return problem(400, "give \"rpm\", \"tpm\" or both (per minute, above zero)", "rpm");
  }
  ledger::RateLimitSpec l{s.ids.next(),       target.tenant_id, scope,
                          model.value_or(""), rpm.value_or(0),  tpm.value_or(0)};
  for (const auto& existing : s.rate_limits.all()) {
    if (existing.scope == l.scope && existing.model == l.model) {
      co_return problem(409,
                        fmt::format("this scope already has a rate limit{} ({})",
                                    l.model.empty() ? "" : " for model " + l.model, existing.id),
                        "scope");
    }
  }
  auto done = co_await commitAudited(
      s, [&](store::Tx& tx) { return ledger::insertRateLimit(tx, l, now(s)); },
      auditEntry(who, "rate_limit.create", "rate_limit:" + l.id, "", writeJson(toJson(l)),
                 l.tenant_id));
  if (!done) co_return problem(done.error().withField("scope"));
  s.rate_limits.put(l);
  co_return jsonResponse(201, toJson(l));
}

// The scope and time range of a usage or spend query, authorized for the caller.
asio::awaitable<Result<ledger::UsageQuery>> usageQuery(const Services& s, const Principal& who,
                                                       Request& req, bool& denied_audited,
                                                       Response& denial) {
  auto scope_text = req.queryParam("scope");
  if (!scope_text) {
    co_return fail(
        invalidArgument("\"scope\" is required, e.g. scope=team:01jb...").withField("scope"));
  }
  auto named = parseScopeParam(*scope_text);
  if (!named) co_return fail(named.error());
  const std::optional<ledger::Scope> scope = resolveScope(s, who, *named);
  auto target = scopeTarget(s, who, *scope, /*for_write=*/false);
  if (!target) co_return fail(target.error());
  if (auto allowed = identity::authorize(who, Action::kReadSpend, *target); !allowed) {
    denial = co_await deny(s, who, allowed.error(), "spend.read", *scope_text);
    denied_audited = true;
    co_return fail(allowed.error());
  }
  ledger::UsageQuery q;
  q.scope_kind = scope->kind;
  q.scope_id = scope->id;
  for (const char* bound : {"from", "to"}) {
    if (auto v = req.queryParam(bound)) {
      auto t = parseRfc3339(*v);
      if (!t) co_return fail(t.error().withField(bound));
      (std::string_view(bound) == "from" ? q.from : q.to) = *t;
    }
  }
  if (auto limit = req.queryParam("limit")) {
    char* end = nullptr;
    const long long n = std::strtoll(limit->c_str(), &end, 10);
    if (limit->empty() || *end != '\0' || n < 1 || n > 10'000) {
      co_return fail(
          invalidArgument("\"limit\" must be a whole number from 1 to 10000").withField("limit"));
    }
    q.limit = n;
  }
  co_return q;
}

asio::awaitable<Response> listUsage(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  bool denied = false;
  Response denial;
  auto q = co_await usageQuery(s, who, req, denied, denial);
  if (denied) co_return denial;
  if (!q) co_return problem(q.error());
  API_TRY(events, s.meter.events(*q));
  json items = json::array();
  for (const auto& e : events) items.push_back(toJson(e));
  co_return jsonResponse(200, listOf(std::move(items)));
}

asio::awaitable<Response> spend(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  bool denied = false;
  Response denial;
  auto q = co_await usageQuery(s, who, req, denied, denial);
  if (denied) co_return denial;
  if (!q) co_return problem(q.error());
  const std::string group_by = req.queryParam("group_by").value_or("day");
  auto rows = s.meter.spend(*q, group_by);
  if (!rows) co_return problem(rows.error().withField("group_by"));
  // Who a group is, beside its id.
  std::optional<ledger::ScopeKind> named;
  if (group_by == "team") named = ledger::ScopeKind::kTeam;
  if (group_by == "key") named = ledger::ScopeKind::kKey;
  json items = json::array();
  Money total, overage;
  for (const auto& r : *rows) {
    std::string name;
    if (group_by == "user") {
      name = scopeName(s, ledger::ScopeKind::kUser, r.group);
      if (name.empty()) name = scopeName(s, ledger::ScopeKind::kServiceAccount, r.group);
    } else if (named) {
      name = scopeName(s, *named, r.group);
    }
    items.push_back({{"group", r.group},
                     {"name", name.empty() ? json(nullptr) : json(name)},
                     {"cost", r.cost.toString()},
                     {"overage", r.overage.toString()},
                     {"requests", r.requests},
                     {"tokens",
                      {{"input", r.tokens.input},
                       {"output", r.tokens.output},
                       {"cached_input", r.tokens.cached_input},
                       {"cache_write", r.tokens.cache_write},
                       {"reasoning", r.tokens.reasoning}}}});
    total = total.add(r.cost).value_or(Money::max());
    overage = overage.add(r.overage).value_or(Money::max());
  }
  co_return jsonResponse(200, {{"group_by", group_by},
                               {"total", total.toString()},
                               {"overage", overage.toString()},
                               {"data", items}});
}

}  // namespace

namespace {

void writeAudits(const Services& s, std::vector<ledger::AuditEntry> entries) {
  if (entries.empty()) return;
  const ledger::AuditLog& log = s.audit;
  s.store.writeAsync(
      [entries = std::move(entries), &log](store::Tx& tx) -> Result<void> {
        for (const auto& e : entries) PURSER_TRY(log.append(tx, e));
        return {};
      },
      [](Result<void> r) {
        if (!r) spdlog::error("api: could not audit a denial: {}", r.error().message);
      });
}

}  // namespace

std::vector<ledger::AuditEntry> denialEntries(const Services& s, const Principal& who,
                                              std::string action, std::string target,
                                              std::string detail) {
  std::vector<ledger::AuditEntry> entries;
  bool write = true;
  if (s.denials != nullptr) {
    auto decision = s.denials->note(who, action);
    entries = std::move(decision.summaries);
    write = decision.write;
  }
  if (write) {
    entries.push_back(auditEntry(who, std::move(action), std::move(target), "", std::move(detail),
                                 who.tenant_id));
  }
  return entries;
}

void auditClosedDenials(const Services& s) {
  if (s.denials != nullptr) writeAudits(s, s.denials->closed());
}

void restoreReservations(const std::vector<ledger::RestoredReservation>& restored) {
  reservations().restore(restored);
}

Result<void> loadState(const Services& s) {
  PURSER_TRY(s.store.migrate("identity", identity::identityMigrations()));
  PURSER_TRY(s.store.migrate("ledger", ledger::ledgerMigrations()));
  PURSER_TRY(s.store.migrate("audit", ledger::AuditLog::migrations()));
  s.directory.load(PURSER_TRY_VALUE(identity::loadIdentity(s.store)));
  const auto specs = PURSER_TRY_VALUE(ledger::loadWallets(s.store));
  for (const auto& spec : specs) {
    const auto window = ledger::periodWindow(spec.period, spec.zone, s.clock.now());
    Money spent;
    PURSER_TRY(s.store.read([&](store::Tx& tx) -> Result<void> {
      spent = PURSER_TRY_VALUE(ledger::spentSince(tx, spec.id, window.start));
      return {};
    }));
    PURSER_TRY(s.wallets.put(spec, spent));
  }
  for (auto& l : PURSER_TRY_VALUE(ledger::loadRateLimits(s.store))) s.rate_limits.put(std::move(l));
  return {};
}

Result<std::optional<std::string>> bootstrap(const Services& s,
                                             const std::optional<std::string>& admin_key) {
  if (s.directory.keyCount() > 0) return std::optional<std::string>();
  if (admin_key && admin_key->size() < 16) {
    return fail(invalidArgument(
        "PURSER_ADMIN_KEY must be at least 16 characters; unset it to have a key generated"));
  }
  identity::User admin;
  admin.id = s.ids.next();
  admin.name = "admin";
  admin.role = Role::kPlatformAdmin;
  admin.created_at = now(s);
  identity::ApiKey key;
  identity::NewKey secret =
      admin_key ? identity::externalKey(*admin_key) : identity::generateKey(s.ids, s.random);
  key.id = admin_key ? s.ids.next() : secret.id;
  key.lookup = secret.lookup;
  key.secret_hash = secret.secret_hash;
  key.owner_kind = identity::OwnerKind::kUser;
  key.owner_id = admin.id;
  key.name = admin_key ? "bootstrap (PURSER_ADMIN_KEY)" : "bootstrap";
  key.created_at = admin.created_at;
  Principal system;
  system.id = "system";
  system.role = Role::kPlatformAdmin;
  PURSER_TRY(s.store.write([&](store::Tx& tx) -> Result<void> {
    PURSER_TRY(identity::insertUser(tx, admin));
    PURSER_TRY(identity::insertKey(tx, key));
    PURSER_TRY(s.audit.append(
        tx, auditEntry(system, "bootstrap", "user:" + admin.id, "", writeJson(toJson(admin)), "")));
    return {};
  }));
  s.directory.put(admin);
  s.directory.put(key);
  if (admin_key) return std::optional<std::string>();
  return std::optional<std::string>(secret.secret);
}

// --- Providers (platform admins): names, kinds and key counts; keys go in, never out ------------

asio::awaitable<Response> listProviders(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  if (auto denied = identity::authorize(who, Action::kCreateTenant, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), "provider.read", "providers");
  }
  json items = json::array();
  if (s.gateway != nullptr) {
    for (const auto* p : s.gateway->providers()) {
      items.push_back(
          {{"name", p->name()},
           {"kind", p->kind() == gateway::ProviderKind::kAnthropic ? "anthropic" : "openai"},
           {"base_url", p->baseUrl()},
           {"keys", p->keyCount()},
           {"keys_source", p->keysReplaced() ? "api" : "config"}});
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
  auto done = co_await commitAudited(
      s, [&](store::Tx& tx) { return s.provider_keys->put(tx, name, keys); }, entry);
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
  auto done = co_await commitAudited(
      s,
      [&](store::Tx& tx) -> Result<void> {
        PURSER_TRY(s.provider_keys->remove(tx, name));
        return {};
      },
      entry);
  if (!done) co_return problem(done.error());
  provider->clearReplacedKeys();
  co_return jsonResponse(
      200, {{"name", name}, {"keys", provider->keyCount()}, {"keys_source", "config"}});
}

void postAlerts(const Services& s, const asio::any_io_executor& executor,
                const std::vector<ledger::Alert>& alerts, const std::string& tenant_id) {
  if (s.alert_webhook.empty() || s.http_clients == nullptr) return;
  for (const auto& a : alerts) {
    json payload = {{"type", "budget.alert"},
                    {"wallet", a.wallet_id},
                    {"tenant", tenant_id},
                    {"threshold", a.threshold},
                    {"spent", a.spent.toString()},
                    {"limit", a.limit.toString()},
                    {"at", formatRfc3339(s.clock.now())}};
    if (a.window.end != SystemTime::max()) {
      payload["window"] = {{"start", formatRfc3339(a.window.start)},
                           {"end", formatRfc3339(a.window.end)}};
    }
    asio::co_spawn(executor,
                   postWebhook(s.http_clients->current(), s.alert_webhook, writeJson(payload)),
                   asio::detached);
  }
}

Result<void> auditAlerts(const Services& s, store::Tx& tx, const std::vector<ledger::Alert>& alerts,
                         const std::string& tenant_id, const std::string& actor) {
  for (const auto& a : alerts) {
    ledger::AuditEntry e;
    e.tenant_id = tenant_id;
    e.actor = actor;
    e.actor_role = "system";
    e.action = "budget.alert";
    e.target = "wallet:" + a.wallet_id;
    e.after = writeJson(json{
        {"threshold", a.threshold}, {"spent", a.spent.toString()}, {"limit", a.limit.toString()}});
    PURSER_TRY(s.audit.append(tx, e));
  }
  return {};
}

Result<void> addMeteringRoutes(http::Router& router, const Services& services) {
  auto s = std::make_shared<const Services>(services);
  const auto route = [&](Method m, const char* path, auto handler) {
    return router.addAsync(m, path, [s, handler](Request& req) { return handler(*s, req); });
  };
  PURSER_TRY(route(Method::kPost, "/api/v1/reservations", createReservation));
  PURSER_TRY(route(Method::kPost, "/api/v1/reservations/{id}/settle", settleReservation));
  PURSER_TRY(route(Method::kDelete, "/api/v1/reservations/{id}", releaseReservation));
  PURSER_TRY(route(Method::kGet, "/api/v1/usage", listUsage));
  PURSER_TRY(route(Method::kPost, "/api/v1/usage", recordUsage));
  PURSER_TRY(route(Method::kGet, "/api/v1/spend", spend));
  PURSER_TRY(route(Method::kPost, "/api/v1/rate-limits", createRateLimit));
  PURSER_TRY(
      route(Method::kGet, "/api/v1/rate-limits",
            scopedList(
                "rate_limit.read", [](const Services& s) { return s.rate_limits.all(); },
                [](const ledger::RateLimitSpec& l) -> const ledger::Scope& { return l.scope; },
                [](const ledger::RateLimitSpec& l) { return toJson(l); })));
  return {};
}

Result<void> addAdminRoutes(http::Router& router, const Services& services) {
  auto s = std::make_shared<const Services>(services);
  const auto route = [&](Method m, const char* path, auto handler) {
    return router.addAsync(m, path, [s, handler](Request& req) { return handler(*s, req); });
  };
  PURSER_TRY(route(Method::kPost, "/api/v1/tenants", createTenant));
  PURSER_TRY(route(Method::kPost, "/api/v1/teams", createTeam));
  PURSER_TRY(route(Method::kPost, "/api/v1/users", createUser));
  PURSER_TRY(route(Method::kPost, "/api/v1/service-accounts", createServiceAccount));
  PURSER_TRY(route(Method::kPost, "/api/v1/keys", createKey));
  PURSER_TRY(route(Method::kDelete, "/api/v1/keys/{id}", revokeKey));
  PURSER_TRY(route(Method::kPost, "/api/v1/keys/{id}/rotate", rotateKey));
  PURSER_TRY(route(Method::kPost, "/api/v1/wallets", createWallet));
  PURSER_TRY(
      route(Method::kGet, "/api/v1/wallets",
            scopedList(
                "wallet.read", [](const Services& s) { return s.wallets.all(); },
                [](const ledger::WalletStatus& w) -> const ledger::Scope& { return w.spec.scope; },
                [](const ledger::WalletStatus& w) { return toJson(w); })));
  PURSER_TRY(route(Method::kGet, "/api/v1/audit", listAudit));
  PURSER_TRY(route(Method::kGet, "/api/v1/audit/verify", verifyAudit));
  PURSER_TRY(route(Method::kGet, "/api/v1/whoami", whoami));
  PURSER_TRY(route(Method::kGet, "/api/v1/providers", listProviders));
  PURSER_TRY(route(Method::kPut, "/api/v1/providers/{name}/keys", replaceProviderKeys));
  PURSER_TRY(route(Method::kDelete, "/api/v1/providers/{name}/keys", restoreProviderKeys));

  const auto list = [&](const char* path, auto handler) {
    return router.addAsync(Method::kGet, path,
                           [s, handler](Request& req) -> asio::awaitable<Response> {
                             auto who = authenticate(*s, req);
                             if (!who) co_return problem(who.error());
                             co_return handler(*s, *who);
                           });
  };
  PURSER_TRY(list("/api/v1/tenants", [](const Services& s, const Principal& who) {
    return listVisible(s, who, Action::kReadTenant, s.directory.tenants(),
                       [](const identity::Tenant& t) {
                         return Target{t.id, "", ""};
                       });
  }));
  PURSER_TRY(list("/api/v1/teams", [](const Services& s, const Principal& who) {
    return listVisible(s, who, Action::kReadTeam, s.directory.teams(), [](const identity::Team& t) {
      return Target{t.tenant_id, t.id, ""};
    });
  }));
  PURSER_TRY(list("/api/v1/users", [](const Services& s, const Principal& who) {
    return listVisible(s, who, Action::kReadUser, s.directory.users(), [](const identity::User& u) {
      return Target{u.tenant_id, u.team_id, u.id};
    });
  }));
  PURSER_TRY(list("/api/v1/service-accounts", [](const Services& s, const Principal& who) {
    return listVisible(s, who, Action::kReadServiceAccount, s.directory.serviceAccounts(),
                       [](const identity::ServiceAccount& a) {
                         return Target{a.tenant_id, a.team_id, a.id};
                       });
  }));
  PURSER_TRY(list("/api/v1/keys", [](const Services& s, const Principal& who) {
    return listVisible(s, who, Action::kReadKey, s.directory.keys(), keyTarget);
  }));
  return {};
}

}  // namespace purser::api
