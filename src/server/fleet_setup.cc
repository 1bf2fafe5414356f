#include "server/fleet_setup.h"

#include <utility>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <pwd.h>
#include <sys/stat.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/kubeconfig.h"
#include "exec/cgroups.h"
#include "exec/gpu_share_env.h"
#include "exec/kubernetes_executor.h"
#include "exec/local_executor.h"
#include "exec/sandbox.h"
#include "exec/slurm_executor.h"
#include "fleet/inventory.h"
#include "fleet/placement.h"
#include "ledger/records.h"

namespace purser::server {
namespace {

// What the executors are built from (copied into the fleet's options: a replica that takes the
// lead later builds its own from the same).
struct ExecutorOptions {
  exec::LocalExecutorOptions local;
  std::optional<exec::SlurmExecutorOptions> slurm;
  std::optional<exec::KubernetesExecutorOptions> kubernetes;
};

std::string absolute(const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  return ec ? path : p.string();
}

// The wall around local pods (exec/sandbox.h), as fleet.local asks and this machine allows:
// what the executor is given, and what to warn of (the log, /readyz, the console).
Result<void> setUpLocalPods(const config::Config& config, const DataDir& data_dir,
                            const std::string& pod_logs, exec::LocalExecutorOptions& local,
                            std::vector<std::string>& warnings) {
  const std::string data = absolute(data_dir.path());
  local.workspace_root =
      absolute(config.fleet.local_working_dir.empty() ? data_dir.file("workspaces")
                                                      : config.fleet.local_working_dir);
  if (local.workspace_root == data || (data.starts_with(local.workspace_root + "/"))) {
    return fail(invalidArgument(fmt::format(
        "fleet.local.working_dir {} holds Purser's data directory; give the teams' workspaces a "
        "directory of their own",
        local.workspace_root)));
  }
  if (std::error_code ec; !std::filesystem::create_directories(local.workspace_root, ec) && ec) {
    return fail(
        unavailable(fmt::format("cannot create {}: {}", local.workspace_root, ec.message())));
  }
  ::chmod(local.workspace_root.c_str(), 0700);
  ::chmod(pod_logs.c_str(), 0700);
  local.pids_limit = config.fleet.local_pids_limit;
  local.tmp_bytes = config.fleet.local_tmp_bytes;
  local.cgroups = exec::PodCgroups::detect();
  spdlog::info("fleet: local pods' limits: {}", local.cgroups.describe());
  if (config.fleet.local_isolation == "none") {
    local.isolation = exec::Isolation::kNone;
    warnings.push_back(
        "fleet.local.isolation is none: local pods run as Purser's own user and can read its "
        "keys, its data directory and other teams' files");
    spdlog::warn("fleet: {}", warnings.back());
    return {};
  }
  local.isolation = ::geteuid() == 0 ? exec::Isolation::kAccounts : exec::Isolation::kUserNamespace;
  exec::SandboxOptions& box = local.sandbox;
  for (const auto& p : config.fleet.local_read_only_paths)
    box.read_only_paths.push_back(absolute(p));
  box.hidden_paths = {data, absolute(pod_logs), local.workspace_root};
  if (const auto& slurm = config.fleet.slurm) {
    box.hidden_paths.push_back(
        absolute(slurm->log_dir.empty() ? data_dir.file("slurm") : slurm->log_dir));
  }
  if (!config.file.empty()) {
    // The configuration may hold provider keys, and what lies beside it often holds more
    // (certificates, token files): its directory is hidden, unless that is a system directory.
    const std::string file = absolute(config.file);
    const std::string dir = std::filesystem::path(file).parent_path().string();
    box.hidden_paths.push_back(file);
    const bool system = std::find(box.system_paths.begin(), box.system_paths.end(), dir) !=
                            box.system_paths.end() ||
                        dir == "/";
    if (!system) box.masked_paths.push_back(dir);
  }
  if (const auto& k = config.fleet.kubernetes) {
    for (const auto& f : {k->kubeconfig, k->token_file, k->ca_file}) {
      if (!f.empty()) box.hidden_paths.push_back(absolute(f));
    }
  }
  if (config.tls) box.hidden_paths.push_back(absolute(config.tls->key_file));
  for (const auto& p : config.providers) {
    if (!p.client_key_file.empty()) box.hidden_paths.push_back(absolute(p.client_key_file));
  }
  for (const auto& p : box.read_only_paths) {
    for (const auto& h : box.hidden_paths) {
      if (p == h || h.starts_with(p + "/") || p.starts_with(h + "/")) {
        spdlog::warn(
            "fleet: fleet.local.read_only_paths {} holds {}, which pods never see; "
            "they see the rest of it",
            p, h);
      }
    }
  }
  std::error_code ec;
  box.self_binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  const std::string base = pod_logs + "/.view";
  if (::mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) {
    return fail(unavailable(fmt::format("cannot create {}: {}", base, std::strerror(errno))));
  }
  if (auto probe = exec::probeSandbox(local.isolation, box, base); !probe) {
    local.refused = fmt::format(
        "{} isolation is not possible here ({}); fix that, or write fleet.local.isolation: none "
        "to run local pods as Purser itself",
        exec::isolationName(local.isolation), probe.error().message);
    warnings.push_back("local pods are refused: " + local.refused);
    spdlog::error("fleet: {}", warnings.back());
    return {};
  }
  spdlog::info("fleet: local pods run isolated ({}): {}", exec::isolationName(local.isolation),
               local.isolation == exec::Isolation::kAccounts
                   ? "an account per team, namespaces of their own"
                   : "user namespaces mapped to Purser's own user, namespaces of their own");
  return {};
}

}  // namespace

Result<FleetSetup> fleetSetup(const config::Config& config, const DataDir& data_dir,
                              const std::string& installation, std::vector<std::string>& warnings) {
  FleetSetup setup;
  ExecutorOptions executors;
  exec::LocalExecutorOptions& local = executors.local;
  setup.service.mode =
      config.fleet.cycle_mode == "kueue" ? fleet::CycleMode::kKueue : fleet::CycleMode::kDrain;
  setup.service.metering_interval = config.fleet.metering_interval;
  setup.service.policy =
      PURSER_TRY_VALUE(fleet::placement::parsePolicy(config.fleet.placement_policy));
  setup.service.seed = static_cast<uint64_t>(config.fleet.placement_seed);
  setup.service.termination_grace = config.fleet.termination_grace;
  setup.service.inventory_refresh = config.fleet.inventory_refresh;
  // The local executor's pods write their output under the data directory.
  const std::string pod_logs =
      config.fleet.local_log_dir.empty() ? data_dir.file("pods") : config.fleet.local_log_dir;
  if (std::error_code ec; !std::filesystem::create_directories(pod_logs, ec) && ec) {
    return fail(unavailable(fmt::format("cannot create {}: {}", pod_logs, ec.message())));
  }
  local.log_dir = pod_logs;
  local.max_log_bytes = static_cast<size_t>(config.fleet.local_max_log_bytes);
  local.file_retention = config.fleet.local_file_retention;
  local.max_memory_bytes = static_cast<uint64_t>(config.fleet.local_max_memory_bytes);
  local.max_cpu_seconds = static_cast<uint64_t>(config.fleet.local_max_cpu_seconds);
  local.max_pods = static_cast<size_t>(config.fleet.local_max_pods);
  // The GPU share shim beside the binary (or in ../lib/purser): pods holding a share of a GPU run
  // with it preloaded, and are refused without it.
  {
    std::error_code ec;
    local.gpu_share_library =
        exec::findGpuShareLibrary(std::filesystem::read_symlink("/proc/self/exe", ec).string());
    local.sandbox.gpu_share_library = local.gpu_share_library;
    if (local.gpu_share_library.empty()) {
      spdlog::warn(
          "fleet: {} is not installed beside purser; pods holding a share of a GPU are "
          "refused on the local and Slurm executors",
          exec::kGpuShareLibrary);
    }
  }
  PURSER_TRY(setUpLocalPods(config, data_dir, pod_logs, local, warnings));
  setup.service.account_uid_base = config.fleet.local_uid_base;
  setup.service.account_uid_count = config.fleet.local_uid_count;
  setup.service.installation = installation;
  setup.service.executor_slots["local"] = config.fleet.local_max_pods;
  setup.service.bounds.max_pods_per_set = config.fleet.max_pods_per_set;
  setup.service.bounds.min_pod_cpu_milli = config.fleet.min_pod_cpu_milli;
  if (const auto& slurm = config.fleet.slurm) {
    exec::SlurmExecutorOptions so;
    // The teams' accounts write their jobs' output there, so it is not in the data directory
    // (which is Purser's alone); each team has a directory of its own inside it.
    if (slurm->log_dir.empty()) {
      return fail(invalidArgument(
          "fleet.slurm.log_dir is required: a directory the Slurm nodes share, outside the data "
          "directory (the teams' jobs write their output there, as their own accounts)"));
    }
    so.log_dir = absolute(slurm->log_dir);
    const std::string data_path = absolute(data_dir.path());
    if (so.log_dir == data_path || so.log_dir.starts_with(data_path + "/")) {
      return fail(invalidArgument(fmt::format(
          "fleet.slurm.log_dir {} is inside the data directory, which is Purser's alone; give the "
          "jobs' output a directory of its own",
          so.log_dir)));
    }
    if (std::error_code ec; !std::filesystem::create_directories(so.log_dir, ec) && ec) {
      return fail(unavailable(fmt::format("cannot create {}: {}", so.log_dir, ec.message())));
    }
    ::chmod(so.log_dir.c_str(), 0711);  // each account reaches its own directory, lists none
    so.partition = slurm->partition;
    so.gres_type = slurm->gres_type;
    so.conf = slurm->conf;
    so.bin_dir = slurm->bin_dir;
    so.gpu_share_library = local.gpu_share_library;
    so.read_nodes = slurm->inventory;
    for (const auto& [team, name] : slurm->accounts) {
      const struct passwd* pw = ::getpwnam(name.c_str());
      if (pw == nullptr) {
        return fail(invalidArgument(
            fmt::format("fleet.slurm.accounts: {}: there is no Unix account \"{}\" on this machine",
                        team, name)));
      }
      if (pw->pw_uid == 0) {
        return fail(invalidArgument(fmt::format(
            "fleet.slurm.accounts: {}: \"{}\" is root; a team's jobs run as an account of its own",
            team, name)));
      }
      so.accounts[team] = {name, static_cast<int64_t>(pw->pw_uid),
                           static_cast<int64_t>(pw->pw_gid)};
    }
    so.gpu_memory_mib = slurm->gpu_memory_mib;
    so.node_refresh = Duration::zero();  // the service reads them every inventory_refresh
    if (slurm->inventory) setup.service.inventory_from.push_back("slurm");
    for (const auto& f : slurm->flavors) setup.service.flavor_executors[f] = "slurm";
    executors.slurm = std::move(so);
  }
  if (const auto& k = config.fleet.kubernetes) {
    exec::KubernetesExecutorOptions ko;
    if (!k->kubeconfig.empty()) {
      // The kubeconfig's context gives what the settings beside it do not.
      auto kc = config::readKubeconfig(k->kubeconfig, k->context);
      if (!kc) return fail(invalidArgument("fleet.kubernetes.kubeconfig: " + kc.error().message));
      ko.api.server = kc->server;
      ko.api.token = kc->token;
      ko.api.ca_pem = kc->ca_pem;
      ko.api.insecure = kc->insecure;
      ko.api.client_cert_pem = kc->client_cert_pem;
      ko.api.client_key_pem = kc->client_key_pem;
      spdlog::info("fleet: Kubernetes {} from kubeconfig {} (context {})", kc->server,
                   k->kubeconfig, kc->context);
    }
    if (!k->server.empty()) ko.api.server = k->server;
    if (!k->token.empty()) ko.api.token = k->token;
    if (!k->token_file.empty()) {
      std::ifstream in(k->token_file);
      if (!in) {
        return fail(invalidArgument(
            fmt::format("fleet.kubernetes.token_file: cannot read {}", k->token_file)));
      }
      std::getline(in, ko.api.token);
    }
    ko.api.ca_file = k->ca_file;
    ko.api.insecure = ko.api.insecure || k->insecure;
    if (ko.api.insecure) {
      spdlog::warn(
          "fleet: the Kubernetes API server {} is reached WITHOUT verifying its TLS certificate "
          "(insecure_skip_tls_verify): anyone on the path can act as the cluster",
          ko.api.server);
    }
    ko.default_image = k->default_image;
    ko.read_nodes = k->inventory;
    ko.adopt_jobs = k->adopt_jobs;
    ko.gpu_memory_mib = k->gpu_memory_mib;
    ko.restricted = k->pod_security == "restricted";
    ko.service_account_tokens = k->service_account_tokens;
    ko.node_refresh = config.fleet.inventory_refresh / 2;  // read by the service as often
    if (k->inventory) setup.service.inventory_from.push_back("kubernetes");
    for (const auto& f : k->flavors) setup.service.flavor_executors[f] = "kubernetes";
    executors.kubernetes = std::move(ko);
  }
  for (const auto& n : config.fleet.nodes) {
    fleet::InventoryNode node;
    node.name = n.name;
    node.labels = n.labels;
    for (const auto& t : n.taints) node.taints.push_back({t.key, t.value, t.effect});
    node.cpu_milli = n.cpu_milli;
    node.memory_mib = n.memory_mib;
    node.rack = n.rack;
    node.block = n.block;
    for (const auto& g : n.gpus) {
      node.gpus.push_back({static_cast<int>(node.gpus.size()), g.uuid, g.model, g.memory_mib,
                           g.numa, g.nvlink_domain, g.mig_capable});
    }
    setup.service.inventory.push_back(std::move(node));
  }
  if (auto valid = fleet::validateInventory(setup.service.inventory); !valid) {
    return fail(invalidArgument("fleet.nodes: " + valid.error().message));
  }
  for (const auto& file : config.fleet.manifests) {
    std::ifstream in(file);
    if (!in) return fail(invalidArgument(fmt::format("fleet.manifests: cannot read {}", file)));
    std::ostringstream text;
    text << in.rdbuf();
    setup.service.manifests.emplace_back(file, text.str());
  }
  setup.executors = [executors](
                        const Clock& clock,
                        const std::function<void()>& nudge) -> Result<workloads::Executors> {
    ExecutorOptions o = executors;  // each fleet opened (a replica taking the lead) gets its own
    workloads::Executors built;
    o.local.on_change = nudge;
    built["local"] = std::make_unique<exec::LocalExecutor>(clock, std::move(o.local));
    if (o.slurm) built["slurm"] = std::make_unique<exec::SlurmExecutor>(clock, std::move(*o.slurm));
    if (o.kubernetes) {
      o.kubernetes->on_change = nudge;
      built["kubernetes"] =
          PURSER_TRY_VALUE(exec::KubernetesExecutor::create(clock, std::move(*o.kubernetes)));
    }
    return built;
  };
  return setup;
}

Result<std::unique_ptr<api::Fleet>> openFleet(const api::Services& s, store::Store& store,
                                              ledger::AuditLog& audit, FleetSetup setup) {
  workloads::Deps deps{s.clock,  s.ids, store, s.directory, *s.budget,
                       s.prices, audit, {},    setup.served};
  deps.gpu_utilisation = setup.gpu_utilisation;
  deps.audit_alerts = [&audit](store::Tx& tx, const std::vector<ledger::Alert>& alerts,
                               const std::string& tenant) -> Result<void> {
    for (const auto& e : ledger::alertEntries(alerts, tenant, "fleet", "system")) {
      PURSER_TRY(audit.append(tx, e));
    }
    return {};
  };
  // A pod's end wakes the service at once (it is told which service once there is one).
  auto service_of = std::make_shared<std::atomic<workloads::FleetService*>>(nullptr);
  const std::function<void()> nudge = [service_of] {
    if (workloads::FleetService* f = service_of->load()) f->nudge();
  };
  if (!setup.executors) return fail(invalidArgument("the fleet has no executors"));
  workloads::Executors executors = PURSER_TRY_VALUE(setup.executors(s.clock, nudge));
  auto service = PURSER_TRY_VALUE(workloads::FleetService::open(
      std::move(deps), std::move(setup.service), std::move(executors)));
  service_of->store(service.get());
  return std::make_unique<api::Fleet>(s, std::move(service));
}

api::DiagnoseOptions liveDiagnosis(const config::Config& config,
                                   api::Fleet::Current current_fleet) {
  api::DiagnoseOptions diagnose_options;
  diagnose_options.fleet = [current_fleet]() -> std::shared_ptr<workloads::FleetService> {
    auto f = current_fleet();
    if (!f) return nullptr;
    return std::shared_ptr<workloads::FleetService>(f, &f->service());
  };
  for (const auto& p : config.providers) {
    diagnose_options.providers.push_back({p.name, !p.metrics_url.empty(), p.gpus});
  }
  if (config.diagnose.narrator) {
    diagnose_options.narrator_route = config.diagnose.narrator->route;
    diagnose_options.narrator_max_tokens = config.diagnose.narrator->max_tokens;
  }
  return diagnose_options;
}

}  // namespace purser::server
