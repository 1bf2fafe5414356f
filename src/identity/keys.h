// API key secrets: format, generation, hashing and constant-time verification.
//
// A key reads "pk-<id>-<secret>": the id (26 base32 characters) finds the stored key without
// scanning, the secret (43 base62 characters, 256 random bits) proves possession. Only the
// SHA-256 of the secret is stored; with 256 random bits a fast hash is the right one (there is
// nothing to brute-force). Keys in any other format (the PURSER_ADMIN_KEY bootstrap key) are
// found by a hash of the whole string instead.
#pragma once

#include <string>
#include <string_view>

#include "common/id.h"
#include "common/random.h"

namespace purser::identity {

struct NewKey {
  std::string id;
  std::string secret;  // the full key to show once: "pk-<id>-<secret>"
  std::string lookup;
  std::string secret_hash;
};

NewKey generateKey(IdGenerator& ids, Random& random);
// A new secret for an existing key id (rotation).
NewKey regenerateSecret(const std::string& id, Random& random);

// For a key presented by a client: where to find it and what its stored hash must be.
struct PresentedKey {
  std::string lookup;
  std::string hash;
};
PresentedKey presentedKey(std::string_view key);

// The lookup and hash for an arbitrary bootstrap key string (not in pk- format).
NewKey externalKey(std::string_view key);

std::string sha256Hex(std::string_view data);
bool constantTimeEquals(std::string_view a, std::string_view b);

}  // namespace purser::identity
