#include "api/fleet_api.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <set>

#include "api/problem.h"
#include "common/json.h"
#include "common/quantity.h"
#include "fleet_io/manifest.h"
#include "ledger/price.h"

namespace purser::api {

namespace asio = boost::asio;
using fleet::Amount;
using fleet::Workload;
using http::Method;
using http::Request;
using http::Response;
using identity::Principal;
using identity::Role;
using nlohmann::json;

namespace {

const std::vector<store::Migration> kFleetMigrations = {
    {1, "fleet workloads, applied manifests and events",
     "CREATE TABLE fleet_workloads (name TEXT PRIMARY KEY, seq INTEGER NOT NULL,"
     " version INTEGER NOT NULL, state TEXT NOT NULL, tenant_id TEXT NOT NULL,"
     " team_id TEXT NOT NULL, record TEXT NOT NULL, updated_at TEXT NOT NULL);"
     "CREATE TABLE fleet_manifests (seq INTEGER PRIMARY KEY, applied_at TEXT NOT NULL,"
     " actor TEXT NOT NULL, file TEXT NOT NULL, text TEXT NOT NULL);"
     "CREATE TABLE fleet_events (id INTEGER PRIMARY KEY, at TEXT NOT NULL, kind TEXT NOT NULL,"
     " workload TEXT NOT NULL, cluster_queue TEXT NOT NULL, reason TEXT NOT NULL,"
     " message TEXT NOT NULL, by_workload TEXT NOT NULL, tenant_id TEXT NOT NULL,"
     " team_id TEXT NOT NULL, by_tenant_id TEXT NOT NULL);"
     "CREATE INDEX fleet_events_workload ON fleet_events (workload, id)"},
};

constexpr const char* kGpu = "nvidia.com/gpu";
constexpr const char* kGpuModel = "gpu-hours";  // what GPU time is metered as in the ledger

// An amount in milli-units as a Kubernetes quantity: "2", "500m", "512Gi" (whole mebibytes and
// up read best in binary units).
std::string quantity(Amount milli) {
  constexpr Amount kMebi = Amount{1} << 20;
  if (milli != 0 && milli % 1000 == 0 && (milli / 1000) % kMebi == 0) {
    return Quantity::fromInt(milli / 1000, Quantity::Format::kBinarySI).toString();
  }
  return Quantity::fromMilli(milli).toString();
}

json resourcesJson(const fleet::Resources& r) {
  json out = json::object();
  for (const auto& [name, v] : r) out[name] = quantity(v);
  return out;
}

// --- The record of a workload, as stored -------------------------------------------------------

struct Record {
  Workload spec;  // as submitted (its admission lives below)
  int64_t seq = 0;
  std::string tenant_id, team_id, owner_kind, owner_id, key_id;
  std::string state = "pending";  // pending, admitted, finished
  std::optional<fleet::Admission> admission;
  int64_t submitted_ms = 0, admitted_ms = 0, metered_until_ms = 0, finished_ms = 0;
  Money charged;
  int64_t preemptions = 0;
  std::string hold;     // the budget hold's message while held
  int64_t version = 0;  // bumped at every write; a retried older write never wins
  // While admitted: the wallet reservation holding its next stretch of GPU time (in memory; a
  // restart takes a new one at the first metering).
  std::string gpu_hold;
};

json placementsJson(const std::vector<fleet::PodPlacement>& pods) {
  json out = json::array();
  for (const auto& p : pods) {
    out.push_back({{"node", p.node}, {"gpus", p.gpus}, {"gpu_milli", p.gpu_milli}});
  }
  return out;
}

json admissionJson(const fleet::Admission& a) {
  json sets = json::array();
  for (const auto& ps : a.pod_sets) {
    json usage = json::object();
    for (const auto& [r, v] : ps.usage) usage[r] = v;
    sets.push_back({{"name", ps.name},
                    {"count", ps.count},
                    {"flavors", ps.flavors},
                    {"usage", usage},
                    {"placements", placementsJson(ps.placements)}});
  }
  return {{"cluster_queue", a.cluster_queue}, {"pod_sets", sets}};
}

fleet::Admission admissionFrom(const json& j) {
  fleet::Admission a;
  a.cluster_queue = j.at("cluster_queue").get<std::string>();
  for (const auto& ps : j.at("pod_sets")) {
    fleet::PodSetAssignment out;
    out.name = ps.at("name").get<std::string>();
    out.count = ps.at("count").get<int64_t>();
    out.flavors = ps.at("flavors").get<std::map<std::string, std::string>>();
    out.usage = ps.at("usage").get<std::map<std::string, Amount>>();
    if (ps.contains("placements")) {
      for (const auto& p : ps.at("placements")) {
        out.placements.push_back({p.at("node").get<std::string>(),
                                  p.at("gpus").get<std::vector<int>>(),
                                  p.at("gpu_milli").get<int64_t>()});
      }
    }
    a.pod_sets.push_back(std::move(out));
  }
  return a;
}

json specJson(const Workload& w) {
  json sets = json::array();
  for (const auto& ps : w.pod_sets) {
    json tolerations = json::array();
    for (const auto& t : ps.tolerations) {
      tolerations.push_back(
          {{"key", t.key}, {"op", t.op}, {"value", t.value}, {"effect", t.effect}});
    }
    json requests = json::object();
    for (const auto& [r, v] : ps.requests) requests[r] = v;
    sets.push_back({{"name", ps.name},
                    {"count", ps.count},
                    {"min_count", ps.min_count ? json(*ps.min_count) : json(nullptr)},
                    {"requests", requests},
                    {"tolerations", tolerations},
                    {"node_selector", ps.node_selector},
                    {"topology", ps.topology.level.empty()
                                     ? json(nullptr)
                                     : json{{ps.topology.required ? "required" : "preferred",
                                             ps.topology.level}}},
                    {"use_gpu_types", ps.use_gpu_types},
                    {"nouse_gpu_types", ps.nouse_gpu_types},
                    {"command", ps.command},
                    {"working_dir", ps.working_dir},
                    {"env", ps.env}});
  }
  return {{"name", w.name},
          {"namespace", w.namespace_},
          {"queue", w.local_queue},
          {"priority", w.priority},
          {"priority_class", w.priority_class},
          {"created_ms", w.created_ms},
          {"uid", w.uid},
          {"pod_sets", sets},
          {"queued_ms", w.queued_ms ? json(*w.queued_ms) : json(nullptr)}};
}

Workload specFrom(const json& j) {
  Workload w;
  w.name = j.at("name").get<std::string>();
  w.namespace_ = j.at("namespace").get<std::string>();
  w.local_queue = j.at("queue").get<std::string>();
  w.priority = j.at("priority").get<int32_t>();
  w.priority_class = j.at("priority_class").get<std::string>();
  w.created_ms = j.at("created_ms").get<int64_t>();
  w.uid = j.at("uid").get<std::string>();
  if (j.contains("queued_ms") && !j.at("queued_ms").is_null()) {
    w.queued_ms = j.at("queued_ms").get<int64_t>();
  }
  for (const auto& ps : j.at("pod_sets")) {
    fleet::PodSet out;
    out.name = ps.at("name").get<std::string>();
    out.count = ps.at("count").get<int64_t>();
    if (!ps.at("min_count").is_null()) out.min_count = ps.at("min_count").get<int64_t>();
    out.requests = ps.at("requests").get<std::map<std::string, Amount>>();
    for (const auto& t : ps.at("tolerations")) {
      out.tolerations.push_back({t.at("key").get<std::string>(), t.at("op").get<std::string>(),
                                 t.at("value").get<std::string>(),
                                 t.at("effect").get<std::string>()});
    }
    out.node_selector = ps.at("node_selector").get<std::map<std::string, std::string>>();
    if (ps.contains("topology") && ps.at("topology").is_object()) {
      for (const auto& [kind, level] : ps.at("topology").items()) {
        out.topology = {level.get<std::string>(), kind == "required"};
      }
    }
    if (ps.contains("use_gpu_types")) {
      out.use_gpu_types = ps.at("use_gpu_types").get<std::vector<std::string>>();
    }
    if (ps.contains("nouse_gpu_types")) {
      out.nouse_gpu_types = ps.at("nouse_gpu_types").get<std::vector<std::string>>();
    }
    // Records written before workloads carried what they run have none of these.
    if (ps.contains("command")) out.command = ps.at("command").get<std::vector<std::string>>();
    if (ps.contains("working_dir")) out.working_dir = ps.at("working_dir").get<std::string>();
    if (ps.contains("env")) out.env = ps.at("env").get<std::map<std::string, std::string>>();
    w.pod_sets.push_back(std::move(out));
  }
  return w;
}

json recordJson(const Record& r) {
  return {{"spec", specJson(r.spec)},
          {"seq", r.seq},
          {"tenant_id", r.tenant_id},
          {"team_id", r.team_id},
          {"owner_kind", r.owner_kind},
          {"owner_id", r.owner_id},
          {"key_id", r.key_id},
          {"state", r.state},
          {"admission", r.admission ? admissionJson(*r.admission) : json(nullptr)},
          {"submitted_ms", r.submitted_ms},
          {"admitted_ms", r.admitted_ms},
          {"metered_until_ms", r.metered_until_ms},
          {"finished_ms", r.finished_ms},
          {"charged_nanos", r.charged.nanos()},
          {"preemptions", r.preemptions},
          {"hold", r.hold},
          {"version", r.version}};
}

Result<Record> recordFrom(const std::string& text) {
  const json j = parseJsonOrDiscarded(text);
  if (!j.is_object()) return fail(Error(ErrorCode::kDataLoss, "a workload record is unreadable"));
  try {
    Record r;
    r.spec = specFrom(j.at("spec"));
    r.seq = j.at("seq").get<int64_t>();
    r.tenant_id = j.at("tenant_id").get<std::string>();
    r.team_id = j.at("team_id").get<std::string>();
    r.owner_kind = j.at("owner_kind").get<std::string>();
    r.owner_id = j.at("owner_id").get<std::string>();
    r.key_id = j.at("key_id").get<std::string>();
    r.state = j.at("state").get<std::string>();
    if (!j.at("admission").is_null()) r.admission = admissionFrom(j.at("admission"));
    r.submitted_ms = j.at("submitted_ms").get<int64_t>();
    r.admitted_ms = j.at("admitted_ms").get<int64_t>();
    r.metered_until_ms = j.at("metered_until_ms").get<int64_t>();
    r.finished_ms = j.at("finished_ms").get<int64_t>();
    r.charged = Money::fromNanos(j.at("charged_nanos").get<int64_t>());
    r.preemptions = j.at("preemptions").get<int64_t>();
    r.hold = j.value("hold", "");
    r.version = j.value("version", int64_t{0});
    return r;
  } catch (const json::exception& e) {
    return fail(
        Error(ErrorCode::kDataLoss, fmt::format("a workload record is unreadable: {}", e.what())));
  }
}

std::string rfc3339(int64_t ms) {
  return ms == 0 ? std::string() : formatRfc3339(SystemTime(std::chrono::milliseconds(ms)));
}

bool requestsGpu(const Workload& w) {
  for (const auto& ps : w.pod_sets) {
    auto it = ps.requests.find(kGpu);
    if (it != ps.requests.end() && it->second > 0) return true;
  }
  return false;
}

// The bare name of "namespace/name".
std::string bareName(const std::string& name) {
  const size_t slash = name.find('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

// A store write enqueued now and awaited later, from the coroutine that made it.
struct WriteWaiter {
  explicit WriteWaiter(const asio::any_io_executor& executor) : timer(executor) {}
  asio::steady_timer timer;
  bool done = false;
  Result<void> result;
};

asio::awaitable<Result<void>> awaitWrite(std::shared_ptr<WriteWaiter> w) {
  if (!w->done) {
    w->timer.expires_at(asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    co_await w->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return w->result;
}

}  // namespace

// --- The fleet --------------------------------------------------------------------------------

class Fleet::Impl {
 public:
  Impl(const Services& s, FleetOptions options) : s_(s), options_(std::move(options)) {}

  Result<void> open() {
    PURSER_TRY(s_.store.migrate("fleet", kFleetMigrations));
    for (const auto& [file, text] : options_.manifests) {
      auto set = PURSER_TRY_VALUE(fleet::parseManifests(text, file));
      for (auto& w : set.warnings) warnings_.push_back(w);
      merge(base_, std::move(set));
    }
    // What was applied through the API, in order, then the workloads.
    store::Rows manifests, records;
    PURSER_TRY(s_.store.read([&](store::Tx& tx) -> Result<void> {
      manifests = PURSER_TRY_VALUE(tx.query("SELECT file, text FROM fleet_manifests ORDER BY seq"));
      records = PURSER_TRY_VALUE(
          tx.query("SELECT record FROM fleet_workloads WHERE state <> 'finished' ORDER BY seq"));
      auto max_seq = PURSER_TRY_VALUE(tx.query("SELECT MAX(seq) FROM fleet_workloads"));
      if (!max_seq.empty() && std::holds_alternative<int64_t>(max_seq[0].at(0))) {
        next_seq_ = max_seq[0].getInt(0) + 1;
      }
      return {};
    }));
    for (const auto& row : manifests) {
      auto set = PURSER_TRY_VALUE(fleet::parseManifests(row.getText(1), row.getText(0)));
      merge(base_, std::move(set));
    }
    for (const auto& row : records) {
      Record r = PURSER_TRY_VALUE(recordFrom(row.getText(0)));
      records_[r.spec.name] = std::move(r);
    }
    std::lock_guard lock(mu_);
    Built built = PURSER_TRY_VALUE(rebuild(worldOf(base_)));
    engine_ = std::move(built.engine);
    placer_ = std::move(built.placer);
    auto write = scheduleLocked();
    if (write) PURSER_TRY(s_.store.write(*write));
    spdlog::info("fleet: {} ClusterQueue(s), {} workload(s) restored", base_.cluster_queues.size(),
                 records_.size());
    return {};
  }

  // --- World ---------------------------------------------------------------------------------

  template <typename T, typename Key>
  static void upsert(std::vector<T>& into, std::vector<T> from, Key key) {
    for (auto& x : from) {
      auto it =
          std::find_if(into.begin(), into.end(), [&](const T& y) { return key(y) == key(x); });
      if (it != into.end()) {
        *it = std::move(x);
      } else {
        into.push_back(std::move(x));
      }
    }
  }

  // Objects of `set` replace those of the same kind and name in `into`, or join them.
  static void merge(fleet::ManifestSet& into, fleet::ManifestSet set) {
    const auto byName = [](const auto& x) { return x.name; };
    upsert(into.flavors, std::move(set.flavors), byName);
    upsert(into.cohorts, std::move(set.cohorts), byName);
    upsert(into.cluster_queues, std::move(set.cluster_queues), byName);
    upsert(into.priority_classes, std::move(set.priority_classes), byName);
    upsert(into.local_queues, std::move(set.local_queues),
           [](const fleet::LocalQueue& q) { return q.namespace_ + "/" + q.name; });
    for (auto& [ns, labels] : set.namespaces) into.namespaces[ns] = std::move(labels);
  }

  // The manifests' objects, with every team as a namespace labelled with its name and tenant.
  fleet::World worldOf(const fleet::ManifestSet& set) const {
    fleet::World w = fleet::toWorld(set);
    for (const auto& team : s_.directory.teams()) {
      const std::string ns = namespaceOf(team.tenant_id, team.name);
      w.namespaces[ns] = labelsOf(ns, team.tenant_id);
    }
    for (const auto& [name, r] : records_) {
      w.namespaces[r.spec.namespace_].emplace("kubernetes.io/metadata.name", r.spec.namespace_);
    }
    return w;
  }

  // Namespaces are per tenant: two tenants' teams of one name are two namespaces, and neither
  // learns of the other. The name belongs to one tenant — the one a `v1 Namespace` object of the
  // manifests labels `purser.dev/tenant`, else the tenant whose team took the name first — and is
  // that tenant's namespace as it is; another tenant's team of the name has the namespace
  // "NAME@TENANT-ID" inside Purser, shown to that tenant as NAME. The manifests' LocalQueues (in
  // namespace NAME) are the owner's.
  std::string owningTenant(const std::string& name) const {
    if (auto given = base_.namespaces.find(name); given != base_.namespaces.end()) {
      if (auto t = given->second.find("purser.dev/tenant"); t != given->second.end()) {
        if (auto tenant = s_.directory.tenantByName(t->second)) return tenant->id;
      }
    }
    std::optional<identity::Team> first;
    for (const auto& team : s_.directory.teams()) {
      if (team.name != name) continue;
      if (!first || std::tie(team.created_at, team.id) < std::tie(first->created_at, first->id)) {
        first = team;
      }
    }
    return first ? first->tenant_id : std::string();
  }

  // The namespace inside Purser of `tenant_id`'s namespace `name` (a platform admin, with no
  // tenant, names namespaces as they are).
  std::string namespaceOf(const std::string& tenant_id, const std::string& name) const {
    if (tenant_id.empty() || name.find('@') != std::string::npos) return name;
    const std::string owner = owningTenant(name);
    return owner.empty() || owner == tenant_id ? name : name + "@" + tenant_id;
  }

  // What a tenant sees of a namespace, of "namespace/name" or of a message naming them: without
  // the "@TENANT-ID" (namespace names never hold an '@' of their own).
  static std::string shown(std::string text) {
    constexpr size_t kIdLength = 26;  // a tenant id (common/id.h)
    size_t at = 0;
    while ((at = text.find('@', at)) != std::string::npos) {
      size_t end = at + 1;
      while (end < text.size() && std::isalnum(static_cast<unsigned char>(text[end]))) ++end;
      if (end - at - 1 == kIdLength) {
        text.erase(at, end - at);
      } else {
        at = end;
      }
    }
    return text;
  }

  // The labels of namespace `ns` of `tenant_id`'s team.
  std::map<std::string, std::string> labelsOf(const std::string& ns,
                                              const std::string& tenant_id) const {
    std::map<std::string, std::string> labels = {{"kubernetes.io/metadata.name", ns}};
    if (auto tenant = s_.directory.tenant(tenant_id)) labels["purser.dev/tenant"] = tenant->name;
    // Labels from Namespace objects in the manifests win.
    auto given = base_.namespaces.find(ns);
    if (given != base_.namespaces.end()) {
      for (const auto& [k, v] : given->second) labels[k] = v;
    }
    return labels;
  }

  // An engine and the inventory it places on.
  struct Built {
    std::unique_ptr<fleet::Engine> engine;
    std::shared_ptr<fleet::Placer> placer;  // none without an inventory
  };

  // A new engine over `world` holding every live workload: admitted ones keep their quota.
  Result<Built> rebuild(fleet::World world) {
    fleet::EngineOptions eo;
    eo.mode = options_.mode;
    // Each engine places on its own copy of the inventory, refilled from the admitted workloads
    // below, so a rebuild that fails leaves the running engine and its placements as they were.
    std::shared_ptr<fleet::Placer> placer;
    if (!options_.inventory.empty()) {
      placer = PURSER_TRY_VALUE(
          fleet::Placer::create(options_.inventory, options_.policy, options_.seed));
      eo.placement = fleet::placementHook(placer, world.flavors);
    }
    eo.fair_sharing = false;
    for (const auto& cq : world.cluster_queues) {
      if (cq.fair_weight_milli != 1000) eo.fair_sharing = true;
    }
    auto engine = PURSER_TRY_VALUE(fleet::Engine::create(std::move(world), eo));
    std::vector<const Record*> order;
    for (const auto& [name, r] : records_) order.push_back(&r);
    std::sort(order.begin(), order.end(),
              [](const Record* a, const Record* b) { return a->seq < b->seq; });
    for (const Record* r : order) {
      if (r->state != "admitted") continue;
      Workload w = r->spec;
      w.admission = r->admission;
      w.admitted_ms = r->admitted_ms;
      auto added = engine->addAdmitted(std::move(w));
      if (!added) {
        return fail(Error(ErrorCode::kFailedPrecondition,
                          fmt::format("admitted workload \"{}\" would lose its quota: {}",
                                      r->spec.name, added.error().message)));
      }
    }
    for (const Record* r : order) {
      if (r->state != "pending") continue;
      auto added = engine->submit(r->spec);
      if (!added) {
        return fail(Error(ErrorCode::kFailedPrecondition,
                          fmt::format("pending workload \"{}\" would have no queue: {}",
                                      r->spec.name, added.error().message)));
      }
      if (!r->hold.empty()) (void)engine->hold(r->spec.name, "BudgetExhausted", r->hold);
    }
    return Built{std::move(engine), std::move(placer)};
  }

  // --- Scheduling, metering and persistence (all with mu_ held) -------------------------------

  int64_t nowMs() const { return unixMillis(s_.clock.now()); }

  std::vector<ledger::Scope> scopesOf(const Record& r) const {
    ledger::Charged c;
    c.tenant_id = r.tenant_id;
    c.team_id = r.team_id;
    (r.owner_kind == "service_account" ? c.service_account_id : c.user_id) = r.owner_id;
    // A workload submitted with a derived key is charged to the keys above it too.
    for (const auto& k : s_.directory.keyChain(r.key_id)) c.key_chain.push_back(k.id);
    if (c.key_chain.empty() && !r.key_id.empty()) c.key_chain.push_back(r.key_id);
    return ledger::scopesOf(c);
  }

  // Why `r` may not start GPU work now (a hard wallet in its chain has nothing left); empty if
  // it may.
  // How far ahead GPU time is held: two metering intervals and the tick's slack, so the hold
  // taken at one metering covers everything up to the next.
  std::chrono::milliseconds lookahead() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(options_.metering_interval) * 2 +
           std::chrono::seconds(2);
  }

  // What `r`'s GPUs cost over the lookahead: at its admitted flavors' prices, or, while pending,
  // at the dearest priced flavor its ClusterQueue offers GPUs in (zero when none is priced).
  Money lookaheadCost(const Record& r) const {
    Money total;
    const auto add = [&](const Money* price, Amount gpu_milli) {
      if (price == nullptr || gpu_milli <= 0) return;
      auto part = ledger::gpuCost(*price, gpu_milli, lookahead(), Rounding::kCeil);
      total = total.add(part.value_or(Money::max())).value_or(Money::max());
    };
    if (r.state == "admitted" && r.admission) {
      for (const auto& ps : r.admission->pod_sets) {
        auto use = ps.usage.find(kGpu);
        auto f = ps.flavors.find(kGpu);
        if (use != ps.usage.end() && f != ps.flavors.end())
          add(s_.prices.gpu(f->second), use->second);
      }
      return total;
    }
    Amount gpu_milli = 0;
    for (const auto& ps : r.spec.pod_sets) {
      auto g = ps.requests.find(kGpu);
      if (g != ps.requests.end()) gpu_milli += g->second * ps.count;
    }
    if (gpu_milli == 0) return total;
    auto st = engine_->status(r.spec.name);
    const std::string cq = st ? st->cluster_queue : std::string();
    const Money* dearest = nullptr;
    for (const auto& q : base_.cluster_queues) {
      if (q.name != cq) continue;
      for (const auto& group : q.resource_groups) {
        if (std::find(group.covered.begin(), group.covered.end(), kGpu) == group.covered.end()) {
          continue;
        }
        for (const auto& fq : group.flavors) {
          const Money* price = s_.prices.gpu(fq.flavor);
          if (price != nullptr && (dearest == nullptr || *dearest < *price)) dearest = price;
        }
      }
    }
    add(dearest, gpu_milli);
    return total;
  }

  // Why a GPU workload of `r`'s owner may not start (or go on): a hard wallet in its chain that
  // cannot hold its next stretch of GPU time. Empty when it may.
  std::string budgetHold(const Record& r) const {
    if (r.tenant_id.empty() || !requestsGpu(r.spec)) return {};
    const Money need = lookaheadCost(r);
    for (const auto& id : s_.wallets.chain(scopesOf(r), kGpuModel)) {
      auto st = s_.wallets.status(id);
      if (!st || !st->spec.hard) continue;
      if (!st->remaining.isZero() && !(st->remaining < need)) continue;
      return fmt::format(
          "the GPU budget is used up: wallet {} ({} {}) has {} of {} left{}, and this workload's "
          "next {} s of GPU time cost {}; it waits until the wallet is raised or its period "
          "resets",
          id, ledger::scopeKindName(st->spec.scope.kind), st->spec.scope.id,
          st->remaining.toString(), st->spec.limit.toString(),
          st->spec.period == ledger::Period::kNone
              ? std::string()
              : fmt::format(" until {}", formatRfc3339(st->window.end)),
          lookahead().count() / 1000, need.toString());
    }
    return {};
  }

  // Holds `r`'s next stretch of GPU time on its wallet chain; false when a hard wallet cannot.
  bool holdGpu(Record& r) {
    releaseGpu(r);
    if (r.tenant_id.empty() || !requestsGpu(r.spec)) return true;
    const Money need = lookaheadCost(r);
    if (need.isZero()) return true;
    ledger::ReserveRequest q;
    q.event_id = fmt::format("gpu-hold:{}:{}", r.spec.name, ++hold_seq_);
    q.wallet_ids = s_.wallets.chain(scopesOf(r), kGpuModel);
    q.amount = need;
    q.lease = lookahead() * 3;
    auto held = s_.wallets.reserve(q);
    if (!held) {
      if (held.error().code == ErrorCode::kResourceExhausted) return false;
      spdlog::error("fleet: GPU time of {} not held: {}", r.spec.name, held.error().message);
      return true;  // not the budget's doing: metering still charges what runs
    }
    r.gpu_hold = q.event_id;
    return true;
  }

  void releaseGpu(Record& r) {
    if (r.gpu_hold.empty()) return;
    (void)s_.wallets.release(r.gpu_hold);
    r.gpu_hold.clear();
  }

  // Sends an admitted workload whose GPU time can no longer be held back to its queue, held.
  void stopForBudget(const std::string& name) {
    auto it = records_.find(name);
    if (it == records_.end() || it->second.state != "admitted") return;
    Record& r = it->second;
    releaseGpu(r);
    std::string why = budgetHold(r);
    if (why.empty()) why = "the GPU budget cannot hold this workload's next stretch of GPU time";
    if (!engine_->stop(name, "BudgetExhausted", why)) return;
    (void)engine_->hold(name, "BudgetExhausted", why);
    r.hold = why;
  }

  // Charges `r`'s GPU time up to `now_ms`; the returned write records it.
  std::optional<store::TxFn> meterLocked(Record& r, int64_t now_ms) {
    if (r.state != "admitted" || !r.admission) return std::nullopt;
    releaseGpu(r);  // the elapsed stretch is charged below; the caller holds the next
    const int64_t elapsed = now_ms - r.metered_until_ms;
    if (elapsed <= 0) return std::nullopt;
    Money cost;
    Amount gpu_milli = 0;
    std::string flavor;
    for (const auto& ps : r.admission->pod_sets) {
      auto use = ps.usage.find(kGpu);
      if (use == ps.usage.end() || use->second <= 0) continue;
      auto f = ps.flavors.find(kGpu);
      if (f == ps.flavors.end()) continue;
      gpu_milli += use->second;
      if (flavor.empty()) flavor = f->second;
      const Money* price = s_.prices.gpu(f->second);
      if (price == nullptr) continue;
      auto part = ledger::gpuCost(*price, use->second, std::chrono::milliseconds(elapsed),
                                  Rounding::kHalfEven);
      if (!part) {
        // Left unmetered: the next attempt charges the whole stretch.
        spdlog::error("fleet: GPU time of {} not priced: {}", r.spec.name, part.error().message);
        return std::nullopt;
      }
      cost = cost.add(*part).value_or(Money::max());
    }
    if (gpu_milli == 0 || r.tenant_id.empty()) {
      r.metered_until_ms = now_ms;  // nothing to charge, or nobody to charge it to
      return std::nullopt;
    }
    ledger::UsageEvent e;
    e.id = s_.ids.next();
    e.at = SystemTime(std::chrono::milliseconds(now_ms));
    e.tenant_id = r.tenant_id;
    e.team_id = r.team_id;
    if (r.owner_kind == "service_account") {
      e.service_account_id = r.owner_id;
    } else {
      e.user_id = r.owner_id;
    }
    e.key_id = r.key_id;
    e.session_id = shown(r.spec.name);
    e.route = flavor;
    e.provider = "fleet";
    e.model = kGpuModel;
    e.cost = cost;
    e.latency_ms = elapsed;
    e.status = 200;
    auto charged = s_.meter.charge(e, s_.wallets.chain(scopesOf(r), kGpuModel));
    if (!charged) {
      spdlog::error("fleet: GPU time of {} not charged: {}", r.spec.name, charged.error().message);
      return std::nullopt;
    }
    r.metered_until_ms = now_ms;
    r.charged = r.charged.add(charged->charged).value_or(Money::max());
    if (charged->alerts.empty()) return std::move(charged->write);
    alerts_.emplace_back(r.tenant_id, charged->alerts);
    const Services& services = s_;
    return [write = std::move(charged->write), alerts = charged->alerts, tenant = r.tenant_id,
            &services](store::Tx& tx) -> Result<void> {
      PURSER_TRY(write(tx));
      return auditAlerts(services, tx, alerts, tenant, "fleet");
    };
  }

  struct EventRow {
    std::string at, kind, workload, cluster_queue, reason, message, by, tenant_id, team_id,
        by_tenant_id;
  };

  void noteEvent(std::string kind, const std::string& workload, std::string cluster_queue,
                 std::string reason, std::string message, std::string by) {
    const Record* r = nullptr;
    if (auto it = records_.find(workload); it != records_.end()) r = &it->second;
    const Record* b = nullptr;
    if (auto it = records_.find(by); !by.empty() && it != records_.end()) b = &it->second;
    new_events_.push_back({formatRfc3339(s_.clock.now()), std::move(kind), workload,
                           std::move(cluster_queue), std::move(reason), std::move(message),
                           std::move(by), r ? r->tenant_id : "", r ? r->team_id : "",
                           b ? b->tenant_id : ""});
  }

  // Applies budget holds, runs the engine to a stable state, and brings the records up to date;
  // returns the write that records every change (nullopt when nothing changed).
  std::optional<store::TxFn> scheduleLocked() {
    const int64_t now = nowMs();
    for (auto& [name, r] : records_) {
      if (r.state != "pending") continue;
      std::string hold = budgetHold(r);
      if (hold == r.hold) continue;
      if (hold.empty()) {
        (void)engine_->release(name);
        noteEvent("Released", name, "", "BudgetAvailable", "the GPU budget has room again", "");
      } else {
        (void)engine_->hold(name, "BudgetExhausted", hold);
        noteEvent("Held", name, "", "BudgetExhausted", hold, "");
      }
      r.hold = std::move(hold);
      dirty_.insert(name);
    }
    engine_->setTime(now);
    // Admission takes a hold on the wallets for the GPU time ahead; a workload whose hold fails
    // (a hard wallet raced below it) goes back, held, and the engine runs again.
    for (int round = 0; round < 8; ++round) {
      engine_->runUntilStable();
      std::vector<std::string> stops;
      processEventsLocked(now, stops);
      if (stops.empty()) break;
      for (const auto& name : stops) stopForBudget(name);
    }
    return flushLocked();
  }

  void processEventsLocked(int64_t now, std::vector<std::string>& stops) {
    for (const fleet::Event& e : engine_->takeEvents()) {
      auto it = records_.find(e.workload);
      if (it == records_.end()) continue;
      Record& r = it->second;
      switch (e.kind) {
        case fleet::Event::Kind::kAdmitted: {
          auto st = engine_->status(e.workload);
          r.state = "admitted";
          r.admission = st ? st->admission : std::nullopt;
          r.admitted_ms = now;
          r.metered_until_ms = now;
          noteEvent("Admitted", e.workload, e.cluster_queue, "", "", "");
          if (!holdGpu(r)) stops.push_back(e.workload);
          break;
        }
        case fleet::Event::Kind::kPreempted:
          noteEvent("Preempted", e.workload, e.cluster_queue, e.reason, e.message, e.by);
          break;
        case fleet::Event::Kind::kEvicted:
          if (auto tx = meterLocked(r, now)) metering_.push_back(std::move(*tx));
          r.state = "pending";
          r.admission.reset();
          if (e.reason != "BudgetExhausted") ++r.preemptions;
          if (auto st = engine_->status(e.workload); st && st->queued_ms) {
            r.spec.queued_ms = st->queued_ms;
          }
          noteEvent("Evicted", e.workload, e.cluster_queue, e.reason, e.message, e.by);
          break;
        default:
          break;
      }
      dirty_.insert(e.workload);
    }
  }

  // The write for everything changed since the last one.
  std::optional<store::TxFn> flushLocked() {
    if (dirty_.empty() && new_events_.empty() && metering_.empty() && finished_.empty()) {
      return std::nullopt;
    }
    struct Row {
      std::string name, state, tenant_id, team_id, record;
      int64_t seq, version;
    };
    std::vector<Row> rows;
    const std::string at = formatRfc3339(s_.clock.now());
    const auto row = [&](Record& r) {
      ++r.version;
      rows.push_back({r.spec.name, r.state, r.tenant_id, r.team_id, writeJson(recordJson(r)), r.seq,
                      r.version});
    };
    for (const auto& name : dirty_) {
      auto it = records_.find(name);
      if (it != records_.end()) row(it->second);
    }
    for (auto& r : finished_) row(r);
    dirty_.clear();
    finished_.clear();
    return [rows = std::move(rows), events = std::move(new_events_),
            metering = std::move(metering_), at](store::Tx& tx) -> Result<void> {
      for (const auto& m : metering) PURSER_TRY(m(tx));
      for (const auto& r : rows) {
        // A write retried after a failure must not undo a newer one that landed since.
        PURSER_TRY(tx.exec(
            "INSERT INTO fleet_workloads (name, seq, version, state, tenant_id, team_id, record, "
            "updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO UPDATE "
            "SET seq = excluded.seq, version = excluded.version, state = excluded.state, "
            "tenant_id = excluded.tenant_id, team_id = excluded.team_id, record = "
            "excluded.record, updated_at = excluded.updated_at WHERE excluded.seq > "
            "fleet_workloads.seq OR (excluded.seq = fleet_workloads.seq AND excluded.version > "
            "fleet_workloads.version)",
            {r.name, r.seq, r.version, r.state, r.tenant_id, r.team_id, r.record, at}));
      }
      for (const auto& e : events) {
        PURSER_TRY(tx.exec(
            "INSERT INTO fleet_events (at, kind, workload, cluster_queue, reason, message, "
            "by_workload, tenant_id, team_id, by_tenant_id) VALUES ($1, $2, $3, $4, $5, $6, $7, "
            "$8, $9, $10)",
            {e.at, e.kind, e.workload, e.cluster_queue, e.reason, e.message, e.by, e.tenant_id,
             e.team_id, e.by_tenant_id}));
      }
      return {};
    };
  }

  // Enqueues `fn` now (so writes land in the order they were made); `waiter`, when given, learns
  // when it is durable.
  void enqueue(store::TxFn fn, std::shared_ptr<WriteWaiter> waiter) {
    auto retry = std::make_shared<store::TxFn>(fn);
    s_.store.writeAsync(std::move(fn), [this, waiter, retry](Result<void> r) {
      if (!r) {
        // Kept to be written again at the next tick; a newer write of the same workload wins
        // over it (versions), and its usage events and charges go with it.
        spdlog::error("fleet: a state change was not recorded (retrying): {}", r.error().message);
        std::lock_guard lock(retry_mu_);
        retries_.push_back(std::move(*retry));
      }
      if (!waiter) return;
      asio::post(waiter->timer.get_executor(), [waiter, r = std::move(r)]() mutable {
        waiter->done = true;
        waiter->result = std::move(r);
        waiter->timer.cancel();
      });
    });
  }

  void tick(const asio::any_io_executor& executor) {
    std::vector<store::TxFn> retries;
    {
      std::lock_guard lock(retry_mu_);
      retries.swap(retries_);
    }
    std::lock_guard lock(mu_);
    for (auto& fn : retries) enqueue(std::move(fn), nullptr);
    for (const auto& [tenant, alerts] : alerts_) postAlerts(s_, executor, alerts, tenant);
    alerts_.clear();
    if (!engine_) return;
    const int64_t now = nowMs();
    const int64_t interval =
        std::chrono::duration_cast<std::chrono::milliseconds>(options_.metering_interval).count();
    std::vector<std::string> stops;
    for (auto& [name, r] : records_) {
      if (r.state != "admitted" || now - r.metered_until_ms < interval) continue;
      if (auto tx = meterLocked(r, now)) metering_.push_back(std::move(*tx));
      if (!holdGpu(r)) stops.push_back(name);
      dirty_.insert(name);
    }
    for (const auto& name : stops) stopForBudget(name);
    if (auto write = scheduleLocked()) enqueue(std::move(*write), nullptr);
  }

  // --- Views -----------------------------------------------------------------------------------

  // The priority a workload is ordered by: its WorkloadPriorityClass's value when it names one.
  int32_t priorityOf(const Workload& w) const {
    for (const auto& pc : base_.priority_classes) {
      if (pc.name == w.priority_class) return pc.value;
    }
    return w.priority;
  }

  json viewLocked(const Record& r) const {
    json sets = json::array();
    for (const auto& ps : r.spec.pod_sets) {
      // What it runs, and the names (not the values, which may be secrets) of its environment.
      json env_names = json::array();
      for (const auto& [name, value] : ps.env) env_names.push_back(name);
      sets.push_back(
          {{"name", ps.name},
           {"count", ps.count},
           {"min_count", ps.min_count ? json(*ps.min_count) : json(nullptr)},
           {"requests", resourcesJson(ps.requests)},
           {"command", ps.command},
           {"working_dir", ps.working_dir.empty() ? json(nullptr) : json(ps.working_dir)},
           {"env", env_names}});
    }
    json out = {
        {"name", shown(r.spec.name)},
        {"namespace", shown(r.spec.namespace_)},
        {"workload", bareName(r.spec.name)},
        {"queue", r.spec.local_queue},
        {"priority", priorityOf(r.spec)},
        {"priority_class",
         r.spec.priority_class.empty() ? json(nullptr) : json(r.spec.priority_class)},
        {"state", r.state},
        {"pod_sets", sets},
        {"owner",
         {{"tenant", r.tenant_id},
          {"team", r.team_id},
          {"kind", r.owner_kind},
          {"id", r.owner_id}}},
        {"submitted_at", rfc3339(r.submitted_ms)},
        {"admitted_at", r.state == "admitted" ? json(rfc3339(r.admitted_ms)) : json(nullptr)},
        {"finished_at", r.finished_ms ? json(rfc3339(r.finished_ms)) : json(nullptr)},
        {"gpu_charged", r.charged.toString()},
        {"preemptions", r.preemptions}};
    if (r.admission) {
      json a = json::array();
      for (const auto& ps : r.admission->pod_sets) {
        json placements = placementsJson(ps.placements);
        // What an executor sets for each pod (HAMi-core's limits for shares).
        const fleet::PodSet* spec = nullptr;
        for (const auto& s : r.spec.pod_sets) {
          if (s.name == ps.name) spec = &s;
        }
        for (size_t i = 0; placer_ && spec != nullptr && i < ps.placements.size(); ++i) {
          if (ps.placements[i].gpus.empty()) continue;
          if (auto env = placer_->environment(ps.placements[i], spec->requests)) {
            json e = json::object();
            for (const auto& [k, v] : *env) e[k] = v;
            placements[i]["env"] = std::move(e);
          }
        }
        a.push_back({{"name", ps.name},
                     {"count", ps.count},
                     {"flavors", ps.flavors},
                     {"usage", resourcesJson(ps.usage)},
                     {"placements", placements}});
      }
      out["admission"] = {{"cluster_queue", r.admission->cluster_queue}, {"pod_sets", a}};
    } else {
      out["admission"] = nullptr;
    }
    if (r.state == "pending" && engine_) {
      auto st = engine_->status(r.spec.name);
      out["cluster_queue"] = st ? json(st->cluster_queue) : json(nullptr);
      out["reason"] = st && !st->reason.empty() ? json(st->reason) : json("NotYetAttempted");
      out["message"] = st ? json(st->message) : json("");
    } else {
      out["cluster_queue"] = r.admission ? json(r.admission->cluster_queue) : json(nullptr);
    }
    return out;
  }

  // May `who` see (and delete) workloads owned by this tenant and team?
  static bool visible(const Principal& who, const std::string& tenant_id,
                      const std::string& team_id) {
    switch (who.role) {
      case Role::kPlatformAdmin:
        return true;
      case Role::kTenantAdmin:
        return who.tenant_id == tenant_id;
      default:
        return who.tenant_id == tenant_id && !who.team_id.empty() && who.team_id == team_id;
    }
  }

  // --- Handlers --------------------------------------------------------------------------------

  Result<Principal> authenticate(const Request& req) const { return api::authenticate(s_, req); }

  asio::awaitable<Response> submit(Request& req) {
    auto who = authenticate(req);
    if (!who) co_return problem(who.error());
    if (req.body.empty()) {
      co_return problem(400, "send a workload: Kueue's Workload object or the short form");
    }
    auto parsed = fleet::parseWorkload(req.body, "request", req.max_nesting);
    if (!parsed) co_return problem(400, parsed.error().toString());
    Workload w = std::move(parsed->workload);
    // The namespace: the caller's team unless the caller may name another.
    std::optional<identity::Team> team;
    if (!who->team_id.empty()) team = s_.directory.team(who->team_id);
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
        auto t = s_.directory.teamByName(who->tenant_id, ns);
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
    const int64_t now = nowMs();
    w.created_ms = now;
    w.queued_ms.reset();
    auto executor = co_await asio::this_coro::executor;
    auto waiter = std::make_shared<WriteWaiter>(executor);
    json view;
    {
      std::lock_guard lock(mu_);
      if (who->role == Role::kPlatformAdmin && (!team || ns != team->name)) {
        // The namespace's tenant, and its team of that name, own the workload and pay for it.
        tenant_id = owningTenant(ns);
        auto t = tenant_id.empty() ? std::nullopt : s_.directory.teamByName(tenant_id, ns);
        team_id = t ? t->id : "";
      }
      const std::string internal = namespaceOf(tenant_id, ns);
      w.namespace_ = internal;
      w.name = internal + "/" + bareName(w.name);
      Record r;
      r.tenant_id = tenant_id;
      r.team_id = team_id;
      r.owner_kind = who->kind == identity::OwnerKind::kServiceAccount ? "service_account" : "user";
      r.owner_id = who->role == Role::kPlatformAdmin && tenant_id.empty() ? "" : who->id;
      r.key_id = r.owner_id.empty() ? "" : who->key_id;
      r.submitted_ms = now;
      if (records_.count(w.name) != 0) {
        co_return problem(409, fmt::format("a workload named \"{}\" already exists", shown(w.name)),
                          "name");
      }
      // A namespace the engine has not seen yet (a team created since) joins it.
      if (!engine_->hasNamespace(internal)) {
        engine_->setNamespace(internal, labelsOf(internal, tenant_id));
      }
      // The engine checks the queue and the priority class; refused, nothing has changed.
      auto submitted = engine_->submit(w);
      if (!submitted) {
        // Said in the tenant's own names.
        std::string message = submitted.error().message;
        for (size_t at = message.find(internal); internal != ns && at != std::string::npos;
             at = message.find(internal, at + ns.size())) {
          message.replace(at, internal.size(), ns);
        }
        co_return problem(400, message, "queue");
      }
      r.spec = w;
      r.seq = next_seq_++;
      records_[w.name] = r;
      dirty_.insert(w.name);
      noteEvent("Submitted", w.name, "", "", "", "");
      auto write = scheduleLocked();
      if (write) enqueue(std::move(*write), waiter);
      view = viewLocked(records_.at(w.name));
    }
    auto durable = co_await awaitWrite(waiter);
    if (!durable) co_return problem(503, "the workload could not be recorded; submit it again");
    if (!parsed->warnings.empty()) view["warnings"] = parsed->warnings;
    co_return jsonResponse(201, view);
  }

  asio::awaitable<Response> list(Request& req) {
    auto who = authenticate(req);
    if (!who) co_return problem(who.error());
    const auto ns = req.queryParam("namespace");
    const auto state = req.queryParam("state");
    if (state && *state != "pending" && *state != "admitted" && *state != "finished") {
      co_return problem(400, "\"state\" must be pending, admitted or finished", "state");
    }
    json items = json::array();
    if (state && *state == "finished") {
      store::Rows rows;
      const auto [scope_sql, scope_value] = visibilityFilter(*who);
      auto read = s_.store.read([&](store::Tx& tx) -> Result<void> {
        const std::string sql = "SELECT record FROM fleet_workloads WHERE state = 'finished'" +
                                scope_sql + " ORDER BY seq DESC LIMIT 1000";
        rows = PURSER_TRY_VALUE(scope_value.empty() ? tx.query(sql) : tx.query(sql, {scope_value}));
        return {};
      });
      if (!read) co_return problem(read.error());
      for (const auto& row : rows) {
        auto r = recordFrom(row.getText(0));
        if (!r || !visible(*who, r->tenant_id, r->team_id)) continue;
        if (ns && shown(r->spec.namespace_) != *ns) continue;
        items.push_back(viewLocked(*r));
      }
      co_return jsonResponse(200, {{"data", items}});
    }
    std::lock_guard lock(mu_);
    std::vector<const Record*> order;
    for (const auto& [name, r] : records_) order.push_back(&r);
    std::sort(order.begin(), order.end(),
              [](const Record* a, const Record* b) { return a->seq < b->seq; });
    for (const Record* r : order) {
      if (!visible(*who, r->tenant_id, r->team_id)) continue;
      if (ns && shown(r->spec.namespace_) != *ns) continue;
      if (state && r->state != *state) continue;
      items.push_back(viewLocked(*r));
    }
    co_return jsonResponse(200, {{"data", items}});
  }

  // The SQL condition (with $1) restricting rows to what `who` may see, and its value.
  static std::pair<std::string, std::string> visibilityFilter(const Principal& who) {
    switch (who.role) {
      case Role::kPlatformAdmin:
        return {"", ""};
      case Role::kTenantAdmin:
        return {" AND tenant_id = $1", who.tenant_id};
      default:
        // No team: nothing (an id no row has).
        return {" AND team_id = $1", who.team_id.empty() ? std::string("-") : who.team_id};
    }
  }

  // "namespace/name" as the caller wrote it in the path.
  static std::string askedName(const Request& req) {
    return std::string(req.param("namespace").value_or("")) + "/" +
           std::string(req.param("name").value_or(""));
  }

  // The workload the caller means, inside Purser (mu_ held): namespaces are per tenant.
  std::string nameOf(const Principal& who, const Request& req) const {
    return namespaceOf(who.tenant_id, std::string(req.param("namespace").value_or(""))) + "/" +
           std::string(req.param("name").value_or(""));
  }

  asio::awaitable<Response> get(Request& req) {
    auto who = authenticate(req);
    if (!who) co_return problem(who.error());
    const std::string asked = askedName(req);
    std::string name;
    {
      std::lock_guard lock(mu_);
      name = nameOf(*who, req);
      auto it = records_.find(name);
      if (it != records_.end()) {
        if (!visible(*who, it->second.tenant_id, it->second.team_id)) {
          co_return problem(404, fmt::format("no workload named \"{}\"", asked));
        }
        co_return jsonResponse(200, viewLocked(it->second));
      }
    }
    store::Rows rows;
    auto read = s_.store.read([&](store::Tx& tx) -> Result<void> {
      rows =
          PURSER_TRY_VALUE(tx.query("SELECT record FROM fleet_workloads WHERE name = $1", {name}));
      return {};
    });
    if (!read) co_return problem(read.error());
    if (!rows.empty()) {
      // Only finished workloads are served from the record; live ones are in memory.
      auto r = recordFrom(rows[0].getText(0));
      if (r && r->state == "finished" && visible(*who, r->tenant_id, r->team_id)) {
        co_return jsonResponse(200, viewLocked(*r));
      }
    }
    co_return problem(404, fmt::format("no workload named \"{}\"", asked));
  }

  asio::awaitable<Response> remove(Request& req) {
    auto who = authenticate(req);
    if (!who) co_return problem(who.error());
    const std::string asked = askedName(req);
    auto executor = co_await asio::this_coro::executor;
    auto waiter = std::make_shared<WriteWaiter>(executor);
    json view;
    {
      std::lock_guard lock(mu_);
      const std::string name = nameOf(*who, req);
      auto it = records_.find(name);
      if (it == records_.end() || !visible(*who, it->second.tenant_id, it->second.team_id)) {
        co_return problem(404, fmt::format("no workload named \"{}\"", asked));
      }
      Record r = it->second;
      const int64_t now = nowMs();
      if (auto tx = meterLocked(r, now)) metering_.push_back(std::move(*tx));
      const std::string queue = r.admission ? r.admission->cluster_queue : "";
      (void)engine_->finish(name);
      r.state = "finished";
      r.finished_ms = now;
      noteEvent("Finished", name, queue, "Deleted", fmt::format("deleted by {}", who->name), "");
      records_.erase(it);
      view = viewLocked(r);
      finished_.push_back(std::move(r));
      auto write = scheduleLocked();
      if (write) enqueue(std::move(*write), waiter);
    }
    auto durable = co_await awaitWrite(waiter);
    if (!durable) co_return problem(503, "the deletion could not be recorded; try again");
    co_return jsonResponse(200, view);
  }

  asio::awaitable<Response> why(Request& req) {
    auto who = authenticate(req);
    if (!who) co_return problem(who.error());
    const std::string asked = askedName(req);
    std::lock_guard lock(mu_);
    const std::string name = nameOf(*who, req);
    auto it = records_.find(name);
    if (it == records_.end() || !visible(*who, it->second.tenant_id, it->second.team_id)) {
      co_return problem(404, fmt::format("no workload named \"{}\" (finished ones have no "
                                         "reasons)",
                                         asked));
    }
    auto explained = engine_->explain(name);
    if (!explained) co_return problem(explained.error());
    json out = std::move(*explained);
    // Would-be victims the caller may not see are not named.
    if (out.contains("preemption") && out["preemption"].contains("would_preempt")) {
      for (auto& v : out["preemption"]["would_preempt"]) {
        auto victim = records_.find(v.value("workload", ""));
        if (victim == records_.end() ||
            !visible(*who, victim->second.tenant_id, victim->second.team_id)) {
          v["workload"] = "a workload of another team";
        } else {
          v["workload"] = shown(victim->first);
        }
      }
    }
    if (out.contains("workload") && out["workload"].is_string()) {
      out["workload"] = shown(out["workload"].get<std::string>());
    }
    if (!it->second.hold.empty()) out["budget"] = it->second.hold;
    out["explanation"] = sentences(out);
    for (auto& line : out["explanation"]) line = shown(line.get<std::string>());
    co_return jsonResponse(200, out);
  }

  // The structured reasons in words.
  static json sentences(const json& why) {
    json out = json::array();
    const std::string cq = why.value("cluster_queue", "");
    const std::string state = why.value("state", "");
    if (state == "admitted") {
      out.push_back(fmt::format("admitted in ClusterQueue {}", cq));
      return out;
    }
    if (why.contains("budget")) out.push_back(why["budget"].get<std::string>());
    if (why.contains("stopped")) out.push_back(why["stopped"].get<std::string>());
    if (why.contains("namespace_mismatch")) {
      out.push_back(why["namespace_mismatch"].get<std::string>());
    }
    const std::string reason = why.value("reason", "");
    const std::string message = why.value("message", "");
    if (!message.empty()) out.push_back(fmt::format("last attempt: {} — {}", reason, message));
    if (why.value("ahead_in_queue", 0) > 0) {
      out.push_back(fmt::format("{} workload(s) are ahead of it in ClusterQueue {}",
                                why["ahead_in_queue"].get<int64_t>(), cq));
    }
    for (const auto& ps : why.value("pod_sets", json::array())) {
      for (const auto& f : ps.value("flavors", json::array())) {
        const std::string verdict = f.value("verdict", "");
        const std::string resource = f.value("resource", "");
        if (!f.contains("requested")) {
          out.push_back(fmt::format(
              "pod set {}: {}{}: {}", ps.value("name", ""),
              f.contains("flavor") ? "flavor " + f.value("flavor", "") + ", " : std::string(),
              resource, f.value("detail", verdict)));
          continue;
        }
        out.push_back(fmt::format(
            "pod set {} in flavor {}: asks for {} {}; ClusterQueue {} has {} in use of its nominal "
            "{}, can use {} now ({} of it borrowed from its cohort) and at most {} ever — {}",
            ps.value("name", ""), f.value("flavor", ""), quantity(f["requested"].get<Amount>()),
            resource, cq, quantity(f["in_use"].get<Amount>()), quantity(f["nominal"].get<Amount>()),
            quantity(f["available"].get<Amount>()), quantity(f["borrowable"].get<Amount>()),
            quantity(f["at_most"].get<Amount>()), verdict));
      }
    }
    const json& p = why.value("preemption", json::object());
    if (p.contains("would_preempt") && !p["would_preempt"].empty()) {
      std::string victims;
      for (const auto& v : p["would_preempt"]) {
        victims += fmt::format("{}{} ({}, priority {}, {})", victims.empty() ? "" : ", ",
                               v.value("workload", ""), v.value("cluster_queue", ""),
                               v.value("priority", 0), v.value("reason", ""));
      }
      out.push_back("to make room it would preempt: " + victims);
    }
    if (p.contains("why_not")) out.push_back("preemption cannot help: " + p.value("why_not", ""));
    if (why.value("ahead_in_queue", 0) == 0 && p.value("mode", "") == "fit" &&
        !why.contains("budget")) {
      out.push_back("it fits now and will be admitted at the next scheduling pass");
    }
    return out;
  }

  // The ClusterQueues `who` may see: platform admins all; others those with a LocalQueue in a
  // namespace of theirs (their tenant's teams for a tenant admin, their own team otherwise).
  std::set<std::string> visibleQueues(const Principal& who) const {
    std::set<std::string> namespaces;
    for (const auto& team : s_.directory.teams()) {
      if (team.tenant_id != who.tenant_id) continue;
      if (who.role == Role::kTenantAdmin || team.id == who.team_id) {
        namespaces.insert(namespaceOf(team.tenant_id, team.name));
      }
    }
    std::set<std::string> out;
    for (const auto& lq : base_.local_queues) {
      if (namespaces.count(lq.namespace_) != 0) out.insert(lq.cluster_queue);
    }
    return out;
  }

  asio::awaitable<Response> queues(Request& req) {
    auto who = authenticate(req);
    if (!who) co_return problem(who.error());
    std::lock_guard lock(mu_);
    json items = json::array();
    const bool all = who->role == Role::kPlatformAdmin;
    const std::set<std::string> mine = all ? std::set<std::string>{} : visibleQueues(*who);
    for (const auto& q : engine_->queues()) {
      if (!all && mine.count(q.name) == 0) continue;
      json resources = json::array();
      for (const auto& u : q.usage) {
        resources.push_back(
            {{"flavor", u.flavor},
             {"resource", u.resource},
             {"nominal", quantity(u.nominal)},
             {"borrowing_limit",
              u.borrowing_limit ? json(quantity(*u.borrowing_limit)) : json(nullptr)},
             {"lending_limit", u.lending_limit ? json(quantity(*u.lending_limit)) : json(nullptr)},
             {"usage", quantity(u.usage)},
             {"borrowed", quantity(u.borrowed)},
             {"lent", quantity(u.lent)},
             {"available", quantity(u.available)}});
      }
      items.push_back({{"name", q.name},
                       {"cohort", q.cohort.empty() ? json(nullptr) : json(q.cohort)},
                       {"pending", q.pending},
                       {"admitted", q.admitted},
                       {"resources", resources}});
    }
    co_return jsonResponse(200, {{"data", items}});
  }

  // The inventory and what is placed on it: each GPU's shares as "team/workload" with its
  // tenant's name; another team's workloads show as shares without either.
  asio::awaitable<Response> nodes(Request& req) {
    auto who = authenticate(req);
    if (!who) co_return problem(who.error());
    std::lock_guard lock(mu_);
    json items = json::array();
    if (placer_) {
      for (const auto& v : placer_->view()) {
        json gpus = json::array();
        for (const auto& g : v.gpus) {
          json shares = json::array();
          for (const auto& sh : g.shares) {
            auto it = records_.find(sh.owner);
            const bool named =
                it != records_.end() && visible(*who, it->second.tenant_id, it->second.team_id);
            json share = {{"workload", named ? json(shown(sh.owner)) : json(nullptr)},
                          {"tenant", nullptr},
                          {"gpu_milli", sh.milli}};
            if (named) {
              if (auto t = s_.directory.tenant(it->second.tenant_id)) share["tenant"] = t->name;
            }
            shares.push_back(std::move(share));
          }
          gpus.push_back({{"index", g.gpu->index},
                          {"uuid", g.gpu->uuid.empty() ? json(nullptr) : json(g.gpu->uuid)},
                          {"model", g.gpu->model},
                          {"memory_mib", g.gpu->memory_mib},
                          {"numa", g.gpu->numa},
                          {"nvlink_domain",
                           g.gpu->nvlink_domain >= 0 ? json(g.gpu->nvlink_domain) : json(nullptr)},
                          {"used_milli", g.used_milli},
                          {"cores_used", g.cores_used},
                          {"shares", shares}});
        }
        const fleet::InventoryNode& n = *v.node;
        // The flavors whose node labels the node carries.
        json flavors = json::array();
        for (const auto& f : base_.flavors) {
          if (fleet::carriesLabels(n, f.node_labels)) flavors.push_back(f.name);
        }
        int64_t allocated = 0;
        for (const auto& g : v.gpus) allocated += g.used_milli;
        items.push_back({{"name", n.name},
                         {"flavors", flavors},
                         {"gpu_model", n.gpus.empty() ? json(nullptr) : json(n.gpus[0].model)},
                         {"gpu_count", n.gpus.size()},
                         {"gpu_allocated", quantity(allocated)},
                         {"labels", n.labels},
                         {"rack", n.rack.empty() ? json(nullptr) : json(n.rack)},
                         {"block", n.block.empty() ? json(nullptr) : json(n.block)},
                         {"cpu", quantity(n.cpu_milli)},
                         {"cpu_used", quantity(v.cpu_used_milli)},
                         {"memory_mib", n.memory_mib},
                         {"memory_used_mib", v.memory_used_mib},
                         {"pods", v.pods},
                         {"gpus", gpus}});
      }
    }
    co_return jsonResponse(200, {{"data", items},
                                 {"placement", placer_ != nullptr},
                                 {"policy", fleet::placement::policyName(options_.policy)}});
  }

  asio::awaitable<Response> events(Request& req) {
    auto who = authenticate(req);
    if (!who) co_return problem(who.error());
    std::optional<std::string> workload = req.queryParam("workload");
    if (workload) {
      // Named as the caller sees it: "namespace/name" of the caller's tenant.
      const size_t slash = workload->find('/');
      std::lock_guard lock(mu_);
      workload = namespaceOf(who->tenant_id, workload->substr(0, slash)) +
                 (slash == std::string::npos ? "" : workload->substr(slash));
    }
    store::Rows rows;
    const auto [scope_sql, scope_value] = visibilityFilter(*who);
    auto read = s_.store.read([&](store::Tx& tx) -> Result<void> {
      std::string sql =
          "SELECT at, kind, workload, cluster_queue, reason, message, by_workload, tenant_id, "
          "team_id, by_tenant_id FROM fleet_events WHERE 1 = 1" +
          scope_sql;
      std::vector<store::Value> params;
      if (!scope_value.empty()) params.emplace_back(scope_value);
      if (workload) {
        sql += fmt::format(" AND workload = ${}", params.size() + 1);
        params.emplace_back(*workload);
      }
      rows = PURSER_TRY_VALUE(tx.query(sql + " ORDER BY id DESC LIMIT 1000", params));
      return {};
    });
    if (!read) co_return problem(read.error());
    json items = json::array();
    for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
      const auto& row = *it;
      if (!visible(*who, row.getText(7), row.getText(8))) continue;
      // A preemptor of another tenant is not named to this one.
      const bool foreign = who->role != Role::kPlatformAdmin && !row.getText(9).empty() &&
                           row.getText(9) != who->tenant_id;
      items.push_back({{"at", row.getText(0)},
                       {"kind", row.getText(1)},
                       {"workload", shown(row.getText(2))},
                       {"cluster_queue", row.getText(3)},
                       {"reason", row.getText(4)},
                       {"message", foreign ? "preempted to admit a workload of another tenant"
                                           : shown(row.getText(5))},
                       {"by", foreign ? json(nullptr) : json(shown(row.getText(6)))}});
    }
    co_return jsonResponse(200, {{"data", items}});
  }

  asio::awaitable<Response> apply(Request& req) {
    auto who = authenticate(req);
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
    auto executor = co_await asio::this_coro::executor;
    auto waiter = std::make_shared<WriteWaiter>(executor);
    {
      std::lock_guard lock(mu_);
      fleet::ManifestSet merged = base_;
      merge(merged, *set);
      // Nothing changes unless the new objects hold every live workload where it is.
      auto fresh = rebuild(worldOf(merged));
      if (!fresh) {
        co_return problem(fresh.error().code == ErrorCode::kFailedPrecondition ? 409 : 400,
                          fresh.error().message);
      }
      base_ = std::move(merged);
      engine_ = std::move(fresh->engine);
      placer_ = std::move(fresh->placer);
      for (const auto& [name, r] : records_) dirty_.insert(name);
      ledger::AuditEntry audit;
      audit.actor = who->id;
      audit.actor_role = std::string(identity::roleName(who->role));
      audit.action = "fleet.apply";
      audit.target = "fleet:manifests";
      audit.after = writeJson(counts);
      auto changes = scheduleLocked();
      const std::string text = req.body;
      const std::string at = formatRfc3339(s_.clock.now());
      const std::string actor = who->id;
      const ledger::AuditLog& log = s_.audit;
      enqueue(
          [changes = std::move(changes), text, at, actor, audit,
           &log](store::Tx& tx) -> Result<void> {
            PURSER_TRY(tx.exec(
                "INSERT INTO fleet_manifests (applied_at, actor, file, text) VALUES ($1, $2, $3, "
                "$4)",
                {at, actor, std::string("fleet apply"), text}));
            PURSER_TRY(log.append(tx, audit));
            if (changes) PURSER_TRY((*changes)(tx));
            return {};
          },
          waiter);
    }
    auto durable = co_await awaitWrite(waiter);
    if (!durable) co_return problem(503, "the manifests could not be recorded; apply them again");
    co_return jsonResponse(200, {{"applied", counts}, {"warnings", warnings}});
  }

  const Services s_;
  FleetOptions options_;
  std::vector<std::string> warnings_;
  std::mutex mu_;
  fleet::ManifestSet base_;                // configured, then applied objects; mu_
  std::unique_ptr<fleet::Engine> engine_;  // mu_
  std::shared_ptr<fleet::Placer> placer_;  // engine_'s inventory; none without one; mu_
  std::map<std::string, Record> records_;  // live workloads by name; mu_
  int64_t next_seq_ = 1;                   // mu_
  int64_t hold_seq_ = 0;                   // GPU holds taken; mu_
  std::vector<std::pair<std::string, std::vector<ledger::Alert>>> alerts_;  // to post; mu_
  std::mutex retry_mu_;
  std::vector<store::TxFn> retries_;   // writes that failed, to try again; retry_mu_
  std::set<std::string> dirty_;        // records to write; mu_
  std::vector<Record> finished_;       // finished records to write; mu_
  std::vector<EventRow> new_events_;   // events to write; mu_
  std::vector<store::TxFn> metering_;  // usage events to write; mu_
};

Fleet::Fleet(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Fleet::~Fleet() = default;

Result<std::unique_ptr<Fleet>> Fleet::open(const Services& services, FleetOptions options) {
  auto impl = std::make_unique<Impl>(services, std::move(options));
  PURSER_TRY(impl->open());
  return std::unique_ptr<Fleet>(new Fleet(std::move(impl)));
}

void Fleet::tick(const boost::asio::any_io_executor& executor) { impl_->tick(executor); }

void Fleet::addMetrics(http::MetricsRegistry& metrics) {
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
  Impl* f = impl_.get();
  metrics.addCollector([f, &pending, &admitted, &used, &nominal] {
    std::lock_guard lock(f->mu_);
    if (!f->engine_) return;
    for (const auto& q : f->engine_->queues()) {
      pending.labels({q.name}).set(static_cast<double>(q.pending));
      admitted.labels({q.name}).set(static_cast<double>(q.admitted));
      for (const auto& u : q.usage) {
        used.labels({q.name, u.flavor, u.resource}).set(static_cast<double>(u.usage) / 1000.0);
        nominal.labels({q.name, u.flavor, u.resource}).set(static_cast<double>(u.nominal) / 1000.0);
      }
    }
  });
}

const std::vector<std::string>& Fleet::warnings() const { return impl_->warnings_; }

Result<void> Fleet::addRoutes(http::Router& router) {
  Impl* f = impl_.get();
  const auto route = [&](Method m, const char* path,
                         asio::awaitable<Response> (Impl::*handler)(Request&)) {
    return router.addAsync(m, path, [f, handler](Request& req) { return (f->*handler)(req); });
  };
  PURSER_TRY(route(Method::kPost, "/api/v1/workloads", &Impl::submit));
  PURSER_TRY(route(Method::kGet, "/api/v1/workloads", &Impl::list));
  PURSER_TRY(route(Method::kGet, "/api/v1/workloads/{namespace}/{name}", &Impl::get));
  PURSER_TRY(route(Method::kDelete, "/api/v1/workloads/{namespace}/{name}", &Impl::remove));
  PURSER_TRY(route(Method::kGet, "/api/v1/workloads/{namespace}/{name}/why", &Impl::why));
  PURSER_TRY(route(Method::kGet, "/api/v1/queues", &Impl::queues));
  PURSER_TRY(route(Method::kGet, "/api/v1/fleet/events", &Impl::events));
  PURSER_TRY(route(Method::kGet, "/api/v1/fleet/nodes", &Impl::nodes));
  PURSER_TRY(route(Method::kPost, "/api/v1/fleet/manifests", &Impl::apply));
  return {};
}

}  // namespace purser::api
