// The directory through the admin API: tenants, teams, users and service accounts (created and
// listed), and whoami, the console's sign-in.
#include <utility>

#include <fmt/format.h>

#include <vector>

#include "api/admin_common.h"
#include "api/admin_handlers.h"
#include "common/json.h"
#include "identity/identity_store.h"
#include "mcp/protocol.h"

namespace purser::api {

namespace asio = boost::asio;
using http::Request;
using http::Response;
using identity::Action;
using identity::Principal;
using identity::Role;
using identity::Target;

namespace admin {

namespace {

// GET on a collection: what the caller may see.
template <typename T, typename TargetOf>
Response listVisible(const Principal& who, Action read, const std::vector<T>& items,
                     TargetOf target_of) {
  json out = json::array();
  for (const auto& item : items) {
    if (identity::canSee(who, read, target_of(item))) out.push_back(toJson(item));
  }
  return jsonResponse(200, listOf(std::move(out)));
}

}  // namespace

namespace {

// {max_workload_priority, classes?, max_key_priority?} as a grant; an error names the field.
Result<identity::PriorityGrant> grantOf(const json& g) {
  if (!g.is_object()) {
    return fail(invalidArgument("expected {max_workload_priority, classes?, max_key_priority?}")
                    .withField("priority"));
  }
  for (const auto& [k, v] : g.items()) {
    if (k != "max_workload_priority" && k != "classes" && k != "max_key_priority") {
      return fail(invalidArgument(fmt::format("unknown field \"{}\"", k)).withField("priority"));
    }
  }
  identity::PriorityGrant out;
  if (g.contains("max_workload_priority")) {
    const json& m = g["max_workload_priority"];
    if (!m.is_number_integer() || m.get<int64_t>() < INT32_MIN || m.get<int64_t>() > INT32_MAX) {
      return fail(invalidArgument("expected a whole number within 32 bits")
                      .withField("priority.max_workload_priority"));
    }
    out.max_workload_priority = static_cast<int32_t>(m.get<int64_t>());
  }
  if (g.contains("classes")) {
    const json& c = g["classes"];
    if (!c.is_array() || c.size() > 256) {
      return fail(invalidArgument("expected a list of WorkloadPriorityClass names")
                      .withField("priority.classes"));
    }
    for (const auto& name : c) {
      if (!name.is_string() || name.get<std::string>().empty() ||
          name.get<std::string>().size() > 253) {
        return fail(invalidArgument("expected a list of WorkloadPriorityClass names")
                        .withField("priority.classes"));
      }
      out.classes.push_back(name.get<std::string>());
    }
  }
  if (g.contains("max_key_priority")) {
    const json& k = g["max_key_priority"];
    auto p = k.is_string() ? identity::parsePriority(k.get<std::string>())
                           : Result<identity::Priority>(fail(invalidArgument("")));
    if (!p) {
      return fail(invalidArgument("expected critical, standard or sheddable")
                      .withField("priority.max_key_priority"));
    }
    out.max_key_priority = *p;
  }
  return out;
}

}  // namespace

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
  identity::Tenant t{s.ids.next(), name, now(s), {}};
  if (body.contains("priority")) {
    API_TRY(grant, grantOf(body["priority"]));
    t.grant = std::move(grant);
  }
  auto done = co_await commitAudited(
      s, ledger::change(identity::insertTenant, t),
      auditEntry(who, "tenant.create", "tenant:" + t.id, "", writeJson(toJson(t)), t.id));
  if (!done) co_return problem(done.error().withField("name"));
  s.directory.put(t);
  co_return jsonResponse(201, toJson(t));
}

asio::awaitable<Response> grantPriority(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  const std::string ref(req.param("tenant").value_or(""));
  if (auto denied = identity::authorize(who, Action::kCreateTenant, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), "tenant.priority", "tenant:" + ref);
  }
  API_TRY(tenant, findTenant(s, who, ref));
  API_TRY(grant, grantOf(body));
  identity::Tenant after = tenant;
  after.grant = std::move(grant);
  auto done = co_await commitAudited(
      s, ledger::change(identity::updateTenantGrant, after),
      auditEntry(who, "tenant.priority", "tenant:" + after.id, writeJson(toJson(tenant)),
                 writeJson(toJson(after)), after.id));
  if (!done) co_return problem(done.error());
  s.directory.put(after);
  co_return jsonResponse(200, toJson(after));
}

namespace {

// The "tools" of a grant's body: a list of valid patterns (an empty list takes the grant away).
Result<std::vector<std::string>> toolGrant(const json& body) {
  if (!body.contains("tools")) {
    return fail(invalidArgument("\"tools\" is required: a list of \"server/tool\", "
                                "\"server/*\" or \"*\" (empty: none)")
                    .withField("tools"));
  }
  auto tools = PURSER_TRY_VALUE(stringList(body, "tools"));
  if (tools.size() > 1000) {
    return fail(invalidArgument("at most 1000 tool patterns").withField("tools"));
  }
  for (const auto& t : tools) {
    if (!mcp::validToolPattern(t)) {
      return fail(invalidArgument(fmt::format("\"{}\" is not a tool pattern: expected "
                                              "\"server/tool\", \"server/*\" or \"*\"",
                                              toValidUtf8(t.substr(0, 200))))
                      .withField("tools"));
    }
  }
  return tools;
}

}  // namespace

asio::awaitable<Response> grantTenantTools(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  const std::string ref(req.param("tenant").value_or(""));
  if (auto denied = identity::authorize(who, Action::kCreateTenant, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), "tenant.tools", "tenant:" + ref);
  }
  API_TRY(tenant, findTenant(s, who, ref));
  API_TRY(tools, toolGrant(body));
  identity::Tenant after = tenant;
  after.tools = std::move(tools);
  auto done = co_await commitAudited(
      s, ledger::change(identity::updateTenantTools, after),
      auditEntry(who, "tenant.tools", "tenant:" + after.id, writeJson(json(tenant.tools)),
                 writeJson(json(after.tools)), after.id));
  if (!done) co_return problem(done.error());
  s.directory.put(after);
  co_return jsonResponse(200, toJson(after));
}

// Tenant admins grant their teams tools (and platform admins any team).
asio::awaitable<Response> grantTeamTools(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  API_TRY(body, parseObject(req));
  const std::string ref(req.param("team").value_or(""));
  // A team id names its tenant; a name needs the caller's own tenant (or "tenant" in the body).
  std::optional<identity::Team> team = s.directory.team(ref);
  if (!team || !inReach(who, team->tenant_id)) {
    team.reset();
    auto tenant = tenantFor(s, who, body);
    if (tenant) {
      if (auto named = findTeam(s, tenant->id, ref)) team = *named;
    }
  }
  if (!team) co_return problem(notFound("team", ref, "team"));
  if (auto denied = identity::authorize(who, Action::kCreateTeam, {team->tenant_id, "", ""});
      !denied) {
    co_return co_await deny(s, who, denied.error(), "team.tools", "team:" + team->id);
  }
  API_TRY(tools, toolGrant(body));
  identity::Team after = *team;
  after.tools = std::move(tools);
  auto done = co_await commitAudited(
      s, ledger::change(identity::updateTeamTools, after),
      auditEntry(who, "team.tools", "team:" + after.id, writeJson(json(team->tools)),
                 writeJson(json(after.tools)), after.tenant_id));
  if (!done) co_return problem(done.error());
  s.directory.put(after);
  co_return jsonResponse(200, toJson(after));
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
      s, ledger::change(identity::insertTeam, t),
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
      s, ledger::change(identity::insertUser, u),
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
  auto done =
      co_await commitAudited(s, ledger::change(identity::insertServiceAccount, a),
                             auditEntry(who, "service_account.create", "service_account:" + a.id,
                                        "", writeJson(toJson(a)), a.tenant_id));
  if (!done) co_return problem(done.error().withField("name"));
  s.directory.put(a);
  co_return jsonResponse(201, toJson(a));
}

asio::awaitable<Response> listTenants(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  co_return listVisible(who, Action::kReadTenant, s.directory.tenants(),
                        [](const identity::Tenant& t) {
                          return Target{t.id, "", ""};
                        });
}

asio::awaitable<Response> listTeams(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  co_return listVisible(who, Action::kReadTeam, s.directory.teams(), [](const identity::Team& t) {
    return Target{t.tenant_id, t.id, ""};
  });
}

asio::awaitable<Response> listUsers(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  co_return listVisible(who, Action::kReadUser, s.directory.users(), [](const identity::User& u) {
    return Target{u.tenant_id, u.team_id, u.id};
  });
}

asio::awaitable<Response> listServiceAccounts(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  co_return listVisible(who, Action::kReadServiceAccount, s.directory.serviceAccounts(),
                        [](const identity::ServiceAccount& a) {
                          return Target{a.tenant_id, a.team_id, a.id};
                        });
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
  out["session"] = nullptr;
  if (!who.session_id.empty() && s.sessions != nullptr) {
    if (auto session = s.sessions->byId(who.session_id)) {
      // The CSRF token is readable only by a page of this origin (no CORS), which is the point.
      out["session"] = {{"id", session->id},
                        {"kind", std::string(identity::sessionKindName(session->kind))},
                        {"expires_at", formatRfc3339(session->expires_at)},
                        {"csrf_token", session->csrf_token}};
    }
  }
  co_return jsonResponse(200, out);
}

namespace {

// Disables or enables a user: tenant admins in their tenant, platform admins anywhere.
asio::awaitable<Response> setUserDisabled(const Services& s, Request& req, bool disable) {
  API_TRY(who, authenticate(s, req));
  const std::string id(req.param("id").value_or(""));
  const std::string action = disable ? "user.disable" : "user.enable";
  auto user = s.directory.user(id);
  if (!user || !inReach(who, user->tenant_id)) co_return problem(notFound("user", id, "id"));
  if (auto denied = identity::authorize(who, Action::kManageUser,
                                        Target{user->tenant_id, user->team_id, user->id});
      !denied) {
    co_return co_await deny(s, who, denied.error(), action, "user:" + id);
  }
  if (disable && user->id == who.id) {
    co_return problem(400, "you cannot disable yourself; ask another admin", "id");
  }
  if (disable == !user->disabled_at.empty()) co_return jsonResponse(200, toJson(*user));
  identity::User changed = *user;
  changed.disabled_at = disable ? now(s) : "";
  std::vector<ledger::Change> changes;
  changes.push_back(ledger::change(identity::updateUser, changed));
  if (disable)
    changes.push_back(ledger::change(identity::endUserSessions, id, changed.disabled_at));
  // Named, not braced temporaries: GCC 12 mishandles those across co_await.
  std::vector<ledger::AuditEntry> entries;
  entries.push_back(auditEntry(who, action, "user:" + id, writeJson(toJson(*user)),
                               writeJson(toJson(changed)), user->tenant_id));
  auto done = co_await record(s, std::move(changes), std::move(entries));
  if (!done) co_return problem(done.error());
  s.directory.put(changed);
  // Its keys are refused from now on (Directory), and its sessions end here and, through the
  // store, on every replica.
  if (disable && s.sessions != nullptr) s.sessions->endUser(id);
  co_return jsonResponse(200, toJson(changed));
}

}  // namespace

asio::awaitable<Response> disableUser(const Services& s, Request& req) {
  co_return co_await setUserDisabled(s, req, true);
}

asio::awaitable<Response> enableUser(const Services& s, Request& req) {
  co_return co_await setUserDisabled(s, req, false);
}

}  // namespace admin

}  // namespace purser::api
