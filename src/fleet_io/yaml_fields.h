// Fields the scenario and manifest readers share: Kubernetes quantities ("500m", "16Gi", 4) as
// exact milli-units, and tolerations; errors name the field.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/yaml_reader.h"
#include "fleet/model.h"

namespace purser::fleet {

// "\"value\"", "a list", "a mapping" or "nothing": what a node is, for error messages.
std::string describeNode(const YAML::Node& n);

// A quantity as milli-units; negative, malformed or too large ones are errors recorded in `r`.
// `whole`: extended resources (nvidia.com/gpu, ...) take whole numbers only, as in Kubernetes.
std::optional<Amount> readAmount(config::YamlReader& r, const YAML::Node& n,
                                 const std::string& path, bool whole = false);

// A ResourceList (resource name -> quantity) as milli-units; null is empty. `whole_extended`:
// extended resources (vendor-domain names such as nvidia.com/gpu) take whole numbers only.
Resources readResources(config::YamlReader& r, const YAML::Node& n, const std::string& path,
                        bool whole_extended);

// A list of {key, operator (Equal or Exists), value, effect}. `more`, when given, reads the
// other fields one entry may have before the entry's unknown fields are reported.
std::vector<Toleration> readTolerations(
    config::YamlReader& r, const YAML::Node& n, const std::string& path,
    const std::function<void(config::YamlReader::Map&)>& more = {});

}  // namespace purser::fleet
