#include "diagnose_live/investigator.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "diagnose/answer.h"
#include "diagnose/engine.h"
#include "diagnose_live/evidence.h"
#include "gateway/routing.h"
#include "http/async.h"
#include "identity/payer.h"
#include "workloads/visibility.h"

namespace purser::diagnose_live {

namespace {

using identity::Principal;
using identity::Role;
using workloads::bareName;
using workloads::FleetService;
using workloads::mayAccess;
using workloads::visibleQueues;

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

FleetPart gatherFleet(const FleetService& f, const Sources& s, const Principal& who,
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

}  // namespace

int64_t Investigator::retentionMs() const {
  if (s_.series == nullptr) return int64_t{24} * 3600 * 1000;
  return std::max(s_.series->limits().raw_retention_ms, s_.series->limits().rollup_retention_ms);
}

boost::asio::awaitable<Result<Gathered>> Investigator::gather(const Principal& who,
                                                              const Question& q) const {
  const Sources& s = s_;
  const bool admin = who.role == Role::kPlatformAdmin;
  const std::string& kind = q.kind;
  const std::string& name = q.name;
  const int64_t end_ms = unixMillis(s.clock.now());
  const int64_t start_ms = end_ms - q.since_ms;

  // --- What exists, and what the caller may ask about ------------------------------------------
  FleetPart fleet;
  const std::shared_ptr<FleetService> fleet_service = s.fleet ? s.fleet() : nullptr;
  if (fleet_service) {
    fleet = co_await fleet_service->call(
        [&](FleetService& f) -> FleetPart { return gatherFleet(f, s, who, kind, name, end_ms); });
  }
  std::map<std::string, const ProviderFacts*> facts;
  for (const auto& p : s.providers) facts[p.name] = &p;
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
    return Error(ErrorCode::kNotFound, fmt::format("no {} \"{}\" you may see", what, name))
        .withField("name");
  };
  std::string case_name = name;
  if (kind == "route") {
    if (!visible_routes.contains(name)) co_return fail(notFound("route"));
  } else if (kind == "deployment") {
    const bool known = std::any_of(inventory.deployments.begin(), inventory.deployments.end(),
                                   [&](const auto& d) { return d.name == name; }) ||
                       all_providers.contains(name);
    if (!known || (!admin && !visible_providers.contains(name))) {
      co_return fail(notFound("deployment"));
    }
  } else if (kind == "workload") {
    if (fleet.asked_workload.empty()) co_return fail(notFound("workload"));
    case_name = fleet.asked_workload;
  } else if (kind == "queue") {
    if (!fleet.queues.contains(name) || (!admin && !fleet.visible_queues.contains(name))) {
      co_return fail(notFound("queue"));
    }
  } else if (kind == "team") {
    bool ok = false;
    for (const auto& team : s.directory.teams()) {
      if (team.name != name) continue;
      ok = ok || admin || (who.role == Role::kTenantAdmin && team.tenant_id == who.tenant_id) ||
           team.id == who.team_id;
    }
    if (!ok) co_return fail(notFound("team"));
  } else if (kind == "user") {
    bool ok = false;
    for (const auto& u : s.directory.users()) {
      if (u.name != name) continue;
      ok = ok || admin || (who.role == Role::kTenantAdmin && u.tenant_id == who.tenant_id) ||
           u.id == who.id;
    }
    if (!ok) co_return fail(notFound("user"));
  }

  // --- Events ----------------------------------------------------------------------------------
  std::vector<diagnose::Event> events = fleet.pending;
  if (fleet_service) {
    auto rows = co_await http::runBlocking(s.readers, who.tenant_id, [&] {
      return fleet_service->events(workloads::Visibility{}, std::nullopt);
    });
    if (!rows) co_return fail(rows.error());
    for (const auto& row : *rows) {
      auto e = fleetEvent(row);
      if (e && e->time >= start_ms && e->time <= end_ms) events.push_back(std::move(*e));
    }
  }
  {
    ledger::AuditQuery aq;
    aq.from = formatRfc3339(SystemTime(std::chrono::milliseconds(start_ms)));
    aq.newest_first = true;
    aq.limit = 1000;
    auto entries =
        co_await http::runBlocking(s.readers, who.tenant_id, [&] { return s.records.audit(aq); });
    if (!entries) co_return fail(entries.error());
    const auto wallets = s.wallets.all();
    const auto wallet_scope =
        [&](const std::string& id) -> std::optional<std::pair<std::string, bool>> {
      for (const auto& w : wallets) {
        if (w.spec.id == id) {
          return std::make_pair(identity::walletScopeName(s.directory, w.spec.scope), w.spec.hard);
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

  Gathered out;
  diagnose::Case& c = out.c;
  c.name = "live";
  c.question = {kind, case_name, q.symptom};
  c.start = start_ms;
  c.end = end_ms;
  c.inventory = std::move(inventory);
  if (s.series != nullptr) c.series = seriesInWindow(*s.series, start_ms, end_ms);
  c.events = std::move(events);
  if (!admin) {
    // Tenants are walls: another tenant's objects are renamed, by kind, in what the engine
    // reads, so that its answer never holds their names (and no word of text is rewritten).
    using K = CaseRedactor::Kind;
    CaseRedactor& red = out.redactor;
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
  }
  co_return out;
}

Json Investigator::answer(const Principal& who, const Question& q, Gathered g) const {
  const bool admin = who.role == Role::kPlatformAdmin;
  if (!admin) g.redactor.apply(g.c);
  const diagnose::Diagnosis diagnosis = diagnose::diagnose(g.c);
  Json body = diagnose::toJson(diagnosis);
  diagnose::attachPoints(body, g.c, diagnosis);  // the console draws the evidence
  body["question"] = {{"kind", q.kind}, {"name", q.name}, {"symptom", q.symptom}};
  body["window"] = {{"start", diagnose::formatTime(g.c.start)},
                    {"end", diagnose::formatTime(g.c.end)}};
  if (!admin) shownEverywhere(body);
  return body;
}

}  // namespace purser::diagnose_live
