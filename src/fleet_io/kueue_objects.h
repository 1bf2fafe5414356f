// What the two Kueue readers share (internal to src/fleet_io): Kueue's names, the ObjectReader
// every object is read through (its kind, apiVersion, metadata and fields, each error with its
// file, line and column) and the checks both apply. manifest.cc reads the queue objects
// (ResourceFlavor, Cohort, ClusterQueue, LocalQueue, WorkloadPriorityClass); workload_parse.cc
// reads workloads (Kueue's Workload, batch Jobs, JobSets, PyTorchJobs, pods).
#pragma once
#include "fleet_io/manifest.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <charconv>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <type_traits>
#include <utility>

#include "common/clock.h"
#include "common/json.h"
#include "common/quantity.h"
#include "config/yaml_reader.h"
#include "fleet_io/yaml_fields.h"

namespace purser::fleet::kueue_objects {

using config::YamlReader;
using Map = YamlReader::Map;

inline constexpr std::string_view kGroup = "kueue.x-k8s.io";
inline constexpr char kNameLabel[] = "kubernetes.io/metadata.name";
inline constexpr char kQueueLabel[] = "kueue.x-k8s.io/queue-name";
inline constexpr char kPriorityClassLabel[] = "kueue.x-k8s.io/priority-class";
inline constexpr char kMinParallelismAnnotation[] = "kueue.x-k8s.io/job-min-parallelism";
inline constexpr char kMaxExecLabel[] = "kueue.x-k8s.io/max-exec-time-seconds";
inline constexpr int64_t kMaxExecSeconds = int64_t{366} * 24 * 3600;  // a year: longer is a mistake
inline constexpr char kServeAnnotation[] = "purser.dev/serve";
inline constexpr char kDefaultNamespace[] = "default";
inline constexpr char kIgnored[] = "not supported by Purser; ignored";

enum class Version { kV1alpha1, kV1beta1, kV1beta2 };

// The kinds Purser reads, and Kueue's other kinds (reported, then skipped).
inline constexpr std::array<std::string_view, 5> kFleetKinds = {
    "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"};
inline constexpr std::array<std::string_view, 7> kOtherKueueKinds = {
    "AdmissionCheck",   "DynamicResourceAllocationConfig", "MultiKueueCluster",
    "MultiKueueConfig", "ProvisioningRequestConfig",       "Topology",
    "Workload"};

inline bool isNull(const YAML::Node& n) { return !n.IsDefined() || n.IsNull(); }

template <typename Range>
inline bool contains(const Range& range, std::string_view s) {
  return std::find(range.begin(), range.end(), s) != range.end();
}

inline std::string where(const std::string& file, const YAML::Mark& at) {
  if (at.is_null() || at.line < 0) return file;
  return fmt::format("{}:{}:{}", file, at.line + 1, at.column + 1);
}

inline YAML::Mark keyMark(const Map& m, const std::string& key) {
  for (auto it = m.node().begin(); it != m.node().end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->first.Mark();
  }
  return m.node().Mark();
}

// A URL path as RFC 3986 has it (pchar and "/"), starting with "/", at most 256 bytes.
inline bool isUrlPath(const std::string& p) {
  if (p.empty() || p[0] != '/' || p.starts_with("//") || p.size() > 256) return false;
  return std::all_of(p.begin(), p.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("-._~!$&'()*+,;=:@%/").find(c) != std::string_view::npos;
  });
}

inline Error combine(const std::vector<Error>& errors) {
  if (errors.size() == 1) return errors.front();
  std::string message = fmt::format("{} errors:", errors.size());
  for (const auto& e : errors) message += "\n  " + e.toString();
  return invalidArgument(std::move(message));
}

inline bool addChecked(Amount& into, Amount v) { return !__builtin_add_overflow(into, v, &into); }

// One object of a stream: its own YamlReader, so that its errors can name the object once its
// name is known, and the stream's shared list of warnings.
class ObjectReader {
 public:
  ObjectReader(const std::string& file, std::vector<std::string>& warnings, YAML::Mark at)
      : r_(file), warnings_(warnings), at_(at) {}

  YamlReader& reader() { return r_; }
  void setLabel(std::string label) { label_ = std::move(label); }
  const YAML::Mark& at() const { return at_; }

  void moveErrorsTo(std::vector<Error>& out) const {
    for (Error e : r_.errors()) {
      e.message = fmt::format("{}: {}", label_, e.message);
      out.push_back(std::move(e));
    }
  }

  void warn(const YAML::Mark& at, const std::string& path, std::string_view message) {
    warnings_.push_back(
        path.empty() ? fmt::format("{}: {}: {}", where(r_.file(), at), label_, message)
                     : fmt::format("{}: {}: {}: {}", where(r_.file(), at), label_, path, message));
  }

  // A known Kueue field Purser does not implement: accepted, and reported.
  void unsupported(Map& m, const std::string& key, std::string_view message = kIgnored) {
    if (!m.present(key) || isNull(m.get(key))) return;
    warn(keyMark(m, key), m.child(key), message);
  }

  // A field under the other API version's name (cohort vs cohortName).
  void renamed(Map& m, const std::string& key, std::string_view version,
               const std::string& name_here) {
    if (!m.present(key)) return;
    r_.addError(keyMark(m, key), m.child(key),
                fmt::format("this is the field's name in kueue.x-k8s.io/{}; this apiVersion calls "
                            "it \"{}\"",
                            version, name_here));
  }

  template <typename T>
  void choice(Map& m, const std::string& key,
              const std::vector<std::pair<std::string, std::type_identity_t<T>>>& table, T& out) {
    if (!m.present(key) || isNull(m.get(key))) return;
    const YAML::Node n = m.get(key);
    auto s = r_.asString(n, m.child(key));
    if (!s) return;
    std::vector<std::string> names;
    for (const auto& [name, value] : table) {
      if (*s == name) {
        out = value;
        return;
      }
      names.push_back(name);
    }
    r_.addError(n, m.child(key),
                fmt::format("expected one of {}, got \"{}\"", fmt::join(names, ", "), *s));
  }

  std::optional<int64_t> integer(Map& m, const std::string& key, int64_t min, int64_t max) {
    if (!m.present(key) || isNull(m.get(key))) return std::nullopt;
    return r_.asInt(m.get(key), m.child(key), min, max);
  }

  // A Kubernetes quantity as milli-units; never negative; `whole` for extended resources.
  std::optional<Amount> amount(const YAML::Node& n, const std::string& path, bool whole = false) {
    return readAmount(r_, n, path, whole);
  }

  // A ResourceList: resource name -> quantity (extended resources whole, as in Kubernetes).
  Resources resourceList(const YAML::Node& n, const std::string& path) {
    return readResources(r_, n, path, /*whole_extended=*/true);
  }

  std::map<std::string, std::string> stringMap(const YAML::Node& n, const std::string& path) {
    std::map<std::string, std::string> out;
    if (isNull(n)) return out;
    if (!n.IsMap()) {
      r_.addError(n, path, fmt::format("expected a mapping of strings, got {}", describeNode(n)));
      return out;
    }
    for (const auto& kv : n) {
      if (auto v = r_.asString(kv.second, path + "." + kv.first.Scalar())) {
        out[kv.first.Scalar()] = *v;
      }
    }
    return out;
  }

  std::vector<Toleration> tolerations(const YAML::Node& n, const std::string& path) {
    return readTolerations(r_, n, path, [this](Map& m) { unsupported(m, "tolerationSeconds"); });
  }

 private:
  YamlReader r_;
  std::vector<std::string>& warnings_;
  YAML::Mark at_;
  std::string label_;
};

struct Meta {
  std::string name;
  std::string namespace_;
  bool namespace_given = false;  // false: the default namespace stands in
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::string uid;
  std::optional<int64_t> created_ms;
};

// metadata: the name (and namespace) are read; the rest is Kubernetes bookkeeping (uid,
// resourceVersion, managedFields, annotations, ...) and passes unread.
inline Meta readMeta(ObjectReader& o, Map& top, bool namespaced) {
  YamlReader& r = o.reader();
  Meta meta;
  if (!top.present("metadata")) {
    r.addError(top.node(), top.child("metadata.name"), "required field is missing");
    return meta;
  }
  Map m = top.map("metadata");
  m.required("name", meta.name);
  if (!meta.name.empty() && !isDnsSubdomain(meta.name)) {
    r.addError(m.get("name"), m.child("name"),
               fmt::format("\"{}\" is not a valid name: use lower-case letters, digits, '-' and "
                           "'.', starting and ending with a letter or digit",
                           meta.name));
  }
  if (namespaced) {
    meta.namespace_ = kDefaultNamespace;
    meta.namespace_given = m.has("namespace");
    m.optional("namespace", meta.namespace_);
    if (!isDnsLabel(meta.namespace_)) {
      r.addError(m.get("namespace"), m.child("namespace"),
                 fmt::format("\"{}\" is not a valid namespace", meta.namespace_));
    }
  }
  if (m.present("labels")) meta.labels = o.stringMap(m.get("labels"), m.child("labels"));
  if (m.present("annotations")) {
    meta.annotations = o.stringMap(m.get("annotations"), m.child("annotations"));
  }
  m.optional("uid", meta.uid);
  if (m.present("creationTimestamp") && !isNull(m.get("creationTimestamp"))) {
    const YAML::Node n = m.get("creationTimestamp");
    Result<SystemTime> t = fail(invalidArgument("not a string"));
    if (n.IsScalar()) t = parseRfc3339(n.Scalar());
    if (t) {
      meta.created_ms = unixMillis(*t);
    } else {
      r.addError(n, m.child("creationTimestamp"),
                 fmt::format("expected an RFC 3339 time, got {}", describeNode(n)));
    }
  }
  return meta;
}

}  // namespace purser::fleet::kueue_objects
