// Base64 (RFC 4648, the standard alphabet with '=' padding), as Kubernetes writes certificate and
// key data into kubeconfig files and Secrets.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace purser {

// The bytes `text` encodes; nullopt when it is not base64 (a character outside the alphabet,
// padding in the wrong place, a length that is not a multiple of four). Line breaks are skipped,
// as PEM-style wrapped base64 has them.
std::optional<std::string> base64Decode(std::string_view text);

}  // namespace purser
