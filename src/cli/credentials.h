// What the CLI authenticates with, and where `purser login --oidc` keeps its sign-in tokens.
//
// In order: PURSER_KEY (an API key: the way for automation); else a token `purser login --oidc`
// stored for this server and not yet expired; else a client certificate (PURSER_CLIENT_CERT)
// the server maps to a key. Tokens live in $XDG_CONFIG_HOME/purser/credentials.json (else
// ~/.config/purser/credentials.json), one per server URL, the file readable by its owner only.
#pragma once

#include <optional>
#include <string>

#include "common/result.h"

namespace purser::cli {

// --server's value, else PURSER_SERVER, else http://127.0.0.1:8080; without a trailing '/'.
std::string serverUrl(const std::string& flag);

// The bearer to send to `server`: the key or stored token ("" with a client certificate alone);
// nullopt, having said what to do, when there is nothing.
std::optional<std::string> credentialFor(const std::string& server);

std::string credentialsFile();
// Keeps `token` (valid until `expires_at`, RFC 3339) for `server`, replacing any before.
Result<void> storeToken(const std::string& server, const std::string& token,
                        const std::string& expires_at);
// The stored token for `server` and forgets it; nullopt when there was none.
Result<std::optional<std::string>> takeToken(const std::string& server);

}  // namespace purser::cli
