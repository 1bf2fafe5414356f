#include "api/sign_in_api.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <variant>

#include "api/admin_common.h"
#include "common/crypto.h"
#include "common/json.h"
#include "http/cookies.h"
#include "identity/identity_store.h"
#include "identity/sessions.h"

namespace purser::api {

namespace {

namespace asio = boost::asio;
using http::Method;
using http::Request;
using http::Response;
using identity::Principal;
using identity::Role;

using Options = std::shared_ptr<const SignInOptions>;
using namespace admin;  // NOLINT(google-build-using-namespace): the admin API's helpers

constexpr auto kPendingLifetime = std::chrono::minutes(10);

std::string htmlEscape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The page a browser lands on when a sign-in is refused: what happened, and the way back.
Response refusalPage(int status, std::string_view why) {
  Response r = Response::text(
      status,
      fmt::format("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<title>Sign-in refused · Purser</title></head><body>"
                  "<main id=\"sign-in-refused\"><h1>You are not signed in</h1><p>{}</p>"
                  "<p><a href=\"/\">Back to the console</a></p></main></body></html>",
                  htmlEscape(toValidUtf8(why))),
      "text/html; charset=utf-8");
  r.headers.set("Cache-Control", "no-store");
  r.headers.set("Content-Security-Policy", "default-src 'none'");
  return r;
}

http::CookieOptions cookieOptions(const SignInOptions& o, std::string path,
                                  std::optional<int64_t> max_age) {
  http::CookieOptions c;
  c.path = std::move(path);
  c.max_age = max_age;
  c.secure = o.secure_cookies;
  return c;
}

// The actor of audit entries about someone not (yet) a user: the provider's subject.
ledger::AuditEntry personEntry(const std::string& actor, std::string action, std::string after,
                               std::string tenant_id) {
  ledger::AuditEntry e;
  e.tenant_id = std::move(tenant_id);
  e.actor = actor;
  e.actor_role = "person";
  e.action = std::move(action);
  e.target = "oidc:" + actor;
  e.after = std::move(after);
  return e;
}

Principal principalOf(const identity::User& u) {
  Principal p;
  p.kind = identity::OwnerKind::kUser;
  p.id = u.id;
  p.name = u.name;
  p.tenant_id = u.tenant_id;
  p.team_id = u.team_id;
  p.role = u.role;
  return p;
}

// A refusal, audited (best effort: an audit write that fails is logged, the refusal stands).
asio::awaitable<Error> refuse(const Services& s, const std::string& actor, std::string why) {
  json detail = json::object();
  detail["reason"] = why;
  std::vector<ledger::AuditEntry> entries;
  entries.push_back(personEntry(actor, "auth.sign_in_refused", writeJson(detail), ""));
  std::vector<ledger::Change> none;
  auto done = co_await record(s, std::move(none), std::move(entries));
  if (!done) spdlog::warn("sso: a refused sign-in was not audited: {}", done.error().message);
  co_return Error(ErrorCode::kPermissionDenied, std::move(why));
}

struct Admitted {
  identity::User user;
  std::string token;
  identity::Session session;
};

// The person the provider vouched for, as a user with a new session: the role of the first
// `roles` entry they are in; made at the first sign-in, updated at each. Everything it writes
// commits at once with its audit entries.
// What admitting the person writes, or why they are refused (a reason for people).
struct Plan {
  identity::User user;
  std::vector<ledger::Change> changes;
  std::vector<ledger::AuditEntry> entries;
  std::vector<identity::ApiKey> revoked;
  identity::NewSession fresh;
};

std::variant<std::string, Plan> planAdmission(const Services& s, const SignInOptions& o,
                                              const sso::SignedIn& person,
                                              identity::SessionKind kind) {
  const std::string subject = o.client->options().issuer + "#" + person.subject;
  const std::string actor = toValidUtf8(person.username);
  auto rule_index = sso::firstMatchingRule(person.groups, o.rules);
  if (!rule_index) {
    const std::string groups =
        person.groups.empty()
            ? std::string("none")
            : toValidUtf8(fmt::format("{}", fmt::join(person.groups, ", "))).substr(0, 512);
    return fmt::format(
        "{} is in no group that may use Purser (groups: {}); ask an admin to add "
        "you to one",
        actor, groups);
  }
  const sso::RoleRule& rule = o.rules[*rule_index];
  identity::User want;
  want.role = rule.role;
  if (!rule.tenant.empty()) {
    auto tenant = s.directory.tenantByName(rule.tenant);
    if (!tenant) {
      return fmt::format(
          "oidc.roles maps group \"{}\" to tenant \"{}\", which does not exist; "
          "an admin must create it",
          rule.group, rule.tenant);
    }
    want.tenant_id = tenant->id;
    if (!rule.team.empty()) {
      auto team = s.directory.teamByName(tenant->id, rule.team);
      if (!team) {
        return fmt::format(
            "oidc.roles maps group \"{}\" to team \"{}\" of tenant \"{}\", "
            "which does not exist; an admin must create it",
            rule.group, rule.team, rule.tenant);
      }
      want.team_id = team->id;
    }
  }
  const std::string now_text = now(s);
  std::vector<ledger::Change> changes;
  std::vector<ledger::AuditEntry> entries;
  std::vector<identity::ApiKey> revoked;
  auto existing = s.directory.userBySubject(subject);
  identity::User user;
  // A name of its own in the tenant: the provider's, or with a short mark of the subject when
  // another user (someone an admin made, or another person) has it. Never linked by name: a
  // person may choose their own username at some providers.
  const auto nameIn = [&](const std::string& tenant_id, const std::string& self) {
    std::string name = sso::userNameFrom(person.username);
    if (s.directory.nameTaken(identity::OwnerKind::kUser, tenant_id, name)) {
      auto holder = std::optional<identity::User>();
      for (const auto& u : s.directory.users()) {
        if (u.tenant_id == tenant_id && u.name == name) holder = u;
      }
      if (!holder || holder->id != self) {
        name += "~" + crypto::sha256Hex(subject).substr(0, 8);
      }
    }
    return name;
  };
  if (!existing) {
    user.id = s.ids.next();
    user.tenant_id = want.tenant_id;
    user.team_id = want.team_id;
    user.role = want.role;
    user.name = nameIn(user.tenant_id, user.id);
    user.email = toValidUtf8(person.email).substr(0, 254);
    user.created_at = now_text;
    user.subject = subject;
    changes.push_back(ledger::change(identity::insertUser, user));
    entries.push_back(identity::auditEntry(principalOf(user), "user.jit_create", "user:" + user.id,
                                           "", writeJson(admin::toJson(user)), user.tenant_id));
  } else {
    user = *existing;
    if (!user.disabled_at.empty()) {
      return fmt::format("the user {} was disabled by an admin at {}", user.name, user.disabled_at);
    }
    const bool moved = user.tenant_id != want.tenant_id;
    if (moved || user.team_id != want.team_id || user.role != want.role) {
      const identity::User before = user;
      if (moved) {
        // Keys were granted inside the tenant left: they end with the move.
        for (const auto& k : s.directory.keys()) {
          if (k.owner_kind == identity::OwnerKind::kUser && k.owner_id == user.id &&
              k.revoked_at.empty()) {
            identity::ApiKey r = k;
            r.revoked_at = now_text;
            changes.push_back(ledger::change(identity::updateKey, r));
            revoked.push_back(std::move(r));
          }
        }
      }
      user.tenant_id = want.tenant_id;
      user.team_id = want.team_id;
      user.role = want.role;
      if (moved) user.name = nameIn(user.tenant_id, user.id);
      changes.push_back(ledger::change(identity::updateUser, user));
      json after = admin::toJson(user);
      if (!revoked.empty()) {
        json ids = json::array();
        for (const auto& k : revoked) ids.push_back(k.id);
        after["keys_revoked"] = ids;
      }
      entries.push_back(identity::auditEntry(principalOf(user), "user.sign_in_update",
                                             "user:" + user.id, writeJson(admin::toJson(before)),
                                             writeJson(after), user.tenant_id));
    }
  }
  const Duration max_age = kind == identity::SessionKind::kCli ? o.cli_max_age : o.session_max_age;
  // A CLI token has no idle timeout of its own beyond its (shorter) lifetime.
  const Duration idle = kind == identity::SessionKind::kCli ? max_age : o.session_idle_timeout;
  identity::NewSession fresh =
      identity::newSession(s.ids.next(), user.id, kind, s.clock.now(), max_age, idle);
  changes.push_back(ledger::change(identity::insertSession, fresh.session));
  const json signed_in = {{"session", fresh.session.id},
                          {"kind", std::string(identity::sessionKindName(kind))},
                          {"group", rule.group},
                          {"role", std::string(identity::roleName(user.role))},
                          {"expires_at", formatRfc3339(fresh.session.expires_at)}};
  entries.push_back(identity::auditEntry(principalOf(user), "auth.sign_in", "user:" + user.id, "",
                                         writeJson(signed_in), user.tenant_id));
  return Plan{std::move(user), std::move(changes), std::move(entries), std::move(revoked),
              std::move(fresh)};
}

asio::awaitable<Result<Admitted>> admit(const Services& s, const SignInOptions& o,
                                        const sso::SignedIn& person, identity::SessionKind kind) {
  auto planned = planAdmission(s, o, person, kind);
  if (auto* why = std::get_if<std::string>(&planned)) {
    // Named, not temporaries: GCC 12 mishandles those (conditional ones above all) across
    // co_await.
    std::string reason = std::move(*why);
    const std::string actor = toValidUtf8(person.username);
    Error refused = co_await refuse(s, actor, std::move(reason));
    co_return fail(std::move(refused));
  }
  Plan plan = std::move(std::get<Plan>(planned));
  auto done = co_await record(s, std::move(plan.changes), std::move(plan.entries));
  if (!done) co_return fail(done.error());
  s.directory.put(plan.user);
  for (const auto& k : plan.revoked) s.directory.put(k);
  if (s.sessions != nullptr) s.sessions->put(plan.fresh.session);
  co_return Admitted{std::move(plan.user), std::move(plan.fresh.token),
                     std::move(plan.fresh.session)};
}

json userJson(const Services& s, const identity::User& u) {
  json out = {{"id", u.id},
              {"name", u.name},
              {"role", std::string(identity::roleName(u.role))},
              {"tenant", nullptr},
              {"team", nullptr}};
  if (auto t = s.directory.tenant(u.tenant_id)) out["tenant"] = {{"id", t->id}, {"name", t->name}};
  if (auto t = s.directory.team(u.team_id)) out["team"] = {{"id", t->id}, {"name", t->name}};
  return out;
}

// The callback URL this sign-in names: the configuration's, or — when it gives only a path — built
// from the request's Host (the provider still checks it against the client's registered ones).
Result<std::string> redirectFor(const SignInOptions& o, const Request& req) {
  const std::string& configured = o.client->options().redirect_url;
  if (!configured.starts_with("/")) return configured;
  const auto host = req.headers.get("host");
  const bool plain_host = host && !host->empty() && host->size() <= 255 &&
                          std::all_of(host->begin(), host->end(), [](char c) {
                            return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' ||
                                   c == '-' || c == ':' || c == '[' || c == ']';
                          });
  if (!plain_host) {
    return fail(
        invalidArgument("the request has no Host a callback URL can be made of; set "
                        "oidc.redirect_url to the full URL"));
  }
  return fmt::format("{}://{}{}", o.secure_cookies ? "https" : "http", *host, configured);
}

asio::awaitable<Response> login(const Services& s, const Options& o, Request& req) {
  auto redirect = redirectFor(*o, req);
  if (!redirect) co_return refusalPage(400, redirect.error().message);
  auto started = co_await o->client->start(*redirect);
  if (!started) {
    spdlog::warn("sso: a sign-in could not start: {}", started.error().message);
    co_return refusalPage(503, started.error().message);
  }
  sso::PendingSignIn pending{
      started->state,    started->nonce,
      started->verifier, sso::safeReturnPath(req.queryParam("return_to").value_or("/")),
      *redirect,         s.clock.now() + kPendingLifetime};
  Response r = Response::text(302, "");
  r.headers.set("Location", started->url);
  r.headers.set("Cache-Control", "no-store");
  r.headers.add("Set-Cookie",
                http::setCookie(sso::kPendingCookie, sso::sealPending(pending, o->cookie_key),
                                cookieOptions(*o, "/auth/oidc",
                                              std::chrono::seconds(kPendingLifetime).count())));
  co_return r;
}

// Why a callback cannot sign anyone in (a status and a reason for people), or nothing.
struct CallbackRefusal {
  int status = 400;
  std::string why;
};

// Everything the callback checks before it talks to the provider.
std::optional<CallbackRefusal> checkCallback(const Services& s, const SignInOptions& o,
                                             const Request& req, sso::PendingSignIn& pending) {
  if (auto error = req.queryParam("error")) {
    const auto description = req.queryParam("error_description");
    return CallbackRefusal{401,
                           fmt::format("the identity provider did not sign you in ({}{}{})",
                                       toValidUtf8(error->substr(0, 64)), description ? ": " : "",
                                       toValidUtf8(description.value_or("").substr(0, 256)))};
  }
  const auto cookie = http::cookie(req, sso::kPendingCookie);
  if (!cookie) {
    return CallbackRefusal{400,
                           "no sign-in was started in this browser (or it took more than 10 "
                           "minutes); start again"};
  }
  auto opened = sso::openPending(*cookie, o.cookie_key, s.clock.now());
  if (!opened) return CallbackRefusal{400, opened.error().message};
  pending = std::move(*opened);
  const auto state = req.queryParam("state");
  if (!state || !crypto::constantTimeEquals(*state, pending.state)) {
    return CallbackRefusal{
        400, "the sign-in's state does not match the one this browser started; start again"};
  }
  const auto code = req.queryParam("code");
  if (!code || code->empty() || code->size() > 2048) {
    return CallbackRefusal{400, "the sign-in came back without a code"};
  }
  return std::nullopt;
}

asio::awaitable<Response> callback(const Services& s, const Options& o, Request& req) {
  // The pending cookie is spent whatever happens: a code can be tried once.
  const std::string clear =
      http::setCookie(sso::kPendingCookie, "", cookieOptions(*o, "/auth/oidc", 0));
  sso::PendingSignIn pending;
  std::optional<CallbackRefusal> refusal = checkCallback(s, *o, req, pending);
  std::optional<Admitted> admitted;
  if (!refusal) {
    const std::string code = req.queryParam("code").value_or("");
    auto person =
        co_await o->client->finish(code, pending.verifier, pending.nonce, pending.redirect_uri);
    if (!person) {
      refusal = CallbackRefusal{person.error().code == ErrorCode::kUnavailable ? 503 : 401,
                                person.error().message};
    } else {
      auto result = co_await admit(s, *o, *person, identity::SessionKind::kConsole);
      if (!result) {
        // admit() audited its own refusal.
        Response r = refusalPage(statusFor(result.error().code), result.error().message);
        r.headers.add("Set-Cookie", clear);
        co_return r;
      }
      admitted = std::move(*result);
    }
  }
  if (refusal) {
    // Named, not temporaries, across co_await (GCC 12).
    const std::string actor = "anonymous";
    std::string why = refusal->why;
    Error audited = co_await refuse(s, actor, std::move(why));
    Response r = refusalPage(refusal->status, audited.message);
    r.headers.add("Set-Cookie", clear);
    co_return r;
  }
  Response r = Response::text(302, "");
  r.headers.set("Location", pending.return_to);
  r.headers.set("Cache-Control", "no-store");
  r.headers.add("Set-Cookie", clear);
  // A cookie for the browser's session (no Max-Age): the server's record holds the expiry.
  r.headers.add("Set-Cookie", http::setCookie(identity::kSessionCookie, admitted->token,
                                              cookieOptions(*o, "/", std::nullopt)));
  co_return r;
}

asio::awaitable<Response> signOut(const Services& s, const Options& o, Request& req) {
  API_TRY(who, authenticate(s, req));
  if (who.session_id.empty()) {
    co_return problem(400,
                      "this request was made with an API key, not a sign-in session; keys "
                      "are revoked (DELETE /api/v1/keys/{id}), not signed out");
  }
  const std::string at = now(s);
  json detail = json::object();
  detail["session"] = who.session_id;
  std::vector<ledger::Change> changes;
  changes.push_back(ledger::change(identity::endSession, who.session_id, at));
  std::vector<ledger::AuditEntry> entries;
  entries.push_back(identity::auditEntry(who, "auth.sign_out", "user:" + who.id, "",
                                         writeJson(detail), who.tenant_id));
  auto done = co_await record(s, std::move(changes), std::move(entries));
  if (!done) co_return problem(done.error());
  if (s.sessions != nullptr) s.sessions->end(who.session_id);
  Response r;
  r.status = 204;
  r.headers.add("Set-Cookie",
                http::setCookie(identity::kSessionCookie, "", cookieOptions(*o, "/", 0)));
  co_return r;
}

// What the console's sign-in page needs before anything else: whether single sign-on is here,
// and whether this browser is already signed in (its cookie), so that it never has to ask
// whoami only to be refused.
asio::awaitable<Response> info(const Services& s, const Options& o, Request& req) {
  bool signed_in = false;
  if (http::cookie(req, identity::kSessionCookie)) {
    auto who = authenticate(s, req);
    signed_in = who.has_value() && !who->session_id.empty();
  }
  json out = json::object();
  out["enabled"] = o != nullptr;
  out["signed_in"] = signed_in;
  if (o) {
    out["display_name"] = o->display_name;
    out["login_url"] = "/auth/oidc/login";
    out["device_authorization"] = "/auth/oidc/device";
  }
  Response r = jsonResponse(200, out);
  r.headers.set("Cache-Control", "no-store");
  co_return r;
}

asio::awaitable<Response> deviceStart(const Services&, const Options& o, Request&) {
  auto started = co_await o->client->startDevice();
  if (!started) co_return problem(started.error());
  co_return jsonResponse(200, {{"device_code", started->device_code},
                               {"user_code", started->user_code},
                               {"verification_uri", started->verification_uri},
                               {"verification_uri_complete", started->verification_uri_complete},
                               {"interval", started->interval},
                               {"expires_in", started->expires_in}});
}

asio::awaitable<Response> deviceToken(const Services& s, const Options& o, Request& req) {
  API_TRY(body, parseObject(req));
  API_TRY(device_code, requiredString(body, "device_code"));
  if (device_code.empty() || device_code.size() > 1024) {
    co_return problem(400, "\"device_code\" must be 1 to 1024 characters", "device_code");
  }
  auto polled = co_await o->client->pollDevice(device_code);
  if (!polled) {
    if (polled.error().code == ErrorCode::kUnauthenticated) {
      const std::string actor = "anonymous";
      std::string why = polled.error().message;
      Error audited = co_await refuse(s, actor, std::move(why));
      co_return problem(audited);
    }
    co_return problem(polled.error());
  }
  if (!*polled) {
    // RFC 8628's answer while the person has not yet approved: the CLI waits and asks again.
    co_return jsonResponse(400, {{"error", "authorization_pending"},
                                 {"error_description", "waiting for you to approve the sign-in"}});
  }
  auto admitted = co_await admit(s, *o, **polled, identity::SessionKind::kCli);
  if (!admitted) co_return problem(admitted.error());
  co_return jsonResponse(200, {{"token", admitted->token},
                               {"expires_at", formatRfc3339(admitted->session.expires_at)},
                               {"user", userJson(s, admitted->user)}});
}

}  // namespace

Result<void> addSignInRoutes(http::Router& router, const Services& services,
                             std::shared_ptr<const SignInOptions> options) {
  auto s = std::make_shared<const Services>(services);
  const auto route = [&](Method m, const char* path, auto handler) {
    return router.addAsync(
        m, path, [s, options, handler](Request& req) { return handler(*s, options, req); });
  };
  PURSER_TRY(route(Method::kGet, "/auth/oidc/info", info));
  if (!options) return {};
  PURSER_TRY(route(Method::kGet, "/auth/oidc/login", login));
  PURSER_TRY(route(Method::kGet, "/auth/oidc/callback", callback));
  PURSER_TRY(route(Method::kPost, "/auth/signout", signOut));
  PURSER_TRY(route(Method::kPost, "/auth/oidc/device", deviceStart));
  PURSER_TRY(route(Method::kPost, "/auth/oidc/device/token", deviceToken));
  return {};
}

}  // namespace purser::api
