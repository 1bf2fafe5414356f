// An object of the API shown as people read it (what `kubectl describe` does): one "Key: value"
// line per field (an object's name, namespace and state first, the rest by name), nested objects
// indented under their key, lists of objects as items, lists of plain values on one line. Field
// names become words ("gpu_charged" -> "Gpu charged"; keys that are data, such as
// "nvidia.com/gpu" or "CUDA_VISIBLE_DEVICES", stay as they are); empty lists, empty objects and
// nulls are left out.
#pragma once

#include <ostream>

#include "common/json.h"

namespace purser::cli {

void printDescribed(const Json& value, std::ostream& out, int indent = 0);

}  // namespace purser::cli
