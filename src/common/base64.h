// Base64 (RFC 4648, the standard alphabet with '=' padding), as Kubernetes writes certificate and
// key data into kubeconfig files and Secrets; and base64url (RFC 4648 section 5, '-' and '_', no
// padding), as JOSE (JWTs, JWKs) and PKCE write bytes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace purser {

// The bytes `text` encodes; nullopt when it is not base64 (a character outside the alphabet,
// padding in the wrong place, a length that is not a multiple of four). Line breaks are skipped,
// as PEM-style wrapped base64 has them.
std::optional<std::string> base64Decode(std::string_view text);

// Standard base64 with padding (HTTP Basic credentials, Kubernetes data).
std::string base64Encode(std::string_view bytes);

// base64url without padding.
std::string base64UrlEncode(std::string_view bytes);
// The bytes `text` encodes in base64url; padding is accepted but not needed. nullopt for any
// other character (line breaks and the standard alphabet's '+' and '/' included) or a length no
// encoding has (a remainder of one character).
std::optional<std::string> base64UrlDecode(std::string_view text);

}  // namespace purser
