// The audit log through the admin API — its pages (with the names of who acted and on what) and
// its verification — and the audit entries denials write, bounded by the DenialLog.
#include <utility>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "api/admin_common.h"
#include "api/admin_handlers.h"
#include "common/json.h"
#include "http/async.h"

namespace purser::api {

namespace asio = boost::asio;
using http::Request;
using http::Response;
using identity::Action;
using identity::Principal;
using identity::Role;

namespace admin {

namespace {

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

}  // namespace

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
  API_TRY(entries,
          co_await http::runBlocking(s.readers, who.tenant_id, [&] { return s.records.audit(q); }));
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

asio::awaitable<Response> verifyAudit(const Services& s, Request& req) {
  API_TRY(who, authenticate(s, req));
  if (auto denied = identity::authorize(who, Action::kVerifyAudit, {}); !denied) {
    co_return co_await deny(s, who, denied.error(), "audit.verify", "audit");
  }
  API_TRY(v, co_await http::runBlocking(s.readers, who.tenant_id,
                                        [&] { return s.records.verifyAudit(); }));
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

}  // namespace admin

std::vector<ledger::AuditEntry> denialEntries(const Services& s, const Principal& who,
                                              std::string action, std::string target,
                                              std::string detail) {
  if (s.denials != nullptr) {
    return s.denials->entries(who, std::move(action), std::move(target), std::move(detail));
  }
  return {identity::auditEntry(who, std::move(action), std::move(target), "", std::move(detail),
                               who.tenant_id)};
}

}  // namespace purser::api
