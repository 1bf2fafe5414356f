// The admin API's shared helpers: see admin_common.h.
#include "api/admin_common.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/crypto.h"
#include "common/json.h"
#include "http/async.h"
#include "http/cookies.h"

namespace purser::api {

namespace asio = boost::asio;
using http::Request;
using http::Response;
using identity::Principal;
using identity::Role;
using identity::Target;

namespace admin {

json toJson(const identity::Tenant& t) {
  return {{"id", t.id},
          {"name", t.name},
          {"created_at", t.created_at},
          {"priority",
           {{"max_workload_priority", t.grant.max_workload_priority},
            {"classes", t.grant.classes},
            {"max_key_priority", std::string(identity::priorityName(t.grant.max_key_priority))}}},
          {"tools", t.tools}};
}

json toJson(const identity::Team& t) {
  return {{"id", t.id},
          {"tenant", t.tenant_id},
          {"name", t.name},
          {"created_at", t.created_at},
          {"tools", t.tools}};
}

json toJson(const identity::User& u) {
  return {{"id", u.id},
          {"tenant", u.tenant_id},
          {"team", u.team_id},
          {"name", u.name},
          {"email", u.email},
          {"role", identity::roleName(u.role)},
          {"created_at", u.created_at},
          {"signs_in", !u.subject.empty()},
          {"disabled_at", u.disabled_at.empty() ? json(nullptr) : json(u.disabled_at)}};
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
          {"tools", k.tools},
          {"expires_at", k.expires_at.empty() ? json(nullptr) : json(k.expires_at)},
          {"rpm", k.rpm},
          {"tpm", k.tpm},
          {"priority", identity::priorityName(k.priority)},
          {"revoked_at", k.revoked_at.empty() ? json(nullptr) : json(k.revoked_at)},
          {"previous_valid_until",
           k.previous_valid_until.empty() ? json(nullptr) : json(k.previous_valid_until)},
          {"derived_from", k.parent_key_id.empty() ? json(nullptr) : json(k.parent_key_id)},
          {"created_at", k.created_at}};
}

json listOf(json items) { return {{"data", std::move(items)}}; }

asio::awaitable<Response> deny(const Services& s, const Principal& who, const Error& why,
                               std::string action, std::string target) {
  auto entries = denialEntries(s, who, "policy.deny", std::move(target),
                               writeJson(json{{"action", action}, {"reason", why.message}}));
  if (!entries.empty()) {
    auto logged = co_await record(s, {}, std::move(entries));
    if (!logged) spdlog::error("api: could not audit a denial: {}", logged.error().message);
  }
  co_return problem(why);
}

asio::awaitable<Result<void>> record(const Services& s, std::vector<ledger::Change> changes,
                                     std::vector<ledger::AuditEntry> entries) {
  return http::whenCalled<Result<void>>(
      [&records = s.records, changes = std::move(changes),
       entries = std::move(entries)](std::function<void(Result<void>)> done) mutable {
        records.commit(std::move(changes), std::move(entries), std::move(done));
      });
}

asio::awaitable<Result<void>> commitAudited(const Services& s, ledger::Change change,
                                            ledger::AuditEntry entry) {
  return record(s, {std::move(change)}, {std::move(entry)});
}

Error notFound(std::string_view what, std::string_view id, std::string_view field) {
  return Error(ErrorCode::kNotFound, fmt::format("{} \"{}\" not found", what, id)).withField(field);
}

bool inReach(const Principal& who, const std::string& tenant_id) {
  return who.role == Role::kPlatformAdmin || (!tenant_id.empty() && tenant_id == who.tenant_id);
}

Result<identity::Tenant> findTenant(const Services& s, const Principal& who,
                                    const std::string& ref) {
  auto t = s.directory.tenant(ref);
  if (!t) t = s.directory.tenantByName(ref);
  if (t && inReach(who, t->id)) return *t;
  return fail(notFound("tenant", ref, "tenant"));
}

Result<identity::Team> findTeam(const Services& s, const std::string& tenant_id,
                                const std::string& ref) {
  if (auto t = s.directory.team(ref); t && t->tenant_id == tenant_id) return *t;
  if (auto t = s.directory.teamByName(tenant_id, ref)) return *t;
  return fail(notFound("team", ref, "team"));
}

std::string now(const Services& s) { return formatRfc3339(s.clock.now()); }

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

}  // namespace admin

namespace {

// The principal of a sign-in session's token (the cookie's or the CLI's), or why not.
Result<Principal> sessionPrincipal(const Services& s, std::string_view token,
                                   identity::Session* session_out) {
  if (s.sessions == nullptr) {
    return fail(Error(ErrorCode::kUnauthenticated, "single sign-on is not configured here"));
  }
  auto session = s.sessions->use(token, s.clock.now());
  if (!session) return fail(session.error());
  auto who = s.directory.userPrincipal(session->user_id);
  if (!who) {
    s.sessions->end(session->id);
    return fail(Error(ErrorCode::kUnauthenticated, who.error().message + "; the session is over"));
  }
  who->session_id = session->id;
  if (session_out != nullptr) *session_out = std::move(*session);
  return std::move(*who);
}

bool stateChanging(http::Method m) {
  return m != http::Method::kGet && m != http::Method::kHead && m != http::Method::kOptions;
}

}  // namespace

Result<Principal> authenticate(const Services& s, const Request& req) {
  auto header = req.headers.get("authorization");
  if (!header && !req.tls_client_subject.empty()) {
    // Mutual TLS: a client certificate mapped to a service account's key stands for that key.
    auto who = s.directory.verifyCertificate(req.tls_client_subject);
    if (!who) {
      return fail(
          Error(ErrorCode::kUnauthenticated,
                who.error().message + "; send an API key as \"Authorization: Bearer <key>\""));
    }
    return std::move(*who);
  }
  if (!header) {
    // A person signed in to the console: the session cookie, with the CSRF token on changes (a
    // browser sends the cookie with any site's form; only the console can read the token).
    if (auto token = http::cookie(req, identity::kSessionCookie)) {
      identity::Session session;
      auto who = sessionPrincipal(s, *token, &session);
      if (!who) return fail(who.error());
      if (stateChanging(req.method)) {
        const auto csrf = req.headers.get("x-purser-csrf");
        if (!csrf || !crypto::constantTimeEquals(*csrf, session.csrf_token)) {
          return fail(Error(ErrorCode::kPermissionDenied,
                            "a change made with the sign-in cookie needs the console's CSRF "
                            "token in the X-Purser-CSRF header"));
        }
      }
      return who;
    }
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
  // The CLI's sign-in token (`purser login --oidc`): sent as a bearer, so no CSRF to check.
  if (value.starts_with(identity::kSessionTokenPrefix)) return sessionPrincipal(s, value, nullptr);
  return s.directory.authenticate(value);
}

}  // namespace purser::api
