// Secret keys kept outside the database (the master key that seals provider keys, the key that
// signs the audit log): 32 bytes, given as 64 hex characters in an environment variable, or read
// from a key file that is created with 32 random bytes and mode 0600 on first use.
//
// Thread-safety: pure functions, apart from the file they create.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/random.h"
#include "common/result.h"

namespace purser {

using SecretKey = std::array<uint8_t, 32>;

// 64 hex characters -> 32 bytes. `what` names the key in the error ("the master key").
Result<SecretKey> secretKeyFromHex(std::string_view hex, std::string_view what);

// From `env_hex` when it is set (`env_name` names it in errors), else from `key_file`, which is
// created when missing.
Result<SecretKey> loadOrCreateSecretKey(const std::optional<std::string>& env_hex,
                                        std::string_view env_name, const std::string& key_file,
                                        Random& random);

}  // namespace purser
