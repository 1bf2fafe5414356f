#include "api/fleet_api.h"

#include <utility>

#include <fmt/format.h>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include <set>

#include "api/fleet_views.h"
#include "api/problem.h"
#include "common/duration.h"
#include "common/json.h"
#include "fleet_io/manifest.h"
#include "http/async.h"

namespace purser::api {

namespace asio = boost::asio;
using fleet::Workload;
using http::Method;
using http::Request;
using http::Response;
using identity::Principal;
using identity::Role;
using nlohmann::json;
using workloads::bareName;
using workloads::FleetService;
using workloads::mayAccess;
using workloads::Record;
using workloads::visibilityOf;
using workloads::visibleQueues;

namespace {

// "namespace/name" as the caller wrote it in the path.
std::string askedName(const Request& req) {
  return std::string(req.param("namespace").value_or("")) + "/" +
         std::string(req.param("name").value_or(""));
}

// The workload the caller means, inside Purser (on the service's thread): namespaces are per
// tenant.
std::string nameOf(const FleetService& svc, const Principal& who, const Request& req) {
  return svc.namespaceOf(who.tenant_id, std::string(req.param("namespace").value_or(""))) + "/" +
         std::string(req.param("name").value_or(""));
}

// --- Handlers -----------------------------------------------------------------------------------

asio::awaitable<Response> submit(const Services& s, FleetService& svc, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  if (req.body.empty()) {
    co_return problem(400, "send a workload: a batch/v1 Job, Kueue's Workload or the short form");
  }
  auto parsed = fleet::parseWorkload(req.body, "request", req.max_nesting, svc.options().bounds);
  if (!parsed) co_return problem(400, parsed.error().toString());
  Workload w = std::move(parsed->workload);
  // The namespace: the caller's team unless the caller may name another.
  std::optional<identity::Team> team;
  if (!who->team_id.empty()) team = s.directory.team(who->team_id);
  std::string ns;
  if (parsed->namespace_given) {
    ns = w.namespace_;
  } else if (team) {
    ns = team->name;
  } else {
    co_return problem(400, "name the workload's namespace (a team): you are not in a team",
                      "namespace");
  }
  const bool admin = who->role == Role::kPlatformAdmin || who->role == Role::kTenantAdmin;
  if (w.priority_class.empty() && w.priority != 0 && !admin) {
    co_return problem(403,
                      "only admins may set a workload's priority directly; name a "
                      "WorkloadPriorityClass (priority_class) instead",
                      "priority");
  }
  std::string tenant_id = who->tenant_id, team_id = who->team_id;
  if (!team || ns != team->name) {
    if (who->role == Role::kTenantAdmin) {
      auto t = s.directory.teamByName(who->tenant_id, ns);
      if (!t) {
        co_return problem(404, fmt::format("your tenant has no team named \"{}\"", ns),
                          "namespace");
      }
      team_id = t->id;
    } else if (who->role != Role::kPlatformAdmin) {
      co_return problem(403,
                        fmt::format("you may submit only into your team's namespace \"{}\"",
                                    team ? team->name : std::string()),
                        "namespace");
    }
  }
  // Queue order is the server's: the time the workload arrived here.
  const int64_t now = unixMillis(s.clock.now());
  w.created_ms = now;
  w.queued_ms.reset();
  auto waiter = std::make_shared<http::Later<Result<void>>>(co_await asio::this_coro::executor);
  std::optional<json> view;
  Response refused = co_await svc.call([&](FleetService& f) -> Response {
    if (who->role == Role::kPlatformAdmin && (!team || ns != team->name)) {
      // The namespace's tenant, and its team of that name, own the workload and pay for it.
      tenant_id = f.owningTenant(ns);
      auto t = tenant_id.empty() ? std::nullopt : s.directory.teamByName(tenant_id, ns);
      team_id = t ? t->id : "";
    }
    const std::string internal = f.namespaceOf(tenant_id, ns);
    w.namespace_ = internal;
    w.name = internal + "/" + bareName(w.name);
    Record r;
    r.tenant_id = tenant_id;
    r.team_id = team_id;
    r.owner_kind = who->kind == identity::OwnerKind::kServiceAccount ? "service_account" : "user";
    r.owner_id = who->role == Role::kPlatformAdmin && tenant_id.empty() ? "" : who->id;
    r.key_id = r.owner_id.empty() ? "" : who->key_id;
    r.submitted_ms = now;
    r.spec = w;
    r.manifest = parsed->object_json;
    // Priority is granted per tenant; the platform admin's own submissions are its grant.
    if (who->role != Role::kPlatformAdmin) {
      if (auto granted = f.checkPriorityGrant(r); !granted) {
        return problem(403, granted.error().message,
                       w.priority_class.empty() ? "priority" : "priority_class");
      }
    }
    auto done = f.submit(std::move(r), http::Later<Result<void>>::deliver(waiter));
    if (!done) {
      if (done.error().code == ErrorCode::kAlreadyExists) {
        return problem(409, done.error().message, "name");
      }
      if (done.error().code == ErrorCode::kPermissionDenied) {
        return problem(403, done.error().message, "serve.route");
      }

      // Said in the tenant's own names.
      std::string message = done.error().message;
      for (size_t at = message.find(internal); internal != ns && at != std::string::npos;
           at = message.find(internal, at + ns.size())) {
        message.replace(at, internal.size(), ns);
      }
      return problem(400, message, "queue");
    }
    view = workloadView(f, *done);
    return Response{};
  });
  if (!view) co_return refused;
  auto durable = co_await waiter->get();
  if (!durable) co_return problem(503, "the workload could not be recorded; submit it again");
  if (!parsed->warnings.empty()) (*view)["warnings"] = parsed->warnings;
  co_return jsonResponse(201, *view);
}

asio::awaitable<Response> list(const Services& s, FleetService& svc, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  const auto ns = req.queryParam("namespace");
  const auto state = req.queryParam("state");
  static const std::set<std::string> kStates = {"pending",   "suspended", "evicted",
                                                "admitted",  "running",   "unknown",
                                                "succeeded", "failed",    "finished"};
  if (state && kStates.count(*state) == 0) {
    co_return problem(400,
                      "\"state\" must be pending, suspended, evicted, admitted, running, unknown, "
                      "succeeded, failed or finished (succeeded or failed)",
                      "state");
  }
  json items = json::array();
  if (state && (*state == "finished" || workloads::isTerminal(*state))) {
    auto ended = co_await http::runBlocking(
        s.readers, who->tenant_id, [&] { return svc.endedRecords(visibilityOf(*who), 1000); });
    if (!ended) co_return problem(ended.error());
    co_return co_await svc.call([&](FleetService& f) -> Response {
      for (const auto& r : *ended) {
        if (!mayAccess(*who, r.tenant_id, r.team_id)) continue;
        if (ns && FleetService::shown(r.spec.namespace_) != *ns) continue;
        if (*state != "finished" && r.state != *state) continue;
        items.push_back(workloadView(f, r));
      }
      return jsonResponse(200, {{"data", items}});
    });
  }
  co_return co_await svc.call([&](FleetService& f) -> Response {
    std::vector<const Record*> order;
    for (const auto& [name, r] : f.records()) order.push_back(&r);
    std::sort(order.begin(), order.end(),
              [](const Record* a, const Record* b) { return a->seq < b->seq; });
    for (const Record* r : order) {
      if (!mayAccess(*who, r->tenant_id, r->team_id)) continue;
      if (ns && FleetService::shown(r->spec.namespace_) != *ns) continue;
      if (state && r->state != *state) continue;
      items.push_back(workloadView(f, *r));
    }
    return jsonResponse(200, {{"data", items}});
  });
}

// The caller's workload, live or ended; nullopt when there is none it may see.
asio::awaitable<std::optional<Record>> findRecord(const Services& s, FleetService& svc,
                                                  const Principal& who, const Request& req) {
  std::string name;
  auto live = co_await svc.call([&](FleetService& f) -> std::optional<Record> {
    name = nameOf(f, who, req);
    const Record* r = f.find(name);
    return r ? std::optional<Record>(*r) : std::nullopt;
  });
  if (!live) {
    // Ended workloads are served from their record; live ones are in memory.
    auto stored = co_await http::runBlocking(s.readers, who.tenant_id,
                                             [&] { return svc.storedRecord(name); });
    if (stored && *stored && workloads::isTerminal((*stored)->state)) live = std::move(**stored);
  }
  if (live && !mayAccess(who, live->tenant_id, live->team_id)) live.reset();
  co_return live;
}

asio::awaitable<Response> get(const Services& s, FleetService& svc, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  auto r = co_await findRecord(s, svc, *who, req);
  if (!r) co_return problem(404, fmt::format("no workload named \"{}\"", askedName(req)));
  co_return co_await svc.call(
      [&](FleetService& f) -> Response { return jsonResponse(200, workloadView(f, *r)); });
}

asio::awaitable<Response> logs(const Services& s, FleetService& svc, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  size_t bytes = 64 * 1024;
  if (auto b = req.queryParam("bytes")) {
    char* end = nullptr;
    const long long v = std::strtoll(b->c_str(), &end, 10);
    if (b->empty() || *end != '\0' || v <= 0 || v > 8 * 1024 * 1024) {
      co_return problem(400, "\"bytes\" must be a whole number from 1 to 8388608", "bytes");
    }
    bytes = static_cast<size_t>(v);
  }
  auto r = co_await findRecord(s, svc, *who, req);
  if (!r) co_return problem(404, fmt::format("no workload named \"{}\"", askedName(req)));
  if (r->pods.empty()) {
    co_return problem(404, fmt::format("workload \"{}\" has run no pods yet", askedName(req)));
  }
  // The pod asked for ("SET-INDEX"), else the one that decided the workload's end, else the first.
  const workloads::PodRun* pod = &r->pods.front();
  const auto asked = req.queryParam("pod");
  for (const auto& p : r->pods) {
    if (asked ? *asked == fmt::format("{}-{}", p.pod_set, p.index) : p.phase == "failed") {
      pod = &p;
      break;
    }
  }
  if (asked && *asked != fmt::format("{}-{}", pod->pod_set, pod->index)) {
    co_return problem(404, fmt::format("workload \"{}\" has no pod \"{}\"", askedName(req), *asked),
                      "pod");
  }
  auto tail = svc.logTail(*pod, bytes);
  if (!tail) co_return problem(404, "that pod's output is no longer kept");
  co_return Response::text(200, std::move(*tail));
}

asio::awaitable<Response> remove(const Services& s, FleetService& svc, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  auto waiter = std::make_shared<http::Later<Result<void>>>(co_await asio::this_coro::executor);
  std::optional<json> view;
  Response missing = co_await svc.call([&](FleetService& f) -> Response {
    const std::string name = nameOf(f, *who, req);
    const Record* r = f.find(name);
    if (r == nullptr || !mayAccess(*who, r->tenant_id, r->team_id)) {
      return problem(404, fmt::format("no workload named \"{}\"", askedName(req)));
    }
    auto ended = f.remove(name, who->name, http::Later<Result<void>>::deliver(waiter));
    if (!ended) return problem(ended.error());
    view = workloadView(f, *ended);
    return Response{};
  });
  if (!view) co_return missing;
  auto durable = co_await waiter->get();
  if (!durable) co_return problem(503, "the deletion could not be recorded; try again");
  co_return jsonResponse(200, *view);
}

asio::awaitable<Response> why(const Services& s, FleetService& svc, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  const auto shown = FleetService::shown;
  co_return co_await svc.call([&](FleetService& f) -> Response {
    const std::string name = nameOf(f, *who, req);
    const Record* r = f.find(name);
    if (r == nullptr || !mayAccess(*who, r->tenant_id, r->team_id)) {
      return problem(404, fmt::format("no workload named \"{}\" (ended ones have no reasons)",
                                      askedName(req)));
    }
    auto explained = f.engine().explain(name);
    if (!explained) return problem(explained.error());
    json out = explanationJson(*explained);
    // Would-be victims the caller may not see are not named.
    if (out.contains("preemption") && out["preemption"].contains("would_preempt")) {
      for (auto& v : out["preemption"]["would_preempt"]) {
        const Record* victim = f.find(v.value("workload", ""));
        v["workload"] = victim == nullptr || !mayAccess(*who, victim->tenant_id, victim->team_id)
                            ? "a workload of another team"
                            : shown(victim->spec.name);
      }
    }
    if (out.contains("workload") && out["workload"].is_string()) {
      out["workload"] = shown(out["workload"].get<std::string>());
    }
    if (!r->hold.empty()) out["budget"] = r->hold;
    out["explanation"] = whySentences(out);
    for (auto& line : out["explanation"]) line = shown(line.get<std::string>());
    return jsonResponse(200, out);
  });
}

asio::awaitable<Response> queues(const Services& s, FleetService& svc, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  co_return co_await svc.call([&](FleetService& f) -> Response {
    json items = json::array();
    const bool all = who->role == Role::kPlatformAdmin;
    const std::set<std::string> mine =
        all ? std::set<std::string>{} : visibleQueues(s.directory, f, *who);
    for (const auto& q : f.engine().queues()) {
      if (all || mine.count(q.name) != 0) {
        json view = queueView(q);
        // Removed from the manifests, kept until its workloads end (it admits nothing new).
        view["terminating"] = f.terminating().contains(q.name);
        items.push_back(std::move(view));
      }
    }
    return jsonResponse(200, {{"data", items}});
  });
}

asio::awaitable<Response> nodes(const Services& s, FleetService& svc, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  co_return co_await svc.call([&](FleetService& f) -> Response {
    return jsonResponse(200, nodesView(f, s.directory, *who));
  });
}

// GPU-hours allocated, observed and busy per workload since `since` (default 24h, at most 31
// days), and which of those running now are allocated but idle.
asio::awaitable<Response> utilisation(const Services& s, FleetService& svc, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  Duration since = std::chrono::hours(24);
  if (auto text = req.queryParam("since")) {
    auto d = parseDuration(*text);
    if (!d || *d <= Duration(0) || *d > std::chrono::hours(24 * 31)) {
      co_return problem(
          invalidArgument("'since' must be a duration up to 744h (31 days), such as 24h")
              .withField("since"));
    }
    since = *d;
  }
  const int64_t now_ms = unixMillis(s.clock.now());
  const int64_t from_ms =
      now_ms - std::chrono::duration_cast<std::chrono::milliseconds>(since).count();
  auto live = co_await svc.call(
      [&](FleetService& f) -> std::vector<LiveGpuUse> { return liveGpuUse(f, *who, now_ms); });
  // Other teams' workloads on the GPUs now are listed too, without their names.
  std::vector<std::string> others;
  for (const auto& l : live) {
    if (!l.visible) others.push_back(l.name);
  }
  auto stored = co_await http::runBlocking(s.readers, who->tenant_id, [&] {
    return svc.utilisationSince(from_ms, visibilityOf(*who), others);
  });
  if (!stored) co_return problem(stored.error());
  co_return jsonResponse(200, utilisationView(live, *stored, s.directory, *who, from_ms));
}

asio::awaitable<Response> events(const Services& s, FleetService& svc, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  std::optional<std::string> workload = req.queryParam("workload");
  if (workload) {
    // Named as the caller sees it: "namespace/name" of the caller's tenant.
    const size_t slash = workload->find('/');
    workload = co_await svc.call([&](FleetService& f) -> std::string {
      return f.namespaceOf(who->tenant_id, workload->substr(0, slash)) +
             (slash == std::string::npos ? "" : workload->substr(slash));
    });
  }
  auto rows = co_await http::runBlocking(s.readers, who->tenant_id,
                                         [&] { return svc.events(visibilityOf(*who), workload); });
  if (!rows) co_return problem(rows.error());
  const auto shown = FleetService::shown;
  json items = json::array();
  for (const auto& e : *rows) {
    if (!mayAccess(*who, e.tenant_id, e.team_id)) continue;
    // A preemptor of another tenant is not named to this one.
    const bool foreign = who->role != Role::kPlatformAdmin && !e.by_tenant_id.empty() &&
                         e.by_tenant_id != who->tenant_id;
    items.push_back({{"at", e.at},
                     {"kind", e.kind},
                     {"workload", shown(e.workload)},
                     {"cluster_queue", e.cluster_queue},
                     {"reason", e.reason},
                     {"message", foreign ? "preempted to admit a workload of another tenant"
                                         : shown(e.message)},
                     {"by", foreign ? json(nullptr) : json(shown(e.by))}});
  }
  co_return jsonResponse(200, {{"data", items}});
}

asio::awaitable<Response> apply(const Services& s, FleetService& svc, Request& req) {
  auto who = authenticate(s, req);
  if (!who) co_return problem(who.error());
  if (who->role != Role::kPlatformAdmin) {
    co_return problem(403, "only platform admins may change the fleet's queues and flavors");
  }
  if (req.body.empty()) co_return problem(400, "send a YAML stream of Kueue objects");
  auto set = fleet::parseManifests(req.body, "manifest", req.max_nesting);
  if (!set) co_return problem(400, set.error().toString());
  const std::vector<std::string> warnings = set->warnings;
  json counts = {{"resource_flavors", set->flavors.size()},
                 {"cohorts", set->cohorts.size()},
                 {"cluster_queues", set->cluster_queues.size()},
                 {"local_queues", set->local_queues.size()},
                 {"workload_priority_classes", set->priority_classes.size()}};
  ledger::AuditEntry audit;
  audit.actor = who->id;
  audit.actor_role = std::string(identity::roleName(who->role));
  audit.action = "fleet.apply";
  audit.target = "fleet:manifests";
  audit.after = writeJson(counts);
  auto waiter = std::make_shared<http::Later<Result<void>>>(co_await asio::this_coro::executor);
  auto applied = co_await svc.call([&](FleetService& f) -> Result<void> {
    return f.apply(std::move(*set), req.body, std::move(audit),
                   http::Later<Result<void>>::deliver(waiter));
  });
  if (!applied) {
    co_return problem(applied.error().code == ErrorCode::kFailedPrecondition ? 409 : 400,
                      applied.error().message);
  }
  auto durable = co_await waiter->get();
  if (!durable) co_return problem(503, "the manifests could not be recorded; apply them again");
  co_return jsonResponse(200, {{"applied", counts}, {"warnings", warnings}});
}

}  // namespace

// --- The fleet --------------------------------------------------------------------------------

Fleet::Fleet(const Services& s, std::unique_ptr<workloads::FleetService> service)
    : s_(s), service_(std::move(service)) {}
Fleet::~Fleet() = default;

void Fleet::tick() {
  for (const auto& [tenant, alerts] : service_->takeAlerts()) {
    if (s_.alerts != nullptr) s_.alerts->post(tenant, alerts);
  }
}

void Fleet::addMetrics(http::MetricsRegistry& metrics) {
  addMetrics(metrics, [this] { return std::shared_ptr<Fleet>(std::shared_ptr<Fleet>(), this); });
}

void Fleet::addMetrics(http::MetricsRegistry& metrics, Current current) {
  auto& pending = metrics.gaugeFamily("purser_fleet_pending_workloads",
                                      "Workloads waiting in each ClusterQueue.", {"cluster_queue"});
  auto& admitted =
      metrics.gaugeFamily("purser_fleet_admitted_workloads",
                          "Workloads admitted in each ClusterQueue.", {"cluster_queue"});
  auto& used = metrics.gaugeFamily(
      "purser_fleet_quota_used",
      "Quota in use, by ClusterQueue, flavor and resource (in the resource's units: GPUs, cores, "
      "bytes).",
      {"cluster_queue", "flavor", "resource"});
  auto& nominal = metrics.gaugeFamily("purser_fleet_quota_nominal",
                                      "Nominal quota, by ClusterQueue, flavor and resource.",
                                      {"cluster_queue", "flavor", "resource"});
  metrics.addCollector([current = std::move(current), &pending, &admitted, &used, &nominal] {
    const std::shared_ptr<Fleet> f = current();
    if (!f) return;
    for (const auto& q : f->service().queueSnapshot()) {
      pending.labels({q.name}).set(static_cast<double>(q.pending));
      admitted.labels({q.name}).set(static_cast<double>(q.admitted));
      for (const auto& u : q.usage) {
        used.labels({q.name, u.flavor, u.resource}).set(static_cast<double>(u.usage) / 1000.0);
        nominal.labels({q.name, u.flavor, u.resource}).set(static_cast<double>(u.nominal) / 1000.0);
      }
    }
  });
}

void Fleet::stop() { service_->stop(); }

std::vector<std::string> Fleet::warnings() const { return service_->warnings(); }

Result<void> Fleet::addRoutes(http::Router& router) {
  return addRoutes(
      router, s_, [this] { return std::shared_ptr<Fleet>(std::shared_ptr<Fleet>(), this); },
      nullptr);
}

namespace {

using Handler = asio::awaitable<Response> (*)(const Services&, FleetService&, Request&);

// One request, answered by the fleet current now (kept alive until it is answered).
asio::awaitable<Response> answerByCurrent(const Services* s, Fleet::Current current,
                                          http::AsyncHandler otherwise, Handler handler,
                                          Request& req) {
  const std::shared_ptr<Fleet> f = current();
  if (!f) {
    if (otherwise) co_return co_await otherwise(req);
    co_return problem(503, "the fleet is not running on this replica");
  }
  co_return co_await handler(*s, f->service(), req);
}

}  // namespace

Result<void> Fleet::addRoutes(http::Router& router, const Services& services, Current current,
                              http::AsyncHandler otherwise) {
  const Services* s = &services;
  const auto route = [&](Method m, const char* path, Handler handler) {
    return router.addAsync(m, path, [s, current, otherwise, handler](Request& req) {
      return answerByCurrent(s, current, otherwise, handler, req);
    });
  };
  PURSER_TRY(route(Method::kPost, "/api/v1/workloads", &submit));
  PURSER_TRY(route(Method::kGet, "/api/v1/workloads", &list));
  PURSER_TRY(route(Method::kGet, "/api/v1/workloads/{namespace}/{name}", &get));
  PURSER_TRY(route(Method::kDelete, "/api/v1/workloads/{namespace}/{name}", &remove));
  PURSER_TRY(route(Method::kGet, "/api/v1/workloads/{namespace}/{name}/why", &why));
  PURSER_TRY(route(Method::kGet, "/api/v1/workloads/{namespace}/{name}/logs", &logs));
  PURSER_TRY(route(Method::kGet, "/api/v1/queues", &queues));
  PURSER_TRY(route(Method::kGet, "/api/v1/fleet/events", &events));
  PURSER_TRY(route(Method::kGet, "/api/v1/fleet/nodes", &nodes));
  PURSER_TRY(route(Method::kGet, "/api/v1/fleet/utilisation", &utilisation));
  PURSER_TRY(route(Method::kPost, "/api/v1/fleet/manifests", &apply));
  return {};
}

}  // namespace purser::api
