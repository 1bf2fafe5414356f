// Small files read whole: certificates, keys, tokens, kubeconfigs — bounded, so that a path
// pointing at something large (a device, a log) is a clear error rather than memory spent.
#pragma once

#include <cstddef>
#include <string>

#include "common/result.h"

namespace purser {

// The file's bytes. kInvalidArgument naming `what` and the path when it cannot be read or is
// larger than `max_bytes` (1 MiB by default).
Result<std::string> readSmallFile(const std::string& path, const std::string& what,
                                  size_t max_bytes = 1 << 20);

}  // namespace purser
