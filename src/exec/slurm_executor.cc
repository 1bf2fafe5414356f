#include "exec/slurm_executor.h"
#include "exec/gpu_share_env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "common/crypto.h"

namespace purser::exec {

namespace {

Error unknownJob(const std::string& handle) {
  return Error(ErrorCode::kNotFound, fmt::format("no Slurm job \"{}\" on this executor", handle));
}

bool safeName(const std::string& s) {
  if (s.empty() || s.size() > 512 || s[0] == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
  });
}

std::string safeStem(const PodLaunch& pod) {
  std::string out = fmt::format("{}.{}.{}", pod.workload, pod.pod_set, pod.index);
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_';
    if (!ok) c = '.';
  }
  return out;
}

// The value of `key` in one line of `scontrol show job -o` ("JobId=1 JobName=x JobState=...").
std::string field(const std::string& line, const std::string& key) {
  size_t at = 0;
  while ((at = line.find(key + "=", at)) != std::string::npos) {
    if (at == 0 || line[at - 1] == ' ') {
      const size_t from = at + key.size() + 1;
      const size_t end = line.find(' ', from);
      return line.substr(from, end == std::string::npos ? std::string::npos : end - from);
    }
    at += key.size();
  }
  return {};
}

// Slurm's "2026-12-02T01:48:29" (the controller's local time); nullopt for "Unknown" or "None".
std::optional<SystemTime> slurmTime(const std::string& text) {
  std::tm tm{};
  if (text.size() < 19 || strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) {
    return std::nullopt;
  }
  tm.tm_isdst = -1;
  const time_t t = std::mktime(&tm);
  if (t <= 0) return std::nullopt;
  return std::chrono::system_clock::from_time_t(t);
}

bool digits(const std::string& s) {
  return !s.empty() && s.size() <= 18 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Result<fleet::InventoryNode> inventoryNodeOfSlurm(const std::string& line, int64_t gpu_memory_mib) {
  fleet::InventoryNode n;
  n.name = field(line, "NodeName");
  if (n.name.empty()) return fail(invalidArgument("a Slurm node line without NodeName"));
  const auto bad = [&](const char* what, const std::string& value) {
    return invalidArgument(
        fmt::format("Slurm node {}: {} \"{}\" is not a count", n.name, what, value));
  };
  const std::string cpus = field(line, "CPUTot"), memory = field(line, "RealMemory");
  if (!cpus.empty() && !digits(cpus)) return fail(bad("CPUTot", cpus));
  if (!memory.empty() && !digits(memory)) return fail(bad("RealMemory", memory));
  n.cpu_milli = cpus.empty() ? 0 : std::stoll(cpus) * 1000;
  n.memory_mib = memory.empty() ? 0 : std::stoll(memory);
  // Gres=gpu:h100:8(S:0-1),gpu:a100:2 or gpu:8 or (null)
  std::string type;
  int64_t count = 0;
  const std::string gres = field(line, "Gres");
  size_t at = 0;
  while (at < gres.size()) {
    size_t end = gres.find(',', at);
    if (end == std::string::npos) end = gres.size();
    std::string entry = gres.substr(at, end - at);
    at = end + 1;
    entry = entry.substr(0, entry.find('('));
    if (entry.rfind("gpu:", 0) != 0) continue;
    entry.erase(0, 4);
    const size_t colon = entry.rfind(':');
    const std::string t = colon == std::string::npos ? "" : entry.substr(0, colon);
    const std::string c = colon == std::string::npos ? entry : entry.substr(colon + 1);
    if (!digits(c)) return fail(bad("Gres", gres));
    if (count > 0 && t != type) continue;
    type = t;
    count += std::stoll(c);
  }
  if (count > 4096) return fail(bad("Gres", gres));
  if (count > 0 && gpu_memory_mib <= 0) {
    return fail(invalidArgument(
        fmt::format("Slurm node {}: Slurm does not say how much memory its GPUs have; set "
                    "fleet.slurm.gpu_memory",
                    n.name)));
  }
  for (int64_t i = 0; i < count; ++i) {
    fleet::GpuDevice g;
    g.index = static_cast<int>(i);
    g.model = type.empty() ? "gpu" : type;
    g.memory_mib = gpu_memory_mib;
    n.gpus.push_back(std::move(g));
  }
  n.labels["kubernetes.io/hostname"] = n.name;
  n.labels["purser.dev/executor"] = "slurm";
  const std::string partitions = field(line, "Partitions");
  if (!partitions.empty()) {
    n.labels["slurm.schedmd.com/partition"] = partitions.substr(0, partitions.find(','));
  }
  // State=IDLE, MIXED, ALLOCATED+DRAIN, DOWN*+NOT_RESPONDING, ...
  const std::string state = field(line, "State");
  for (const char* unusable : {"DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "FUTURE", "POWERED_DOWN",
                               "POWER_DOWN", "MAINT", "REBOOT", "INVAL"}) {
    if (state.find(unusable) != std::string::npos) {
      n.taints.push_back({"node.kubernetes.io/unschedulable", "", "NoSchedule"});
      break;
    }
  }
  return n;
}

SlurmExecutor::SlurmExecutor(const Clock& clock, SlurmExecutorOptions options)
    : clock_(clock), options_(std::move(options)) {}

std::optional<int64_t> SlurmExecutor::jobId(const std::string& handle) {
  const size_t at = handle.rfind(".slurm-");
  if (at == std::string::npos) return std::nullopt;
  const std::string digits = handle.substr(at + 7);
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoll(digits);
}

Result<CommandResult> SlurmExecutor::tool(const std::string& name, std::vector<std::string> args) {
  args.insert(args.begin(), options_.bin_dir.empty() ? name : options_.bin_dir + "/" + name);
  std::map<std::string, std::string> env;
  if (!options_.conf.empty()) env["SLURM_CONF"] = options_.conf;
  return runCommand(args, env, options_.command_timeout);
}

Result<std::string> SlurmExecutor::start(const PodLaunch& pod) {
  if (pod.argv.empty() || pod.argv[0].empty()) {
    return fail(invalidArgument("a pod needs a command to run").withField("command"));
  }
  for (const auto& [k, v] : pod.env) {
    const bool name_ok = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    }) && !(k[0] >= '0' && k[0] <= '9');
    if (!name_ok || v.find('\0') != std::string::npos) {
      return fail(invalidArgument(fmt::format("\"{}\" is not a usable environment variable", k))
                      .withField("env"));
    }
  }
  // The team's account, and its directory (the account's alone) for scripts, logs and work.
  auto account = options_.accounts.find(pod.team);
  if (account == options_.accounts.end()) {
    account = options_.accounts.find(pod.team.substr(0, pod.team.find('@')));
  }
  if (account == options_.accounts.end()) {
    return fail(invalidArgument(fmt::format(
        "team \"{}\" has no Unix account to run Slurm jobs as (fleet.slurm.accounts); its "
        "jobs never run as Purser's own user",
        pod.team.substr(0, pod.team.find('@')))));
  }
  std::string team_dir_name = pod.team;
  for (char& c : team_dir_name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  if (team_dir_name.empty() || team_dir_name[0] == '.') team_dir_name = "_" + team_dir_name;
  const std::string team_dir = options_.log_dir + "/" + team_dir_name;
  const bool root = ::geteuid() == 0;
  if (::mkdir(team_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return fail(unavailable(fmt::format("cannot make {}: {}", team_dir, std::strerror(errno))));
  }
  {
    struct stat st {};
    if (::lstat(team_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return fail(unavailable(fmt::format("{} is not a directory", team_dir)));
    }
    if (root && (st.st_uid != static_cast<uid_t>(account->second.uid) || (st.st_mode & 077))) {
      if (::chown(team_dir.c_str(), static_cast<uid_t>(account->second.uid),
                  static_cast<gid_t>(account->second.gid)) != 0 ||
          ::chmod(team_dir.c_str(), 0700) != 0) {
        return fail(unavailable(fmt::format("cannot give {} to account {}: {}", team_dir,
                                            account->second.name, std::strerror(errno))));
      }
    }
  }
  std::string stem;
  {
    std::lock_guard lock(mu_);
    stem = fmt::format("{}.{}-{}", safeStem(pod), unixMillis(clock_.now()), ++next_);
  }
  const std::string workdir = pod.working_dir.empty() ? team_dir : pod.working_dir;
  if (workdir[0] != '/') {
    return fail(invalidArgument(fmt::format("workingDir \"{}\" is not an absolute path", workdir))
                    .withField("workingDir"));
  }
  // The script: the pod's environment (Slurm's own GPU binding wins), then its program. A share
  // of a GPU is enforced by the shim, through a region on the node's own disk per job (a file
  // on the shared log directory would be mapped by several nodes, which no file system keeps
  // coherent).
  const bool share = holdsGpuShare(pod.env);
  const auto env = PURSER_TRY_VALUE(withGpuShare(pod.env, options_.gpu_share_library, "-"));
  std::string script = "#!/bin/sh\n";
  for (const auto& [k, v] : env) {
    if (k == "CUDA_VISIBLE_DEVICES" || k == "CUDA_DEVICE_MEMORY_SHARED_CACHE") continue;
    script += fmt::format("export {}={}\n", k, shellQuote(v));
  }
  if (share) {
    // A node's /tmp is every account's: the job id alone is guessable, so another tenant could
    // plant a file there first. A token only this script (in its team's own directory) knows
    // makes the name unguessable; the shim refuses a file not the job's account's own.
    std::array<uint8_t, 8> token{};
    crypto::randomBytes(token);
    uint64_t value = 0;
    for (const uint8_t b : token) value = value << 8 | b;
    script += fmt::format(
        "export CUDA_DEVICE_MEMORY_SHARED_CACHE=\"${{TMPDIR:-/tmp}}/purser-gpushare-"
        "${{SLURM_JOB_ID:-$$}}-{:016x}\"\n",
        value);
  }
  if (pod.env.count("PATH") == 0) {
    const char* path = ::getenv("PATH");
    script += "export PATH=" + shellQuote(path ? path : "/usr/local/bin:/usr/bin:/bin") + "\n";
  }
  // Where it works, or it fails (Slurm would otherwise run it in /tmp without a word).
  script += "cd " + shellQuote(workdir) + " || { echo \"cannot enter the working directory " +
            shellQuote(workdir) + "\" >&2; exit 126; }\n";
  script += "exec";
  for (const auto& a : pod.argv) script += " " + shellQuote(a);
  script += "\n";
  const std::string script_path = team_dir + "/" + stem + ".sh";
  {
    const int fd =
        ::open(script_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0700);
    const bool wrote =
        fd >= 0 && ::write(fd, script.data(), script.size()) == static_cast<ssize_t>(script.size());
    if (fd >= 0) ::close(fd);
    if (!wrote) {
      return fail(unavailable(fmt::format("cannot write the job script {}", script_path)));
    }
  }
  const std::string log = team_dir + "/" + stem + ".log";
  std::vector<std::string> args = {"--parsable", "--export=NONE", "--job-name=" + stem,
                                   "--output=" + log, "--chdir=" + workdir};
  if (root) {
    args.push_back(fmt::format("--uid={}", account->second.uid));
    args.push_back(fmt::format("--gid={}", account->second.gid));
  }
  if (!options_.partition.empty()) args.push_back("--partition=" + options_.partition);
  if (pod.gpus > 0) {
    args.push_back(options_.gres_type.empty()
                       ? fmt::format("--gres=gpu:{}", pod.gpus)
                       : fmt::format("--gres=gpu:{}:{}", options_.gres_type, pod.gpus));
  }
  if (pod.cpu_milli > 0)
    args.push_back(fmt::format("--cpus-per-task={}", (pod.cpu_milli + 999) / 1000));
  if (pod.memory_bytes > 0) {
    args.push_back(fmt::format("--mem={}M", (pod.memory_bytes + (1 << 20) - 1) >> 20));
  }
  if (!pod.node.empty()) args.push_back("--nodelist=" + pod.node);
  if (pod.time_limit_seconds > 0) {
    // minutes:seconds, as sbatch reads it.
    args.push_back(
        fmt::format("--time={}:{:02}", pod.time_limit_seconds / 60, pod.time_limit_seconds % 60));
  }
  args.push_back(script_path);
  auto ran = tool("sbatch", args);
  if (!ran) return fail(ran.error());
  std::string id_text = ran->out.substr(0, ran->out.find_first_of(";\n"));
  if (ran->exit_code != 0 || id_text.empty() ||
      !std::all_of(id_text.begin(), id_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    std::string why = ran->err.empty() ? ran->out : ran->err;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    return fail(invalidArgument(fmt::format("sbatch refused the pod: {}", why)));
  }
  const std::string handle = stem + ".slurm-" + id_text;
  // The log takes the handle's name, so logTail finds it by the handle alone: a link of
  // Purser's, in Purser's directory, to the job's file in its team's.
  ::symlink((team_dir_name + "/" + stem + ".log").c_str(),
            (options_.log_dir + "/" + handle + ".log").c_str());
  Job job;
  job.id = std::stoll(id_text);
  job.status.started_at = clock_.now();
  std::lock_guard lock(mu_);
  jobs_[handle] = job;
  refreshed_.reset();  // the next status() asks Slurm
  return handle;
}

Result<void> SlurmExecutor::refreshLocked(bool force) {
  const MonoTime now = clock_.monotonic();
  if (!force && refreshed_ && now - *refreshed_ < options_.refresh) {
    if (down_) return fail(*down_);
    return {};
  }
  refreshed_ = now;
  bool live = false;
  for (const auto& [h, j] : jobs_) live = live || j.status.phase == PodPhase::kRunning;
  if (!live) return {};
  auto ran = tool("scontrol", {"show", "job", "-o"});
  if (!ran || ran->exit_code != 0) {
    std::string why = ran ? ran->err : ran.error().message;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    // "No jobs in the system" is an answer, not an outage.
    if (!ran || why.find("No jobs in the system") == std::string::npos) {
      down_ = Error(ErrorCode::kUnavailable, "Slurm cannot be reached: " + why);
      return fail(*down_);
    }
  }
  down_.reset();
  std::map<int64_t, std::string> lines;
  std::istringstream in(ran->out);
  for (std::string line; std::getline(in, line);) {
    const std::string id = field(line, "JobId");
    if (!id.empty() &&
        std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      lines[std::stoll(id)] = line;
    }
  }
  for (auto& [handle, job] : jobs_) {
    if (job.status.phase != PodPhase::kRunning) continue;
    auto it = lines.find(job.id);
    if (it == lines.end()) {
      if (job.seen || force) {
        // Slurm no longer knows it (purged after MinJobAge): it ended, how is lost.
        job.status.phase = PodPhase::kFailed;
        job.status.finished_at = clock_.now();
        job.status.stopping = false;
      }
      continue;
    }
    job.seen = true;
    const std::string& line = it->second;
    const std::string state = field(line, "JobState");
    if (const std::string host = field(line, "BatchHost"); !host.empty() && host != "(null)") {
      job.host = host;
    }
    if (auto t = slurmTime(field(line, "StartTime")); t && state != "PENDING") {
      job.status.started_at = *t;
    }
    if (state == "PENDING" || state == "CONFIGURING" || state == "RUNNING" ||
        state == "COMPLETING" || state == "SUSPENDED" || state == "REQUEUED" ||
        state == "RESIZING" || state == "SIGNALING" || state == "STAGE_OUT") {
      continue;
    }
    // Ended: COMPLETED, or FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, ...
    const std::string code = field(line, "ExitCode");  // "3:0" (exit code : signal)
    const size_t colon = code.find(':');
    int exit_code = 0, signal = 0;
    if (colon != std::string::npos) {
      exit_code = std::atoi(code.substr(0, colon).c_str());
      signal = std::atoi(code.substr(colon + 1).c_str());
    }
    if (signal != 0) {
      job.status.signal = signal;
    } else {
      job.status.exit_code = exit_code;
    }
    job.status.phase = state == "COMPLETED" && exit_code == 0 && signal == 0 ? PodPhase::kSucceeded
                                                                             : PodPhase::kFailed;
    if (job.status.phase == PodPhase::kFailed && signal == 0 && exit_code == 0) {
      job.status.exit_code.reset();  // cancelled, timed out, ...: no code of its own
      job.status.signal = SIGTERM;
    }
    auto end = slurmTime(field(line, "EndTime"));
    job.status.finished_at = end ? *end : clock_.now();
    job.status.stopping = false;
    job.kill_at.reset();
  }
  return {};
}

void SlurmExecutor::escalateLocked(Job& job) {
  if (job.status.phase != PodPhase::kRunning || !job.kill_at || clock_.monotonic() < *job.kill_at) {
    return;
  }
  job.kill_at.reset();
  auto ran = tool("scancel", {std::to_string(job.id)});
  if (!ran || ran->exit_code != 0) spdlog::warn("slurm: scancel {} failed", job.id);
}

Result<PodStatus> SlurmExecutor::status(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(handle);
  if (it == jobs_.end()) return fail(unknownJob(handle));
  PURSER_TRY(refreshLocked(false));
  escalateLocked(it->second);
  return it->second.status;
}

Result<void> SlurmExecutor::stop(const std::string& handle, Duration grace) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(handle);
  if (it == jobs_.end()) return fail(unknownJob(handle));
  Job& job = it->second;
  if (job.status.phase != PodPhase::kRunning) return {};
  if (!job.status.stopping) {
    job.status.stopping = true;
    std::vector<std::string> args = {
        "--full", "--signal=" + std::string(grace <= Duration::zero() ? "KILL" : "TERM"),
        std::to_string(job.id)};
    auto ran = tool("scancel", args);
    if (!ran) return fail(ran.error());
    if (ran->exit_code != 0) {
      // A job still pending has nothing to signal: cancel it outright.
      ran = tool("scancel", {std::to_string(job.id)});
      if (!ran) return fail(ran.error());
    }
    if (grace > Duration::zero()) job.kill_at = clock_.monotonic() + grace;
    refreshed_.reset();
  }
  escalateLocked(job);
  return {};
}

Result<std::string> SlurmExecutor::logTail(const std::string& handle, size_t max_bytes) {
  if (!safeName(handle) || !jobId(handle)) return fail(unknownJob(handle));
  std::string path = options_.log_dir + "/" + handle + ".log";
  // The handle's name is a link Purser made to the job's output file beside it; the output file
  // itself is the job's, so it is read without following a link (a job that swapped its log for
  // a link to another file reads as empty).
  char target[512];
  const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
  if (n > 0) {
    // "TEAM/STEM.log" (or "STEM.log", of jobs started before teams had directories).
    const std::string name(target, static_cast<size_t>(n));
    const size_t slash = name.find('/');
    const bool ok = slash == std::string::npos
                        ? safeName(name)
                        : safeName(name.substr(0, slash)) && safeName(name.substr(slash + 1)) &&
                              name.find('/', slash + 1) == std::string::npos;
    if (!ok) return fail(unknownJob(handle));
    path = options_.log_dir + "/" + name;
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return fail(unknownJob(handle));
  return fileTail(path, max_bytes);
}

void SlurmExecutor::forget(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(handle);
  if (it != jobs_.end() && it->second.status.phase != PodPhase::kRunning) jobs_.erase(it);
}

std::optional<std::string> SlurmExecutor::address(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(handle);
  if (it == jobs_.end() || it->second.host.empty()) return std::nullopt;
  return it->second.host;
}

std::optional<Result<std::vector<fleet::InventoryNode>>> SlurmExecutor::nodes() {
  if (!options_.read_nodes) return std::nullopt;
  std::lock_guard lock(mu_);
  const MonoTime now = clock_.monotonic();
  if (nodes_ && nodes_read_ && now - *nodes_read_ < options_.node_refresh) return nodes_;
  nodes_read_ = now;
  auto ran = tool("scontrol", {"show", "node", "-o"});
  if (!ran || ran->exit_code != 0) {
    std::string why = ran ? ran->err : ran.error().message;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    // A list that fails keeps the last one.
    if (!nodes_ || !*nodes_) {
      nodes_ = Result<std::vector<fleet::InventoryNode>>(
          fail(unavailable("Slurm's nodes could not be read: " + why)));
    }
    return nodes_;
  }
  std::vector<fleet::InventoryNode> out;
  std::istringstream in(ran->out);
  for (std::string line; std::getline(in, line);) {
    if (line.find("NodeName=") == std::string::npos) continue;
    auto n = inventoryNodeOfSlurm(line, options_.gpu_memory_mib);
    if (!n) {
      spdlog::warn("slurm: {} (left out of the inventory)", n.error().message);
      continue;
    }
    out.push_back(std::move(*n));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  nodes_ = Result<std::vector<fleet::InventoryNode>>(std::move(out));
  return nodes_;
}

Result<void> SlurmExecutor::adopt(const Adopted& pod) {
  auto id = jobId(pod.handle);
  if (!safeName(pod.handle) || !id) return fail(invalidArgument("not a handle of this executor"));
  std::lock_guard lock(mu_);
  if (jobs_.count(pod.handle) != 0) return {};
  Job job;
  job.id = *id;
  job.seen = true;  // it was running when the store last heard of it
  job.status.started_at = pod.started_at;
  jobs_[pod.handle] = job;
  refreshed_.reset();
  return {};
}

}  // namespace purser::exec
