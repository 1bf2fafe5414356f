#include "api/diagnose_api.h"

#include <utility>

#include <fmt/format.h>
#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "api/diagnose_live.h"
#include "api/diagnose_narrate.h"
#include "api/fleet_views.h"
#include "api/problem.h"
#include "common/clock.h"
#include "common/duration.h"
#include "diagnose/answer.h"
#include "diagnose/engine.h"
#include "diagnose_io/case_io.h"
#include "gateway/routing.h"
#include "http/async.h"

namespace purser::api {

namespace {

namespace asio = boost::asio;
using http::Method;
using http::Request;
using http::Response;
using identity::Principal;
using identity::Role;
using workloads::FleetService;

const std::set<std::string> kKinds = {"route", "deployment", "workload", "queue",
                                      "team",  "user",       "node",     "fleet"};
const std::set<std::string> kSymptoms = {"slow", "errors", "pending", "over_budget", "idle", "any"};
constexpr int64_t kDefaultSinceMs = 30 * 60 * 1000;

struct Context {
  const Services s;
  DiagnoseOptions o;
  const http::Router* router = nullptr;  // the gateway, for narration
};

bool routeVisibleTo(const gateway::Route& r, const Principal& who) {
  if (who.role == Role::kPlatformAdmin) return true;
  return gateway::allowsTenant(r, who.tenant_id) &&
         (who.role == Role::kTenantAdmin || gateway::allowsTeam(r, who.team_id));
}

// What the fleet knows, gathered on its thread.
struct FleetPart {
  std::vector<diagnose::Workload> workloads;
  std::vector<diagnose::NodeInfo> nodes;
  std::vector<diagnose::Event> pending;  // workloads pending now, as events at `now`
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> served;  // replica -> place
  std::map<std::string, std::string> served_tenant;                            // replica -> tenant
  std::set<std::string> queues;
  std::set<std::string> visible_queues;
  std::map<std::string, std::pair<std::string, std::string>> owners;  // workload -> tenant, team
  std::map<std::string, std::string> team_namespaces;                 // team id -> namespace
  std::string asked_workload;  // the question's workload inside Purser ("" when not found)
};

FleetPart gatherFleet(const FleetService& f, const Services& s, const Principal& who,
                      const std::string& kind, const std::string& name, int64_t now_ms) {
  FleetPart out;
  const bool admin = who.role == Role::kPlatformAdmin;
  for (const auto& [id, r] : f.records()) {
    diagnose::Workload w;
    w.ns = r.spec.namespace_;
    w.name = bareName(r.spec.name);
    if (r.admission) {
      w.queue = r.admission->cluster_queue;
      for (const auto& ps : r.admission->pod_sets) {
        for (const auto& pl : ps.placements) {
          if (w.node.empty()) w.node = pl.node;
          if (pl.node != w.node) continue;
          for (int g : pl.gpus) {
            if (std::find(w.gpus.begin(), w.gpus.end(), g) == w.gpus.end()) w.gpus.push_back(g);
          }
        }
      }
      if (r.spec.serve) {
        for (const auto& pod : r.pods) {
          const std::string replica = fmt::format(
              "fleet:{}/{}-{}", FleetService::shown(r.spec.name), pod.pod_set, pod.index);
          for (const auto& ps : r.admission->pod_sets) {
            if (ps.name != pod.pod_set || pod.index < 0 ||
                static_cast<size_t>(pod.index) >= ps.placements.size()) {
              continue;
            }
            const auto& pl = ps.placements[static_cast<size_t>(pod.index)];
            out.served[replica] = {pl.node, std::vector<int64_t>(pl.gpus.begin(), pl.gpus.end())};
            out.served_tenant[replica] = r.tenant_id;
          }
        }
      }
    } else if (auto st = f.engine().status(id)) {
      w.queue = st->cluster_queue;
      if (st->state == fleet::WorkloadStatus::State::kPending && !st->reason.empty()) {
        out.pending.push_back({now_ms, "fleet", "Pending", st->reason, "", id, st->message});
      }
    }
    if (w.queue.empty()) w.queue = r.spec.cluster_queue;
    out.owners[id] = {r.tenant_id, r.team_id};
    out.workloads.push_back(std::move(w));
  }
  if (const fleet::Placer* placer = f.placer()) {
    for (const auto& n : placer->nodes()) {
      out.nodes.push_back({n.name, static_cast<int64_t>(n.gpus.size()),
                           n.gpus.empty() ? std::string() : n.gpus.front().model});
    }
  }
  for (const auto& q : f.engine().queues()) out.queues.insert(q.name);
  if (!admin) out.visible_queues = visibleQueues(s.directory, f, who);
  for (const auto& team : s.directory.teams()) {
    out.team_namespaces[team.id] = f.namespaceOf(team.tenant_id, team.name);
  }
  if (kind == "workload") {
    const size_t slash = name.find('/');
    const std::string ns = name.substr(0, slash);
    const std::string bare = name.substr(slash + 1);
    std::string internal = admin ? name : f.namespaceOf(who.tenant_id, ns) + "/" + bare;
    const workloads::Record* r = f.find(internal);
    if (r == nullptr && admin) {
      for (const auto& [id, rec] : f.records()) {
        if (FleetService::shown(id) == name) {
          r = &rec;
          internal = id;
        }
      }
    }
    if (r != nullptr && mayAccess(who, r->tenant_id, r->team_id)) out.asked_workload = internal;
  }
  return out;
}

// The exporter's node: the Hostname its DCGM series carry, else the exporter's name.
std::string exporterNode(const observe::SeriesStore* series, const std::string& exporter) {
  if (series != nullptr) {
    for (const char* metric : {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"}) {
      for (const auto& key : series->select(metric, {{"target", exporter}})) {
        if (auto host = key.label("Hostname")) return std::string(*host);
      }
    }
  }
  return exporter;
}

void shownEverywhere(Json& value) {
  if (value.is_string()) {
    value = FleetService::shown(value.get<std::string>());
  } else if (value.is_array() || value.is_object()) {
    for (auto& item : value) shownEverywhere(item);
  }
}

asio::awaitable<Response> handle(const Context& ctx, Request& req) {
  const Services& s = ctx.s;
  auto who_or = authenticate(s, req);
  if (!who_or) co_return problem(who_or.error());
  const Principal who = *who_or;
  const bool admin = who.role == Role::kPlatformAdmin;

  // --- The question -------------------------------------------------------------------------
  const std::string kind(req.queryParam("kind").value_or(""));
  if (kind.empty()) {
    co_return problem(400,
                      "say what to diagnose: kind=route, deployment, workload, queue, team, user, "
                      "node or fleet",
                      "kind");
  }
  if (!kKinds.contains(kind)) {
    co_return problem(400,
                      fmt::format("unknown kind \"{}\": use route, deployment, workload, queue, "
                                  "team, user, node or fleet",
                                  kind),
                      "kind");
  }
  const std::string symptom(req.queryParam("symptom").value_or("any"));
  if (!kSymptoms.contains(symptom)) {
    co_return problem(400,
                      fmt::format("unknown symptom \"{}\": use slow, errors, pending, over_budget, "
                                  "idle or any",
                                  symptom),
                      "symptom");
  }
  const std::string format(req.queryParam("format").value_or("json"));
  if (format != "json" && format != "case") {
    co_return problem(400,
                      fmt::format("unknown format \"{}\": use json (the findings) or case", format),
                      "format");
  }
  if (format == "case" && !admin) {
    co_return problem(403,
                      "the case holds every series, event and log line Purser keeps, of every "
                      "tenant; only a platform admin may take it",
                      "format");
  }
  bool narrate = !ctx.o.narrator_route.empty();
  if (auto n = req.queryParam("narrate")) {
    if (*n != "true" && *n != "false") {
      co_return problem(400, fmt::format("'narrate' is true or false, not \"{}\"", *n), "narrate");
    }
    if (*n == "true" && ctx.o.narrator_route.empty()) {
      co_return problem(400,
                        "no narrator is configured (diagnose.narrator.route in the configuration)",
                        "narrate");
    }
    narrate = *n == "true";
  }
  std::string name(req.queryParam("name").value_or(""));
  if (kind == "fleet") {
    if (!name.empty() && name != "*") {
      co_return problem(400, "a fleet question names nothing (leave name out)", "name");
    }
    name = "*";
  } else if (name.empty()) {
    co_return problem(400, fmt::format("name the {} to diagnose", kind), "name");
  }
  if (kind == "workload") {
    const size_t slash = name.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == name.size() ||
        name.find('/', slash + 1) != std::string::npos) {
      co_return problem(400, "a workload is named NAMESPACE/NAME, such as ml/train-7", "name");
    }
  }
  const int64_t retention_ms =
      s.series != nullptr
          ? std::max(s.series->limits().raw_retention_ms, s.series->limits().rollup_retention_ms)
          : int64_t{24} * 3600 * 1000;
  int64_t since_ms = std::min(kDefaultSinceMs, retention_ms);
  if (auto text = req.queryParam("since")) {
    auto d = parseDuration(*text);
    const int64_t ms =
        d ? std::chrono::duration_cast<std::chrono::milliseconds>(*d).count() : int64_t{-1};
    if (!d || ms <= 0) {
      co_return problem(
          400, fmt::format("'since' must be a duration such as 30m or 2h, not \"{}\"", *text),
          "since");
    }
    if (ms > retention_ms) {
      co_return problem(400,
                        fmt::format("'since' reaches past what is kept: at most {} s of series",
                                    retention_ms / 1000),
                        "since");
    }
    since_ms = ms;
  }
  const int64_t end_ms = unixMillis(s.clock.now());
  const int64_t start_ms = end_ms - since_ms;

  // --- What exists, and what the caller may ask about ------------------------------------------
  FleetPart fleet;
  const std::shared_ptr<FleetService> fleet_service = ctx.o.fleet ? ctx.o.fleet() : nullptr;
  if (fleet_service) {
    fleet = co_await fleet_service->call(
        [&](FleetService& f) -> FleetPart { return gatherFleet(f, s, who, kind, name, end_ms); });
  }
  std::map<std::string, const ProviderFacts*> facts;
  for (const auto& p : ctx.o.providers) facts[p.name] = &p;
  diagnose::Inventory inventory;
  inventory.nodes = fleet.nodes;
  inventory.workloads = fleet.workloads;
  for (const auto& team : s.directory.teams()) {
    auto tenant = s.directory.tenant(team.tenant_id);
    inventory.teams.push_back({team.name, tenant ? tenant->name : team.tenant_id});
  }
  std::set<std::string> visible_routes, hidden_routes, visible_providers, all_providers;
  std::map<std::string, std::string> exporter_nodes;
  if (s.gateway != nullptr) {
    for (const gateway::Route* r : s.gateway->routes()) {
      const bool visible = routeVisibleTo(*r, who);
      (visible ? visible_routes : hidden_routes).insert(r->alias);
      for (const gateway::Target* t : gateway::allTargets(*r)) {
        if (t->provider == nullptr) continue;
        const std::string p = t->provider->name();
        all_providers.insert(p);
        if (visible) visible_providers.insert(p);
        diagnose::Deployment d{p, r->alias, p, "", {}};
        if (auto it = fleet.served.find(p); it != fleet.served.end()) {
          d.node = it->second.first;
          d.gpus = it->second.second;
        } else if (auto f = facts.find(p);
                   p.starts_with("fleet:") ||
                   (f != facts.end() && (f->second->scraped || !f->second->gpus.empty()))) {
          // A model server Purser observes is a deployment; an outside API is a provider.
          if (f != facts.end()) {
            for (const std::string& ref : f->second->gpus) {
              const size_t slash = ref.find('/');
              if (slash == std::string::npos) continue;
              const std::string exporter = ref.substr(0, slash);
              auto [node, added] = exporter_nodes.emplace(exporter, "");
              if (added) node->second = exporterNode(s.series, exporter);
              if (d.node.empty()) d.node = node->second;
              if (d.node != node->second) continue;
              try {
                d.gpus.push_back(std::stoll(ref.substr(slash + 1)));
              } catch (const std::exception&) {
              }
            }
          }
        } else {
          continue;
        }
        inventory.deployments.push_back(std::move(d));
      }
    }
  }
  const auto notFound = [&](const std::string& what) {
    return problem(404, fmt::format("no {} \"{}\" you may see", what, name), "name");
  };
  std::string case_name = name;
  if (kind == "route") {
    if (!visible_routes.contains(name)) co_return notFound("route");
  } else if (kind == "deployment") {
    const bool known = std::any_of(inventory.deployments.begin(), inventory.deployments.end(),
                                   [&](const auto& d) { return d.name == name; }) ||
                       all_providers.contains(name);
    if (!known || (!admin && !visible_providers.contains(name))) co_return notFound("deployment");
  } else if (kind == "workload") {
    if (fleet.asked_workload.empty()) co_return notFound("workload");
    case_name = fleet.asked_workload;
  } else if (kind == "queue") {
    if (!fleet.queues.contains(name) || (!admin && !fleet.visible_queues.contains(name))) {
      co_return notFound("queue");
    }
  } else if (kind == "team") {
    bool ok = false;
    for (const auto& team : s.directory.teams()) {
      if (team.name != name) continue;
      ok = ok || admin || (who.role == Role::kTenantAdmin && team.tenant_id == who.tenant_id) ||
           team.id == who.team_id;
    }
    if (!ok) co_return notFound("team");
  } else if (kind == "user") {
    bool ok = false;
    for (const auto& u : s.directory.users()) {
      if (u.name != name) continue;
      ok = ok || admin || (who.role == Role::kTenantAdmin && u.tenant_id == who.tenant_id) ||
           u.id == who.id;
    }
    if (!ok) co_return notFound("user");
  }

  // --- Events ----------------------------------------------------------------------------------
  std::vector<diagnose::Event> events = fleet.pending;
  if (fleet_service) {
    auto rows = co_await http::runBlocking(s.readers, who.tenant_id, [&] {
      return fleet_service->events(workloads::Visibility{}, std::nullopt);
    });
    if (!rows) co_return problem(rows.error());
    for (const auto& row : *rows) {
      auto e = fleetEvent(row);
      if (e && e->time >= start_ms && e->time <= end_ms) events.push_back(std::move(*e));
    }
  }
  {
    ledger::AuditQuery q;
    q.from = formatRfc3339(SystemTime(std::chrono::milliseconds(start_ms)));
    q.newest_first = true;
    q.limit = 1000;
    auto entries =
        co_await http::runBlocking(s.readers, who.tenant_id, [&] { return s.records.audit(q); });
    if (!entries) co_return problem(entries.error());
    const auto wallets = s.wallets.all();
    const auto wallet_scope =
        [&](const std::string& id) -> std::optional<std::pair<std::string, bool>> {
      for (const auto& w : wallets) {
        if (w.spec.id == id) {
          return std::make_pair(walletScopeName(s.directory, w.spec.scope), w.spec.hard);
        }
      }
      return std::nullopt;
    };
    const auto actor_name = [&](const std::string& id) -> std::string {
      if (auto u = s.directory.user(id)) return u->name;
      if (auto a = s.directory.serviceAccount(id)) return a->name;
      return id;
    };
    for (auto it = entries->rbegin(); it != entries->rend(); ++it) {
      if (auto e = auditEvent(*it, wallet_scope, actor_name)) events.push_back(std::move(*e));
    }
  }
  if (s.gateway != nullptr) {
    for (const auto& g : s.gateway->events()) {
      if (g.time_ms >= start_ms && g.time_ms <= end_ms) events.push_back(gatewayEvent(g));
    }
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const auto& a, const auto& b) { return a.time < b.time; });

  // --- The answer -------------------------------------------------------------------------------
  diagnose::Case c;
  c.name = "live";
  c.question = {kind, case_name, symptom};
  c.start = start_ms;
  c.end = end_ms;
  c.inventory = std::move(inventory);
  if (s.series != nullptr) c.series = seriesInWindow(*s.series, start_ms, end_ms);
  c.events = std::move(events);
  if (format == "case") {
    // What the engine would answer from, to replay with `purser diagnose --case FILE`.
    std::string text = diagnose::writeCase(c);
    if (text.size() > ctx.o.max_case_bytes) {
      co_return problem(422,
                        fmt::format("the case would be {} MiB, more than the {} MiB a reply may "
                                    "carry; ask about a shorter window (since)",
                                    text.size() >> 20, ctx.o.max_case_bytes >> 20),
                        "since");
    }
    co_return http::Response::text(200, std::move(text), "application/yaml");
  }
  if (!admin) {
    // Tenants are walls: another tenant's objects are renamed, by kind, in what the engine
    // reads, so that its answer never holds their names (and no word of text is rewritten).
    using K = CaseRedactor::Kind;
    CaseRedactor red;
    const std::string& own = who.tenant_id;
    for (const auto& t : s.directory.tenants()) {
      for (const std::string& n : {t.name, t.id}) {
        if (t.id == own) {
          red.allow(K::kTenant, n);
        } else {
          red.hide(K::kTenant, n);
        }
      }
    }
    for (const auto& team : s.directory.teams()) {
      const std::string ns = fleet.team_namespaces.contains(team.id)
                                 ? fleet.team_namespaces.at(team.id)
                                 : std::string();
      const bool mine = team.tenant_id == own;
      for (const std::string& n : {team.name, team.id}) {
        mine ? red.allow(K::kTeam, n) : red.hide(K::kTeam, n);
      }
      mine ? red.allow(K::kNamespace, ns) : red.hide(K::kNamespace, ns);
    }
    for (const auto& u : s.directory.users()) {
      for (const std::string& n : {u.name, u.id}) {
        u.tenant_id == own ? red.allow(K::kUser, n) : red.hide(K::kUser, n);
      }
    }
    for (const auto& a : s.directory.serviceAccounts()) {
      for (const std::string& n : {a.name, a.id}) {
        a.tenant_id == own ? red.allow(K::kServiceAccount, n) : red.hide(K::kServiceAccount, n);
      }
    }
    for (const auto& k : s.directory.keys()) {
      for (const std::string& n : {k.name, k.id}) {
        k.tenant_id == own ? red.allow(K::kKey, n) : red.hide(K::kKey, n);
      }
    }
    for (const auto& w : s.wallets.all()) {
      w.spec.tenant_id == own ? red.allow(K::kWallet, w.spec.id) : red.hide(K::kWallet, w.spec.id);
    }
    for (const auto& [id, owner] : fleet.owners) {
      owner.first == own ? red.allow(K::kWorkload, id) : red.hide(K::kWorkload, id);
    }
    for (const std::string& alias : visible_routes) red.allow(K::kRoute, alias);
    for (const std::string& alias : hidden_routes) red.hide(K::kRoute, alias);
    for (const std::string& p : visible_providers) red.allow(K::kProvider, p);
    for (const std::string& p : all_providers) red.hide(K::kProvider, p);
    for (const auto& [replica, tenant] : fleet.served_tenant) {
      // Another tenant's replica is unnamed even on a route the caller uses (its name is its
      // workload's); the caller's own is named.
      if (tenant == own) continue;
      red.hide(K::kProvider, replica);
      red.unallow(K::kProvider, replica);
    }
    red.apply(c);
  }
  const diagnose::Diagnosis diagnosis = diagnose::diagnose(c);
  Json body = diagnose::toJson(diagnosis);
  diagnose::attachPoints(body, c, diagnosis);  // the console draws the evidence
  body["question"] = {{"kind", kind}, {"name", name}, {"symptom", symptom}};
  body["window"] = {{"start", diagnose::formatTime(start_ms)},
                    {"end", diagnose::formatTime(end_ms)}};
  if (!admin) shownEverywhere(body);
  if (narrate && ctx.router != nullptr) {
    // Given the answer as the caller sees it: nothing they may not see reaches the model.
    body["narration"] = co_await api::narrate(*ctx.router, req, ctx.o.narrator_route,
                                              ctx.o.narrator_max_tokens, body);
  }
  co_return jsonResponse(200, body);
}

}  // namespace

Result<void> addDiagnoseRoutes(http::Router& router, const Services& services,
                               DiagnoseOptions options) {
  auto ctx = std::make_shared<const Context>(Context{services, std::move(options), &router});
  PURSER_TRY(router.addAsync(Method::kGet, "/api/v1/diagnose",
                             [ctx](Request& req) { return handle(*ctx, req); }));
  return {};
}

}  // namespace purser::api
