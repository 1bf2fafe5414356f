// Reading fleet amounts from YAML, shared by the scenario and manifest readers: Kubernetes
// quantities ("500m", "16Gi", 4) as exact milli-units, with errors that name the field.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>

#include "config/yaml_reader.h"
#include "fleet/model.h"

namespace purser::fleet {

// "\"value\"", "a list", "a mapping" or "nothing": what a node is, for error messages.
std::string describeNode(const YAML::Node& n);

// A quantity as milli-units; negative, malformed or too large ones are errors recorded in `r`.
// `whole`: extended resources (nvidia.com/gpu, ...) take whole numbers only, as in Kubernetes.
std::optional<Amount> readAmount(config::YamlReader& r, const YAML::Node& n,
                                 const std::string& path, bool whole = false);

}  // namespace purser::fleet
