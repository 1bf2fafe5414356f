#include "sim/incident_world.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <numeric>
#include <utility>

#include "common/logging.h"

namespace purser::sim::incident {

// ---------------------------------------------------------------------------------------------
// Randomness, time and text.

Rng::Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {}

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Rng::range(double lo, double hi) { return lo + (hi - lo) * uniform(); }

int Rng::intIn(int lo, int hi) {
  if (hi <= lo) return lo;
  return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1));
}

double Rng::normal() {
  double u1 = std::max(uniform(), 1e-12);
  double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
}

double Rng::jitter(double rel) { return 1.0 + rel * (2.0 * uniform() - 1.0); }

std::string Rng::hex(int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(static_cast<size_t>(digits));
  for (int i = 0; i < digits; ++i) s.push_back(kHex[next() & 15]);
  return s;
}

Rng Rng::fork(std::string_view tag) const { return Rng(fnv1a(tag, state_ ^ 0xA5A5A5A5ull)); }

uint64_t fnv1a(std::string_view text, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

int TimeAxis::sampleAtOrAfter(int64_t t) const {
  if (t <= start) return 0;
  int64_t k = (t - start + step - 1) / step;
  return static_cast<int>(std::min<int64_t>(k, samples));
}

namespace {

struct Civil {
  int year, month, day, hour, minute, second;
};

// Howard Hinnant's civil_from_days.
Civil civil(int64_t t) {
  int64_t days = t >= 0 ? t / 86400 : (t - 86399) / 86400;
  int64_t secs = t - days * 86400;
  days += 719468;
  int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  int64_t doe = days - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t y = yoe + era * 400;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  int64_t d = doy - (153 * mp + 2) / 5 + 1;
  int64_t m = mp < 10 ? mp + 3 : mp - 9;
  if (m <= 2) ++y;
  return {static_cast<int>(y),
          static_cast<int>(m),
          static_cast<int>(d),
          static_cast<int>(secs / 3600),
          static_cast<int>(secs % 3600 / 60),
          static_cast<int>(secs % 60)};
}

}  // namespace

std::string isoTime(int64_t t) {
  Civil c = civil(t);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", c.year, c.month, c.day, c.hour,
                     c.minute, c.second);
}

std::string isoTimeMillis(int64_t t, int ms) {
  Civil c = civil(t);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", c.year, c.month, c.day, c.hour,
                     c.minute, c.second, ms);
}

std::string vllmTime(int64_t t) {
  Civil c = civil(t);
  return fmt::format("{:02}-{:02} {:02}:{:02}:{:02}", c.month, c.day, c.hour, c.minute, c.second);
}

std::string pyTime(int64_t t, int ms) {
  Civil c = civil(t);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02},{:03}", c.year, c.month, c.day, c.hour,
                     c.minute, c.second, ms);
}

std::string glogTime(int64_t t, int micros) {
  Civil c = civil(t);
  return fmt::format("{:02}{:02} {:02}:{:02}:{:02}.{:06}", c.month, c.day, c.hour, c.minute,
                     c.second, micros);
}

std::string withThousands(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return v < 0 ? "-" + out : out;
}

std::string yamlQuote(std::string_view text) {
  // A JSON string is a YAML double-quoted scalar (YAML 1.2 reads JSON), so JSON's escaping is
  // YAML's; invalid UTF-8 becomes U+FFFD.
  return "\"" + jsonEscape(text) + "\"";
}

// ---------------------------------------------------------------------------------------------
// Hardware and models.

const std::vector<GpuType>& gpuTypes() {
  static const std::vector<GpuType> kTypes = {
      {"H100-80GB", "h100-80gb", "NVIDIA H100 80GB HBM3", 81559, 1980, 345, 68, 700, 1.0, 1.0, 29,
       34},
      {"H200-141GB", "h200-141gb", "NVIDIA H200", 143771, 1980, 345, 72, 700, 0.85, 2.1, 30, 33},
      {"A100-80GB", "a100-80gb", "NVIDIA A100-SXM4-80GB", 81920, 1410, 210, 55, 400, 1.6, 0.95, 31,
       36},
      {"L40S-48GB", "l40s-48gb", "NVIDIA L40S", 46068, 2520, 210, 35, 350, 2.0, 0.45, 33, 40,
       false},
  };
  return kTypes;
}

const std::vector<ModelSpec>& modelSpecs() {
  static const std::vector<ModelSpec> kModels = {
      {"llama-8b", 8, 1, 0.0075, 0.0055, 26000, 420000},
      {"qwen-7b", 7, 1, 0.0070, 0.0055, 28000, 450000},
      {"mistral-24b", 24, 1, 0.0170, 0.0045, 9500, 220000},
      {"gemma-27b", 27, 1, 0.0190, 0.0045, 8500, 150000},
      {"qwen-32b", 32, 1, 0.0220, 0.0040, 7000, 178000},
      {"llama-70b", 70, 2, 0.0290, 0.0035, 5200, 260000},
  };
  return kModels;
}

// ---------------------------------------------------------------------------------------------
// World helpers.

int World::findReplica(std::string_view name) const {
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (replicas[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int World::findRoute(std::string_view name) const {
  for (size_t i = 0; i < routes.size(); ++i) {
    if (routes[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int World::findProvider(std::string_view name) const {
  for (size_t i = 0; i < providers.size(); ++i) {
    if (providers[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int World::findWorkload(std::string_view ns_name) const {
  for (size_t i = 0; i < workloads.size(); ++i) {
    const auto& wl = workloads[i];
    if (ns_name.size() == wl.ns.size() + 1 + wl.name.size() &&
        ns_name.substr(0, wl.ns.size()) == wl.ns && ns_name[wl.ns.size()] == '/' &&
        ns_name.substr(wl.ns.size() + 1) == wl.name) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

int World::findQueue(std::string_view name) const {
  for (size_t i = 0; i < queues.size(); ++i) {
    if (queues[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int World::findWallet(std::string_view scope) const {
  for (size_t i = 0; i < wallets.size(); ++i) {
    if (wallets[i].scope == scope) return static_cast<int>(i);
  }
  return -1;
}

const GpuType& World::typeOf(int node) const {
  return gpuTypes()[static_cast<size_t>(nodes[static_cast<size_t>(node)].type)];
}

void World::setState(Workload& wl, int64_t t, WorkloadState s) {
  for (int k = time.sampleAtOrAfter(t); k < time.samples; ++k) wl.state[static_cast<size_t>(k)] = s;
}

void World::admit(Workload& wl, int64_t t, int waited_s) {
  setState(wl, t, kRunning);
  std::string object = wl.ns + "/" + wl.name;
  events.push_back({t, "fleet", "QuotaReserved", "", object, "",
                    fmt::format("Quota reserved in ClusterQueue {}, wait time since queued was {}s",
                                wl.queue, waited_s)});
  events.push_back(
      {t, "fleet", "Admitted", "", object, "",
       fmt::format("Admitted by ClusterQueue {}, wait time since reservation was 0s", wl.queue)});
}

void World::finish(Workload& wl, int64_t t, bool succeeded, const std::string& message) {
  setState(wl, t, kEnded);
  events.push_back({t, "fleet", "Finished", "", wl.ns + "/" + wl.name,
                    succeeded ? "Succeeded" : "Failed",
                    !message.empty() ? message
                    : succeeded      ? "Job finished successfully"
                                     : "Job has reached the specified backoff limit"});
}

void World::pend(Workload& wl, int64_t t, const std::string& message) {
  setState(wl, t, kPending);
  events.push_back({t, "fleet", "Pending", "", wl.ns + "/" + wl.name, "Pending", message});
}

void World::preempt(Workload& wl, int64_t t, const std::string& reason, const std::string& phrase) {
  setState(wl, t, kPending);
  std::string message = fmt::format(
      "Preempted to accommodate a workload (UID: {}-{}-{}-{}-{}, JobUID: {}-{}-{}-{}-{}) "
      "due to {}",
      rng.hex(8), rng.hex(4), rng.hex(4), rng.hex(4), rng.hex(12), rng.hex(8), rng.hex(4),
      rng.hex(4), rng.hex(4), rng.hex(12), phrase);
  std::string object = wl.ns + "/" + wl.name;
  events.push_back({t, "fleet", "Preempted", "", object, reason, message});
  events.push_back({t + 1, "fleet", "Evicted", "", object, "Preempted", message});
}

void World::audit(int64_t t, const std::string& kind, const std::string& actor,
                  const std::string& object, const std::string& message) {
  events.push_back({t, "audit", kind, actor, object, "", message});
}

void World::log(int64_t t, const std::string& source, std::string line) {
  logs.push_back({t, source, std::move(line)});
}

}  // namespace purser::sim::incident
