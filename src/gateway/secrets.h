// Provider keys at rest: sealed with AES-256-GCM under a master key that never enters the store.
//
// The master key is 32 bytes, given as 64 hex characters in PURSER_MASTER_KEY, or read from a
// key file (created with 32 random bytes and mode 0600 on first use). Each sealing draws a fresh
// 96-bit nonce; the provider's name is authenticated as associated data, so a sealed value cannot
// be moved to another provider. ProviderKeyStore keeps one sealed list of keys per provider.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/random.h"
#include "common/result.h"
#include "ledger/records.h"
#include "store/store.h"

namespace purser::gateway {

class Sealer {
 public:
  // From PURSER_MASTER_KEY if `env_value` is set, else from `key_file` (created if missing).
  static Result<Sealer> open(const std::optional<std::string>& env_value,
                             const std::string& key_file, Random& random);
  static Result<Sealer> fromHex(std::string_view hex);

  // nonce (12 bytes) || ciphertext || tag (16 bytes)
  Result<std::string> seal(std::string_view plaintext, std::string_view associated,
                           Random& random) const;
  Result<std::string> unseal(std::string_view sealed, std::string_view associated) const;
  // A key of its own for `purpose` (HMAC-SHA-256 of the purpose under the master key): the same
  // on every replica that shares the master key, and telling nothing of it.
  std::string derive(std::string_view purpose) const;

 private:
  explicit Sealer(std::array<unsigned char, 32> key) : key_(key) {}
  std::array<unsigned char, 32> key_;
};

class ProviderKeyStore {
 public:
  ProviderKeyStore(store::Store& store, Sealer sealer, Random& random, const Clock& clock)
      : store_(store), sealer_(std::move(sealer)), random_(random), clock_(clock) {}

  static const std::vector<store::Migration>& migrations();

  // Seals and stores `keys` for `provider` inside the caller's transaction.
  Result<void> put(store::Tx& tx, const std::string& provider,
                   const std::vector<std::string>& keys);
  // Forgets `provider`'s stored keys inside the caller's transaction; false if none were stored.
  Result<bool> remove(store::Tx& tx, const std::string& provider);
  // The same two as changes for ledger::Records (this store must outlive them).
  ledger::Change replacement(std::string provider, std::vector<std::string> keys);
  ledger::Change removal(std::string provider);
  // Every stored provider's keys, unsealed.
  Result<std::vector<std::pair<std::string, std::vector<std::string>>>> loadAll();

 private:
  store::Store& store_;
  Sealer sealer_;
  Random& random_;
  const Clock& clock_;
};

}  // namespace purser::gateway
