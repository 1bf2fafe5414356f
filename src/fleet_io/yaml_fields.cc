#include "fleet_io/yaml_fields.h"

#include <fmt/format.h>

#include "common/quantity.h"

namespace purser::fleet {

std::string describeNode(const YAML::Node& n) {
  if (n.IsScalar()) return fmt::format("\"{}\"", n.Scalar());
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

namespace {

// Kubernetes' extended resources (vendor-domain names such as nvidia.com/gpu) take only whole
// numbers; cpu, memory and the kubernetes.io names do not.
bool isExtendedResource(std::string_view name) {
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos) return false;
  const std::string_view domain = name.substr(0, slash);
  if (domain == "kubernetes.io" || domain.ends_with(".kubernetes.io")) return false;
  return !name.starts_with("requests.");
}

}  // namespace

Resources readResources(config::YamlReader& r, const YAML::Node& n, const std::string& path,
                        bool whole_extended) {
  Resources out;
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsMap()) {
    r.addError(n, path,
               fmt::format("expected a mapping of resource to quantity, got {}", describeNode(n)));
    return out;
  }
  for (const auto& kv : n) {
    const std::string name = kv.first.Scalar();
    const bool whole = whole_extended && isExtendedResource(name);
    if (auto a = readAmount(r, kv.second, path + "." + name, whole)) out[name] = *a;
  }
  return out;
}

std::optional<Amount> readAmount(config::YamlReader& r, const YAML::Node& n,
                                 const std::string& path, bool whole) {
  if (!n.IsScalar()) {
    r.addError(
        n, path,
        fmt::format("expected a quantity such as \"500m\" or \"16Gi\", got {}", describeNode(n)));
    return std::nullopt;
  }
  auto q = Quantity::parse(n.Scalar());
  if (!q) {
    r.addError(n, path, fmt::format("\"{}\" is not a quantity: {}", n.Scalar(), q.error().message));
    return std::nullopt;
  }
  if (q->isNegative()) {
    r.addError(n, path, fmt::format("a quantity may not be negative, got \"{}\"", n.Scalar()));
    return std::nullopt;
  }
  if (whole && !q->isInteger()) {
    r.addError(n, path,
               fmt::format("an extended resource takes a whole number, got \"{}\"", n.Scalar()));
    return std::nullopt;
  }
  auto milli = q->milliValue();
  if (!milli) {
    r.addError(n, path, fmt::format("\"{}\" is too large", n.Scalar()));
    return std::nullopt;
  }
  return *milli;
}

std::vector<Toleration> readTolerations(config::YamlReader& r, const YAML::Node& n,
                                        const std::string& path,
                                        const std::function<void(config::YamlReader::Map&)>& more) {
  std::vector<Toleration> out;
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsSequence()) {
    r.addError(n, path, fmt::format("expected a list of tolerations, got {}", describeNode(n)));
    return out;
  }
  for (size_t i = 0; i < n.size(); ++i) {
    auto m = r.map(n[i], fmt::format("{}[{}]", path, i));
    Toleration t;
    m.optional("key", t.key);
    m.optionalChoice("operator", t.op, {"Equal", "Exists"});
    m.optional("value", t.value);
    m.optionalChoice("effect", t.effect, {"", "NoSchedule", "PreferNoSchedule", "NoExecute"});
    if (more) more(m);
    m.finish();
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace purser::fleet
